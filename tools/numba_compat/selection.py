"""What run.py runs, what it leaves out and why, and what it expects to fail.

Everything here is a decision, written down with its reason:

* :data:`NUMBA_CUDA_VERSION`, :data:`PINS`: the versions installed into the
  temporary folder (numba-cuda without its dependencies; the packages its
  test helpers import, at versions that work with the project's NumPy).
* :data:`TEST_MODULES` / :data:`EXCLUDED_MODULES`: numba-cuda's test
  modules of the host API, and those left out whole.
* :data:`DESELECTED`: test id -> why it is not run (a kernel launch, a real
  GPU, or a name outside numba.cuda's public host API).
* :data:`DIFFERENCES`: the deliberate differences of docs/migrating.rst
  ("Numba's own host-API tests, run against gpuarray"), by key.
* :data:`EXPECTED_FAILURES`: test id -> the difference key it stems from;
  :data:`MAY_PASS`: the keys whose tests depend on a race.
"""

from __future__ import annotations

NUMBA_CUDA_VERSION = "0.30.4"

#: Installed with --no-deps next to numba-cuda. numba.cuda.testing imports
#: numba (llvmlite), cuda.core and filecheck; cuda-bindings and
#: cuda-pathfinder come from the project's environment.
PINS: dict[str, str] = {
    "numba": "0.68.1",
    "llvmlite": "0.50.0",
    "cuda-core": "1.2.2",
    "filecheck": "1.0.6",
}

#: numba-cuda's test modules run, as <folder>/<module> under numba/cuda/tests.
TEST_MODULES: tuple[str, ...] = (
    "cudadrv/test_array_attr",
    "cudadrv/test_context_stack",
    "cudadrv/test_cuda_array_slicing",
    "cudadrv/test_cuda_auto_context",
    "cudadrv/test_cuda_devicerecord",
    "cudadrv/test_cuda_ndarray",
    "cudadrv/test_deallocations",
    "cudadrv/test_detect",
    "cudadrv/test_emm_plugins",
    "cudadrv/test_events",
    "cudadrv/test_host_alloc",
    "cudadrv/test_pinned",
    "cudadrv/test_profiler",
    "cudadrv/test_select_device",
    "cudadrv/test_streams",
    "cudapy/test_stream_api",
    "cudapy/test_ipc",
)

_COMPILER = "tests Numba's compiler/linker toolchain, not the host-side array API"

#: numba-cuda's cudadrv/ modules not run at all, and why.
EXCLUDED_MODULES: dict[str, str] = {
    "cudadrv/test_inline_ptx": _COMPILER,
    "cudadrv/test_is_fp16": "device capability queries of Numba's compiler (cuda.is_float16_supported)",
    "cudadrv/test_linkable_code": _COMPILER,
    "cudadrv/test_linker": _COMPILER,
    "cudadrv/test_module_callbacks": _COMPILER,
    "cudadrv/test_nvjitlink": _COMPILER,
    "cudadrv/test_nvrtc": _COMPILER,
    "cudadrv/test_nvvm_driver": _COMPILER,
    "cudadrv/test_init": "initialisation of Numba's own driver object (cudadrv.driver, cuInit errors)",
    "cudadrv/test_runtime": "Numba's CUDA runtime wrapper (cudadrv.runtime), not a public host name",
    "cudadrv/test_cuda_driver": (
        "does not import without a GPU (a class decorator asks Numba's own driver for the "
        "compute capability); tests Numba's driver wrappers (cudadrv.driver)"
    ),
    "cudadrv/test_cuda_memory": (
        "every test calls Numba's driver internals (devices.get_context, driver.memcpy/"
        "memset/host_memory_extents)"
    ),
    "cudadrv/test_managed_alloc": (
        "every test uses Numba's driver (driver.cuMemGetInfo, device_memset) or launches a "
        "@cuda.jit kernel"
    ),
    "cudadrv/test_reset_device": "enumerates devices with Numba's driver object (driver.get_device_count)",
}

_KERNEL = "launches a @cuda.jit kernel"
_NUMBA_DRIVER = "calls Numba's own driver (numba.cuda.cudadrv.driver), not a public name"
_DEVICEARRAY = "uses numba.cuda.cudadrv.devicearray internals"
_MOCK_STREAM = (
    "mocks numba.cuda.cudadrv.driver.Stream.synchronize: observes Numba's Stream class, "
    "which gpuarray never calls (would pass or fail vacuously)"
)

#: Test id (or ``file::Class`` for the whole class) -> why it is not run.
#: Ids are relative to numba-cuda's tests/ folder.
DESELECTED: dict[str, str] = {
    "cudadrv/test_context_stack.py::Test3rdPartyContext::test_attached_primary": _NUMBA_DRIVER
    + " (driver.binding, driver.Context)",
    "cudadrv/test_context_stack.py::Test3rdPartyContext::test_attached_non_primary": _NUMBA_DRIVER
    + " (driver.binding.cuCtxCreate)",
    "cudadrv/test_context_stack.py::Test3rdPartyContext::test_cudajit_in_attached_primary_context": _KERNEL,
    "cudadrv/test_context_stack.py::TestContextLeak": _NUMBA_DRIVER
    + " (driver.driver.get_active_context)",
    "cudadrv/test_cuda_array_slicing.py::CudaArraySetting::test_sync": _MOCK_STREAM,
    "cudadrv/test_cuda_array_slicing.py::CudaArraySetting::test_no_sync_default_stream": _MOCK_STREAM,
    "cudadrv/test_cuda_array_slicing.py::CudaArraySetting::test_no_sync_supplied_stream": _MOCK_STREAM,
    "cudadrv/test_cuda_devicerecord.py::TestCudaDeviceRecord": _DEVICEARRAY
    + " (DeviceRecord, from_record_like, auto_device: Numba's own arrays)",
    "cudadrv/test_cuda_devicerecord.py::TestCudaDeviceRecordWithRecord": _DEVICEARRAY
    + " (DeviceRecord, from_record_like, auto_device: Numba's own arrays)",
    "cudadrv/test_cuda_ndarray.py::TestCudaNDArray::test_device_array_interface": _DEVICEARRAY
    + " (verify_cuda_ndarray_interface)",
    "cudadrv/test_cuda_ndarray.py::TestCudaNDArray::test_devicearray_relaxed_strides": _DEVICEARRAY
    + " (constructs Numba's DeviceNDArray)",
    "cudadrv/test_cuda_ndarray.py::TestCudaNDArray::test_issue_8477": _DEVICEARRAY
    + " (constructs Numba's DeviceNDArray)",
    "cudadrv/test_cuda_ndarray.py::TestRecarray::test_recarray": _KERNEL,
    "cudadrv/test_cuda_ndarray.py::TestCoreContiguous": _DEVICEARRAY
    + " (is_contiguous, array_core); two of its tests launch kernels",
    "cudadrv/test_deallocations.py::TestDeallocation::test_max_pending_bytes": (
        "reads the private _max_pending_bytes of Numba's deallocation queue"
    ),
    "cudadrv/test_detect.py::TestCUDAFindLibs::test_cuda_find_lib_errors": _KERNEL
    + " in a child process, to test Numba's CUDA library search",
    "cudadrv/test_events.py::TestCudaEvent::test_event_elapsed_cuda_core_stream": (
        "records events on a cuda.core Stream, which needs a real CUDA driver"
    ),
    "cudadrv/test_host_alloc.py::TestHostAlloc::test_host_alloc_driver": _NUMBA_DRIVER
    + " (driver.device_memset, device_to_host)",
    "cudadrv/test_host_alloc.py::TestHostAlloc::test_host_alloc_pinned": _NUMBA_DRIVER
    + " (driver.device_memset, device_memory_size)",
    "cudadrv/test_host_alloc.py::TestHostAlloc::test_host_alloc_mapped": _NUMBA_DRIVER
    + " (driver.device_memset, device_memory_size)",
    "cudapy/test_ipc.py::TestIpcStaged::test_staged": _NUMBA_DRIVER
    + " in the child process (cuda.devices.get_context, cuda.driver.device_to_host)",
}

#: The deliberate differences, as docs/migrating.rst words them ("Numba's own
#: host-API tests, run against gpuarray").
DIFFERENCES: dict[str, str] = {
    "copies": "Copies Numba refuses are made (ravel of a strided array, transpose of more "
    "than two dimensions, copies between non-contiguous arrays)",
    "messages": "Error messages are gpuarray's (the same exception types)",
    "numba_type": "No Numba typing attributes (_numba_type_)",
    "ipc_handle": "IpcHandle is gpuarray's: .handle is the 64 bytes (no .reserved)",
    "ipc_order": "IPC carries no stream ordering (synchronise before handing a handle over)",
    "context_state": "The Context facade holds no state: ctx.memory_manager is read-only "
    "(set_memory_manager chooses the plugin)",
}

#: Difference keys whose tests fail only when a race goes one way: the IPC
#: tests hand over a handle while to_device's copy may still be queued (the
#: simulator's fresh memory is NaN, so a lost race shows).
MAY_PASS: frozenset[str] = frozenset({"ipc_order"})

_N = "cudadrv/test_cuda_ndarray.py::TestCudaNDArray::"

#: Test id -> the key in DIFFERENCES its failure stems from.
EXPECTED_FAILURES: dict[str, str] = {
    "cudadrv/test_array_attr.py::TestArrayAttr::test_ravel_stride_1d": "copies",
    "cudadrv/test_array_attr.py::TestArrayAttr::test_ravel_stride_c": "copies",
    "cudadrv/test_array_attr.py::TestArrayAttr::test_ravel_stride_f": "copies",
    _N + "test_devicearray_contiguous_copy_device": "copies",
    _N + "test_devicearray_contiguous_slice": "copies",
    "cudadrv/test_cuda_array_slicing.py::CudaArraySetting::test_incompatible_highdim": "messages",
    "cudadrv/test_cuda_array_slicing.py::CudaArraySetting::test_incompatible_shape": "messages",
    "cudadrv/test_cuda_ndarray.py::TestArrayMethod::test_np_array_copy_false": "messages",
    _N + "test_devicearray_view_bad_itemsize": "messages",
    _N + "test_devicearray_contiguous_device_strided": "messages",
    "cudadrv/test_emm_plugins.py::TestBadEMMPluginVersion::test_bad_plugin_version": "messages",
    _N + "test_devicearray_transpose_duplicatedaxis": "messages",
    _N + "test_devicearray_transpose_wrongdim": "copies",
    **{
        _N + f"test_devicearray_typing_order_{case}": "numba_type"
        for case in (
            "2d_c",
            "2d_f",
            "broadcasted",
            "contig_slice_c",
            "contig_slice_f",
            "noncontig_slice_c",
            "noncontig_slice_f",
            "simple_c",
            "simple_f",
        )
    },
    "cudapy/test_ipc.py::TestIpcMemory::test_ipc_handle": "ipc_handle",
    "cudapy/test_ipc.py::TestIpcMemory::test_ipc_handle_serialization": "ipc_handle",
    "cudapy/test_ipc.py::TestIpcMemory::test_ipc_array": "ipc_order",
    "cudapy/test_ipc.py::TestIpcStaged::test_ipc_array": "ipc_order",
    **{
        f"cudadrv/test_emm_plugins.py::TestDeviceOnlyEMMPlugin::test_{name}": "context_state"
        for name in (
            "get_ipc_handle",
            "get_memory_info",
            "initialized_in_context",
            "memalloc",
            "reset",
        )
    },
}
