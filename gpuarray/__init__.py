"""gpuarray: a minimal GPU ndarray that moves zero-copy between CUDA libraries.

``DeviceNDArray`` owns (or borrows) device memory, knows its default stream,
and exports ``__cuda_array_interface__`` (v3) and ``__dlpack__`` (DLPack 1.x).
Select the backend with ``GPUARRAY_BACKEND=cuda`` (default) or ``sim`` (the CPU
simulator).  Importing gpuarray never initialises CUDA.
"""

# This module only re-exports the public API; the logic lives in the layers
# described in the design document.  What the first ``to_device`` needs is
# imported here; the modules of the rest of the API load on first use of one
# of their names (``_LAZY``, PEP 562 ``__getattr__``), so ``import gpuarray``
# stays cheap (PERF.md: NumPy's import + 30 ms; tests/package/test_import_cost.py
# lists what it loads).

from typing import TYPE_CHECKING

from . import errors
from ._array import DeviceNDArray, is_device_array
from ._coerce import as_device_source as _as_device_source
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
from ._wire import reduce_array as _reduce_array
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

# IpcHandle.open_array builds arrays, and the memory layer cannot import them:
# the array layer hands it the class here, with the package, not with the
# (lazy) module of the IPC functions.
from .memory import _ipc as _memory_ipc

_memory_ipc._array_factory = DeviceNDArray
del _memory_ipc

if TYPE_CHECKING:  # the lazy names, for type checkers and readers
    from ._context import (
        Context,
        close,
        current_context,
        detect,
        gpus,
        list_devices,
        open_ipc_array,
    )
    from ._hostdev import (
        ManagedNDArray,
        MappedNDArray,
        managed_array,
        mapped,
        mapped_array,
        mapped_array_like,
        pinned_array_like,
    )
    from ._numba_compat import (
        is_supported_version,
        profile_start,
        profile_stop,
        profiling,
        require_context,
    )

# The array class's collaborators above it, joined where the layers meet.
DeviceNDArray._as_source = staticmethod(_as_device_source)
DeviceNDArray._reduce = staticmethod(_reduce_array)

#: Public names whose module loads on first use: name -> module (relative to gpuarray).
_LAZY = {
    **dict.fromkeys(("Context", "close", "current_context", "detect", "gpus", "list_devices",
                     "open_ipc_array"), "._context"),
    **dict.fromkeys(("ManagedNDArray", "MappedNDArray", "managed_array", "mapped", "mapped_array",
                     "mapped_array_like", "pinned_array_like"), "._hostdev"),
    **dict.fromkeys(("is_supported_version", "profile_start", "profile_stop", "profiling",
                     "require_context"), "._numba_compat"),
}


def __getattr__(name: str) -> object:
    # PEP 562: called only for a name not (yet) in the module's namespace.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuarray' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later uses are plain lookups
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
