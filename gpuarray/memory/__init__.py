"""Memory: pointers, memory managers (NBEP 7), page-locked host memory, IPC.

This layer knows sizes and addresses, never shapes.  Every allocation of the
library goes through :func:`allocate` / :func:`host_alloc` / :func:`host_pin`
and therefore through the active memory manager.  Managers: the default one
(``cuMemAlloc`` with deferred frees), :class:`PoolMemoryManager`
(stream-ordered ``cuMemAllocAsync`` pool, ``set_memory_manager("pool")``) and
the plugins of :mod:`gpuarray.memory.plugins` (CuPy, RMM, PyTorch).
Stream-ordered frees never overtake work: see :func:`record_stream` and
:func:`allocation_stream`.
"""

from ._host import mapped_array, pinned, pinned_array
from ._ipc import IpcHandle
from ._managed import managed_alloc
from ._manager import (
    SUPPORTED_INTERFACE_VERSION,
    BaseCUDAMemoryManager,
    DefaultMemoryManager,
    GetIpcHandleMixin,
    HostOnlyCUDAMemoryManager,
    allocate,
    defer_cleanup,
    get_memory_info,
    get_memory_manager,
    host_alloc,
    host_pin,
    set_memory_manager,
)
from ._pointer import ManagedMemory, MappedMemory, MemoryInfo, MemoryPointer, PinnedMemory
from ._pool import PoolMemoryManager
from ._stream_ordered import (
    StreamOrderedMemoryManager,
    StreamOrderedPointer,
    StreamUses,
    allocation_stream,
    current_allocation_stream,
    record_stream,
)

__all__ = [
    "MemoryPointer", "PinnedMemory", "MappedMemory", "ManagedMemory", "MemoryInfo", "IpcHandle",
    "BaseCUDAMemoryManager", "HostOnlyCUDAMemoryManager", "GetIpcHandleMixin",
    "DefaultMemoryManager", "PoolMemoryManager", "StreamOrderedMemoryManager",
    "StreamOrderedPointer", "StreamUses", "set_memory_manager", "get_memory_manager",
    "defer_cleanup", "get_memory_info", "allocate", "allocation_stream",
    "current_allocation_stream", "record_stream", "host_alloc", "host_pin", "pinned_array",
    "mapped_array", "pinned", "managed_alloc", "SUPPORTED_INTERFACE_VERSION",
]
