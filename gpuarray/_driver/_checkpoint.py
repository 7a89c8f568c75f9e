"""The capture checkpoint: every driver call gpuarray makes passes here.

CUDA's stream-capture rules are about kinds of *driver call*, not about array
operations: host-synchronising calls, "potentially unsafe" calls (allocate,
free, register, load modules), the legacy stream while a blocking stream
captures, host queries of events recorded in a capture, waits on work a
capture does not contain.  So :func:`gpuarray._driver.get_backend` hands the
upper layers a :class:`Checkpoint` around the backend, and every method of the
driver interface (``_base.Backend``) is declared with its kind
(``_call_kinds.KINDS``, from ``cuda.h`` and the programming guide's
"Prohibited and Unhandled Operations").  Per kind the checkpoint lets the call through,
makes it with the calling thread in relaxed capture mode
(``cuThreadExchangeStreamCaptureMode``), defers it (frees while gpuarray
captures), or raises :class:`~gpuarray.errors.StreamCaptureError` *before*
the call, so the capture stays valid.  A method with no declared kind is not
served (``AttributeError``), and a test enumerates the interface.

What it knows of captures -- the one record of them in gpuarray:

- gpuarray's own: it sees ``cuStreamBeginCapture`` and ``cuStreamEndCapture``
  pass (``_captures``), and the events recorded in a capture.  The stream
  layer attaches its graph record to a capture (:meth:`Checkpoint.attach`,
  :meth:`Checkpoint.capture_of`), :attr:`Checkpoint.capturing` says whether
  any runs, and the layers that hold work until the last one ends register
  with :func:`on_capture_end`;
- other libraries', on streams gpuarray knows as external (registered by the
  stream layer, :meth:`Checkpoint.foreign_stream`): the driver is asked
  (``cuStreamGetCaptureInfo``, ``cuStreamIsCapturing`` of the legacy stream,
  queries that never invalidate a capture) only for the calls whose kind
  needs it.

While neither can exist -- no capture of gpuarray's, no external stream, no
event recorded in a capture -- the checkpoint is *quiet*: its attributes are
the backend's own bound methods, so a call costs what it cost without it,
except the potentially unsafe ones, which are always relaxed (another
library's global capture on another thread is never visible).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import CudaError, StreamCaptureError, error_code
from . import _finalize
from ._base import CAPTURE_MODES
from ._call_kinds import (
    CALLBACK,
    CAPTURE,
    DEVICE_SYNC,
    EVENT_SYNC,
    FREE,
    GRAPH_LAUNCH,
    HOST_COPY,
    KINDS,
    OBJECT,
    QUERY,
    RECORD,
    RELAXED,
    STREAM,
    STREAM_FREE,
    STREAM_SYNC,
    UNSAFE,
    WAIT,
)

_IMPLICIT = error_code("STREAM_CAPTURE_IMPLICIT")
_WRONG_THREAD = error_code("STREAM_CAPTURE_WRONG_THREAD")
_GLOBAL, _RELAXED = CAPTURE_MODES[0], CAPTURE_MODES[2]

#: Position of the stream argument where it is not the last one.
_STREAM_ARG = {"launch_kernel": 4, "stream_add_callback": 0, "launch_host_func": 0,
               "stream_wait_event": 0,
               "stream_query": 0, "stream_synchronize": 0}
#: Kinds whose wrapper is needed only while a capture may exist.
_WATCHED = frozenset({STREAM, STREAM_FREE, HOST_COPY, RECORD, WAIT, STREAM_SYNC, DEVICE_SYNC,
                      EVENT_SYNC, GRAPH_LAUNCH, CALLBACK})
_LEGACY = (0, 1)
#: Why a call of these kinds is refused on a capturing stream.
_REFUSED = {
    STREAM_SYNC: "the host cannot wait for captured work (synchronize(), query(), a download to "
                 "the host); CUDA refuses it and the refusal would invalidate the capture. "
                 "Synchronise after the capture ends and its graph is launched",
    GRAPH_LAUNCH: "a launch would become a child-graph node, and gpuarray's graphs hold memory "
                  "nodes, which CUDA does not nest. Launch the graph after the capture ends",
    CALLBACK: "CUDA does not support stream callbacks in a capture. Add the callback after the "
              "capture ends",
}
#: Stream-ordered allocation and free: on a stream outside a capture they are potentially
#: unsafe (an H200 refused cuMemAllocAsync on the legacy stream with 900 during another
#: library's global capture, 2026-11-28), so they are always made in relaxed mode, watched
#: or not; on a capturing stream they are graph memory nodes either way.
_POOL_CALLS = frozenset({"mem_alloc_async", "mem_free_async"})


#: Called (no arguments) each time the last capture of gpuarray ends, after the
#: frees deferred meanwhile: the layers that hold releases of their own make them.
_END_HOOKS: list[Callable[[], None]] = []


def on_capture_end(hook: Callable[[], None]) -> None:
    """Run ``hook()`` each time the last capture of gpuarray ends (any backend)."""
    _END_HOOKS.append(hook)


class _Capture:
    """A capture gpuarray began, as the checkpoint records it; ``graph`` is the stream
    layer's record of it (:meth:`Checkpoint.attach`)."""

    __slots__ = ("handle", "ctx", "cid", "mode", "thread", "graph")

    def __init__(self, handle: int, ctx: int, cid: int, mode: str) -> None:
        self.handle, self.ctx, self.cid, self.mode = handle, ctx, cid, mode
        self.thread = threading.get_ident()
        self.graph: Any = None


class _ThreadState(threading.local):
    """The calling thread's relaxed blocks (:meth:`Checkpoint.relaxed`): how many are
    entered, whether their frees are made even while gpuarray captures (``now``), and
    the capture mode the outermost one restores (``prev``)."""

    depth = 0
    now = False
    prev = _GLOBAL


class _RelaxedBlock:
    """:meth:`Checkpoint.relaxed`'s block, one per ``now`` and checkpoint, its state the
    thread's (a flush of deferred frees enters one every ten releases: no object made,
    no generator).  The one place the thread's capture mode is switched: every
    potentially unsafe call the checkpoint makes runs inside one."""

    __slots__ = ("_cp", "_now")

    def __init__(self, cp: Checkpoint, now: bool) -> None:
        self._cp, self._now = cp, now

    def __enter__(self) -> None:
        tls = self._cp._tls
        depth = tls.depth
        if not depth:  # the outermost block switches; nested ones share its switch
            tls.prev = self._cp._exchange(_RELAXED)
            tls.now = self._now
        tls.depth = depth + 1

    def __exit__(self, *exc: Any) -> None:
        tls = self._cp._tls
        depth = tls.depth = tls.depth - 1
        if not depth:
            tls.now = False
            self._cp._exchange(tls.prev)


def _error(msg: str) -> StreamCaptureError:
    return StreamCaptureError(msg)


class Checkpoint:
    """The backend as the upper layers see it: every call declared, checked by its kind."""

    def __init__(self, backend: Any) -> None:
        self._b = backend
        self.name = backend.name
        self._lock = threading.RLock()
        self._tls = _ThreadState()
        self._exchange: Callable[[str], str] = backend.exchange_capture_mode
        self._blocks = (_RelaxedBlock(self, False), _RelaxedBlock(self, True))
        #: Capture key (stream handle; (2, ctx, thread) for the per-thread stream) -> _Capture.
        self._captures: dict[Any, _Capture] = {}
        #: External stream handle -> number of live gpuarray Stream objects over it.
        self._foreign: dict[int, int] = {}
        #: Event handle -> capture id of the capture it was last recorded in.
        self._captured_events: dict[int, int] = {}
        #: Frees deferred while gpuarray captures: (method name, args, context).
        self._deferred: list[tuple[str, tuple, int]] = []
        #: Stream-ordered frees on the legacy stream deferred while it is unusable.
        self._legacy_frees: list[tuple[tuple, int]] = []
        #: Whether a capture of gpuarray's is in progress (read by the hot paths: one test).
        self.capturing = False
        self._watching = False
        self._foreign_seen = False
        self._maps: tuple[dict[str, Any], dict[str, Any]] | None = None
        self._install(False)
        object.__setattr__(backend, "_checkpoint", self)  # told of replaced methods (_base.py)

    # ------------------------------------------------------------ the switch
    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._b, name)
        if callable(attr) and not name.startswith("_"):
            raise AttributeError(
                f"driver call {name!r} has no declared capture kind: declare it in "
                "gpuarray/_driver/_call_kinds.py (KINDS) before gpuarray may call it")
        return attr

    @property
    def backend(self) -> Any:
        """The backend behind the checkpoint."""
        return self._b

    def reinstall(self) -> None:
        """Take the backend's methods again (after they were replaced on its instance:
        the benchmarks' meters, tests)."""
        with self._lock:
            self._maps = None
            self._install(self._needed())

    def _needed(self) -> bool:
        """Whether a capture may exist now.  Once another library's stream has been
        seen, the checkpoint keeps watching: streams of interop come and go with
        each call, and switching back and forth would cost more than the checks."""
        return bool(self._captures or self._foreign or self._captured_events
                    or self._legacy_frees or self._foreign_seen)

    def _install(self, watch: bool) -> None:
        maps = self._maps
        if maps is None:  # both sets of attributes, built once
            b = self._b
            self._exchange = b.exchange_capture_mode
            quiet, watched = {}, {}
            for name, (kind, call) in KINDS.items():
                watched[name] = self._wrap(name, kind, call)
                quiet[name] = getattr(b, name) if kind in _WATCHED else watched[name]
                if name in _POOL_CALLS:
                    watched[name] = self._relaxed(watched[name])
                    quiet[name] = self._relaxed(quiet[name])
            maps = self._maps = (quiet, watched)
        self._watching = watch
        self.__dict__.update(maps[watch])

    def _update(self) -> None:
        with self._lock:
            watch = self._needed()
            if watch != self._watching:
                self._install(watch)

    def _wrap(self, name: str, kind: str, call: str) -> Callable[..., Any]:
        fn = getattr(self._b, name)
        if kind in (QUERY, RELAXED):
            return fn
        if kind == OBJECT:
            if name == "event_destroy":
                return self._event_destroy
            if name == "stream_destroy":
                return self._stream_destroy
            return fn
        if kind == UNSAFE:
            if name == "mem_alloc":
                return self._b.mem_alloc_relaxed
            return self._relaxed(fn)
        if kind == FREE:
            return self._free(name, fn)
        if kind == CAPTURE:
            return self._begin if name == "stream_begin_capture" else self._end
        make = getattr(self, "_k_" + kind.replace("-", "_"))
        return make(name, call, fn, _STREAM_ARG.get(name, -1))

    def relaxed(self, now: bool = False) -> _RelaxedBlock:
        """A block whose potentially unsafe calls share one switch to relaxed mode (a batch
        of frees): two driver calls for the block instead of two a call.  ``now``: its
        frees are made even while gpuarray captures (an out-of-memory retry)."""
        return self._blocks[1 if now else 0]

    def run_deferred_frees(self) -> None:
        """Make the frees deferred while gpuarray captures now, in relaxed mode (an
        out-of-memory retry: CUDA documents a relaxed thread as "not prohibited from
        potentially unsafe API calls", and no capture uses memory freed here)."""
        if self._deferred:
            with self._lock:
                items, self._deferred = self._deferred, []
            self._run_deferred(items)

    def _relaxed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        tls, block = self._tls, self._blocks[0]

        def relaxed(*args: Any, **kwargs: Any) -> Any:
            if tls.depth:  # inside a relaxed block already
                return fn(*args, **kwargs)
            with block:
                return fn(*args, **kwargs)
        return relaxed

    def _free(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        tls, block = self._tls, self._blocks[0]
        captures = self._captures  # never rebound

        def free(handle: int) -> None:  # every FREE call takes one handle
            if captures and not tls.now:
                with self._lock:
                    if captures:
                        self._deferred.append((name, (handle,), self._b.ctx_get_current()))
                        return
            if tls.depth:  # a flush's relaxed block (most releases of the default manager)
                fn(handle)
                return
            with block:
                fn(handle)
        return free

    # -------------------------------------------------------- capture state
    def _key(self, handle: int) -> Any:
        if handle == 2:
            return (2, self._b.ctx_get_current(), threading.get_ident())
        return handle

    def capture_id(self, handle: int) -> int:
        """The id of the capture stream ``handle`` takes part in (0: none known).

        gpuarray's own captures from the checkpoint's record; another
        library's only for external streams, asked of the driver.
        """
        if handle in _LEGACY:
            return 0
        if self._captures:
            rec = self._captures.get(self._key(handle))
            if rec is not None:
                return rec.cid
        if handle in self._foreign:
            try:
                status, cid = self._b.stream_capture_info(handle)
            except CudaError:
                return 0
            return cid if status == "active" else 0
        return 0

    def is_capturing(self, handle: int) -> bool:
        """Whether stream ``handle`` captures (gpuarray's capture, or another library's on an
        external stream); cheap when no capture can exist."""
        return self._watching and self.capture_id(handle) != 0

    def foreign_stream(self, handle: int, owner: Any) -> None:
        """Stream ``handle`` was made by another library: ask the driver about its captures
        while ``owner`` (the gpuarray Stream over it) lives."""
        if handle in _LEGACY or handle == 2:
            return
        with self._lock:
            self._foreign[handle] = self._foreign.get(handle, 0) + 1
            self._foreign_seen = True
            if not self._watching:
                self._install(True)
        weakref.finalize(owner, self._forget_foreign, handle)

    def _forget_foreign(self, handle: int) -> None:
        with self._lock:
            n = self._foreign.get(handle, 0) - 1
            if n > 0:
                self._foreign[handle] = n
            else:
                self._foreign.pop(handle, None)

    def _legacy_blocked(self) -> bool:
        """Whether a blocking stream of the current context captures (the legacy stream is
        unusable then): ``cuStreamIsCapturing`` of it answers 906 without invalidating."""
        try:
            self._b.stream_is_capturing(1)
        except CudaError as e:
            if e.code == _IMPLICIT:
                return True
            raise
        return False

    def _check_legacy(self, call: str) -> None:
        if (self._captures or self._foreign) and self._legacy_blocked():
            raise _error(
                f"{call} on the legacy default stream while a blocking stream captures: CUDA "
                "refuses any use of the legacy stream then (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) "
                "and the capture would be invalidated. Capture on a non-blocking stream "
                "(gpuarray.stream(non_blocking=True)), or run this after the capture ends")

    # ------------------------------------------------------ per-kind checks
    def _k_stream(self, name: str, call: str, fn: Callable[..., Any], at: int) -> Callable[..., Any]:
        def stream_work(*args: Any) -> Any:
            if args[at] in _LEGACY:
                self._check_legacy(call)
            return fn(*args)
        return stream_work

    def _k_stream_free(self, name: str, call: str, fn: Callable[..., Any],
                       at: int) -> Callable[..., Any]:
        def stream_free(*args: Any) -> None:
            if args[at] in _LEGACY and self._legacy_blocked():
                with self._lock:
                    self._legacy_frees.append((args, self._b.ctx_get_current()))
                    self._update()
                return
            if self._legacy_frees:
                self._flush_legacy_frees()
            fn(*args)
        return stream_free

    def _flush_legacy_frees(self) -> None:
        b = self._b
        with self._lock:
            items, self._legacy_frees = self._legacy_frees, []
        keep = []
        prev = b.ctx_get_current()
        try:
            for args, ctx in items:
                b.ctx_set_current(ctx)
                if self._legacy_blocked():
                    keep.append((args, ctx))
                    continue
                try:
                    with self._blocks[1]:  # relaxed: see _POOL_CALLS
                        b.mem_free_async(*args)
                except CudaError as e:
                    _finalize.remember(e)
        finally:
            b.ctx_set_current(prev)
            with self._lock:
                self._legacy_frees[:0] = keep
                self._update()

    def _host_refusal(self, call: str, handle: int, ptr: int, upload: bool) -> None:
        if self.capture_id(handle) and self._b.pointer_info(ptr).memory_type == 0:
            what = "an upload from" if upload else "a download to"
            raise _error(
                f"{what} pageable host memory ({call}) on stream 0x{handle:x}, which is "
                "capturing a graph: the host cannot wait for captured work and CUDA would "
                "refuse it and invalidate the capture. Use page-locked memory "
                "(gpuarray.pinned_array(); each launch re-reads or rewrites it, "
                "copy_to_host(pinned, stream=s)), or copy after the capture ends")

    def _k_host_copy(self, name: str, call: str, fn: Callable[..., Any],
                     at: int) -> Callable[..., Any]:
        def host_copy(*args: Any) -> Any:
            h = args[at]
            if h in _LEGACY:
                self._check_legacy(call)
            elif name == "memcpy_htod_async":
                self._host_refusal(call, h, args[1], True)
            elif name == "memcpy_dtoh_async":
                self._host_refusal(call, h, args[0], False)
            else:  # cuMemcpy2DAsync(dst, dst_pitch, dst_is_device, src, src_pitch, src_is_device...)
                if not args[2]:
                    self._host_refusal(call, h, args[0], False)
                if not args[5]:
                    self._host_refusal(call, h, args[3], True)
            return fn(*args)
        return host_copy

    def _k_record(self, name: str, call: str, fn: Callable[..., Any], at: int) -> Callable[..., Any]:
        def record(event: int, stream: int) -> None:
            if stream in _LEGACY:
                self._check_legacy(call)
            cid = self.capture_id(stream)
            fn(event, stream)
            if cid:
                with self._lock:
                    self._captured_events[event] = cid
                    self._update()
            elif event in self._captured_events:
                with self._lock:
                    self._captured_events.pop(event, None)
                    self._update()
        return record

    def _k_wait(self, name: str, call: str, fn: Callable[..., Any], at: int) -> Callable[..., Any]:
        def wait(stream: int, event: int, external: bool = False) -> None:
            if stream in _LEGACY:
                self._check_legacy(call)
            mine = self.capture_id(stream)
            theirs = self._captured_events.get(event, 0)
            if theirs and theirs != mine:
                raise _error(
                    f"{call}: stream 0x{stream:x} would wait for work recorded in a capture it is "
                    "not part of (an operation using an array whose stream is not part of the "
                    "capture, or making a stream wait for it): CUDA would join the stream into "
                    "that capture, which then cannot end, or invalidate it. Order the streams "
                    "before the capture (s.wait_stream(t)) and bind the array to the capturing "
                    "stream (arr.bind(s)), or run it after the capture ends")
            if external or (mine and theirs != mine):
                fn(stream, event, True)  # CU_EVENT_WAIT_EXTERNAL: legal across the boundary
            else:
                fn(stream, event)
        return wait

    def _k_device_sync(self, name: str, call: str, fn: Callable[..., Any],
                       at: int) -> Callable[..., Any]:
        def device_sync() -> None:
            b = self._b
            ctx = b.ctx_get_current()
            busy: list[Any] = [rec.handle for rec in list(self._captures.values())
                               if rec.ctx == ctx]
            if not busy and self._legacy_blocked():
                busy = ["a blocking stream"]
            for h in list(self._foreign):
                if busy:
                    break
                try:
                    if b.stream_get_ctx(h) == ctx and self.capture_id(h):
                        busy.append(h)
                except CudaError:
                    continue
            if busy:
                what = busy[0] if isinstance(busy[0], str) else f"stream 0x{busy[0]:x}"
                raise _error(
                    f"{call} (a device-wide synchronisation) while {what} of the context "
                    "captures a graph: CUDA refuses it and the refusal would invalidate the "
                    "capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED). Synchronise a stream that "
                    "is not capturing, or after the capture ends")
            fn()
        return device_sync

    def _k_event_sync(self, name: str, call: str, fn: Callable[..., Any],
                      at: int) -> Callable[..., Any]:
        def event_sync(*events: int) -> Any:
            for ev in events:
                if ev in self._captured_events:
                    raise _error(
                        f"{call} of event 0x{ev:x}, last recorded on a capturing stream: the "
                        "host cannot wait for captured work (CUDA_ERROR_CAPTURED_EVENT would "
                        "invalidate the capture). Wait after the capture ends and its graph "
                        "is launched, or record the event again outside the capture")
            return fn(*events)
        return event_sync

    def _k_stream_sync(self, name: str, call: str, fn: Callable[..., Any],
                       at: int) -> Callable[..., Any]:
        """Host waits on a stream, graph launches, callbacks: refused on a capturing stream."""
        why = _REFUSED[KINDS[name][0]]

        def refusing(*args: Any) -> Any:
            stream = args[at]
            if stream in _LEGACY:
                self._check_legacy(call)
            elif self.capture_id(stream):
                raise _error(f"{call} on stream 0x{stream:x}, which is capturing a graph: {why}")
            return fn(*args)
        return refusing

    _k_graph_launch = _k_callback = _k_stream_sync

    # ------------------------------------------------- objects and captures
    def _event_destroy(self, event: int) -> None:
        if event in self._captured_events:
            with self._lock:
                self._captured_events.pop(event, None)
                self._update()
        self._b.event_destroy(event)

    def refuse_destroy(self, stream: int, what: str = "cuStreamDestroy") -> None:
        """Raise :class:`StreamCaptureError` when stream ``stream`` captures for gpuarray:
        destroying it would end the capture unfinished (``Stream.close()`` asks first)."""
        if self._captures and self._captures.get(self._key(stream)) is not None:
            raise _error(f"{what} of stream 0x{stream:x}, which is capturing a graph: "
                         "end the capture first (end_capture())")

    def _stream_destroy(self, stream: int) -> None:
        self.refuse_destroy(stream)
        self._b.stream_destroy(stream)

    def _begin(self, stream: int, mode: str = "global") -> None:
        b = self._b
        if stream in _LEGACY:
            self._check_legacy("cuStreamBeginCapture")
        b.stream_begin_capture(stream, mode)
        try:
            _, cid = b.stream_capture_info(stream)
        except CudaError:  # pragma: no cover - the capture just began
            cid = -1
        with self._lock:
            self._captures[self._key(stream)] = _Capture(stream, b.ctx_get_current(), cid or -1,
                                                         mode)
            self.capturing = True
            if not self._watching:
                self._install(True)

    def attach(self, stream: int, record: Any) -> None:
        """Keep ``record`` (the stream layer's graph record) with the capture on ``stream``."""
        self._captures[self._key(stream)].graph = record

    def capture_of(self, stream: int) -> Any:
        """The record attached to gpuarray's capture on ``stream`` (None: it does not capture)."""
        if not self._captures:
            return None
        rec = self._captures.get(self._key(stream))
        return rec.graph if rec is not None else None

    def _end(self, stream: int) -> int:
        """``cuStreamEndCapture``; the record goes whatever the driver answers, except a
        wrong-thread refusal (908), which leaves the capture active."""
        key = self._key(stream)
        try:
            graph = self._b.stream_end_capture(stream)
        except CudaError as e:
            if e.code == _WRONG_THREAD:  # still capturing
                raise
            self._forget(key)
            raise
        self._forget(key)
        return graph

    def _forget(self, key: Any) -> None:
        with self._lock:
            self._captures.pop(key, None)
            idle = not self._captures
            self.capturing = not idle
            items: list = []
            if idle:
                items, self._deferred = self._deferred, []
            self._update()
        if items:
            self._run_deferred(items)
        if idle:
            for hook in list(_END_HOOKS):
                hook()

    def _run_deferred(self, items: list[tuple[str, tuple, int]]) -> None:
        b = self._b
        prev = b.ctx_get_current()
        try:
            with self._blocks[1]:
                for name, args, ctx in items:
                    try:
                        if ctx != b.ctx_get_current():
                            b.ctx_set_current(ctx)
                        getattr(b, name)(*args)
                    except CudaError as e:  # each deferred free is tried; the first error is raised later
                        _finalize.remember(e)
        finally:
            b.ctx_set_current(prev)

    def captures(self) -> int:
        """How many captures of gpuarray's are in progress (all threads)."""
        return len(self._captures)
