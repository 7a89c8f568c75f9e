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

from gpuarray.errors import CudaError

from .._codes import UNSUPPORTED_LIMIT as _UNSUPPORTED_LIMIT
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
    forget_limits(ctx)


def cuCtxGetDevice(p: int) -> None:
    _out("cuCtxGetDevice", p, _I32, backend().ctx_get_device())


def cuCtxGetDevice_v2(p: int, ctx: int) -> None:
    _out("cuCtxGetDevice", p, _I32, _with_ctx(ctx, backend().ctx_get_device))


def cuCtxGetFlags(p: int) -> None:
    _out("cuCtxGetFlags", p, _U32, backend().ctx_get_flags())  # INVALID_CONTEXT without one


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


#: ``CUlimit`` of cuda.h 13.0: the default of each (an H100's), by value: stack size, printf
#: FIFO, malloc heap, device-runtime sync depth and pending launches, max L2 fetch
#: granularity, persisting L2 size, CIG shared memory, CIG enabled, CIG shared-memory fallback.
_LIMITS = {0: 1024, 1: 1 << 20, 2: 8 << 20, 3: 2, 4: 2048, 5: 128, 6: 0, 7: 0, 8: 0, 9: 1}
_QUERY_ONLY = (7, 8)  # cuda.h: "Can only be queried, cannot be set"
_SYNC_DEPTH, _L2_FETCH, _PERSISTING_L2, _CIG_SHMEM = 3, 5, 6, 7
#: What cuCtxSetLimit set, by context handle, then limit.
_SET: dict[int, dict[int, int]] = {}


def forget_limits(ctx: int) -> None:
    """What ``cuCtxSetLimit`` set in context ``ctx`` goes (destroyed, or a primary context reset)."""
    _SET.pop(ctx, None)


def _limit(call: str, limit: int) -> int:
    lim = _signed(limit)
    if lim not in _LIMITS:
        raise CudaError(_INVALID_VALUE, call, f"{lim} is not a CUlimit")
    return lim


def cuCtxGetLimit(p: int, limit: int) -> None:
    call = "cuCtxGetLimit"
    lim = _limit(call, limit)
    b = backend()
    dev = b.ctx_get_device()  # INVALID_CONTEXT without a current context
    value = _SET.get(b.ctx_get_current(), {}).get(lim)
    if value is None:
        value = _LIMITS[lim]
        if lim == _CIG_SHMEM:  # not a CIG context: all a block may opt in to
            value = b.device_attribute("max_shared_memory_per_block_optin", dev)
    _out(call, p, _SIZE, value)


def cuCtxSetLimit(limit: int, value: int) -> None:
    call = "cuCtxSetLimit"
    lim = _limit(call, limit)
    b = backend()
    dev = b.ctx_get_device()
    if lim in _QUERY_ONLY:
        raise CudaError(_INVALID_VALUE, call, f"limit {lim} can only be queried (cuda.h)")
    if lim == _SYNC_DEPTH:
        if b.device_attribute("compute_capability_major", dev) >= 9:  # cuda.h: CC < 9.0 only
            raise CudaError(_UNSUPPORTED_LIMIT, call, "CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH is only "
                                                      "applicable to compute capability < 9.0")
        if not 1 <= value <= 24:
            raise CudaError(_INVALID_VALUE, call, f"sync depth {value} (1 to 24)")
    elif lim == _L2_FETCH:
        value = min(value, 128)  # cuda.h: 0 to 128 bytes, "ignored or clamped"
    elif lim == _PERSISTING_L2:
        value = min(value, b.device_attribute("max_persisting_l2_cache_size", dev))
    _SET.setdefault(b.ctx_get_current(), {})[lim] = value


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


def cuCtxDisablePeerAccess(ctx: int) -> None:
    backend().ctx_disable_peer_access(ctx)


def cuCtxEnablePeerAccess(ctx: int, flags: int) -> None:
    if flags:
        raise CudaError(_INVALID_VALUE, "cuCtxEnablePeerAccess", f"flags {flags} (must be 0)")
    backend().ctx_enable_peer_access(ctx)
