"""cuda.core graphs with gpuarray operations in them, over the stand-in (issue 28, item 5).

cuda.core's ``GraphBuilder`` captures its stream (``cuStreamBeginCapture``)
and instantiates the graph with ``cuGraphInstantiateWithParams``; gpuarray
works on that stream as an external stream.  Its operations are recorded
into cuda.core's graph, its arrays are graph memory of that graph, host waits
are refused before they could invalidate the capture, and each launch
replays gpuarray's pipeline on the inputs of the moment.  Run by
``make test-numba-driver`` in ``.venv-peers`` (tests/requirements-peers.txt);
skips, saying why, without cuda.core or outside the stand-in.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from gpuarray_sim import standin as _standin

import gpuarray
from gpuarray.errors import StreamCaptureError

pytestmark = pytest.mark.skipif(
    not _standin.active() or gpuarray._driver.backend_name() != "cuda",
    reason="needs the cuda backend over the stand-in driver (python -m gpuarray standin -- pytest)")


def _options(**kwargs):
    from cuda.core.graph import GraphCompleteOptions

    return GraphCompleteOptions(**kwargs)


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
def test_a_graph_builder_capture_of_gpuarray_operations_replays_on_new_inputs(core, mode):
    mod, dev = core
    gb = dev.create_graph_builder()
    s = gpuarray.external_stream(int(gb.stream.handle), owner=gb.stream)
    x = gpuarray.to_device(np.zeros((2, 3), np.int32), stream=s)  # the static input
    s.synchronize()
    gb.begin_building(mode)
    assert s.is_capturing()
    y = x.astype(np.float64).T.copy()  # cast + transpose, recorded into cuda.core's graph
    z = y[::2].copy()                  # a strided copy of it
    with pytest.raises(StreamCaptureError, match="capturing"):
        y.copy_to_host()               # refused before the driver: the capture stays valid
    graph = gb.end_building().complete(_options(auto_free_on_launch=True))
    assert not s.is_capturing()
    for k in (1, 4, 9):
        host = np.arange(6, dtype=np.int32).reshape(2, 3) * k
        x.copy_to_device(host, stream=s)
        graph.launch(gb.stream)
        np.testing.assert_array_equal(y.copy_to_host(), host.T.astype(np.float64))
        np.testing.assert_array_equal(z.copy_to_host(), host.T[::2])
    graph.close()
    del y, z
    gc.collect()


def test_a_graph_builder_with_upload_on_instantiation_and_gpuarray_fills(core):
    mod, dev = core
    gb = dev.create_graph_builder()
    s = gpuarray.external_stream(int(gb.stream.handle), owner=gb.stream)
    a = gpuarray.zeros(5, np.float32, stream=s)
    s.synchronize()
    gb.begin_building()
    a.fill(3)
    a[1:4] = -1
    graph = gb.end_building().complete(_options(upload_stream=gb.stream))
    graph.launch(gb.stream)
    np.testing.assert_array_equal(a.copy_to_host(), [3, -1, -1, -1, 3])
    graph.close()


def test_memory_a_graph_builder_allocated_is_refused_before_its_graph_is_launched(core):
    # cuda.core allocates (cuMemAllocFromPoolAsync on its capturing stream: a
    # graph allocation) and hands the address over; reading it before the
    # graph's first launch would fault and lose the context (issue 35).
    mod, dev = core
    gb = dev.create_graph_builder()
    gb.begin_building()
    buf = mod.GraphMemoryResource(dev).allocate(64, stream=gb)  # graph memory of cuda.core's graph
    graph = gb.end_building().complete()
    x = gpuarray.from_cuda_array_interface(
        {"shape": (16,), "typestr": "<f4", "data": (int(buf.handle), False), "version": 3,
         "strides": None, "stream": None}, owner=buf)
    with pytest.raises(StreamCaptureError, match="launch"):
        x.copy_to_host()  # before: CUDA_ERROR_ILLEGAL_ADDRESS, the context lost
    graph.launch(gb.stream)
    gb.stream.sync()
    x.copy_to_device(np.arange(16, dtype=np.float32))
    np.testing.assert_array_equal(x.copy_to_host(), np.arange(16))
    del x
    graph.close()
