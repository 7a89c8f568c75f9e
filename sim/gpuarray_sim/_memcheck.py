"""Out-of-allocation accesses a GPU lets through: reported as memcheck reports them, or faults.

One concern: what the simulator does when a kernel translated from PTX
reads or writes past the end of an allocation but inside its mapped slack
(``_memory.py``: the bytes from the end to the next 512-byte step, which a
GPU has mapped, so the access does not fault there).  Two modes,
``GPUARRAY_SIM_MEMCHECK``:

``report`` (the default)
    The kernel goes on, as on a GPU, and the access is reported as
    compute-sanitizer's memcheck reports it: the kernel, the PTX line, the
    block and thread, the address and the allocation it is past -- on
    standard error when the launch has run (inside the synchronising call
    that ran it), as a :class:`MemcheckWarning` (so pytest lists it in its
    warnings summary even when the test passed and its output was
    captured; a warnings filter that makes it an error makes the access a
    fault), and in a summary at the process's exit.  The default because
    the simulator's job is to behave as the GPU does: a sticky fault where
    the GPU goes on ends the process's context, so every later test of a
    pytest worker fails because of one test's bug (numba-cuda's suite has
    two such tests).
``strict``
    The access is ``CUDA_ERROR_ILLEGAL_ADDRESS`` (700, sticky), as every
    access outside the slack is.  gpuarray's own tests run strict.

An access beyond the slack (or into freed memory) is a fault in both modes,
as an unmapped address is on a GPU.  Copies, memsets, and gpuarray's own
kernels (the host build, limited to the extents they declare) are checked
against the allocation's size alone.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import sys
import threading
import warnings
from collections.abc import Callable, Sequence

__all__ = ["MODES", "MemcheckWarning", "Access", "mode_from_environment", "report", "totals", "forget"]

#: The values of ``GPUARRAY_SIM_MEMCHECK``.
MODES = ("report", "strict")
#: Accesses of one launch kept with their details (every one is counted).
KEEP = 64
#: Accesses of one launch printed in full (the rest are counted).
PRINT = 8
_BAR = "========="


class MemcheckWarning(RuntimeWarning):
    """A kernel read or wrote past the end of an allocation, where a GPU does not fault."""


@dataclasses.dataclass(frozen=True)
class Access:
    """One access past an allocation's end, inside its mapped slack."""

    address: int
    size: int
    write: bool
    line: int  # PTX line (0: unknown)
    block: tuple[int, int, int]
    thread: tuple[int, int, int]
    alloc_base: int
    alloc_size: int


def mode_from_environment() -> str:
    """``GPUARRAY_SIM_MEMCHECK`` (default ``report``).

    Raises
    ------
    ValueError
        A value that is not one of :data:`MODES`.
    """
    text = os.environ.get("GPUARRAY_SIM_MEMCHECK", "report").strip().lower() or "report"
    if text not in MODES:
        raise ValueError(f"GPUARRAY_SIM_MEMCHECK={text!r}: use report or strict")
    return text


class _Totals:
    """What the process has reported, for the summary at exit."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.accesses = 0
        self.launches = 0
        self.kernels: dict[str, str] = {}  # kernel -> its first report's location
        self.registered = False


_totals = _Totals()


def forget() -> None:
    """Forget what was reported so far (tests that report on purpose; no summary for it)."""
    with _totals.lock:
        _totals.accesses = _totals.launches = 0
        _totals.kernels.clear()


def totals() -> tuple[int, int]:
    """Accesses and launches reported so far in this process."""
    with _totals.lock:
        return _totals.accesses, _totals.launches


def _where(a: Access, source: Callable[[int], str] | None) -> str:
    if source is not None and a.line:
        return source(a.line)
    return f"PTX line {a.line}" if a.line else "an unknown PTX line"


def describe(a: Access, kernel: str, source: Callable[[int], str] | None) -> str:
    """One access as memcheck words it (several lines, each with the ``=========`` bar)."""
    space = "write" if a.write else "read"
    end = a.alloc_base + a.alloc_size
    if a.address >= end:
        rel = f"is {a.address - end} bytes after the end of"
    else:
        rel = f"runs {a.address + a.size - end} bytes past the end of"
    return "\n".join((
        f"{_BAR} Invalid __global__ {space} of size {a.size} bytes",
        f"{_BAR}     at kernel {kernel}, {_where(a, source)}",
        f"{_BAR}     by thread {a.thread} in block {a.block}",
        f"{_BAR}     Address 0x{a.address:x} is out of bounds",
        f"{_BAR}     and {rel} the allocation at 0x{a.alloc_base:x} of size {a.alloc_size} bytes",
    ))


def report(kernel: str, accesses: Sequence[Access], count: int,
           source: Callable[[int], str] | None) -> str:
    """Report the out-of-allocation accesses of one launch (``count`` in all, the first kept).

    Writes the report to standard error, issues a one-line
    :class:`MemcheckWarning` naming the kernel and the first access, and
    counts them for the summary at exit; returns the report's text.
    Called when the launch has run, inside the driver call that ran it.

    Raises
    ------
    MemcheckWarning
        When a warnings filter makes it an error (the caller turns that into
        the launch's fault).
    """
    head = (f"{_BAR} gpuarray-sim memcheck: kernel {kernel} accessed memory past the end of an "
            f"allocation {count} time(s) (inside the allocation's mapped 512-byte granule: a GPU "
            "does not fault there; GPUARRAY_SIM_MEMCHECK=strict makes it a fault)")
    body = [describe(a, kernel, source) for a in accesses[:PRINT]]
    if count > len(body):
        body.append(f"{_BAR} ... and {count - len(body)} more such accesses in this launch")
    text = "\n".join([head, *body])
    first = accesses[0] if accesses else None
    where = "" if first is None else (
        f"; the first: {'write' if first.write else 'read'} of {first.size} bytes at "
        f"{_where(first, source)} (thread {first.thread} block {first.block}), "
        f"{first.address - first.alloc_base - first.alloc_size} bytes after the end of the "
        f"{first.alloc_size}-byte allocation at 0x{first.alloc_base:x}")
    with _totals.lock:
        _totals.accesses += count
        _totals.launches += 1
        _totals.kernels.setdefault(kernel, where.removeprefix("; the first: "))
        if not _totals.registered:
            _totals.registered = True
            atexit.register(_summary)
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # no usable stderr: the warning and summary remain
        pass
    warnings.warn(f"kernel {kernel}: {count} access(es) past the end of an allocation, where a GPU "
                  f"does not fault (compute-sanitizer's memcheck reports them){where}",
                  MemcheckWarning, stacklevel=2)
    return text


def _summary() -> None:
    with _totals.lock:
        if not _totals.accesses:
            return
        lines = [f"{_BAR} gpuarray-sim memcheck ERROR SUMMARY: {_totals.accesses} access(es) past "
                 f"the end of an allocation in {_totals.launches} launch(es) of "
                 f"{len(_totals.kernels)} kernel(s) (a GPU does not fault on them; "
                 "compute-sanitizer reports them):"]
        lines += [f"{_BAR}     {k}: first at {where}" for k, where in _totals.kernels.items()]
    text = "\n".join(lines) + "\n"
    try:
        os.write(2, text.encode("utf-8", "replace"))  # the real stderr: capture has ended by now
    except OSError:
        pass
