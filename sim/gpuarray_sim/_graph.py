"""Graphs in the simulator: capture begin/end, instantiation, launch and replay, graph memory.

One concern: the ``cuStream*Capture*``, ``cuThreadExchangeStreamCaptureMode``
and ``cuGraph*`` calls of the driver interface (the capture rules are in
``_capture.py``).  A launch replays the graph's nodes as ordinary queued
work, each forked branch on a stream of its own with the graph's edges as
dependencies (``_replay.py``), so everything the scheduler checks -- the
race detector (between branches too), sticky faults, poisoned page-locked
destinations, use after free -- sees every replay.  Launches of one
executable graph are ordered one after another, as CUDA orders them.

Graph memory (``cuMemAllocAsync`` / ``cuMemFreeAsync`` captured as
allocation and free nodes): the address is reserved at capture and fixed
for the graph's life; the memory is mapped only from the allocation node of
a launch to its free (a free node, ``cuMemFreeAsync``/``cuMemFree`` after the
launch, or the next launch when instantiated with auto-free-on-launch).
Anything that touches it while unmapped -- before the first launch, after a
free -- is an illegal address, as on a GPU.  An allocation that a launch
left mapped stays valid after the graph is destroyed, until it is freed.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from gpuarray.errors import CudaError

from . import _capture, _codes
from ._capture import Node, SimCapture
from ._core import INVALID_VALUE, SimContext, SimCore, _api, _locked
from ._memory import POISON_LIMIT, Allocation
from ._replay import replay
from ._sched import SimStream

_RESERVED = "graph memory is mapped only from its allocation node in a launch of its graph to its free"


class SimGraph:
    """A captured graph: its nodes in capture order (a topological order)."""

    def __init__(self, handle: int, ctx: SimContext) -> None:
        self.handle = handle
        self.ctx = ctx
        self.nodes: list[Node] = []
        self.execs = 0  # live executable graphs made from it
        self.destroyed = False
        #: Bases of its allocations that a launch made (in stream order) and nothing freed yet.
        self.unfreed: set[int] = set()
        #: References it owns to user objects (``_userobj.py``): handle -> count.
        self.user_refs: dict[int, int] = {}

    @property
    def allocations(self) -> list[Allocation]:
        return [n.alloc for n in self.nodes if n.kind == "alloc"]


class SimGraphExec:
    """An executable graph (``CUgraphExec``)."""

    def __init__(self, handle: int, graph: SimGraph, auto_free: bool) -> None:
        self.handle = handle
        self.graph = graph
        self.ctx = graph.ctx
        self.nodes = list(graph.nodes)
        self.auto_free = auto_free
        self.last_op: Any = None
        self.launches = 0
        #: Hidden streams on which a launch replays the forked branches (``_replay.py``).
        self.lanes: list[SimStream] = []
        #: References to its graph's user objects, taken at instantiation.
        self.user_refs: dict[int, int] = {}


def map_graph_memory(b: SimCore, a: Allocation) -> None:
    """An allocation node of a launch runs: the reserved address gets fresh memory."""
    if not a.unmapped:  # left mapped by the last launch: auto-free-on-launch frees it first
        unmap_graph_memory(b, a, "freed by CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH")
    mem = b.memory
    mem.used[a.device] += a.size
    a.store = (np.full(a.size, 0xFF, np.uint8) if a.size <= POISON_LIMIT
               else np.zeros(a.size, np.uint8))
    a.unmapped = ""


def unmap_graph_memory(b: SimCore, a: Allocation, why: str) -> None:
    if a.unmapped:
        return
    b.memory.used[a.device] -= a.size
    a.store = None
    a.races.clear()
    a.unmapped = why
    release_if_unused(b, a)


def release_if_unused(b: SimCore, a: Allocation) -> None:
    """Give back the address of graph memory that no graph can map again.

    (Nothing left allocated by a launch, no queued launch touching it; an
    address kept for a launch still queued is bookkeeping only: unmapped
    memory is not charged.)
    """
    g = a.graph
    if (a.alive and (g is None or (g.destroyed and not g.execs and a.base not in g.unfreed))
            and not b.sched.pending_touching(a.base, a.base + a.size)):
        a.alive = False
        a.freed_by = "cuGraphDestroy (graph memory of a destroyed graph)"


def claim_graph_free(a: Allocation, call: str) -> None:
    """``cuMemFree``/``cuMemFreeAsync`` of graph memory: only of what a launch left allocated."""
    if a.graph is None or a.base not in a.graph.unfreed:
        raise CudaError(INVALID_VALUE, call, f"{a.describe()} is not allocated now (no launch "
                                             "left it allocated, or it was freed)")
    a.graph.unfreed.discard(a.base)


def free_graph_memory(b: SimCore, a: Allocation, call: str) -> None:
    """``cuMemFree`` of graph memory a launch left allocated (its work has run: synchronous)."""
    claim_graph_free(a, call)
    unmap_graph_memory(b, a, f"freed by {call}")


class SimGraphCalls(SimCore):
    """Capture and graph calls of the simulator."""

    # ------------------------------------------------------------ capture
    @_locked
    def stream_begin_capture(self, stream: int, mode: str = "global") -> None:
        call = "cuStreamBeginCapture"
        if mode not in _capture.MODES:
            raise CudaError(INVALID_VALUE, call, f"capture mode {mode!r} (one of {_capture.MODES})")
        s = self._stream(stream, call)
        if s.kind == "legacy":
            raise CudaError(INVALID_VALUE, call, "capture may not be initiated on the legacy stream")
        _capture.check_legacy(self, s, call)
        if s.capture is not None:
            raise CudaError(INVALID_VALUE, call, f"{s.describe()} is already capturing "
                                                 f"({s.capture.describe()})")
        cap = SimCapture(s, mode, SimGraph(self._handle(), s.ctx))
        self._captures[cap.id] = cap
        s.capture, s.cap_deps = cap, []
        self.sched.capturing += 1

    @_locked
    def stream_end_capture(self, stream: int) -> int:
        call = "cuStreamEndCapture"
        s = self._stream(stream, call)
        cap = s.capture
        if cap is None:
            raise CudaError(INVALID_VALUE, call, f"{s.describe()} is not capturing")
        if cap.origin is not s:
            raise CudaError(INVALID_VALUE, call, f"{s.describe()} joined {cap.describe()}: end it "
                                                 "on the stream that began it")
        if cap.mode != "relaxed" and cap.thread != threading.get_ident():
            raise CudaError(_codes.STREAM_CAPTURE_WRONG_THREAD, call,
                            f"{cap.describe()} must be ended by that thread (not relaxed)")
        loose = _capture.unjoined(cap) if cap.status == "active" else []
        for t in cap.streams:
            t.capture, t.cap_deps = None, []
        del self._captures[cap.id]
        self.sched.capturing -= 1
        if cap.status != "active":
            self._drop_graph(cap.graph)
            _capture.raise_invalidated(cap, call)
        if loose:
            self._drop_graph(cap.graph)
            raise CudaError(_codes.STREAM_CAPTURE_UNJOINED, call,
                            f"{cap.describe()}: work captured on {', '.join(t.describe() for t in loose)} "
                            "was not joined back into the origin stream (record an event there "
                            "and make the origin stream wait for it)")
        self._graphs[cap.graph.handle] = cap.graph
        return cap.graph.handle

    def _drop_graph(self, g: SimGraph) -> None:
        refs, g.user_refs = g.user_refs, {}
        self._release_user_refs(refs, "cuGraphDestroy", None)
        g.destroyed = True
        for a in g.allocations:
            release_if_unused(self, a)

    @_locked
    def stream_is_capturing(self, stream: int) -> str:
        call = "cuStreamIsCapturing"
        s = self._stream(stream, call)
        if s.kind == "legacy" and _capture.blocking_captures(self, s.ctx):
            raise CudaError(_codes.STREAM_CAPTURE_IMPLICIT, call, "the legacy stream while a blocking stream "
                                                     "captures (the capture is not invalidated)")
        return "none" if s.capture is None else s.capture.status

    @_locked
    def stream_capture_info(self, stream: int) -> tuple[str, int]:
        call = "cuStreamGetCaptureInfo"
        s = self._stream(stream, call)
        if s.kind == "legacy" and _capture.blocking_captures(self, s.ctx):
            raise CudaError(_codes.STREAM_CAPTURE_IMPLICIT, call, "the legacy stream while a blocking stream captures")
        cap = s.capture
        if cap is None:
            return "none", 0
        return cap.status, cap.id if cap.status == "active" else 0

    @_locked
    def capture_graph(self, stream: int) -> int:
        """Simulator only: the handle of the graph ``stream``'s active capture builds (0: none)."""
        s = self._stream(stream, "cuStreamGetCaptureInfo")
        return 0 if s.capture is None else s.capture.graph.handle

    @_api
    def exchange_capture_mode(self, mode: str) -> str:
        if mode not in _capture.MODES:
            raise CudaError(INVALID_VALUE, "cuThreadExchangeStreamCaptureMode",
                            f"capture mode {mode!r} (one of {_capture.MODES})")
        prev = _capture.thread_mode(self)
        self._tls.capture_mode = mode
        return prev

    # ------------------------------------------------------------- graphs
    def _graph(self, graph: int, call: str) -> SimGraph:
        g = self._graphs.get(graph)
        if g is None:
            raise CudaError(INVALID_VALUE, call, f"0x{int(graph):x} is not a graph (destroyed?)")
        return g

    def _exec(self, graph_exec: int, call: str) -> SimGraphExec:
        ex = self._execs.get(graph_exec)
        if ex is None:
            raise CudaError(INVALID_VALUE, call, f"0x{int(graph_exec):x} is not an executable "
                                                 "graph (destroyed?)")
        return ex

    @_locked
    def graph_instantiate(self, graph: int, auto_free_on_launch: bool = True) -> int:
        call = "cuGraphInstantiateWithFlags"
        g = self._graph(graph, call)
        self._check_current(call)
        if g.allocations and g.execs:
            raise CudaError(INVALID_VALUE, call, "a graph with memory nodes has at most one "
                                                 "executable graph at a time")
        ex = SimGraphExec(self._handle(), g, bool(auto_free_on_launch))
        ex.user_refs = self._take_user_refs(g.user_refs)
        g.execs += 1
        self._execs[ex.handle] = ex
        return ex.handle

    @_locked
    def graph_upload(self, graph_exec: int, stream: int) -> None:
        call = "cuGraphUpload"
        ex = self._exec(graph_exec, call)
        s = self._launch_stream(ex, stream, call)
        self.sched.enqueue(s, None, f"{call} of graph 0x{ex.graph.handle:x}")

    def _launch_stream(self, ex: SimGraphExec, stream: int, call: str) -> SimStream:
        s = self._stream(stream, call)
        if s.ctx is not ex.ctx:
            raise CudaError(INVALID_VALUE, call, f"graph of device {ex.ctx.device}, stream of "
                                                 f"device {s.ctx.device}")
        if s.capture is not None:  # CUDA records a child graph node; not modelled
            _capture.refuse(self, _codes.STREAM_CAPTURE_UNSUPPORTED, call, [s.capture],
                            "into a capturing stream (child graphs are not simulated)")
        return s

    @_locked
    def graph_launch(self, graph_exec: int, stream: int) -> None:
        call = "cuGraphLaunch"
        ex = self._exec(graph_exec, call)
        s = self._launch_stream(ex, stream, call)
        g = ex.graph
        if g.unfreed and not ex.auto_free:
            raise CudaError(INVALID_VALUE, call, f"allocation 0x{min(g.unfreed):x} of a previous "
                                                 "launch is unfreed and the graph was not "
                                                 "instantiated with auto-free-on-launch")
        freed = {n.alloc.base for n in ex.nodes if n.kind == "free"}
        g.unfreed = {a.base for a in g.allocations if a.base not in freed}
        ex.launches += 1
        tag = f"(launch {ex.launches} of graph 0x{ex.graph.handle:x})"
        prev: list[Any] = [ex.last_op] if ex.last_op is not None and not ex.last_op.done else []
        start = self.sched.enqueue(s, None, f"{call} {tag}", extra_deps=prev)
        ex.last_op = replay(self, ex, s, start, tag, map_graph_memory, unmap_graph_memory)

    @_locked
    def graph_exec_destroy(self, graph_exec: int) -> None:
        ex = self._exec(graph_exec, "cuGraphExecDestroy")
        del self._execs[graph_exec]
        ex.graph.execs -= 1
        for lane in ex.lanes:  # its queued work still runs
            self.sched.forget_stream(lane)
        self._release_user_refs(ex.user_refs, "cuGraphExecDestroy", ex.last_op)
        for a in ex.graph.allocations:
            release_if_unused(self, a)

    @_locked
    def graph_destroy(self, graph: int) -> None:
        g = self._graph(graph, "cuGraphDestroy")
        del self._graphs[graph]
        self._drop_graph(g)

    # ------------------------------------------------------- graph memory
    def _capture_alloc(self, s: SimStream, nbytes: int, call: str) -> int:
        """``cuMemAllocAsync`` on a capturing stream: an allocation node, its address reserved."""
        cap: SimCapture = s.capture
        if cap.status != "active":
            _capture.raise_invalidated(cap, call)
        a = self.memory.alloc_device(s.ctx.device, int(nbytes), kind="graph", call=call)
        self.memory.used[a.device] -= a.size  # charged while mapped only
        a.store = None
        a.unmapped = _RESERVED
        a.graph = cap.graph
        _capture.add_node(cap, s, Node("alloc", None, f"{call} of 0x{a.base:x} (graph memory)",
                                       [], list(s.cap_deps), alloc=a), call)
        return a.base

    def _capture_free(self, s: SimStream, a: Allocation | None, ptr: int, call: str) -> None:
        """``cuMemFreeAsync`` on a capturing stream: a free node for graph memory."""
        cap: SimCapture = s.capture
        if cap.status != "active":
            _capture.raise_invalidated(cap, call)
        if a is None or a.kind != "graph" or a.base != ptr or not a.alive:
            _capture.refuse(self, INVALID_VALUE, call, [cap],
                            f"of 0x{ptr:x} in a capture: a graph free node frees graph memory only")
        _capture.add_node(cap, s, Node("free", None, f"{call} of 0x{ptr:x} (graph memory)", [],
                                       list(s.cap_deps), alloc=a), call)
