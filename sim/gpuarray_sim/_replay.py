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
