"""Host callbacks on streams: ``Stream.add_callback``, ``Stream.async_done``, ``Stream.external``.

On the simulator a driver thread runs the stream up to the callback and
calls it, as CUDA's callback thread does: the callback sees the effects of
all earlier work on the stream, runs on another thread, and gets the error
status when earlier work failed.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import gpuarray
from gpuarray._driver import get_backend

TIMEOUT = 30


def test_callback_runs_after_earlier_work_on_a_driver_thread():
    s = gpuarray.stream()
    host = gpuarray.pinned_array(4, dtype=np.int64)
    d = gpuarray.to_device(np.arange(4), stream=s)
    d.copy_to_host(host, stream=s)            # asynchronous: pinned destination
    seen: list = []
    done = threading.Event()

    def cb(stream, status, arg):
        seen.append((stream, status, arg, host.tolist(), threading.current_thread() is main))
        done.set()

    main = threading.current_thread()
    s.add_callback(cb, "payload")
    assert done.wait(TIMEOUT)
    assert seen == [(s, 0, "payload", [0, 1, 2, 3], False)]


def test_callback_default_arg_and_order_of_several():
    s = gpuarray.stream()
    order: list = []
    done = threading.Event()
    s.add_callback(lambda st, status, arg: order.append(arg), 1)
    s.add_callback(lambda st, status, arg: order.append(arg))
    s.add_callback(lambda st, status, arg: (order.append(arg), done.set()), 3)
    assert done.wait(TIMEOUT)
    assert order == [1, None, 3]


def test_callback_on_the_default_stream():
    done = threading.Event()
    gpuarray.default_stream().add_callback(lambda *a: done.set())
    assert done.wait(TIMEOUT)


def test_add_callback_refuses_non_callables():
    with pytest.raises(TypeError, match="callable"):
        gpuarray.stream().add_callback(42)


def test_callback_exception_is_reported_not_lost(monkeypatch):
    reports: list = []
    done = threading.Event()

    def hook(args):
        reports.append((args.exc_type, str(args.exc_value)))
        done.set()

    monkeypatch.setattr("sys.unraisablehook", hook)

    def bad(stream, status, arg):
        raise KeyError("boom")

    gpuarray.stream().add_callback(bad)
    assert done.wait(TIMEOUT)
    assert reports == [(KeyError, "'boom'")]


def test_callback_gets_the_status_of_failed_work(sim):
    from gpuarray_sim._memory import DeviceFault

    s = gpuarray.stream()

    def fault():
        raise DeviceFault(700, "injected illegal address")

    with s.device.activate():
        sim.sched.enqueue(sim._stream(s.handle, "test"), fault, "a faulting kernel")
    got: list = []
    done = threading.Event()
    s.add_callback(lambda st, status, arg: (got.append(status), done.set()))
    assert done.wait(TIMEOUT)
    assert got == [700]
    with pytest.raises(gpuarray.CudaError, match="injected illegal address"):
        s.synchronize()  # the fault is not lost in the callback thread


def test_callback_dropped_by_a_sticky_fault_is_still_called_with_the_error(sim):
    # The host's own sync finds the fault first and poisons the context, which
    # drops its queued work, the callback's entry included; CUDA still calls
    # the callback with the error (else async_done would wait for ever).
    from gpuarray_sim._memory import DeviceFault

    s = gpuarray.stream()

    def fault():
        raise DeviceFault(700, "injected illegal address")

    got: list = []
    done = threading.Event()
    with sim._lock:  # the callback thread cannot run before the sync below
        with s.device.activate():
            sim.sched.enqueue(sim._stream(s.handle, "test"), fault, "a faulting kernel")
        s.add_callback(lambda st, status, arg: (got.append(status), done.set()))
        with pytest.raises(gpuarray.CudaError, match="injected illegal address"):
            s.synchronize()
    assert done.wait(TIMEOUT), "the callback was never called"
    assert got == [700]
    sim.primary_ctx_reset(0)
    # The reset destroyed the stream behind gpuarray's back: its finalizer,
    # which may run later on the reaper thread (the callback thread held the
    # stream), must not destroy it again in whatever test runs then.
    s._finalizer.detach()


def test_async_done_resolves_to_the_stream():
    async def main():
        s1, s2 = gpuarray.stream(), gpuarray.stream()
        d = gpuarray.to_device(np.arange(3), stream=s1)
        r1, r2 = await asyncio.gather(s1.async_done(), s2.async_done())
        return s1, s2, r1, r2, d

    s1, s2, r1, r2, d = asyncio.run(main())
    assert r1 is s1 and r2 is s2


def test_async_done_of_failed_work_raises(sim):
    from gpuarray_sim._memory import DeviceFault

    async def main(s):
        return await s.async_done()

    s = gpuarray.stream()

    def fault():
        raise DeviceFault(700, "injected")

    with s.device.activate():
        sim.sched.enqueue(sim._stream(s.handle, "test"), fault, "a faulting kernel")
    with pytest.raises(gpuarray.CudaError, match="before async_done"):
        asyncio.run(main(s))
    with pytest.raises(gpuarray.CudaError):
        s.synchronize()


def test_async_done_needs_a_running_loop():
    with pytest.raises(RuntimeError):
        gpuarray.stream().async_done()


def test_cancelled_async_done_is_harmless():
    async def main():
        s = gpuarray.stream()
        fut = s.async_done()
        fut.cancel()
        await asyncio.sleep(0)
        return await s.async_done()

    assert isinstance(asyncio.run(main()), gpuarray.Stream)


def test_external_flag():
    s = gpuarray.stream()
    assert not s.external and not gpuarray.default_stream().external
    ext = gpuarray.external_stream(s.handle)
    assert ext.external


def test_auto_synchronize_waits_for_the_stream():
    host = gpuarray.pinned_array(3, dtype=np.int32)
    with gpuarray.stream().auto_synchronize() as s:
        gpuarray.to_device(np.array([4, 5, 6], np.int32), stream=s).copy_to_host(host, stream=s)
    assert host.tolist() == [4, 5, 6]


def test_backend_callback_refuses_non_callables(sim):
    gpuarray.get_device()
    with pytest.raises(TypeError, match="callable"):
        get_backend().stream_add_callback(1, None)


def test_what_a_callback_held_is_released_off_the_callback_thread(sim, monkeypatch):
    # CUDA refuses API calls on its callback thread: the stream's own release
    # (cuStreamDestroy) must not run there when the callback held the last reference.
    where: list[str] = []
    destroy = sim.stream_destroy

    def recording(handle):
        where.append(threading.current_thread().name)
        return destroy(handle)

    monkeypatch.setattr(sim, "stream_destroy", recording)
    done = threading.Event()
    s = gpuarray.stream()
    s.add_callback(lambda st, status, arg: done.set())
    del s
    assert done.wait(TIMEOUT)
    for _ in range(300):
        if where:
            break
        threading.Event().wait(0.01)
    assert where and "gpuarray-sim-callback" not in where, where


class _FailingKernel:
    """A reference kernel that fails as CUDA kernels can (misaligned address)."""

    def accesses(self, params):
        return []

    def run(self, mem, grid, block, shared, params):
        raise gpuarray.CudaError(716, "cuLaunchKernel", "reference kernel failed")


def test_callback_after_a_failing_kernel_gets_its_code(sim):
    # A reference kernel reports failure as CudaError, not DeviceFault: the
    # callback thread must still call the callback (async_done would hang).
    import ctypes

    from gpuarray_sim import kernels as sim_kernels

    sim_kernels.register("test_failing_kernel", _FailingKernel())
    s = gpuarray.stream()
    got: list = []
    done = threading.Event()
    with s.device.activate():
        f = sim.module_get_function(sim.module_load_data(b"gpuarray-sim-placeholder\0test_failing_kernel\0"), "test_failing_kernel")
        sim.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, s.handle, [ctypes.c_int(0)])
        s.add_callback(lambda st, status, arg: (got.append(status), done.set()))
    assert done.wait(TIMEOUT), "the callback was never called"
    assert got == [716]
    with pytest.raises(gpuarray.CudaError):
        s.synchronize()  # the fault is sticky; the next test gets a fresh simulator


class _Cycle:
    """A reference cycle: only the garbage collector frees it (on whatever thread it runs)."""

    def __init__(self, payload):
        self.payload = payload
        self.me = self


@pytest.mark.parametrize("what", ["device array", "stream", "pinned array", "many arrays"])
def test_garbage_collected_on_the_callback_thread_is_released_elsewhere(sim, what):
    # CUDA refuses every API call on its callback thread, and a collection
    # can start there (any allocation may trigger one): releases of whatever
    # it collects must wait for another thread, not fail (the next gpuarray
    # call would raise CUDA_ERROR_NOT_PERMITTED) and not leak.
    import gc

    gpuarray.zeros(1)  # the device, its manager and default stream exist
    gc.collect()
    gpuarray.current_context().deallocations.clear()
    free_before = sim.mem_get_info()[0]
    s = gpuarray.stream()
    done = threading.Event()
    errors: list[BaseException] = []

    def collect_here(stream, status, arg):
        try:
            gc.collect()  # the cycles are collected here, on the callback thread
        except BaseException as e:  # noqa: BLE001 -- recorded for the assertion
            errors.append(e)
        done.set()

    gc.disable()  # no collection before the callback's
    try:
        if what == "device array":
            _Cycle(gpuarray.zeros(1000))
        elif what == "stream":
            _Cycle(gpuarray.stream())
        elif what == "pinned array":
            _Cycle(gpuarray.pinned_array(1000))
        else:
            for _ in range(30):  # more than the deferred-free queue holds: a flush
                _Cycle(gpuarray.zeros(10))
        s.add_callback(collect_here)
        assert done.wait(TIMEOUT)
    finally:
        gc.enable()
    s.synchronize()
    assert not errors
    gpuarray.zeros(1)  # no remembered NOT_PERMITTED from a release
    for _ in range(500):  # the releases run on another thread, soon
        gc.collect()
        gpuarray.current_context().deallocations.clear()
        if sim.mem_get_info()[0] >= free_before - (1 << 16):
            break
        threading.Event().wait(0.01)
    assert sim.mem_get_info()[0] >= free_before - (1 << 16)  # nothing leaked (small slack)


def test_a_collection_inside_cuStreamAddCallback_does_not_deadlock(sim, monkeypatch):
    # Any allocation inside the simulator's cuStreamAddCallback may start a
    # collection whose releases free memory (cuMemFree, a sync): that free
    # must not wait for the host function being queued, which its driver
    # thread does not have yet (it hung for ever).
    import gc

    from gpuarray_sim import _hostfn

    gpuarray.zeros(1)
    gc.collect()
    gpuarray.current_context().deallocations.clear()
    free_before = sim.mem_get_info()[0]
    submit = _hostfn.Worker.submit

    def collecting_submit(self, item):
        gc.collect()  # as if creating the driver thread had started a collection
        submit(self, item)

    monkeypatch.setattr(_hostfn.Worker, "submit", collecting_submit)
    s = gpuarray.stream()
    done = threading.Event()
    gc.disable()
    try:
        for _ in range(30):  # a flush of the deferred-free queue inside the call
            _Cycle(gpuarray.zeros(10))
        adder = threading.Thread(target=s.add_callback, args=(lambda st, status, arg: done.set(),))
        adder.start()
        adder.join(TIMEOUT)
        assert not adder.is_alive(), "cuStreamAddCallback deadlocked on a collection inside it"
    finally:
        gc.enable()
    assert done.wait(TIMEOUT)
    s.synchronize()
    gpuarray.current_context().deallocations.clear()
    assert sim.mem_get_info()[0] >= free_before - (1 << 16)
