"""One launch of a PTX entry: the ``SimKernel`` the simulator runs for a kernel of a PTX image.

One concern: turn a launch (parameters as ctypes objects, grid, block,
dynamic shared bytes, the module variables' addresses) into the runtime's
call -- the parameter block laid out as the PTX signature says, the
launch record of ``ptxrt.h`` (``ptx::Launch``), the shared window, the
grants (every live allocation the context may touch), and the printf
buffer, written to the process's stdout (file descriptor 1, as a driver
does) when the launch ends, even when it faulted.

What a launch touched is known only when it has run: the checked global
accesses of ``ptxrt.h`` widen, per grant, the interval of bytes read and
the interval written (``Launch::touched``), and :meth:`PtxKernel.run`
returns them as ``(address, nbytes, is_write)`` -- what the scheduler's
race detector judges for work that reports its accesses when it runs
(``_sched.Reports``), on the clock the launch had when it was queued.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _hostrt, _memcheck, _phases
from .._memory import DeviceFault
from ._ast import EntryInfo
from ._errors import UnsupportedPtx

__all__ = ["PtxKernel", "PRINTF_BUFFER"]

#: Bytes of printf output kept per launch (``cudaLimitPrintfFifoSize``'s default).
PRINTF_BUFFER = 1 << 20
#: Bytes of the block state record (``ptx::kBlockBytes``).
BLOCK_STATE = 65536


class _Launch(ctypes.Structure):
    """``ptx::Launch`` of ``ptxrt.h``."""

    _fields_ = [("params", ctypes.c_void_p), ("param_size", ctypes.c_uint64),
                ("globals", ctypes.c_void_p), ("shared", ctypes.c_void_p),
                ("shared_size", ctypes.c_uint64), ("dyn_offset", ctypes.c_uint64),
                ("dyn_size", ctypes.c_uint64), ("printf_buf", ctypes.c_void_p),
                ("printf_cap", ctypes.c_uint64), ("printf_len", ctypes.c_uint64),
                ("last", ctypes.c_void_p), ("clock", ctypes.c_uint64),
                ("block", ctypes.c_void_p), ("local_pool", ctypes.c_void_p),
                ("touched", ctypes.c_void_p), ("last_touched", ctypes.c_void_p),
                ("code", ctypes.c_void_p), ("cooperative", ctypes.c_uint32),
                ("grid_gen", ctypes.c_uint32), ("grid_arrived", ctypes.c_uint64),
                ("slack", ctypes.c_void_p), ("oob", ctypes.c_void_p), ("oob_cap", ctypes.c_uint64),
                ("oob_count", ctypes.c_uint64), ("strict", ctypes.c_uint64),
                ("printf_at", ctypes.c_void_p)]


class _Oob(ctypes.Structure):
    """``ptx::OobAccess`` of ``ptxrt.h``: one access into a grant's mapped slack."""

    _fields_ = [("addr", ctypes.c_uint64), ("size", ctypes.c_uint64), ("grant", ctypes.c_uint32),
                ("write", ctypes.c_uint32), ("line", ctypes.c_uint32),
                ("block", ctypes.c_uint32 * 3), ("thread", ctypes.c_uint32 * 3)]


_NO_GRANT = _hostrt.Grant(0, 0, None, 0)
_NO_TOUCH = (ctypes.c_uint64 * 4)()  # the intervals of _NO_GRANT: never reached (size 0)
_UNTOUCHED = np.array([2**64 - 1, 0, 2**64 - 1, 0], dtype=np.uint64)
_param_types: dict[tuple[int, int], type] = {}


def param_type(size: int, align: int) -> type:
    """A ctypes type of ``size`` bytes and alignment ``align`` (one PTX parameter)."""
    key = (size, align)
    t = _param_types.get(key)
    if t is None:
        base = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32,
                8: ctypes.c_uint64}.get(min(align, 8), ctypes.c_uint8)
        if size % ctypes.sizeof(base) == 0:
            t = base * (size // ctypes.sizeof(base))
        else:
            t = ctypes.c_uint8 * size
        t = _param_types.setdefault(key, t)
    return t


class PtxKernel:
    """The simulator's implementation of one ``.entry`` of a PTX module (a ``SimKernel``).

    ``param_types``: one ctypes type per PTX parameter (its bytes); ``info``:
    the entry's :class:`~._ast.EntryInfo`.  ``accesses`` declares nothing
    (what a PTX kernel touches is known only when it runs; every access is
    checked against the live allocations instead, and :meth:`run` returns
    the ranges it touched, for the race detector).
    """

    foreign = False

    def __init__(self, program: Any, name: str, info: EntryInfo) -> None:
        self.program = program
        self.name = name
        self.info = info
        self.param_types = tuple(param_type(size, align) for _n, size, align, _o in info.params)

    def __repr__(self) -> str:
        return f"<PTX kernel {self.name}>"

    def check(self) -> None:
        """Build the module if needed; raise :class:`UnsupportedPtx` if the entry cannot run."""
        why = self.program.prepare()["unsupported"].get(self.name)
        if why:
            raise UnsupportedPtx(f"kernel {self.name}: {why}")

    def accesses(self, params: Sequence[Any]) -> list[tuple[int, int, bool]]:
        return []

    def pack(self, params: Sequence[Any]) -> ctypes.Array:
        """The parameter block: each parameter's bytes at its PTX offset.

        Raises
        ------
        TypeError
            Wrong number of parameters, or one whose size is not the PTX parameter's.
        """
        info = self.info
        if len(params) != len(info.params):
            raise TypeError(f"kernel {self.name} takes {len(info.params)} parameters, "
                            f"got {len(params)}")
        block = (ctypes.c_uint8 * max(info.param_size, 1))()
        for p, (pname, size, _align, off) in zip(params, info.params, strict=True):
            if isinstance(p, (bytes, bytearray)):
                data = bytes(p)
            else:
                try:
                    data = ctypes.string_at(ctypes.addressof(p), ctypes.sizeof(p))
                except TypeError:
                    raise TypeError(f"kernel {self.name}: parameter {pname} must be a ctypes "
                                    f"object, got {type(p).__name__}") from None
            if len(data) != size:
                raise TypeError(f"kernel {self.name}: parameter {pname} is {size} bytes, got "
                                f"{len(data)} ({type(p).__name__})")
            ctypes.memmove(ctypes.addressof(block) + off, data, size)
        return block

    def run(self, mem: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
            shared_mem: int, params: Sequence[Any], globals: dict[str, int] | None = None,
            slots: int = 1, cooperative: bool = False) -> list[tuple[int, int, bool]]:
        """Run every thread of every block on ``mem`` (a ``_KernelMemory``).

        ``slots``: blocks that may be resident at once (each has its own
        shared window, barrier record and local pool slice); ``cooperative``:
        all of the grid's blocks resident from the start, ``grid.sync``
        allowed (the caller checked that they fit).

        Returns the global memory the launch touched: per allocation, the
        hull of the bytes it read and the hull of the bytes it wrote (atomics
        write), as ``(address, nbytes, is_write)``.  An entry that does
        nothing (``EntryInfo.does_nothing``) runs no thread at all: its
        result is the same, whatever the grid.
        """
        t_run = time.perf_counter()
        try:
            return self._run(mem, grid, block, shared_mem, params, globals, slots, cooperative)
        finally:
            _phases.add("launch", time.perf_counter() - t_run)

    def _run(self, mem: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
             shared_mem: int, params: Sequence[Any], globals: dict[str, int] | None,
             slots: int, cooperative: bool) -> list[tuple[int, int, bool]]:
        meta = self.program.prepare()
        why = meta["unsupported"].get(self.name)
        if why:
            raise UnsupportedPtx(f"kernel {self.name}: {why}")
        entry, code = self.program.launch_target(self.name)
        pblock = self.pack(params)
        if self.info.does_nothing:
            # every thread returns at its first instruction: no access, no output, no fault
            # to run 22121216 blocks of 256 threads for (numba-cuda's test_issue_9229)
            return []
        names = meta["globals"]
        table = (ctypes.c_uint64 * max(1, len(names)))(
            *[int((globals or {})[n]) for n in names]) if names else (ctypes.c_uint64 * 1)()
        dyn_offset = int(meta["dyn_offset"])
        slots = max(1, int(slots))
        # The block's window: its static and dynamic bytes, rounded up to 16 -- a GPU allocates
        # shared memory per block in far larger units (128 bytes and more), so a 16-byte vector
        # access inside an aligned 16-byte granule of the window never faults there.  NVVM relies
        # on it: after LTO it widens x[4], x[5], x[6] of a 28-byte dynamic array (.align 16) into
        # one ld.shared.v4 at offset 16 (numba-cuda's test_sm::test_dynshared_slice_gaps).
        shared_size = -(-(dyn_offset + int(shared_mem)) // 16) * 16
        # one window per slot; ptx::begin fills a block's with 0xff when it starts
        shared = np.empty(max(slots * (-(-shared_size // 16) * 16), 1), dtype=np.uint8)
        cap = PRINTF_BUFFER if self.program.uses_printf else 0
        out = ctypes.create_string_buffer(max(cap, 1))
        state = np.empty(slots * BLOCK_STATE, dtype=np.uint8)  # ptx::begin initialises it
        from ._emit import LOCAL_ON_STACK

        local = int(meta["local"][self.name])
        threads = block[0] * block[1] * block[2]
        pool = (np.empty(slots * threads * local, dtype=np.uint8) if local > LOCAL_ON_STACK
                else np.empty(0, dtype=np.uint8))
        grants, slack, keep = mem.live_grants()
        slacks = (ctypes.c_uint64 * max(1, len(slack)))(*slack)
        strict = mem.memcheck == "strict"
        # workers: each runs blocks with a record of its own (what it touched, its accesses
        # into slack, its last grant)
        nw = min(slots, _hostrt.workers_for(grid[0] * grid[1] * grid[2], threads, cooperative))
        if _seeded(mem):  # a seeded simulator replays exactly: one worker, blocks in order
            nw = 1
        per = max(1, len(grants))
        # a worker's intervals and record share no cache line with another's (each widening
        # access writes them: on one line, two workers would take it from each other per access)
        row = per * 4 if nw == 1 else -(-per * 4 // 8) * 8 + 8
        touched = np.tile(_UNTOUCHED, nw * row // 4).reshape(nw, row)
        oob = (_Oob * (nw * _memcheck.KEEP))()
        fields = (ctypes.addressof(pblock), self.info.param_size, ctypes.addressof(table),
                  shared.ctypes.data, shared_size, dyn_offset, int(shared_mem),
                  ctypes.addressof(out), cap, 0, ctypes.addressof(_NO_GRANT), 0, state.ctypes.data,
                  pool.ctypes.data)
        if nw == 1:
            stride, space = 0, None
            launch = _Launch(*fields, touched.ctypes.data, ctypes.addressof(_NO_TOUCH), code,
                             int(bool(cooperative)), 0, 0, ctypes.addressof(slacks),
                             ctypes.addressof(oob), _memcheck.KEEP, 0, int(strict))
            launch.printf_at = ctypes.addressof(launch) + _Launch.printf_len.offset
            records = [launch]
        else:  # the records side by side, each on cache lines of its own
            stride = -(-ctypes.sizeof(_Launch) // 64) * 64 + 64
            space = ctypes.create_string_buffer(nw * stride + 64)
            first = -(-ctypes.addressof(space) // 64) * 64
            records = [_Launch.from_address(first + w * stride) for w in range(nw)]
            for w in range(nw):
                rec = _Launch(*fields, touched[w].ctypes.data, ctypes.addressof(_NO_TOUCH), code,
                              int(bool(cooperative)), 0, 0, ctypes.addressof(slacks),
                              ctypes.addressof(oob) + w * _memcheck.KEEP * ctypes.sizeof(_Oob),
                              _memcheck.KEEP, 0, int(strict), first + _Launch.printf_len.offset)
                ctypes.memmove(first + w * stride, ctypes.addressof(rec), ctypes.sizeof(rec))
            launch = records[0]
        runtime = self.program.runtime()  # built on first use: not the kernel's time
        # interpreted: a long launch's later blocks run the translation once it is built
        upgrade = self.program.upgrade_cell(self.name) if code else None
        t0 = time.perf_counter()
        try:
            try:
                runtime.launch(self.name, entry, launch, grid, block, grants,
                               source=self.program.source_line, slots=slots,
                               cooperative=cooperative, upgrade=upgrade, workers=nw,
                               stride=stride)
            except DeviceFault as f:
                hit = _strict_hit(records, oob, f) if strict else None
                if hit is not None:  # the fault was an access into slack
                    raise self._strict_fault(f, hit, grants) from None
                raise
            finally:
                # reported even when the launch faulted later
                if not strict and (launch.oob_count or any(r.oob_count for r in records[1:])):
                    self._report(_slack_accesses(records, oob), grants)
        finally:
            self.program.launch_ended(upgrade)
            took = time.perf_counter() - t0
            _phases.add("execute", took)
            if code:
                _phases.add("execute-interpreted", took)
                self.program.interpreted(took)
            del keep
            if launch.printf_len:
                sys.stdout.flush()
                os.write(1, out.raw[:launch.printf_len])
        del space  # the records' memory, kept until here
        return _touched_ranges(grants, touched if nw == 1 else touched[:, :per * 4])

    def _access(self, r: _Oob, grants: Sequence[Any]) -> _memcheck.Access:
        g = grants[r.grant]
        return _memcheck.Access(r.addr, r.size, bool(r.write), r.line, tuple(r.block),
                                tuple(r.thread), g.base, g.size)

    def _strict_fault(self, f: DeviceFault, r: _Oob, grants: Sequence[Any]) -> DeviceFault:
        """Strict mode's fault of an access into slack, saying where it is and what a GPU does."""
        a = self._access(r, grants)
        return DeviceFault(f.code, f"{f.detail}; {a.address + a.size - a.alloc_base - a.alloc_size} "
                                   f"bytes past the end of the {a.alloc_size}-byte allocation at "
                                   f"0x{a.alloc_base:x}, inside its mapped 512-byte granule: a GPU "
                                   "does not fault there (compute-sanitizer reports it); "
                                   "GPUARRAY_SIM_MEMCHECK=strict makes it a fault")

    def _report(self, hits: tuple[int, list[_Oob]], grants: Sequence[Any]) -> None:
        """Report the launch's accesses into mapped slack (``_memcheck.report``)."""
        count, kept = hits
        accesses = [self._access(r, grants) for r in kept]
        try:
            _memcheck.report(self.name, accesses, count, self.program.source_line)
        except _memcheck.MemcheckWarning as w:  # a warnings filter made the report an error
            raise DeviceFault(700, f"kernel {self.name}: {w} (MemcheckWarning is an error here: "
                                   "CUDA_ERROR_ILLEGAL_ADDRESS)") from None


def _seeded(mem: Any) -> bool:
    """Whether the simulator ``mem`` belongs to runs with a seed (its scheduler's random order)."""
    sched = getattr(getattr(mem, "_b", None), "sched", None)
    return getattr(sched, "rng", None) is not None


def _strict_hit(records: Sequence[_Launch], oob: ctypes.Array, f: DeviceFault) -> _Oob | None:
    """Strict memcheck: the access into slack that was the launch's fault ``f``, if one was.

    A worker's first such access faults and stops it; of several workers',
    the one of the thread ``f`` names.
    """
    if not isinstance(f, _hostrt.LaunchFault):
        return None
    firsts = [oob[w * _memcheck.KEEP] for w, r in enumerate(records) if r.oob_count]
    return next((a for a in firsts if (tuple(a.block), tuple(a.thread)) == (f.block, f.thread)),
                None)


def _slack_accesses(records: Sequence[_Launch], oob: ctypes.Array) -> tuple[int, list[_Oob]]:
    """Every worker's accesses into slack: how many, and the first ``KEEP`` recorded.

    One worker: in the order they ran.  Several: each worker's in its order,
    merged by block (stable: a block's own in the order its worker ran them,
    which is one worker's), so the same accesses are reported whichever
    worker ran which block.
    """
    keep = _memcheck.KEEP
    count = sum(int(r.oob_count) for r in records)
    kept = [oob[w * keep + i] for w, r in enumerate(records) for i in range(min(int(r.oob_count),
                                                                             keep))]
    if len(records) > 1:
        kept.sort(key=lambda a: (a.block[2], a.block[1], a.block[0]))
    return count, kept[:keep]


def _touched_ranges(grants: Sequence[Any], touched: np.ndarray) -> list[tuple[int, int, bool]]:
    """``(address, nbytes, is_write)`` of the intervals ``ptxrt.h`` widened (4 per grant).

    ``touched``: one row per worker, merged here (the hull of what any worker touched).
    """
    if touched.shape[0] == 1:
        t = touched.reshape(-1, 4)
    else:
        per = touched.reshape(touched.shape[0], -1, 4)
        t = np.stack([per[:, :, 0].min(0), per[:, :, 1].max(0), per[:, :, 2].min(0),
                      per[:, :, 3].max(0)], 1)
    out: list[tuple[int, int, bool]] = []
    for i in np.flatnonzero((t[:, 1] > t[:, 0]) | (t[:, 3] > t[:, 2])).tolist():
        base = grants[i].base
        rlo, rhi, wlo, whi = t[i].tolist()
        if rhi > rlo:
            out.append((base + rlo, rhi - rlo, False))
        if whi > wlo:
            out.append((base + wlo, whi - wlo, True))
    return out
