"""Managed (unified) memory: ``cuMemAllocManaged`` allocations.

NBEP 7 managers have no managed-memory method (Numba's context allocates it
directly), so this module allocates it from the driver for the device, and
frees it through the active manager's deferred-deallocation queue when the
manager has one (``HostOnlyCUDAMemoryManager`` and its subclasses), else at
once; either way with the device's context current.  On out-of-memory the
queue is flushed and the allocation retried once.
"""

from __future__ import annotations

import functools

from .._device import Device, get_device
from .._driver import get_backend
from ..errors import CudaOutOfMemoryError
from ._default import _fmt_size, _retry_after_flush
from ._manager import get_memory_manager
from ._pointer import ManagedMemory

__all__ = ["managed_alloc"]


def _free(backend, device: Device, ptr: int) -> None:
    with device.activate():
        backend.mem_free(ptr)


def managed_alloc(nbytes: int, attach_global: bool = True,
                  device: Device | None = None) -> ManagedMemory:
    """Allocate managed memory on ``device`` (the current device by default).

    Parameters
    ----------
    nbytes : int
        Bytes; 0 allocates one byte (a valid address for an empty array).
    attach_global : bool, default True
        ``CU_MEM_ATTACH_GLOBAL`` (any stream) or ``CU_MEM_ATTACH_HOST``.
    device : Device, optional

    Returns
    -------
    ManagedMemory

    Raises
    ------
    CudaOutOfMemoryError
        After one flush of deferred frees, stating the size.
    """
    dev = device if device is not None else get_device()
    n = max(int(nbytes), 1)
    b = get_backend()
    mgr = get_memory_manager(dev)
    dealloc = getattr(mgr, "deallocations", None)
    with dev.activate():
        alloc = functools.partial(b.mem_alloc_managed, n, attach_global=bool(attach_global))
        try:
            ptr = alloc()
        except CudaOutOfMemoryError:
            ptr = _retry_after_flush(alloc, dealloc,
                                     f"{_fmt_size(n)} ({n} bytes) of managed memory on device {dev.id}")
    free = functools.partial(_free, b, dev)
    if dealloc is not None and hasattr(dealloc, "add_item"):
        def finalizer(ptr: int = ptr, size: int = n) -> None:
            dealloc.add_item(free, ptr, size)
    else:
        def finalizer(ptr: int = ptr, size: int = n) -> None:
            free(ptr)
    return ManagedMemory(dev, ptr, n, finalizer=finalizer)
