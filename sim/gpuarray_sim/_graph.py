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

import functools
import threading
from collections.abc import Sequence
from typing import Any

from gpuarray.errors import CudaError

from . import _capture, _codes, _graph_build
from ._capture import Node, SimCapture
from ._core import INVALID_VALUE, SimContext, SimCore, _api, _locked
from ._memory import Allocation, device_store, granules
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
        #: The node holding it, for a child graph or a conditional node's body.
        self.owner: Node | None = None
        #: Its conditional handles (``_graph_build.py``).
        self.cond_handles: list[Any] = []
        #: For a clone: each node's handle -> the handle of the node it copies.
        self.clone_of: dict[int, int] = {}
        self.origin: SimGraph | None = None

    @property
    def allocations(self) -> list[Allocation]:
        return [n.alloc for n in self.nodes if n.kind == "alloc"]


class SimGraphExec:
    """An executable graph (``CUgraphExec``)."""

    def __init__(self, handle: int, graph: SimGraph, auto_free: bool) -> None:
        self.handle = handle
        self.graph = graph
        self.ctx = graph.ctx
        #: Its own copies of the graph's nodes, child graphs inlined, in topological order,
        #: each on a lane (``_replay.py``); ``copy_of``: graph node handle -> its copy.
        self.copy_of: dict[int, Node] = {}
        self.nodes = flatten(graph, self.copy_of, INVALID_VALUE)
        assign_lanes(self.nodes)
        self.auto_free = auto_free
        self.last_op: Any = None
        self.launches = 0
        #: Hidden streams on which a launch replays the forked branches (``_replay.py``).
        self.lanes: list[SimStream] = []
        #: References to its graph's user objects, taken at instantiation.
        self.user_refs: dict[int, int] = {}
        #: The conditional handles its nodes use (its graph's; cuGraphExecUpdate's graph's after one).
        self.cond_handles: list[Any] = list(graph.cond_handles)


def topological(nodes: list[Node], call: str) -> list[Node]:
    """``nodes`` in an order where each follows its dependencies (insertion order otherwise)."""
    index = {id(n): i for i, n in enumerate(nodes)}
    indeg = {id(n): len(n.deps) for n in nodes}
    users: dict[int, list[Node]] = {}
    for n in nodes:
        for d in n.deps:
            users.setdefault(id(d), []).append(n)
    ready = [n for n in nodes if not n.deps]
    out: list[Node] = []
    while ready:
        ready.sort(key=lambda n: index[id(n)], reverse=True)
        n = ready.pop()
        out.append(n)
        for m in users.get(id(n), ()):
            indeg[id(m)] -= 1
            if indeg[id(m)] == 0:
                ready.append(m)
    if len(out) != len(nodes):
        raise CudaError(INVALID_VALUE, call, "the graph has a cycle")
    return out


def flatten(g: SimGraph, copy_of: dict[int, Node], code: int,
            call: str = "cuGraphInstantiate") -> list[Node]:
    """Copies of ``g``'s nodes in topological order, each child graph replaced by its nodes
    (its roots after the child node's dependencies, its dependents after its leaves)."""
    out: list[Node] = []
    ends: dict[int, list[Node]] = {}  # id(original) -> the copies that complete it
    for n in topological(g.nodes, call):
        deps = [c for d in n.deps for c in ends[id(d)]]
        if n.kind == "child":
            sub_map: dict[int, Node] = {}
            sub = flatten(n.body, sub_map, code, call)
            used = {id(d) for m in sub for d in m.deps}
            for m in sub:
                if not m.deps:
                    m.deps = list(deps)
            out.extend(sub)
            leaves = [m for m in sub if id(m) not in used]
            ends[id(n)] = leaves if sub else deps
            copy_of.update(sub_map)
            continue
        m = _graph_build.copy_node(n)
        m.deps = deps
        if n.kind == "cond":  # its bodies, as runs of work (``_replay.run_conditional``)
            m.body = [flatten(b, copy_of, code, call) for b in n.body]
        m.handle = n.handle  # an executable graph's node is named by its graph node's handle
        copy_of[n.handle] = m
        out.append(m)
        ends[id(n)] = [m]
    return out


def assign_lanes(nodes: list[Node]) -> None:
    """Put each node on a lane (a chain of the DAG): the lane of its first dependency whose
    lane it would continue, else a new one.  Nodes on one lane are ordered by edges, so
    running a lane as one stream adds no order the graph does not have."""
    tails: list[Node | None] = []
    for n in nodes:
        lane = next((d.lane for d in n.deps if tails[d.lane] is d), None)
        if lane is None:
            lane = 0 if not tails else len(tails)
            tails.append(None)
        n.lane = lane
        tails[lane] = n


def _reset_handles(handles: list[Any]) -> None:
    """A launch starts: conditional handles made with CU_GRAPH_COND_ASSIGN_DEFAULT take it."""
    for h in handles:
        h.set(h.default)


def map_graph_memory(b: SimCore, a: Allocation) -> None:
    """An allocation node of a launch runs: the reserved address gets fresh memory."""
    if not a.unmapped:  # left mapped by the last launch: auto-free-on-launch frees it first
        unmap_graph_memory(b, a, "freed by CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH")
    mem = b.memory
    mem.used[a.device] += a.size
    b._graph_mem_used[a.device] += a.size
    b._graph_mem_high[a.device] = max(b._graph_mem_high[a.device], b._graph_mem_used[a.device])
    a.store = device_store(a.size)
    a.slack = granules(a.size) - a.size
    a.unmapped = ""


def unmap_graph_memory(b: SimCore, a: Allocation, why: str) -> None:
    if a.unmapped:
        return
    b.memory.used[a.device] -= a.size
    b._graph_mem_used[a.device] -= a.size
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

    #: The graph nodes a list of CUgraphNode handles names (``_graph_build.py``).
    _deps: Any

    # ------------------------------------------------------------ capture
    def _new_graph(self, ctx: SimContext, register: bool = True) -> SimGraph:
        g = SimGraph(self._handle(), ctx)
        if register:
            self._graphs[g.handle] = g
        return g

    @_locked
    def stream_begin_capture(self, stream: int, mode: str = "global", graph: int | None = None,
                             deps: Sequence[int] = ()) -> None:
        """``cuStreamBeginCapture``; with ``graph``, ``cuStreamBeginCaptureToGraph``: the
        capture appends to that graph, its first work after the nodes ``deps``."""
        call = "cuStreamBeginCapture" if graph is None else "cuStreamBeginCaptureToGraph"
        if mode not in _capture.MODES:
            raise CudaError(INVALID_VALUE, call, f"capture mode {mode!r} (one of {_capture.MODES})")
        s = self._stream(stream, call)
        if s.kind == "legacy":
            raise CudaError(INVALID_VALUE, call, "capture may not be initiated on the legacy stream")
        _capture.check_legacy(self, s, call)
        if s.capture is not None:
            raise CudaError(INVALID_VALUE, call, f"{s.describe()} is already capturing "
                                                 f"({s.capture.describe()})")
        if graph is None:
            cap = SimCapture(s, mode, SimGraph(self._handle(), s.ctx))
            first: list[Node] = []
        else:
            g = self._graph(graph, call)
            first = self._deps(g, deps, call)
            cap = SimCapture(s, mode, g)
            cap.to_graph = True
        self._captures[cap.id] = cap
        s.capture, s.cap_deps = cap, first
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
            if not cap.to_graph:
                self._drop_graph(cap.graph)
            _capture.raise_invalidated(cap, call)
        if loose:
            if not cap.to_graph:
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
        for n in g.nodes:  # the graphs its nodes hold go with it
            for body in (n.body if isinstance(n.body, list) else [n.body] if n.body else []):
                if not body.destroyed:
                    self._graphs.pop(body.handle, None)
                    self._drop_graph(body)
        for a in g.allocations:
            release_if_unused(self, a)
        self._release_cond_handles(g.cond_handles)

    def _release_cond_handles(self, handles: list[Any]) -> None:
        """Free the memory of the conditional ``handles`` that no graph or executable graph uses."""
        for h in handles:
            a = h.alloc
            if (a.alive and all(x.destroyed and not x.execs for x in h.holders)
                    and not self.sched.pending_touching(a.base, a.base + a.size)):
                self.memory.free_device(a.base, "cuGraphDestroy")
                a.freed_by = "cuGraphDestroy (a conditional handle of a destroyed graph)"
                self._cond_handles.pop(h.address, None)

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
    def capture_dependencies(self, stream: int) -> list[int]:
        """The nodes the next work captured on ``stream`` will depend on (its handles)."""
        s = self._stream(stream, "cuStreamGetCaptureInfo")
        return [] if s.capture is None else [n.handle for n in s.cap_deps]

    @_locked
    def stream_update_capture_dependencies(self, stream: int, deps: Sequence[int],
                                           replace: bool) -> None:
        """``cuStreamUpdateCaptureDependencies``: add to (or, ``replace``, set) the set."""
        call = "cuStreamUpdateCaptureDependencies"
        s = self._stream(stream, call)
        cap = s.capture
        if cap is None:
            raise CudaError(_codes.ILLEGAL_STATE, call, f"{s.describe()} is not capturing")
        if cap.status != "active":
            _capture.raise_invalidated(cap, call)
        nodes = self._deps(cap.graph, deps, call)
        s.cap_deps = nodes if replace else s.cap_deps + [n for n in nodes if n not in s.cap_deps]

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
        if g is None:  # the graph a capture in progress builds (cuStreamGetCaptureInfo's)
            g = next((c.graph for c in self._captures.values() if c.graph.handle == graph), None)
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
        resets = [h for h in ex.cond_handles if h.flags & _graph_build.COND_ASSIGN_DEFAULT]
        start = self.sched.enqueue(s, functools.partial(_reset_handles, resets) if resets else None,
                                   f"{call} {tag}", extra_deps=prev)
        ex.last_op = replay(self, ex, s, start, tag, map_graph_memory, unmap_graph_memory)

    @_locked
    def graph_mem_usage(self, device: int) -> tuple[int, int]:
        """Graph memory of ``device`` mapped now, and the most ever (``CU_GRAPH_MEM_ATTR_*``)."""
        return self._graph_mem_used[device], self._graph_mem_high[device]

    @_locked
    def graph_mem_reset_high(self, device: int) -> None:
        self._graph_mem_high[device] = self._graph_mem_used[device]

    @_locked
    def graph_exec_update(self, graph_exec: int, graph: int) -> tuple[str, int]:
        """``cuGraphExecUpdate``: give ``graph_exec`` the work of ``graph``, whose topology
        must be its graph's; returns (``CUgraphExecUpdateResult`` name, node to blame)."""
        call = "cuGraphExecUpdate"
        ex = self._exec(graph_exec, call)
        g = self._graph(graph, call)
        copy_of: dict[int, Node] = {}
        try:
            nodes = flatten(g, copy_of, INVALID_VALUE, call)
        except CudaError:
            return "error_topology_changed", 0
        old = ex.nodes
        if len(nodes) != len(old):
            return "error_topology_changed", 0
        pos = {id(n): i for i, n in enumerate(old)}
        new_pos = {id(n): i for i, n in enumerate(nodes)}
        for a, b in zip(old, nodes, strict=False):
            if sorted(pos[id(d)] for d in a.deps) != sorted(new_pos[id(d)] for d in b.deps):
                return "error_topology_changed", b.handle
            if a.ntype != b.ntype or a.kind != b.kind:
                return "error_node_type_changed", b.handle
            if a.kind in ("alloc", "free") and a.alloc is not b.alloc:
                return "error_not_supported", b.handle
        remap: dict[int, Node] = {}
        for a, b in zip(old, nodes, strict=False):
            a.fn, a.desc, a.accesses, a.on_ready = b.fn, b.desc, b.accesses, b.on_ready
            a.event, a.params, a.body = b.event, b.params, b.body
            remap[b.handle] = a
        ex.copy_of = remap
        ex.cond_handles = list(g.cond_handles)
        for h in g.cond_handles:  # the executable graph uses them now: kept while it lives
            if ex.graph not in h.holders:
                h.holders.append(ex.graph)
        return "success", 0

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
        self._release_cond_handles(ex.graph.cond_handles + ex.cond_handles)

    @_locked
    def graph_destroy(self, graph: int) -> None:
        g = self._graph(graph, "cuGraphDestroy")
        if g.owner is not None and g.owner.graph is not None and not g.owner.graph.destroyed:
            raise CudaError(INVALID_VALUE, "cuGraphDestroy", f"graph 0x{graph:x} belongs to "
                                                             f"node 0x{g.owner.handle:x}")
        for c in self._captures.values():
            if c.graph is g:
                raise CudaError(INVALID_VALUE, "cuGraphDestroy", f"graph 0x{graph:x} is being "
                                                                 f"captured into ({c.describe()})")
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
