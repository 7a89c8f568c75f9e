"""Stream capture and graphs in the simulator, at the driver interface.

Each rule of ``sim/gpuarray_sim/_capture.py`` (CUDA's "Prohibited and
Unhandled Operations"): the call is refused with the driver's code and the
capture is invalidated exactly where CUDA invalidates it (``cuStreamEndCapture``
then fails with 901), or left valid where CUDA leaves it valid.  Replays are
stream work: the race detector, sticky faults and graph-memory mapping see
them.  A private simulator per test (no global state).
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

from gpuarray.errors import CudaError, StreamOrderError


def code_of(fn, *args):
    with pytest.raises(CudaError) as e:
        fn(*args)
    return e.value.code


def ends_invalidated(b, s) -> None:
    assert b.stream_is_capturing(s) == "invalidated"
    assert code_of(b.stream_end_capture, s) == 901
    assert b.stream_is_capturing(s) == "none"  # out of capture: usable again


def ends_valid(b, s) -> int:
    assert b.stream_is_capturing(s) == "active"
    return b.stream_end_capture(s)


def host_bytes(n: int):
    buf = np.zeros(n, np.uint8)
    return buf, buf.ctypes.data


# ------------------------------------------------------------ begin / end
def test_begin_refuses_the_legacy_stream_a_bad_mode_and_a_second_begin(b):
    s = b.stream_create()
    assert code_of(b.stream_begin_capture, 1, "global") == 1
    assert code_of(b.stream_begin_capture, 0, "global") == 1
    assert code_of(b.stream_begin_capture, s, "lenient") == 1
    b.stream_begin_capture(s, "global")
    assert code_of(b.stream_begin_capture, s, "global") == 1
    ends_valid(b, s)


def test_end_without_begin_is_invalid_value(b):
    s = b.stream_create()
    assert code_of(b.stream_end_capture, s) == 1
    assert b.stream_capture_info(s) == ("none", 0)


@pytest.mark.parametrize("mode", ["global", "thread_local"])
def test_end_on_another_thread_is_wrong_thread_and_the_capture_stays(b, mode):
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s, mode)
    codes = []

    def other():
        b.ctx_set_current(b.primary_ctx_retain(0))
        try:
            b.stream_end_capture(s)
        except CudaError as e:
            codes.append(e.code)

    t = threading.Thread(target=other)
    t.start()
    t.join(30)
    assert codes == [908]
    ends_valid(b, s)


def test_a_relaxed_capture_may_end_on_another_thread(b):
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s, "relaxed")
    graphs = []

    def other():
        b.ctx_set_current(b.primary_ctx_retain(0))
        graphs.append(b.stream_end_capture(s))

    t = threading.Thread(target=other)
    t.start()
    t.join(30)
    assert len(graphs) == 1 and graphs[0]


# ------------------------------------------------- prohibited calls (900)
UNSAFE = {
    "cuMemAlloc": lambda b, s: b.mem_alloc(64),
    "cuMemFree": lambda b, s: b.mem_free(b._pre),
    "cuMemHostAlloc": lambda b, s: b.mem_host_alloc(64),
    "cuMemFreeHost": lambda b, s: b.mem_free_host(b._pre_host),
    "cuMemHostRegister": lambda b, s: b.mem_host_register(b._reg[1], 64),
    "cuMemAllocManaged": lambda b, s: b.mem_alloc_managed(64),
    "cuMemPoolSetAttribute": lambda b, s: b.mempool_set_release_threshold(0, 1 << 20),
    "cuModuleLoadData": lambda b, s: b.module_load_data(b"gpuarray-sim-placeholder\0k\0"),
}


def _prepare(b):
    b._pre = b.mem_alloc(64)
    b._pre_host = b.mem_host_alloc(64)
    b._reg = host_bytes(64)


@pytest.mark.parametrize("call", sorted(UNSAFE))
def test_potentially_unsafe_calls_invalidate_a_global_capture(b, call):
    _prepare(b)
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s, "global")
    with pytest.raises(CudaError) as e:
        UNSAFE[call](b, s)
    assert e.value.code == 900 and e.value.call == call
    ends_invalidated(b, s)
    UNSAFE[call](b, s)  # after the capture: allowed again (b._reg is not registered yet)


@pytest.mark.parametrize("call", sorted(UNSAFE))
def test_potentially_unsafe_calls_are_allowed_in_relaxed_mode(b, call):
    _prepare(b)
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s, "global")
    prev = b.exchange_capture_mode("relaxed")
    try:
        UNSAFE[call](b, s)
    finally:
        assert b.exchange_capture_mode(prev) == "relaxed"
    assert prev == "global"
    ends_valid(b, s)


def test_unsafe_call_of_another_thread_follows_both_modes(b):
    s = b.stream_create(non_blocking=True)
    results = {}

    def other(tag, thread_mode):
        b.ctx_set_current(b.primary_ctx_retain(0))
        b.exchange_capture_mode(thread_mode)
        try:
            b.mem_free(b.mem_alloc(64))
            results[tag] = 0
        except CudaError as e:
            results[tag] = e.code

    def run(tag, thread_mode):
        t = threading.Thread(target=other, args=(tag, thread_mode))
        t.start()
        t.join(30)

    for capture_mode, thread_mode, expect in [("thread_local", "global", 0), ("relaxed", "global", 0),
                                              ("global", "thread_local", 0), ("global", "relaxed", 0),
                                              ("global", "global", 900)]:
        b.stream_begin_capture(s, capture_mode)
        run((capture_mode, thread_mode), thread_mode)
        assert results[(capture_mode, thread_mode)] == expect, (capture_mode, thread_mode)
        if expect:
            ends_invalidated(b, s)
        else:
            ends_valid(b, s)


def test_thread_local_capture_prohibits_its_own_thread(b):
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s, "thread_local")
    assert code_of(b.mem_alloc, 64) == 900
    ends_invalidated(b, s)


# ------------------------------------- synchronisation, events, legacy
@pytest.mark.parametrize("what", ["stream_synchronize", "stream_query"])
def test_synchronising_or_querying_a_capturing_stream_invalidates(b, what):
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s, "relaxed")  # not about unsafe calls: every mode
    assert code_of(getattr(b, what), s) == 900
    ends_invalidated(b, s)


def test_context_synchronize_invalidates(b):
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s, "relaxed")
    assert code_of(b.ctx_synchronize) == 900
    ends_invalidated(b, s)


@pytest.mark.parametrize("what", ["event_query", "event_synchronize"])
def test_host_waits_on_a_captured_event_are_907(b, what):
    s = b.stream_create(non_blocking=True)
    ev = b.event_create()
    b.stream_begin_capture(s, "global")
    b.event_record(ev, s)
    assert code_of(getattr(b, what), ev) == 907
    ends_invalidated(b, s)
    assert code_of(getattr(b, what), ev) == 907  # still last recorded in a capture
    b.event_record(ev, s)
    getattr(b, what)(ev)  # recorded again outside: fine


def test_legacy_stream_next_to_a_blocking_capture_is_906(b):
    s = b.stream_create(non_blocking=False)
    d = b.mem_alloc(64)
    b.stream_begin_capture(s, "global")
    assert code_of(b.stream_is_capturing, 1) == 906  # documented: does not invalidate
    assert b.stream_is_capturing(s) == "active"
    assert code_of(b.memset_d8_async, d, 0, 64, 1) == 906
    ends_invalidated(b, s)
    b.memset_d8_async(d, 0, 64, 1)  # usable again


def test_legacy_stream_next_to_a_non_blocking_capture_is_fine(b):
    s = b.stream_create(non_blocking=True)
    d = b.mem_alloc(64)
    b.stream_begin_capture(s, "global")
    b.memset_d8_async(d, 0, 64, 1)
    b.stream_synchronize(1)
    assert b.stream_is_capturing(1) == "none"
    ends_valid(b, s)


def test_pageable_copies_on_a_capturing_stream_are_refused(b):
    s = b.stream_create(non_blocking=True)
    d = b.mem_alloc(64)
    buf, addr = host_bytes(64)
    b.stream_begin_capture(s, "relaxed")
    assert code_of(b.memcpy_htod_async, d, addr, 64, s) == 900
    ends_invalidated(b, s)
    b.stream_begin_capture(s, "relaxed")
    assert code_of(b.memcpy_dtoh_async, addr, d, 64, s) == 900
    ends_invalidated(b, s)


# --------------------------------------------------- fork, join, merge
def test_fork_and_join_through_events(b):
    s, t = b.stream_create(non_blocking=True), b.stream_create(non_blocking=True)
    d = b.mem_alloc(128)
    e1, e2 = b.event_create(), b.event_create()
    b.stream_begin_capture(s, "global")
    b.memset_d8_async(d, 1, 64, s)
    b.event_record(e1, s)
    b.stream_wait_event(t, e1)  # t joins the capture (a fork)
    assert b.stream_is_capturing(t) == "active"
    b.memset_d8_async(d + 64, 2, 64, t)
    b.event_record(e2, t)
    b.stream_wait_event(s, e2)  # joined back
    g = ends_valid(b, s)
    assert b.stream_is_capturing(t) == "none"
    ex = b.graph_instantiate(g)
    b.graph_launch(ex, s)
    out, addr = host_bytes(128)
    b.memcpy_dtoh_async(addr, d, 128, s)
    assert out[:64].tolist() == [1] * 64 and out[64:].tolist() == [2] * 64


def test_a_fork_not_joined_back_is_904(b):
    s, t = b.stream_create(non_blocking=True), b.stream_create(non_blocking=True)
    d = b.mem_alloc(64)
    ev = b.event_create()
    b.stream_begin_capture(s, "global")
    b.event_record(ev, s)
    b.stream_wait_event(t, ev)
    b.memset_d8_async(d, 1, 64, t)
    assert code_of(b.stream_end_capture, s) == 904
    assert b.stream_is_capturing(t) == b.stream_is_capturing(s) == "none"


def test_waiting_on_another_captures_event_is_a_merge_902(b):
    s, t = b.stream_create(non_blocking=True), b.stream_create(non_blocking=True)
    ev = b.event_create()
    b.stream_begin_capture(s, "global")
    b.stream_begin_capture(t, "global")
    b.event_record(ev, t)
    assert code_of(b.stream_wait_event, s, ev) == 902
    ends_invalidated(b, s)
    ends_invalidated(b, t)


def test_waiting_on_uncaptured_work_needs_the_external_flag(b):
    s, t = b.stream_create(non_blocking=True), b.stream_create(non_blocking=True)
    ev = b.event_create()
    b.event_record(ev, t)
    b.stream_begin_capture(s, "global")
    assert code_of(b.stream_wait_event, s, ev) == 905
    ends_invalidated(b, s)
    b.stream_begin_capture(s, "global")
    b.stream_wait_event(s, ev, external=True)  # an event-wait node
    ex = b.graph_instantiate(ends_valid(b, s))
    b.graph_launch(ex, s)
    b.stream_synchronize(s)


# ------------------------------------------------------------ replays
def _captured_copy(b, s, src_host, dst, n):
    b.stream_begin_capture(s, "global")
    b.memcpy_htod_async(dst, src_host, n, s)
    return b.graph_instantiate(ends_valid(b, s))


def test_replay_rereads_pinned_memory_at_each_launch(b):
    s = b.stream_create(non_blocking=True)
    d = b.mem_alloc(16)
    h = b.mem_host_alloc(16)
    hv = (ctypes.c_uint8 * 16).from_address(h)
    ex = _captured_copy(b, s, h, d, 16)
    out, addr = host_bytes(16)
    for v in (5, 9):
        hv[:] = bytes([v]) * 16
        b.graph_launch(ex, s)
        b.memcpy_dtoh_async(addr, d, 16, s)
        assert out.tolist() == [v] * 16


def test_race_detector_sees_replays(b):
    s, t = b.stream_create(non_blocking=True), b.stream_create(non_blocking=True)
    d = b.mem_alloc(64)
    b.stream_begin_capture(s, "global")
    b.memset_d8_async(d, 1, 64, s)
    ex = b.graph_instantiate(ends_valid(b, s))
    b.graph_launch(ex, s)
    with pytest.raises(StreamOrderError, match="launch 1 of graph"):
        b.memset_d8_async(d, 2, 64, t)  # unordered with the replay's write


def test_a_captured_use_after_free_faults_at_the_next_sync_and_sticks(b):
    s = b.stream_create(non_blocking=True)
    src, dst = b.mem_alloc(64), b.mem_alloc(64)
    b.stream_begin_capture(s, "global")
    b.memcpy_dtod_async(dst, src, 64, s)
    ex = b.graph_instantiate(ends_valid(b, s))
    b.mem_free(src)
    b.graph_launch(ex, s)  # queued: the fault shows when it runs
    with pytest.raises(CudaError, match="use after free") as e:
        b.stream_synchronize(s)
    assert e.value.code == 700
    assert code_of(b.mem_alloc, 16) == 700  # sticky


def test_graph_memory_is_unmapped_outside_a_launch(b):
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s, "global")
    g1 = b.mem_alloc_async(64, s)
    b.memset_d8_async(g1, 3, 64, s)
    ex = b.graph_instantiate(ends_valid(b, s))
    out, addr = host_bytes(64)
    used = b.memory.used[0]
    b.graph_launch(ex, s)
    b.memcpy_dtoh_async(addr, g1, 64, s)  # left mapped by the launch: readable
    assert out.tolist() == [3] * 64 and b.memory.used[0] == used + 64
    b.mem_free(g1)
    assert b.memory.used[0] == used
    t = b.stream_create(non_blocking=True)
    b.memset_d8_async(g1, 0, 64, t)  # after the free: an illegal address when it runs
    with pytest.raises(CudaError, match="not mapped now") as e:
        b.stream_synchronize(t)
    assert e.value.code == 700


def test_relaunch_without_auto_free_is_invalid_value(b):
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s, "global")
    g1 = b.mem_alloc_async(64, s)
    g = ends_valid(b, s)
    ex = b.graph_instantiate(g, auto_free_on_launch=False)
    b.graph_launch(ex, s)
    assert code_of(b.graph_launch, ex, s) == 1
    b.mem_free_async(g1, s)
    b.graph_launch(ex, s)  # freed since: fine
    assert code_of(b.graph_instantiate, g) == 1  # memory nodes: one executable graph at a time
    b.graph_exec_destroy(ex)
    b.graph_destroy(g)
    b.stream_synchronize(s)
    assert b.memory.find(g1).alive  # the last launch's allocation outlives its graph
    b.mem_free(g1)
    assert not b.memory.find(g1).alive  # nothing can map it again: the address goes


def test_graph_free_node_and_host_node_replay(b):
    s = b.stream_create(non_blocking=True)
    calls = []
    b.stream_begin_capture(s, "global")
    g1 = b.mem_alloc_async(64, s)
    b.memset_d8_async(g1, 1, 64, s)
    b.mem_free_async(g1, s)
    b.launch_host_func(s, lambda: calls.append(0))  # a stream callback cannot be captured
    ex = b.graph_instantiate(ends_valid(b, s))
    for _ in range(2):
        b.graph_launch(ex, s)
        b.stream_synchronize(s)
    assert calls == [0, 0]
    assert b.memory.find(g1).unmapped


def test_destroyed_handles_are_invalid_value(b):
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s, "global")
    g = ends_valid(b, s)
    ex = b.graph_instantiate(g)
    b.graph_upload(ex, s)
    b.graph_exec_destroy(ex)
    b.graph_destroy(g)
    assert code_of(b.graph_launch, ex, s) == 1
    assert code_of(b.graph_exec_destroy, ex) == 1
    assert code_of(b.graph_destroy, g) == 1


@pytest.mark.parametrize("mode", ["global", "thread_local"])
def test_destroying_another_graph_during_a_capture_keeps_the_capture(b, mode):
    # cuda.core's suite (run on GPUs) does this: a graph of an earlier builder is destroyed
    # while the next builder captures on the same thread (cuGraphDestroy answered 900 and
    # invalidated the capture)
    s = b.stream_create(non_blocking=True)
    b.stream_begin_capture(s, "global")
    old = ends_valid(b, s)
    b.stream_begin_capture(s, mode)
    b.graph_destroy(old)
    assert b.stream_is_capturing(s) == "active"
    b.graph_destroy(b.stream_end_capture(s))
