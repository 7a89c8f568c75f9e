"""The simulator's race detector: per-allocation access records judged on vector clocks.

One concern, mixed into the scheduler (``_sched.Scheduler``): each op's
byte ranges are recorded per allocation (``Allocation.races``) with the
op's stream, its clock on that stream and its whole vector clock; two
accesses to overlapping bytes from different streams, one a write, neither
ordered before the other, are a race (:class:`~gpuarray.errors.StreamOrderError`,
or a warning with ``racecheck="warn"``).  Declared accesses are judged when
the op is queued (``Scheduler.enqueue``), before it runs.

Work that knows its accesses only when it has run (a kernel translated from
PTX, ``ptx/_run.py``) is queued as :class:`Reports`: its function returns
the ranges it touched, and ``Scheduler._execute`` judges them then, on the
clock the op got when it was queued -- the verdict it would have had if it
had declared them.  So that a race is raised by the call that makes it, as
for declared accesses, such work runs early (GPU progress, which the
scheduler makes anyway when queues grow): a launch runs at its own call when
another stream has work not ordered before it
(:meth:`RaceDetector.unordered_elsewhere`), and the launches still queued
run before a later call that touches memory is judged, unless that call is
ordered after them (:meth:`RaceDetector.settle_reports`).  Where a host
function that has not returned is in the way, the launch is judged when it
runs, by the synchronising call that runs it.  For that case a record keeps
its op's whole clock (work queued *after* such an op may already be
recorded when it reports: a pair is a race when neither is ordered before
the other), and while such an op is outstanding (``reporting``) no record
it may still race with is pruned (not even one the host has since seen
complete: the op was queued before the host saw it).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gpuarray.errors import StreamOrderError

from ._memory import AddressSpace, Allocation


class SimStream(Protocol):
    """What the checks read of a scheduler stream (``_sched.SimStream``)."""

    @property
    def id(self) -> int: ...

    def describe(self) -> str: ...


class Op(Protocol):
    """What the checks read of a queued op (``_sched.Op``): its stream, clock and name."""

    @property
    def stream(self) -> SimStream: ...

    @property
    def desc(self) -> str: ...

    @property
    def vc(self) -> dict[int, int]: ...

__all__ = ["RaceDetector", "Reports"]


class Reports:
    """Work that reports its accesses when it has run: ``fn()`` returns ``(address, nbytes, is_write)``.

    Queued like any function (``Scheduler.enqueue``); the race detector
    judges what it returns on the op's enqueue-time clock (see the module's
    docstring).  A graph replays it as it is (the wrapper is the node's function).
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Sequence[tuple[int, int, bool]] | None]) -> None:
        self.fn = fn

    def __call__(self) -> Sequence[tuple[int, int, bool]] | None:
        return self.fn()


class _Access:
    __slots__ = ("lo", "hi", "write", "stream", "clock", "desc", "vc")

    def __init__(self, lo: int, hi: int, write: bool, stream: SimStream, clock: int, desc: str,
                 vc: dict[int, int]) -> None:
        self.lo = lo
        self.hi = hi
        self.write = write
        self.stream = stream
        self.clock = clock
        self.desc = desc
        self.vc = vc  # the op's clock (never changed once queued)


class RaceDetector:
    """The scheduler's race checks (a mixin of ``_sched.Scheduler``)."""

    #: Race-record cap per allocation (oldest records dropped beyond it).
    MAX_RECORDS = 2048

    memory: AddressSpace
    host_vc: dict[int, int]
    racecheck: str
    #: Queued :class:`Reports` work whose accesses are not judged yet (seq -> op).
    reporting: dict[int, Any]  # the scheduler's ops (_sched.Op) that report when run
    #: The scheduler's streams, per context (``_sched.Scheduler``).
    streams_by_ctx: dict[int, list[Any]]
    #: Runs an op and its dependencies now; False when a host function is in the way.
    progress: Callable[[Any], bool]

    def settle_reports(self, op: Op) -> None:
        """Run the queued :class:`Reports` work that ``op`` is not ordered after, before
        ``op`` is judged: their ranges are then on record, so a race between them is
        raised by the call that queues ``op``."""
        for r in list(self.reporting.values()):
            sid = r.stream.id
            if r.vc[sid] > op.vc.get(sid, 0):
                self.progress(r)

    def unordered_elsewhere(self, op: Op) -> bool:
        """Whether another stream has work not ordered before ``op`` (it may race with it)."""
        vc = op.vc
        return any(t is not op.stream and t.clock > vc.get(t.id, 0)
                   for streams in self.streams_by_ctx.values() for t in streams)

    def _check_races(self, op: Op, accesses) -> None:
        for address, nbytes, write in accesses:
            if nbytes <= 0:
                continue
            self._check_range(op, address, nbytes, write)

    def _check_range(self, op: Op, address: int, nbytes: int, write: bool) -> None:
        mem = self.memory
        end = address + nbytes
        while address < end:
            a = mem.find(address)
            if a is None or not a.alive:
                return  # bounds and use-after-free are reported by the access itself
            hi = min(end, a.base + a.size)
            self._check_alloc(op, a, address, hi, write)
            address = hi

    def _check_alloc(self, op: Op, a: Allocation, lo: int, hi: int, write: bool) -> None:
        records: list[_Access] = a.races
        host = self.host_vc
        mine = op.vc[op.stream.id]
        keep: list[_Access] = []
        for r in records:
            if r.clock <= host.get(r.stream.id, 0) and self._unneeded(r):
                continue  # the host has seen it complete: ordered before all new work
            if (r.stream is op.stream and write and lo <= r.lo and r.hi <= hi and r.clock < mine
                    and self._unneeded(r)):
                continue  # superseded by a later write on the same stream
            keep.append(r)
            if r.stream is op.stream or not (write or r.write):
                continue
            if r.hi <= lo or hi <= r.lo:
                continue
            if r.clock <= op.vc.get(r.stream.id, 0) or mine <= r.vc.get(op.stream.id, 0):
                continue  # r before op, or (op reporting after it ran) op before r
            self._report(op, a, r, lo, hi, write)
        keep.append(_Access(lo, hi, write, op.stream, mine, op.desc, op.vc))
        if len(keep) > self.MAX_RECORDS:
            del keep[: len(keep) - self.MAX_RECORDS]
        a.races = keep

    def _unneeded(self, r: _Access) -> bool:
        """Whether every outstanding :class:`Reports` op is ordered after ``r`` (may drop it)."""
        sid = r.stream.id
        return all(r.clock <= d.vc.get(sid, 0) for d in self.reporting.values())

    def _report(self, op: Op, a: Allocation, r: _Access, lo: int, hi: int, write: bool) -> None:
        olo, ohi = max(lo, r.lo), min(hi, r.hi)
        msg = (
            f"unordered access to {a.describe()}: {op.desc} "
            f"({'writes' if write else 'reads'} bytes [0x{lo:x}, 0x{hi:x}) on {op.stream.describe()}) "
            f"races with {r.desc} ({'writes' if r.write else 'reads'} bytes [0x{r.lo:x}, 0x{r.hi:x}) "
            f"on {r.stream.describe()}); overlapping bytes [0x{olo:x}, 0x{ohi:x}). "
            "Order them with an event (record on one stream, wait on the other) or a host synchronize."
        )
        if self.racecheck == "warn":
            warnings.warn(msg, RuntimeWarning, stacklevel=6)
        else:
            raise StreamOrderError(msg)
