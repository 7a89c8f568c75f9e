"""The pool manager: ``cuMemAllocAsync`` / ``cuMemFreeAsync`` on the device's default pool.

Its frees are stream-ordered: they never overtake work on the memory (the
model, the records of the streams that use an allocation, and the manager
base it builds on are in ``_stream_ordered.py``).
"""

from __future__ import annotations

from typing import Any

from .._device import Device, get_device
from .._driver import get_backend
from .._stream import Stream
from ..errors import CudaOutOfMemoryError
from . import _pool_held
from ._pointer import MemoryInfo, MemoryPointer
from ._stream_ordered import StreamOrderedMemoryManager

__all__ = ["PoolMemoryManager"]


class PoolMemoryManager(StreamOrderedMemoryManager):
    """Stream-ordered pool: ``cuMemAllocAsync`` / ``cuMemFreeAsync`` on the device's default pool.

    Select it with ``gpuarray.set_memory_manager("pool")`` or
    ``GPUARRAY_MEMORY_MANAGER=pool``.  ``initialize()`` raises the default
    pool's release threshold (``CU_MEMPOOL_ATTR_RELEASE_THRESHOLD``) to
    :attr:`release_threshold`, so freed memory stays in the pool and is
    reused instead of going back to the driver at each synchronisation.  The
    default pool is the process's: other users of ``cudaMallocAsync`` on the
    device see the same threshold.

    Allocations are made on the stream published with
    :func:`allocation_stream` (else the legacy default stream) and freed on
    it, after it waited for every stream recorded on the memory (see
    :mod:`gpuarray.memory._stream_ordered`): a free never overtakes work.
    ``defer_cleanup()`` holds frees back until the outermost block exits.
    Memory from the pool cannot be shared through IPC
    (``cuIpcGetMemHandle`` refuses pool memory).  ``get_memory_info()``
    reports the driver's numbers: memory kept by the pool counts as used.

    Parameters
    ----------
    context : Device, optional
        The device this instance manages (keyword argument).

    Examples
    --------
    >>> gpuarray.set_memory_manager("pool")   # doctest: +SKIP
    """

    #: Bytes the default pool keeps reserved when memory is freed (all of it).
    release_threshold: int = 2**64 - 1
    pool_description = "its stream-ordered pool"

    def __init__(self, *args: Any, context: Device | None = None, **kwargs: Any) -> None:
        super().__init__(*args, context=context, **kwargs)
        self._ready = False

    def initialize(self) -> None:
        """Raise the release threshold of the device's default pool (once).

        Raises
        ------
        RuntimeError
            If the device has no memory pools.
        """
        super().initialize()
        if self._ready or self.context is None:
            return
        b = get_backend()
        dev = self.context.id
        if not b.device_attribute("memory_pools_supported", dev):
            raise RuntimeError(f"device {dev} does not support stream-ordered memory pools "
                               "(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0): use the "
                               "default memory manager")
        b.mempool_set_release_threshold(dev, self.release_threshold)
        self._ready = True

    def memalloc(self, size: int) -> MemoryPointer:
        """Allocate ``size`` bytes from the pool, in stream order.

        On out-of-memory, held frees are released and the device synchronised
        (so that pending stream-ordered frees complete), then the allocation
        is retried once.

        Parameters
        ----------
        size : int

        Returns
        -------
        StreamOrderedPointer

        Raises
        ------
        CudaOutOfMemoryError
            Stating the size asked for and the device.
        """
        if _pool_held._held:  # frees held for another library's capture, maybe ended
            _pool_held.retry()
        dev = self.context if self.context is not None else get_device()
        b = get_backend()
        home = self.allocation_stream_for(dev)
        ptr = self.allocate_with_retry(dev, size, lambda: b.mem_alloc_async(size, home.handle),
                                       (CudaOutOfMemoryError,), "cuMemAllocAsync")

        def release(stream: Stream, b=b, ptr=ptr) -> None:
            b.mem_free_async(ptr, stream.handle)

        return self.stream_ordered_pointer(dev, ptr, size, home, release)

    def get_memory_info(self) -> MemoryInfo:
        """Free and total memory of the device (pool-held memory counts as used).

        Returns
        -------
        MemoryInfo
        """
        return MemoryInfo(*get_backend().mem_get_info())

    def get_ipc_handle(self, memory: MemoryPointer) -> Any:
        """Refuse: CUDA cannot share pool memory through ``cuIpcGetMemHandle``.

        Parameters
        ----------
        memory : MemoryPointer

        Raises
        ------
        ValueError
            Always.
        """
        raise ValueError(
            "memory from the stream-ordered pool manager (cuMemAllocAsync) cannot be shared "
            "through IPC: cuIpcGetMemHandle only accepts cuMemAlloc memory. Allocate the array "
            "to share under the default memory manager")


#: ``GPUARRAY_MEMORY_MANAGER=gpuarray.memory._pool`` (or ``=pool``) selects it.
_gpuarray_memory_manager = PoolMemoryManager
