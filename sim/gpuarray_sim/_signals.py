"""Asynchronous signals held back while the simulator runs device work (``_sched.py``).

One concern: where a Python signal handler may run relative to simulated
device work.  CPython runs a handler on the main thread, between two
bytecodes.  A driver is C: a handler never runs inside a driver call, so one
that calls the driver (downloads an array, say) while the main thread
synchronises runs after that synchronisation.  The simulator runs device work
in Python on the synchronising thread: a handler could run inside an op's
function, and its call could not finish before the work it interrupted
(``_sched.ReentryError``).

:func:`hold` blocks asynchronous signals on the main thread while the
scheduler runs work (``Scheduler.complete``), and restores the thread's mask
after; a signal that came meanwhile is delivered then, and its handler runs
once the work is done -- at the next bytecode, between two driver calls or
steps of one, as on a GPU.  While the thread waits for a host function (the
simulator's lock released, its state consistent) they come through
(:func:`open_for_wait`): a wait may hang (a host function waiting for the
program), and ``SIGINT``/``SIGTERM`` must still reach it then.  The simulator's own threads block those signals
for good (:func:`block_in_this_thread`): the kernel would otherwise deliver a
process-directed signal the main thread holds back to one of them, and the
main thread would run its handler inside the work all the same (gpuarray's
reaper thread blocks them too: this module registers :func:`block_in_this_thread`
with ``gpuarray._driver._finalize.add_thread_setup``).  A program's
own thread can still take such a signal -- OpenBLAS starts threads that do
not block signals in every NumPy process, so this is common -- and CPython
then runs the handler on the main thread inside the work all the same; a call
its handler makes that needs the work in progress fails then
(``ReentryError``), and leaves nothing queued behind
(``Scheduler.complete``'s ``own``); an exception it raises is the work's
error (over the stand-in, raised again in the caller once the driver call
returns: ``standin/_serve.py``).

Synchronous signals (``SIGSEGV``, ``SIGBUS``, ``SIGFPE``, ``SIGILL``,
``SIGTRAP``, ``SIGSYS``, ``SIGABRT``) are never blocked: a fault must reach
``faulthandler`` at once.  Cost: two ``pthread_sigmask`` calls (about a
microsecond) per run of work on the main thread, none on other threads.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from threading import get_ident

from gpuarray._driver import _finalize

__all__ = ["hold", "release", "block_in_this_thread"]

_SYNCHRONOUS = {getattr(signal, n) for n in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGTRAP",
                                              "SIGSYS", "SIGABRT", "SIGKILL", "SIGSTOP")
                if hasattr(signal, n)}
_SIG_BLOCK, _SIG_UNBLOCK, _SIG_SETMASK = (getattr(signal, "SIG_BLOCK", 0),
                                          getattr(signal, "SIG_UNBLOCK", 1),
                                          getattr(signal, "SIG_SETMASK", 2))
_SIGSET_BYTES = 128  # glibc's sigset_t is 128 bytes; larger than any libc's


def _asynchronous() -> set[int]:
    return {int(s) for s in signal.valid_signals()} - {int(s) for s in _SYNCHRONOUS}


def _libc_sigmask():
    """``pthread_sigmask`` of the C library, and the set of asynchronous signals; None without."""
    if not hasattr(signal, "pthread_sigmask") or os.name != "posix":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn, empty, add = libc.pthread_sigmask, libc.sigemptyset, libc.sigaddset
    except (OSError, AttributeError):
        return None
    # No argtypes, and the sets passed by a reference made once: half the
    # cost of a call with argument conversion (it runs at every sync).
    blocked = ctypes.create_string_buffer(_SIGSET_BYTES)
    empty(blocked)
    for s in sorted(_asynchronous()):
        add(blocked, s)
    return fn, ctypes.byref(blocked), blocked


_sigmask = _libc_sigmask()
_MAIN = threading.main_thread().ident
_depth = 0  # nesting of ``hold`` on the main thread
_saved_buffer = ctypes.create_string_buffer(_SIGSET_BYTES)
_saved = ctypes.byref(_saved_buffer)  # the main thread's mask before the outermost hold


def hold() -> bool:
    """Hold asynchronous signals back on the main thread (see the module); whether it did.

    Pair each True with :func:`release` (``try``/``finally``); nested holds
    cost a test each.  Two functions rather than a context manager: the
    scheduler holds them for every run of work, on the simulator's hot path.
    """
    global _depth
    if _sigmask is None or get_ident() != _MAIN:
        return False
    if _depth == 0:
        _sigmask[0](_SIG_BLOCK, _sigmask[1], _saved)
    _depth += 1
    return True


def release() -> None:
    """End a :func:`hold` that returned True; the outermost restores the thread's mask."""
    global _depth
    _depth -= 1
    if _depth == 0:
        _sigmask[0](_SIG_SETMASK, _saved, None)
        # (a signal held back was delivered there: its handler runs at the next bytecode)


def open_for_wait() -> bool:
    """Let signals through while a held main thread waits (lock released); whether it did.

    The scheduler's state is consistent then -- other threads' calls run
    meanwhile too -- so a handler may call the driver, and a hung wait stays
    interruptible (Ctrl-C).  Pair True with :func:`close_after_wait`.
    """
    if _depth == 0 or _sigmask is None or get_ident() != _MAIN:
        return False
    _sigmask[0](_SIG_SETMASK, _saved, None)
    return True


def close_after_wait() -> None:
    """Hold signals back again after :func:`open_for_wait`."""
    _sigmask[0](_SIG_BLOCK, _sigmask[1], None)


_helper = threading.local()  # ``blocked``: a helper thread of gpuarray (block_in_this_thread)


def block_in_this_thread() -> None:
    """Block asynchronous signals in the calling thread (a helper thread of gpuarray), for good."""
    if _sigmask is not None:
        fn, blocked, _ = _sigmask
        fn(_SIG_BLOCK, blocked, None)
        _helper.blocked = True


def _after_fork_in_child() -> None:
    # The forking thread is the child's main thread, its mask inherited; when
    # it was the parent's, the ``hold`` it is in (if any) restores the mask.
    # A helper thread that forked (a host function...) lets signals through
    # again: the child's main thread must get them.
    global _MAIN, _depth
    if threading.get_ident() != _MAIN:
        _MAIN = threading.get_ident()
        _depth = 0
        if getattr(_helper, "blocked", False) and _sigmask is not None:
            _sigmask[0](_SIG_UNBLOCK, _sigmask[1], None)
            _helper.blocked = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_finalize.add_thread_setup(block_in_this_thread)
