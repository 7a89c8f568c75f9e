"""The stand-in driver's capture and graph calls, served by the simulator.

One concern: the driver forms of stream capture and graphs (named after the
forms: ``cuStreamBeginCapture_v2``, ``cuStreamGetCaptureInfo_v3`` ...), as
``_*_calls.py`` serve the others; the rules live in the simulator
(``sim/_capture.py``, ``sim/_graph.py``).  ``_ptsz`` forms reuse the plain
function with ``ptsz=True``.

User objects (``cuUserObjectCreate`` ...: cuda.core keeps its graphs'
Python owners alive with them) are the simulator's (``sim/_userobj.py``);
their destructors are called through the C function pointer, on a driver
thread.

``cuStreamGetCaptureInfo`` answers the status, the capture id, the graph
being built and the set of nodes the next captured work will depend on
(``cuStreamUpdateCaptureDependencies`` changes it: ``_graph_node_calls.py``);
edge data is reported as default edges.
"""

from __future__ import annotations

import ctypes
import threading

from gpuarray._driver._base import CAPTURE_MODES, CAPTURE_STATUSES
from gpuarray.errors import CudaError

from ._support import (
    _I32,
    _INVALID_VALUE,
    _SIZE,
    _U64,
    _out,
    _output_first,
    _signed,
    _stream,
    backend,
)

#: The dependency arrays ``cuStreamGetCaptureInfo`` last handed each thread.
_tls_arrays = threading.local()

#: ``CUDA_GRAPH_INSTANTIATE_FLAG_*`` of cuda.h: AUTO_FREE_ON_LAUNCH, UPLOAD, DEVICE_LAUNCH,
#: USE_NODE_PRIORITY.
_AUTO_FREE, _UPLOAD, _DEVICE_LAUNCH, _NODE_PRIORITY = 1, 2, 4, 8
#: ``CUgraphInstantiateResult`` of cuda.h: CUDA_GRAPH_INSTANTIATE_SUCCESS, _ERROR.
_INSTANTIATE_SUCCESS, _INSTANTIATE_ERROR = 0, 1


def _mode(call: str, value: int) -> str:
    m = _signed(value)
    if not 0 <= m < len(CAPTURE_MODES):
        raise CudaError(_INVALID_VALUE, call, f"capture mode {m}")
    return CAPTURE_MODES[m]


def cuStreamBeginCapture_v2(stream: int, mode: int, ptsz: bool = False) -> None:
    backend().stream_begin_capture(_stream(stream, ptsz), _mode("cuStreamBeginCapture", mode))


@_output_first
def cuStreamEndCapture(stream: int, p: int, ptsz: bool = False) -> None:
    _U64.from_address(p).value = 0  # a NULL graph unless it ends well, as CUDA documents
    _out("cuStreamEndCapture", p, _U64, backend().stream_end_capture(_stream(stream, ptsz)))


def cuStreamIsCapturing(stream: int, p: int, ptsz: bool = False) -> None:
    if not p:
        raise CudaError(_INVALID_VALUE, "cuStreamIsCapturing", "(NULL output pointer)")
    status = backend().stream_is_capturing(_stream(stream, ptsz))
    _out("cuStreamIsCapturing", p, _I32, CAPTURE_STATUSES.index(status))


def _capture_info(call: str, stream: int, pstatus: int, pid: int, pgraph: int, pdeps: int,
                  pedges: int, pcount: int, ptsz: bool) -> None:
    if not pstatus:
        raise CudaError(_INVALID_VALUE, call, "(NULL captureStatus_out)")
    if pedges and not pdeps:
        raise CudaError(_INVALID_VALUE, call, "(edgeData_out without dependencies_out)")
    b = backend()
    s = _stream(stream, ptsz)
    status, cid = b.stream_capture_info(s)
    _I32.from_address(pstatus).value = CAPTURE_STATUSES.index(status)
    if status != "active":
        return
    if pid:
        _U64.from_address(pid).value = cid
    if pgraph:
        _U64.from_address(pgraph).value = b.capture_graph(s)
    deps = b.capture_dependencies(s)
    # cuda.h: the arrays "may be invalidated by the next API call to the stream": each
    # thread's last ones are kept
    arr = (_U64 * max(1, len(deps)))(*deps)
    edges = (ctypes.c_uint64 * max(1, len(deps)))()
    _tls_arrays.keep = (arr, edges)
    if pdeps:
        _U64.from_address(pdeps).value = ctypes.addressof(arr) if deps else 0
    if pedges:
        _U64.from_address(pedges).value = ctypes.addressof(edges) if deps else 0
    if pcount:
        _SIZE.from_address(pcount).value = len(deps)


def cuStreamGetCaptureInfo_v2(stream: int, pstatus: int, pid: int, pgraph: int, pdeps: int,
                              pcount: int, ptsz: bool = False) -> None:
    _capture_info("cuStreamGetCaptureInfo", stream, pstatus, pid, pgraph, pdeps, 0, pcount, ptsz)


def cuStreamGetCaptureInfo_v3(stream: int, pstatus: int, pid: int, pgraph: int, pdeps: int,
                              pedges: int, pcount: int, ptsz: bool = False) -> None:
    _capture_info("cuStreamGetCaptureInfo", stream, pstatus, pid, pgraph, pdeps, pedges, pcount, ptsz)


def cuThreadExchangeStreamCaptureMode(p: int) -> None:
    call = "cuThreadExchangeStreamCaptureMode"
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL mode)")
    prev = backend().exchange_capture_mode(_mode(call, _I32.from_address(p).value))
    _I32.from_address(p).value = CAPTURE_MODES.index(prev)


def _instantiate(call: str, p: int, graph: int, flags: int, with_params: bool) -> int:
    if flags & ~(_AUTO_FREE | _UPLOAD | _DEVICE_LAUNCH | _NODE_PRIORITY):
        raise CudaError(_INVALID_VALUE, call, f"flags {flags:#x}")
    if flags & _UPLOAD and not with_params:  # cuda.h: "Only supported by cuGraphInstantiateWithParams"
        raise CudaError(_INVALID_VALUE, call, "CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD needs "
                                              "cuGraphInstantiateWithParams (its upload stream)")
    if flags & _DEVICE_LAUNCH:  # device launch is not simulated (and excludes auto-free)
        raise CudaError(_INVALID_VALUE, call, "CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH is "
                                              "not simulated")
    graph_exec = backend().graph_instantiate(graph, bool(flags & _AUTO_FREE))
    _U64.from_address(p).value = graph_exec
    return graph_exec


@_output_first
def cuGraphInstantiateWithFlags(p: int, graph: int, flags: int) -> None:
    _instantiate("cuGraphInstantiateWithFlags", p, graph, flags, False)


@_output_first
def cuGraphInstantiateWithParams(p: int, graph: int, params: int, ptsz: bool = False) -> None:
    """``CUDA_GRAPH_INSTANTIATE_PARAMS`` (cuda.h): ``cuuint64_t flags`` at 0, ``CUstream
    hUploadStream`` at 8, ``CUgraphNode hErrNode_out`` at 16, ``CUgraphInstantiateResult
    result_out`` at 24 (the struct is 32 bytes)."""
    call = "cuGraphInstantiateWithParams"
    if not params:
        raise CudaError(_INVALID_VALUE, call, "(NULL instantiateParams)")
    flags = _U64.from_address(params).value
    upload = _U64.from_address(params + 8).value
    _U64.from_address(params + 16).value = 0  # no node to blame: the simulator names none
    result = _I32.from_address(params + 24)
    result.value = _INSTANTIATE_ERROR  # "described in the return value of the function"
    graph_exec = _instantiate(call, p, graph, flags, True)
    if flags & _UPLOAD:
        try:
            backend().graph_upload(graph_exec, _stream(upload, ptsz))
        except BaseException:
            _U64.from_address(p).value = 0
            backend().graph_exec_destroy(graph_exec)
            raise
    result.value = _INSTANTIATE_SUCCESS


def cuGraphLaunch(graph_exec: int, stream: int, ptsz: bool = False) -> None:
    backend().graph_launch(graph_exec, _stream(stream, ptsz))


def cuGraphUpload(graph_exec: int, stream: int, ptsz: bool = False) -> None:
    backend().graph_upload(graph_exec, _stream(stream, ptsz))


def cuGraphExecDestroy(graph_exec: int) -> None:
    backend().graph_exec_destroy(graph_exec)


def cuGraphDestroy(graph: int) -> None:
    backend().graph_destroy(graph)


# ------------------------------------------------------------- user objects
#: ``CUhostFn``: the destructor of a user object, called with its pointer.
_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
#: ``CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`` and ``CU_GRAPH_USER_OBJECT_MOVE`` of cuda.h.
_NO_DESTRUCTOR_SYNC, _USER_OBJECT_MOVE = 1, 1


@_output_first
def cuUserObjectCreate(p: int, ptr: int, destroy: int, refs: int, flags: int) -> None:
    call = "cuUserObjectCreate"
    if not destroy:
        raise CudaError(_INVALID_VALUE, call, "(NULL destroy callback)")
    if flags != _NO_DESTRUCTOR_SYNC:  # cuda.h: "it is required to pass" it
        raise CudaError(_INVALID_VALUE, call, f"flags {flags} (must be "
                                              "CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)")
    cfn = _HOST_FN(destroy)
    _out(call, p, _U64, backend().user_object_create(lambda: cfn(ptr), refs))


def cuUserObjectRetain(obj: int, count: int) -> None:
    backend().user_object_retain(obj, count)


def cuUserObjectRelease(obj: int, count: int) -> None:
    backend().user_object_release(obj, count)


def cuGraphRetainUserObject(graph: int, obj: int, count: int, flags: int) -> None:
    if flags & ~_USER_OBJECT_MOVE:
        raise CudaError(_INVALID_VALUE, "cuGraphRetainUserObject", f"flags {flags}")
    backend().graph_retain_user_object(graph, obj, count, bool(flags & _USER_OBJECT_MOVE))


def cuGraphReleaseUserObject(graph: int, obj: int, count: int) -> None:
    backend().graph_release_user_object(graph, obj, count)
