"""PyTorch's CUDA caching allocator as gpuarray's device memory manager (NBEP 7 plugin).

``GPUARRAY_MEMORY_MANAGER=torch`` (or ``=gpuarray.memory.plugins.torch``, or
``gpuarray.set_memory_manager("torch")``) makes gpuarray allocate with
``torch.cuda.caching_allocator_alloc`` and free with
``torch.cuda.caching_allocator_delete``, so gpuarray and PyTorch share one
cache of device memory (``torch.cuda.memory_stats()`` counts gpuarray's
blocks too).  Importing this module needs PyTorch built with CUDA.

Device: ``caching_allocator_alloc`` is given the manager's device ordinal
(PyTorch and gpuarray number devices alike: both use the CUDA ordinals of the
process).

Stream correctness.  The caching allocator associates each block with the
stream given at allocation; ``caching_allocator_delete`` returns it to that
stream's pool, from which only allocations on the same stream take it (a
block used on other streams is otherwise protected only by
``Tensor.record_stream``, which this interface does not offer).  This plugin
(1) allocates on the stream the memory will be used on (home, from
:func:`gpuarray.memory.allocation_stream`, else the legacy default stream,
handle 1 -- the raw ``cudaStream_t`` PyTorch accepts as an int), and (2) when
gpuarray drops the memory, first makes home wait on events of every other
stream recorded on it (:class:`~gpuarray.memory.StreamOrderedMemoryManager`),
then calls ``caching_allocator_delete``: the block's next user, on home, is
ordered after all work that used it.

IPC works for blocks of ``cudaMalloc`` segments (PyTorch's default backend;
not with ``expandable_segments`` or the ``cudaMallocAsync`` backend).
"""

from __future__ import annotations

from typing import Any

from ..._device import Device, get_device
from .._manager import GetIpcHandleMixin
from .._pointer import MemoryInfo, MemoryPointer
from .._stream_ordered import StreamOrderedMemoryManager
from . import _require

torch = _require("torch", "torch", "pip install torch (a CUDA build)")
if not hasattr(getattr(torch, "cuda", None), "caching_allocator_alloc"):
    raise ImportError(f"gpuarray.memory.plugins.torch needs torch.cuda.caching_allocator_alloc, "
                      f"which torch {getattr(torch, '__version__', '?')} does not have")

__all__ = ["TorchMemoryManager"]


def _oom_types() -> tuple[type[BaseException], ...]:
    # torch.cuda.OutOfMemoryError (PyTorch >= 1.13) subclasses RuntimeError.
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom,) if isinstance(oom, type) else (RuntimeError,)


class TorchMemoryManager(GetIpcHandleMixin, StreamOrderedMemoryManager):
    """Device memory from PyTorch's CUDA caching allocator.

    Parameters
    ----------
    context : Device, optional
        The device this instance manages (keyword argument).

    Examples
    --------
    >>> gpuarray.set_memory_manager("torch")   # doctest: +SKIP
    """

    pool_description = "PyTorch's caching allocator"

    def memalloc(self, size: int) -> MemoryPointer:
        """Allocate ``size`` bytes with ``torch.cuda.caching_allocator_alloc``, in stream order.

        Parameters
        ----------
        size : int

        Returns
        -------
        StreamOrderedPointer
        """
        dev: Device = self.context if self.context is not None else get_device()
        home = self.allocation_stream_for(dev)

        def attempt() -> int:
            return int(torch.cuda.caching_allocator_alloc(size, device=dev.id, stream=home.handle))

        ptr = self.allocate_with_retry(dev, size, attempt, _oom_types(),
                                       "torch.cuda.caching_allocator_alloc")

        def release(stream: Any, ptr: int = ptr) -> None:
            # The allocator returns the block to the pool of home (its
            # allocation stream), which now waits for every user.
            torch.cuda.caching_allocator_delete(ptr)

        return self.stream_ordered_pointer(dev, ptr, size, home, release)

    def get_memory_info(self) -> MemoryInfo:
        """Free and total device memory; free counts PyTorch's cached, unused bytes.

        Returns
        -------
        MemoryInfo
        """
        dev = self.context if self.context is not None else get_device()
        free, total = torch.cuda.mem_get_info(dev.id)
        cached = torch.cuda.memory_reserved(dev.id) - torch.cuda.memory_allocated(dev.id)
        return MemoryInfo(int(free) + int(cached), int(total))


#: ``GPUARRAY_MEMORY_MANAGER=gpuarray.memory.plugins.torch`` (or ``=torch``) selects it.
_gpuarray_memory_manager = TorchMemoryManager
