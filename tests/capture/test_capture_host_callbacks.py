"""Host callbacks and stream capture (issue 35).

cuda.h on ``cuStreamAddCallback``: "this function is not supported with
cuStreamBeginCapture and cuStreamEndCapture, unlike cuLaunchHostFunc".  The
simulator accepted it in a capture and recorded a host node; it now refuses
it with the code cuda.h lists for it (``CUDA_ERROR_NOT_SUPPORTED``, 801), the
capture invalidated as for any call a capture does not support, and
captures ``cuLaunchHostFunc``.  gpuarray's ``Stream.add_callback`` in a
capture of its own is a host node (``cuLaunchHostFunc``) that every launch
calls, kept alive by the graph; on a stream another library captures it is
refused before the driver call.  On the ``sim`` backend and on the cuda
backend over the stand-in driver.
"""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import gpuarray
from gpuarray._driver import get_backend
from gpuarray._driver._finalize import hand_to_reaper
from gpuarray.errors import CudaError, StreamCaptureError
from tests.support import backend_is_sim, simulated

sim_only = pytest.mark.skipif(not backend_is_sim(), reason="checks the simulator's model of CUDA")


@sim_only
def test_a_stream_callback_on_a_capturing_stream_is_refused_and_invalidates_the_capture(b):
    s = b.stream_create(non_blocking=True)
    calls: list[int] = []
    b.stream_begin_capture(s, "global")
    with pytest.raises(CudaError) as e:  # before: a host node, and no error
        b.stream_add_callback(s, calls.append)
    assert e.value.code == 801 and "cuLaunchHostFunc" in str(e.value)
    assert b.stream_is_capturing(s) == "invalidated"
    with pytest.raises(CudaError) as e:
        b.stream_end_capture(s)
    assert e.value.code == 901
    b.stream_add_callback(s, calls.append)  # outside a capture: fine
    b.stream_synchronize(s)
    assert calls == [0]


@sim_only
def test_launch_host_func_is_captured_and_called_at_every_launch(b):
    s = b.stream_create(non_blocking=True)
    calls: list[str] = []
    b.stream_begin_capture(s, "global")
    b.launch_host_func(s, lambda: calls.append("node"))
    g = b.stream_end_capture(s)
    ex = b.graph_instantiate(g)
    assert calls == []  # captured, not run
    for _ in range(2):
        b.graph_launch(ex, s)
    b.stream_synchronize(s)
    assert calls == ["node", "node"]
    b.launch_host_func(s, lambda: calls.append("stream"))
    b.stream_synchronize(s)
    assert calls == ["node", "node", "stream"]


@sim_only
def test_launch_host_func_is_not_called_after_a_failure_unlike_a_stream_callback(b):
    from gpuarray_sim._memory import DeviceFault

    s = b.stream_create(non_blocking=True)
    calls: list[object] = []

    def fail() -> None:  # earlier work that faults: the context is unusable after it
        raise DeviceFault(700, "an illegal address")

    b.sched.enqueue(b._stream(s, "test"), fail, "failing work")
    done = threading.Event()
    b.stream_add_callback(s, lambda status: (calls.append(status), done.set()))
    b.launch_host_func(s, lambda: calls.append("host func"))
    with pytest.raises(CudaError):
        b.stream_synchronize(s)
    assert done.wait(30)
    assert calls == [700]  # the stream callback got the error; the host function was skipped


def test_add_callback_in_a_capture_is_a_host_node_that_every_launch_calls():
    if not simulated():
        pytest.skip("the capture is checked on the simulator (sim, or cuda over the stand-in)")
    s = gpuarray.stream()
    x = gpuarray.zeros(4, np.float32, stream=s)
    z = gpuarray.to_device(np.arange(4, dtype=np.float32), stream=s)
    s.synchronize()
    seen: list[tuple[int, object]] = []

    def callback(stream, status, arg):
        seen.append((status, arg))

    s.begin_capture()
    x.copy_to_device(z)  # captured work before the host node
    s.add_callback(callback, "arg")  # before: refused by CUDA (801), the capture invalidated
    g = s.end_capture()
    del callback
    gc.collect()  # the graph keeps the callback alive
    assert seen == []
    for _ in range(3):
        g.launch()
        s.synchronize()
        reaped = threading.Event()  # what the callback handed to the reaper is gone
        hand_to_reaper(reaped.set)
        assert reaped.wait(30)
    assert seen == [(0, "arg")] * 3
    np.testing.assert_array_equal(x.copy_to_host(), np.arange(4))
    g.close()


def test_add_callback_on_a_stream_another_library_captures_is_refused_before_the_driver():
    # gpuarray cannot keep a host node alive for another library's graph:
    # refused, and that capture stays valid (before: cuStreamAddCallback,
    # which CUDA refuses with 801 and the capture invalidated).
    if not simulated():
        pytest.skip("the capture is checked on the simulator (sim, or cuda over the stand-in)")
    b = get_backend()
    owned = gpuarray.stream(non_blocking=True)
    e = gpuarray.external_stream(owned.handle)
    b.stream_begin_capture(e.handle, "global")
    with pytest.raises(StreamCaptureError, match="cuStreamAddCallback"):
        e.add_callback(lambda stream, status, arg: None)
    assert b.stream_is_capturing(e.handle) == "active"  # never invalidated
    b.graph_destroy(b.stream_end_capture(e.handle))
    seen: list[int] = []
    e.add_callback(lambda stream, status, arg: seen.append(status))  # after the capture: fine
    e.synchronize()
    assert seen == [0]
