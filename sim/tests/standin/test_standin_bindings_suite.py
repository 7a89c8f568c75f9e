"""Driver calls cuda.bindings 13.5's own tests make that the stand-in answered NOT_SUPPORTED (issue 45).

Each scenario runs through the real cuda.bindings over the stand-in (a child
process, as ``test_standin.py``'s do), the way ``cuda_bindings/tests/test_cuda.py``
of the cuda-python release calls them; each failed on the code before (the
stand-in answered ``CUDA_ERROR_NOT_SUPPORTED``):

- the graph identity calls of CUDA 13.1 (``cuGraphGetId``, ``cuGraphExecGetId``,
  ``cuGraphNodeGetLocalId``, ``cuGraphNodeGetToolsId``,
  ``cuGraphNodeGetContainingGraph``);
- the GPU coredump settings (``cuCoredump{Get,Set}Attribute[Global]``), kept and
  reported with cuda.h's defaults (the simulator writes no coredump);
- device (SM) resources and their splits (``cuDeviceGetDevResource``,
  ``cuStreamGetDevResource``, ``cuDevSmResourceSplitByCount``,
  ``cuDevSmResourceSplit``), while green contexts stay NOT_SUPPORTED.
"""

from __future__ import annotations

import pytest

from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module-scoped fixture)
from sim.tests.standin.test_standin import run_bindings as _go

pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")



def test_graph_and_node_ids(folder):  # noqa: F811
    _go(folder, """
        g1, g2 = chk(d.cuGraphCreate(0)), chk(d.cuGraphCreate(0))
        id1, id2 = chk(d.cuGraphGetId(g1)), chk(d.cuGraphGetId(g2))
        assert id1 > 0 and id2 > 0 and id1 != id2, (id1, id2)
        assert chk(d.cuGraphGetId(g1)) == id1          # asked again: the same id
        a = chk(d.cuGraphAddEmptyNode(g1, None, 0))
        b = chk(d.cuGraphAddEmptyNode(g1, [a], 1))
        c = chk(d.cuGraphAddEmptyNode(g1, [a, b], 2))
        local = [chk(d.cuGraphNodeGetLocalId(n)) for n in (a, b, c)]
        assert local == [0, 1, 2], local               # in the order the nodes were added
        tools = [chk(d.cuGraphNodeGetToolsId(n)) for n in (a, b, c)]
        assert len(set(tools)) == 3, tools
        x = chk(d.cuGraphAddEmptyNode(g2, None, 0))    # local 0 too, but another tools id
        assert chk(d.cuGraphNodeGetLocalId(x)) == 0 and chk(d.cuGraphNodeGetToolsId(x)) not in tools
        chk(d.cuGraphDestroyNode(b))                   # ids are not reused
        e = chk(d.cuGraphAddEmptyNode(g1, None, 0))
        assert chk(d.cuGraphNodeGetLocalId(e)) == 3
        # the graph a node is in: a child graph's node answers the child graph
        assert int(chk(d.cuGraphNodeGetContainingGraph(a))) == int(g1)
        child = chk(d.cuGraphCreate(0))
        inner = chk(d.cuGraphAddEmptyNode(child, None, 0))
        p = d.CUgraphNodeParams()
        p.type = d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_GRAPH
        p.graph.graph = child
        holder = chk(d.cuGraphAddNode(g1, None, None, 0, p))
        assert int(chk(d.cuGraphNodeGetContainingGraph(holder))) == int(g1)
        assert int(chk(d.cuGraphNodeGetContainingGraph(inner))) == int(child)
        # executable graphs: ids of their own
        x1, x2 = chk(d.cuGraphInstantiate(g1, 0)), chk(d.cuGraphInstantiate(g2, 0))
        e1, e2 = chk(d.cuGraphExecGetId(x1)), chk(d.cuGraphExecGetId(x2))
        assert e1 > 0 and e2 > 0 and e1 != e2, (e1, e2)
        # a handle that is no graph is INVALID_VALUE, as cuda.h lists
        chk(d.cuGraphExecDestroy(x1))
        assert d.cuGraphExecGetId(x1)[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE
        chk(d.cuGraphDestroy(g2))
        assert d.cuGraphGetId(g2)[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE
        assert d.cuGraphNodeGetLocalId(x)[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE
        print("OK")
    """)


def test_coredump_settings_are_kept_and_reported(folder):  # noqa: F811
    _go(folder, """
        S = d.CUcoredumpSettings
        # cuda.h's defaults: no dump on exception, the host triggered, core.cuda.HOST.PID
        assert chk(d.cuCoredumpGetAttributeGlobal(S.CU_COREDUMP_ENABLE_ON_EXCEPTION)) is False
        assert chk(d.cuCoredumpGetAttributeGlobal(S.CU_COREDUMP_TRIGGER_HOST)) is True
        import os
        assert chk(d.cuCoredumpGetAttributeGlobal(S.CU_COREDUMP_FILE)).endswith(b".%d" % os.getpid())
        # what cuda_bindings/tests/test_cuda.py::test_cuda_coredump_attr sets and reads back
        chk(d.cuCoredumpSetAttributeGlobal(S.CU_COREDUMP_TRIGGER_HOST, False))
        chk(d.cuCoredumpSetAttributeGlobal(S.CU_COREDUMP_FILE, b"corefile"))
        chk(d.cuCoredumpSetAttributeGlobal(S.CU_COREDUMP_PIPE, b"corepipe"))
        chk(d.cuCoredumpSetAttributeGlobal(S.CU_COREDUMP_LIGHTWEIGHT, True))
        got = [chk(d.cuCoredumpGetAttributeGlobal(a)) for a in (
            S.CU_COREDUMP_TRIGGER_HOST, S.CU_COREDUMP_FILE, S.CU_COREDUMP_PIPE,
            S.CU_COREDUMP_LIGHTWEIGHT)]
        assert got == [False, b"corefile", b"corepipe", True], got
        # a context's setting falls back to the global one until set for the context
        assert chk(d.cuCoredumpGetAttribute(S.CU_COREDUMP_FILE)) == b"corefile"
        chk(d.cuCoredumpSetAttribute(S.CU_COREDUMP_FILE, b"ctxfile"))
        assert chk(d.cuCoredumpGetAttribute(S.CU_COREDUMP_FILE)) == b"ctxfile"
        assert chk(d.cuCoredumpGetAttributeGlobal(S.CU_COREDUMP_FILE)) == b"corefile"
        chk(d.cuCoredumpSetAttribute(S.CU_COREDUMP_GENERATION_FLAGS, 3))
        assert chk(d.cuCoredumpGetAttribute(S.CU_COREDUMP_GENERATION_FLAGS)) == 3
        # cuda.h: the pipe and the user trigger cannot be set per context
        r = d.cuCoredumpSetAttribute(S.CU_COREDUMP_PIPE, b"p")
        assert r[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE, r
        # per context needs a current context
        chk(d.cuCtxSetCurrent(None))
        r = d.cuCoredumpGetAttribute(S.CU_COREDUMP_FILE)
        assert r[0] == d.CUresult.CUDA_ERROR_INVALID_CONTEXT, r
        print("OK")
    """)


def test_sm_resources_and_their_splits(folder):  # noqa: F811
    _go(folder, """
        T = d.CUdevResourceType
        sm = chk(d.cuDeviceGetDevResource(dev, T.CU_DEV_RESOURCE_TYPE_SM))
        n_sm = chk(d.cuDeviceGetAttribute(
            d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev))
        assert sm.type == T.CU_DEV_RESOURCE_TYPE_SM and sm.sm.smCount == n_sm, sm.sm.smCount
        assert sm.sm.minSmPartitionSize == 8 and sm.sm.smCoscheduledAlignment == 8  # cc 9.0
        s = chk(d.cuStreamCreate(0))
        assert chk(d.cuStreamGetDevResource(s, T.CU_DEV_RESOURCE_TYPE_SM)).sm.smCount == n_sm
        # by count: groups of minCount rounded up to the alignment, at least the minimum
        res, count, rem = chk(d.cuDevSmResourceSplitByCount(0, sm, 0, 2))
        assert count == n_sm // 8 and len(res) == 0, count
        res, got, rem = chk(d.cuDevSmResourceSplitByCount(3, sm, 0, 12))
        assert got == 3 and [r.sm.smCount for r in res] == [16] * 3
        assert rem.sm.smCount == n_sm - 48
        r = d.cuDevSmResourceSplitByCount(1, sm, 0, n_sm + 1)
        assert r[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE, r
        # a group cannot be split again (cuda.h: not without a green context)
        assert d.cuDevSmResourceSplitByCount(1, res[0], 0, 2)[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE
        # structured groups: 4 SMs co-scheduled by 2, then discovery of the rest in groups of 8
        p = [d.CU_DEV_SM_RESOURCE_GROUP_PARAMS(), d.CU_DEV_SM_RESOURCE_GROUP_PARAMS()]
        p[0].smCount, p[0].coscheduledSmCount = 4, 2
        res, rem = chk(d.cuDevSmResourceSplit(2, sm, 0, p))
        assert [r.sm.smCount for r in res] == [4, (n_sm - 4) // 8 * 8], [r.sm.smCount for r in res]
        assert rem.sm.smCount == n_sm - 4 - (n_sm - 4) // 8 * 8
        # not whole co-scheduled groups: a configuration the SMs cannot take, unless backfilled
        q = [d.CU_DEV_SM_RESOURCE_GROUP_PARAMS()]
        q[0].smCount = 12
        r = d.cuDevSmResourceSplit(1, sm, 0, q)
        assert r[0] == d.CUresult.CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, r
        q[0].flags = d.CUdevSmResourceGroup_flags.CU_DEV_SM_RESOURCE_GROUP_BACKFILL
        assert chk(d.cuDevSmResourceSplit(1, sm, 0, q))[0][0].sm.smCount == 12
        # workqueue resources and green contexts are not simulated
        r = d.cuDeviceGetDevResource(dev, T.CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG)
        assert r[0] == d.CUresult.CUDA_ERROR_NOT_SUPPORTED, r
        print("OK")
    """)
