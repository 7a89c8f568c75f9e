"""The simulator's stream, event and host-callback calls.

One concern: the ``cuStream*`` and ``cuEvent*`` calls of the driver
interface on the scheduler of ``_sched.py`` -- creation and destruction,
queries and synchronisation (which run queued work and report its faults),
cross-stream waits, event timing, and ``cuStreamAddCallback``, whose host
function a driver thread calls once the stream reaches it, as CUDA's
callback thread does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ...errors import CudaError
from .._base import STREAM_LEGACY, STREAM_PER_THREAD
from . import _sticky
from ._core import ILLEGAL_ADDRESS, INVALID_HANDLE, NOT_READY, SimCore, _locked
from ._hostfn import Worker, call_host_fn
from ._hostfn import _state as _hostfn_state
from ._memory import DeviceFault
from ._sched import Op, SimEvent, SimStream

#: ``CUDA_ERROR_UNKNOWN``: the status of a host function after work that failed
#: with something other than a CUDA error (a bug of a reference kernel).
UNKNOWN = 999


class SimStreamCalls(SimCore):
    """Stream, event and host-callback calls of the simulator."""

    # ------------------------------------------------------------- streams
    @_locked
    def stream_create(self, non_blocking: bool = False, priority: int = 0) -> int:
        ctx = self._current("cuStreamCreate")
        self._fault("stream", "cuStreamCreate")
        h = self._handle()
        s = self.sched.new_stream(h, ctx, "non_blocking" if non_blocking else "blocking")
        self._streams[h] = s
        return h

    @_locked
    def stream_destroy(self, stream: int) -> None:
        if stream in (0, STREAM_LEGACY, STREAM_PER_THREAD):
            raise CudaError(INVALID_HANDLE, "cuStreamDestroy", f"cannot destroy default stream {stream}")
        s = self._stream(stream, "cuStreamDestroy")
        del self._streams[stream]
        self.sched.forget_stream(s)

    @_locked
    def stream_query(self, stream: int) -> bool:
        s = self._stream(stream, "cuStreamQuery")
        return s.tail is None or self._query(s.tail, "cuStreamQuery")

    @_locked
    def stream_synchronize(self, stream: int) -> None:
        s = self._stream(stream, "cuStreamSynchronize")
        if s.tail is not None:
            self._complete(s.tail, "cuStreamSynchronize")
        self.sched.host_observes(s.vc)

    @_locked
    def stream_wait_event(self, stream: int, event: int) -> None:
        s = self._stream(stream, "cuStreamWaitEvent")
        ev = self._event(event, "cuStreamWaitEvent")
        if ev.op is None:
            return
        self.sched.enqueue(s, None, "cuStreamWaitEvent", extra_deps=[ev.op], extra_vc=ev.vc)

    @_locked
    def stream_get_ctx(self, stream: int) -> int:
        return self._stream(stream, "cuStreamGetCtx").ctx.handle

    # -------------------------------------------------------------- events
    def _event(self, event: int, call: str) -> SimEvent:
        ev = self._events.get(event)
        if ev is None:
            raise CudaError(INVALID_HANDLE, call, f"event 0x{int(event):x} does not exist (destroyed?)")
        _sticky.check(ev.ctx, call)
        return ev

    @_locked
    def event_create(self, timing: bool = True, interprocess: bool = False) -> int:
        ctx = self._current("cuEventCreate")
        self._fault("stream", "cuEventCreate")
        h = self._handle()
        self._events[h] = SimEvent(h, timing, ctx)
        return h

    @_locked
    def event_destroy(self, event: int) -> None:
        self._event(event, "cuEventDestroy")
        del self._events[event]

    @_locked
    def event_record(self, event: int, stream: int) -> None:
        ev = self._event(event, "cuEventRecord")
        s = self._stream(stream, "cuEventRecord")
        if ev.ctx is not None and s.ctx is not ev.ctx:  # cuda.h: "must be from the same context"
            raise CudaError(INVALID_HANDLE, "cuEventRecord",
                            f"event of device {ev.ctx.device}, stream of device {s.ctx.device}")
        ev.op = self.sched.enqueue(s, None, "cuEventRecord")
        ev.vc = dict(ev.op.vc)

    @_locked
    def event_query(self, event: int) -> bool:
        ev = self._event(event, "cuEventQuery")
        return ev.op is None or self._query(ev.op, "cuEventQuery")

    @_locked
    def event_synchronize(self, event: int) -> None:
        ev = self._event(event, "cuEventSynchronize")
        if ev.op is not None:
            self._complete(ev.op, "cuEventSynchronize")

    @_locked
    def event_elapsed_time(self, start: int, end: int) -> float:
        a = self._event(start, "cuEventElapsedTime")
        b = self._event(end, "cuEventElapsedTime")
        if not (a.timing and b.timing):
            raise CudaError(INVALID_HANDLE, "cuEventElapsedTime", "an event was created without timing")
        if a.op is None or b.op is None:
            raise CudaError(INVALID_HANDLE, "cuEventElapsedTime", "an event was never recorded")
        if not (a.op.done and b.op.done):
            raise CudaError(NOT_READY, "cuEventElapsedTime", "an event has not completed")
        return (b.op.t_done - a.op.t_done) * 1000.0

    # -------------------------------------------------------- host callbacks
    @_locked
    def stream_add_callback(self, stream: int, fn: Callable[[int], None]) -> None:
        call = "cuStreamAddCallback"
        s = self._stream(stream, call)
        if not callable(fn):
            raise TypeError(f"{call}: the callback must be callable, got {type(fn).__name__}")
        desc = f"{call} host function {getattr(fn, '__name__', fn)!r}"
        before = _hostfn_state.adding
        _hostfn_state.adding = True  # see _hostfn.adding: a collection in here must not wait for it
        try:
            op = self.sched.enqueue(s, None, desc, host_fn=True)
            # The GPU makes progress without the host: the context's driver
            # thread runs the stream up to the callback and calls it, as CUDA's
            # callback thread does (submitted under the lock: in queue order).
            worker = self._host_fn_workers.get(id(s.ctx))
            if worker is None:
                worker = self._host_fn_workers[id(s.ctx)] = Worker()
            worker.submit(functools.partial(self._run_host_fn, s, op, fn))
        finally:
            _hostfn_state.adding = before

    def _run_host_fn(self, s: SimStream, op: Op, fn: Callable[[int], None]) -> None:
        status = 0
        started = False
        with self._lock:
            while not op.done and not all(d.done for d in op.deps):
                try:
                    for d in list(op.deps):
                        self.sched.complete(d)
                except Exception as f:
                    # Earlier work failed (an illegal address, or a reference
                    # kernel's CudaError): the callback gets the error status.
                    # A sticky fault poisons the context here, as a sync would
                    # (its next call reports it); any other stays on the stream
                    # for the host's next sync of it. It never vanishes here.
                    if isinstance(f, (DeviceFault, CudaError)):
                        code, detail = f.code, f.detail
                    else:
                        code, detail = UNKNOWN, repr(f)
                    status = status or code
                    if self._poison_if_sticky(code, detail):
                        break

                    def refault(f: BaseException = f) -> None:
                        raise f

                    self.sched.enqueue(s, refault, "fault of work before a host callback")
            # Claimed, the callback leaves the queue: nothing else runs it,
            # and work after it waits until ``finish`` (each sync waits on
            # the scheduler's condition, releasing the lock).
            started = self.sched.claim(op)
            if not started:
                # A sticky fault dropped the context's queued work, this
                # callback with it (here or in another thread's sync): CUDA
                # still calls a stream callback, with the persistent error.
                status = status or (s.ctx.sticky[0] if s.ctx.sticky else ILLEGAL_ADDRESS)
        try:
            call_host_fn(fn, status)  # without the lock: other threads' calls go on
        finally:
            if started:
                with self._lock:
                    self.sched.finish(op)
