"""Replaying a launch of an executable graph in the simulator: its branches run concurrently.

One concern: turning a graph's nodes into queued stream work for one
``cuGraphLaunch``.  A graph is a DAG, not a sequence: two nodes with no path
between them may run at the same time on a GPU.  So the replay gives each
stream of the capture a *lane*: the nodes captured on the origin stream run
on the launch stream, those captured on each forked stream on a hidden
stream of the executable graph.  A node waits for the nodes it depends on in
other lanes (the graph's edges become op dependencies and vector clocks, as
an event wait makes them), the first node of a forked lane waits for the
launch's start, and the launch stream waits for every lane at the end.  The
race detector therefore sees unordered branches as it sees two streams --
a race between them is reported -- and sticky faults, poisoning and
use-after-free checks see every node.
"""

from __future__ import annotations

import functools
from typing import Any

_UNMAPPED_BY_FREE_NODE = "freed by its graph's free node"


def _describe_lane(ex: Any, k: int) -> str:
    return (f"branch {k} of graph 0x{ex.graph.handle:x} (the work its capture's stream "
            f"#{k + 1} recorded, replayed on a stream of its own)")


def lanes_of(b: Any, ex: Any, s: Any) -> list[Any]:
    """The launch stream, then one hidden stream per forked stream of the capture."""
    n = 1 + max((node.lane for node in ex.nodes), default=0)
    while len(ex.lanes) < n - 1:
        lane = b.sched.new_stream(b._handle(), ex.ctx, "non_blocking")
        lane.describe = functools.partial(_describe_lane, ex, len(ex.lanes) + 1)
        ex.lanes.append(lane)
    return [s, *ex.lanes[:n - 1]]


def replay(b: Any, ex: Any, s: Any, start: Any, tag: str, map_memory: Any, unmap_memory: Any) -> Any:
    """Queue one launch's nodes after ``start`` (the launch's op on ``s``); return its last op."""
    sched = b.sched
    lanes = lanes_of(b, ex, s)
    used: set[int] = set()
    done: dict[int, list[Any]] = {}  # id(node) -> the ops that complete it
    for n in ex.nodes:
        lane = lanes[n.lane]
        deps = [op for d in n.deps for op in done.get(id(d), ()) if op.stream is not lane]
        if n.lane and n.lane not in used:
            deps.append(start)
        used.add(n.lane)
        desc = f"{n.desc} {tag}"
        if n.kind == "alloc":
            sched.enqueue(lane, functools.partial(map_memory, b, n.alloc), desc,
                          [(n.alloc.base, n.alloc.size, True)], extra_deps=deps)
        elif n.kind == "free":
            sched.enqueue(lane, functools.partial(unmap_memory, b, n.alloc, _UNMAPPED_BY_FREE_NODE),
                          desc, [(n.alloc.base, n.alloc.size, True)], extra_deps=deps)
        elif n.kind == "host":
            if deps:  # the host function waits for its edges first
                sched.enqueue(lane, None, f"{desc}: its dependencies", extra_deps=deps)
            b._queue_host_fn(lane, n.fn, desc)
        elif n.kind in ("empty", "record"):
            op = sched.enqueue(lane, None, desc, extra_deps=deps)
            if n.kind == "record" and not n.event.destroyed:
                ev = n.event
                ev.op, ev.vc, ev.capture, ev.cap_deps = op, dict(op.vc), None, []
        elif n.kind == "cond":
            sched.enqueue(lane, functools.partial(run_conditional, n), desc,
                          body_accesses(n), extra_deps=deps)
        elif n.kind == "wait":
            ev = n.event
            if ev.op is not None and not ev.destroyed:
                sched.enqueue(lane, None, desc, extra_deps=[ev.op, *deps], extra_vc=ev.vc)
            else:
                sched.enqueue(lane, None, desc, extra_deps=deps)
        else:
            sched.enqueue(lane, n.fn, desc, n.accesses, extra_deps=deps, on_ready=n.on_ready)
        done[id(n)] = [lane.tail]
    tails = [lanes[k].tail for k in sorted(used) if k]
    if tails:
        sched.enqueue(s, None, f"end of {tag.strip('()')}: its branches joined", extra_deps=tails)
    return s.tail


def _body_nodes(n: Any) -> list[list[Any]]:
    """The work of each body graph of conditional node ``n`` of an executable graph, in
    topological order (its bodies flattened at instantiation: ``_graph.flatten``)."""
    return n.body


def body_accesses(n: Any) -> list[tuple[int, int, bool]]:
    """What a conditional node's bodies may touch: the node's accesses, for the race detector."""
    out: list[tuple[int, int, bool]] = []
    for nodes in _body_nodes(n):
        for m in nodes:
            out.extend(body_accesses(m) if m.kind == "cond" else m.accesses)
    return out


def _run_body(nodes: list[Any]) -> None:
    for m in nodes:
        if m.kind == "cond":
            run_conditional(m)
        elif m.fn is not None:
            if m.on_ready is not None:
                m.on_ready()
            m.fn()


def run_conditional(n: Any) -> None:
    """A conditional node runs: its handle's value picks the body (``if``/``switch``) or
    repeats it (``while``); the body's work runs in order, inside this node's work."""
    handle, kind = n.params[:2]
    bodies = _body_nodes(n)
    if kind == "while":
        while handle.value():
            _run_body(bodies[0])
        return
    v = handle.value()
    if kind == "if":
        if v:
            _run_body(bodies[0])
        elif len(bodies) == 2:
            _run_body(bodies[1])
    elif v < len(bodies):
        _run_body(bodies[v])
