"""gpuarray on a stream another library is capturing (PyTorch, CuPy, cuda.core ...).

The other library's capture is begun through the driver interface, as
cuda.core's ``GraphBuilder`` does, on a stream gpuarray knows only as an
external stream.  Host waits on it are refused with StreamCaptureError
before any driver call, so the capture stays valid; allocations on it are
graph memory of the other library's graph; gpuarray's own streams never ask
the driver about captures.  Runs on the simulator and over the stand-in.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import gpuarray
from gpuarray._driver import get_backend
from gpuarray.errors import StreamCaptureError

from .standin_support import simulated, the_simulator


def _foreign():
    """An external stream and the driver calls of the library that captures on it."""
    owned = gpuarray.stream(non_blocking=True)
    return owned, gpuarray.external_stream(owned.handle)


def _begin(b, e, mode="global"):
    b.stream_begin_capture(e.handle, mode)


def _end_and_destroy(b, e):
    assert b.stream_is_capturing(e.handle) == "active"  # never invalidated
    b.graph_destroy(b.stream_end_capture(e.handle))


@pytest.mark.parametrize("wait", [
    "synchronize", "query", "download", "getitem", "pageable_upload", "event_sync", "event_query",
])
def test_host_waits_on_a_foreign_capture_are_refused_before_the_driver(wait):
    b = get_backend()
    _owned, e = _foreign()
    x = gpuarray.to_device(np.arange(4.0), stream=e)
    e.synchronize()
    _begin(b, e)
    ev = gpuarray.event()
    ops = {
        "synchronize": e.synchronize,
        "query": e.query,
        "download": x.copy_to_host,
        "getitem": lambda: x[1],
        "pageable_upload": lambda: x.copy_to_device(np.ones(4)),
        "event_sync": lambda: ev.record(e).synchronize(),
        "event_query": lambda: ev.record(e).query(),
    }
    with pytest.raises(StreamCaptureError, match="capturing"):
        ops[wait]()
    _end_and_destroy(b, e)


def test_a_sync_import_of_memory_whose_producer_stream_captures_is_refused():
    b = get_backend()
    _owned, e = _foreign()
    x = gpuarray.to_device(np.arange(4.0), stream=e)
    desc = dict(x.__cuda_array_interface__)
    desc["stream"] = e.handle
    _begin(b, e)
    with pytest.raises(StreamCaptureError, match="wait for it"):
        gpuarray.from_cuda_array_interface(desc)  # the default stream would join the capture
    imported = gpuarray.from_cuda_array_interface(desc, owner=x)  # adopts the capturing stream
    assert imported.stream == e
    _end_and_destroy(b, e)


def test_an_array_of_another_stream_is_refused_before_it_joins_the_capture():
    b = get_backend()
    _owned, e = _foreign()
    x = gpuarray.to_device(np.arange(4.0), stream=gpuarray.stream(non_blocking=True))
    y = gpuarray.zeros(4, stream=e)
    e.synchronize()
    _begin(b, e)
    with pytest.raises(StreamCaptureError, match="not part of the capture"):
        y.copy_to_device(x, stream=e)  # x's stream would wait on captured work: a fork
    _end_and_destroy(b, e)


def test_work_on_a_foreign_capture_is_recorded_and_its_arrays_are_graph_memory():
    b = get_backend()
    _owned, e = _foreign()
    x = gpuarray.to_device(np.zeros((2, 3), np.int32), stream=e)  # the static input
    e.synchronize()
    used = the_simulator().memory.used[0] if simulated() else None
    _begin(b, e, "thread_local")
    y = x.astype(np.float64).T.copy()  # a temporary (the cast), then the static output
    tmp = x.copy()
    del tmp  # freed during the capture: a free node of the other library's graph,
    gc.collect()  # not a cuMemFree the graph's copy into it would outlive
    gpuarray.memory.get_memory_manager().deallocations.clear()
    graph = b.stream_end_capture(e.handle)  # valid: no host wait, no cuMemAlloc reached it
    ex = b.graph_instantiate(graph, auto_free_on_launch=True)
    for k in (1, 5):
        host = np.arange(6, dtype=np.int32).reshape(2, 3) * k
        x.copy_to_device(host, stream=e)
        b.graph_launch(ex, e.handle)
        np.testing.assert_array_equal(y.copy_to_host(), host.T.astype(np.float64))
    b.graph_exec_destroy(ex)
    b.graph_destroy(graph)
    del y
    gc.collect()
    gpuarray.memory.get_memory_manager().deallocations.clear()
    if used is not None:  # the launch's allocation was freed with the array
        assert the_simulator().memory.used[0] == used


def test_a_foreign_static_output_dropped_before_any_launch_is_the_graphs():
    b = get_backend()
    _owned, e = _foreign()
    x = gpuarray.to_device(np.arange(3.0), stream=e)
    e.synchronize()
    _begin(b, e)
    y = x.copy()
    graph = b.stream_end_capture(e.handle)
    del y  # never launched: nothing to free, and no error
    gc.collect()
    ex = b.graph_instantiate(graph, auto_free_on_launch=True)
    b.graph_launch(ex, e.handle)
    e.synchronize()
    b.graph_exec_destroy(ex)
    b.graph_destroy(graph)


def test_gpuarrays_own_streams_never_ask_the_driver_about_captures(monkeypatch):
    b = get_backend()
    asked = []
    for name in ("stream_is_capturing", "stream_capture_info"):
        real = getattr(b, name)
        monkeypatch.setattr(b, name, lambda *a, _real=real, _n=name: asked.append(_n) or _real(*a))
    for s in (gpuarray.stream(non_blocking=True), gpuarray.default_stream()):
        x = gpuarray.to_device(np.arange(6.0), stream=s)
        y = x.astype(np.float32)[::2].copy()
        y.copy_to_host()
        ev = s.record()
        ev.synchronize()
        s.synchronize()
    assert asked == []
    owned = gpuarray.stream(non_blocking=True)
    gpuarray.external_stream(owned.handle).synchronize()
    assert asked  # an external stream is asked about
