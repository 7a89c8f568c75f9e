"""The stand-in driver's managed-memory calls: advice, prefetches, discards, range attributes.

One concern: the driver forms of ``cuMemAdvise`` (the CUDA 8 form with a
device ordinal, ``-1`` the host; ``cuMemAdvise_v2`` with a ``CUmemLocation``
by value), ``cuMemPrefetchAsync`` (likewise, ``_v2`` with flags), the
CUDA 13 batches (``cuMemPrefetchBatchAsync``, ``cuMemDiscardBatchAsync``,
``cuMemDiscardAndPrefetchBatchAsync``) and ``cuMemRangeGetAttribute(s)``,
decoded from cuda.h's layouts and served by the simulator
(``sim/_managed_calls.py``).
"""

from __future__ import annotations

from gpuarray.errors import CudaError

from .._pools import LOC_DEVICE, LOC_HOST
from ._support import _I32, _INVALID_VALUE, _U64, _signed, _stream, backend

_SIZE_T = _U64


def _device_location(dev: int) -> tuple[int, int]:
    """The CUDA 8 forms' device argument as a location (``CU_DEVICE_CPU``, -1: the host)."""
    d = _signed(dev)
    return (LOC_HOST, 0) if d == -1 else (LOC_DEVICE, d)


def _location(ptr: int) -> tuple[int, int]:
    """The ``CUmemLocation`` (passed by value: the C side gives its copy's address)."""
    return _I32.from_address(ptr).value, _I32.from_address(ptr + 4).value


def cuMemAdvise(ptr: int, count: int, advice: int, dev: int) -> None:
    backend().mem_advise(ptr, count, _signed(advice), *_device_location(dev))


def cuMemAdvise_v2(ptr: int, count: int, advice: int, loc: int) -> None:
    backend().mem_advise(ptr, count, _signed(advice), *_location(loc))


def cuMemPrefetchAsync(ptr: int, count: int, dev: int, stream: int, ptsz: bool = False) -> None:
    backend().mem_prefetch_async(ptr, count, *_device_location(dev), 0, _stream(stream, ptsz))


def cuMemPrefetchAsync_v2(ptr: int, count: int, loc: int, flags: int, stream: int,
                          ptsz: bool = False) -> None:
    backend().mem_prefetch_async(ptr, count, *_location(loc), flags, _stream(stream, ptsz))


def _ranges(call: str, dptrs: int, sizes: int, count: int) -> list[tuple[int, int]]:
    if count and (not dptrs or not sizes):
        raise CudaError(_INVALID_VALUE, call, "(NULL dptrs or sizes)")
    return [(_U64.from_address(dptrs + 8 * k).value, _SIZE_T.from_address(sizes + 8 * k).value)
            for k in range(count)]


def _locations(call: str, locs: int, idxs: int, n: int) -> list[tuple[int, int, int]]:
    if n and (not locs or not idxs):
        raise CudaError(_INVALID_VALUE, call, "(NULL prefetchLocs or prefetchLocIdxs)")
    return [(_SIZE_T.from_address(idxs + 8 * k).value, *_location(locs + 8 * k)) for k in range(n)]


def cuMemPrefetchBatchAsync(dptrs: int, sizes: int, count: int, locs: int, idxs: int, n: int,
                            flags: int, stream: int, ptsz: bool = False) -> None:
    call = "cuMemPrefetchBatchAsync"
    backend().mem_prefetch_batch_async(_ranges(call, dptrs, sizes, count),
                                       _locations(call, locs, idxs, n), flags,
                                       _stream(stream, ptsz))


def cuMemDiscardAndPrefetchBatchAsync(dptrs: int, sizes: int, count: int, locs: int, idxs: int,
                                      n: int, flags: int, stream: int, ptsz: bool = False) -> None:
    call = "cuMemDiscardAndPrefetchBatchAsync"
    backend().mem_prefetch_batch_async(_ranges(call, dptrs, sizes, count),
                                       _locations(call, locs, idxs, n), flags,
                                       _stream(stream, ptsz), discard=True)


def cuMemDiscardBatchAsync(dptrs: int, sizes: int, count: int, flags: int, stream: int,
                           ptsz: bool = False) -> None:
    call = "cuMemDiscardBatchAsync"
    backend().mem_discard_batch_async(_ranges(call, dptrs, sizes, count), flags,
                                      _stream(stream, ptsz))


def cuMemRangeGetAttribute(data: int, size: int, attr: int, ptr: int, count: int) -> None:
    call = "cuMemRangeGetAttribute"
    if not data:
        raise CudaError(_INVALID_VALUE, call, "(NULL data)")
    for k, v in enumerate(backend().mem_range_attribute(_signed(attr), size, ptr, count)):
        _I32.from_address(data + 4 * k).value = v


def cuMemRangeGetAttributes(data: int, sizes: int, attrs: int, n: int, ptr: int, count: int) -> None:
    call = "cuMemRangeGetAttributes"
    if n and (not data or not sizes or not attrs):
        raise CudaError(_INVALID_VALUE, call, "(NULL data, dataSizes or attributes)")
    answers = []
    for k in range(n):  # every attribute is checked before any is written
        out = _U64.from_address(data + 8 * k).value
        if not out:
            raise CudaError(_INVALID_VALUE, call, f"(NULL data[{k}])")
        answers.append((out, backend().mem_range_attribute(
            _I32.from_address(attrs + 4 * k).value, _SIZE_T.from_address(sizes + 8 * k).value,
            ptr, count)))
    for out, values in answers:
        for j, v in enumerate(values):
            _I32.from_address(out + 4 * j).value = v
