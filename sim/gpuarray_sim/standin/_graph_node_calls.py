"""The stand-in driver's explicit graph calls: graphs built node by node, served by the simulator.

One concern: the driver forms of ``cuGraphCreate``, ``cuGraphAdd*Node`` and
``cuGraphAddNode`` (``CUgraphNodeParams``), node parameters (get/set, in a
graph and in an executable graph), edges and queries, clone, node removal,
conditional handles, ``cuGraphExecUpdate``, ``cuGraphDebugDotPrint``,
``cuStreamBeginCaptureToGraph`` / ``cuStreamUpdateCaptureDependencies`` and
the graph memory attributes.  The graph model is the simulator's
(``sim/_graph_build.py``): a kernel, memcpy, memset or memory node is made by
serving the same launch, copy, memset or allocation on a stream whose
capture appends to the graph, so this module only decodes cuda.h's
structures (layouts of CUDA 13.x, x86-64) and keeps what a ``Get`` call
returns: a kernel node's arguments are copied when the node is made, as a
driver copies them, and ``cuGraphKernelNodeGetParams`` points at that copy.

Edge data (``CUgraphEdgeData``): only the default edge (every field 0) is
modelled; another type or port is refused with ``CUDA_ERROR_NOT_SUPPORTED``
(programmatic dependent launch is not simulated).  Queries report default
edges (zeros).
"""

from __future__ import annotations

import ctypes
from typing import Any

from gpuarray.errors import CudaError

from . import _copy_calls, _module_calls
from ._support import _I32, _INVALID_VALUE, _SIZE, _U32, _U64, _out, _output_first, _stream, backend

_NOT_SUPPORTED = 801
_P = ctypes.c_void_p

#: ``CUgraphNodeType`` of cuda.h, by the simulator's node type names.
NODE_TYPES = {"kernel": 0, "memcpy": 1, "memset": 2, "host": 3, "graph": 4, "empty": 5,
              "wait_event": 6, "event_record": 7, "mem_alloc": 10, "mem_free": 11,
              "conditional": 13}
_TYPE_NAMES = {v: k for k, v in NODE_TYPES.items()}
#: ``CUgraphExecUpdateResult``.
_UPDATE = {"success": 0, "error": 1, "error_topology_changed": 2, "error_node_type_changed": 3,
           "error_function_changed": 4, "error_parameters_changed": 5, "error_not_supported": 6}


class _KernelParams(ctypes.Structure):
    """``CUDA_KERNEL_NODE_PARAMS_v2`` (v3 has the same layout; v1 is its first 56 bytes)."""

    _fields_ = [("func", _P), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint),
                ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("kernelParams", _P), ("extra", _P),
                ("kern", _P), ("ctx", _P)]


_KERNEL_V1_SIZE = 56


class _MemsetParams(ctypes.Structure):
    """``CUDA_MEMSET_NODE_PARAMS`` (v2 adds ``ctx``)."""

    _fields_ = [("dst", ctypes.c_uint64), ("pitch", ctypes.c_size_t), ("value", ctypes.c_uint),
                ("elementSize", ctypes.c_uint), ("width", ctypes.c_size_t),
                ("height", ctypes.c_size_t), ("ctx", _P)]


_MEMSET_V1_SIZE = 40


class _HostParams(ctypes.Structure):
    """``CUDA_HOST_NODE_PARAMS`` (v2 adds ``syncMode`` and a context)."""

    _fields_ = [("fn", _P), ("userData", _P), ("syncMode", ctypes.c_uint), ("ctx", _P)]


_HOST_V1_SIZE = 16


class _Memcpy3D(ctypes.Structure):
    """``CUDA_MEMCPY3D`` (200 bytes)."""

    _fields_ = [("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t),
                ("srcZ", ctypes.c_size_t), ("srcLOD", ctypes.c_size_t),
                ("srcMemoryType", ctypes.c_int), ("srcHost", _P), ("srcDevice", ctypes.c_uint64),
                ("srcArray", _P), ("reserved0", _P), ("srcPitch", ctypes.c_size_t),
                ("srcHeight", ctypes.c_size_t), ("dstXInBytes", ctypes.c_size_t),
                ("dstY", ctypes.c_size_t), ("dstZ", ctypes.c_size_t), ("dstLOD", ctypes.c_size_t),
                ("dstMemoryType", ctypes.c_int), ("dstHost", _P), ("dstDevice", ctypes.c_uint64),
                ("dstArray", _P), ("reserved1", _P), ("dstPitch", ctypes.c_size_t),
                ("dstHeight", ctypes.c_size_t), ("WidthInBytes", ctypes.c_size_t),
                ("Height", ctypes.c_size_t), ("Depth", ctypes.c_size_t)]


class _MemAllocParams(ctypes.Structure):
    """``CUDA_MEM_ALLOC_NODE_PARAMS`` (``CUmemPoolProps`` is 88 bytes)."""

    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int),
                ("locType", ctypes.c_int), ("locId", ctypes.c_int),
                ("win32", _P), ("maxSize", ctypes.c_size_t), ("usage", ctypes.c_ushort),
                ("rdma", ctypes.c_ubyte), ("reserved", ctypes.c_ubyte * 53),
                ("accessDescs", _P), ("accessDescCount", ctypes.c_size_t),
                ("bytesize", ctypes.c_size_t), ("dptr", ctypes.c_uint64)]


assert ctypes.sizeof(_KernelParams) == 72 and ctypes.sizeof(_Memcpy3D) == 200
assert ctypes.sizeof(_MemAllocParams) == 120 and ctypes.sizeof(_MemsetParams) == 48

#: ``CUgraphNodeParams``: ``type`` at 0, the union at 16 (232 bytes), 256 bytes in all.
_NODE_PARAMS_UNION = 16


def _handles(ptr: int, n: int, call: str, what: str = "dependencies") -> list[int]:
    if n and not ptr:
        raise CudaError(_INVALID_VALUE, call, f"(NULL {what} with a count of {n})")
    return [_U64.from_address(ptr + 8 * i).value for i in range(n)]


def _edges_default(ptr: int, n: int, call: str) -> None:
    """``CUgraphEdgeData`` (8 bytes each): only the default edge is simulated."""
    for i in range(n if ptr else 0):
        if any(ctypes.string_at(ptr + 8 * i, 8)):
            raise CudaError(_NOT_SUPPORTED, call, "an edge other than the default (programmatic "
                                                  "dependent launch is not simulated)")


def _list_out(call: str, items: list[int], ptr: int, pcount: int, pedges: int = 0) -> None:
    """The query convention: NULL array -> the count; else up to ``*count`` written."""
    if not pcount:
        raise CudaError(_INVALID_VALUE, call, "(NULL count)")
    if not ptr:
        _SIZE.from_address(pcount).value = len(items)
        return
    cap = _SIZE.from_address(pcount).value
    for i, h in enumerate(items[:cap]):
        _U64.from_address(ptr + 8 * i).value = h
        if pedges:
            ctypes.memset(pedges + 8 * i, 0, 8)
    for i in range(len(items), cap):  # cuda.h: the rest are set to NULL
        _U64.from_address(ptr + 8 * i).value = 0
        if pedges:
            ctypes.memset(pedges + 8 * i, 0, 8)
    _SIZE.from_address(pcount).value = min(cap, len(items))


# ------------------------------------------------------------------ graphs
@_output_first
def cuGraphCreate(p: int, flags: int) -> None:
    if flags:
        raise CudaError(_INVALID_VALUE, "cuGraphCreate", f"flags {flags} (must be 0)")
    _U64.from_address(p).value = backend().graph_create()


@_output_first
def cuGraphClone(p: int, graph: int) -> None:
    _U64.from_address(p).value = backend().graph_clone(graph)


@_output_first
def cuGraphNodeFindInClone(p: int, node: int, clone: int) -> None:
    _U64.from_address(p).value = backend().graph_node_find_in_clone(node, clone)


def cuGraphGetNodes(graph: int, nodes: int, pcount: int) -> None:
    _list_out("cuGraphGetNodes", backend().graph_nodes(graph), nodes, pcount)


def cuGraphGetRootNodes(graph: int, nodes: int, pcount: int) -> None:
    _list_out("cuGraphGetRootNodes", backend().graph_root_nodes(graph), nodes, pcount)


def _get_edges(call: str, graph: int, pfrom: int, pto: int, pedges: int, pcount: int) -> None:
    if not pcount:
        raise CudaError(_INVALID_VALUE, call, "(NULL numEdges)")
    if bool(pfrom) != bool(pto) or (pedges and not pfrom):
        raise CudaError(_INVALID_VALUE, call, "(from and to must both be NULL or both not)")
    edges = backend().graph_edges(graph)
    _list_out(call, [a for a, _ in edges], pfrom, pcount, pedges)
    if pto:
        _SIZE.from_address(pcount).value = len(edges) if not pfrom else _SIZE.from_address(pcount).value
        for i, (_, b) in enumerate(edges[:_SIZE.from_address(pcount).value]):
            _U64.from_address(pto + 8 * i).value = b


def cuGraphGetEdges(graph: int, pfrom: int, pto: int, pcount: int) -> None:
    _get_edges("cuGraphGetEdges", graph, pfrom, pto, 0, pcount)


def cuGraphGetEdges_v2(graph: int, pfrom: int, pto: int, pedges: int, pcount: int) -> None:
    _get_edges("cuGraphGetEdges", graph, pfrom, pto, pedges, pcount)


def cuGraphNodeGetDependencies(node: int, deps: int, pcount: int) -> None:
    _list_out("cuGraphNodeGetDependencies", backend().node_dependencies(node), deps, pcount)


def cuGraphNodeGetDependencies_v2(node: int, deps: int, pedges: int, pcount: int) -> None:
    _list_out("cuGraphNodeGetDependencies", backend().node_dependencies(node), deps, pcount, pedges)


def cuGraphNodeGetDependentNodes(node: int, deps: int, pcount: int) -> None:
    _list_out("cuGraphNodeGetDependentNodes", backend().node_dependents(node), deps, pcount)


def cuGraphNodeGetDependentNodes_v2(node: int, deps: int, pedges: int, pcount: int) -> None:
    _list_out("cuGraphNodeGetDependentNodes", backend().node_dependents(node), deps, pcount, pedges)


def _edge_pairs(call: str, pfrom: int, pto: int, n: int) -> list[tuple[int, int]]:
    return list(zip(_handles(pfrom, n, call, "from"), _handles(pto, n, call, "to"), strict=False))


def cuGraphAddDependencies(graph: int, pfrom: int, pto: int, n: int) -> None:
    backend().graph_add_edges(graph, _edge_pairs("cuGraphAddDependencies", pfrom, pto, n))


def cuGraphAddDependencies_v2(graph: int, pfrom: int, pto: int, pedges: int, n: int) -> None:
    _edges_default(pedges, n, "cuGraphAddDependencies")
    backend().graph_add_edges(graph, _edge_pairs("cuGraphAddDependencies", pfrom, pto, n))


def cuGraphRemoveDependencies(graph: int, pfrom: int, pto: int, n: int) -> None:
    backend().graph_remove_edges(graph, _edge_pairs("cuGraphRemoveDependencies", pfrom, pto, n))


def cuGraphRemoveDependencies_v2(graph: int, pfrom: int, pto: int, pedges: int, n: int) -> None:
    _edges_default(pedges, n, "cuGraphRemoveDependencies")
    backend().graph_remove_edges(graph, _edge_pairs("cuGraphRemoveDependencies", pfrom, pto, n))


def cuGraphDestroyNode(node: int) -> None:
    backend().graph_destroy_node(node)


def cuGraphNodeGetType(node: int, p: int) -> None:
    if not p:
        raise CudaError(_INVALID_VALUE, "cuGraphNodeGetType", "(NULL type)")
    _I32.from_address(p).value = NODE_TYPES[backend().node_type(node)]


def cuGraphDebugDotPrint(graph: int, path: int, flags: int) -> None:
    call = "cuGraphDebugDotPrint"
    if not path:
        raise CudaError(_INVALID_VALUE, call, "(NULL path)")
    text = backend().graph_debug_dot(graph)
    try:
        with open(ctypes.string_at(path).decode(), "w") as f:
            f.write(text)
    except OSError as e:
        raise CudaError(999, call, f"cannot write {ctypes.string_at(path)!r}: {e}") from None


# ----------------------------------------------------------- node builders
def _kernel(call: str, p: int, v1: bool) -> tuple[Any, Any]:
    """Decode kernel node parameters: (a builder of the launch on a stream, what Get returns)."""
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL nodeParams)")
    kp = _KernelParams()
    ctypes.memmove(ctypes.addressof(kp), p, _KERNEL_V1_SIZE if v1 else ctypes.sizeof(kp))
    func = kp.func or kp.kern
    if not func:
        raise CudaError(_INVALID_VALUE, call, "(no function: func and kern are NULL)")
    if kp.extra:
        raise CudaError(_INVALID_VALUE, call, "(the stand-in serves kernelParams, not extra)")
    kernel = backend().function_kernel(func)
    types = getattr(kernel, "param_types", None) or []
    # a copy of the arguments, as the driver keeps one: Get points at it
    bufs = []
    for i, t in enumerate(types):
        addr = _P.from_address(kp.kernelParams + 8 * i).value if kp.kernelParams else 0
        if not addr:
            raise CudaError(_INVALID_VALUE, call, f"(kernelParams[{i}] is NULL)")
        bufs.append(ctypes.create_string_buffer(ctypes.string_at(addr, ctypes.sizeof(t)),
                                                ctypes.sizeof(t)))
    argv = (_P * max(1, len(bufs)))(*[ctypes.addressof(b) for b in bufs])
    kept = _KernelParams.from_buffer_copy(kp)
    kept.kernelParams = ctypes.addressof(argv) if bufs else None
    grid = (kp.gridDimX, kp.gridDimY, kp.gridDimZ)
    block = (kp.blockDimX, kp.blockDimY, kp.blockDimZ)
    shared = kp.sharedMemBytes

    def build(stream: int) -> None:
        _module_calls.cuLaunchKernel(func, *grid, *block, shared, stream, kept.kernelParams or 0, 0)

    return build, (kept, argv, bufs)


def _memset(call: str, p: int) -> tuple[Any, Any]:
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL memsetParams)")
    m = _MemsetParams()
    ctypes.memmove(ctypes.addressof(m), p, _MEMSET_V1_SIZE)
    bits = {1: 8, 2: 16, 4: 32}.get(m.elementSize)
    if bits is None:
        raise CudaError(_INVALID_VALUE, call, f"elementSize {m.elementSize} (1, 2 or 4)")
    if m.height == 0 or m.width == 0:
        raise CudaError(_INVALID_VALUE, call, f"a {m.height} x {m.width} memset")
    kept = _MemsetParams.from_buffer_copy(m)
    dst, pitch, value, width, height = m.dst, m.pitch, m.value, m.width, m.height

    def build(stream: int) -> None:
        b = backend()
        if height == 1:
            getattr(b, f"memset_d{bits}_async")(dst, value, width, stream)
        else:
            b.memset_2d_async(bits, dst, pitch, value, width, height, stream)

    return build, kept


def _memcpy(call: str, p: int) -> tuple[Any, Any]:
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL copyParams)")
    c = _Memcpy3D.from_buffer_copy(ctypes.string_at(p, ctypes.sizeof(_Memcpy3D)))
    if c.Depth > 1 or c.srcZ or c.dstZ:
        raise CudaError(_NOT_SUPPORTED, call, "a 3-D copy (depth > 1): the simulator copies "
                                              "1-D and 2-D")
    copy = _copy_calls.memcpy3d_as_2d(call, c)

    def build(stream: int) -> None:
        copy(stream)

    return build, c


def _add_built(call: str, p: int, graph: int, deps: list[int], ntype: str, build: Any,
               kept: Any) -> Any:
    node, result = backend().graph_add_built(graph, deps, ntype, build, kept)
    _U64.from_address(p).value = node
    return result


@_output_first
def cuGraphAddKernelNode(p: int, graph: int, deps: int, n: int, params: int) -> None:
    call = "cuGraphAddKernelNode"
    build, kept = _kernel(call, params, True)
    _add_built(call, p, graph, _handles(deps, n, call), "kernel", build, kept)


@_output_first
def cuGraphAddKernelNode_v2(p: int, graph: int, deps: int, n: int, params: int) -> None:
    call = "cuGraphAddKernelNode"
    build, kept = _kernel(call, params, False)
    _add_built(call, p, graph, _handles(deps, n, call), "kernel", build, kept)


@_output_first
def cuGraphAddMemsetNode(p: int, graph: int, deps: int, n: int, params: int, ctx: int) -> None:
    call = "cuGraphAddMemsetNode"
    build, kept = _memset(call, params)
    _add_built(call, p, graph, _handles(deps, n, call), "memset", build, kept)


@_output_first
def cuGraphAddMemcpyNode(p: int, graph: int, deps: int, n: int, params: int, ctx: int) -> None:
    call = "cuGraphAddMemcpyNode"
    build, kept = _memcpy(call, params)
    _add_built(call, p, graph, _handles(deps, n, call), "memcpy", build, kept)


_HOST_FN = ctypes.CFUNCTYPE(None, _P)


def _host(call: str, p: int, v1: bool) -> tuple[Any, Any]:
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL nodeParams)")
    h = _HostParams()
    ctypes.memmove(ctypes.addressof(h), p, _HOST_V1_SIZE if v1 else ctypes.sizeof(h))
    if not h.fn:
        raise CudaError(_INVALID_VALUE, call, "(NULL host function)")
    cfn, data = _HOST_FN(h.fn), h.userData

    def run(_status: int) -> None:
        cfn(data)

    return run, h


@_output_first
def cuGraphAddHostNode(p: int, graph: int, deps: int, n: int, params: int) -> None:
    call = "cuGraphAddHostNode"
    run, kept = _host(call, params, True)
    _U64.from_address(p).value = backend().graph_add_host(graph, _handles(deps, n, call), run, kept)


@_output_first
def cuGraphAddEmptyNode(p: int, graph: int, deps: int, n: int) -> None:
    _U64.from_address(p).value = backend().graph_add_empty(
        graph, _handles(deps, n, "cuGraphAddEmptyNode"))


@_output_first
def cuGraphAddChildGraphNode(p: int, graph: int, deps: int, n: int, child: int) -> None:
    _U64.from_address(p).value = backend().graph_add_child(
        graph, _handles(deps, n, "cuGraphAddChildGraphNode"), child)


@_output_first
def cuGraphAddEventRecordNode(p: int, graph: int, deps: int, n: int, event: int) -> None:
    _U64.from_address(p).value = backend().graph_add_event(
        graph, _handles(deps, n, "cuGraphAddEventRecordNode"), event, True)


@_output_first
def cuGraphAddEventWaitNode(p: int, graph: int, deps: int, n: int, event: int) -> None:
    _U64.from_address(p).value = backend().graph_add_event(
        graph, _handles(deps, n, "cuGraphAddEventWaitNode"), event, False)


def _mem_alloc(call: str, p: int, graph: int, deps: list[int], params: int) -> None:
    if not params:
        raise CudaError(_INVALID_VALUE, call, "(NULL nodeParams)")
    m = _MemAllocParams.from_address(params)
    if m.allocType != 1 or m.locType != 1:  # PINNED, on a DEVICE
        raise CudaError(_INVALID_VALUE, call, f"allocation type {m.allocType} at location type "
                                              f"{m.locType} (device memory is simulated)")
    if m.bytesize == 0:
        raise CudaError(_INVALID_VALUE, call, "bytesize 0")
    size = m.bytesize
    ptr = _add_built(call, p, graph, deps, "mem_alloc",
                     lambda stream: backend().mem_alloc_async(size, stream), None)
    m.dptr = ptr
    kept = _MemAllocParams.from_buffer_copy(m)
    kept.accessDescs, kept.accessDescCount = None, 0
    backend()._node(_U64.from_address(p).value, call).params = kept


@_output_first
def cuGraphAddMemAllocNode(p: int, graph: int, deps: int, n: int, params: int) -> None:
    call = "cuGraphAddMemAllocNode"
    _mem_alloc(call, p, graph, _handles(deps, n, call), params)


def _mem_free(call: str, p: int, graph: int, deps: list[int], dptr: int) -> None:
    _add_built(call, p, graph, deps, "mem_free",
               lambda stream: backend().mem_free_async(dptr, stream), dptr)


@_output_first
def cuGraphAddMemFreeNode(p: int, graph: int, deps: int, n: int, dptr: int) -> None:
    call = "cuGraphAddMemFreeNode"
    _mem_free(call, p, graph, _handles(deps, n, call), dptr)


# ----------------------------------------------------------- conditional
@_output_first
def cuGraphConditionalHandleCreate(p: int, graph: int, ctx: int, default: int, flags: int) -> None:
    _U64.from_address(p).value = backend().cond_handle_create(graph, default, flags)


def _add_node(call: str, p: int, graph: int, deps: list[int], params: int) -> None:
    if not params:
        raise CudaError(_INVALID_VALUE, call, "(NULL nodeParams)")
    kind = _TYPE_NAMES.get(_I32.from_address(params).value)
    u = params + _NODE_PARAMS_UNION
    b = backend()
    if kind == "kernel":
        build, kept = _kernel(call, u, False)
        _add_built(call, p, graph, deps, "kernel", build, kept)
    elif kind == "memcpy":  # CUDA_MEMCPY_NODE_PARAMS: flags, reserved, copyCtx, copyParams
        build, kept = _memcpy(call, u + 16)
        _add_built(call, p, graph, deps, "memcpy", build, kept)
    elif kind == "memset":
        build, kept = _memset(call, u)
        _add_built(call, p, graph, deps, "memset", build, kept)
    elif kind == "host":
        run, kept = _host(call, u, False)
        _U64.from_address(p).value = b.graph_add_host(graph, deps, run, kept)
    elif kind == "graph":  # CUDA_CHILD_GRAPH_NODE_PARAMS: graph, ownership (0 clone, 1 move)
        own = _I32.from_address(u + 8).value
        if own not in (0, 1):
            raise CudaError(_INVALID_VALUE, call, f"child graph ownership {own}")
        _U64.from_address(p).value = b.graph_add_child(graph, deps, _U64.from_address(u).value,
                                                       move=own == 1)
    elif kind == "empty":
        _U64.from_address(p).value = b.graph_add_empty(graph, deps)
    elif kind in ("wait_event", "event_record"):
        _U64.from_address(p).value = b.graph_add_event(graph, deps, _U64.from_address(u).value,
                                                       kind == "event_record")
    elif kind == "mem_alloc":
        _mem_alloc(call, p, graph, deps, u)
    elif kind == "mem_free":
        _mem_free(call, p, graph, deps, _U64.from_address(u).value)
    elif kind == "conditional":  # handle, type, size, phGraph_out, ctx
        handle = _U64.from_address(u).value
        ctype, size = _I32.from_address(u + 8).value, _U32.from_address(u + 12).value
        node, bodies = b.graph_add_conditional(graph, deps, handle, ctype, size)
        _U64.from_address(p).value = node
        # cuda.h: phGraph_out is a "CUDA-owned array populated with conditional node child
        # graphs during creation of the node": the driver's array, kept with the node
        arr = (_U64 * len(bodies))(*bodies)
        b._node(node, call).params = (*b._node(node, call).params, arr)
        _U64.from_address(u + 16).value = ctypes.addressof(arr)
    else:
        raise CudaError(_NOT_SUPPORTED if kind is None else _INVALID_VALUE, call,
                        f"node type {_I32.from_address(params).value} is not simulated")


@_output_first
def cuGraphAddNode(p: int, graph: int, deps: int, n: int, params: int) -> None:
    _add_node("cuGraphAddNode", p, graph, _handles(deps, n, "cuGraphAddNode"), params)


@_output_first
def cuGraphAddNode_v2(p: int, graph: int, deps: int, edges: int, n: int, params: int) -> None:
    _edges_default(edges, n, "cuGraphAddNode")
    _add_node("cuGraphAddNode", p, graph, _handles(deps, n, "cuGraphAddNode"), params)


# --------------------------------------------------------- get/set params
def _kept(node: int, call: str, ntype: str) -> Any:
    b = backend()
    if b.node_type(node) != ntype:
        raise CudaError(_INVALID_VALUE, call, f"node 0x{node:x} is a {b.node_type(node)} node")
    return b.node_params(node, call)


def _kernel_get(call: str, node: int, p: int, v1: bool) -> None:
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL nodeParams)")
    params = _kept(node, call, "kernel")
    if params[0] == "launch":  # a captured launch: the driver's copy of it, made once
        _, func, grid, block, shared, values = params
        bufs = [ctypes.create_string_buffer(bytes(v), ctypes.sizeof(v)) for v in values]
        argv = (_P * max(1, len(bufs)))(*[ctypes.addressof(b) for b in bufs])
        kp = _KernelParams(func, *grid, *block, shared, ctypes.addressof(argv) if bufs else None,
                           None, None, None)
        params = (kp, argv, bufs)
        backend()._node(node, call).params = params
    kept = params[0]
    ctypes.memmove(p, ctypes.addressof(kept), _KERNEL_V1_SIZE if v1 else ctypes.sizeof(kept))


def cuGraphKernelNodeGetParams(node: int, p: int) -> None:
    _kernel_get("cuGraphKernelNodeGetParams", node, p, True)


def cuGraphKernelNodeGetParams_v2(node: int, p: int) -> None:
    _kernel_get("cuGraphKernelNodeGetParams", node, p, False)


def _kernel_set(call: str, node: int, p: int, v1: bool) -> None:
    build, kept = _kernel(call, p, v1)
    backend().node_rebuild(node, build, kept, "kernel", call)


def cuGraphKernelNodeSetParams(node: int, p: int) -> None:
    _kernel_set("cuGraphKernelNodeSetParams", node, p, True)


def cuGraphKernelNodeSetParams_v2(node: int, p: int) -> None:
    _kernel_set("cuGraphKernelNodeSetParams", node, p, False)


def cuGraphMemsetNodeGetParams(node: int, p: int) -> None:
    call = "cuGraphMemsetNodeGetParams"
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL nodeParams)")
    ctypes.memmove(p, ctypes.addressof(_kept(node, call, "memset")), _MEMSET_V1_SIZE)


def cuGraphMemsetNodeSetParams(node: int, p: int) -> None:
    call = "cuGraphMemsetNodeSetParams"
    build, kept = _memset(call, p)
    backend().node_rebuild(node, build, kept, "memset", call)


def cuGraphMemcpyNodeGetParams(node: int, p: int) -> None:
    call = "cuGraphMemcpyNodeGetParams"
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL nodeParams)")
    kept = _kept(node, call, "memcpy")
    ctypes.memmove(p, ctypes.addressof(kept), ctypes.sizeof(kept))


def cuGraphMemcpyNodeSetParams(node: int, p: int) -> None:
    call = "cuGraphMemcpyNodeSetParams"
    build, kept = _memcpy(call, p)
    backend().node_rebuild(node, build, kept, "memcpy", call)


def cuGraphHostNodeGetParams(node: int, p: int) -> None:
    call = "cuGraphHostNodeGetParams"
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL nodeParams)")
    ctypes.memmove(p, ctypes.addressof(_kept(node, call, "host")), _HOST_V1_SIZE)


def cuGraphHostNodeSetParams(node: int, p: int) -> None:
    call = "cuGraphHostNodeSetParams"
    run, kept = _host(call, p, True)
    b = backend()
    n = b._node(node, call)
    if n.ntype != "host":
        raise CudaError(_INVALID_VALUE, call, f"node 0x{node:x} is a {n.ntype} node")
    n.fn, n.params = run, kept


def cuGraphMemAllocNodeGetParams(node: int, p: int) -> None:
    call = "cuGraphMemAllocNodeGetParams"
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL params_out)")
    kept = _kept(node, call, "mem_alloc")
    ctypes.memmove(p, ctypes.addressof(kept), ctypes.sizeof(kept))


def cuGraphMemFreeNodeGetParams(node: int, p: int) -> None:
    _out("cuGraphMemFreeNodeGetParams", p, _U64, _kept(node, "cuGraphMemFreeNodeGetParams",
                                                         "mem_free"))


def cuGraphChildGraphNodeGetGraph(node: int, p: int) -> None:
    _out("cuGraphChildGraphNodeGetGraph", p, _U64, backend().node_child_graph(node))


def _event_get(call: str, node: int, p: int, ntype: str) -> None:
    b = backend()
    if b.node_type(node) != ntype:
        raise CudaError(_INVALID_VALUE, call, f"node 0x{node:x} is a {b.node_type(node)} node")
    _out(call, p, _U64, b.node_event(node))


def cuGraphEventRecordNodeGetEvent(node: int, p: int) -> None:
    _event_get("cuGraphEventRecordNodeGetEvent", node, p, "event_record")


def cuGraphEventWaitNodeGetEvent(node: int, p: int) -> None:
    _event_get("cuGraphEventWaitNodeGetEvent", node, p, "wait_event")


def cuGraphEventRecordNodeSetEvent(node: int, event: int) -> None:
    backend().node_set_event(node, event)


def cuGraphEventWaitNodeSetEvent(node: int, event: int) -> None:
    backend().node_set_event(node, event)


def cuGraphNodeGetParams(node: int, p: int) -> None:
    """``CUgraphNodeParams`` of a node: its type and the parameters of that type."""
    call = "cuGraphNodeGetParams"
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL nodeParams)")
    b = backend()
    kind = b.node_type(node)
    ctypes.memset(p, 0, 256)
    _I32.from_address(p).value = NODE_TYPES[kind]
    u = p + _NODE_PARAMS_UNION
    if kind == "kernel":
        _kernel_get(call, node, u, False)
    elif kind == "memset":
        ctypes.memmove(u, ctypes.addressof(_kept(node, call, "memset")), _MEMSET_V1_SIZE)
    elif kind == "memcpy":
        kept = _kept(node, call, "memcpy")
        ctypes.memmove(u + 16, ctypes.addressof(kept), ctypes.sizeof(kept))
    elif kind == "host":
        ctypes.memmove(u, ctypes.addressof(_kept(node, call, "host")), _HOST_V1_SIZE)
    elif kind == "graph":
        _U64.from_address(u).value = b.node_child_graph(node)
    elif kind in ("wait_event", "event_record"):
        _U64.from_address(u).value = b.node_event(node)
    elif kind == "mem_alloc":
        kept = _kept(node, call, "mem_alloc")
        ctypes.memmove(u, ctypes.addressof(kept), ctypes.sizeof(kept))
    elif kind == "mem_free":
        _U64.from_address(u).value = _kept(node, call, "mem_free")
    elif kind == "conditional":
        handle, ckind, arr = b._node(node, call).params
        _U64.from_address(u).value = handle.address
        _I32.from_address(u + 8).value = ("if", "while", "switch").index(ckind)
        _U32.from_address(u + 12).value = len(b._node(node, call).body)
        _U64.from_address(u + 16).value = ctypes.addressof(arr)


def _node_set(call: str, node: int, p: int, graph_exec: int = 0) -> None:
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL nodeParams)")
    kind = _TYPE_NAMES.get(_I32.from_address(p).value)
    u = p + _NODE_PARAMS_UNION
    b = backend()
    decode = {"kernel": lambda: _kernel(call, u, False), "memset": lambda: _memset(call, u),
              "memcpy": lambda: _memcpy(call, u + 16)}.get(kind or "")
    if decode is not None and kind is not None:
        build, kept = decode()
        if graph_exec:
            b.exec_node_rebuild(graph_exec, node, build, kept, kind, call)
        else:
            b.node_rebuild(node, build, kept, kind, call)
    elif kind in ("wait_event", "event_record"):
        if graph_exec:
            b.exec_node_set_event(graph_exec, node, _U64.from_address(u).value, call)
        else:
            b.node_set_event(node, _U64.from_address(u).value)
    elif kind == "host" and not graph_exec:
        run, kept = _host(call, u, False)
        n = b._node(node, call)
        n.fn, n.params = run, kept
    else:
        raise CudaError(_NOT_SUPPORTED, call, f"setting the parameters of a {kind} node is not "
                                              "simulated")


def cuGraphNodeSetParams(node: int, p: int) -> None:
    _node_set("cuGraphNodeSetParams", node, p)


def cuGraphExecNodeSetParams(graph_exec: int, node: int, p: int) -> None:
    _node_set("cuGraphExecNodeSetParams", node, p, graph_exec)


def cuGraphExecKernelNodeSetParams_v2(graph_exec: int, node: int, p: int) -> None:
    call = "cuGraphExecKernelNodeSetParams"
    build, kept = _kernel(call, p, False)
    backend().exec_node_rebuild(graph_exec, node, build, kept, "kernel", call)


def cuGraphExecMemsetNodeSetParams(graph_exec: int, node: int, p: int, ctx: int) -> None:
    call = "cuGraphExecMemsetNodeSetParams"
    build, kept = _memset(call, p)
    backend().exec_node_rebuild(graph_exec, node, build, kept, "memset", call)


def cuGraphExecMemcpyNodeSetParams(graph_exec: int, node: int, p: int, ctx: int) -> None:
    call = "cuGraphExecMemcpyNodeSetParams"
    build, kept = _memcpy(call, p)
    backend().exec_node_rebuild(graph_exec, node, build, kept, "memcpy", call)


def cuGraphExecEventRecordNodeSetEvent(graph_exec: int, node: int, event: int) -> None:
    backend().exec_node_set_event(graph_exec, node, event, "cuGraphExecEventRecordNodeSetEvent")


def cuGraphExecEventWaitNodeSetEvent(graph_exec: int, node: int, event: int) -> None:
    backend().exec_node_set_event(graph_exec, node, event, "cuGraphExecEventWaitNodeSetEvent")


def cuGraphExecUpdate_v2(graph_exec: int, graph: int, info: int) -> None:
    """``CUgraphExecUpdateResultInfo``: result (int) at 0, errorNode at 8, errorFromNode at 16."""
    call = "cuGraphExecUpdate"
    if not info:
        raise CudaError(_INVALID_VALUE, call, "(NULL resultInfo)")
    result, node = backend().graph_exec_update(graph_exec, graph)
    _I32.from_address(info).value = _UPDATE[result]
    _U64.from_address(info + 8).value = node
    _U64.from_address(info + 16).value = 0
    if result != "success":
        raise CudaError(910, call, f"{result} (node 0x{node:x})")  # CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE


# ------------------------------------------------------- capture to graph
def cuStreamBeginCaptureToGraph(stream: int, graph: int, deps: int, edges: int, n: int, mode: int,
                                ptsz: bool = False) -> None:
    from ._graph_calls import _mode
    call = "cuStreamBeginCaptureToGraph"
    _edges_default(edges, n, call)
    backend().stream_begin_capture(_stream(stream, ptsz), _mode(call, mode), graph,
                                   _handles(deps, n, call))


def _update_deps(call: str, stream: int, deps: int, n: int, flags: int, ptsz: bool) -> None:
    if flags not in (0, 1):  # CU_STREAM_ADD_CAPTURE_DEPENDENCIES, CU_STREAM_SET_CAPTURE_DEPENDENCIES
        raise CudaError(_INVALID_VALUE, call, f"flags {flags}")
    backend().stream_update_capture_dependencies(_stream(stream, ptsz), _handles(deps, n, call),
                                                 replace=flags == 1)


def cuStreamUpdateCaptureDependencies(stream: int, deps: int, n: int, flags: int,
                                      ptsz: bool = False) -> None:
    _update_deps("cuStreamUpdateCaptureDependencies", stream, deps, n, flags, ptsz)


def cuStreamUpdateCaptureDependencies_v2(stream: int, deps: int, edges: int, n: int, flags: int,
                                         ptsz: bool = False) -> None:
    _edges_default(edges, n, "cuStreamUpdateCaptureDependencies")
    _update_deps("cuStreamUpdateCaptureDependencies", stream, deps, n, flags, ptsz)


# ------------------------------------------------------- graph memory
#: ``CUgraphMem_attribute``: used current/high, reserved current/high.
_GRAPH_MEM_ATTRS = 4


def cuDeviceGetGraphMemAttribute(device: int, attr: int, p: int) -> None:
    call = "cuDeviceGetGraphMemAttribute"
    from ._support import _device
    d = _device(call, device)
    if not 0 <= attr < _GRAPH_MEM_ATTRS:
        raise CudaError(_INVALID_VALUE, call, f"attribute {attr}")
    used, high = backend().graph_mem_usage(d)
    _out(call, p, _U64, high if attr % 2 else used)


def cuDeviceSetGraphMemAttribute(device: int, attr: int, p: int) -> None:
    call = "cuDeviceSetGraphMemAttribute"
    from ._support import _device
    d = _device(call, device)
    if attr not in (1, 3) or not p or _U64.from_address(p).value != 0:
        raise CudaError(_INVALID_VALUE, call, "only the high watermarks may be set, to 0")
    backend().graph_mem_reset_high(d)


def cuDeviceGraphMemTrim(device: int) -> None:
    from ._support import _device
    _device("cuDeviceGraphMemTrim", device)
