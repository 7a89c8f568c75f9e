"""The stand-in driver's stream, event and host-callback calls.

One concern: the ``cuStream*`` and ``cuEvent*`` driver forms,
``cuStreamAddCallback`` and ``cuLaunchHostFunc`` on the simulator's
scheduler.  A stream's creation flags and priority (clamped to ``cuCtxGetStreamPriorityRange``, as CUDA
does) are kept here for ``cuStreamGetFlags``/``cuStreamGetPriority``; a
destroyed or unknown stream is ``CUDA_ERROR_INVALID_HANDLE``.
"""

from __future__ import annotations

import ctypes

from gpuarray.errors import CudaError

from .._codes import NOT_READY as _NOT_READY
from ._support import (
    _I32,
    _INVALID_VALUE,
    _U32,
    _U64,
    _out,
    _output_first,
    _signed,
    _stream,
    backend,
)

#: flags and priority of each stream made here, by handle.
_STREAMS: dict[int, tuple[int, int]] = {}


@_output_first
def cuStreamCreateWithPriority(p: int, flags: int, priority: int) -> None:
    if flags & ~1:
        raise CudaError(_INVALID_VALUE, "cuStreamCreateWithPriority", f"flags {flags:#x}")
    b = backend()
    least, greatest = b.ctx_stream_priority_range()
    prio = min(max(_signed(priority), greatest), least)  # CUDA clamps to the range
    h = b.stream_create(non_blocking=bool(flags & 1), priority=prio)
    _STREAMS[h] = (flags, prio)
    _out("cuStreamCreateWithPriority", p, _U64, h)


@_output_first
def cuStreamCreate(p: int, flags: int) -> None:
    if flags & ~1:
        raise CudaError(_INVALID_VALUE, "cuStreamCreate", f"flags {flags:#x}")
    cuStreamCreateWithPriority(p, flags, 0)


def cuStreamDestroy_v2(stream: int) -> None:
    backend().stream_destroy(stream)
    _STREAMS.pop(stream, None)


def _info(call: str, stream: int, ptsz: bool) -> tuple[int, int]:
    backend().stream_get_ctx(_stream(stream, ptsz))  # INVALID_HANDLE when destroyed
    return _STREAMS.get(stream, (0, 0))


def cuStreamGetPriority(stream: int, p: int, ptsz: bool = False) -> None:
    _out("cuStreamGetPriority", p, _I32, _info("cuStreamGetPriority", stream, ptsz)[1])


def cuStreamGetFlags(stream: int, p: int, ptsz: bool = False) -> None:
    _out("cuStreamGetFlags", p, _U32, _info("cuStreamGetFlags", stream, ptsz)[0])


def cuStreamGetId(stream: int, p: int, ptsz: bool = False) -> None:
    _info("cuStreamGetId", stream, ptsz)
    _out("cuStreamGetId", p, _U64, _stream(stream, ptsz))


def cuStreamQuery(stream: int, ptsz: bool = False) -> None:
    if not backend().stream_query(_stream(stream, ptsz)):
        raise CudaError(_NOT_READY, "cuStreamQuery")


def cuStreamSynchronize(stream: int, ptsz: bool = False) -> None:
    backend().stream_synchronize(_stream(stream, ptsz))


def cuStreamWaitEvent(stream: int, event: int, flags: int, ptsz: bool = False) -> None:
    if flags & ~1:  # CU_EVENT_WAIT_DEFAULT / CU_EVENT_WAIT_EXTERNAL
        raise CudaError(_INVALID_VALUE, "cuStreamWaitEvent", f"flags {flags:#x}")
    backend().stream_wait_event(_stream(stream, ptsz), event, external=bool(flags & 1))


def cuStreamGetCtx(stream: int, p: int, ptsz: bool = False) -> None:
    _out("cuStreamGetCtx", p, _U64, backend().stream_get_ctx(_stream(stream, ptsz)))


def cuStreamGetCtx_v2(stream: int, p: int, pgreen: int, ptsz: bool = False) -> None:
    cuStreamGetCtx(stream, p, ptsz)
    if pgreen:
        _U64.from_address(pgreen).value = 0  # no green contexts


_STREAM_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)


def cuStreamAddCallback(stream: int, fn: int, user: int, flags: int, ptsz: bool = False) -> None:
    call = "cuStreamAddCallback"
    if not fn:
        raise CudaError(_INVALID_VALUE, call, "(NULL callback)")
    if flags:
        raise CudaError(_INVALID_VALUE, call, f"flags {flags} (must be 0)")
    cfn = _STREAM_CALLBACK(fn)

    def host_fn(status: int) -> None:
        cfn(stream, status, user)  # CUDA passes the stream as given, the status, userData

    host_fn.__name__ = f"C callback {fn:#x}"
    backend().stream_add_callback(_stream(stream, ptsz), host_fn)


_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def cuLaunchHostFunc(stream: int, fn: int, user: int, ptsz: bool = False) -> None:
    if not fn:
        raise CudaError(_INVALID_VALUE, "cuLaunchHostFunc", "(NULL host function)")
    cfn = _HOST_FN(fn)

    def host_fn() -> None:
        cfn(user)  # CUDA passes userData

    host_fn.__name__ = f"C host function {fn:#x}"
    backend().launch_host_func(_stream(stream, ptsz), host_fn)  # the simulator holds it


@_output_first
def cuEventCreate(p: int, flags: int) -> None:
    if flags & ~7:
        raise CudaError(_INVALID_VALUE, "cuEventCreate", f"flags {flags:#x}")
    if flags & 4 and not flags & 2:
        raise CudaError(_INVALID_VALUE, "cuEventCreate",
                        "CU_EVENT_INTERPROCESS needs CU_EVENT_DISABLE_TIMING")
    h = backend().event_create(timing=not flags & 2, interprocess=bool(flags & 4))
    _out("cuEventCreate", p, _U64, h)


def cuEventDestroy_v2(event: int) -> None:
    backend().event_destroy(event)


def cuEventRecord(event: int, stream: int, ptsz: bool = False) -> None:
    backend().event_record(event, _stream(stream, ptsz))


def cuEventRecordWithFlags(event: int, stream: int, flags: int, ptsz: bool = False) -> None:
    if flags & ~1:  # CU_EVENT_RECORD_DEFAULT / CU_EVENT_RECORD_EXTERNAL
        raise CudaError(_INVALID_VALUE, "cuEventRecordWithFlags", f"flags {flags:#x}")
    cuEventRecord(event, stream, ptsz)


def cuEventQuery(event: int) -> None:
    if not backend().event_query(event):
        raise CudaError(_NOT_READY, "cuEventQuery")


def cuEventSynchronize(event: int) -> None:
    backend().event_synchronize(event)


def cuEventElapsedTime(p: int, start: int, end: int) -> None:
    _out("cuEventElapsedTime", p, ctypes.c_float, backend().event_elapsed_time(start, end))


cuEventElapsedTime_v2 = cuEventElapsedTime


@_output_first
def cuIpcGetEventHandle(p: int, event: int) -> None:
    handle = backend().ipc_get_event_handle(event)
    ctypes.memmove(p, handle, len(handle))


@_output_first
def cuIpcOpenEventHandle(p: int, handle: int) -> None:
    _out("cuIpcOpenEventHandle", p, _U64, backend().ipc_open_event_handle(ctypes.string_at(handle, 64)))
