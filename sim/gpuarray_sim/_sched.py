"""Simulated streams, events and the work scheduler, with a race detector.

Work is queued per stream as :class:`Op` objects and runs *later*: when the
host synchronises (stream/event/context synchronise, queries, pageable
device-to-host copies, ``cuMemFree``) or when too much work is queued.  Each op
depends on its stream predecessor and on explicit dependencies:

- ``cuStreamWaitEvent``: on the op the event last recorded;
- the legacy default stream: an op on it waits for the tails of every
  blocking stream of its context (per-thread default streams included), and
  an op on a blocking stream waits for the legacy stream's tail;
- non-blocking streams have no implicit dependencies.

Happens-before is tracked with vector clocks (one component per stream): an
op's clock joins its dependencies' clocks and the host's clock (everything the
host has seen complete happens before what it enqueues next).  The race
detector records, per allocation, which byte ranges each op reads and writes;
two accesses to overlapping bytes from different streams, one a write,
neither ordered before the other, are a race (:class:`StreamOrderError`).
Races are judged on the clocks at enqueue time, so they are found whatever
order the work happens to run in.

The race detector itself (records, verdicts, work that reports its accesses
when it has run) is ``_race.py``.

With a seed (``GPUARRAY_SIM_SEED``) the scheduler runs ready work from all
streams in a random order, so order-dependent bugs differ across seeds.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import _signals
from ._lock import SimLock
from ._memory import AddressSpace
from ._race import RaceDetector, Reports


class Op:
    """One unit of queued work."""

    __slots__ = ("seq", "stream", "fn", "deps", "done", "desc", "vc", "t_done", "error", "on_ready",
                 "reads", "writes", "host_fn", "runner")

    def __init__(self, seq: int, stream: SimStream, fn: Callable[[], object] | None,
                 deps: list[Op], desc: str, vc: dict[int, int]) -> None:
        self.seq = seq
        self.stream = stream
        self.fn = fn
        self.deps = deps
        self.done = False
        self.desc = desc
        self.vc = vc
        self.t_done = 0.0
        self.error: BaseException | None = None
        #: Run once when every dependency is done (before ``fn``): see ``enqueue``.
        self.on_ready: Callable[[], object] | None = None
        self.reads: list[tuple[int, int]] = []  # byte ranges [lo, hi) it reads
        self.writes: list[tuple[int, int]] = []  # byte ranges [lo, hi) it writes
        #: A host function: its driver thread runs it (``claim``/``finish``), never ``complete``.
        self.host_fn = False
        #: While its function runs (``_execute``): the thread running it, else 0.
        self.runner = 0

    #: Work recorded into a graph (``_capture.Node``) says True.
    captured = False


class SimContext:
    """A simulated context: its legacy and per-thread streams, peers, profiling and sticky fault."""

    def __init__(self, handle: int, device: int) -> None:
        self.handle = handle
        self.device = device
        self.refs = 0
        self.legacy: SimStream = None  # type: ignore[assignment]
        self.per_thread: dict[int, SimStream] = {}
        self.peers: set[int] = set()
        #: Whether ``cuProfilerStart`` enabled profile collection (no profiler runs).
        self.profiling = False
        #: ``(code, detail)`` of the sticky fault that made it unusable (see _sticky.py).
        self.sticky: tuple[int, str] | None = None
        #: False for a context of ``cuCtxCreate`` (``_context_calls.py``).
        self.primary = True
        #: Set by ``cuCtxDestroy``: every later use is CUDA_ERROR_INVALID_CONTEXT.
        self.destroyed = False


class SimStream:
    """A simulated stream.  ``kind``: legacy, per_thread, blocking, non_blocking."""

    def __init__(self, sid: int, handle: int, ctx: SimContext, kind: str) -> None:
        self.id = sid
        self.handle = handle
        self.ctx = ctx
        self.kind = kind
        self.tail: Op | None = None
        self.vc: dict[int, int] = {}
        self.clock = 0
        self.destroyed = False
        #: The capture sequence the stream is in (``_capture.SimCapture``), and the
        #: graph nodes its next captured work depends on.
        self.capture: Any = None
        self.cap_deps: list = []

    @property
    def blocking(self) -> bool:
        return self.kind in ("blocking", "per_thread")

    def describe(self) -> str:
        if self.kind == "legacy":
            return f"legacy default stream of device {self.ctx.device}"
        if self.kind == "per_thread":
            return f"per-thread default stream of device {self.ctx.device}"
        return f"stream 0x{self.handle:x} ({self.kind.replace('_', '-')}, device {self.ctx.device})"


class SimEvent:
    def __init__(self, handle: int, timing: bool, ctx: SimContext | None = None) -> None:
        self.handle = handle
        self.ctx = ctx  # the context it was created in
        self.timing = timing
        self.op: Op | None = None
        self.vc: dict[int, int] = {}
        self.destroyed = False
        #: Recorded in a capture: that capture (``_capture.SimCapture``) and its nodes.
        self.capture: Any = None
        self.cap_deps: list = []
        #: Created with CU_EVENT_INTERPROCESS (it may be exported: ``cuIpcGetEventHandle``).
        self.interprocess = False
        #: Exported or opened: its record shared across processes (``_ipc.SharedEvent``).
        self.ipc: Any = None


def _join(into: dict[int, int], other: dict[int, int]) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


class _Blocked(Exception):
    """``complete(wait=False)`` reached a host function that has not returned yet."""


class ReentryError(RuntimeError):
    """A driver call re-entered on the thread running device work needed that work done.

    Only an explicit ``gc.collect()``, a signal handler or a release by
    reference count inside the simulator's own code can make such a call
    (``_lock.py`` pauses automatic collection there): the work in progress
    cannot finish before the call returns, and running it again would
    corrupt the simulation, so the call fails instead.
    """


class Scheduler(RaceDetector):
    """Queues, dependencies, execution and race detection for the simulator."""

    def __init__(self, memory: AddressSpace, *, racecheck: str = "error", seed: int | None = None,
                 max_queue: int = 64) -> None:
        #: Every call runs under it; automatic garbage collection is paused
        #: while it is held (``_lock.py``: finalizers never run inside a call).
        self.lock = SimLock()
        #: Notified when a host function returns or queued work is dropped;
        #: a synchronising call waits on it (releasing the lock) for a host
        #: function, which its driver thread runs without the lock.
        self.cond = threading.Condition(self.lock)  # type: ignore[arg-type]  # an RLock's protocol
        self.memory = memory
        self.racecheck = racecheck
        self.rng = random.Random(seed) if seed is not None else None
        self.max_queue = max_queue
        self.pending: dict[int, Op] = {}  # seq -> op, insertion ordered
        self.host_vc: dict[int, int] = {}
        self._seq = 0
        self._sid = 0
        self.streams_by_ctx: dict[int, list[SimStream]] = {}
        self._waiting_ready: list[Op] = []  # ops with an on_ready not yet run
        #: Calls waiting on ``cond`` now (``_wait_host_fn``).
        self._parked = 0
        #: The op whose error the last raise of ``complete`` reports.
        self.failed_op: Op | None = None
        #: Called with ``(op, error)`` when queued work fails while the queue
        #: drains (no synchronising call to report it); returns True when it
        #: took care of the error (a sticky fault: later calls report it).
        self.on_fault: Callable[[Op, BaseException], bool] | None = None
        #: While captures exist (``capturing``), work queued goes through
        #: ``capture_hook`` first (``_capture.captured``): it becomes a graph node
        #: on a capturing stream, is refused on the legacy stream next to a
        #: capturing blocking stream, and is queued as usual otherwise.
        self.capturing = 0
        self.capture_hook: Callable[..., Any] | None = None
        #: Queued :class:`Reports` work whose accesses are not judged yet (seq -> op).
        self.reporting: dict[int, Op] = {}

    # ------------------------------------------------------------- streams
    def new_stream(self, handle: int, ctx: SimContext, kind: str) -> SimStream:
        self._sid += 1
        s = SimStream(self._sid, handle, ctx, kind)
        self.streams_by_ctx.setdefault(id(ctx), []).append(s)
        return s

    def forget_stream(self, s: SimStream) -> None:
        """Mark ``s`` destroyed; its queued work still runs and still orders."""
        s.destroyed = True
        self.prune_streams(s.ctx)

    def prune_streams(self, ctx: SimContext) -> None:
        """Drop destroyed streams whose work the host has seen complete."""
        lst = self.streams_by_ctx.get(id(ctx))
        if lst:
            lst[:] = [s for s in lst
                      if not (s.destroyed and s.clock <= self.host_vc.get(s.id, 0))]

    # ------------------------------------------------------------- enqueue
    def enqueue(self, stream: SimStream, fn: Callable[[], object] | None, desc: str,
                accesses: Sequence[tuple[int, int, bool]] = (), extra_deps: Sequence[Op] = (),
                extra_vc: dict[int, int] | None = None,
                on_ready: Callable[[], object] | None = None, host_fn: bool = False) -> Op:
        """Queue ``fn`` on ``stream``; ``accesses`` are ``(address, nbytes, is_write)``.

        ``on_ready`` runs when the op becomes the next thing to run on its
        stream (every dependency done): at once when nothing is ahead of it,
        else as soon as the work ahead of it completes.  Copies into
        page-locked memory use it to make their destination undefined
        (poisoned) only from the point where CUDA could start writing it,
        never while earlier work on the stream still reads those bytes.

        ``host_fn``: the op is a host function (``cuStreamAddCallback``);
        ``complete`` never runs it but waits until its driver thread has
        (``claim`` then ``finish``), so later work waits for it to return.
        """
        if self.capturing and self.capture_hook is not None:
            node = self.capture_hook(stream, fn, desc, accesses, on_ready)
            if node is not None:
                return node
        deps: list[Op] = []
        if stream.tail is not None and not stream.tail.done:
            deps.append(stream.tail)
        vc = dict(stream.vc)
        _join(vc, self.host_vc)
        implicit: list[Op] = []
        if stream.kind == "legacy":
            for other in self.streams_by_ctx.get(id(stream.ctx), ()):
                if other is not stream and other.blocking and other.tail is not None:
                    implicit.append(other.tail)
        elif stream.blocking:
            legacy = stream.ctx.legacy
            if legacy.tail is not None:
                implicit.append(legacy.tail)
        for d in (*implicit, *extra_deps):
            _join(vc, d.vc)
            if not d.done:
                deps.append(d)
        if extra_vc:
            _join(vc, extra_vc)
        stream.clock += 1
        vc[stream.id] = stream.clock
        self._seq += 1
        op = Op(self._seq, stream, fn, deps, desc, vc)
        op.reads = [(a, a + n) for a, n, w in accesses if not w and n > 0]
        op.writes = [(a, a + n) for a, n, w in accesses if w and n > 0]
        op.host_fn = host_fn
        reports = isinstance(fn, Reports) and self.racecheck != "0"
        if self.reporting and (accesses or reports) and self.racecheck != "0":
            self.settle_reports(op)  # their ranges on record before op is judged
        if accesses and self.racecheck != "0":
            self._check_races(op, accesses)
        if reports:
            self.reporting[op.seq] = op
        stream.tail = op
        stream.vc = vc
        self.pending[op.seq] = op
        if on_ready is not None:
            if self._runnable(op):
                on_ready()
            else:
                op.on_ready = on_ready
                self._waiting_ready.append(op)
        if reports and self.unordered_elsewhere(op):
            self.progress(op)  # its ranges judged by this call, the one that may race
        if len(self.pending) > self.max_queue:
            self._drain_some()
        return op

    # ------------------------------------------------------------- execute
    def _execute(self, op: Op) -> None:
        # Running before anything else: a call re-entered from here on
        # (``ReentryError``) must find it running, never run it again.  Its
        # function is let go only once it is done (the release of what it
        # held may run finalizers, which may call the driver).
        op.runner = threading.get_ident()
        fn, op.fn = op.fn, None
        op.deps = []
        del self.pending[op.seq]
        try:
            if fn is not None:
                touched = fn()
                if op.seq in self.reporting:
                    self._check_races(op, touched or ())
        except BaseException as e:  # kept on the op; the sync point reports it
            op.error = e
        finally:
            self.reporting.pop(op.seq, None)
            op.runner = 0
            op.done = True
            op.t_done = time.perf_counter()
            if self._parked:  # another thread's call may wait for it (``_reached_running``)
                with self.cond:
                    self.cond.notify_all()
        if self._waiting_ready:
            self._run_ready_hooks()
        if op.error is not None:
            err, op.error = op.error, None
            self.failed_op = op
            raise err

    def pending_reads(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Parts of ``[lo, hi)`` that queued, unfinished work still reads."""
        out = []
        for op in self.pending.values():
            for rlo, rhi in op.reads:
                if rlo < hi and lo < rhi:
                    out.append((max(lo, rlo), min(hi, rhi)))
        return out

    def pending_touching(self, lo: int, hi: int) -> list[Op]:
        """Queued, unfinished work that declared an access to bytes of ``[lo, hi)``."""
        return [op for op in self.pending.values()
                if any(rlo < hi and lo < rhi for rlo, rhi in (*op.reads, *op.writes))]

    def _run_ready_hooks(self) -> None:
        still: list[Op] = []
        for w in self._waiting_ready:
            hook = w.on_ready
            if w.done or hook is None:
                continue
            if self._runnable(w):
                w.on_ready = None
                hook()
            else:
                still.append(w)
        self._waiting_ready = still

    def _runnable(self, op: Op) -> bool:
        return all(d.done for d in op.deps)

    def complete(self, target: Op | None, wait: bool = True, own: bool = False) -> None:
        """Run work until ``target`` (and so everything it depends on) is done.

        Only ``target``'s own dependencies run, so a call never runs (and
        never reports) unrelated work.  A host function on the way is run by
        its driver thread: this waits for it (the lock released meanwhile),
        or with ``wait=False`` raises ``_Blocked``.  Asynchronous signals
        wait meanwhile on the main thread (``_signals.py``).

        ``own``: ``target`` was queued by the calling driver call, which
        returns only once it is done (a copy to pageable memory).  When that
        cannot be (``ReentryError``), ``target`` is withdrawn before the
        error goes up: nothing of the failed call stays queued (a copy would
        write later into a buffer its caller has freed).
        """
        if target is None or target.done:
            return
        held = _signals.hold()
        try:
            self._complete(target, wait)
        except ReentryError:
            if own:
                self.withdraw(target)
            raise
        finally:
            if held:
                _signals.release()

    def withdraw(self, op: Op) -> None:
        """Make queued ``op`` do nothing: it stays in its stream's order, an empty step."""
        op.fn = op.on_ready = None
        op.reads, op.writes = [], []
        self.reporting.pop(op.seq, None)

    def _complete(self, target: Op, wait: bool) -> None:
        if self.rng is not None:
            while not target.done:
                ready = self._ready_for(target)
                running = next((o for o in ready if o.runner), None)
                if running is not None:  # ``target`` needs it: it must finish first
                    self._reached_running(running, wait)
                    continue
                if not ready:
                    self._wait_host_fn(wait)
                    continue
                self._execute(self.rng.choice(ready))
            return
        stack = [target]
        while stack:
            op = stack[-1]
            if op.done:
                stack.pop()
                continue
            waiting = sorted((d for d in op.deps if not d.done), key=lambda o: -o.seq)
            if waiting:
                stack.extend(waiting)
                continue
            if op.runner:
                self._reached_running(op, wait)
                continue
            if op.host_fn:
                self._wait_host_fn(wait)
                continue
            stack.pop()
            self._execute(op)

    def _ready_for(self, target: Op) -> list[Op]:
        """Work ``target`` waits for (itself included) that can run now, in a stable order."""
        ready: list[Op] = []
        seen: set[int] = set()
        stack = [target]
        while stack:
            op = stack.pop()
            if op.done or op.seq in seen:
                continue
            seen.add(op.seq)
            waiting = [d for d in op.deps if not d.done]
            if waiting:
                stack.extend(waiting)
            elif not op.host_fn:
                ready.append(op)
        ready.sort(key=lambda o: o.seq)
        return ready

    def _wait_host_fn(self, wait: bool) -> None:
        if not wait:
            raise _Blocked
        self._parked += 1
        opened = _signals.open_for_wait()  # no work runs here: a handler may run (Ctrl-C)
        try:
            with self.cond:  # its driver thread takes the lock to run and finish it
                self.cond.wait()
        finally:
            self._parked -= 1
            if opened:
                _signals.close_after_wait()

    def _reached_running(self, op: Op, wait: bool) -> None:
        """Work needed now is running (``_execute``): never run it a second time.

        Run by another thread -- whose call waits, lock released, for a host
        function (``_wait_host_fn``) -- it finishes there: wait for it, as for
        a host function.  Run by this thread, the call was re-entered from
        inside it (see ``ReentryError``): it cannot finish first.
        """
        if op.runner != threading.get_ident():
            self._wait_host_fn(wait)
            return
        if not wait:
            raise _Blocked
        raise ReentryError(
            f"a driver call entered the simulator again on the thread running {op.desc} "
            f"(on {op.stream.describe()}), from code that ran inside it (a finalizer called by an "
            "explicit gc.collect(), a signal handler...), and needs that work done; it cannot "
            "finish before the call returns, as it would on a GPU, so the call fails")

    # ------------------------------------------------------ host functions
    def claim(self, op: Op) -> bool:
        """The driver thread starts host function ``op`` (every dependency done).

        False when a sticky fault dropped it (``discard``): nothing to finish.
        """
        if op.done:
            return False
        del self.pending[op.seq]
        op.deps = []
        return True

    def finish(self, op: Op) -> None:
        """Host function ``op`` returned: later work may run."""
        op.done = True
        op.t_done = time.perf_counter()
        if self._waiting_ready:
            self._run_ready_hooks()
        with self.cond:
            self.cond.notify_all()

    def _drain_some(self) -> None:
        """Run the oldest work until the queue is half its limit (GPU progress).

        Never past a host function that has not returned: the GPU waits for
        it, and the call that queued work must not wait (nor drop the lock).
        """
        held = _signals.hold()  # once for the whole drain
        try:
            while len(self.pending) > self.max_queue // 2:
                if not self.progress(next(iter(self.pending.values()))):
                    return
        finally:
            if held:
                _signals.release()

    def progress(self, op: Op) -> bool:
        """Run ``op`` and the work it waits for now, as a GPU may have (no call waits for it).

        False when a host function that has not returned is on the way (nothing
        waits for it here).  A sticky fault is left for the context's next call
        (``on_fault``), as on CUDA; any other error is raised.
        """
        try:
            self.complete(op, wait=False)
        except _Blocked:
            return False
        except Exception as e:
            failed = self.failed_op
            if failed is None or self.on_fault is None or not self.on_fault(failed, e):
                raise
        return True

    def discard(self, ctx: SimContext) -> None:
        """Drop the queued work of ``ctx`` (after a sticky fault, or a reset)."""
        now = time.perf_counter()
        for op in list(self.pending.values()):
            if op.stream.ctx is ctx:
                del self.pending[op.seq]
                self.reporting.pop(op.seq, None)
                op.fn = op.on_ready = None
                op.deps = []
                op.done = True
                op.t_done = now
        with self.cond:  # a sync waiting for a dropped host function goes on
            self.cond.notify_all()

    def complete_all(self, ctx: SimContext | None = None) -> None:
        """Run the queued work of ``ctx`` (None: of every context), oldest first.

        Host functions running now (no longer queued) are waited for too.
        """
        for op in self.queued(ctx):
            self.complete(op)

    def queued(self, ctx: SimContext | None) -> list[Op]:
        """The unfinished work of ``ctx`` (None: every context), oldest first, then the stream tails."""
        ops = [op for op in self.pending.values() if ctx is None or op.stream.ctx is ctx]
        for streams in self.streams_by_ctx.values():
            ops += [s.tail for s in streams if s.tail is not None and not s.tail.done
                    and (ctx is None or s.ctx is ctx)]
        return ops

    # --------------------------------------------------------- host syncs
    def host_observes(self, vc: dict[int, int]) -> None:
        """The host saw work with clock ``vc`` complete."""
        _join(self.host_vc, vc)
