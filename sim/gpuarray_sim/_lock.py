"""The simulator's lock, and no garbage collection while a thread holds it.

One concern: keeping each simulated driver call -- and the device work the
simulator runs on the calling thread -- atomic with respect to the host code
that the garbage collector runs.  Any allocation of a Python object may start
a collection, and a collection runs finalizers: host code, which in gpuarray,
numba-cuda and cuda.core releases memory, streams and events through the
driver (``cuMemFree`` synchronises).  Inside the simulator, such a call would
enter it again on the same thread (its lock is reentrant) in the middle of
another call or of device work (an op's function, ``_sched.py``), with the
simulator's state half-updated: a synchronisation there ran the op in progress
a second time (``KeyError`` in ``Scheduler._execute``), or freed memory that
op was still using (a sticky ``CUDA_ERROR_ILLEGAL_ADDRESS`` in a context whose
program did nothing wrong).

A driver is C: no Python runs inside a driver call, so on a GPU a finalizer's
call comes before or after any other call of its thread, never inside it, and
the device work that call waits for finishes on the device meanwhile.  The
simulator gets the same order by pausing automatic collection while any
thread holds a simulator's lock (:class:`SimLock`): garbage found meanwhile is
collected, and its finalizers run, at the first collection after the lock is
released -- host code between driver calls, as on a GPU.  A thread waiting
inside a call for a host function releases the lock (``Condition.wait``), and
collection resumes meanwhile if no other thread holds a simulator's lock.

The pause sets the first generation's threshold to 0 (which turns automatic
collection off, as ``gc.set_threshold`` documents) and puts it back after,
rather than ``gc.disable()`` / ``gc.enable()``: the collector's switch stays
the program's own.  A ``gc.disable()`` another thread makes during a
simulated call survives the call (before, the end of the pause switched the
collector back on), and a ``gc.enable()`` made then does not start
collections inside the call.

What a program sees: ``gc.get_threshold()[0]`` is 0 during simulated driver
calls, on every thread, and ``gc.isenabled()`` is whatever the program set; a
threshold another thread sets during a call is kept (except a threshold of 0,
which cannot be told from the pause's own); an explicit ``gc.collect()`` still
collects at once (a driver call re-entered that way never runs device work a
second time: ``Scheduler.complete``).  Calls that only read or write the
calling thread's state (:data:`THREAD_LOCAL_CALLS`) take no lock and pause
nothing, as a driver serves them from thread-local state.
"""

from __future__ import annotations

import gc
import os
import threading

__all__ = ["SimLock", "THREAD_LOCAL_CALLS"]

#: The driver interface's calls that only read or write the calling thread's
#: state (its capture mode, its current context and the stack below it): a
#: driver serves them from thread-local storage, and the simulator without its
#: lock and without pausing the collector (``_core._api``; checked by
#: ``sim/tests/backend/test_sim_thread_local.py``).
THREAD_LOCAL_CALLS = frozenset({
    "exchange_capture_mode",  # cuThreadExchangeStreamCaptureMode
    "ctx_get_current",        # cuCtxGetCurrent
    "ctx_set_current",        # cuCtxSetCurrent
    "ctx_push_current",       # cuCtxPushCurrent
    "ctx_pop_current",        # cuCtxPopCurrent
    "ctx_get_device",         # cuCtxGetDevice
})

_guard = threading.RLock()  # reentrant: a signal handler may run in between
_holders = 0  # simulator locks held now, all threads and simulators together
_saved = 0  # the first generation's threshold the pause replaced with 0 (0: not paused here)


def _pause() -> None:
    global _holders, _saved
    with _guard:
        if _holders == 0:
            threshold = gc.get_threshold()[0]
            if threshold:  # else the program keeps automatic collection off itself
                gc.set_threshold(0)
                _saved = threshold
        _holders += 1


def _resume() -> None:
    global _holders, _saved
    with _guard:
        _holders -= 1
        if _holders == 0 and _saved:
            # A threshold another thread set meanwhile is the program's: it stays.
            if gc.get_threshold()[0] == 0:
                gc.set_threshold(_saved)
            _saved = 0


def paused() -> bool:
    """Whether a simulator's lock holds automatic garbage collection off now."""
    return bool(_saved)


class SimLock:
    """A reentrant lock that pauses automatic garbage collection while held (see the module).

    Usable as ``threading.Condition``'s lock: a wait releases it completely
    and resumes collection, and the reacquire pauses it again.
    """

    __slots__ = ("_lock", "_depth")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # the owner's nesting; only the owner changes it

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        if self._depth == 0:
            _pause()
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            _resume()
        self._lock.release()

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self.release()

    # threading.Condition's protocol for reentrant locks
    def _is_owned(self) -> bool:
        return self._lock._is_owned()  # type: ignore[attr-defined]

    def _release_save(self) -> tuple[object, int]:
        depth, self._depth = self._depth, 0
        _resume()
        return self._lock._release_save(), depth  # type: ignore[attr-defined]

    def _acquire_restore(self, saved: tuple[object, int]) -> None:
        state, depth = saved
        self._lock._acquire_restore(state)  # type: ignore[attr-defined]
        _pause()
        self._depth = depth


def _after_fork_in_child() -> None:
    # Only the forking thread lives on: the locks other threads held are
    # theirs (a forked child's simulator refuses every call before its lock),
    # and the collector they paused must run again here.
    global _guard, _holders, _saved
    _guard = threading.RLock()
    _holders = 0
    if _saved:
        if gc.get_threshold()[0] == 0:
            gc.set_threshold(_saved)
        _saved = 0


if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
