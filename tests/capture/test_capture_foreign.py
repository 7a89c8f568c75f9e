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
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import gpuarray
from gpuarray._driver import get_backend
from gpuarray.errors import StreamCaptureError
from tests.support import simulated, the_simulator


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
    b = get_backend().backend  # the other library calls the driver itself
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
    b = get_backend().backend  # the other library calls the driver itself
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
    b = get_backend().backend  # the other library calls the driver itself
    _owned, e = _foreign()
    x = gpuarray.to_device(np.arange(4.0), stream=gpuarray.stream(non_blocking=True))
    y = gpuarray.zeros(4, stream=e)
    e.synchronize()
    _begin(b, e)
    with pytest.raises(StreamCaptureError, match="not part of the capture"):
        y.copy_to_device(x, stream=e)  # x's stream would wait on captured work: a fork
    _end_and_destroy(b, e)


def test_work_on_a_foreign_capture_is_recorded_and_its_arrays_are_graph_memory():
    b = get_backend().backend  # the other library calls the driver itself
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
    b = get_backend().backend  # the other library calls the driver itself
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
    b = get_backend().backend  # the other library calls the driver itself
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


@pytest.mark.parametrize("where", ["home", "recorded", "home, freed on another thread"])
def test_a_pool_free_on_a_foreign_capturing_stream_waits_for_the_capture_to_end(where):
    """Pool memory allocated before the capture, last used on the capturing stream.

    A ``cuMemFreeAsync`` there would be a free node of memory the graph does not
    own (CUDA refuses it and invalidates the capture), and an event recorded on
    it for a free on another stream would fork that stream into the capture:
    the free is held until the capture ends, then made in stream order.
    """
    gpuarray.set_memory_manager("pool")
    mgr = gpuarray.memory.get_memory_manager()
    b = get_backend().backend  # the other library calls the driver itself
    _owned, e = _foreign()
    if where != "recorded":  # allocated (and to be freed) on the capturing stream
        with gpuarray.memory.allocation_stream(e):
            x = gpuarray.to_device(np.arange(4.0), stream=e)
        assert x._mem.stream_uses.home == e
    else:  # allocated on gpuarray's stream, then used on the capturing stream
        x = gpuarray.to_device(np.arange(4.0), stream=gpuarray.stream(non_blocking=True))
        x.stream.synchronize()
        x = x.bind(e)
    ptr = x.__cuda_array_interface__["data"][0]
    alloc = the_simulator().memory.find(ptr) if simulated() else None
    e.synchronize()
    _begin(b, e)
    y = x.copy()  # captured work that reads x (the other library keeps x alive for its graph)
    held = [x]
    del x
    if "thread" in where:
        t = threading.Thread(target=lambda: (held.clear(), gc.collect()))
        t.start()
        t.join(30)
    held.clear()
    gc.collect()
    assert ptr in mgr.allocations  # held: no stream-ordered free reached the capture
    gpuarray.zeros(3)  # another pool operation meanwhile retries, and holds it still
    assert ptr in mgr.allocations
    _end_and_destroy(b, e)  # the capture stays valid and ends with a graph
    del y
    gpuarray.zeros(3)  # the next pool operation frees it, in stream order
    assert ptr not in mgr.allocations
    gpuarray.synchronize()
    if alloc is not None:  # the simulator's allocation (its address may be reused since)
        assert alloc.alive is False


_EXIT_CHILD = """
    import atexit, gc
    import numpy as np

    def after_gpuarrays_exit_handler():  # registered first: runs last
        import gpuarray
        mgr = gpuarray.memory.get_memory_manager()
        print("still counted:", [p in mgr.allocations for p in ptrs])

    atexit.register(after_gpuarrays_exit_handler)
    import gpuarray
    from gpuarray._driver import get_backend
    gpuarray.set_memory_manager("pool")
    b = get_backend().backend  # the other library calls the driver itself
    owned = [gpuarray.stream(non_blocking=True) for _ in range(2)]
    ptrs = []
    for o in owned:
        e = gpuarray.external_stream(o.handle)
        with gpuarray.memory.allocation_stream(e):
            x = gpuarray.to_device(np.arange(4.0), stream=e)
        ptrs.append(x.__cuda_array_interface__["data"][0])
        e.synchronize()
        b.stream_begin_capture(e.handle, "global")
        del x
        gc.collect()  # held: the capture is another library's
    graph = b.stream_end_capture(owned[0].handle)
    prev = b.exchange_capture_mode("relaxed")  # the second, global, capture is still open
    b.graph_destroy(graph)
    b.exchange_capture_mode(prev)
    # exit: no pool operation since; the second capture never ends
"""


def test_frees_held_at_interpreter_exit_are_made_or_reported(sim):
    env = {**os.environ, "GPUARRAY_BACKEND": "sim"}
    env.pop("GPUARRAY_MEMORY_MANAGER", None)
    res = subprocess.run([sys.executable, "-c", textwrap.dedent(_EXIT_CHILD)], env=env,
                         cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert "still counted: [False, True]" in res.stdout  # the ended capture's free was made
    assert "RuntimeWarning: 1 stream-ordered free(s) of 32 bytes were never made" in res.stderr
