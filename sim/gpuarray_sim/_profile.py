"""The simulated device's profile: one value for every ``CUdevice_attribute``.

One concern: what ``cuDeviceGetAttribute`` answers on the simulator.  Every
attribute of cuda.h's ``CUdevice_attribute`` (the cuda-bindings 13 enum, 161
values) has one row: its cuda.h value, its name (lower case, without the
``CU_DEVICE_ATTRIBUTE_`` prefix: what :meth:`SimBackend.device_attribute`
takes) and its value.  The values are those of an NVIDIA H100 SXM5 80 GB
(compute capability 9.0, 132 SMs, 50 MiB L2) with three kinds of
exception:

- per-device values: the compute capability (``GPUARRAY_SIM_CC``), the PCI
  bus id (``0x10`` + the machine device, so ``CUDA_VISIBLE_DEVICES``
  reordering keeps each device's identity) and the multi-GPU board group id
  (the machine device);
- rows noted ``not simulated``: features an H100 has and the simulator does
  not model (virtual memory management, cluster launch, stream memory
  operations, RDMA, multicast, sparse arrays, fabric handles, IPC
  events...).  They answer 0, so code that asks takes the path of a device
  without the feature instead of calling what the simulator cannot serve;
- everything the simulator checks against a limit (block and grid
  dimensions, shared memory per block) uses the same numbers as the table.

Values are ``int`` or one of the per-device markers :data:`CC_MAJOR`,
:data:`CC_MINOR`, :data:`PCI`, :data:`MACHINE`, resolved by :func:`value`.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ATTRIBUTES", "BY_CODE", "BY_NAME", "value"]

CC_MAJOR = "compute capability major (GPUARRAY_SIM_CC)"
CC_MINOR = "compute capability minor (GPUARRAY_SIM_CC)"
PCI = "0x10 + machine device"
MACHINE = "machine device"

#: ``(cuda.h value, name, value, note)`` of every ``CUdevice_attribute``.
ATTRIBUTES: tuple[tuple[int, str, int | str, str], ...] = (
    (1, 'max_threads_per_block', 1024, ''),
    (2, 'max_block_dim_x', 1024, ''),
    (3, 'max_block_dim_y', 1024, ''),
    (4, 'max_block_dim_z', 64, ''),
    (5, 'max_grid_dim_x', 0x7fffffff, ''),
    (6, 'max_grid_dim_y', 65535, ''),
    (7, 'max_grid_dim_z', 65535, ''),
    (8, 'max_shared_memory_per_block', 49152, ''),
    (9, 'total_constant_memory', 65536, ''),
    (10, 'warp_size', 32, ''),
    (11, 'max_pitch', 0x7fffffff, ''),
    (12, 'max_registers_per_block', 65536, ''),
    (13, 'clock_rate', 0x1e3660, ''),
    (14, 'texture_alignment', 512, ''),
    (15, 'gpu_overlap', 1, ''),
    (16, 'multiprocessor_count', 132, ''),
    (17, 'kernel_exec_timeout', 0, ''),
    (18, 'integrated', 0, ''),
    (19, 'can_map_host_memory', 1, ''),
    (20, 'compute_mode', 0, ''),
    (21, 'maximum_texture1d_width', 0x20000, ''),
    (22, 'maximum_texture2d_width', 0x20000, ''),
    (23, 'maximum_texture2d_height', 65536, ''),
    (24, 'maximum_texture3d_width', 16384, ''),
    (25, 'maximum_texture3d_height', 16384, ''),
    (26, 'maximum_texture3d_depth', 16384, ''),
    (27, 'maximum_texture2d_layered_width', 32768, ''),
    (28, 'maximum_texture2d_layered_height', 32768, ''),
    (29, 'maximum_texture2d_layered_layers', 2048, ''),
    (30, 'surface_alignment', 512, ''),
    (31, 'concurrent_kernels', 1, ''),
    (32, 'ecc_enabled', 1, ''),
    (33, 'pci_bus_id', PCI, ''),
    (34, 'pci_device_id', 0, ''),
    (35, 'tcc_driver', 0, ''),
    (36, 'memory_clock_rate', 0x27f678, ''),
    (37, 'global_memory_bus_width', 5120, ''),
    (38, 'l2_cache_size', 0x3200000, ''),
    (39, 'max_threads_per_multiprocessor', 2048, ''),
    (40, 'async_engine_count', 3, ''),
    (41, 'unified_addressing', 1, ''),
    (42, 'maximum_texture1d_layered_width', 32768, ''),
    (43, 'maximum_texture1d_layered_layers', 2048, ''),
    (44, 'can_tex2d_gather', 1, ''),
    (45, 'maximum_texture2d_gather_width', 32768, ''),
    (46, 'maximum_texture2d_gather_height', 32768, ''),
    (47, 'maximum_texture3d_width_alternate', 8192, ''),
    (48, 'maximum_texture3d_height_alternate', 8192, ''),
    (49, 'maximum_texture3d_depth_alternate', 32768, ''),
    (50, 'pci_domain_id', 0, ''),
    (51, 'texture_pitch_alignment', 32, ''),
    (52, 'maximum_texturecubemap_width', 32768, ''),
    (53, 'maximum_texturecubemap_layered_width', 32768, ''),
    (54, 'maximum_texturecubemap_layered_layers', 2046, ''),
    (55, 'maximum_surface1d_width', 32768, ''),
    (56, 'maximum_surface2d_width', 0x20000, ''),
    (57, 'maximum_surface2d_height', 65536, ''),
    (58, 'maximum_surface3d_width', 16384, ''),
    (59, 'maximum_surface3d_height', 16384, ''),
    (60, 'maximum_surface3d_depth', 16384, ''),
    (61, 'maximum_surface1d_layered_width', 32768, ''),
    (62, 'maximum_surface1d_layered_layers', 2048, ''),
    (63, 'maximum_surface2d_layered_width', 32768, ''),
    (64, 'maximum_surface2d_layered_height', 32768, ''),
    (65, 'maximum_surface2d_layered_layers', 2048, ''),
    (66, 'maximum_surfacecubemap_width', 32768, ''),
    (67, 'maximum_surfacecubemap_layered_width', 32768, ''),
    (68, 'maximum_surfacecubemap_layered_layers', 2046, ''),
    (69, 'maximum_texture1d_linear_width', 0x10000000, ''),
    (70, 'maximum_texture2d_linear_width', 0x20000, ''),
    (71, 'maximum_texture2d_linear_height', 65000, ''),
    (72, 'maximum_texture2d_linear_pitch', 0x1fffe0, ''),
    (73, 'maximum_texture2d_mipmapped_width', 32768, ''),
    (74, 'maximum_texture2d_mipmapped_height', 32768, ''),
    (75, 'compute_capability_major', CC_MAJOR, ''),
    (76, 'compute_capability_minor', CC_MINOR, ''),
    (77, 'maximum_texture1d_mipmapped_width', 32768, ''),
    (78, 'stream_priorities_supported', 1, ''),
    (79, 'global_l1_cache_supported', 1, ''),
    (80, 'local_l1_cache_supported', 1, ''),
    (81, 'max_shared_memory_per_multiprocessor', 0x39000, ''),
    (82, 'max_registers_per_multiprocessor', 65536, ''),
    (83, 'managed_memory', 1, ''),
    (84, 'multi_gpu_board', 0, ''),
    (85, 'multi_gpu_board_group_id', MACHINE, ''),
    (86, 'host_native_atomic_supported', 0, ''),
    (87, 'single_to_double_precision_perf_ratio', 2, ''),
    (88, 'pageable_memory_access', 0, ''),
    (89, 'concurrent_managed_access', 1, ''),
    (90, 'compute_preemption_supported', 1, ''),
    (91, 'can_use_host_pointer_for_registered_mem', 1, ''),
    (92, 'can_use_stream_mem_ops_v1', 0, ''),
    (93, 'can_use_64_bit_stream_mem_ops_v1', 0, ''),
    (94, 'can_use_stream_wait_value_nor_v1', 0, ''),
    (95, 'cooperative_launch', 1, ''),
    (96, 'cooperative_multi_device_launch', 0, ''),
    (97, 'max_shared_memory_per_block_optin', 0x38c00, ''),
    (98, 'can_flush_remote_writes', 0, 'not simulated'),
    (99, 'host_register_supported', 1, ''),
    (100, 'pageable_memory_access_uses_host_page_tables', 0, ''),
    (101, 'direct_managed_mem_access_from_host', 0, ''),
    (102, 'virtual_address_management_supported', 0, 'not simulated'),
    (103, 'handle_type_posix_file_descriptor_supported', 1, 'memory pools (cuMemPoolExportToShareableHandle); cuMemCreate is not simulated'),
    (104, 'handle_type_win32_handle_supported', 0, ''),
    (105, 'handle_type_win32_kmt_handle_supported', 0, ''),
    (106, 'max_blocks_per_multiprocessor', 32, ''),
    (107, 'generic_compression_supported', 0, 'not simulated'),
    (108, 'max_persisting_l2_cache_size', 0x1f00000, ''),
    (109, 'max_access_policy_window_size', 0x7fff000, ''),
    (110, 'gpu_direct_rdma_with_cuda_vmm_supported', 0, 'not simulated'),
    (111, 'reserved_shared_memory_per_block', 1024, ''),
    (112, 'sparse_cuda_array_supported', 0, 'not simulated'),
    (113, 'read_only_host_register_supported', 0, 'not simulated'),
    (114, 'timeline_semaphore_interop_supported', 0, 'not simulated'),
    (115, 'memory_pools_supported', 1, ''),
    (116, 'gpu_direct_rdma_supported', 0, 'not simulated'),
    (117, 'gpu_direct_rdma_flush_writes_options', 0, 'not simulated'),
    (118, 'gpu_direct_rdma_writes_ordering', 0, 'not simulated'),
    (119, 'mempool_supported_handle_types', 1, 'CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR'),
    (120, 'cluster_launch', 0, 'not simulated'),
    (121, 'deferred_mapping_cuda_array_supported', 0, 'not simulated'),
    (122, 'can_use_64_bit_stream_mem_ops', 0, 'not simulated'),
    (123, 'can_use_stream_wait_value_nor', 0, 'not simulated'),
    (124, 'dma_buf_supported', 0, 'not simulated'),
    (125, 'ipc_event_supported', 1, 'cuIpcGetEventHandle, through shared memory'),
    (126, 'mem_sync_domain_count', 4, ''),
    (127, 'tensor_map_access_supported', 0, 'not simulated'),
    (128, 'handle_type_fabric_supported', 0, ''),
    (129, 'unified_function_pointers', 0, 'not simulated'),
    (130, 'numa_config', 0, ''),
    (131, 'numa_id', -1, ''),
    (132, 'multicast_supported', 0, 'not simulated'),
    (133, 'mps_enabled', 0, ''),
    (134, 'host_numa_id', 0, 'the simulated host has NUMA node 0'),
    (135, 'd3d12_cig_supported', 0, ''),
    (136, 'mem_decompress_algorithm_mask', 0, ''),
    (137, 'mem_decompress_maximum_length', 0, ''),
    (138, 'vulkan_cig_supported', 0, ''),
    (139, 'gpu_pci_device_id', 0x233010de, ''),
    (140, 'gpu_pci_subsystem_id', 0x16c110de, ''),
    (141, 'host_numa_virtual_memory_management_supported', 0, ''),
    (142, 'host_numa_memory_pools_supported', 1, ''),
    (143, 'host_numa_multinode_ipc_supported', 0, ''),
    (144, 'host_memory_pools_supported', 1, ''),
    (145, 'host_virtual_memory_management_supported', 0, ''),
    (146, 'host_alloc_dma_buf_supported', 0, ''),
    (147, 'only_partial_host_native_atomic_supported', 0, ''),
    (148, 'atomic_reduction_supported', 0, ''),
    (149, 'locality_domain_count', 1, ''),
    (150, 'max_oversized_shared_memory_per_block', 0, ''),
    (151, 'd3d12_cig_streams_supported', 0, ''),
    (152, 'dma_buf_mmap_supported', 0, ''),
    (153, 'logical_endpoint_unicast_supported', 0, ''),
    (154, 'logical_endpoint_multicast_supported', 0, ''),
    (155, 'logical_endpoint_counted_ops_supported', 0, ''),
    (156, 'logical_endpoint_unicast_access_on_owner_device_supported', 0, ''),
    (157, 'locality_domain_multiprocessor_count', 132, ''),
    (158, 'logical_endpoint_supported_handle_types', 0, ''),
    (159, 'vulkan_cig_streams_supported', 0, ''),
    (160, 'tensor_map_large_tensor_min_size', 0, ''),
    (161, 'gpu_direct_rdma_with_localized_memory_supported', 0, ''),
)

#: name -> row, cuda.h value -> row.
BY_NAME = {row[1]: row for row in ATTRIBUTES}
BY_CODE = {row[0]: row for row in ATTRIBUTES}


def value(name: str, cc: Sequence[int], machine_device: int) -> int:
    """The value of attribute ``name`` on a device of compute capability ``cc``.

    Parameters
    ----------
    name : str
        A name of :data:`ATTRIBUTES` (``"multiprocessor_count"``).
    cc : (int, int)
        The device's compute capability.
    machine_device : int
        The device's index in the simulated machine (before
        ``CUDA_VISIBLE_DEVICES``).

    Returns
    -------
    int

    Raises
    ------
    KeyError
        ``name`` is not a device attribute.
    """
    v = BY_NAME[name][2]
    if v is CC_MAJOR:
        return int(cc[0])
    if v is CC_MINOR:
        return int(cc[1])
    if v is PCI:
        return 0x10 + machine_device
    if v is MACHINE:
        return machine_device
    assert isinstance(v, int)
    return v
