"""The simulator's stream, event and host-callback calls.

One concern: the ``cuStream*`` and ``cuEvent*`` calls of the driver
interface on the scheduler of ``_sched.py`` -- creation and destruction,
queries and synchronisation (which run queued work and report its faults),
cross-stream waits, event timing, and ``cuStreamAddCallback`` and
``cuLaunchHostFunc``, whose host function a driver thread calls once the
stream reaches it, as CUDA's callback thread does (only the latter can be
captured).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from gpuarray._driver._base import STREAM_LEGACY, STREAM_PER_THREAD
from gpuarray.errors import CudaError

from . import _capture, _codes, _sticky
from ._capture import Node
from ._codes import ILLEGAL_ADDRESS, INVALID_HANDLE, NOT_READY, UNKNOWN
from ._codes import NOT_SUPPORTED as _NOT_SUPPORTED
from ._core import SimCore, _locked
from ._hostfn import Worker, call_host_fn
from ._hostfn import _state as _hostfn_state
from ._ipc import INVALID_VALUE as _INVALID_VALUE
from ._memory import DeviceFault
from ._sched import Op, SimEvent, SimStream, _Blocked


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
        if s.capture is not None:
            if s.capture.origin is s:  # the origin: the capture cannot end any more
                _capture.refuse(self, _codes.STREAM_CAPTURE_UNSUPPORTED, "cuStreamDestroy",
                                [s.capture], "of the stream a capture began on")
            # a stream forked into a capture (cuda.core's GraphBuilder.join destroys its
            # forks once joined): it leaves the capture; work it did not join back still
            # fails cuStreamEndCapture with ..._UNJOINED
            s.capture = None
        del self._streams[stream]
        self.sched.forget_stream(s)

    @_locked
    def stream_query(self, stream: int) -> bool:
        s = self._stream(stream, "cuStreamQuery")
        if self.sched.capturing:
            _capture.check_stream(self, s, "cuStreamQuery", "queries")
        return s.tail is None or self._query(s.tail, "cuStreamQuery")

    @_locked
    def stream_synchronize(self, stream: int) -> None:
        s = self._stream(stream, "cuStreamSynchronize")
        if self.sched.capturing:
            _capture.check_stream(self, s, "cuStreamSynchronize", "synchronizes")
        if s.tail is not None:
            self._complete(s.tail, "cuStreamSynchronize")
        self.sched.host_observes(s.vc)
        self._release_pools()

    @_locked
    def stream_wait_event(self, stream: int, event: int, external: bool = False) -> None:
        call = "cuStreamWaitEvent"
        s = self._stream(stream, call)
        ev = self._event(event, call)
        if ev.capture is not None or s.capture is not None:
            self._capture_wait(s, ev, external, call)
            return
        shared = ev.ipc
        if shared is not None and shared.latest() != shared.local:  # recorded by another process
            g = shared.latest()
            if not shared.done(g):
                self.sched.enqueue(s, lambda: shared.wait(g), f"{call} (IPC event, record {g})",
                                   extra_vc=self._ipc_seen())
            else:
                self.sched.enqueue(s, None, call, extra_vc=self._ipc_seen())
            return
        if ev.op is None:
            return
        self.sched.enqueue(s, None, call, extra_deps=[ev.op], extra_vc=ev.vc)

    def _capture_wait(self, s: SimStream, ev: SimEvent, external: bool, call: str) -> None:
        """A wait that involves a capture: a join, a fork, an external wait node, or an error."""
        cap, ecap = s.capture, ev.capture
        if ecap is not None and ecap.status != "active" and ecap.id not in self._captures:
            raise CudaError(_codes.CAPTURED_EVENT, call, f"event 0x{ev.handle:x} was last "
                                                           "recorded in a capture that has ended")
        if cap is None:  # a fork: the stream joins the capture of the event
            if ecap is None:
                return
            _capture.check_legacy(self, s, call)
            if s.kind == "legacy":
                _capture.refuse(self, _codes.STREAM_CAPTURE_IMPLICIT, call, [ecap], "joins the legacy stream to a capture")
            if ecap.status != "active":
                _capture.raise_invalidated(ecap, call)
            s.capture, s.cap_deps = ecap, list(ev.cap_deps)
            ecap.streams.append(s)
            return
        if cap.status != "active":
            _capture.raise_invalidated(cap, call)
        if ecap is cap:  # a join inside the capture
            s.cap_deps = list(dict.fromkeys([*s.cap_deps, *ev.cap_deps]))
        elif ecap is not None:
            _capture.refuse(self, _codes.STREAM_CAPTURE_MERGE, call, [cap, ecap],
                            "waits on an event of another capture")
        elif ev.op is None:
            return  # never recorded: nothing to wait for
        elif external:  # CU_EVENT_WAIT_EXTERNAL: each launch waits for the event's record then
            _capture.add_node(cap, s, Node("wait", None, f"{call} (external) on event 0x{ev.handle:x}",
                                           [], list(s.cap_deps), event=ev), call)
        else:
            _capture.refuse(self, _codes.STREAM_CAPTURE_ISOLATION, call, [cap],
                            "waits on an event recorded outside the capture (without "
                            "CU_EVENT_WAIT_EXTERNAL)")

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
        self._events[h] = ev = SimEvent(h, timing, ctx)
        ev.interprocess = interprocess
        return h

    @_locked
    def event_destroy(self, event: int) -> None:
        ev = self._event(event, "cuEventDestroy")
        del self._events[event]
        if ev.ipc is not None:
            self._ipc_events_of.forget(event)
            ev.ipc.release()
            ev.ipc = None

    # ---------------------------------------------------------- IPC events
    # Across processes through a shared record: see _ipc.py.
    @_locked
    def ipc_get_event_handle(self, event: int) -> bytes:
        """``cuIpcGetEventHandle``: the 64-byte handle of an event made with CU_EVENT_INTERPROCESS.

        Parameters
        ----------
        event : int
            An event created with ``interprocess=True`` (which needs ``timing=False``).

        Returns
        -------
        bytes
            The handle (the same for every call on the event), to open in another process.

        Raises
        ------
        CudaError
            ``CUDA_ERROR_INVALID_HANDLE`` for an unknown or destroyed event,
            ``CUDA_ERROR_INVALID_VALUE`` for one created without CU_EVENT_INTERPROCESS.
        """
        call = "cuIpcGetEventHandle"
        ev = self._event(event, call)
        if not ev.interprocess:
            raise CudaError(_INVALID_VALUE, call, f"event 0x{int(event):x} was not created with "
                            "CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING")
        handle = self._ipc_events_of.handle_of(event)
        if handle is None:
            handle, ev.ipc = self._ipc_events_of.export(event, ev.ctx.device if ev.ctx else 0)
            op = ev.op
            if op is not None:  # recorded before the export: that record is the shared one
                shared, g = ev.ipc, ev.ipc.record()
                if op.done:
                    shared.complete(g)
                else:  # a record op runs no function of its own: it now marks its generation
                    op.fn = lambda: shared.complete(g)
            self._ipc_events_of.start()
        return handle

    @_locked
    def ipc_open_event_handle(self, handle: bytes) -> int:
        """``cuIpcOpenEventHandle``: an event of the current context over another process's event.

        Parameters
        ----------
        handle : bytes
            64 bytes from :meth:`ipc_get_event_handle` in another process.

        Returns
        -------
        int
            A new event without timing; ``event_destroy`` frees it.

        Raises
        ------
        CudaError
            ``CUDA_ERROR_INVALID_VALUE`` for bytes that are no simulator event
            handle, ``CUDA_ERROR_INVALID_CONTEXT`` for a handle made in this
            process, ``CUDA_ERROR_MAP_FAILED`` when the exported event is gone.
        """
        call = "cuIpcOpenEventHandle"
        ctx = self._current(call)
        shared = self._ipc_events_of.open(bytes(handle), call)
        h = self._handle()
        self._events[h] = ev = SimEvent(h, False, ctx)
        ev.interprocess, ev.ipc = True, shared
        self._ipc_events_of.start()
        return h

    def _ipc_seen(self) -> dict[int, int]:
        """What a record made in another process can follow here: this process's done records.

        Another process orders its work after this one's only through what it
        waited for, which the race detector cannot follow across processes;
        so a wait for another process's record counts as ordered after every
        completed record here of an event shared with other processes.
        """
        vc: dict[int, int] = {}
        for ev in self._events.values():
            if ev.ipc is not None and ev.op is not None and ev.op.done:
                for k, v in ev.op.vc.items():
                    if vc.get(k, 0) < v:
                        vc[k] = v
        return vc

    def _ipc_events(self) -> list[tuple[int, object, bool]]:
        """The events shared with other processes: (handle, shared record, local record done).

        Read without the simulator's lock (a copy of the table is one step for
        the interpreter): the progress thread polls it, and takes the lock only
        to run work another process waits for -- so a fork in between never
        inherits a lock it holds.
        """
        return [(h, ev.ipc, ev.op is None or ev.op.done)
                for h, ev in list(self._events.items()) if ev.ipc is not None]

    @_locked
    def _ipc_progress(self, event: int) -> None:
        """Run the work up to this process's record of ``event``, which another process waits for.

        A fault on the way stays with its stream, as a fault of work a GPU ran
        unasked: sticky, it poisons the context; else the stream's next
        synchronisation reports it.
        """
        ev = self._events.get(event)
        if ev is None or ev.op is None or ev.op.done:
            return
        sched = self.sched
        try:
            sched.complete(ev.op, wait=False)
        except _Blocked:
            return
        except (DeviceFault, CudaError) as e:
            op = sched.failed_op
            if not self._poison_if_sticky(e.code, e.detail) and op is not None:
                def refault(e: BaseException = e) -> None:
                    raise e

                sched.enqueue(op.stream, refault, f"fault of {op.desc}")

    @_locked
    def event_record(self, event: int, stream: int) -> None:
        ev = self._event(event, "cuEventRecord")
        s = self._stream(stream, "cuEventRecord")
        if ev.ctx is not None and s.ctx is not ev.ctx:  # cuda.h: "must be from the same context"
            raise CudaError(INVALID_HANDLE, "cuEventRecord",
                            f"event of device {ev.ctx.device}, stream of device {s.ctx.device}")
        if s.capture is not None:  # no node: the event names the stream's captured work
            if s.capture.status != "active":
                _capture.raise_invalidated(s.capture, "cuEventRecord")
            ev.capture, ev.cap_deps, ev.op = s.capture, list(s.cap_deps), None
            return
        shared = ev.ipc
        if shared is not None:  # shared with other processes: the record marks its generation
            g = shared.record()
            ev.op = self.sched.enqueue(s, lambda: shared.complete(g), "cuEventRecord")
        else:
            ev.op = self.sched.enqueue(s, None, "cuEventRecord")
        ev.vc = dict(ev.op.vc)
        ev.capture, ev.cap_deps = None, []

    @_locked
    def event_query(self, event: int) -> bool:
        ev = self._event(event, "cuEventQuery")
        self._captured_event(ev, "cuEventQuery")
        shared = ev.ipc
        if shared is not None and shared.latest() != shared.local:  # recorded by another process
            g = shared.latest()
            if shared.done(g):
                self.sched.host_observes(self._ipc_seen())
                return True
            shared.want(g)
            return False
        return ev.op is None or self._query(ev.op, "cuEventQuery")

    @_locked
    def event_synchronize(self, event: int) -> None:
        ev = self._event(event, "cuEventSynchronize")
        self._captured_event(ev, "cuEventSynchronize")
        shared = ev.ipc
        if shared is not None and shared.latest() != shared.local:  # recorded by another process
            shared.wait(shared.latest())
            self.sched.host_observes(self._ipc_seen())
        elif ev.op is not None:
            self._complete(ev.op, "cuEventSynchronize")
        self._release_pools()

    @_locked
    def event_elapsed_time(self, start: int, end: int) -> float:
        a = self._event(start, "cuEventElapsedTime")
        b = self._event(end, "cuEventElapsedTime")
        self._captured_event(a, "cuEventElapsedTime")
        self._captured_event(b, "cuEventElapsedTime")
        if not (a.timing and b.timing):
            raise CudaError(INVALID_HANDLE, "cuEventElapsedTime", "an event was created without timing")
        if a.op is None or b.op is None:
            raise CudaError(INVALID_HANDLE, "cuEventElapsedTime", "an event was never recorded")
        if not (a.op.done and b.op.done):
            raise CudaError(NOT_READY, "cuEventElapsedTime", "an event has not completed")
        return (b.op.t_done - a.op.t_done) * 1000.0

    def _captured_event(self, ev: SimEvent, call: str) -> None:
        """An event last recorded in a capture cannot be queried or waited on by the host: 907."""
        cap = ev.capture
        if cap is not None:
            why = f"on event 0x{ev.handle:x}, last recorded in a capture"
            if cap.status == "active":
                _capture.refuse(self, _codes.CAPTURED_EVENT, call, [cap], why)
            raise CudaError(_codes.CAPTURED_EVENT, call, why)

    # -------------------------------------------------------- host callbacks
    @_locked
    def stream_add_callback(self, stream: int, fn: Callable[[int], None]) -> None:
        call = "cuStreamAddCallback"
        s = self._stream(stream, call)
        if not callable(fn):
            raise TypeError(f"{call}: the callback must be callable, got {type(fn).__name__}")
        desc = f"{call} host function {getattr(fn, '__name__', fn)!r}"
        if s.capture is not None:
            # cuda.h: "this function is not supported with cuStreamBeginCapture
            # and cuStreamEndCapture, unlike cuLaunchHostFunc"; of the codes it
            # lists for the call, that is CUDA_ERROR_NOT_SUPPORTED (801).  The
            # capture is invalidated too, as for any call a capture does not
            # support (stricter than a driver, if one leaves it valid).
            if s.capture.status != "active":
                _capture.raise_invalidated(s.capture, call)
            _capture.refuse(self, _NOT_SUPPORTED, call, [s.capture],
                            "on a capturing stream: a stream callback cannot be captured "
                            "(cuLaunchHostFunc can)")
        self._queue_host_fn(s, fn, desc)

    @_locked
    def launch_host_func(self, stream: int, fn: Callable[[], None]) -> None:
        call = "cuLaunchHostFunc"
        s = self._stream(stream, call)
        if not callable(fn):
            raise TypeError(f"{call}: the host function must be callable, got {type(fn).__name__}")
        desc = f"{call} host function {getattr(fn, '__name__', fn)!r}"

        def host_fn(status: int) -> None:
            if status == 0:  # unlike a stream callback, never called after a failure
                fn()

        host_fn.__name__ = getattr(fn, "__name__", "host_fn")
        if s.capture is not None:  # a host node: each launch calls it
            _capture.add_node(s.capture, s, Node("host", host_fn, desc, [], list(s.cap_deps)), call)
            return
        self._queue_host_fn(s, host_fn, desc)

    def _queue_host_fn(self, s: SimStream, fn: Callable[[int], None], desc: str) -> None:
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
