"""Errors of finalizers: remembered, then raised by the next call.

Resources (device and page-locked memory, streams, events, IPC mappings) are
released by weak-reference callbacks (:func:`weakref.finalize`) or, for
MemoryPointer, its ``__del__``, which the garbage collector
may run at any point of any thread.  Python cannot raise from there: an
exception would only be printed as "Exception ignored" and every later call
would succeed -- a lost fault.  That matters because a release is often a
synchronisation point (``cuMemFree`` and ``cuMemFreeHost`` wait for the
device), so it is where an asynchronous device fault shows up first.

So every release callback runs through :func:`run_finalizer`, which keeps
the first exception (later ones become notes on it) in this module, the
driver-facing layer, so it works the same with both backends.  The device
layer's ``Device.activate()`` -- which every operation of gpuarray enters
before it calls the driver -- calls :func:`raise_pending`: the next call of
gpuarray, on any thread, raises the remembered error (once).

Code that releases resources (finalizers, the deferred-free queue) runs
inside :func:`cleanup`, where :func:`raise_pending` does nothing: a pending
error must never stop a release half-way and leak what it had still to free.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["run_finalizer", "remember", "raise_pending", "cleanup", "take_pending", "call_now",
           "host_callback", "in_host_callback", "hand_to_reaper"]

#: The remembered errors; the first one is raised, the others are notes on it.
#: A plain list so that the hot path's test (``if _pending:``) is one load.
_pending: list[BaseException] = []
_lock = threading.Lock()


class _ThreadState(threading.local):
    """This module's per-thread state; the class attributes are every thread's start.

    (Reading a missing attribute with ``getattr(local, name, default)``
    raises and catches an AttributeError inside: ~0.4 us, on every release
    of a thread that never set it.)
    """

    depth = 0  # cleanup() nesting
    callback = False  # inside a CUDA host callback


_tls = _ThreadState()


class _Cleanup:
    """The context manager of :func:`cleanup` (a class: a generator costs ~1 us more a release)."""

    __slots__ = ("_depth",)

    def __enter__(self) -> None:
        self._depth = depth = _tls.depth
        _tls.depth = depth + 1

    def __exit__(self, *exc: object) -> None:
        _tls.depth = self._depth


def cleanup() -> _Cleanup:
    """Run a release: :func:`raise_pending` does nothing inside, on this thread."""
    return _Cleanup()


def remember(exc: BaseException) -> None:
    """Keep ``exc`` for the next call to raise (the first one wins)."""
    with _lock:
        if not _pending:
            _pending.append(exc)
            return
        first = _pending[0]
    add_note = getattr(first, "add_note", None)  # Python 3.11+
    if add_note is not None and exc is not first:
        add_note(f"another release failed while this error was pending: {type(exc).__name__}: {exc}")


def run_finalizer(fn: Callable[..., Any], *args: Any) -> None:
    """Call ``fn(*args)`` as a release; an exception is remembered, not lost.

    On a host-callback thread (:func:`host_callback`), where CUDA refuses
    every call, the release is handed to the reaper thread instead.
    """
    if _tls.callback:
        hand_to_reaper(functools.partial(fn, *args))
        return
    depth = _tls.depth  # cleanup(), inlined: this runs once a release
    _tls.depth = depth + 1
    try:
        fn(*args)
    except Exception as e:  # raised by the next call, see the module docstring
        remember(e)
    finally:
        _tls.depth = depth


def take_pending() -> BaseException | None:
    """Forget and return the remembered error (None when there is none)."""
    with _lock:
        if not _pending:
            return None
        exc = _pending.pop(0)
        _pending.clear()
    return exc


def raise_pending() -> None:
    """Raise the remembered error, if any (nothing inside :func:`cleanup`)."""
    if _pending and not _tls.depth:
        exc = take_pending()
        if exc is not None:
            add_note = getattr(exc, "add_note", None)
            if add_note is not None:
                add_note("first raised while releasing a resource in a finalizer "
                         "(garbage collection); raised by the next gpuarray call")
            raise exc


def call_now(fin: Any) -> None:
    """Run a ``weakref.finalize(obj, run_finalizer, fn, *args)`` now, raising its error.

    (Or anything with the same ``detach()``.)

    For explicit releases (``free()``, ``close()``): the caller is there to
    see the exception, so it propagates instead of being remembered.
    """
    info = fin.detach()
    if info is not None:
        _, _run, args, _kwargs = info
        with cleanup():
            args[0](*args[1:])


# ------------------------------------------------------------ host callbacks
# CUDA runs stream callbacks (cuStreamAddCallback) on a driver thread where
# every CUDA call fails with CUDA_ERROR_NOT_PERMITTED.  A garbage collection
# can start there (any allocation may trigger one) and collect gpuarray
# objects: their releases must not run there, nor be lost.  gpuarray's host
# functions mark the thread while the user's callback runs; releases on a
# marked thread go to the reaper, a thread of ours, which runs them (and
# drops references handed to it) with the same error handling.


class _HostCallback:
    """The context manager of :func:`host_callback`."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = _tls.callback
        _tls.callback = True

    def __exit__(self, *exc: object) -> None:
        _tls.callback = self._before


def host_callback() -> _HostCallback:
    """Mark this thread as running a CUDA host callback (releases go to the reaper)."""
    return _HostCallback()


def in_host_callback() -> bool:
    """Whether this thread runs a CUDA host callback now (see :func:`host_callback`)."""
    return _tls.callback


_thread_setup: list[Callable[[], None]] = []


def add_thread_setup(setup: Callable[[], None]) -> None:
    """Run ``setup()`` first in each helper thread gpuarray starts (the reaper), once each.

    For a backend whose work needs it: the simulator blocks asynchronous signals
    there, so that they reach the main thread, which holds them back while it
    runs device work (gpuarray_sim).
    """
    if setup not in _thread_setup:
        _thread_setup.append(setup)

_reaper_queue: queue.SimpleQueue = queue.SimpleQueue()
_reaper_lock = threading.Lock()
_reaper: threading.Thread | None = None


def _reap() -> None:
    for setup in _thread_setup:
        setup()
    while True:
        item = _reaper_queue.get()
        if isinstance(item, list):
            item.clear()  # releases, if these were the last references, run here
        else:
            run_finalizer(item)
        del item


def hand_to_reaper(item: list | Callable[[], Any]) -> None:
    """Release on the reaper thread: a list's references are dropped, a callable is run.

    The callable runs through :func:`run_finalizer` there (its error is
    remembered and raised by the next call).
    """
    global _reaper
    if _reaper is None:
        with _reaper_lock:
            if _reaper is None:
                _reaper = threading.Thread(target=_reap, daemon=True, name="gpuarray-reaper")
                _reaper.start()
    _reaper_queue.put(item)
