"""Graphs built node by node in the simulator: the explicit graph API on the capture's graph model.

One concern: ``cuGraphCreate``, the ``cuGraphAdd*Node`` calls, edges,
queries (nodes, roots, edges, dependencies, types), node removal, cloning,
child graphs, event record/wait nodes, conditional nodes and their handles,
and setting a node's parameters (in a graph and in an executable graph).

One graph model: a node made here is the :class:`~._capture.Node` a capture
makes.  Kernel, memcpy, memset and memory nodes are made *by capturing the
same call* on a private stream whose capture appends to the graph with the
given dependencies (:meth:`SimGraphBuildCalls.graph_add_built`): the node gets
the same work, accesses and checks a captured launch or copy gets, and
instantiation, replay, the race detector and sticky faults see no
difference.  Copies to and from pageable host memory, which a capture
refuses, are allowed in such a node (CUDA allows them in memcpy nodes): they
read and write the host buffer at every launch.

A conditional node holds its body graphs (``node.body``); its handle is the
address of 4 bytes of device memory that the graph owns, so
``cudaGraphSetConditional`` in device code is a store there (the PTX
executor's ``_ops_graph.py``) and the node reads it when it runs.  A
conditional node runs its body's work in order inside its own queued work
(``_replay.run_conditional``): the body's accesses are the node's, for the
race detector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpuarray.errors import CudaError

from ._capture import NODES, Node, SimCapture
from ._core import INVALID_VALUE, SimCore, _locked

#: ``CU_GRAPH_COND_ASSIGN_DEFAULT``: the handle takes its default at each launch.
COND_ASSIGN_DEFAULT = 1
COND_TYPES = ("if", "while", "switch")
#: Node types a conditional body may hold (cuda.h, CUDA_CONDITIONAL_NODE_PARAMS).
_BODY_TYPES = {"kernel", "empty", "graph", "memset", "memcpy", "conditional"}


class SimCondHandle:
    """A conditional handle: its value lives in 4 bytes of device memory (``address``)."""

    def __init__(self, alloc: Any, default: int, flags: int) -> None:
        self.alloc = alloc
        self.address = alloc.base
        self.default = default
        self.flags = flags

    def value(self) -> int:
        store = self.alloc.store
        return 0 if store is None else int.from_bytes(bytes(store[:4]), "little")

    def set(self, v: int) -> None:
        if self.alloc.store is not None:
            self.alloc.store[:4] = list(int(v & 0xFFFF_FFFF).to_bytes(4, "little"))


class SimGraphBuildCalls(SimCore):
    """The explicit graph calls of the simulator."""

    _graph: Any
    _exec: Any
    _event: Any
    _drop_graph: Any
    _new_graph: Any

    # ------------------------------------------------------------- lookups
    def _node(self, handle: int, call: str, graph: Any = None) -> Node:
        n = NODES.get(int(handle))
        if n is None or n.graph is None or n.graph.destroyed:
            raise CudaError(INVALID_VALUE, call, f"0x{int(handle):x} is not a node of a live graph")
        if graph is not None and n.graph is not graph:
            raise CudaError(INVALID_VALUE, call, f"node 0x{int(handle):x} is not in graph "
                                                 f"0x{graph.handle:x}")
        return n

    def _deps(self, g: Any, deps: Sequence[int], call: str) -> list[Node]:
        out: list[Node] = []
        for d in deps:
            n = self._node(d, call, g)
            if n in out:
                raise CudaError(INVALID_VALUE, call, f"dependency 0x{int(d):x} given twice")
            out.append(n)
        return out

    def _add(self, g: Any, n: Node, deps: list[Node], ntype: str) -> int:
        n.deps = deps
        n.ntype = ntype
        n.graph = g
        g.nodes.append(n)
        return n.handle

    # -------------------------------------------------------------- graphs
    @_locked
    def graph_create(self) -> int:
        """``cuGraphCreate``: an empty graph of the current context."""
        return self._new_graph(self._current("cuGraphCreate")).handle

    @_locked
    def graph_nodes(self, graph: int) -> list[int]:
        return [n.handle for n in self._graph(graph, "cuGraphGetNodes").nodes]

    @_locked
    def graph_root_nodes(self, graph: int) -> list[int]:
        return [n.handle for n in self._graph(graph, "cuGraphGetRootNodes").nodes if not n.deps]

    @_locked
    def graph_edges(self, graph: int) -> list[tuple[int, int]]:
        g = self._graph(graph, "cuGraphGetEdges")
        return [(d.handle, n.handle) for n in g.nodes for d in n.deps]

    @_locked
    def node_type(self, node: int) -> str:
        return self._node(node, "cuGraphNodeGetType").ntype

    @_locked
    def node_graph(self, node: int) -> int:
        return self._node(node, "cuGraphNodeGetContainingGraph").graph.handle

    @_locked
    def node_dependencies(self, node: int) -> list[int]:
        return [d.handle for d in self._node(node, "cuGraphNodeGetDependencies").deps]

    @_locked
    def node_dependents(self, node: int) -> list[int]:
        n = self._node(node, "cuGraphNodeGetDependentNodes")
        return [m.handle for m in n.graph.nodes if n in m.deps]

    @_locked
    def node_params(self, node: int, call: str) -> Any:
        """What the stand-in kept of node ``node``'s parameters (``Node.params``)."""
        return self._node(node, call).params

    @_locked
    def graph_add_edges(self, graph: int, edges: Sequence[tuple[int, int]]) -> None:
        call = "cuGraphAddDependencies"
        g = self._graph(graph, call)
        pairs = [(self._node(a, call, g), self._node(b, call, g)) for a, b in edges]
        for a, b in pairs:
            if a is b or a in b.deps:
                raise CudaError(INVALID_VALUE, call, f"edge 0x{a.handle:x} -> 0x{b.handle:x} "
                                                     "is a self edge or exists already")
        for a, b in pairs:
            b.deps.append(a)

    @_locked
    def graph_remove_edges(self, graph: int, edges: Sequence[tuple[int, int]]) -> None:
        call = "cuGraphRemoveDependencies"
        g = self._graph(graph, call)
        pairs = [(self._node(a, call, g), self._node(b, call, g)) for a, b in edges]
        for a, b in pairs:
            if a not in b.deps:
                raise CudaError(INVALID_VALUE, call, f"no edge 0x{a.handle:x} -> 0x{b.handle:x}")
        for a, b in pairs:
            b.deps.remove(a)

    @_locked
    def graph_destroy_node(self, node: int) -> None:
        n = self._node(node, "cuGraphDestroyNode")
        g = n.graph
        g.nodes.remove(n)
        for m in g.nodes:
            if n in m.deps:
                m.deps.remove(n)
        n.graph = None
        if n.body is not None:
            for body in n.body if isinstance(n.body, list) else [n.body]:
                self._release_body(body)

    def _release_body(self, body: Any) -> None:
        self._graphs.pop(body.handle, None)
        self._drop_graph(body)

    # ----------------------------------------------------------- add nodes
    @_locked
    def graph_add_empty(self, graph: int, deps: Sequence[int]) -> int:
        g = self._graph(graph, "cuGraphAddEmptyNode")
        return self._add(g, Node("empty", None, "empty node", [], []),
                         self._deps(g, deps, "cuGraphAddEmptyNode"), "empty")

    @_locked
    def graph_add_host(self, graph: int, deps: Sequence[int], fn: Callable[[int], None],
                       params: Any = None) -> int:
        call = "cuGraphAddHostNode"
        g = self._graph(graph, call)
        self._refuse_in_body(g, "host", call)
        n = Node("host", fn, "host node", [], [])
        n.params = params
        return self._add(g, n, self._deps(g, deps, call), "host")

    @_locked
    def graph_add_event(self, graph: int, deps: Sequence[int], event: int, record: bool) -> int:
        call = "cuGraphAddEventRecordNode" if record else "cuGraphAddEventWaitNode"
        g = self._graph(graph, call)
        self._refuse_in_body(g, "event", call)
        ev = self._event(event, call)
        kind = "record" if record else "wait"
        n = Node(kind, None, f"event {kind} node of event 0x{ev.handle:x}", [], [], event=ev)
        return self._add(g, n, self._deps(g, deps, call), "event_record" if record else "wait_event")

    @_locked
    def node_event(self, node: int) -> int:
        n = self._node(node, "cuGraphEventRecordNodeGetEvent")
        if n.kind not in ("record", "wait"):
            raise CudaError(INVALID_VALUE, "cuGraphEventRecordNodeGetEvent",
                            f"node 0x{node:x} is a {n.ntype} node")
        return n.event.handle

    @_locked
    def node_set_event(self, node: int, event: int) -> None:
        n = self._node(node, "cuGraphEventRecordNodeSetEvent")
        if n.kind not in ("record", "wait"):
            raise CudaError(INVALID_VALUE, "cuGraphEventRecordNodeSetEvent",
                            f"node 0x{node:x} is a {n.ntype} node")
        n.event = self._event(event, "cuGraphEventRecordNodeSetEvent")

    @_locked
    def graph_add_child(self, graph: int, deps: Sequence[int], child: int, move: bool = False) -> int:
        call = "cuGraphAddChildGraphNode"
        g = self._graph(graph, call)
        c = self._graph(child, call)
        if c is g:
            raise CudaError(INVALID_VALUE, call, "a graph cannot be its own child")
        if any(n.kind in ("alloc", "free") for n in c.nodes):
            raise CudaError(INVALID_VALUE, call, "a child graph may not hold memory nodes")
        if move:
            self._graphs.pop(c.handle, None)
            body = c
        else:
            body = self._clone(c)
        n = Node("child", None, f"child graph node of graph 0x{body.handle:x}", [], [])
        n.body = body
        body.owner = n
        return self._add(g, n, self._deps(g, deps, call), "graph")

    @_locked
    def node_child_graph(self, node: int) -> int:
        n = self._node(node, "cuGraphChildGraphNodeGetGraph")
        if n.kind != "child":
            raise CudaError(INVALID_VALUE, "cuGraphChildGraphNodeGetGraph",
                            f"node 0x{node:x} is a {n.ntype} node")
        self._graphs[n.body.handle] = n.body  # its handle names it (owned by the node)
        return n.body.handle

    def graph_add_built(self, graph: int, deps: Sequence[int], ntype: str,
                        build: Callable[[int], Any], params: Any = None) -> tuple[int, Any]:
        """Make a node by capturing ``build(stream)`` -- a launch, copy, memset, allocation or
        free on ``stream`` -- into ``graph`` after ``deps``; returns ``(node, build's result)``."""
        with self._lock:
            call = {"kernel": "cuGraphAddKernelNode", "memcpy": "cuGraphAddMemcpyNode",
                    "memset": "cuGraphAddMemsetNode", "mem_alloc": "cuGraphAddMemAllocNode",
                    "mem_free": "cuGraphAddMemFreeNode"}[ntype]
            g = self._graph(graph, call)
            self._refuse_in_body(g, ntype, call)
            dnodes = self._deps(g, deps, call)
            before = len(g.nodes)
            result = self._capture_into(g, dnodes, build)
            made = g.nodes[before:]
            if len(made) != 1:  # a zero-sized copy or memset queues nothing
                for n in made:
                    g.nodes.remove(n)
                n = Node("empty", None, f"{ntype} node (no work)", [], [])
                self._add(g, n, dnodes, ntype)
            n = g.nodes[-1]
            n.ntype = ntype
            n.params = params
            return n.handle, result

    def _capture_into(self, g: Any, deps: list[Node], build: Callable[[int], Any]) -> Any:
        """Run ``build(stream)`` on a private stream whose capture appends to ``g`` after ``deps``."""
        s = self.sched.new_stream(self._handle(), g.ctx, "non_blocking")
        self._streams[s.handle] = s
        cap = SimCapture(s, "relaxed", g)
        cap.explicit = True
        s.capture, s.cap_deps = cap, list(deps)
        self.sched.capturing += 1
        try:
            return build(s.handle)
        finally:
            self.sched.capturing -= 1
            s.capture, s.cap_deps = None, []
            del self._streams[s.handle]
            self.sched.forget_stream(s)

    def node_rebuild(self, node: int, build: Callable[[int], Any], params: Any,
                     ntype: str, call: str) -> None:
        """Set a kernel, memcpy or memset node's parameters: its work is made anew."""
        with self._lock:
            n = self._node(node, call)
            if n.ntype != ntype:
                raise CudaError(INVALID_VALUE, call, f"node 0x{node:x} is a {n.ntype} node")
            scratch = self._new_graph(n.graph.ctx, register=False)
            self._capture_into(scratch, [], build)
            _transplant(n, scratch.nodes[0] if scratch.nodes else None)
            n.params = params

    def exec_node_rebuild(self, graph_exec: int, node: int, build: Callable[[int], Any],
                          params: Any, ntype: str, call: str) -> None:
        """Set the parameters of ``node``'s copy in an executable graph (its next launches)."""
        with self._lock:
            ex = self._exec(graph_exec, call)
            n = ex.copy_of.get(int(node))
            if n is None:
                raise CudaError(INVALID_VALUE, call, f"node 0x{int(node):x} is not in the graph "
                                                     f"of executable graph 0x{graph_exec:x}")
            if n.ntype != ntype:
                raise CudaError(INVALID_VALUE, call, f"node 0x{node:x} is a {n.ntype} node")
            scratch = self._new_graph(ex.ctx, register=False)
            self._capture_into(scratch, [], build)
            _transplant(n, scratch.nodes[0] if scratch.nodes else None)
            n.params = params

    @_locked
    def exec_node_set_event(self, graph_exec: int, node: int, event: int, call: str) -> None:
        ex = self._exec(graph_exec, call)
        n = ex.copy_of.get(int(node))
        if n is None or n.kind not in ("record", "wait"):
            raise CudaError(INVALID_VALUE, call, f"node 0x{int(node):x} is no event node of "
                                                 f"executable graph 0x{graph_exec:x}")
        n.event = self._event(event, call)

    # --------------------------------------------------------- conditional
    @_locked
    def cond_handle_create(self, graph: int, default: int, flags: int) -> int:
        """``cuGraphConditionalHandleCreate``: a handle of ``graph`` (its device address)."""
        call = "cuGraphConditionalHandleCreate"
        g = self._graph(graph, call)
        if flags & ~COND_ASSIGN_DEFAULT:
            raise CudaError(INVALID_VALUE, call, f"flags {flags}")
        a = self.memory.alloc_device(g.ctx.device, 4, kind="graph", call=call)
        h = SimCondHandle(a, int(default) & 0xFFFF_FFFF, flags)
        h.set(h.default if flags & COND_ASSIGN_DEFAULT else 0)
        g.cond_handles.append(h)
        self._cond_handles[h.address] = h
        return h.address

    @_locked
    def graph_add_conditional(self, graph: int, deps: Sequence[int], handle: int, ctype: int,
                              size: int) -> tuple[int, list[int]]:
        """A conditional node; returns it and its body graphs (``size`` of them)."""
        call = "cuGraphAddNode"
        g = self._graph(graph, call)
        h = self._cond_handles.get(int(handle))
        if h is None or h not in _root(g).cond_handles:
            raise CudaError(INVALID_VALUE, call, f"conditional handle 0x{int(handle):x} is not "
                                                 "one of this graph's")
        if not 0 <= ctype < len(COND_TYPES):
            raise CudaError(INVALID_VALUE, call, f"conditional type {ctype}")
        kind = COND_TYPES[ctype]
        if not (size == 1 or (kind == "if" and size == 2) or (kind == "switch" and size >= 1)):
            raise CudaError(INVALID_VALUE, call, f"size {size} for a {kind} node")
        n = Node("cond", None, f"conditional {kind} node of handle 0x{h.address:x}", [], [])
        n.params = (h, kind)
        bodies = []
        for _ in range(size):
            b = self._new_graph(g.ctx)
            b.owner = n
            bodies.append(b)
        n.body = bodies
        self._add(g, n, self._deps(g, deps, call), "conditional")
        return n.handle, [b.handle for b in bodies]

    def _refuse_in_body(self, g: Any, ntype: str, call: str) -> None:
        owner = g.owner
        while owner is not None:
            if owner.ntype == "conditional":
                if ntype not in _BODY_TYPES:
                    raise CudaError(INVALID_VALUE, call, f"a conditional node's body may not hold "
                                                         f"a {ntype} node")
                return
            owner = owner.graph.owner if owner.graph is not None else None

    # --------------------------------------------------------------- clone
    @_locked
    def graph_clone(self, graph: int) -> int:
        g = self._graph(graph, "cuGraphClone")
        if any(n.kind in ("alloc", "free") for n in g.nodes):
            raise CudaError(INVALID_VALUE, "cuGraphClone", "a graph with memory nodes cannot be "
                                                           "cloned")
        return self._clone(g).handle

    def _clone(self, g: Any) -> Any:
        c = self._new_graph(g.ctx)
        c.origin = g
        c.user_refs = self._take_user_refs(dict(g.user_refs))
        copies: dict[int, Node] = {}
        for n in g.nodes:
            m = copy_node(n)
            m.graph = c
            m.params = n.params
            if n.kind == "child":
                m.body = self._clone(n.body)
                m.body.owner = m
            elif n.kind == "cond":
                m.body = []
                for b in n.body:
                    cb = self._clone(b)
                    cb.owner = m
                    m.body.append(cb)
            c.clone_of[m.handle] = n.handle
            copies[id(n)] = m
            c.nodes.append(m)
        for n in g.nodes:
            copies[id(n)].deps = [copies[id(d)] for d in n.deps]
        c.cond_handles = list(g.cond_handles)
        return c

    @_locked
    def graph_node_find_in_clone(self, node: int, clone: int) -> int:
        call = "cuGraphNodeFindInClone"
        c = self._graph(clone, call)
        for h, orig in c.clone_of.items():
            if orig == int(node):
                return h
        raise CudaError(INVALID_VALUE, call, f"node 0x{int(node):x} has no copy in graph "
                                             f"0x{int(clone):x}")

    # ---------------------------------------------------------- debug dot
    @_locked
    def graph_debug_dot(self, graph: int) -> str:
        g = self._graph(graph, "cuGraphDebugDotPrint")
        lines = [f'digraph "graph_0x{g.handle:x}" {{']
        for n in g.nodes:
            label = f"{n.ntype.upper()}\\n{n.desc}".replace('"', "'")
            lines.append(f'  "0x{n.handle:x}" [label="{label}"];')
        for n in g.nodes:
            for d in n.deps:
                lines.append(f'  "0x{d.handle:x}" -> "0x{n.handle:x}";')
        lines.append("}")
        return "\n".join(lines) + "\n"


def _root(g: Any) -> Any:
    """The top graph ``g`` is a body (or child) of: conditional handles are created there."""
    while g.owner is not None and g.owner.graph is not None:
        g = g.owner.graph
    return g


def copy_node(n: Node) -> Node:
    """A new node (new handle) doing what ``n`` does; its edges are the caller's to set."""
    m = Node(n.kind, n.fn, n.desc, n.accesses, [], n.on_ready, n.alloc, n.event)
    m.ntype = n.ntype
    m.params = n.params
    m.body = n.body
    return m


def _transplant(n: Node, src: Node | None) -> None:
    """Give ``n`` the work of ``src`` (None: no work, a zero-sized copy or memset)."""
    if src is None:
        n.kind, n.fn, n.accesses, n.on_ready = "empty", None, [], None
        return
    n.kind, n.fn, n.desc, n.accesses, n.on_ready = src.kind, src.fn, src.desc, src.accesses, src.on_ready
    n.alloc = src.alloc
