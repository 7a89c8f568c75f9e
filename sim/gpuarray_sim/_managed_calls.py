"""The simulator's managed-memory advice calls: advice, prefetches, discards and range attributes.

One concern: ``cuMemAdvise``, ``cuMemPrefetchAsync``, the batched
prefetches and discards of CUDA 13 and ``cuMemRangeGetAttribute(s)`` on
managed memory (``cuMemAllocManaged`` and managed memory pools).  The
simulated machine has one copy of managed memory, reachable from the host
and every device, so no advice moves or duplicates data; what cuda.h lets a
program observe is kept per CPU page (:data:`PAGE`; cuda.h rounds each
range out to whole pages): read-duplication, the preferred location, the
processors the data is accessed by, and the last location each page was
prefetched to (recorded when the prefetch is made: cuda.h says the
attribute "gives no indication as to whether the prefetch operation ...
has completed or even begun").  A range attribute answers for the whole
range: a value shared by every page, else the "mixed" answer cuda.h gives
(``CU_DEVICE_INVALID``, ``CU_MEM_LOCATION_TYPE_INVALID``, 0).

Discarding makes the contents indeterminate (cuda.h): when the discard runs,
in stream order, its pages read as ``0xFF`` bytes until written, so a
program that reads discarded data sees garbage, as it may on a GPU.

Every range must lie in one live managed allocation
(``CUDA_ERROR_INVALID_VALUE`` otherwise: cuda.h's answer for memory that is
not managed; the simulated devices have no pageable memory access).  A
location is checked as cuda.h says: a device with concurrent managed access
(all simulated devices), the host, host NUMA node 0 or the calling thread's
node; locality domains are ``CUDA_ERROR_NOT_SUPPORTED`` for prefetches and
``CUDA_ERROR_INVALID_VALUE`` for advice.
"""

from __future__ import annotations

import dataclasses
import mmap
from collections.abc import Sequence

import numpy as np

from gpuarray.errors import CudaError

from ._core import INVALID_VALUE, SimCore, _locked
from ._memory import Allocation, write_host
from ._pools import (
    DEVICE_INVALID,
    LOC_DEVICE,
    LOC_HOST,
    LOC_HOST_NUMA,
    LOC_HOST_NUMA_CURRENT,
    LOC_LOCALITY_DOMAIN,
    LOC_NONE,
)

NOT_SUPPORTED = 801
PAGE = mmap.PAGESIZE
#: ``CU_DEVICE_CPU``: the host, where a device ordinal is answered.
DEVICE_CPU = -1
#: ``CUmem_advise``.
SET_READ_MOSTLY, UNSET_READ_MOSTLY, SET_PREFERRED, UNSET_PREFERRED, SET_ACCESSED_BY, UNSET_ACCESSED_BY = \
    range(1, 7)
#: ``CUmem_range_attribute``.
(RANGE_READ_MOSTLY, RANGE_PREFERRED_LOCATION, RANGE_ACCESSED_BY, RANGE_LAST_PREFETCH_LOCATION,
 RANGE_PREFERRED_LOCATION_TYPE, RANGE_PREFERRED_LOCATION_ID, RANGE_LAST_PREFETCH_LOCATION_TYPE,
 RANGE_LAST_PREFETCH_LOCATION_ID) = range(1, 9)
#: The bit of the host in the accessed-by masks (devices use bits 0..).
_HOST_BIT = 62


@dataclasses.dataclass(eq=False)
class ManagedPages:
    """What advice and prefetches recorded for each page of one managed allocation."""

    read_mostly: np.ndarray
    pref_type: np.ndarray
    pref_id: np.ndarray
    accessed_by: np.ndarray
    prefetch_type: np.ndarray
    prefetch_id: np.ndarray

    @classmethod
    def of(cls, a: Allocation) -> ManagedPages:
        if a.advice is None:
            n = -(-(a.base % PAGE + a.size) // PAGE)
            a.advice = cls(np.zeros(n, bool), np.zeros(n, np.int32), np.zeros(n, np.int32),
                           np.zeros(n, np.uint64), np.zeros(n, np.int32), np.zeros(n, np.int32))
        return a.advice


def _uniform(values: np.ndarray) -> int | None:
    """The value every page shares, or None."""
    first = int(values[0])
    return first if bool((values == first).all()) else None


def _as_device(loc_type: int, loc_id: int) -> int:
    """A location as the legacy attributes give it: a device ordinal, CU_DEVICE_CPU, or INVALID."""
    if loc_type == LOC_DEVICE:
        return loc_id
    if loc_type in (LOC_HOST, LOC_HOST_NUMA):
        return DEVICE_CPU
    return DEVICE_INVALID


class SimManagedCalls(SimCore):
    """Managed-memory advice, prefetch, discard and range-attribute calls of the simulator."""

    def _managed_range(self, ptr: int, count: int, call: str) -> tuple[Allocation, slice]:
        """The managed allocation holding ``[ptr, ptr+count)`` and the pages of the range."""
        a = self.memory.find(int(ptr))
        if count <= 0 or a is None or not a.alive or a.kind != "managed" or ptr + count > a.base + a.size:
            raise CudaError(INVALID_VALUE, call, f"0x{int(ptr):x}+{count} is not a range of managed "
                                                 "memory (cuMemAllocManaged or a managed memory pool)")
        first = (ptr - a.base + a.base % PAGE) // PAGE
        last = (ptr + count - 1 - a.base + a.base % PAGE) // PAGE
        return a, slice(first, last + 1)

    def _managed_location(self, loc_type: int, loc_id: int, call: str,
                          prefetch: bool) -> tuple[int, int]:
        """A destination or advice location, checked; the host NUMA ids normalised."""
        if loc_type == LOC_DEVICE:
            if not 0 <= loc_id < self.devices:
                raise CudaError(101, call, f"device {loc_id} (the simulator has {self.devices})")
            return LOC_DEVICE, loc_id
        if loc_type == LOC_HOST:
            return LOC_HOST, 0  # cuda.h: the id is ignored
        if loc_type == LOC_HOST_NUMA_CURRENT:
            return LOC_HOST_NUMA, 0  # the calling thread's node: the simulated host has node 0
        if loc_type == LOC_HOST_NUMA:
            if loc_id != 0:
                raise CudaError(INVALID_VALUE, call, f"host NUMA node {loc_id} (the simulated host "
                                                     "has node 0 only)")
            return LOC_HOST_NUMA, 0
        if loc_type == LOC_LOCALITY_DOMAIN:
            raise CudaError(NOT_SUPPORTED if prefetch else INVALID_VALUE, call,
                            "locality-domain locations are not supported here (cuda.h)")
        raise CudaError(INVALID_VALUE, call, f"location type {loc_type}")

    # -------------------------------------------------------------- advice
    @_locked
    def mem_advise(self, ptr: int, count: int, advice: int, loc_type: int, loc_id: int) -> None:
        call = "cuMemAdvise"
        self._check_current(call)
        a, pages = self._managed_range(int(ptr), int(count), call)
        p = ManagedPages.of(a)
        if advice == SET_READ_MOSTLY:
            p.read_mostly[pages] = True
        elif advice == UNSET_READ_MOSTLY:
            p.read_mostly[pages] = False
        elif advice == SET_PREFERRED:
            t, i = self._managed_location(loc_type, loc_id, call, False)
            p.pref_type[pages], p.pref_id[pages] = t, i
        elif advice == UNSET_PREFERRED:
            p.pref_type[pages], p.pref_id[pages] = LOC_NONE, 0
        elif advice in (SET_ACCESSED_BY, UNSET_ACCESSED_BY):
            if loc_type not in (LOC_DEVICE, LOC_HOST):  # cuda.h: "All other location types are invalid"
                raise CudaError(INVALID_VALUE, call, f"location type {loc_type} for ACCESSED_BY")
            t, i = self._managed_location(loc_type, loc_id, call, False)
            bit = np.uint64(1 << (_HOST_BIT if t == LOC_HOST else i))
            if advice == SET_ACCESSED_BY:
                p.accessed_by[pages] |= bit
            else:
                p.accessed_by[pages] &= ~bit
        else:
            raise CudaError(INVALID_VALUE, call, f"{advice} is not a CUmem_advise")

    # ------------------------------------------------------------ prefetch
    @_locked
    def mem_prefetch_async(self, ptr: int, count: int, loc_type: int, loc_id: int, flags: int,
                           stream: int) -> None:
        call = "cuMemPrefetchAsync"
        s = self._stream(stream, call)
        if flags:
            raise CudaError(INVALID_VALUE, call, f"flags {flags} (must be 0)")
        self._prefetch([(int(ptr), int(count), loc_type, loc_id)], s, call)

    @_locked
    def mem_prefetch_batch_async(self, ranges: Sequence[tuple[int, int]],
                                 locations: Sequence[tuple[int, int, int]], flags: int,
                                 stream: int, discard: bool = False) -> None:
        """``cuMemPrefetchBatchAsync`` (``discard``: ``cuMemDiscardAndPrefetchBatchAsync``);
        ``locations``: ``(first operation, location type, id)`` in order."""
        call = "cuMemDiscardAndPrefetchBatchAsync" if discard else "cuMemPrefetchBatchAsync"
        s = self._stream(stream, call)
        if flags:
            raise CudaError(INVALID_VALUE, call, f"flags {flags} (must be 0)")
        n = len(ranges)
        firsts = [f for f, _, _ in locations]
        if not n or not locations or len(locations) > n or firsts[0] != 0 or \
                any(b <= a for a, b in zip(firsts, firsts[1:], strict=False)) or firsts[-1] >= n:
            raise CudaError(INVALID_VALUE, call, f"{n} operations with location indices {firsts} "
                                                 "(cuda.h: 0 first, increasing, below count)")
        ops = []
        for k, (first, t, i) in enumerate(locations):
            end = firsts[k + 1] if k + 1 < len(firsts) else n
            ops += [(ptr, count, t, i) for ptr, count in ranges[first:end]]
        if discard:
            self._discard(ranges, s, call)
        self._prefetch(ops, s, call)

    def _prefetch(self, ops: list[tuple[int, int, int, int]], s, call: str) -> None:
        checked = []
        for ptr, count, t, i in ops:
            a, pages = self._managed_range(ptr, count, call)
            checked.append((a, pages, *self._managed_location(t, i, call, True)))
        for a, pages, t, i in checked:
            p = ManagedPages.of(a)
            p.prefetch_type[pages], p.prefetch_id[pages] = t, i
        self.sched.enqueue(s, None, f"{call} of {len(ops)} range(s)", [])

    @_locked
    def mem_discard_batch_async(self, ranges: Sequence[tuple[int, int]], flags: int,
                                stream: int) -> None:
        call = "cuMemDiscardBatchAsync"
        s = self._stream(stream, call)
        if flags:
            raise CudaError(INVALID_VALUE, call, f"flags {flags} (must be 0)")
        if not ranges:
            raise CudaError(INVALID_VALUE, call, "no operations")
        self._discard(ranges, s, call)

    def _discard(self, ranges: Sequence[tuple[int, int]], s, call: str) -> None:
        spans = []
        for ptr, count in ranges:
            a, _ = self._managed_range(int(ptr), int(count), call)
            spans.append((int(ptr), int(count)))

        def run() -> None:  # the contents become indeterminate (cuda.h)
            for ptr, count in spans:
                write_host(ptr, np.full(count, 0xFF, np.uint8))

        self.sched.enqueue(s, run, f"{call} of {len(spans)} range(s)",
                           [(ptr, count, True) for ptr, count in spans])

    # ---------------------------------------------------------- attributes
    @_locked
    def mem_range_attribute(self, attr: int, size: int, ptr: int, count: int) -> list[int]:
        """``cuMemRangeGetAttribute``: the 32-bit values it writes (``size`` bytes of them)."""
        call = "cuMemRangeGetAttribute"
        self._check_current(call)
        a, pages = self._managed_range(int(ptr), int(count), call)
        p = ManagedPages.of(a)
        if attr == RANGE_ACCESSED_BY:
            if size <= 0 or size % 4:
                raise CudaError(INVALID_VALUE, call, f"dataSize {size} (a non-zero multiple of 4)")
            mask = int(np.bitwise_and.reduce(p.accessed_by[pages]))
            who = [d for d in range(self.devices) if mask >> d & 1]
            if mask >> _HOST_BIT & 1:
                who.append(DEVICE_CPU)
            return (who + [DEVICE_INVALID] * (size // 4))[:size // 4]
        if size != 4:
            raise CudaError(INVALID_VALUE, call, f"dataSize {size} for attribute {attr} (must be 4)")
        if attr == RANGE_READ_MOSTLY:
            return [int(bool(p.read_mostly[pages].all()))]
        if attr in (RANGE_PREFERRED_LOCATION, RANGE_PREFERRED_LOCATION_TYPE, RANGE_PREFERRED_LOCATION_ID):
            types, ids = p.pref_type[pages], p.pref_id[pages]
        elif attr in (RANGE_LAST_PREFETCH_LOCATION, RANGE_LAST_PREFETCH_LOCATION_TYPE,
                      RANGE_LAST_PREFETCH_LOCATION_ID):
            types, ids = p.prefetch_type[pages], p.prefetch_id[pages]
        else:
            raise CudaError(INVALID_VALUE, call, f"{attr} is not a CUmem_range_attribute")
        t, i = _uniform(types), _uniform(ids)
        same = t is not None and i is not None and t != LOC_NONE
        if attr in (RANGE_PREFERRED_LOCATION, RANGE_LAST_PREFETCH_LOCATION):
            return [_as_device(t, i) if same and t is not None and i is not None else DEVICE_INVALID]
        if attr in (RANGE_PREFERRED_LOCATION_TYPE, RANGE_LAST_PREFETCH_LOCATION_TYPE):
            return [t if same and t is not None else LOC_NONE]
        return [i if same and i is not None else 0]
