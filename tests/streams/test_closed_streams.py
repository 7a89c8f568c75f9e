"""A closed stream is never handed to the driver again (issue 43).

After ``s.close()`` the driver's ``CUstream`` is destroyed: on a GPU the
handle is a dangling pointer.  gpuarray records an event on the stream
before destroying it; work that must follow the stream's work waits for that
event, and anything that would run on the stream raises ValueError naming it
and saying how to rebind (``arr.stream = t``).  The simulator refuses a
destroyed handle (CUDA_ERROR_INVALID_HANDLE), so a call that slipped through
fails these tests -- on the simulator and over the stand-in driver.  The
race detector checks the ordering: a copy on ``t`` that did not wait for the
closed stream's pending fill would be an unordered access.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import gpuarray
from gpuarray import memory


def _on_closed_stream(n=256):
    """An array whose default stream was closed with a fill of 3 still queued on it."""
    s = gpuarray.stream(non_blocking=True)
    y = gpuarray.empty(n, np.float32, stream=s)
    y.fill(3.0)
    s.close()
    return s, y


_RUNS_ON_IT = {
    "copy_to_host": lambda y: y.copy_to_host(),
    "scalar read": lambda y: y[0],
    "repr": repr,
    "np.asarray": np.asarray,
    "copy_to_device": lambda y: y.copy_to_device(np.ones(y.shape, y.dtype)),
    "setitem": lambda y: y.__setitem__(slice(0, 2), 1.0),
    "fill": lambda y: y.fill(1.0),
    "copy": lambda y: y.copy(),
    "astype": lambda y: y.astype(np.float64),
    "CAI export": lambda y: y.__cuda_array_interface__,
}


@pytest.mark.parametrize("op", list(_RUNS_ON_IT))
def test_an_operation_on_an_arrays_closed_default_stream_raises_naming_it(op):
    s, y = _on_closed_stream()
    with pytest.raises(ValueError, match=r"0x[0-9a-f]+ on device 0, closed>.* was closed.*"
                                         r"arr\.stream = t"):
        _RUNS_ON_IT[op](y)  # before: the destroyed handle went to the driver (400 here)
    t = gpuarray.stream(non_blocking=True)
    t.wait_stream(s)  # after the closed stream's last work: its fill
    y.stream = t  # rebound: the array works again
    np.testing.assert_array_equal(y.copy_to_host(), 3.0)


_RUNS_ON_T = {
    "copy_to_host": lambda y, t: y.copy_to_host(stream=t),
    "copy": lambda y, t: y.copy(stream=t).copy_to_host(stream=t),
    "astype": lambda y, t: y.astype(np.float64, stream=t).copy_to_host(stream=t),
    "into an array of t": lambda y, t: _copied_into(y, t),
    "DLPack export to t": lambda y, t: _through_dlpack(y, t),
}


def _copied_into(y, t):
    z = gpuarray.zeros(y.shape, y.dtype, stream=t)
    z.copy_to_device(y)  # y is the source: t waits for its closed stream's last work
    return z.copy_to_host()


def _through_dlpack(y, t):
    z = gpuarray.from_dlpack(y.__dlpack__(stream=t.handle))
    return z.copy_to_host(stream=t)


@pytest.mark.parametrize("op", list(_RUNS_ON_T))
def test_with_a_live_stream_an_operation_waits_for_the_closed_streams_last_work(op):
    s, y = _on_closed_stream()
    t = gpuarray.stream(non_blocking=True)
    got = _RUNS_ON_T[op](y, t)  # before: cuEventRecord on the destroyed handle
    t.synchronize()
    np.testing.assert_array_equal(got, 3.0)  # ordered after the fill (else a race, and NaNs)


def test_the_closed_stream_itself():
    s, y = _on_closed_stream()
    assert s.closed and not gpuarray.stream().closed
    assert repr(s).endswith(", closed>")
    s.synchronize()  # waits for its last work, without its handle
    assert s.query()
    s.close()  # twice: nothing
    for use in (lambda: s.handle, lambda: gpuarray.zeros(4, stream=s), s.record,
                lambda: s.wait_event(gpuarray.event()), s.begin_capture,
                lambda: s.add_callback(lambda *a: None),
                lambda: gpuarray.event().record(s)):
        with pytest.raises(ValueError, match="was closed"):
            use()
    t = gpuarray.stream()
    t.wait_stream(s)  # its last work
    assert s == s and s != t and s != gpuarray.external_stream(t.handle)
    assert len({s, t}) == 2


def test_closing_an_external_or_default_stream_does_nothing():
    owned = gpuarray.stream()
    e = gpuarray.external_stream(owned.handle)
    for s in (e, gpuarray.legacy_default_stream(), gpuarray.per_thread_default_stream()):
        s.close()
        assert not s.closed
        s.synchronize()


def test_a_graph_whose_capture_stream_was_closed_gives_arrays_to_rebind():
    s = gpuarray.stream(non_blocking=True)
    x = gpuarray.to_device(np.arange(4.0), stream=s)
    s.begin_capture()
    y = x.astype(np.float32)  # a static output: its default stream is s
    g = s.end_capture()
    s.close()
    t = gpuarray.stream(non_blocking=True)
    g.launch(t)  # after the closed stream's last work
    with pytest.raises(ValueError, match=r"was closed.*arr\.stream = t"):
        y.copy_to_host()
    np.testing.assert_array_equal(y.copy_to_host(stream=t), np.arange(4.0))
    y.stream = t  # t launched the graph: nothing else to wait for
    np.testing.assert_array_equal(y.copy_to_host(), np.arange(4.0))
    with pytest.raises(ValueError, match="was closed"):
        g.launch()
    g.close()


@pytest.mark.parametrize("manager", ["default", "pool"])
def test_memory_whose_streams_were_closed_is_freed_after_their_last_work(manager):
    gpuarray.set_memory_manager(manager)
    s, y = _on_closed_stream(1 << 16)  # its home stream closed with work queued
    u = gpuarray.stream(non_blocking=True)
    u.wait_stream(s)  # after the closed stream's fill
    w = y.bind(u)  # recorded: u uses it
    w.fill(4.0)
    u.close()  # a recorded stream closed with work queued
    v = y[1:]  # a view: no stream work
    assert v.stream is s
    del y, w, v
    gc.collect()  # the free: ordered after both closed streams' last work, no destroyed handle
    gpuarray.synchronize()
    with memory.allocation_stream(gpuarray.stream(non_blocking=True)):
        z = memory.allocate(1 << 18)
    del z
    gpuarray.synchronize()
