"""gpuarray: a minimal GPU ndarray that moves zero-copy between CUDA libraries.

``DeviceNDArray`` owns (or borrows) device memory, knows its default stream,
and exports ``__cuda_array_interface__`` (v3) and ``__dlpack__`` (DLPack 1.x).
Select the backend with ``GPUARRAY_BACKEND=cuda`` (default) or ``sim`` (the CPU
simulator).  Importing gpuarray never initialises CUDA.
"""

# This module only re-exports the public API; the logic lives in the layers
# described in the design document.

from . import (
    _wire,  # noqa: F401  (installs DeviceNDArray's pickling: _array._REDUCE)
    errors,
)
from ._array import DeviceNDArray, is_device_array
from ._context import Context, close, current_context, detect, gpus, list_devices, open_ipc_array
from ._creation import (
    asarray,
    device_array,
    device_array_like,
    empty,
    empty_like,
    full,
    full_like,
    ones,
    ones_like,
    to_device,
    zeros,
    zeros_like,
)
from ._device import Device, device_count, get_device, select_device
from ._graph import Graph
from ._hostdev import (
    ManagedNDArray,
    MappedNDArray,
    managed_array,
    mapped,
    mapped_array,
    mapped_array_like,
    pinned_array_like,
)
from ._stream import (
    Event,
    Stream,
    default_stream,
    event,
    external_stream,
    legacy_default_stream,
    per_thread_default_stream,
    stream,
    synchronize,
)
from ._support import (
    is_supported_version,
    profile_start,
    profile_stop,
    profiling,
    require_context,
)
from .errors import (
    CudaError,
    CudaForkError,
    CudaOutOfMemoryError,
    CudaUnavailableError,
    NvrtcError,
    StreamCaptureError,
    StreamOrderError,
)
from .interop import _dlpack_table  # noqa: F401  (publishes DeviceNDArray.__dlpack_c_exchange_api__)
from .interop._cai import as_cuda_array, from_cuda_array_interface, is_cuda_array
from .interop._dlpack import from_dlpack
from .memory import (
    BaseCUDAMemoryManager,
    GetIpcHandleMixin,
    HostOnlyCUDAMemoryManager,
    IpcHandle,
    ManagedMemory,
    MappedMemory,
    MemoryInfo,
    MemoryPointer,
    PinnedMemory,
    defer_cleanup,
    get_memory_info,
    pinned,
    pinned_array,
    set_memory_manager,
)

__version__ = "0.1.0"

__all__ = [
    "DeviceNDArray", "is_device_array",
    "to_device", "device_array", "device_array_like", "empty", "zeros", "ones", "full",
    "empty_like", "zeros_like", "ones_like", "full_like", "asarray",
    "pinned_array", "mapped_array", "pinned",
    "managed_array", "mapped", "mapped_array_like", "pinned_array_like",
    "MappedNDArray", "ManagedNDArray",
    "as_cuda_array", "from_cuda_array_interface", "is_cuda_array", "from_dlpack",
    "Stream", "Event", "Graph", "stream", "default_stream", "legacy_default_stream",
    "per_thread_default_stream", "external_stream", "event", "synchronize",
    "Device", "get_device", "select_device", "device_count",
    "Context", "current_context", "gpus", "list_devices", "detect", "close", "open_ipc_array",
    "require_context", "is_supported_version", "profile_start", "profile_stop", "profiling",
    "MemoryPointer", "PinnedMemory", "MappedMemory", "ManagedMemory", "MemoryInfo", "IpcHandle",
    "BaseCUDAMemoryManager", "HostOnlyCUDAMemoryManager", "GetIpcHandleMixin",
    "set_memory_manager", "defer_cleanup", "get_memory_info",
    "CudaError", "CudaForkError", "CudaOutOfMemoryError", "CudaUnavailableError", "NvrtcError",
    "StreamOrderError", "StreamCaptureError",
    "errors", "__version__",
]
