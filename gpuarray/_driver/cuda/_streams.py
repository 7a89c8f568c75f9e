"""Streams, events and host callbacks: the driver calls of the real backend."""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Callable
from typing import Any

from . import _state as S
from ._state import _ERR_NOT_READY, CallsBase, _check


class StreamCalls(CallsBase):
    """Streams, events and host callbacks: the driver calls of the real backend."""

    # -------------------------------------------------------------- streams
    def stream_create(self, non_blocking: bool = False, priority: int = 0) -> int:
        if not self._ready:
            self.init()
        flags = S._STREAM_NON_BLOCKING if non_blocking else 0
        return int(
            _check(S._d.cuStreamCreateWithPriority(flags, priority), "cuStreamCreateWithPriority")
        )

    def stream_destroy(self, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuStreamDestroy(stream), "cuStreamDestroy")

    def stream_query(self, stream: int) -> bool:
        if not self._ready:
            self.init()
        res = S._d.cuStreamQuery(stream or 1)
        if int(res[0]) == _ERR_NOT_READY:
            return False
        _check(res, "cuStreamQuery")
        return True

    def stream_synchronize(self, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuStreamSynchronize(stream or 1), "cuStreamSynchronize")

    def stream_wait_event(self, stream: int, event: int, external: bool = False) -> None:
        if not self._ready:
            self.init()
        flags = S._EVENT_WAIT_EXTERNAL if external else 0
        _check(S._d.cuStreamWaitEvent(stream or 1, event, flags), "cuStreamWaitEvent")

    def stream_get_ctx(self, stream: int) -> int:
        if not self._ready:
            self.init()
        return int(_check(S._d.cuStreamGetCtx(stream or 1), "cuStreamGetCtx"))

    # --------------------------------------------------------------- events
    def event_create(self, timing: bool = True, interprocess: bool = False) -> int:
        # CUDA requires interprocess events to disable timing: asking for both
        # is refused by the driver (CUDA_ERROR_INVALID_VALUE), not corrected here.
        if not self._ready:
            self.init()
        flags = (0 if timing else S._EVENT_DISABLE_TIMING) | (
            S._EVENT_INTERPROCESS if interprocess else 0
        )
        return int(_check(S._d.cuEventCreate(flags), "cuEventCreate"))

    def event_destroy(self, event: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuEventDestroy(event), "cuEventDestroy")

    def event_record(self, event: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuEventRecord(event, stream or 1), "cuEventRecord")

    def event_query(self, event: int) -> bool:
        if not self._ready:
            self.init()
        res = S._d.cuEventQuery(event)
        if int(res[0]) == _ERR_NOT_READY:
            return False
        _check(res, "cuEventQuery")
        return True

    def event_synchronize(self, event: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuEventSynchronize(event), "cuEventSynchronize")

    def event_elapsed_time(self, start: int, end: int) -> float:
        if not self._ready:
            self.init()
        return float(_check(S._d.cuEventElapsedTime(start, end), "cuEventElapsedTime"))

    def stream_add_callback(self, stream: int, fn: Callable[[int], None]) -> None:
        if not self._ready:
            self.init()
        token = _register_host_fn(fn)
        try:
            _check(
                S._d.cuStreamAddCallback(stream or 1, S._d.CUstreamCallback(_HOST_FN_ADDR), token, 0),
                "cuStreamAddCallback",
            )
        except BaseException:
            _host_fns.pop(token, None)  # never called: do not keep it
            raise

    def launch_host_func(self, stream: int, fn: Callable[[], None]) -> None:
        if not self._ready:
            self.init()
        with _host_fn_lock:
            token = next(_host_fn_tokens)
            _launched_fns[token] = fn  # weakly: the caller keeps it (a graph, as long as it lives)
        try:
            _check(S._d.cuLaunchHostFunc(stream or 1, S._d.CUhostFn(_LAUNCHED_FN_ADDR), token),
                   "cuLaunchHostFunc")
        except BaseException:
            _launched_fns.pop(token, None)
            raise



# Host callbacks (cuStreamAddCallback rather than cuLaunchHostFunc: the latter
# is not called at all when the context has failed, so a waiter would hang;
# the former is called with the error status).  The driver calls one ctypes
# trampoline with a token; the token names the Python callable, which is
# dropped once called.  An exception in the callable is reported by ctypes as
# unraisable ("Exception ignored on calling ctypes callback function").
_host_fns: dict[int, Callable[[int], None]] = {}
_host_fn_tokens = iter(range(1, 1 << 62))
_host_fn_lock = threading.Lock()


def _register_host_fn(fn: Callable[[int], None]) -> int:
    with _host_fn_lock:
        token = next(_host_fn_tokens)
        _host_fns[token] = fn
    return token


@ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
def _host_fn_trampoline(stream: Any, status: int, token: Any) -> None:
    fn = _host_fns.pop(int(token or 0), None)
    if fn is not None:
        fn(int(status))


_HOST_FN_ADDR = ctypes.cast(_host_fn_trampoline, ctypes.c_void_p).value

# Host functions of cuLaunchHostFunc: a host node calls its function at every
# launch of its graph, so the token stays; the function is held weakly (by
# the caller, e.g. the graph that holds the node), and its entry goes with it.
_launched_fns: weakref.WeakValueDictionary[int, Callable[[], None]] = weakref.WeakValueDictionary()


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _launched_fn_trampoline(token: Any) -> None:
    fn = _launched_fns.get(int(token or 0))
    if fn is not None:
        fn()


_LAUNCHED_FN_ADDR = ctypes.cast(_launched_fn_trampoline, ctypes.c_void_p).value
