"""Graph memory another library allocated in its capture, read by gpuarray before a launch (issue 35).

CUDA (programming guide, graph memory nodes): the address of a graph
allocation is assigned when the allocation node is made, but the
allocation's lifetime "begins when GPU execution reaches the allocating
graph node": before the graph's first launch nothing backs the address, and
work that reads it faults (``CUDA_ERROR_ILLEGAL_ADDRESS``, sticky: the
context is lost).  gpuarray's own graphs refuse such a use with
StreamCaptureError.  Memory another library (cuda.core's GraphBuilder, raw
cuda.bindings) allocated in its capture and handed over through
``__cuda_array_interface__`` is refused the same way now: the import asks
the driver, in the pointer query it makes anyway, whether the address is
mapped to a backing allocation (``CU_POINTER_ATTRIBUTE_MAPPED``), and a use
of such memory asks again until it is.  On the ``sim`` backend and on the
cuda backend over the stand-in driver.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuarray
from gpuarray._driver import get_backend
from gpuarray.errors import StreamCaptureError
from tests.support import simulated

pytestmark = pytest.mark.skipif(not simulated(), reason="the simulator models graph memory")


def _foreign_graph_memory(nbytes: int = 64):
    """Another library's capture: a graph allocation (a static output), the graph not launched."""
    b = get_backend()
    owned = gpuarray.stream(non_blocking=True)
    e = gpuarray.external_stream(owned.handle)
    b.stream_begin_capture(e.handle, "global")
    ptr = b.mem_alloc_async(nbytes, e.handle)
    graph = b.stream_end_capture(e.handle)
    ex = b.graph_instantiate(graph)
    return b, owned, e, ptr, graph, ex


def _import(ptr: int, n: int = 16):
    desc = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 3, "strides": None,
            "stream": None}
    return gpuarray.from_cuda_array_interface(desc)


def test_the_driver_says_graph_memory_is_not_mapped_before_the_first_launch():
    b, owned, e, ptr, graph, ex = _foreign_graph_memory()
    with gpuarray.get_device().activate():
        assert b.pointer_info(ptr).mapped is False  # reserved, not backed yet
        b.graph_launch(ex, e.handle)
        b.stream_synchronize(e.handle)
        assert b.pointer_info(ptr).mapped is True
        assert gpuarray.zeros(4).gpu_data and b.pointer_info(
            gpuarray.zeros(4).gpu_data.device_pointer).mapped is True
        b.mem_free(ptr)
        b.graph_exec_destroy(ex)
        b.graph_destroy(graph)


@pytest.mark.parametrize("use", ["download", "device copy", "fill"])
def test_reading_foreign_graph_memory_before_its_graph_is_launched_is_refused(use):
    b, owned, e, ptr, graph, ex = _foreign_graph_memory()
    x = _import(ptr)
    ops = {
        "download": x.copy_to_host,
        "device copy": lambda: gpuarray.zeros(16, np.float32).copy_to_device(x),
        "fill": lambda: x.fill(1.0),
    }
    with pytest.raises(StreamCaptureError, match="launch"):  # before: a sticky 700, context lost
        ops[use]()
    # nothing reached the driver: the context is healthy, and after a launch the memory is usable
    with gpuarray.get_device().activate():
        b.graph_launch(ex, e.handle)
        b.stream_synchronize(e.handle)
    x.copy_to_device(np.arange(16, dtype=np.float32))
    np.testing.assert_array_equal(x.copy_to_host(), np.arange(16))
    np.testing.assert_array_equal(gpuarray.to_device(np.ones(3)).copy_to_host(), 1)
    with gpuarray.get_device().activate():
        b.mem_free(ptr)
        b.graph_exec_destroy(ex)
        b.graph_destroy(graph)
