"""The simulator backend at the driver level: is it a simulator worth trusting?

Each test states a CUDA behaviour and checks the simulator shows it: stale
data without synchronisation, bounds and use-after-free errors, out of memory,
the legacy / per-thread / blocking / non-blocking stream rules, events, and
the race detector.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
from gpuarray_sim import SimBackend
from gpuarray_sim import kernels as sim_kernels

from gpuarray.errors import CudaError, CudaOutOfMemoryError, StreamOrderError

LEGACY, PER_THREAD = 1, 2


def _backend(**kw) -> SimBackend:
    b = SimBackend(**kw)
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    return b


def _pinned(b, n, dtype=np.uint8):
    ptr = b.mem_host_alloc(n * np.dtype(dtype).itemsize)
    arr = np.ctypeslib.as_array((ctypes.c_uint8 * (n * np.dtype(dtype).itemsize)).from_address(ptr))
    return ptr, arr.view(dtype)


def _read(b, ptr, n, dtype=np.uint8):
    out = np.zeros(n, dtype)
    b.memcpy_dtoh_async(out.ctypes.data, ptr, out.nbytes, LEGACY)  # pageable: synchronous
    return out


# ------------------------------------------------------------- asynchrony
def test_async_copy_into_pinned_memory_is_stale_until_sync():
    b = _backend()
    d = b.mem_alloc(16)
    b.memset_d8_async(d, 7, 16, LEGACY)
    ptr, host = _pinned(b, 16)
    host[:] = 0
    s = b.stream_create()
    b.memcpy_dtoh_async(ptr, d, 16, s)
    # Undefined until the copy completes: the simulator shows 0xFF, never the result.
    assert (host == 0xFF).all(), "an async copy into pinned memory was readable without a sync"
    b.stream_synchronize(s)
    assert (host == 7).all()


def test_async_copy_from_pinned_memory_reads_the_source_when_it_runs():
    b = _backend()
    d = b.mem_alloc(4)
    ptr, host = _pinned(b, 4)
    host[:] = 1
    s = b.stream_create()
    b.memcpy_htod_async(d, ptr, 4, s)
    host[:] = 2  # changed before the queued copy ran: a GPU may copy either
    b.stream_synchronize(s)
    assert (_read(b, d, 4) == 2).all()


def test_pageable_host_to_device_copy_snapshots_the_source_at_the_call():
    b = _backend()
    d = b.mem_alloc(4)
    src = np.full(4, 3, np.uint8)
    b.memcpy_htod_async(d, src.ctypes.data, 4, LEGACY)
    src[:] = 9
    assert (_read(b, d, 4) == 3).all()


def test_pageable_device_to_host_copy_is_complete_on_return():
    b = _backend()
    d = b.mem_alloc(8)
    s = b.stream_create(non_blocking=True)
    b.memset_d32_async(d, 0xDEADBEEF, 2, s)
    out = np.zeros(2, np.uint32)
    b.memcpy_dtoh_async(out.ctypes.data, d, 8, s)
    assert (out == 0xDEADBEEF).all()


def test_fresh_allocations_hold_garbage_not_zeros():
    b = _backend()
    d = b.mem_alloc(8)
    assert (_read(b, d, 8) == 0xFF).all()


def test_queue_limit_runs_work_without_a_host_sync():
    b = _backend(max_queue=4)
    d = b.mem_alloc(4)
    ptr, host = _pinned(b, 4)
    host[:] = 0
    s = b.stream_create()
    b.memset_d8_async(d, 5, 4, s)
    b.memcpy_dtoh_async(ptr, d, 4, s)
    for _ in range(8):
        b.event_record(b.event_create(), s)
    assert (host == 5).all()


# ----------------------------------------------------------------- errors
def test_out_of_bounds_copy_raises_invalid_value():
    # cuda.h documents SUCCESS, DEINITIALIZED, NOT_INITIALIZED, INVALID_CONTEXT,
    # INVALID_VALUE (and INVALID_HANDLE for the Async forms) for copies: a range
    # past an allocation's end is INVALID_VALUE, never the sticky 700 (issue 29).
    b = _backend()
    d = b.mem_alloc(64)
    out = np.zeros(128, np.uint8)
    with pytest.raises(CudaError) as e:
        b.memcpy_dtoh_async(out.ctypes.data, d, 128, LEGACY)
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert e.value.call == "cuMemcpyDtoHAsync"
    assert "past the end" in str(e.value)


def test_use_after_free_raises():
    b = _backend()
    d = b.mem_alloc(64)
    b.mem_free(d)
    with pytest.raises(CudaError, match="use after free") as e:
        b.memset_d8_async(d, 0, 64, LEGACY)
    assert e.value.code == 1  # CUDA_ERROR_INVALID_VALUE: refused at the call, as cuda.h documents
    with pytest.raises(CudaError, match="already freed"):
        b.mem_free(d)


def test_device_addresses_are_never_reused():
    b = _backend()
    seen = set()
    for _ in range(50):
        d = b.mem_alloc(1024)
        assert d not in seen
        seen.add(d)
        b.mem_free(d)


def test_host_pointer_that_is_a_device_address_is_refused():
    b = _backend()
    d = b.mem_alloc(8)
    with pytest.raises(CudaError) as e:
        b.memcpy_htod_async(d, d, 8, LEGACY)
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE"


def test_allocating_more_than_the_configured_memory_raises_out_of_memory():
    b = _backend(memory=1 << 20)
    with pytest.raises(CudaOutOfMemoryError) as e:
        b.mem_alloc(2 << 20)
    assert isinstance(e.value, MemoryError)
    d = b.mem_alloc(1 << 20)  # exactly the capacity fits
    assert b.mem_get_info() == (0, 1 << 20)
    b.mem_free(d)
    assert b.mem_get_info() == (1 << 20, 1 << 20)


def test_calls_need_a_current_context():
    b = SimBackend()
    with pytest.raises(CudaError) as e:
        b.mem_alloc(8)
    assert e.value.name == "CUDA_ERROR_INVALID_CONTEXT"


def test_contexts_are_per_thread():
    b = _backend()
    seen = []
    t = threading.Thread(target=lambda: seen.append(b.ctx_get_current()))
    t.start()
    t.join()
    assert seen == [0] and b.ctx_get_current() != 0


def test_memset_alignment_and_memcpy_2d():
    b = _backend()
    d = b.mem_alloc(64)
    with pytest.raises(CudaError, match="aligned"):
        b.memset_d32_async(d + 2, 0, 1, LEGACY)
    src = np.arange(24, dtype=np.uint8).reshape(4, 6)
    b.memset_d8_async(d, 0, 64, LEGACY)
    # rows of 4 bytes from a host pitch of 6 into a device pitch of 8
    b.memcpy_2d_async(d, 8, True, src.ctypes.data, 6, False, 4, 4, LEGACY)
    got = _read(b, d, 32).reshape(4, 8)
    np.testing.assert_array_equal(got[:, :4], src[:, :4])
    assert not got[:, 4:].any()


# -------------------------------------------------------- stream semantics
def test_legacy_stream_waits_for_blocking_streams():
    b = _backend()
    d = b.mem_alloc(4)
    s = b.stream_create(non_blocking=False)
    b.memset_d8_async(d, 1, 4, s)
    assert (_read(b, d, 4) == 1).all()  # no event, no race: implicit synchronisation


def test_blocking_stream_waits_for_the_legacy_stream():
    b = _backend()
    d = b.mem_alloc(4)
    ptr, host = _pinned(b, 4)
    host[:] = 0
    b.memset_d8_async(d, 6, 4, LEGACY)
    s = b.stream_create(non_blocking=False)
    b.memcpy_dtoh_async(ptr, d, 4, s)
    b.stream_synchronize(s)
    assert (host == 6).all()


def test_non_blocking_stream_is_not_ordered_with_legacy_stream():
    b = _backend(racecheck="0")
    d = b.mem_alloc(4)
    b.memset_d8_async(d, 0, 4, LEGACY)
    b.ctx_synchronize()
    s = b.stream_create(non_blocking=True)
    b.memset_d8_async(d, 9, 4, s)
    assert (_read(b, d, 4) == 0).all()  # stale: nothing ordered the legacy read after s
    b.stream_synchronize(s)
    assert (_read(b, d, 4) == 9).all()


def test_race_detector_reports_unordered_non_blocking_access():
    b = _backend()
    d = b.mem_alloc(4)
    s = b.stream_create(non_blocking=True)
    b.memset_d8_async(d, 9, 4, s)
    with pytest.raises(StreamOrderError) as e:
        _read(b, d, 4)
    msg = str(e.value)
    assert "cuMemsetD8Async" in msg and "cuMemcpyDtoHAsync" in msg
    assert "non-blocking" in msg and "legacy default stream" in msg


def test_event_wait_orders_streams_and_silences_the_race_detector():
    b = _backend()
    d = b.mem_alloc(4)
    s = b.stream_create(non_blocking=True)
    b.memset_d8_async(d, 4, 4, s)
    ev = b.event_create(timing=False)
    b.event_record(ev, s)
    b.stream_wait_event(LEGACY, ev)
    assert (_read(b, d, 4) == 4).all()


def test_event_snapshot_is_taken_at_the_wait_call():
    b = _backend()
    d = b.mem_alloc(4)
    s = b.stream_create(non_blocking=True)
    t = b.stream_create(non_blocking=True)
    ev = b.event_create(timing=False)
    b.event_record(ev, s)
    b.stream_wait_event(t, ev)       # waits for nothing written yet
    b.memset_d8_async(d, 1, 4, s)    # after the record: not covered by the wait
    with pytest.raises(StreamOrderError):
        b.memset_d8_async(d, 2, 4, t)


def test_host_synchronize_orders_later_work_on_any_stream():
    b = _backend()
    d = b.mem_alloc(4)
    s = b.stream_create(non_blocking=True)
    t = b.stream_create(non_blocking=True)
    b.memset_d8_async(d, 1, 4, s)
    b.stream_synchronize(s)
    b.memset_d8_async(d, 2, 4, t)   # ordered by the host sync: no race
    b.stream_synchronize(t)
    assert (_read(b, d, 4) == 2).all()


def test_reads_from_two_streams_do_not_race():
    b = _backend()
    d = b.mem_alloc(4)
    b.memset_d8_async(d, 3, 4, LEGACY)
    b.ctx_synchronize()
    s, t = b.stream_create(True), b.stream_create(True)
    o1, o2 = np.zeros(4, np.uint8), np.zeros(4, np.uint8)
    b.memcpy_dtoh_async(o1.ctypes.data, d, 4, s)
    b.memcpy_dtoh_async(o2.ctypes.data, d, 4, t)
    assert (o1 == 3).all() and (o2 == 3).all()


def test_disjoint_ranges_do_not_race():
    b = _backend()
    d = b.mem_alloc(8)
    s, t = b.stream_create(True), b.stream_create(True)
    b.memset_d8_async(d, 1, 4, s)
    b.memset_d8_async(d + 4, 2, 4, t)
    b.ctx_synchronize()
    assert list(_read(b, d, 8)) == [1] * 4 + [2] * 4


def test_per_thread_default_stream_syncs_with_legacy_but_not_non_blocking():
    b = _backend()
    d = b.mem_alloc(4)
    b.memset_d8_async(d, 1, 4, PER_THREAD)
    assert (_read(b, d, 4) == 1).all()  # legacy waits for the per-thread stream
    s = b.stream_create(non_blocking=True)
    b.memset_d8_async(d, 2, 4, s)
    with pytest.raises(StreamOrderError):
        b.memset_d8_async(d, 3, 4, PER_THREAD)


def test_per_thread_default_streams_differ_between_threads():
    b = _backend()
    d = b.mem_alloc(8)
    ctx = b.ctx_get_current()
    b.memset_d8_async(d, 1, 8, PER_THREAD)
    errors = []

    def other():
        b.ctx_set_current(ctx)
        try:
            b.memset_d8_async(d, 2, 8, PER_THREAD)
        except StreamOrderError as e:
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors, "two threads' per-thread default streams were treated as one stream"


def test_destroyed_stream_work_still_completes():
    b = _backend()
    d = b.mem_alloc(4)
    s = b.stream_create()
    b.memset_d8_async(d, 8, 4, s)
    b.stream_destroy(s)
    with pytest.raises(CudaError) as e:
        b.stream_synchronize(s)
    assert e.value.name == "CUDA_ERROR_INVALID_HANDLE"
    b.ctx_synchronize()
    assert (_read(b, d, 4) == 8).all()


def test_events_query_elapsed_and_unrecorded_waits():
    b = _backend()
    s = b.stream_create()
    never = b.event_create()
    b.stream_wait_event(s, never)  # waiting on a never-recorded event is a no-op
    assert b.event_query(never)
    start, end = b.event_create(), b.event_create()
    b.event_record(start, s)
    b.event_record(end, s)
    with pytest.raises(CudaError) as e:
        b.event_elapsed_time(start, end)
    assert e.value.name == "CUDA_ERROR_NOT_READY"
    b.event_synchronize(end)
    assert b.event_elapsed_time(start, end) >= 0.0
    untimed = b.event_create(timing=False)
    b.event_record(untimed, s)
    b.stream_synchronize(s)
    with pytest.raises(CudaError):
        b.event_elapsed_time(start, untimed)


def test_stream_ordered_allocation_and_free():
    b = _backend()
    s, t = b.stream_create(True), b.stream_create(True)
    d = b.mem_alloc_async(16, s)
    with pytest.raises(StreamOrderError):
        b.memset_d8_async(d, 0, 16, t)   # used on t before the allocation is ordered
    b.memset_d8_async(d, 0, 16, s)
    b.mem_free_async(d, s)
    b.memset_d8_async(d, 1, 16, s)       # queued after the free: fails when it runs
    with pytest.raises(CudaError, match="use after free"):
        b.stream_synchronize(s)


# ---------------------------------------------------------------- kernels
class _AddOne:
    """Reference kernel: adds one to n uint8 bytes at a pointer."""

    def accesses(self, params):
        return [(params[0].value, params[1].value, True)]

    def run(self, mem, grid, block, shared, params):
        ptr, n = params[0].value, params[1].value
        mem.write(ptr, mem.read(ptr, n) + 1)


def test_kernel_launch_runs_reference_later_and_reports_faults_at_sync():
    sim_kernels.register("test_add_one", _AddOne())
    b = _backend()
    mod = b.module_load_data(b"gpuarray-sim-placeholder\0test_add_one\0")
    f = b.module_get_function(mod, "test_add_one")
    d = b.mem_alloc(4)
    b.memset_d8_async(d, 1, 4, LEGACY)
    b.launch_kernel(f, (1, 1, 1), (32, 1, 1), 0, LEGACY, [ctypes.c_uint64(d), ctypes.c_int64(4)])
    assert (_read(b, d, 4) == 2).all()
    with pytest.raises(CudaError) as e:
        b.module_get_function(mod, "no_such_kernel")
    assert e.value.name == "CUDA_ERROR_NOT_FOUND"
    with pytest.raises(CudaError):
        b.launch_kernel(f, (1, 1, 1), (2048, 1, 1), 0, LEGACY, [ctypes.c_uint64(d), ctypes.c_int64(4)])
    b.launch_kernel(f, (1, 1, 1), (32, 1, 1), 0, LEGACY, [ctypes.c_uint64(d), ctypes.c_int64(8)])
    with pytest.raises(CudaError) as e:
        b.ctx_synchronize()
    assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS" and e.value.call == "cuCtxSynchronize"
    assert "test_add_one" in str(e.value)
    # a device fault is sticky (see sim/tests/backend/test_sim_fidelity.py)
    with pytest.raises(CudaError, match="sticky") as e:
        b.module_get_function(mod, "test_add_one")
    assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"


def test_kernel_parameters_are_copied_at_launch():
    sim_kernels.register("test_add_one", _AddOne())
    b = _backend()
    f = b.module_get_function(b.module_load_data(b"gpuarray-sim-placeholder\0test_add_one\0"), "test_add_one")
    d = b.mem_alloc(8)
    b.memset_d8_async(d, 0, 8, LEGACY)
    n = ctypes.c_int64(4)
    b.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, LEGACY, [ctypes.c_uint64(d), n])
    n.value = 8  # changing the argument after the launch must not matter
    assert list(_read(b, d, 8)) == [1] * 4 + [0] * 4


def test_peer_access_is_needed_for_kernels_but_not_copies():
    sim_kernels.register("test_add_one", _AddOne())
    b = SimBackend(devices=2)
    c0, c1 = b.primary_ctx_retain(0), b.primary_ctx_retain(1)
    b.ctx_set_current(c1)
    d1 = b.mem_alloc(4)
    b.memset_d8_async(d1, 0, 4, LEGACY)
    b.ctx_synchronize()
    b.ctx_set_current(c0)
    assert b.pointer_info(d1).device_ordinal == 1
    d0 = b.mem_alloc(4)
    b.memcpy_dtod_async(d0, d1, 4, LEGACY)  # peer copies work without peer access
    f = b.module_get_function(b.module_load_data(b"gpuarray-sim-placeholder\0test_add_one\0"), "test_add_one")
    b.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, LEGACY, [ctypes.c_uint64(d1), ctypes.c_int64(4)])
    with pytest.raises(CudaError, match="peer access"):
        b.ctx_synchronize()
    b.primary_ctx_reset(0)  # the fault is sticky; a reset destroys the module too
    f = b.module_get_function(b.module_load_data(b"gpuarray-sim-placeholder\0test_add_one\0"), "test_add_one")
    b.ctx_enable_peer_access(c1)
    b.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, LEGACY, [ctypes.c_uint64(d1), ctypes.c_int64(4)])
    b.ctx_synchronize()
    assert (_read(b, d1, 4) == 1).all()


def test_seeded_scheduler_gives_the_same_answer_for_correct_programs():
    results = set()
    for seed in range(5):
        b = _backend(seed=seed)
        d = b.mem_alloc(16)
        s, t = b.stream_create(True), b.stream_create(True)
        b.memset_d8_async(d, 1, 8, s)
        b.memset_d8_async(d + 8, 2, 8, t)
        ev = b.event_create(False)
        b.event_record(ev, t)
        b.stream_wait_event(s, ev)
        b.memcpy_dtod_async(d, d + 8, 4, s)
        results.add(bytes(_read_sync(b, d, 16, s)))
    assert len(results) == 1


def _read_sync(b, ptr, n, s):
    out = np.zeros(n, np.uint8)
    b.memcpy_dtoh_async(out.ctypes.data, ptr, n, s)
    return out


def test_environment_configuration(monkeypatch):
    monkeypatch.setenv("GPUARRAY_SIM_DEVICES", "3")
    monkeypatch.setenv("GPUARRAY_SIM_MEMORY", "2M")
    monkeypatch.setenv("GPUARRAY_SIM_CC", "8.0,9.0")
    b = SimBackend.from_environment()
    assert b.device_count() == 3
    assert b.device_total_memory(2) == 2 << 20
    assert b.device_attribute("compute_capability_major", 0) == 8
    assert b.device_attribute("compute_capability_major", 2) == 9
    monkeypatch.setenv("GPUARRAY_SIM_MEMORY", "lots")
    with pytest.raises(ValueError, match="GPUARRAY_SIM_MEMORY"):
        SimBackend.from_environment()
    monkeypatch.setenv("GPUARRAY_SIM_MEMORY", "1G")
    monkeypatch.setenv("GPUARRAY_SIM_RACECHECK", "maybe")
    with pytest.raises(ValueError, match="GPUARRAY_SIM_RACECHECK"):
        SimBackend.from_environment()


def test_race_warn_mode_warns_instead():
    b = _backend(racecheck="warn")
    d = b.mem_alloc(4)
    s = b.stream_create(non_blocking=True)
    b.memset_d8_async(d, 9, 4, s)
    with pytest.warns(RuntimeWarning, match="unordered access"):
        b.memset_d8_async(d, 1, 4, LEGACY)
