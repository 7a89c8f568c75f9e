"""CUDA in a process forked after its parent initialised CUDA.

One concern: knowing whether this process is such a child, and the error
gpuarray raises there.  A CUDA driver cannot be used in a child that
``fork()`` made after the parent called ``cuInit``: the parent's contexts,
memory mappings and driver threads do not carry over, and every driver call
of the child -- ``cuInit`` included -- returns ``CUDA_ERROR_NOT_INITIALIZED``
(observed on H100 drivers: triton-lang/triton pull request 10443, "a process
that was fork()ed after its parent already initialized CUDA gets
CUDA_ERROR_NOT_INITIALIZED (rc=3) from cuInit ... cuDeviceGetCount would
itself return rc=3"; inducer/pycuda issue 137, "cuInit failed:
initialization error" in the child).  numba-cuda turns that code into
"CUDA initialized before forking"; PyTorch refuses with "Cannot re-initialize
CUDA in forked subprocess".

gpuarray does the same on every backend: the device layer calls
:func:`note_init` once a backend initialised; in a child forked after that,
:func:`forked_from` is the parent's pid and a driver call's
``CUDA_ERROR_NOT_INITIALIZED`` becomes :class:`~gpuarray.errors.CudaForkError`
(:func:`error`), which says what to do instead.  A parent may have
initialised CUDA through another library (cuda.bindings, PyTorch): in any
child of ``os.fork`` (:func:`fork_parent`) the driver's
``CUDA_ERROR_NOT_INITIALIZED`` -- ``cuInit``'s included -- is that error
too.  The simulator marks its own
initialised instances the same way (``sim/_core.py``), so behind the
stand-in driver the child's calls return the driver's code.  A child of a
parent that never initialised CUDA is an ordinary process: CUDA works there.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from ..errors import CudaForkError

__all__ = ["note_init", "forked_from", "fork_parent", "error", "track", "NOT_INITIALIZED"]

#: ``CUDA_ERROR_NOT_INITIALIZED``.
NOT_INITIALIZED = 3

_init_pid: int | None = None  # the pid that initialised CUDA through gpuarray
_forked_from: int | None = None  # in a child forked after that: the parent's pid
_fork_parent: int | None = None  # in any child of os.fork (whatever its parent did): the parent's pid
#: Driver implementations initialised in this process (``track``).
_tracked: weakref.WeakSet[Any] = weakref.WeakSet()


def note_init() -> None:
    """Record that this process initialised CUDA (a backend's ``init`` succeeded)."""
    global _init_pid
    if _init_pid is None and _forked_from is None:
        _init_pid = os.getpid()


def forked_from() -> int | None:
    """The parent's pid when this process was forked after it initialised CUDA, else None."""
    return _forked_from


def fork_parent() -> int | None:
    """The parent's pid in a process made by ``os.fork`` (multiprocessing's "fork"), else None.

    Whether the parent initialised CUDA is not known here: it may have done so
    through another library (cuda.bindings, PyTorch, CuPy).  A driver that
    answers such a child's ``cuInit`` with ``CUDA_ERROR_NOT_INITIALIZED`` says
    it did -- a process that may use CUDA initialises, or fails with another
    code (no device, no driver) -- so the cuda backend raises
    :class:`~gpuarray.errors.CudaForkError` there too.
    """
    return _fork_parent


def error(call: str, detail: str = "") -> CudaForkError:
    """The error of driver call ``call`` in a process forked after CUDA was initialised."""
    parent = _forked_from if _forked_from is not None else _fork_parent
    return CudaForkError(call, parent if parent is not None else -1, detail)


def track(driver: Any) -> None:
    """Mark ``driver`` as initialised here: in a child forked later, its ``_forked_from``
    attribute becomes this process's pid (the simulator refuses every call then)."""
    _tracked.add(driver)
    driver._init_pid = os.getpid()


def _after_fork_in_child() -> None:
    global _init_pid, _forked_from, _fork_parent
    _fork_parent = os.getppid()
    if _init_pid is not None:
        _forked_from = _init_pid
        _init_pid = None
    for d in list(_tracked):
        d._forked_from = d._init_pid


if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
