"""The stand-in driver's device resources: SM resources queried and split (green contexts' inputs).

One concern: ``cuDeviceGetDevResource``, ``cuCtxGetDevResource``,
``cuStreamGetDevResource`` for ``CU_DEV_RESOURCE_TYPE_SM``, and the two SM
splits, ``cuDevSmResourceSplitByCount`` and ``cuDevSmResourceSplit`` (CUDA
13.1), as cuda.h describes them: pure arithmetic on the device's SM count.
Green contexts themselves (``cuDevResourceGenerateDesc``, ``cuGreenCtxCreate``)
are not simulated and answer ``CUDA_ERROR_NOT_SUPPORTED``, so a split's groups
cannot be run on; workqueue resources (``CU_DEV_RESOURCE_TYPE_WORKQUEUE*``)
are not simulated either (NOT_SUPPORTED).

The SM resource of a device: its ``multiprocessor_count`` SMs, a minimum
partition and a co-scheduling alignment of 8 on compute capability 9.0+ and 2
before (cuda.h: "8 on Compute Architecture 9.0+ and 2 otherwise"), one
locality domain.  ``CUdevResource`` (cuda.h, x86-64): ``type`` at 0, 92 bytes
the driver keeps for itself, the union at 96 (``CUdevSmResource``: smCount,
minSmPartitionSize, smCoscheduledAlignment, flags, localityDomainId), the
``nextResource`` pointer at 136; 144 bytes.  The stand-in marks in the
driver's bytes what made a resource, so a split refuses an input no query or
split made, and a split's group (which cuda.h says cannot be split again
without a green context).
"""

from __future__ import annotations

import ctypes

from gpuarray.errors import CudaError

from ._support import _INVALID_VALUE, _signed, _stream, _with_ctx, backend

_NOT_SUPPORTED = 801
_INVALID_RESOURCE_TYPE = 914
_INVALID_RESOURCE_CONFIGURATION = 915
_TYPE_INVALID, _TYPE_SM, _TYPE_WQ_CONFIG, _TYPE_WQ = 0, 1, 1000, 10000
#: CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING, _MAX_POTENTIAL_CLUSTER_SIZE.
_IGNORE_COSCHEDULING, _MAX_CLUSTER = 1, 2
#: CU_DEV_SM_RESOURCE_GROUP_BACKFILL, _LOCALITY_DOMAIN_ID, _LOCALITY_DOMAIN_SUPPLEMENTAL_SMS.
_BACKFILL, _DOMAIN, _SUPPLEMENTAL = 1, 2, 4
_DOMAIN_ANY = 0xFFFF_FFFF
#: What made a resource (kept in the driver's bytes): a query, a split's remainder, a group.
_MARK = 0x4741_534D  # "GASM"
_QUERIED, _REMAINDER, _GROUP = 0, 1, 2


class _Resource(ctypes.Structure):
    """``CUdevResource`` with its ``CUdevSmResource`` member (and the stand-in's mark)."""

    _fields_ = [("type", ctypes.c_int), ("mark", ctypes.c_uint), ("device", ctypes.c_int),
                ("origin", ctypes.c_uint), ("_driver", ctypes.c_ubyte * 80),
                ("smCount", ctypes.c_uint), ("minSmPartitionSize", ctypes.c_uint),
                ("smCoscheduledAlignment", ctypes.c_uint), ("flags", ctypes.c_uint),
                ("localityDomainId", ctypes.c_uint), ("_rest", ctypes.c_ubyte * 20),
                ("nextResource", ctypes.c_void_p)]


class _GroupParams(ctypes.Structure):
    """``CU_DEV_SM_RESOURCE_GROUP_PARAMS``."""

    _fields_ = [("smCount", ctypes.c_uint), ("coscheduledSmCount", ctypes.c_uint),
                ("preferredCoscheduledSmCount", ctypes.c_uint), ("flags", ctypes.c_uint),
                ("localityDomainId", ctypes.c_uint), ("reserved", ctypes.c_uint * 11)]


def _granule(device: int) -> int:
    return 8 if backend().device_attribute("compute_capability_major", device) >= 9 else 2


def _write(p: int, device: int, origin: int, sms: int, minimum: int, align: int,
           flags: int = 0, domain: int = 0) -> None:
    r = _Resource.from_address(p)
    ctypes.memset(p, 0, ctypes.sizeof(_Resource))
    if sms == 0:
        return  # no SMs: CU_DEV_RESOURCE_TYPE_INVALID (a remainder with nothing left)
    r.type, r.mark, r.device, r.origin = _TYPE_SM, _MARK, device, origin
    r.smCount, r.minSmPartitionSize, r.smCoscheduledAlignment = sms, minimum, align
    r.flags, r.localityDomainId = flags, domain


def _query(call: str, p: int, device: int, rtype: int) -> None:
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL resource)")
    if rtype in (_TYPE_WQ_CONFIG, _TYPE_WQ):
        raise CudaError(_NOT_SUPPORTED, call, "workqueue resources are not simulated")
    if rtype != _TYPE_SM:
        raise CudaError(_INVALID_RESOURCE_TYPE, call, f"resource type {rtype}")
    g = _granule(device)
    _write(p, device, _QUERIED, backend().device_attribute("multiprocessor_count", device), g, g)


def cuDeviceGetDevResource(dev: int, p: int, rtype: int) -> None:
    call = "cuDeviceGetDevResource"
    dev = _signed(dev)
    backend().device_attribute("multiprocessor_count", dev)  # INVALID_DEVICE first
    _query(call, p, dev, _signed(rtype))


def cuCtxGetDevResource(ctx: int, p: int, rtype: int) -> None:
    _query("cuCtxGetDevResource", p, _with_ctx(ctx, backend().ctx_get_device), _signed(rtype))


def cuStreamGetDevResource(stream: int, p: int, rtype: int, ptsz: bool = False) -> None:
    ctx = backend().stream_get_ctx(_stream(stream, ptsz))
    _query("cuStreamGetDevResource", p, _with_ctx(ctx, backend().ctx_get_device), _signed(rtype))


def _input(call: str, p: int) -> _Resource:
    if not p:
        raise CudaError(_INVALID_VALUE, call, "(NULL input)")
    r = _Resource.from_buffer_copy(ctypes.string_at(p, ctypes.sizeof(_Resource)))
    if r.type != _TYPE_SM:
        raise CudaError(_INVALID_RESOURCE_TYPE, call, f"input of resource type {r.type} (not SM)")
    if r.mark != _MARK:
        raise CudaError(_INVALID_VALUE, call, "the input is no SM resource a query or split made")
    if r.origin == _GROUP:
        raise CudaError(_INVALID_VALUE, call, "the input is a split's group: cuda.h allows no "
                                              "further split without a green context")
    return r


def cuDevSmResourceSplitByCount(result: int, pnb: int, pinput: int, remainder: int, flags: int,
                                min_count: int) -> None:
    call = "cuDevSmResourceSplitByCount"
    if not pnb:
        raise CudaError(_INVALID_VALUE, call, "(NULL nbGroups)")
    r = _input(call, pinput)
    if flags & ~(_IGNORE_COSCHEDULING | _MAX_CLUSTER):
        raise CudaError(_INVALID_VALUE, call, f"flags 0x{flags:x}")
    if min_count > r.smCount:
        raise CudaError(_INVALID_VALUE, call, f"minCount {min_count} of an input of {r.smCount} SMs")
    if flags & _IGNORE_COSCHEDULING:
        minimum = align = 2
    else:
        minimum, align = r.minSmPartitionSize, r.smCoscheduledAlignment
    size = max(minimum, -(-min_count // align) * align)
    possible = r.smCount // size
    nb = ctypes.c_uint.from_address(pnb)
    if not result:
        nb.value = possible
        return
    n = min(nb.value, possible)
    for i in range(n):
        _write(result + i * ctypes.sizeof(_Resource), r.device, _GROUP, size, minimum, align)
    nb.value = n
    if remainder:
        _write(remainder, r.device, _REMAINDER, r.smCount - n * size, r.minSmPartitionSize,
               r.smCoscheduledAlignment)


def cuDevSmResourceSplit(result: int, nb: int, pinput: int, remainder: int, flags: int,
                         params: int) -> None:
    call = "cuDevSmResourceSplit"
    r = _input(call, pinput)
    if flags:
        raise CudaError(_INVALID_VALUE, call, f"flags 0x{flags:x} (cuda.h: 0)")
    if not params or nb == 0:
        raise CudaError(_INVALID_VALUE, call, "(no groupParams)")
    most = 32 if r.smCoscheduledAlignment >= 8 else 2
    left = r.smCount
    groups: list[tuple[int, int, _GroupParams]] = []
    for i in range(nb):
        g = _GroupParams.from_address(params + i * ctypes.sizeof(_GroupParams))
        where = f"groupParams[{i}]"
        if any(g.reserved) or g.flags & ~(_BACKFILL | _DOMAIN | _SUPPLEMENTAL):
            raise CudaError(_INVALID_VALUE, call, f"{where}: flags 0x{g.flags:x} or reserved "
                                                  "fields set (cuda.h: zero-initialised)")
        if g.flags & _DOMAIN and g.localityDomainId not in (0, _DOMAIN_ANY):
            raise CudaError(_INVALID_RESOURCE_CONFIGURATION, call,
                            f"{where}: locality domain {g.localityDomainId} (the device has one, 0)")
        cs = g.coscheduledSmCount or r.smCoscheduledAlignment
        if cs < 2 or cs > most or cs % 2:
            raise CudaError(_INVALID_VALUE, call, f"{where}: coscheduledSmCount {cs} (2..{most}, even)")
        backfill = bool(g.flags & _BACKFILL)
        n = g.smCount
        if n == 0:  # discovery: what is left, in whole co-scheduled groups unless backfilled
            n = left if backfill else left // cs * cs
            if result and n < max(cs, 2):
                raise CudaError(_INVALID_RESOURCE_CONFIGURATION, call,
                                f"{where}: {left} SMs left, too few for a group of {cs}")
        else:
            if n < 2 or n > r.smCount or n % 2:
                raise CudaError(_INVALID_VALUE, call, f"{where}: smCount {n} (even, 2..{r.smCount})")
            # not whole co-scheduled groups without backfill: a configuration the SMs cannot
            # take (a GPU answers this code; cuda.core's tests probe with it)
            if n > left or n < cs or (n % cs and not backfill):
                raise CudaError(_INVALID_RESOURCE_CONFIGURATION, call,
                                f"{where}: {n} SMs asked, {left} left (groups of {cs}"
                                f"{', backfill' if backfill else ''})")
        left -= n
        groups.append((n, cs, g))
    for i, (n, cs, g) in enumerate(groups):
        if g.smCount == 0:
            g.smCount = n  # discovery writes back what it found
        if result:
            _write(result + i * ctypes.sizeof(_Resource), r.device, _GROUP, n,
                   r.minSmPartitionSize, cs, g.flags, g.localityDomainId if g.flags & _DOMAIN else 0)
    if remainder:
        _write(remainder, r.device, _REMAINDER, left, r.minSmPartitionSize, r.smCoscheduledAlignment)
