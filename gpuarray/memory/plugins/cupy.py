"""CuPy's memory pool as gpuarray's device memory manager (NBEP 7 plugin).

``GPUARRAY_MEMORY_MANAGER=cupy`` (or ``=gpuarray.memory.plugins.cupy``, or
``gpuarray.set_memory_manager("cupy")``) makes gpuarray allocate from
CuPy's default memory pool (``cupy.get_default_memory_pool()``), so gpuarray
and CuPy share one cache of device memory.  Importing this module needs CuPy.

Device: each allocation is made inside ``cupy.cuda.Device(ordinal)`` of the
manager's device, so it lands in that device's pool.

Stream correctness.  CuPy's pool is stream-aware: ``malloc`` takes a block
from the free list of CuPy's *current stream*, and a freed block goes back to
the free list of the stream it was allocated on; a block crosses streams only
through ``cudaFree`` / ``cudaMalloc`` when memory runs out, which synchronise
the device.  So a block's next user is always ordered after the work queued
on its allocation stream before the free.  This plugin therefore (1) makes
the allocation with the stream the memory will be used on as CuPy's current
stream (``cupy.cuda.Stream.from_external(home)``; CuPy 13 and older:
``cupy.cuda.ExternalStream``, deprecated since CuPy 14; home from
:func:`gpuarray.memory.allocation_stream`, else the legacy default stream),
and (2) when gpuarray drops the memory, first makes that stream wait on
events of every other stream recorded on it
(:class:`~gpuarray.memory.StreamOrderedMemoryManager`), and only then drops
the CuPy ``MemoryPointer`` -- the block returns to the home stream's list
behind all the work that used it.

IPC works when the pool's memory comes from ``cudaMalloc`` (CuPy's default):
the handle names the pool chunk and carries the offset of the block in it.
"""

from __future__ import annotations

from typing import Any

from ..._device import Device, get_device
from .._manager import GetIpcHandleMixin
from .._pointer import MemoryInfo, MemoryPointer
from .._stream_ordered import StreamOrderedMemoryManager
from . import _require

cupy = _require("cupy", "cupy", "pip install cupy-cuda13x, or the wheel matching your CUDA")


def _cupy_stream(stream: Any, device_id: int) -> Any:
    """``stream`` as a CuPy stream: ``Stream.from_external`` (the CUDA stream protocol)
    where CuPy has it, else ``ExternalStream`` (deprecated in CuPy 14, which warns)."""
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(stream)
    return cupy.cuda.ExternalStream(stream.handle, device_id)

__all__ = ["CuPyMemoryManager"]


class CuPyMemoryManager(GetIpcHandleMixin, StreamOrderedMemoryManager):
    """Device memory from CuPy's memory pool (``cupy.cuda.MemoryPool``).

    Parameters
    ----------
    context : Device, optional
        The device this instance manages (keyword argument).

    Attributes
    ----------
    pool : cupy.cuda.MemoryPool
        The pool used: :meth:`get_pool` (CuPy's default pool unless a
        subclass says otherwise).

    Examples
    --------
    >>> gpuarray.set_memory_manager("cupy")   # doctest: +SKIP
    """

    pool_description = "CuPy's memory pool"

    def get_pool(self) -> Any:
        """The CuPy pool to allocate from; override to use another one.

        Returns
        -------
        cupy.cuda.MemoryPool
        """
        return cupy.get_default_memory_pool()

    @property
    def pool(self) -> Any:
        """The CuPy pool allocations come from."""
        return self.get_pool()

    def memalloc(self, size: int) -> MemoryPointer:
        """Allocate ``size`` bytes from CuPy's pool on this manager's device, in stream order.

        Parameters
        ----------
        size : int

        Returns
        -------
        StreamOrderedPointer
        """
        dev: Device = self.context if self.context is not None else get_device()
        home = self.allocation_stream_for(dev)
        pool = self.get_pool()

        def attempt() -> Any:
            with cupy.cuda.Device(dev.id), _cupy_stream(home, dev.id):
                return pool.malloc(size)

        block = self.allocate_with_retry(dev, size, attempt, (cupy.cuda.memory.OutOfMemoryError,),
                                         "cupy.cuda.MemoryPool.malloc")
        # CuPy frees on the allocation stream (home), which waits for every user.
        return self.owned_pointer(dev, block, int(block.ptr), size, home)

    def get_memory_info(self) -> MemoryInfo:
        """Free and total device memory; free counts the pool's unused cached bytes.

        Returns
        -------
        MemoryInfo
        """
        dev = self.context if self.context is not None else get_device()
        with cupy.cuda.Device(dev.id):
            free, total = cupy.cuda.runtime.memGetInfo()
            return MemoryInfo(int(free) + int(self.get_pool().free_bytes()), int(total))


#: ``GPUARRAY_MEMORY_MANAGER=gpuarray.memory.plugins.cupy`` (or ``=cupy``) selects it.
_gpuarray_memory_manager = CuPyMemoryManager
