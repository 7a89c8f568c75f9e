"""Optional memory managers backed by other libraries' allocators (NBEP 7 plugins).

Each module wraps one library's device allocator as a
:class:`~gpuarray.memory.HostOnlyCUDAMemoryManager` subclass (gpuarray keeps
managing page-locked host memory) and exposes ``_gpuarray_memory_manager``:

- ``gpuarray.memory.plugins.cupy`` -- CuPy's memory pool
  (``GPUARRAY_MEMORY_MANAGER=cupy``);
- ``gpuarray.memory.plugins.rmm`` -- RMM's current device resource
  (``GPUARRAY_MEMORY_MANAGER=rmm``);
- ``gpuarray.memory.plugins.torch`` -- PyTorch's caching allocator
  (``GPUARRAY_MEMORY_MANAGER=torch``).

A module imports only when its library is installed; otherwise importing it
raises :exc:`ImportError` saying what to install.  All three pools free in
stream order, so the plugins build on
:class:`~gpuarray.memory.StreamOrderedMemoryManager`: memory is allocated on
the stream it will be used on (see :func:`gpuarray.memory.allocation_stream`)
and, when gpuarray drops it, that stream first waits for every other stream
that used it -- the library's pool then reuses the block only in that
stream's order.  Importing this package imports none of the libraries.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__: list[str] = []


def _require(library: str, plugin: str, install: str) -> ModuleType:
    """Import ``library`` for plugin ``plugin``, or raise an ImportError that says what to do."""
    try:
        return importlib.import_module(library)
    except ImportError as e:
        raise ImportError(
            f"gpuarray.memory.plugins.{plugin} needs {library}, which cannot be imported "
            f"({e}). Install it ({install}), or choose another memory manager, e.g. "
            "GPUARRAY_MEMORY_MANAGER=pool") from e
