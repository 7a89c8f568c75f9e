"""Driver calls of finalizers that the garbage collector runs while the simulator works.

Any allocation of a Python object may start a collection, and a collection
runs finalizers -- gpuarray's, numba-cuda's and cuda.core's releases, which
call the driver (``cuMemFree`` synchronises).  The simulator runs device work
on the thread of the synchronising call, in Python, so a collection could
start inside that work and the finalizer's call enter the simulator again
there: its synchronisation ran the work in progress a second time (a
``KeyError`` in the scheduler), or its free released memory the work was
still using (a sticky ``CUDA_ERROR_ILLEGAL_ADDRESS``); both were seen, now
and then, under numba-cuda's own driver tests over the stand-in.  On a GPU a
finalizer's call comes before or after its thread's other driver calls, and
the device work it waits for finishes on the device.  The simulator pauses
automatic collection while a thread is inside it (``sim/_lock.py``), and
never runs work twice when a call enters it again anyway (an explicit
``gc.collect()``): such a call that needs the work in progress fails
instead, and another thread's call waits for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import threading
import weakref

import numpy as np
import pytest
from gpuarray_sim import SimBackend, _lock
from gpuarray_sim import kernels as sim_kernels
from gpuarray_sim._sched import ReentryError

from gpuarray.errors import CudaError
from tests.support import backend_is_sim

LEGACY = 1
TIMEOUT = 30

sim_only = pytest.mark.skipif(not backend_is_sim(), reason="checks the simulator's model of CUDA")


@pytest.fixture
def collector():
    """Automatic collection on, at CPython's default threshold; restored after."""
    was_on, threshold = gc.isenabled(), gc.get_threshold()
    gc.enable()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*threshold)
    if not was_on:
        gc.disable()


def _automatic() -> bool:
    """Whether automatic collection runs now (switched on, first threshold above 0)."""
    return gc.isenabled() and gc.get_threshold()[0] != 0


def _backend(seed: int | None = None) -> SimBackend:
    b = SimBackend(seed=seed)
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    return b


class _Kernel:
    """Reference kernel: adds one to ``n`` bytes, after Python code that may start a collection.

    ``collect``: "allocate" allocates more objects than the collector's
    threshold, as a kernel's Python code (NumPy, ctypes) may; "explicit"
    calls ``gc.collect()``; "none" neither.
    """

    def __init__(self, log: list, collect: str = "allocate") -> None:
        self.log = log
        self.collect = collect

    def accesses(self, params):
        return [(params[0].value, params[1].value, True)]

    def run(self, mem, grid, block, shared, params):
        ptr, n = params[0].value, params[1].value
        self.log.append("kernel starts")
        if self.collect == "explicit":
            gc.collect()
        elif self.collect == "allocate":
            kept = [[] for _ in range(3 * gc.get_threshold()[0])]  # past the threshold
            del kept
        mem.write(ptr, mem.read(ptr, n) + 1)
        self.log.append("kernel ends")


def _launch_kernel(b, log, ptr, n, name, collect="allocate", stream=LEGACY):
    sim_kernels.register(name, _Kernel(log, collect))
    f = b.module_get_function(b.module_load_data(b"gpuarray-sim-placeholder\0" + name.encode()), name)
    b.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, stream, [ctypes.c_uint64(ptr), ctypes.c_int64(n)])


def _garbage(finalizer) -> None:
    """An object only a collection frees (a reference cycle), which runs ``finalizer`` then."""

    class Node:
        pass

    node = Node()
    node.me = node
    weakref.finalize(node, finalizer)


def _bytes(b, ptr, n):
    out = np.zeros(n, np.uint8)
    b.memcpy_dtoh_async(out.ctypes.data, ptr, n, LEGACY)  # pageable: complete on return
    return out


@sim_only
def test_a_finalizer_that_synchronises_runs_after_the_device_work_a_collection_interrupted(collector):
    # Before: the finalizer's synchronisation ran the kernel in progress again
    # (KeyError in Scheduler._execute), inside the kernel.
    b = _backend()
    log: list[str] = []
    x = b.mem_alloc(16)
    b.memset_d8_async(x, 1, 16, LEGACY)

    def release():
        try:
            b.ctx_synchronize()
            log.append("finalizer synchronised")
        except Exception as e:  # noqa: BLE001 -- recorded for the assertion
            log.append(f"finalizer failed: {e!r}")

    gc.collect()  # the collector's counts start from zero: nothing collects before the kernel
    _garbage(release)
    _launch_kernel(b, log, x, 16, "reentry_sync")
    b.ctx_synchronize()
    gc.collect()  # nothing left to do: the collection after the call ran the finalizer
    assert log == ["kernel starts", "kernel ends", "finalizer synchronised"]
    np.testing.assert_array_equal(_bytes(b, x, 16), 2)  # the kernel ran once
    assert gc.isenabled()


@sim_only
def test_a_finalizer_that_frees_memory_device_work_uses_frees_it_after_that_work(collector):
    # The kernel runs in a context of cuCtxCreate and uses the memory the
    # finalizer frees. Before: cuMemFree, re-entered inside the kernel, freed
    # it at once (the kernel in progress is no longer queued), and the kernel
    # then read freed memory: a sticky CUDA_ERROR_ILLEGAL_ADDRESS.
    b = _backend()
    b.ctx_create(0)
    log: list[str] = []
    x = b.mem_alloc(16)
    b.memset_d8_async(x, 1, 16, LEGACY)
    b.ctx_synchronize()

    def release():
        try:
            b.mem_free(x)
            log.append("finalizer freed")
        except Exception as e:  # noqa: BLE001 -- recorded for the assertion
            log.append(f"finalizer failed: {e!r}")

    gc.collect()
    _garbage(release)
    _launch_kernel(b, log, x, 16, "reentry_free")
    b.ctx_synchronize()  # before: CUDA_ERROR_ILLEGAL_ADDRESS
    gc.collect()
    assert log == ["kernel starts", "kernel ends", "finalizer freed"]
    with pytest.raises(CudaError, match="INVALID_VALUE"):  # freed, after the kernel
        b.memcpy_dtoh_async(np.zeros(16, np.uint8).ctypes.data, x, 16, LEGACY)
    b.ctx_synchronize()  # the context is healthy


@sim_only
@pytest.mark.parametrize("seed", [None, 1], ids=["in order", "seeded"])
def test_a_call_reentered_by_an_explicit_collection_never_runs_the_work_in_progress_again(seed):
    # An explicit gc.collect() inside device work still runs finalizers there.
    # A synchronisation they make that needs the work in progress fails with
    # ReentryError (it cannot finish first), a query of it says "not ready",
    # and the work runs once; the simulator stays usable. Before: KeyError
    # from the scheduler, for both.
    b = _backend(seed)
    log: list[str] = []
    errors: list[Exception] = []
    x = b.mem_alloc(16)
    b.memset_d8_async(x, 1, 16, LEGACY)

    def release():
        log.append(f"query: {b.stream_query(LEGACY)}")
        try:
            b.stream_synchronize(LEGACY)
            log.append("finalizer synchronised")
        except Exception as e:  # noqa: BLE001 -- recorded for the assertion
            log.append(f"finalizer failed: {type(e).__name__}")
            errors.append(e)

    gc.collect()
    _garbage(release)
    _launch_kernel(b, log, x, 16, "reentry_explicit", collect="explicit")
    b.stream_synchronize(LEGACY)
    assert log == ["kernel starts", "query: False", "finalizer failed: ReentryError", "kernel ends"]
    assert isinstance(errors[0], ReentryError) and "kernel reentry_explicit" in str(errors[0])
    np.testing.assert_array_equal(_bytes(b, x, 16), 2)  # once
    del log[:]
    _launch_kernel(b, log, x, 16, "reentry_after", collect="none")
    b.ctx_synchronize()
    np.testing.assert_array_equal(_bytes(b, x, 16), 3)
    assert log == ["kernel starts", "kernel ends"]


@sim_only
@pytest.mark.parametrize("seed", [None, 1], ids=["in order", "seeded"])
def test_another_threads_call_waits_for_work_in_progress_while_its_runner_waits(seed):
    # The runner of a kernel, re-entered by an explicit collection, waits in a
    # finalizer's synchronisation for a host function (the simulator's lock
    # released meanwhile). Another thread's call that needs the kernel waits
    # for it to finish there. Before: that thread ran the kernel again
    # (KeyError).
    b = _backend(seed)
    log: list[str] = []
    x = b.mem_alloc(16)
    b.memset_d8_async(x, 1, 16, LEGACY)
    other = b.stream_create(non_blocking=True)
    go = threading.Event()
    b.stream_add_callback(other, lambda status: go.wait(TIMEOUT))
    outcome: dict[str, object] = {}

    def other_thread():
        b.ctx_set_current(b.primary_ctx_handle(0))
        try:
            b.stream_synchronize(LEGACY)  # needs the kernel the main thread runs
            outcome["other"] = "synchronised"
        except Exception as e:  # noqa: BLE001 -- recorded for the assertion
            outcome["other"] = repr(e)

    waiter = threading.Thread(target=other_thread)

    def release():
        waiter.start()  # its call waits for the lock, then for the kernel
        b.stream_synchronize(other)  # waits for the host function, the lock released
        log.append("finalizer synchronised")

    def unblock():
        for _ in range(TIMEOUT * 100):
            if getattr(b.sched, "_parked", 0) == 2:  # both calls wait on the scheduler
                break
            threading.Event().wait(0.01)
        go.set()

    gc.collect()
    _garbage(release)
    _launch_kernel(b, log, x, 16, "reentry_threads", collect="explicit")
    helper = threading.Thread(target=unblock)
    helper.start()
    b.stream_synchronize(LEGACY)
    helper.join(TIMEOUT)
    waiter.join(TIMEOUT)
    assert outcome == {"other": "synchronised"}
    assert log == ["kernel starts", "finalizer synchronised", "kernel ends"]
    np.testing.assert_array_equal(_bytes(b, x, 16), 2)


# ----------------------------------------------------------------- the lock
@contextlib.contextmanager
def _held_by_another_thread(lock):
    """``lock`` held by another thread for the duration."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait(TIMEOUT)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(TIMEOUT)
        yield
    finally:
        release.set()
        t.join(TIMEOUT)


def test_the_simulators_lock_pauses_automatic_collection_while_held(collector):
    a, c = _lock.SimLock(), _lock.SimLock()
    with contextlib.ExitStack() as other:
        with a:
            assert not _automatic()
            with a:  # reentrant
                assert not _automatic()
            assert not _automatic()
            other.enter_context(_held_by_another_thread(c))
        assert not _automatic()  # another simulator's lock is still held
    assert _automatic()


def test_a_wait_on_the_simulators_condition_resumes_collection(collector):
    lock = _lock.SimLock()
    cond = threading.Condition(lock)
    seen = []
    with cond:
        with lock:
            def notify():
                with cond:  # taken once the waiter released it completely
                    pass
                seen.append(_automatic())  # no simulator's lock is held now
                with cond:
                    seen.append(_automatic())
                    cond.notify_all()

            t = threading.Thread(target=notify)
            t.start()
            assert cond.wait(TIMEOUT)
            assert not _automatic()  # paused again with the lock, at its depth
        assert not _automatic()
    t.join(TIMEOUT)
    assert seen == [True, False]
    assert _automatic()


def test_a_collector_the_program_disabled_stays_disabled(collector):
    gc.disable()
    with _lock.SimLock():
        assert not _automatic()
    assert not gc.isenabled()
    assert gc.get_threshold()[0] == 700  # the pause's own switch is undone


def test_a_collector_another_thread_disabled_during_a_call_stays_disabled(collector):
    # issue 35: the pause's end switched the collector back on (gc.enable())
    # although the program had switched it off meanwhile.
    with _held_by_another_thread(_lock.SimLock()):
        assert not _automatic()
        gc.disable()  # the program's own setting, on this thread, during the other's call
    assert not gc.isenabled()
    assert gc.get_threshold()[0] == 700


def test_a_collector_another_thread_enables_during_a_call_collects_only_after_it(collector):
    # The program's gc.enable() is kept, and does not start collections inside the call.
    gc.disable()
    ran: list[str] = []
    with _held_by_another_thread(_lock.SimLock()):
        gc.enable()
        gc.collect()  # an explicit collection still collects
        _garbage(lambda: ran.append("finalized"))
        kept = [[] for _ in range(3 * 700)]  # past the threshold the pause replaced
        del kept
        assert ran == []  # no automatic collection while the other thread's call runs
    assert gc.isenabled()
    kept = [[] for _ in range(3 * 700)]
    del kept
    assert ran == ["finalized"]  # the first automatic collection after the call


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork exists on POSIX only")
def test_a_child_forked_while_another_thread_held_the_lock_collects(collector):
    with _held_by_another_thread(_lock.SimLock()):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            with _lock.SimLock():
                inside = _automatic()
            os.write(w, f"{_automatic()} {inside}".encode())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        with os.fdopen(r) as f:
            assert f.read() == "True False"


# ------------------------------------------------------------ the stand-in
def test_over_the_standin_a_finalizers_driver_call_runs_after_the_device_work(collector):
    # The same through the real cuda.bindings and the stand-in libcuda.so.1:
    # the finalizer's cuCtxSynchronize enters the stand-in from C. Before: it
    # returned CUDA_ERROR_UNKNOWN (the scheduler's KeyError, printed).
    from gpuarray_sim import standin

    import gpuarray

    if not standin.active() or gpuarray._driver.backend_name() != "cuda":
        pytest.skip("needs the cuda backend over the stand-in driver (python -m gpuarray standin -- pytest)")
    from cuda.bindings import driver

    from tests.support import the_simulator

    b = the_simulator()
    x = gpuarray.zeros(16, np.uint8)
    x.stream.synchronize()  # a context is current on this thread
    ptr = x.gpu_data.device_pointer
    log: list[str] = []

    def release():
        (err,) = driver.cuCtxSynchronize()
        log.append(f"finalizer: {err.name}")

    gc.collect()
    _garbage(release)
    _launch_kernel(b, log, ptr, 16, "reentry_standin")
    (err,) = driver.cuCtxSynchronize()
    gc.collect()
    assert err.name == "CUDA_SUCCESS"
    assert log == ["kernel starts", "kernel ends", "finalizer: CUDA_SUCCESS"]
    np.testing.assert_array_equal(x.copy_to_host(), 1)
