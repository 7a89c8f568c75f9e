"""The stand-in driver's context calls: the current context, its stack, created contexts.

One concern: the driver forms about contexts -- ``cuCtxSetCurrent``/
``GetCurrent``, the per-thread stack (``cuCtxPushCurrent_v2``,
``cuCtxPopCurrent_v2``), ``cuCtxCreate`` in the forms the bindings ask for
(``_v2`` of CUDA 3.2, ``_v3`` of 11.4 with execution-affinity parameters,
``_v4`` of 12.5 with ``CUctxCreateParams``) and ``cuCtxDestroy_v2``,
synchronisation, peer access and the context queries (device, flags, API
version, id, stream priority range, limits, cache configuration).  The
stack rules are the simulator's (``sim/_context_calls.py``).
"""

from __future__ import annotations

import ctypes

from ...errors import CudaError
from ._support import (
    _I32,
    _INVALID_VALUE,
    _SIZE,
    _U32,
    _U64,
    _out,
    _output_first,
    _signed,
    _with_ctx,
    backend,
)

_API_VERSION = 3020  # cuCtxGetApiVersion: contexts of cuCtxCreate_v2 and later
_UNSUPPORTED_LIMIT = 215


def cuCtxSetCurrent(ctx: int) -> None:
    backend().ctx_set_current(ctx)


def cuCtxGetCurrent(p: int) -> None:
    _out("cuCtxGetCurrent", p, _U64, backend().ctx_get_current())


def cuCtxPushCurrent_v2(ctx: int) -> None:
    backend().ctx_push_current(ctx)


def cuCtxPopCurrent_v2(p: int) -> None:
    h = backend().ctx_pop_current()
    if p:  # cuda.h: pctx may be NULL
        _U64.from_address(p).value = h


@_output_first
def cuCtxCreate_v2(p: int, flags: int, dev: int) -> None:
    _out("cuCtxCreate", p, _U64, backend().ctx_create(_signed(dev), flags))


@_output_first
def cuCtxCreate_v3(p: int, params: int, n: int, flags: int, dev: int) -> None:
    if _signed(n) < 0 or (n and not params):
        raise CudaError(_INVALID_VALUE, "cuCtxCreate", f"({n} execution-affinity parameters at "
                                                       f"{params:#x})")
    if n:  # CU_EXEC_AFFINITY_TYPE_SM_COUNT: MPS/green-context partitions are not simulated
        raise CudaError(801, "cuCtxCreate", "(execution-affinity parameters are not simulated)")
    cuCtxCreate_v2(p, flags, dev)


class _CtxCreateParams(ctypes.Structure):
    """``CUctxCreateParams`` of cuda.h (12.5+)."""

    _fields_ = [("execAffinityParams", ctypes.c_void_p), ("numExecAffinityParams", ctypes.c_int),
                ("cigParams", ctypes.c_void_p)]


@_output_first
def cuCtxCreate_v4(p: int, params: int, flags: int, dev: int) -> None:
    if params:
        c = _CtxCreateParams.from_address(params)
        if c.numExecAffinityParams or c.cigParams:
            raise CudaError(801, "cuCtxCreate", "(execution-affinity and CIG parameters are not "
                                                "simulated)")
    cuCtxCreate_v2(p, flags, dev)


def cuCtxDestroy_v2(ctx: int) -> None:
    backend().ctx_destroy(ctx)


def cuCtxGetDevice(p: int) -> None:
    _out("cuCtxGetDevice", p, _I32, backend().ctx_get_device())


def cuCtxGetDevice_v2(p: int, ctx: int) -> None:
    _out("cuCtxGetDevice", p, _I32, _with_ctx(ctx, backend().ctx_get_device))


def cuCtxGetFlags(p: int) -> None:
    backend().ctx_get_device()  # INVALID_CONTEXT without one
    _out("cuCtxGetFlags", p, _U32, 0)


def cuCtxGetApiVersion(ctx: int, p: int) -> None:
    _with_ctx(ctx, backend().ctx_get_device)
    _out("cuCtxGetApiVersion", p, _U32, _API_VERSION)


def cuCtxGetId(ctx: int, p: int) -> None:
    h = ctx or backend().ctx_get_current()
    _with_ctx(h, backend().ctx_get_device)  # INVALID_CONTEXT for a destroyed one
    _out("cuCtxGetId", p, _U64, h)


def cuCtxGetStreamPriorityRange(pleast: int, pgreatest: int) -> None:
    least, greatest = backend().ctx_stream_priority_range()
    if pleast:  # cuda.h: either pointer may be NULL
        _I32.from_address(pleast).value = least
    if pgreatest:
        _I32.from_address(pgreatest).value = greatest


#: cuCtxGetLimit values: stack size, printf FIFO, malloc heap, sync depth, pending launches,
#: max L2 fetch granularity, persisting L2 size (an H100's defaults).
_LIMITS = {0: 1024, 1: 1 << 20, 2: 8 << 20, 3: 2, 4: 2048, 5: 128, 6: 0}


def cuCtxGetLimit(p: int, limit: int) -> None:
    backend().ctx_get_device()
    v = _LIMITS.get(_signed(limit))
    if v is None:
        raise CudaError(_UNSUPPORTED_LIMIT, "cuCtxGetLimit", f"limit {_signed(limit)}")
    _out("cuCtxGetLimit", p, _SIZE, v)


def cuCtxGetCacheConfig(p: int) -> None:
    backend().ctx_get_device()
    _out("cuCtxGetCacheConfig", p, _U32, 0)  # CU_FUNC_CACHE_PREFER_NONE


def cuCtxSetCacheConfig(config: int) -> None:
    backend().ctx_get_device()
    if config > 3:
        raise CudaError(_INVALID_VALUE, "cuCtxSetCacheConfig", f"config {config}")


def cuCtxSynchronize() -> None:
    backend().ctx_synchronize()


def cuCtxSynchronize_v2(ctx: int) -> None:
    _with_ctx(ctx, backend().ctx_synchronize)


def cuCtxEnablePeerAccess(ctx: int, flags: int) -> None:
    if flags:
        raise CudaError(_INVALID_VALUE, "cuCtxEnablePeerAccess", f"flags {flags} (must be 0)")
    backend().ctx_enable_peer_access(ctx)
