"""Stream capture in the simulator: capture sequences, the calls they prohibit, invalidation.

One concern: the rules of ``cuStreamBeginCapture`` as ``cuda.h`` and the CUDA
programming guide ("Prohibited and Unhandled Operations") state them.  Work
queued on a capturing stream is not run: it becomes a node of the capture's
graph (:class:`Node`), depending on the stream's current dependency set.
The graph itself, its instantiation and replay are in ``_graph.py``.

The rules (each refused call returns its code *and invalidates* the
capture(s) it conflicts with, as CUDA does; an invalidated capture fails
every later use of its streams with ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED``
(901) until ``cuStreamEndCapture``, which ends it with 901 and no graph):

- "potentially unsafe" calls (:data:`UNSAFE_CALLS`: ``cuMemAlloc``,
  ``cuMemFree``, page-locked allocation and registration, managed
  allocation, pool attributes, module loads, graph instantiation and
  destruction; and ``cuMemAllocAsync`` on a
  stream outside the capture, as an H200 answered, with ``cuMemFreeAsync``
  treated alike) are refused with 900
  (``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``) according to the calling
  thread's mode (``cuThreadExchangeStreamCaptureMode``): ``global`` (the
  default) while this thread has a non-relaxed capture or *any* thread has a
  global one; ``thread_local`` while this thread has a non-relaxed capture;
  ``relaxed`` never;
- synchronising or querying a capturing stream, or the context
  (``cuStreamSynchronize``, ``cuStreamQuery``, ``cuCtxSynchronize``): 900;
- querying or synchronising an event last recorded in a capture
  (``cuEventQuery``, ``cuEventSynchronize``, ``cuEventElapsedTime``): 907;
- any use of the legacy stream while a blocking stream of its context
  captures: 906 (``cuStreamIsCapturing`` on it answers 906 without
  invalidating, as documented);
- waiting, from a capturing stream, on an event captured by another
  capture: 902 (merge); on an event recorded outside any capture without
  ``CU_EVENT_WAIT_EXTERNAL``: 905 (isolation);
- a copy to or from pageable host memory on a capturing stream: 900.  CUDA
  records such a copy as a node that re-reads (or rewrites) the host
  buffer at every launch, long after the call returned; the simulator
  refuses it (stricter than the driver, as PyTorch now is).

A stream that waits on an event captured by an active capture joins it (a
fork); ``cuStreamEndCapture`` on the origin stream fails with 904
(``..._UNJOINED``) when a joined stream's work was not joined back into the
origin, and with 908 (``..._WRONG_THREAD``) when a non-relaxed capture is
ended on another thread (the capture then stays active).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from gpuarray._driver._base import CAPTURE_MODES
from gpuarray.errors import CudaError

from ._codes import STREAM_CAPTURE_IMPLICIT as IMPLICIT
from ._codes import STREAM_CAPTURE_INVALIDATED as INVALIDATED
from ._codes import STREAM_CAPTURE_UNSUPPORTED as UNSUPPORTED

# The simulator's classes are imported by nothing here (they import this module):
# the backend (``SimCore``), its contexts and streams are typed as Any.
SimCore: TypeAlias = Any
SimContext: TypeAlias = Any
SimStream: TypeAlias = Any


MODES = CAPTURE_MODES  # the driver interface's names, in CUstreamCaptureMode order

#: The driver-interface calls CUDA counts as "potentially unsafe" during a capture
#: (not stream-ordered, so not observed by it): ``cuThreadExchangeStreamCaptureMode``'s
#: example is ``cudaMalloc``; the frees, page-locked memory, pool attributes and
#: module loads are of the same kind.
UNSAFE_CALLS = frozenset({
    "mem_alloc", "mem_free", "mem_host_alloc", "mem_free_host", "mem_host_register",
    "mem_host_unregister", "mem_alloc_managed", "mempool_set_release_threshold",
    "module_load_data", "module_unload",
    # an H200 refused these with 900 during a global capture (2026-11-28)
    "graph_instantiate", "graph_exec_destroy", "graph_destroy",
})

#: The unsafe calls that act on the calling thread's current context: with none current
#: a driver answers CUDA_ERROR_INVALID_CONTEXT before it looks at any capture, so the
#: call neither fails with 900 nor invalidates another thread's global capture (an
#: H200, 2026-11-28: cuMemAlloc from a fresh thread during a global capture gave 201).
NEEDS_CONTEXT = frozenset({"mem_alloc", "mem_host_alloc", "mem_host_register",
                           "mem_alloc_managed", "module_load_data"})

_ids = itertools.count(1)
#: Graph node handles (``CUgraphNode``), and the live nodes by handle.
_node_ids = itertools.count(0x6E00_0000, 0x20)
NODES: weakref.WeakValueDictionary[int, Node] = weakref.WeakValueDictionary()
#: The node type of captured work, by the call that queued it.
_NODE_TYPES = {
    "kernel": "kernel",
    "cuMemcpyHtoDAsync": "memcpy", "cuMemcpyDtoHAsync": "memcpy", "cuMemcpyDtoDAsync": "memcpy",
    "cuMemcpy2DAsync": "memcpy", "cuMemcpyAsync": "memcpy", "cuMemcpyPeerAsync": "memcpy",
    "cuMemsetD8Async": "memset", "cuMemsetD16Async": "memset", "cuMemsetD32Async": "memset",
    "cuMemsetD2D8Async": "memset", "cuMemsetD2D16Async": "memset", "cuMemsetD2D32Async": "memset",
    "cuMemAllocAsync": "mem_alloc", "cuMemAllocFromPoolAsync": "mem_alloc",
    "cuMemFreeAsync": "mem_free",
}
_KIND_TYPES = {"wait": "wait_event", "alloc": "mem_alloc", "free": "mem_free", "op": "kernel"}


class Node:
    """One node of a captured graph: queued work that a launch replays.

    ``kind``: ``"op"`` (a kernel, copy or memset: ``fn`` is rerun at every
    launch), ``"alloc"`` / ``"free"`` (graph memory: ``alloc`` is the
    allocation), ``"host"`` (a host function: ``fn`` takes the status),
    ``"wait"`` (an external event wait: ``event``).  ``lane``: the index, in
    its capture's streams, of the stream that captured it (a launch replays
    each lane on a stream of its own, so unordered branches run concurrently).
    """

    __slots__ = ("kind", "fn", "desc", "accesses", "deps", "on_ready", "alloc", "event", "lane",
                 "handle", "ntype", "graph", "params", "body", "__weakref__")
    #: Queued work returned by ``Scheduler.enqueue`` says whether it was captured.
    captured = True
    done = False

    def __init__(self, kind: str, fn: Callable[..., object] | None, desc: str,
                 accesses: Sequence[tuple[int, int, bool]], deps: list[Node],
                 on_ready: Callable[[], object] | None = None, alloc: Any = None,
                 event: Any = None) -> None:
        self.kind = kind
        self.fn = fn
        self.desc = desc
        self.accesses = list(accesses)
        self.deps = deps
        self.on_ready = on_ready
        self.alloc = alloc
        self.event = event
        self.lane = 0
        #: Its ``CUgraphNode`` handle, its ``CUgraphNodeType`` (cuda.h's name, lower case:
        #: ``"kernel"``, ``"memcpy"``...), the graph it is in, what the stand-in keeps of the
        #: parameters it was made with, and the graphs it holds (a child graph node's one,
        #: a conditional node's bodies: ``_graph_build.py``).
        self.handle = next(_node_ids)
        self.ntype = _NODE_TYPES.get(desc.split(" ", 1)[0], _KIND_TYPES.get(kind, kind))
        self.graph: Any = None
        self.params: Any = None
        self.body: Any = None
        NODES[self.handle] = self


class SimCapture:
    """One capture sequence: its graph, the streams in it, who began it and how."""

    def __init__(self, origin: SimStream, mode: str, graph: Any) -> None:
        self.id = next(_ids)
        self.origin = origin
        self.ctx: SimContext = origin.ctx
        self.mode = mode
        self.thread = threading.get_ident()
        self.graph = graph
        self.streams: list[SimStream] = [origin]
        self.status = "active"
        self.reason = ""
        #: ``cuStreamBeginCaptureToGraph``: the graph is the caller's (never dropped here).
        self.to_graph = False
        #: A node made by the explicit graph API (``_graph_build.py``): pageable host memory
        #: is allowed (a memcpy node re-reads and rewrites it at every launch).
        self.explicit = False

    def describe(self) -> str:
        return (f"the {self.mode} capture #{self.id} begun on {self.origin.describe()} "
                f"by thread {self.thread}")


def invalidate(b: SimCore, caps: Sequence[SimCapture], reason: str) -> None:
    for cap in caps:
        if cap.status == "active":
            cap.status = "invalidated"
            cap.reason = reason


def refuse(b: SimCore, code: int, call: str, caps: Sequence[SimCapture], why: str) -> None:
    """Invalidate ``caps`` and raise ``code`` for ``call``."""
    reason = f"{call} {why}"
    invalidate(b, caps, reason)
    names = "; ".join(c.describe() for c in caps)
    raise CudaError(code, call, f"{why} ({names} is invalidated)")


def thread_mode(b: SimCore) -> str:
    return getattr(b._tls, "capture_mode", "global")


def check_unsafe(b: SimCore, call: str) -> None:
    """A potentially unsafe call: refused (900) where the calling thread's mode says so."""
    mode = thread_mode(b)
    if mode == "relaxed":
        return
    me = threading.get_ident()
    conflicts = [c for c in b._captures.values() if c.status == "active" and (
        (c.thread == me and c.mode != "relaxed")
        or (mode == "global" and c.mode == "global" and c.thread != me))]
    if conflicts:
        refuse(b, UNSUPPORTED, call, conflicts,
               f"is a potentially unsafe call, prohibited in {mode} mode during a capture")


def blocking_captures(b: SimCore, ctx: SimContext) -> list[SimCapture]:
    """Active captures of ``ctx`` with a blocking stream (they make the legacy stream unusable)."""
    return [c for c in b._captures.values()
            if c.ctx is ctx and any(s.blocking for s in c.streams)]


def check_legacy(b: SimCore, s: SimStream, call: str) -> None:
    """Use of the legacy stream while a blocking stream of its context captures: 906."""
    if s.kind == "legacy" and b._captures:
        caps = blocking_captures(b, s.ctx)
        if caps:
            refuse(b, IMPLICIT, call, caps, "uses the legacy stream, which would depend on a "
                                            "capturing blocking stream")


def check_stream(b: SimCore, s: SimStream, call: str, what: str) -> None:
    """A call that must not act on a capturing stream (synchronise, query): 900."""
    if s.capture is not None:
        if s.capture.status != "active":
            raise_invalidated(s.capture, call)
        refuse(b, UNSUPPORTED, call, [s.capture], f"{what} a capturing stream")
    check_legacy(b, s, call)


def raise_invalidated(cap: SimCapture, call: str) -> None:
    raise CudaError(INVALIDATED, call, f"{cap.describe()} was invalidated earlier: {cap.reason}")


def captured(b: SimCore, stream: SimStream, fn: Callable[[], object] | None, desc: str,
             accesses: Sequence[tuple[int, int, bool]],
             on_ready: Callable[[], object] | None) -> Node | None:
    """The scheduler's hook while captures exist: record work queued on a capturing stream.

    Returns the node, or None for work that runs as usual (a stream not in a
    capture); refuses the legacy stream next to a capturing blocking stream.
    """
    call = desc.split(" ", 1)[0]
    cap = stream.capture
    if cap is None:
        check_legacy(b, stream, call)
        return None
    return add_node(cap, stream, Node("op", fn, desc, accesses, list(stream.cap_deps), on_ready),
                    call)


def add_node(cap: SimCapture, stream: SimStream, node: Node, call: str) -> Node:
    """Append ``node`` to ``cap`` as the new tail of ``stream`` (901 if it was invalidated)."""
    if cap.status != "active":
        raise_invalidated(cap, call)
    node.lane = cap.streams.index(stream) if stream in cap.streams else 0
    node.graph = cap.graph
    cap.graph.nodes.append(node)
    stream.cap_deps = [node]
    return node


def unjoined(cap: SimCapture) -> list[SimStream]:
    """Streams of ``cap`` whose captured work the origin stream does not depend on."""
    seen: set[int] = set()
    stack = list(cap.origin.cap_deps)
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(n.deps)
    return [s for s in cap.streams[1:] if any(id(n) not in seen for n in s.cap_deps)]
