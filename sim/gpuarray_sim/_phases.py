"""Where the simulator's time goes: seconds and counts per phase, for the benchmarks.

One concern: accumulate wall time per named phase of the simulator's work
-- ``parse`` (PTX text to syntax tree, and the checker), ``translate``
(syntax tree to C++ or to the interpreter's decoded form), ``build`` (the
C++ compiler), ``load`` (disk cache read and ``dlopen``), ``execute`` (the
fiber runtime running a launch), ``launch`` (a launch's host side around
it) and ``driver`` (every driver call the stand-in serves, inclusive) --
and, when ``GPUARRAY_SIM_PHASES`` names a folder, write them at exit as
``phases-<pid>.json`` there (``bench/test_cudapy_sim.py`` sums the files of
a run's processes).  Always on: one ``perf_counter`` pair per phase entered,
nothing per instruction.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["phase", "add", "totals", "ENV"]

#: The environment variable naming the folder the totals are written to at exit.
ENV = "GPUARRAY_SIM_PHASES"

_lock = threading.Lock()
_totals: dict[str, list[float]] = {}
_FOLDER = os.environ.get(ENV, "").strip()
_written = [0.0]


def add(name: str, seconds: float, count: int = 1) -> None:
    """Add ``seconds`` (and ``count`` events) to phase ``name``."""
    with _lock:
        t = _totals.get(name)
        if t is None:
            t = _totals[name] = [0.0, 0]
        t[0] += seconds
        t[1] += count
    if _FOLDER:  # also every few seconds: a process may end without running atexit
        now = time.monotonic()
        if now - _written[0] > 2.0:
            _written[0] = now
            _write()


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the ``with`` body as phase ``name`` (also when it raises)."""
    t = time.perf_counter()
    try:
        yield
    finally:
        add(name, time.perf_counter() - t)


def totals() -> dict[str, tuple[float, int]]:
    """``{phase: (seconds, count)}`` of this process so far."""
    with _lock:
        return {k: (v[0], int(v[1])) for k, v in _totals.items()}


def _write() -> None:
    folder = _FOLDER
    if not folder or not _totals:
        return
    try:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"phases-{os.getpid()}.json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({k: {"seconds": s, "count": n} for k, (s, n) in totals().items()}, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass  # a benchmark's bookkeeping never fails the process


atexit.register(_write)
