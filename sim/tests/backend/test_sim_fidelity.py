"""Simulator fidelity: neither false failures nor lost faults (issue 12, items 1-3).

1. Page-locked destinations of queued copies read as garbage only to
   genuinely unsynchronised host reads: the poison respects stream order.
2. Device faults are sticky, as on CUDA: the context is unusable until it is
   reset, and a fault first seen in a garbage-collection finalizer is raised
   by the next call instead of vanishing.
3. Finalizers make their context current; the simulator refuses, on a thread
   with no current context, exactly the calls CUDA refuses there.
"""

from __future__ import annotations

import ctypes
import gc
import threading

import numpy as np
import pytest
from gpuarray_sim import SimBackend

import gpuarray
from gpuarray import _driver
from gpuarray.errors import CudaError
from tests.support import backend_is_sim

pytestmark = pytest.mark.skipif(not backend_is_sim(), reason="checks the simulator's model of CUDA")

LEGACY = 1


def _backend(**kw) -> SimBackend:
    b = SimBackend(**kw)
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    return b


def _pinned(b, n):
    ptr = b.mem_host_alloc(n)
    return ptr, np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))


# ------------------------------------------------- 1. poison in stream order
def test_round_trip_through_the_same_pinned_buffer_on_one_stream():
    # The program: valid CUDA, which prints 0..7.
    s = gpuarray.stream()
    c = gpuarray.pinned_array(8, dtype=np.int32)
    c[:] = np.arange(8)
    p = gpuarray.to_device(c, stream=s)  # H2D from c, queued
    p.copy_to_host(c, stream=s)          # D2H into c, same stream, after it
    s.synchronize()
    np.testing.assert_array_equal(c, np.arange(8))


def test_queued_reader_of_a_pinned_buffer_sees_its_bytes_not_the_poison():
    b = _backend()
    d1, d2 = b.mem_alloc(16), b.mem_alloc(16)
    b.memset_d8_async(d2, 9, 16, LEGACY)
    ptr, host = _pinned(b, 16)
    host[:] = 5
    s = b.stream_create()
    b.memcpy_htod_async(d1, ptr, 16, s)   # reads host when it runs
    b.memcpy_dtoh_async(ptr, d2, 16, s)   # then overwrites it
    b.stream_synchronize(s)
    out = np.zeros(16, np.uint8)
    b.memcpy_dtoh_async(out.ctypes.data, d1, 16, LEGACY)
    assert (out == 5).all(), "the upload read the poison of a later copy on its stream"
    assert (host == 9).all()


def test_unsynchronised_read_still_sees_garbage_once_the_copy_is_next():
    b = _backend()
    d1, d2 = b.mem_alloc(16), b.mem_alloc(16)
    b.memset_d8_async(d2, 9, 16, LEGACY)
    b.ctx_synchronize()
    ptr, host = _pinned(b, 16)
    host[:] = 5
    s = b.stream_create()
    ev = b.event_create(timing=False)
    b.memcpy_htod_async(d1, ptr, 16, s)
    b.event_record(ev, s)                 # after the upload, before the download
    b.memcpy_dtoh_async(ptr, d2, 16, s)
    assert (host == 5).all(), "poisoned while queued work still read the buffer"
    b.event_synchronize(ev)               # the upload is done; the download is not
    assert (host == 0xFF).all(), "an unfinished copy into pinned memory was readable"
    b.stream_synchronize(s)
    assert (host == 9).all()


def test_copy_with_nothing_before_it_poisons_at_once():
    b = _backend()
    d = b.mem_alloc(8)
    b.memset_d8_async(d, 3, 8, LEGACY)
    b.ctx_synchronize()
    ptr, host = _pinned(b, 8)
    host[:] = 0
    s = b.stream_create()
    b.memcpy_dtoh_async(ptr, d, 8, s)
    assert (host == 0xFF).all()
    b.stream_synchronize(s)
    assert (host == 3).all()


def test_pitched_copy_into_pinned_memory_poisons_in_stream_order_too():
    b = _backend()
    d1, d2 = b.mem_alloc(32), b.mem_alloc(32)
    b.memset_d8_async(d2, 4, 32, LEGACY)
    b.ctx_synchronize()
    ptr, host = _pinned(b, 32)
    host[:] = 6
    s = b.stream_create()
    b.memcpy_htod_async(d1, ptr, 32, s)
    b.memcpy_2d_async(ptr, 16, False, d2, 16, True, 8, 2, s)   # 2 rows of 8 bytes
    b.stream_synchronize(s)
    out = np.zeros(32, np.uint8)
    b.memcpy_dtoh_async(out.ctypes.data, d1, 32, LEGACY)
    assert (out == 6).all()
    assert (host.reshape(2, 16)[:, :8] == 4).all() and (host.reshape(2, 16)[:, 8:] == 6).all()


# ------------------------------------------------------- 2. sticky errors
class _Touch:
    """Reference kernel: adds one to ``n`` bytes at a pointer (out of range: a fault)."""

    def accesses(self, params):
        return [(params[0].value, params[1].value, True)]

    def run(self, mem, grid, block, shared, params):
        ptr, n = params[0].value, params[1].value
        mem.write(ptr, mem.read(ptr, n) + 1)


class _Raises:
    """Reference kernel that fails as a CUDA kernel can (misaligned, launch failure...)."""

    code = 716

    def accesses(self, params):
        return []

    def run(self, mem, grid, block, shared, params):
        raise CudaError(self.code, "cuLaunchKernel", "reference kernel failed")


def _kernel(b, name, impl):
    from gpuarray_sim import kernels as sim_kernels

    sim_kernels.register(name, impl)
    return b.module_get_function(b.module_load_data(b"gpuarray-sim-placeholder\0" + name.encode()), name)


def _launch(b, f, ptr, n, stream=LEGACY):
    b.launch_kernel(f, (1, 1, 1), (32, 1, 1), 0, stream, [ctypes.c_uint64(ptr), ctypes.c_int64(n)])


def test_a_device_fault_makes_every_later_call_in_the_context_fail_until_reset():
    b = SimBackend(devices=2)
    c0, c1 = b.primary_ctx_retain(0), b.primary_ctx_retain(1)
    b.ctx_set_current(c0)
    f = _kernel(b, "fidelity_touch", _Touch())
    d = b.mem_alloc(16)
    s = b.stream_create()
    ev = b.event_create()
    _launch(b, f, d, 64)                      # 48 bytes past the allocation
    with pytest.raises(CudaError) as e:
        b.ctx_synchronize()
    assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    later = {
        "cuMemAlloc": lambda: b.mem_alloc(16),
        "cuMemFree": lambda: b.mem_free(d),
        "cuMemsetD8Async": lambda: b.memset_d8_async(d, 0, 16, LEGACY),
        "cuStreamCreate": lambda: b.stream_create(),
        "cuStreamSynchronize": lambda: b.stream_synchronize(s),
        "cuStreamDestroy": lambda: b.stream_destroy(s),
        "cuEventCreate": lambda: b.event_create(),
        "cuEventRecord": lambda: b.event_record(ev, s),
        "cuEventDestroy": lambda: b.event_destroy(ev),
        "cuCtxSynchronize": lambda: b.ctx_synchronize(),
        "cuMemHostAlloc": lambda: b.mem_host_alloc(64),
        "cuMemGetInfo": lambda: b.mem_get_info(),
        "cuLaunchKernel": lambda: _launch(b, f, d, 4),
    }
    for call, fn in later.items():
        with pytest.raises(CudaError, match="sticky") as e:
            fn()
        assert (e.value.name, e.value.call) == ("CUDA_ERROR_ILLEGAL_ADDRESS", call)
        assert "48 bytes" in str(e.value), "the sticky error names the original fault"
    # what does not work in the context keeps working
    assert b.device_count() == 2 and b.ctx_get_current() == c0 and b.ctx_get_device() == 0
    b.ctx_set_current(c1)                     # another device's context is healthy
    b.mem_free(b.mem_alloc(16))
    b.ctx_set_current(c0)
    b.primary_ctx_reset(0)                    # destroys everything of the context
    d2 = b.mem_alloc(16)
    b.memset_d8_async(d2, 7, 16, LEGACY)
    out = np.zeros(16, np.uint8)
    b.memcpy_dtoh_async(out.ctypes.data, d2, 16, LEGACY)
    assert (out == 7).all()
    with pytest.raises(CudaError) as e:
        b.stream_synchronize(s)               # the reset destroyed the stream
    assert e.value.name == "CUDA_ERROR_INVALID_HANDLE"
    with pytest.raises(CudaError) as e:
        b.mem_free(d)                          # ... and the memory
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE"


@pytest.mark.parametrize("code, name", [(716, "CUDA_ERROR_MISALIGNED_ADDRESS"),
                                        (719, "CUDA_ERROR_LAUNCH_FAILED")])
def test_misaligned_address_and_launch_failure_are_sticky_too(code, name):
    b = _backend()
    impl = _Raises()
    impl.code = code
    f = _kernel(b, f"fidelity_raises_{code}", impl)
    _launch(b, f, 0, 0)
    with pytest.raises(CudaError) as e:
        b.ctx_synchronize()
    assert e.value.name == name
    with pytest.raises(CudaError, match="sticky") as e:
        b.mem_alloc(16)
    assert e.value.name == name


def test_a_refused_call_is_not_sticky():
    b = _backend()
    d = b.mem_alloc(16)
    with pytest.raises(CudaError) as e:       # range checked when called: nothing ran
        b.memset_d8_async(d, 0, 64, LEGACY)
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE"  # cuda.h's code for cuMemsetD8Async
    b.memset_d8_async(d, 0, 16, LEGACY)
    b.ctx_synchronize()


def test_a_fault_found_while_the_queue_drains_is_reported_by_the_next_call():
    b = _backend(max_queue=4)
    f = _kernel(b, "fidelity_touch", _Touch())
    d = b.mem_alloc(16)
    _launch(b, f, d, 32)
    with pytest.raises(CudaError, match="sticky") as e:
        for _ in range(8):   # the queue drains, the kernel runs: no call synchronises
            b.memset_d8_async(d, 0, 16, LEGACY)
    assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    with pytest.raises(CudaError, match="sticky"):
        b.mem_alloc(16)


def test_releasing_the_last_reference_resets_the_context():
    b = _backend()
    f = _kernel(b, "fidelity_touch", _Touch())
    _launch(b, f, b.mem_alloc(16), 32)
    with pytest.raises(CudaError):
        b.ctx_synchronize()
    c0 = b.primary_ctx_retain(0)               # two references now
    b.primary_ctx_release(0)
    with pytest.raises(CudaError, match="sticky"):
        b.mem_alloc(16)
    b.primary_ctx_release(0)                   # the last one: reset
    b.ctx_set_current(c0)
    with pytest.raises(CudaError) as e:        # cuda.h: an uninitialised primary context
        b.mem_alloc(16)
    assert e.value.name == "CUDA_ERROR_CONTEXT_IS_DESTROYED"
    assert b.primary_ctx_retain(0) == c0       # retained again: reset, no sticky error
    b.mem_free(b.mem_alloc(16))


def test_fault_first_seen_by_a_finalizer_is_raised_by_the_next_call(sim, monkeypatch):
    # The scenario: a kernel faults; the first sync point is the
    # cuMemFree of a garbage-collected array's finalizer.
    monkeypatch.setenv("GPUARRAY_MAX_PENDING_DEALLOCS_COUNT", "0")   # free at once
    gpuarray._config.reload()
    dst = gpuarray.zeros(4, np.uint8)
    dst.stream.synchronize()
    f = _kernel(sim, "fidelity_touch", _Touch())
    _launch(sim, f, dst.gpu_data.device_pointer, 4096)          # runs past the allocation
    junk = gpuarray.empty(8)
    del junk                                                     # its finalizer syncs: fault
    with pytest.raises(CudaError) as e:
        gpuarray.zeros(2)
    assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert "cuMemFree" in str(e.value) or "finalizer" in "\n".join(getattr(e.value, "__notes__", []))
    with pytest.raises(CudaError, match="sticky"):               # and the context stays unusable
        dst.copy_to_host()


def test_error_of_a_finalizer_is_raised_once_by_the_next_call():
    dev = gpuarray.get_device()

    def failing_release():
        raise CudaError(1, "cuMemFree", "release failed")

    p = gpuarray.MemoryPointer(dev, 0x1000, 8, finalizer=failing_release)
    del p
    gc.collect()
    with pytest.raises(CudaError, match="release failed"):
        gpuarray.zeros(2)
    np.testing.assert_array_equal(gpuarray.zeros(2).copy_to_host(), np.zeros(2))
    q = gpuarray.MemoryPointer(dev, 0x2000, 8, finalizer=failing_release)
    with pytest.raises(CudaError, match="release failed"):      # explicit: raised at once
        q.free()
    gpuarray.zeros(2)                                              # nothing left pending


# ------------------------------------------- 3. contexts of finalizers
def _on_fresh_thread(fn):
    box: dict = {}

    def body():
        try:
            box["ctx_before"] = _driver.get_backend().ctx_get_current()
            fn()
            box["ctx_after"] = _driver.get_backend().ctx_get_current()
        except BaseException as e:  # reported by the test's thread
            box["error"] = e

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box


def test_finalizers_make_their_context_current_on_a_thread_with_none(sim, monkeypatch):
    seen: dict[str, int] = {}
    for name in ("stream_destroy", "event_destroy", "mem_free_host", "mem_host_unregister"):
        real = getattr(sim, name)

        def spy(*args, _real=real, _name=name):
            seen[_name] = sim.ctx_get_current()
            return _real(*args)

        monkeypatch.setattr(sim, name, spy)
    dev = gpuarray.get_device()
    host = np.zeros(64)
    objs = [gpuarray.stream(), gpuarray.event(), gpuarray.pinned_array(8),
            gpuarray.memory.host_pin(host, host.ctypes.data, host.nbytes)]
    mgr = gpuarray.memory.get_memory_manager()

    def drop():
        objs.clear()                   # the finalizers run here, on this thread
        gc.collect()
        mgr.deallocations.clear()      # the pinned array's free was deferred

    box = _on_fresh_thread(drop)
    assert box["ctx_before"] == 0 and box["ctx_after"] == 0
    assert seen == dict.fromkeys(("stream_destroy", "event_destroy", "mem_free_host",
                                  "mem_host_unregister"), dev.context_handle)


def test_the_simulator_refuses_only_what_cuda_refuses_without_a_context():
    b = _backend()
    d = b.mem_alloc(16)
    s, ev = b.stream_create(), b.event_create()
    pinned = b.mem_host_alloc(64)
    host = np.zeros(64, np.uint8)
    b.mem_host_register(host.ctypes.data, 64)

    refused: dict[str, int] = {}

    def calls():
        for name, fn in {"cuMemHostAlloc": lambda: b.mem_host_alloc(64),
                         "cuMemHostRegister": lambda: b.mem_host_register(np.zeros(8).ctypes.data, 8),
                         "cuMemAlloc": lambda: b.mem_alloc(8),
                         "cuMemGetInfo": lambda: b.mem_get_info(),
                         "cuStreamCreate": lambda: b.stream_create(),
                         "cuEventCreate": lambda: b.event_create()}.items():
            try:
                fn()
            except CudaError as e:
                refused[name] = e.code
        # The documentation does not ask for a current context here (the
        # handle or pointer names it), and drivers accept these without one.
        b.stream_destroy(s)
        b.event_destroy(ev)
        b.mem_free_host(pinned)
        b.mem_host_unregister(host.ctypes.data)
        b.mem_free(d)

    box = _on_fresh_thread(calls)
    assert box["ctx_before"] == 0
    assert refused == dict.fromkeys(("cuMemHostAlloc", "cuMemHostRegister", "cuMemAlloc",
                                     "cuMemGetInfo", "cuStreamCreate", "cuEventCreate"), 201)
