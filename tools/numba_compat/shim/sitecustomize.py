"""Map numba.cuda's public host-API names onto gpuarray's, for one test run.

This file is the shim of ``tools/numba_compat/run.py``; it does nothing
unless that tool started the interpreter. run.py puts this folder first on
``PYTHONPATH`` and sets ``NUMBA_COMPAT_SITE`` to the temporary folder it
installed numba-cuda into; Python then imports this module at start-up
(``site`` imports ``sitecustomize``), in the pytest process and in every
process that one spawns (numba's IPC tests open handles in child processes).

What it does, in order:

1. ``site.addsitedir(NUMBA_COMPAT_SITE)``: the temporary install joins
   ``sys.path`` and its ``.pth`` file (numba-cuda's redirector of
   ``numba.cuda`` to ``numba_cuda.numba.cuda``) runs.
2. ``import numba.cuda`` and ``import gpuarray``, then replaces every name of
   :data:`NAME_MAP` on the ``numba.cuda`` module by gpuarray's object. Test
   modules call ``cuda.to_device(...)`` through that module (or import the
   name from it after this ran), so they get gpuarray's function.

Nothing else of Numba is touched: ``numba.cuda.cudadrv.*``, ``cuda.jit`` and
the rest stay Numba's own, and the tests that use them are deselected by
``selection.DESELECTED``, each with its reason. The mapping lives only in
processes run.py started; the original names are kept in :data:`ORIGINALS`.
"""

from __future__ import annotations

import importlib
import os
import site
from collections.abc import Callable
from typing import Any


def _is_available() -> bool:
    import gpuarray

    return gpuarray.device_count() > 0


def _event_elapsed_time(start: Any, end: Any) -> float:
    return float(start.elapsed_time(end))


#: numba.cuda name -> gpuarray attribute name, or a callable taking the
#: gpuarray module and returning the replacement (names gpuarray spells
#: differently; docs/migrating.rst "Name by name" has the same table).
NAME_MAP: dict[str, str | Callable[[Any], Any]] = {
    # creation and transfers
    "to_device": "to_device",
    "device_array": "device_array",
    "device_array_like": "device_array_like",
    "pinned_array": "pinned_array",
    "pinned_array_like": "pinned_array_like",
    "mapped_array": "mapped_array",
    "mapped_array_like": "mapped_array_like",
    "managed_array": "managed_array",
    "pinned": "pinned",
    "mapped": "mapped",
    "open_ipc_array": "open_ipc_array",
    # interop
    "as_cuda_array": "as_cuda_array",
    "is_cuda_array": "is_cuda_array",
    "from_cuda_array_interface": "from_cuda_array_interface",
    # streams and events
    "stream": "stream",
    "default_stream": "default_stream",
    "legacy_default_stream": "legacy_default_stream",
    "per_thread_default_stream": "per_thread_default_stream",
    "external_stream": "external_stream",
    "event": "event",
    "event_elapsed_time": lambda ga: _event_elapsed_time,
    "synchronize": "synchronize",
    # devices and contexts
    "current_context": "current_context",
    "get_current_device": "get_device",
    "select_device": "select_device",
    "list_devices": "list_devices",
    "gpus": "gpus",
    "close": "close",
    "detect": "detect",
    "defer_cleanup": "defer_cleanup",
    "require_context": "require_context",
    "is_available": lambda ga: _is_available,
    "is_supported_version": "is_supported_version",
    # profiler
    "profile_start": "profile_start",
    "profile_stop": "profile_stop",
    "profiling": "profiling",
    # NBEP 7 memory managers
    "set_memory_manager": "set_memory_manager",
    "BaseCUDAMemoryManager": "BaseCUDAMemoryManager",
    "HostOnlyCUDAMemoryManager": "HostOnlyCUDAMemoryManager",
    "GetIpcHandleMixin": "GetIpcHandleMixin",
    "MemoryPointer": "MemoryPointer",
    "MappedMemory": "MappedMemory",
    "PinnedMemory": "PinnedMemory",
    "MemoryInfo": "MemoryInfo",
    "IpcHandle": "IpcHandle",
}

#: numba.cuda's own objects for the names replaced, filled by :func:`install`.
ORIGINALS: dict[str, Any] = {}


def install(cuda: Any, gpuarray: Any) -> None:
    """Replace the :data:`NAME_MAP` names on the module ``cuda``.

    Raises
    ------
    AttributeError
        If ``cuda`` lacks one of the names (numba-cuda renamed it: the map
        must follow) or gpuarray lacks its counterpart.
    """
    for name, target in NAME_MAP.items():
        ORIGINALS[name] = getattr(cuda, name)
        new = target(gpuarray) if callable(target) else getattr(gpuarray, target)
        setattr(cuda, name, new)


def _main() -> None:
    location = os.environ.get("NUMBA_COMPAT_SITE")
    if not location:
        return
    site.addsitedir(location)
    cuda = importlib.import_module("numba.cuda")
    install(cuda, importlib.import_module("gpuarray"))


_main()
