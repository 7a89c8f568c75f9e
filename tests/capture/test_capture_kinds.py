"""Kinds of driver call a capture forbids, judged at the capture checkpoint (issue 35).

Each test is a defect the review reproduced on the code before the
checkpoint: a call of a forbidden kind that reached the driver and
invalidated a capture (gpuarray's or another library's), or a capture left
open on the driver.  The other library's capture is begun through the raw
backend, as cuda.core's ``GraphBuilder`` does.  Runs on the simulator and over
the stand-in.
"""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import gpuarray
from gpuarray._driver import _finalize, get_backend
from gpuarray.errors import CudaError, CudaOutOfMemoryError, StreamCaptureError


def _raw():
    """The driver as another library calls it (past gpuarray's checkpoint)."""
    b = get_backend()
    return getattr(b, "backend", b)


def _foreign(non_blocking=True):
    """An external stream over a stream another library captures on, and its driver."""
    owned = gpuarray.stream(non_blocking=non_blocking)
    return owned, gpuarray.external_stream(owned.handle), _raw()


def _valid_end(b, handle):
    assert b.stream_is_capturing(handle) == "active"  # never invalidated
    b.graph_destroy(b.stream_end_capture(handle))


# ----------------------------------------------------------------- end_capture
def test_end_capture_ends_on_the_driver_when_a_finalizer_error_is_pending():
    s = gpuarray.stream(non_blocking=True)
    x = gpuarray.to_device(np.arange(4.0), stream=s)
    s.begin_capture()
    y = x.copy()
    lost = CudaError(1, "cuMemFree", "a release that failed in a finalizer")
    _finalize.remember(lost)
    try:
        g = s.end_capture()
    except CudaError as exc:  # the pending error may be raised here, but only after the end
        assert exc is lost
        g = None
    else:  # or by the next call
        with pytest.raises(CudaError) as info:
            gpuarray.get_device().synchronize()
        assert info.value is lost
    with gpuarray.get_device().activate():
        assert _raw().stream_is_capturing(s.handle) == "none"  # ended on the driver
    assert not gpuarray._driver.get_backend().capturing and not s.is_capturing()
    if g is not None:
        g.launch()
        assert y.copy_to_host().tolist() == [0.0, 1.0, 2.0, 3.0]
        g.close()
    s.begin_capture()  # consistent: a new capture begins
    s.end_capture().close()


# ---------------------------------------------------- potentially unsafe calls
def test_managed_memory_made_and_dropped_on_another_thread_leaves_a_global_capture_valid():
    _owned, e, b = _foreign()
    gpuarray.zeros(1).copy_to_host()
    errors = []

    def worker():
        try:
            m = gpuarray.managed_array(64, dtype=np.float32)
            m[:] = 1
            del m
            gc.collect()
            gpuarray.get_memory_info()
        except BaseException as exc:  # reported below
            errors.append(exc)

    with gpuarray.get_device().activate():
        b.stream_begin_capture(e.handle, "global")
    t = threading.Thread(target=worker)
    t.start()
    t.join(60)
    assert errors == []
    with gpuarray.get_device().activate():
        _valid_end(b, e.handle)


# ------------------------------------------------------ hidden synchronisations
def test_the_pool_retry_after_out_of_memory_during_a_foreign_capture_is_an_oom(make_sim):
    make_sim(memory=64 << 20)
    gpuarray.set_memory_manager("pool")
    _owned, e, b = _foreign()
    keep = [gpuarray.empty(8 << 20, np.uint8) for _ in range(6)]
    with gpuarray.get_device().activate():
        b.stream_begin_capture(e.handle, "global")
    with pytest.raises(CudaOutOfMemoryError):
        gpuarray.empty(32 << 20, np.uint8)
    with gpuarray.get_device().activate():
        _valid_end(b, e.handle)
    del keep


def test_a_pool_free_after_its_stream_was_closed_waits_out_a_foreign_capture():
    gpuarray.set_memory_manager("pool")
    u = gpuarray.stream(non_blocking=True)
    x = gpuarray.zeros(1024, stream=u)
    u.synchronize()
    x.bind(gpuarray.default_stream()).fill(2)  # used on a second stream: recorded
    gpuarray.default_stream().synchronize()
    u.close()  # its home stream
    _owned, e, b = _foreign()
    with gpuarray.get_device().activate():
        b.stream_begin_capture(e.handle, "global")
    del x
    gc.collect()
    with gpuarray.get_device().activate():
        _valid_end(b, e.handle)
    gpuarray.get_memory_info()
    gpuarray.memory.get_memory_manager().reset()  # the held free is made now
    assert _finalize.take_pending() is None


# ------------------------------------ the legacy stream beside a blocking capture
@pytest.mark.parametrize("op", ["upload", "synchronize", "event_wait", "wait_stream", "callback",
                                "graph_launch", "event_record"])
def test_the_legacy_stream_while_a_blocking_stream_captures_is_refused(op):
    legacy = gpuarray.legacy_default_stream()
    s = gpuarray.stream()  # blocking
    t = gpuarray.stream(non_blocking=True)
    t.begin_capture()
    gpuarray.zeros(4, stream=t)
    g0 = t.end_capture()
    x = gpuarray.zeros(4, stream=s)
    ev = gpuarray.event()
    ev.record(t)
    s.begin_capture()
    ops = {
        "upload": lambda: gpuarray.to_device(np.ones(4), stream=legacy),
        "synchronize": legacy.synchronize,
        "event_wait": lambda: ev.wait(legacy),
        "wait_stream": lambda: legacy.wait_stream(t),
        "callback": lambda: legacy.add_callback(lambda *a: None),
        "graph_launch": lambda: g0.launch(legacy),
        "event_record": lambda: ev.record(legacy),
    }
    with pytest.raises(StreamCaptureError, match="legacy default stream"):
        ops[op]()
    x.fill(1)  # still capturing, still valid
    s.end_capture().close()
    g0.close()


def test_a_legacy_stream_free_during_a_foreign_blocking_capture_is_deferred():
    """Item 4: a pool array of the legacy stream dropped while another library captures on
    a blocking stream: cuMemFreeAsync there would be 906 and invalidate that capture."""
    gpuarray.set_memory_manager("pool")
    legacy = gpuarray.legacy_default_stream()
    x = gpuarray.zeros(1024, stream=legacy)
    legacy.synchronize()
    _owned, e, b = _foreign(non_blocking=False)
    with gpuarray.get_device().activate():
        b.stream_begin_capture(e.handle, "global")
    del x
    gc.collect()
    assert getattr(get_backend(), "_legacy_frees", None), "not deferred at the checkpoint"
    with gpuarray.get_device().activate():
        _valid_end(b, e.handle)
    y = gpuarray.zeros(1024, stream=legacy)  # the deferred free is made in order now
    del y
    gc.collect()
    assert not get_backend()._legacy_frees
    assert _finalize.take_pending() is None


# ------------------------------------------------------------------ events
@pytest.mark.parametrize("whose", ["own", "foreign"])
def test_elapsed_time_of_events_recorded_in_a_capture_is_refused(whose):
    s = gpuarray.stream(non_blocking=True)
    if whose == "own":
        cap_stream, begin = s, s.begin_capture
    else:
        _owned, cap_stream, b = _foreign()

        def begin():
            with gpuarray.get_device().activate():
                b.stream_begin_capture(cap_stream.handle, "global")
    start, end = gpuarray.event(), gpuarray.event()
    begin()
    start.record(cap_stream)
    end.record(cap_stream)
    with pytest.raises(StreamCaptureError, match="recorded on a capturing stream"):
        start.elapsed_time(end)
    if whose == "own":
        s.end_capture().close()
    else:
        with gpuarray.get_device().activate():
            _valid_end(b, cap_stream.handle)


def test_a_capturing_stream_waits_on_an_event_recorded_outside_the_capture():
    s = gpuarray.stream(non_blocking=True)
    t = gpuarray.stream(non_blocking=True)
    x = gpuarray.to_device(np.arange(4.0), stream=s)
    ev = gpuarray.event()
    gpuarray.zeros(4, stream=t)
    ev.record(t)
    s.begin_capture()
    s.wait_event(ev)  # an external event wait (CU_EVENT_WAIT_EXTERNAL), not 905
    y = x.copy()
    g = s.end_capture()
    g.launch()
    assert y.copy_to_host().tolist() == [0.0, 1.0, 2.0, 3.0]
    g.close()


# ------------------------------------------------------------------ graphs
def test_a_graph_launch_into_a_capturing_stream_is_refused():
    s = gpuarray.stream(non_blocking=True)
    x = gpuarray.to_device(np.arange(4.0), stream=s)
    s.begin_capture()
    y = x.copy()
    g = s.end_capture()
    t = gpuarray.stream(non_blocking=True)
    t.begin_capture()
    with pytest.raises(StreamCaptureError, match="capturing"):
        g.launch(t)
    t.end_capture().close()  # still valid
    g.launch()
    assert y.copy_to_host().tolist() == [0.0, 1.0, 2.0, 3.0]
    g.close()


def test_a_graph_launches_after_its_capture_stream_was_closed():
    s = gpuarray.stream(non_blocking=True)
    x = gpuarray.to_device(np.arange(4.0), stream=s)
    s.begin_capture()
    y = x.astype(np.float32)
    g = s.end_capture()
    s.synchronize()
    s.close()
    t = gpuarray.stream(non_blocking=True)
    g.launch(t)  # the graph needs nothing of the closed stream
    t.synchronize()
    assert y.bind(t).copy_to_host().tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="was closed"):
        g.launch()
    g.close()


# ------------------------------------------------- frees held by an open capture
def test_another_thread_allocating_and_dropping_survives_an_open_capture(make_sim):
    """One open capture of gpuarray's holds the deferred frees: a thread that allocates and
    drops 8 MiB arrays on a 64 MiB device ran out of memory (its flush was a no-op). The
    out-of-memory retry frees them in relaxed mode, which CUDA does not prohibit."""
    make_sim(memory=64 << 20)
    s = gpuarray.stream(non_blocking=True)
    x = gpuarray.to_device(np.arange(4.0), stream=s)
    s.begin_capture()  # global mode: the strictest
    y = x.copy()
    errors = []

    def worker():
        try:
            for _ in range(24):  # 192 MiB in all
                a = gpuarray.empty(8 << 20, np.uint8)
                a.fill(1)
                del a
        except BaseException as exc:  # reported below
            errors.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    t.join(120)
    assert errors == []
    g = s.end_capture()  # still valid
    g.launch()
    assert y.copy_to_host().tolist() == [0.0, 1.0, 2.0, 3.0]
    g.close()


def test_with_the_pool_another_thread_allocating_and_dropping_survives_an_open_capture(make_sim):
    """The same loop with the stream-ordered pool: its frees on streams that do not
    capture are made by the out-of-memory retry; those on the capturing stream wait."""
    make_sim(memory=64 << 20)
    gpuarray.set_memory_manager("pool")
    s = gpuarray.stream(non_blocking=True)
    x = gpuarray.to_device(np.arange(4.0), stream=s)
    s.synchronize()
    s.begin_capture()
    y = x.copy()
    errors = []

    def worker():
        try:
            for _ in range(24):  # 192 MiB in all, on the worker's default stream
                a = gpuarray.empty(8 << 20, np.uint8)
                a.fill(1)
                del a
        except BaseException as exc:  # reported below
            errors.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    t.join(120)
    assert errors == []
    g = s.end_capture()  # still valid
    g.launch()
    assert y.copy_to_host().tolist() == [0.0, 1.0, 2.0, 3.0]
    g.close()
