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

import ctypes

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
        # A GPU maps a graph's memory in the launch call, on the host, before the allocation
        # node runs: work queued after the launch may use it.
        assert b.pointer_info(ptr).mapped is True
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


# ------------------------------ graph memory gpuarray allocates in another library's capture
def _made_in_their_capture():
    """``y = x.copy()`` on an external stream while its owner captures (issue 43): with the
    default memory manager gpuarray allocates y on the capturing stream, as graph memory of
    the other library's graph.  Returns the driver, the stream, x, y and the graph, which
    the other library has instantiated but not launched."""
    b = get_backend().backend  # the other library calls the driver itself
    owned = gpuarray.stream(non_blocking=True)
    e = gpuarray.external_stream(owned.handle, owner=owned)
    x = gpuarray.to_device(np.arange(16, dtype=np.float32), stream=e)
    e.synchronize()
    with gpuarray.get_device().activate():
        b.stream_begin_capture(e.handle, "global")
    y = x.copy()
    with gpuarray.get_device().activate():
        graph = b.stream_end_capture(e.handle)
        ex = b.graph_instantiate(graph, auto_free_on_launch=True)
    return b, e, x, y, (graph, ex)


_USES = {
    "copy to host": lambda x, y: y.copy_to_host(),
    "scalar read": lambda x, y: y[3],
    "copy": lambda x, y: y.copy(),
    "kernel": lambda x, y: y.astype(np.float64),       # the cast kernel reads it
    "strided kernel": lambda x, y: y[::2].copy(),      # the copy kernel reads it
    "write": lambda x, y: y.copy_to_device(np.ones(16, np.float32)),
    "written by a copy": lambda x, y: y.copy_to_device(x),
    "fill": lambda x, y: y.fill(1.0),
    "CAI export": lambda x, y: y.__cuda_array_interface__,
    "DLPack export": lambda x, y: y.__dlpack__(),
    "DLPack export to a stream": lambda x, y: y.__dlpack__(stream=x.stream.handle,
                                                           max_version=(1, 0)),
    "DLPack exchange table": lambda x, y: _exchange_export(y),
}


def _exchange_export(y):
    """A C consumer's borrowed DLTensor of ``y`` through gpuarray's exchange table."""
    from tests.interop.test_dlpack_exchange import DLTensor, Table  # skips without the C core

    out = DLTensor()
    Table().dltensor(id(y), ctypes.byref(out))  # raises what the table set
    return out


@pytest.mark.parametrize("use", list(_USES))
def test_an_array_gpuarray_made_in_another_librarys_capture_is_refused_before_its_launch(use):
    b, e, x, y, (graph, ex) = _made_in_their_capture()
    with pytest.raises(StreamCaptureError, match=r"another library captured on .*external 0x"
                                                 r"[0-9a-f]+.* launch"):
        _USES[use](x, y)  # before: a sticky CUDA_ERROR_ILLEGAL_ADDRESS, the context lost
    with gpuarray.get_device().activate():
        b.graph_launch(ex, e.handle)  # the other library launches its graph
    np.testing.assert_array_equal(y.copy_to_host(), np.arange(16))  # y holds the copy now
    _USES[use](x, y)
    e.synchronize()
    del y
    with gpuarray.get_device().activate():
        b.graph_exec_destroy(ex)
        b.graph_destroy(graph)
    np.testing.assert_array_equal(x.copy_to_host(), np.arange(16))  # the context is healthy


def test_inside_their_capture_the_array_is_used_freely():
    """On the capturing stream itself the work is captured after the allocation node."""
    b = get_backend().backend
    owned = gpuarray.stream(non_blocking=True)
    e = gpuarray.external_stream(owned.handle, owner=owned)
    x = gpuarray.to_device(np.arange(4, dtype=np.float32), stream=e)
    e.synchronize()
    out = gpuarray.pinned_array(4, np.float64)
    with gpuarray.get_device().activate():
        b.stream_begin_capture(e.handle, "global")
    y = x.copy()
    z = y.astype(np.float64)
    z.copy_to_host(out, stream=e)
    assert y.__cuda_array_interface__["stream"] == e.handle
    with gpuarray.get_device().activate():
        graph = b.stream_end_capture(e.handle)
        ex = b.graph_instantiate(graph, auto_free_on_launch=True)
        b.graph_launch(ex, e.handle)
    e.synchronize()
    np.testing.assert_array_equal(out, np.arange(4))
    del y, z
    with gpuarray.get_device().activate():
        b.graph_exec_destroy(ex)
        b.graph_destroy(graph)


def test_an_array_of_their_graph_freed_before_any_launch_leaves_no_refusal_behind():
    """Its address may be handed out again: a new allocation there is not refused."""
    b, e, x, y, (graph, ex) = _made_in_their_capture()
    ptr = y.ptr
    del y
    with gpuarray.get_device().activate():
        b.graph_exec_destroy(ex)
        b.graph_destroy(graph)
    from gpuarray import _graph

    assert not any(base <= ptr < base + size for base, (size, _) in _graph._unlaunched.items())


def test_an_array_of_their_graph_dropped_while_gpuarray_captures_is_freed_when_that_ends():
    """cuMemFree of the allocation their launch left waits for gpuarray's capture (the
    checkpoint defers it); never launched, the address goes with their graph: no free."""
    from tests.support import the_simulator

    b, e, x, y, (graph, ex) = _made_in_their_capture()
    _, e2, x2, y2, (graph2, ex2) = _made_in_their_capture()
    with gpuarray.get_device().activate():
        b.graph_launch(ex, e.handle)
    e.synchronize()
    ptr, ptr2 = y.ptr, y2.ptr
    s = gpuarray.stream(non_blocking=True)
    s.begin_capture()
    del y, y2
    mem = the_simulator().memory
    assert mem.find(ptr).alive and not mem.find(ptr).unmapped  # held: cuMemFree would sync
    g = s.end_capture()
    assert mem.find(ptr) is None or not mem.find(ptr).alive or mem.find(ptr).unmapped
    g.close()
    with gpuarray.get_device().activate():
        for gr, exe in ((graph, ex), (graph2, ex2)):
            b.graph_exec_destroy(exe)
            b.graph_destroy(gr)
    gpuarray.synchronize()
    assert mem.find(ptr2) is None or not mem.find(ptr2).alive
