"""Every public import path that existed before the restructuring of issue 31 still works.

The names are frozen here from gpuarray 0.1.0 at the start of that work
(commit 9a4bb8b): a rename or a move that drops one fails this test, while
new names may be added freely (test_docs checks that each has a docstring
and is documented).
"""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "gpuarray": """
        BaseCUDAMemoryManager Context CudaError CudaOutOfMemoryError CudaUnavailableError Device
        DeviceNDArray Event GetIpcHandleMixin HostOnlyCUDAMemoryManager IpcHandle ManagedMemory
        ManagedNDArray MappedMemory MappedNDArray MemoryInfo MemoryPointer NvrtcError PinnedMemory
        Stream StreamOrderError __version__ as_cuda_array asarray close current_context
        default_stream defer_cleanup detect device_array device_array_like device_count empty
        empty_like errors event external_stream from_cuda_array_interface from_dlpack full
        full_like get_device get_memory_info gpus is_cuda_array is_device_array
        is_supported_version legacy_default_stream list_devices managed_array mapped mapped_array
        mapped_array_like ones ones_like open_ipc_array per_thread_default_stream pinned
        pinned_array pinned_array_like profile_start profile_stop profiling require_context
        select_device set_memory_manager stream synchronize to_device zeros zeros_like""",
    "gpuarray.errors": """
        CUDA_ERROR_NAMES CudaError CudaOutOfMemoryError CudaUnavailableError NvrtcError
        NvrtcVersionError StreamOrderError""",
    "gpuarray.memory": """
        BaseCUDAMemoryManager DefaultMemoryManager GetIpcHandleMixin HostOnlyCUDAMemoryManager
        IpcHandle ManagedMemory MappedMemory MemoryInfo MemoryPointer PinnedMemory PoolMemoryManager
        SUPPORTED_INTERFACE_VERSION StreamOrderedMemoryManager StreamOrderedPointer StreamUses
        allocate allocation_stream current_allocation_stream defer_cleanup get_memory_info
        get_memory_manager host_alloc host_pin managed_alloc mapped_array pinned pinned_array
        record_stream set_memory_manager""",
    "gpuarray.dask": "dask_setup register",
    "gpuarray.interop": "as_cuda_array from_cuda_array_interface from_dlpack is_cuda_array",
}
#: Submodules the docs name.
SUBMODULES = ["gpuarray.memory.plugins", "gpuarray.__main__"]
#: The memory-manager plugins (GPUARRAY_MEMORY_MANAGER=gpuarray.memory.plugins.NAME): each
#: imports where its library does, else says which library is missing.
PLUGINS = {"cupy": "cupy", "rmm": "rmm", "torch": "torch"}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_name_of_before_is_still_importable_and_listed(module):
    mod = importlib.import_module(module)
    missing = [n for n in PUBLIC[module].split() if not hasattr(mod, n)]
    assert not missing, f"{module} lost {missing}"
    unlisted = [n for n in PUBLIC[module].split() if n not in mod.__all__]
    assert not unlisted, f"{module}.__all__ lost {unlisted}"


@pytest.mark.parametrize("module", SUBMODULES)
def test_documented_submodules_import(module):
    importlib.import_module(module)


@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_memory_plugins_import_or_name_their_library(name):
    module = f"gpuarray.memory.plugins.{name}"
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        assert module in str(e) and f"needs {PLUGINS[name]}" in str(e), str(e)
    else:
        assert hasattr(mod, "_gpuarray_memory_manager")


def test_every_name_of_all_is_importable_now():
    for module in PUBLIC:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            assert hasattr(mod, name), f"{module}.__all__ names {name!r}, which it does not define"
