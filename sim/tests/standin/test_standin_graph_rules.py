"""Capture and driver rules the stand-in answered unlike a driver, and explicit graphs (issue 45).

Each scenario runs through the real cuda.bindings over the stand-in (a child
process, as ``test_standin.py``'s do).  The rules, each seen failing on the
code before issue 45:

- ``cuStreamGetCaptureInfo`` reports the nodes the next captured work depends
  on (it reported none), and ``cuStreamUpdateCaptureDependencies`` sets them;
- destroying a stream forked into a relaxed capture and joined back is
  allowed (it answered 900 and invalidated the capture: cuda.core's
  ``GraphBuilder.join`` does it);
- ``cuMemcpyAsync`` from managed memory in a capture is a device copy (it
  answered 900, "from pageable host memory");
- ``cuMemAllocAsync(0)`` gives a 0-byte allocation (it answered INVALID_VALUE,
  which cuda.h states for ``cuMemAlloc`` and ``cuMemAllocManaged`` only);
- ``cuFuncGetName``/``cuKernelGetName`` of NULL answer INVALID_VALUE, as cuda.h
  lists (they answered INVALID_HANDLE).
"""

from __future__ import annotations

import pytest

from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module-scoped fixture)
from sim.tests.standin.test_standin import run_bindings as _go

pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")



def test_capture_info_reports_the_dependency_set_and_update_sets_it(folder):  # noqa: F811
    _go(folder, """
        s = chk(d.cuStreamCreate(1))
        buf = chk(d.cuMemAlloc(64))
        chk(d.cuStreamBeginCapture(s, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
        st, cid, graph, deps, edges, n = chk(d.cuStreamGetCaptureInfo(s))
        assert n == 0
        chk(d.cuMemsetD8Async(buf, 1, 64, s))
        st, cid, graph, deps, edges, n = chk(d.cuStreamGetCaptureInfo(s))
        assert n == 1, n                      # the memset node
        memset_node = deps[0]
        assert chk(d.cuGraphNodeGetType(memset_node)) == d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMSET
        # a node added by hand after it, then made the stream's dependency
        empty = chk(d.cuGraphAddEmptyNode(graph, [memset_node], 1))
        chk(d.cuStreamUpdateCaptureDependencies(s, [empty], None, 1, 1))  # SET
        chk(d.cuMemsetD8Async(buf, 2, 64, s))
        st, cid, graph, deps, edges, n = chk(d.cuStreamGetCaptureInfo(s))
        last = deps[0]
        dep_of_last = chk(d.cuGraphNodeGetDependencies(last, 1))[0]
        assert int(dep_of_last[0]) == int(empty)
        g = chk(d.cuStreamEndCapture(s))
        assert chk(d.cuGraphGetNodes(g, 0))[1] == 3
        print("OK")
    """)


def test_destroying_a_joined_fork_of_a_relaxed_capture_keeps_it_valid(folder):  # noqa: F811
    _go(folder, """
        a = chk(d.cuStreamCreate(1)); b = chk(d.cuStreamCreate(1))
        buf = chk(d.cuMemAlloc(64))
        ev1 = chk(d.cuEventCreate(2)); ev2 = chk(d.cuEventCreate(2))
        chk(d.cuStreamBeginCapture(a, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
        chk(d.cuEventRecord(ev1, a)); chk(d.cuStreamWaitEvent(b, ev1, 0))   # fork
        chk(d.cuMemsetD8Async(buf, 1, 64, b))
        chk(d.cuEventRecord(ev2, b)); chk(d.cuStreamWaitEvent(a, ev2, 0))   # join
        chk(d.cuStreamDestroy(b))                                          # as GraphBuilder.join
        g = chk(d.cuStreamEndCapture(a))
        ex = chk(d.cuGraphInstantiate(g, 0))
        chk(d.cuGraphLaunch(ex, a)); chk(d.cuStreamSynchronize(a))
        host = (ctypes.c_uint8 * 64)()
        chk(d.cuMemcpyDtoH(host, buf, 64))
        assert list(host) == [1] * 64
        print("OK")
    """)


def test_copy_from_managed_memory_in_a_capture_is_a_device_copy(folder):  # noqa: F811
    _go(folder, """
        s = chk(d.cuStreamCreate(1))
        m = chk(d.cuMemAllocManaged(64, 1))
        ctypes.memset(int(m), 7, 64)
        dst = chk(d.cuMemAlloc(64))
        chk(d.cuStreamBeginCapture(s, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
        chk(d.cuMemcpyAsync(dst, m, 64, s))
        g = chk(d.cuStreamEndCapture(s))
        ex = chk(d.cuGraphInstantiate(g, 0))
        chk(d.cuGraphLaunch(ex, s)); chk(d.cuStreamSynchronize(s))
        host = (ctypes.c_uint8 * 64)()
        chk(d.cuMemcpyDtoH(host, dst, 64))
        assert list(host) == [7] * 64
        print("OK")
    """)


def test_stream_ordered_allocation_of_zero_bytes(folder):  # noqa: F811
    _go(folder, """
        s = chk(d.cuStreamCreate(1))
        p = chk(d.cuMemAllocAsync(0, s))
        chk(d.cuMemFreeAsync(p, s))
        pool = chk(d.cuDeviceGetDefaultMemPool(dev))
        p = chk(d.cuMemAllocFromPoolAsync(0, pool, s))
        chk(d.cuMemFreeAsync(p, s)); chk(d.cuStreamSynchronize(s))
        # cuMemAlloc(0) stays INVALID_VALUE, as cuda.h states
        assert d.cuMemAlloc(0)[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE
        print("OK")
    """)


def test_function_names_of_null_are_invalid_value(folder):  # noqa: F811
    _go(folder, """
        assert d.cuFuncGetName(d.CUfunction(0))[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE
        assert d.cuKernelGetName(d.CUkernel(0))[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE
        print("OK")
    """)


def test_a_managed_memory_allocation_node_is_not_supported(folder):  # noqa: F811
    # a driver serves it; the simulator does not model it, so NOT_SUPPORTED (cuda.h lists it for
    # cuGraphAddMemAllocNode), not INVALID_VALUE as if the parameters were wrong
    _go(folder, """
        g = chk(d.cuGraphCreate(0))
        p = d.CUDA_MEM_ALLOC_NODE_PARAMS()
        p.poolProps.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_MANAGED
        p.poolProps.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        p.poolProps.location.id = 0
        p.bytesize = 64
        r = d.cuGraphAddMemAllocNode(g, None, 0, p)
        assert r[0] == d.CUresult.CUDA_ERROR_NOT_SUPPORTED, r
        p.poolProps.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        chk(d.cuGraphAddMemAllocNode(g, None, 0, p))
        print("OK")
    """)


def test_a_free_node_of_null_is_invalid_value(folder):  # noqa: F811
    # it was accepted (a free node freeing nothing); cuda.core's GraphDefinition.deallocate(0)
    # expects the driver's error
    _go(folder, """
        g = chk(d.cuGraphCreate(0))
        r = d.cuGraphAddMemFreeNode(g, None, 0, 0)
        assert r[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE, r
        print("OK")
    """)


def test_a_graph_built_node_by_node_runs_and_reports_its_shape(folder):  # noqa: F811
    _go(folder, """
        s = chk(d.cuStreamCreate(1))
        g = chk(d.cuGraphCreate(0))
        buf = chk(d.cuMemAlloc(256))
        host = (ctypes.c_uint8 * 256)()
        p = d.CUDA_MEMSET_NODE_PARAMS(); p.dst = buf; p.value = 5; p.elementSize = 1
        p.width = 256; p.height = 1; p.pitch = 256
        ms = chk(d.cuGraphAddMemsetNode(g, None, 0, p, ctx))
        e = chk(d.cuGraphAddEmptyNode(g, [ms], 1))
        c = d.CUDA_MEMCPY3D()
        c.srcMemoryType = d.CUmemorytype.CU_MEMORYTYPE_DEVICE; c.srcDevice = buf
        c.dstMemoryType = d.CUmemorytype.CU_MEMORYTYPE_HOST; c.dstHost = ctypes.addressof(host)
        c.WidthInBytes = 256; c.Height = 1; c.Depth = 1
        cp = chk(d.cuGraphAddMemcpyNode(g, [e], 1, c, ctx))
        assert chk(d.cuGraphGetRootNodes(g, 0))[1] == 1
        edges = chk(d.cuGraphGetEdges(g, 0))
        assert edges[-1] == 2, edges
        clone = chk(d.cuGraphClone(g))
        assert chk(d.cuGraphNodeGetType(chk(d.cuGraphNodeFindInClone(cp, clone)))) \\
            == d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMCPY
        ex = chk(d.cuGraphInstantiate(g, 0))
        chk(d.cuGraphLaunch(ex, s)); chk(d.cuStreamSynchronize(s))
        assert list(host) == [5] * 256        # the memcpy node wrote pageable host memory
        print("OK")
    """)
