"""The simulator serves thread-local driver calls as a driver does: no global lock, no collector pause.

A driver keeps a thread's capture mode and its context stack in thread-local
storage: ``cuThreadExchangeStreamCaptureMode`` and ``cuCtxGetCurrent`` /
``cuCtxSetCurrent`` never wait for another thread's call.  gpuarray makes the
capture-mode exchange twice around every allocation (the relaxed switch), so
on the simulator these calls take neither its lock nor the garbage-collection
pause that comes with it (``sim/_lock.py``: :data:`THREAD_LOCAL_CALLS`).  The
pause is taken only with the lock (``SimLock.acquire``), so a call that
completes while another thread holds the lock paused nothing.
"""

from __future__ import annotations

import gc
import threading

import pytest
from gpuarray_sim import SimBackend, _lock
from gpuarray_sim._hostfn import CALL_NAMES

from gpuarray.errors import CudaError

TIMEOUT = 30


def _backend() -> tuple[SimBackend, int]:
    b = SimBackend()
    b.init()
    ctx = b.primary_ctx_retain(0)
    b.ctx_set_current(ctx)
    return b, ctx


def _calls(b: SimBackend, ctx: int) -> dict[str, object]:
    """Every thread-local call, with arguments that succeed on a thread with ``ctx`` current."""
    return {
        "exchange_capture_mode": lambda: b.exchange_capture_mode("relaxed"),
        "ctx_get_current": b.ctx_get_current,
        "ctx_set_current": lambda: b.ctx_set_current(ctx),
        "ctx_push_current": lambda: b.ctx_push_current(ctx),
        "ctx_pop_current": b.ctx_pop_current,
        "ctx_get_device": b.ctx_get_device,
    }


def test_every_thread_local_call_is_a_driver_call_of_the_interface():
    assert _lock.THREAD_LOCAL_CALLS <= set(CALL_NAMES) | {"ctx_push_current", "ctx_pop_current"}
    for name in _lock.THREAD_LOCAL_CALLS:
        assert callable(getattr(SimBackend, name)), name


def test_thread_local_calls_complete_while_another_thread_holds_the_simulators_lock():
    b, ctx = _backend()
    calls = _calls(b, ctx)
    assert set(calls) == _lock.THREAD_LOCAL_CALLS
    held, release = threading.Event(), threading.Event()

    def hold():
        with b._lock:  # another thread inside a simulated call
            held.set()
            release.wait(TIMEOUT)

    holder = threading.Thread(target=hold)
    holder.start()
    done: list[str] = []
    errors: list[BaseException] = []

    def worker():
        try:
            b.ctx_set_current(ctx)
            for name, call in calls.items():
                call()
                assert _lock.paused()  # the holder's pause, not undone by these calls
                done.append(name)
        except BaseException as e:  # noqa: BLE001 -- reported by the assertion
            errors.append(e)

    try:
        assert held.wait(TIMEOUT)
        t = threading.Thread(target=worker)
        t.start()
        t.join(TIMEOUT)  # a locked call would wait here until the holder lets go
        finished = not t.is_alive()
    finally:
        release.set()
        holder.join(TIMEOUT)
    assert finished, f"blocked behind the simulator's lock after {done}"
    assert not errors, errors
    assert done == list(calls)


class _Watched:
    """The simulator's lock, recording every entry (the collector's pause comes with one)."""

    def __init__(self, lock) -> None:
        self.lock, self.entries = lock, 0

    def __enter__(self):
        self.entries += 1
        return self.lock.__enter__()

    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)


def test_thread_local_calls_neither_lock_nor_pause_the_collector():
    b, ctx = _backend()
    watched = b._lock = _Watched(b._lock)
    was = gc.get_threshold()
    gc.set_threshold(700)
    try:
        for call in _calls(b, ctx).values():
            call()
        assert watched.entries == 0
        b.mem_free(b.mem_alloc(8))  # a locked call, for contrast: the watch sees it
        assert watched.entries == 2
        assert gc.get_threshold()[0] == 700 and not _lock.paused()
    finally:
        gc.set_threshold(*was)


def test_each_thread_keeps_its_own_capture_mode_and_context():
    b, ctx = _backend()
    assert b.exchange_capture_mode("relaxed") == "global"
    barrier = threading.Barrier(2, timeout=TIMEOUT)
    seen: dict[str, object] = {}

    def other():
        seen["ctx"] = b.ctx_get_current()  # none on a new thread
        seen["mode"] = b.exchange_capture_mode("thread_local")  # the default, not main's
        barrier.wait()  # main's exchange below happens while this thread's mode is set
        barrier.wait()
        seen["mode after"] = b.exchange_capture_mode("global")

    t = threading.Thread(target=other)
    t.start()
    barrier.wait()
    assert b.exchange_capture_mode("global") == "relaxed"  # main's own, untouched by the other
    barrier.wait()
    t.join(TIMEOUT)
    assert seen == {"ctx": 0, "mode": "global", "mode after": "thread_local"}
    assert b.ctx_get_current() == ctx


def test_a_thread_local_call_reentered_inside_a_locked_call_sees_the_threads_state():
    # A finalizer (an explicit collection) or a signal handler may run one in
    # the middle of a locked call on the same thread: no lock to re-enter.
    b, ctx = _backend()
    with b._lock:
        prev = b.exchange_capture_mode("relaxed")
        assert b.exchange_capture_mode(prev) == "relaxed"
        assert b.ctx_get_current() == ctx


def test_bad_mode_is_refused_without_the_lock():
    b, _ = _backend()
    with pytest.raises(CudaError, match="cuThreadExchangeStreamCaptureMode") as e:
        b.exchange_capture_mode("sometimes")
    assert e.value.code == 1  # CUDA_ERROR_INVALID_VALUE
    assert b.exchange_capture_mode("global") == "global"  # unchanged by the refused call


def test_the_relaxed_allocation_switches_the_threads_mode_inline_and_restores_it():
    # The simulator's mem_alloc_relaxed does the two mode exchanges on the
    # thread's own state (no wrapper, no lock): another thread's global capture
    # is not invalidated (a plain cuMemAlloc in global mode would invalidate
    # it), and the thread's mode is back to what it was.
    b, ctx = _backend()
    s = b.stream_create(non_blocking=True)
    errors: list[BaseException] = []
    begun, done = threading.Event(), threading.Event()

    def capture():
        try:
            b.ctx_set_current(ctx)
            b.stream_begin_capture(s, "global")
            begun.set()
            done.wait(TIMEOUT)
            b.graph_destroy(b.stream_end_capture(s))
        except BaseException as e:  # noqa: BLE001 -- reported by the assertion
            errors.append(e)
            begun.set()

    t = threading.Thread(target=capture)
    t.start()
    try:
        assert begun.wait(TIMEOUT)
        ptr = b.mem_alloc_relaxed(64)
        assert b.exchange_capture_mode("global") == "global"  # restored
        assert b.stream_capture_info(s)[0] == "active"  # not invalidated
    finally:
        done.set()
        t.join(TIMEOUT)
    assert not errors, errors  # the capture ended normally: it was never invalidated
    b.exchange_capture_mode("relaxed")
    b.mem_free(ptr)
    b.exchange_capture_mode("global")


def test_the_relaxed_allocation_inside_a_host_function_is_refused_as_the_mode_exchange(monkeypatch):
    from gpuarray_sim import _hostfn

    b, _ = _backend()
    monkeypatch.setattr(_hostfn._state, "active", True)
    with pytest.raises(CudaError, match="cuThreadExchangeStreamCaptureMode") as e:
        b.mem_alloc_relaxed(64)
    assert e.value.code == 800  # CUDA_ERROR_NOT_PERMITTED
