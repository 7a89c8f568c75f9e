"""Simulator fidelity of host callbacks and of frees.

1. A host callback must not call CUDA: every driver call made from inside
   one fails with ``CUDA_ERROR_NOT_PERMITTED``, as ``cuStreamAddCallback``
   documents.  The callback runs on a driver thread, never on the thread of
   a synchronising call and never holding the simulator's lock (other
   threads' calls proceed while it runs), and work queued after it still
   waits for it to return; a query of that work answers NOT_READY at once.
2. A sticky fault belongs to its context: ``cuMemFree`` / ``cuMemFreeHost``
   in a healthy context neither report another context's fault nor skip the
   free because of it; the fault stays for that context's next call.
"""

from __future__ import annotations

import ctypes
import inspect
import threading

import numpy as np
import pytest
from gpuarray_sim import SimBackend

from gpuarray._driver._base import Backend
from gpuarray.errors import CudaError
from sim.tests.backend.test_sim_fidelity import _backend, _Touch
from tests.support import backend_is_sim

pytestmark = pytest.mark.skipif(not backend_is_sim(), reason="checks the simulator's model of CUDA")

LEGACY = 1
TIMEOUT = 30


class _Record:
    """Reference kernel that records, in a list of the test, that it ran."""

    def __init__(self, log: list) -> None:
        self.log = log

    def accesses(self, params):
        return []

    def run(self, mem, grid, block, shared, params):
        self.log.append(f"kernel {params[0].value}")


def _kernel(b, name, impl):
    from gpuarray_sim import kernels as sim_kernels

    sim_kernels.register(name, impl)
    return b.module_get_function(b.module_load_data(b"gpuarray-sim-placeholder\0" + name.encode()), name)


def _launch(b, f, ptr, n, stream=LEGACY):
    b.launch_kernel(f, (1, 1, 1), (32, 1, 1), 0, stream, [ctypes.c_uint64(ptr), ctypes.c_int64(n)])


def _driver_calls() -> list[str]:
    """Every call of the driver interface, plus the simulator's own public calls."""
    names = sorted(Backend.__abstractmethods__)
    extra = [n for n, v in vars(SimBackend).items() if not n.startswith("_") and callable(v)
             and n not in ("from_environment",)]
    return sorted(set(names) | set(extra))


# ------------------------------------------ 1. callbacks must not call CUDA
def test_every_driver_call_from_a_host_callback_is_not_permitted():
    b = _backend()
    calls = _driver_calls()
    assert {"mem_alloc", "mem_free", "stream_synchronize", "ctx_set_current", "device_count",
            "stream_add_callback", "inject_fault"} <= set(calls)
    got: dict[str, object] = {}
    done = threading.Event()

    def cb(status):
        for name in calls:
            method = getattr(b, name)
            args = [0 for p in inspect.signature(method).parameters.values()
                    if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
            try:
                method(*args)
            except CudaError as e:
                got[name] = (e.code, e.name, e.call, "callback" in e.detail)
            except Exception as e:  # noqa: BLE001 -- recorded, judged below
                got[name] = e
            else:
                got[name] = "succeeded"
        done.set()

    b.stream_add_callback(LEGACY, cb)
    assert done.wait(TIMEOUT)
    wrong = {n: r for n, r in got.items()
             if not (isinstance(r, tuple) and r[:2] == (800, "CUDA_ERROR_NOT_PERMITTED") and r[3])}
    assert not wrong, wrong
    assert got["mem_alloc"][2] == "cuMemAlloc"
    assert got["stream_synchronize"][2] == "cuStreamSynchronize"
    assert got["ctx_set_current"][2] == "cuCtxSetCurrent"
    assert got["stream_add_callback"][2] == "cuStreamAddCallback"
    b.ctx_synchronize()  # the thread that added it may call CUDA as before
    assert b.mem_get_info()[1] > 0


def test_a_callback_dropped_by_a_sticky_fault_may_not_call_cuda_either():
    b = _backend()
    d = b.mem_alloc(16)
    f = _kernel(b, "cbfree_touch", _Touch())
    got: list = []
    done = threading.Event()

    def cb(status):
        try:
            b.mem_free(d)
        except CudaError as e:
            got.append((status, e.code))
        done.set()

    with b._lock:  # the host's sync finds the fault first and drops the callback
        _launch(b, f, d, 64)
        b.stream_add_callback(LEGACY, cb)
        with pytest.raises(CudaError, match="ILLEGAL_ADDRESS"):
            b.ctx_synchronize()
    assert done.wait(TIMEOUT)
    assert got == [(700, 800)]


def test_the_callback_runs_on_a_driver_thread_even_when_a_sync_reaches_it_first():
    b = _backend()
    where: list = []
    done = threading.Event()
    with b._lock:  # the callback's thread waits: this thread's sync reaches the callback first
        b.stream_add_callback(LEGACY, lambda status: (where.append(threading.current_thread()),
                                                       done.set()))
        b.stream_synchronize(LEGACY)
        assert done.is_set()  # the sync returned after the callback, as CUDA's does
    assert where and where[0] is not threading.current_thread()
    assert where[0].name == "gpuarray-sim-callback"


def test_other_threads_call_the_driver_while_a_callback_runs():
    b = _backend()
    ctx = b.ctx_get_current()
    started, other_done = threading.Event(), threading.Event()
    seen: list = []

    def cb(status):
        started.set()
        seen.append(other_done.wait(TIMEOUT))

    def other():
        started.wait(TIMEOUT)
        b.ctx_set_current(ctx)
        b.mem_alloc(64)  # needs the simulator's lock
        b.stream_synchronize(b.stream_create())
        other_done.set()

    t = threading.Thread(target=other)
    t.start()
    b.stream_add_callback(LEGACY, cb)
    b.stream_synchronize(LEGACY)
    t.join(TIMEOUT)
    assert seen == [True], "a host call of another thread waited for the callback"


def _on_thread(b, fn) -> threading.Thread:
    """Run ``fn`` on a new thread with this thread's context current there."""
    ctx = b.ctx_get_current()

    def body():
        b.ctx_set_current(ctx)
        fn()

    t = threading.Thread(target=body)
    t.start()
    return t


class _Gate:
    """A host callback that says it started, then holds its stream until released."""

    def __init__(self, log: list | None = None) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.log = log

    def __call__(self, status: int) -> None:
        self.started.set()
        self.release.wait(TIMEOUT)
        if self.log is not None:
            self.log.append("callback")


@pytest.mark.parametrize("started_first", [True, False])
def test_work_queued_after_a_callback_waits_for_it_to_return(started_first):
    b = _backend(max_queue=4)  # the queue overflows: GPU progress must stop at the callback
    log: list = []
    f = _kernel(b, "cbfree_record", _Record(log))
    gate = _Gate(log)
    _launch(b, f, 1, 0)
    b.stream_add_callback(LEGACY, gate)
    if started_first:
        assert gate.started.wait(TIMEOUT)
    for i in range(2, 12):
        _launch(b, f, i, 0)
    syncer = _on_thread(b, b.ctx_synchronize)
    assert gate.started.wait(TIMEOUT)
    syncer.join(0.3)
    assert syncer.is_alive() and log == ["kernel 1"], log
    gate.release.set()
    syncer.join(TIMEOUT)
    assert log == ["kernel 1", "callback"] + [f"kernel {i}" for i in range(2, 12)]


@pytest.mark.parametrize("call", ["ctx_synchronize", "mem_free", "stream_synchronize"])
def test_a_sync_waits_for_a_callback_already_running(call):
    b = _backend()
    d = b.mem_alloc(16)
    log: list = []
    gate = _Gate(log)
    b.stream_add_callback(LEGACY, gate)
    assert gate.started.wait(TIMEOUT)  # running: no longer queued, not yet done
    sync = {"ctx_synchronize": b.ctx_synchronize, "mem_free": lambda: b.mem_free(d),
            "stream_synchronize": lambda: b.stream_synchronize(LEGACY)}[call]
    t = _on_thread(b, lambda: (sync(), log.append("synced")))
    t.join(0.3)
    assert t.is_alive() and log == [], log
    gate.release.set()
    t.join(TIMEOUT)
    assert log == ["callback", "synced"]


@pytest.mark.parametrize("query", ["stream_query", "event_query"])
def test_a_query_is_not_ready_while_a_callback_runs_and_never_waits_for_it(query):
    # CUDA answers CUDA_ERROR_NOT_READY at once; waiting for the callback
    # would deadlock a thread that polls while the callback waits for it.
    b = _backend()
    ev = b.event_create()
    answers: list = []
    gate = _Gate()
    b.stream_add_callback(LEGACY, gate)
    b.event_record(ev, LEGACY)
    ask = {"stream_query": lambda: b.stream_query(LEGACY), "event_query": lambda: b.event_query(ev)}[query]
    for wait_started in (False, True):  # queued, then running
        if wait_started:
            assert gate.started.wait(TIMEOUT)
        t = _on_thread(b, lambda: answers.append(ask()))
        t.join(TIMEOUT / 3)
        assert not t.is_alive(), f"{query} waited for a host callback"
    assert answers == [False, False]
    gate.release.set()
    b.stream_synchronize(LEGACY)
    assert ask() is True


def _callback_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gpuarray-sim-callback"]


def test_callbacks_share_one_driver_thread_per_context_in_stream_order():
    b = _backend(devices=2)
    c0, c1 = b.ctx_get_current(), b.primary_ctx_retain(1)
    n = 300
    ran: dict[int, list] = {0: [], 1: [], 2: []}
    threads: dict[int, set] = {0: set(), 1: set(), 2: set()}
    done = threading.Event()

    def cb(key, i):
        def fn(status):
            ran[key].append(i)
            threads[key].add(threading.current_thread())
            if all(len(v) == n for v in ran.values()):
                done.set()
        return fn

    before = len(_callback_threads())
    with b._lock:  # nothing runs until every callback is queued
        s0 = b.stream_create()
        for i in range(n):
            b.stream_add_callback(LEGACY, cb(0, i))
            b.stream_add_callback(s0, cb(1, i))
        b.ctx_set_current(c1)
        for i in range(n):
            b.stream_add_callback(LEGACY, cb(2, i))
        b.ctx_set_current(c0)
        assert len(_callback_threads()) - before <= 2  # one per context, not one per callback
    assert done.wait(TIMEOUT)
    assert all(v == list(range(n)) for v in ran.values())
    assert threads[0] == threads[1] and len(threads[0]) == 1  # device 0's thread
    assert len(threads[2]) == 1 and threads[2] != threads[0]  # device 1 has its own


# ---------------------------------------- 2. a free reports its own faults
def _poison_device_1(b):
    """Queue an out-of-bounds kernel on device 1 (not yet run); back to device 0."""
    c0 = b.ctx_get_current()
    b.ctx_set_current(b.primary_ctx_retain(1))
    d1 = b.mem_alloc(16)
    _launch(b, _kernel(b, "cbfree_touch", _Touch()), d1, 64)
    b.ctx_set_current(c0)
    return d1


def _device_1_reports_its_fault(b):
    c0 = b.ctx_get_current()
    b.ctx_set_current(b._contexts[1].handle)
    with pytest.raises(CudaError, match="ILLEGAL_ADDRESS"):
        b.ctx_synchronize()
    with pytest.raises(CudaError, match="sticky"):
        b.mem_alloc(16)
    b.ctx_set_current(c0)


@pytest.mark.parametrize("kind", ["device", "pinned"])
def test_a_free_in_a_healthy_context_does_not_report_another_contexts_fault(kind):
    b = _backend(devices=2)
    if kind == "device":
        ptr = b.mem_alloc(64)
        free, used = b.mem_free, lambda: b.memory.used[0]
    else:
        ptr = b.mem_host_alloc(64)
        free, used = b.mem_free_host, lambda: b.memory.find(ptr) is not None and b.memory.find(ptr).alive
    before = used()
    _poison_device_1(b)
    free(ptr)  # device 0 is healthy: it frees, and reports nothing
    assert used() != before
    assert b.memory.find(ptr) is None or not b.memory.find(ptr).alive
    b.ctx_synchronize()
    _device_1_reports_its_fault(b)  # the fault is not lost: device 1 still reports it


def test_a_free_still_reports_a_fault_of_its_own_context():
    b = _backend(devices=2)
    d = b.mem_alloc(16)
    _launch(b, _kernel(b, "cbfree_touch", _Touch()), d, 64)
    with pytest.raises(CudaError, match="ILLEGAL_ADDRESS") as e:
        b.mem_free(b.mem_alloc(16))
    assert e.value.call == "cuMemFree"


def test_a_free_waits_for_peer_work_that_reads_the_allocation():
    # A kernel on device 1 (peer access enabled) still queued when device 0
    # frees the memory it reads: the free runs it first, so it does not fault.
    b = _backend(devices=2)
    c0 = b.ctx_get_current()
    d0 = b.mem_alloc(16)
    b.memset_d8_async(d0, 7, 16, LEGACY)
    b.ctx_synchronize()
    c1 = b.primary_ctx_retain(1)
    b.ctx_set_current(c1)
    b.ctx_enable_peer_access(c0)
    _launch(b, _kernel(b, "cbfree_touch", _Touch()), d0, 16)
    b.ctx_set_current(c0)
    b.mem_free(d0)
    b.ctx_set_current(c1)
    b.ctx_synchronize()  # no use-after-free fault on device 1


def test_free_of_pinned_memory_in_use_by_another_device_waits_for_it():
    b = _backend(devices=2)
    c0 = b.ctx_get_current()
    host = b.mem_host_alloc(16)
    view = np.ctypeslib.as_array((ctypes.c_uint8 * 16).from_address(host))
    view[:] = 5
    b.ctx_set_current(b.primary_ctx_retain(1))
    d1 = b.mem_alloc(16)
    b.memcpy_htod_async(d1, host, 16, LEGACY)  # device 1 reads the page-locked buffer
    b.ctx_set_current(c0)
    b.mem_free_host(host)  # must let that copy finish first
    b.ctx_set_current(b._contexts[1].handle)
    out = np.zeros(16, np.uint8)
    b.memcpy_dtoh_async(out.ctypes.data, d1, 16, LEGACY)
    assert out.tolist() == [5] * 16
