"""Graph replays in the simulator run unordered branches concurrently, as a GPU may.

A fork/join capture (an event recorded on the origin stream, a second stream
waiting on it, an event back) makes a graph whose two branches have no edge
between them.  A launch replays each branch on a stream of its own with the
graph's edges as dependencies (``sim/_replay.py``): the race detector sees a
race between branches, and ordered branches keep their order.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpuarray.errors import StreamOrderError


def _fork_join(b, s, t, branch0, branch1, edge=False):
    """Capture on ``s``: fork ``t``, ``branch0`` on s, ``branch1`` on t, join; the executable graph.

    ``edge``: ``t``'s branch also waits for ``s``'s (an edge between the branches).
    """
    fork, mid, join = (b.event_create(timing=False) for _ in range(3))
    b.stream_begin_capture(s, "global")
    b.event_record(fork, s)
    b.stream_wait_event(t, fork)
    branch0(s)
    if edge:
        b.event_record(mid, s)
        b.stream_wait_event(t, mid)
    branch1(t)
    b.event_record(join, t)
    b.stream_wait_event(s, join)
    return b.graph_instantiate(b.stream_end_capture(s))


def _host(b, d, n, s):
    out = np.zeros(n, np.uint8)
    b.memcpy_dtoh_async(out.ctypes.data, d, n, s)
    b.stream_synchronize(s)
    return out


def test_unordered_branches_writing_the_same_memory_race_at_replay(b):
    s, t = b.stream_create(non_blocking=True), b.stream_create(non_blocking=True)
    d = b.mem_alloc(64)
    ex = _fork_join(b, s, t, lambda x: b.memset_d8_async(d, 1, 64, x),
                    lambda x: b.memset_d8_async(d, 2, 64, x))
    with pytest.raises(StreamOrderError, match="branch 1 of graph"):
        b.graph_launch(ex, s)


def test_branches_ordered_by_an_edge_do_not_race_and_keep_their_order(b):
    s, t = b.stream_create(non_blocking=True), b.stream_create(non_blocking=True)
    d, e = b.mem_alloc(64), b.mem_alloc(64)
    ex = _fork_join(b, s, t, lambda x: b.memset_d8_async(d, 7, 64, x),
                    lambda x: b.memcpy_dtod_async(e, d, 64, x), edge=True)
    for _ in range(2):
        b.memset_d8_async(e, 0, 64, s)
        b.graph_launch(ex, s)
        assert _host(b, e, 64, s).tolist() == [7] * 64  # the copy ran after the memset


def test_disjoint_branches_run_and_the_launch_stream_waits_for_both(b):
    s, t = b.stream_create(non_blocking=True), b.stream_create(non_blocking=True)
    d = b.mem_alloc(64)
    ex = _fork_join(b, s, t, lambda x: b.memset_d8_async(d, 3, 32, x),
                    lambda x: b.memset_d8_async(d + 32, 4, 32, x))
    b.graph_launch(ex, s)
    b.graph_launch(ex, s)  # launches of one graph are ordered: no race between them
    assert _host(b, d, 64, s).tolist() == [3] * 32 + [4] * 32
    b.graph_exec_destroy(ex)


def test_a_read_after_the_launch_on_the_launch_stream_is_ordered_after_every_branch(b):
    s, t = b.stream_create(non_blocking=True), b.stream_create(non_blocking=True)
    d = b.mem_alloc(64)
    ex = _fork_join(b, s, t, lambda x: None, lambda x: b.memset_d8_async(d, 9, 64, x))
    b.graph_launch(ex, s)
    b.memset_d8_async(d, 5, 64, s)  # after the launch on its stream: no race with branch 1
    assert _host(b, d, 64, s).tolist() == [5] * 64


def test_a_conditional_handle_lives_while_a_graph_or_executable_graph_uses_it(b):
    # its 4 bytes of device memory used to stay allocated (and the handle known) forever
    used = b.memory.used[0]
    g = b.graph_create()
    h = b.cond_handle_create(g, 1, 1)
    clone = b.graph_clone(g)
    b.graph_destroy(g)
    assert b.memory.find(h).alive                # the clone holds it
    ex = b.graph_instantiate(clone)
    b.graph_destroy(clone)
    assert b.memory.find(h).alive                # the executable graph uses it
    b.graph_exec_destroy(ex)
    a = b.memory.find(h)
    assert a is None or not a.alive
    assert h not in b._cond_handles and b.memory.used[0] == used


def test_a_conditional_handle_made_for_a_body_graph_serves_a_node_in_that_body(b):
    # cuda.core makes the inner handle of a nested conditional with the outer body's graph;
    # the node that used it was refused ("not one of this graph's")
    g = b.graph_create()
    outer = b.cond_handle_create(g, 1, 1)
    _node, bodies = b.graph_add_conditional(g, [], outer, 0, 1)
    inner = b.cond_handle_create(bodies[0], 1, 1)
    _inner_node, inner_bodies = b.graph_add_conditional(bodies[0], [], inner, 0, 1)
    assert len(inner_bodies) == 1
    b.graph_exec_destroy(b.graph_instantiate(g))
    b.graph_destroy(g)
    assert inner not in b._cond_handles and outer not in b._cond_handles
