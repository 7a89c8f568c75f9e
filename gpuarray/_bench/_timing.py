"""Benchmark support: the quick/full switch, timing and the environment record.

One concern: measuring.  The pytest-benchmark suites in the repository's
``bench/`` folder and the ``bench`` subcommand share what is here, so both
time things the same way:

- :func:`bench_mode` is the one quick/full switch: ``GPUARRAY_BENCH_MODE``
  (``quick`` or ``full``), by default ``quick`` on the simulator and ``full``
  on the ``cuda`` backend.  (A tool setting, not library behaviour, so it is
  read here rather than in ``_config``.)
- GPU time comes from two timing events recorded around ``reps`` operations
  on one stream (:class:`EventClock`), per operation; host wall time is taken
  separately with ``time.perf_counter``.  Every figure is a median with its
  quartiles (:class:`Stats`).
- Bandwidth is reported as a ratio to the raw driver call (``get_backend()``:
  ``memcpy_dtod_async``, ``memcpy_htod_async`` from pinned memory,
  ``memset_d32_async``) measured in the same process.

On the simulator every number is a *simulator host overhead*: the cost of
pure-Python code plus the simulator's own bookkeeping.  Only the figures that
never reach the driver (interface export, views) say anything about gpuarray
on a GPU, and even those depend on the CPU.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["MODES", "bench_mode", "Stats", "EventClock", "Timing", "time_gpu", "time_host", "describe",
           "fmt_bytes", "KiB", "MiB", "GiB", "SIM_LABEL"]

MODES = ("quick", "full")
SIM_LABEL = "simulator -- not GPU performance"

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def bench_mode() -> str:
    """``quick`` or ``full``: ``GPUARRAY_BENCH_MODE``, else by backend (quick on ``sim``)."""
    text = os.environ.get("GPUARRAY_BENCH_MODE", "").strip().lower()
    if text:
        if text not in MODES:
            raise ValueError(f"GPUARRAY_BENCH_MODE={text!r}: use 'quick' or 'full'")
        return text
    from .. import _driver

    return "quick" if _driver.backend_name() == "sim" else "full"


def fmt_bytes(n: int) -> str:
    """``8 B``, ``4 KiB``, ``256 MiB``, ``1 GiB`` (one decimal when not whole)."""
    for unit, step in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= step:
            v = n / step
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"


# ------------------------------------------------------------------ statistics
@dataclasses.dataclass(frozen=True)
class Stats:
    """Median and spread of a list of samples (all in one unit)."""

    n: int
    min: float
    q1: float
    median: float
    q3: float
    max: float

    @classmethod
    def of(cls, samples: list[float]) -> Stats:
        """Summarise ``samples`` (at least one)."""
        if not samples:
            raise ValueError("no samples")
        xs = sorted(samples)
        if len(xs) >= 2:
            q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
        else:
            q1 = q3 = xs[0]
        return cls(len(xs), xs[0], q1, statistics.median(xs), q3, xs[-1])

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.05 means +-2.5 %)."""
        return (self.q3 - self.q1) / self.median if self.median else 0.0

    def as_dict(self) -> dict[str, float]:
        """Plain numbers for JSON, ``spread`` included."""
        d = dataclasses.asdict(self)
        d["spread"] = self.spread
        return d


# ---------------------------------------------------------------------- timing
class EventClock:
    """Two timing events around a batch of operations on one stream.

    ``start()`` records the first event; ``stop(count)`` records the second,
    waits for it, and appends the GPU milliseconds per operation and the host
    microseconds per operation (enqueue plus completion) to ``gpu_ms`` and
    ``host_us``.
    """

    def __init__(self, stream: Any) -> None:
        from .._stream import event

        self.stream = stream
        self._start = event(timing=True)
        self._end = event(timing=True)
        self._t0 = 0.0
        self.gpu_ms: list[float] = []
        self.host_us: list[float] = []

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._start.record(self.stream)

    def stop(self, count: int) -> None:
        self._end.record(self.stream)
        self._end.synchronize()
        t1 = time.perf_counter()
        count = max(count, 1)
        self.gpu_ms.append(self._start.elapsed_time(self._end) / count)
        self.host_us.append((t1 - self._t0) * 1e6 / count)


@dataclasses.dataclass(frozen=True)
class Timing:
    """GPU milliseconds and host microseconds per operation."""

    gpu_ms: Stats
    host_us: Stats


def time_gpu(op: Callable[[], Any], stream: Any, *, reps: int, rounds: int,
             warmup: int = 1) -> Timing:
    """Time ``op`` (which enqueues work on ``stream``) with events, ``reps`` per round.

    Parameters
    ----------
    op : callable
    stream : gpuarray.Stream
        The stream ``op`` works on; the events are recorded there.
    reps, rounds, warmup : int
        Operations per round, measured rounds, rounds thrown away first.

    Returns
    -------
    Timing
    """
    clock = EventClock(stream)
    for _ in range(warmup):
        clock.start()
        for _ in range(reps):
            op()
        clock.stop(reps)
    clock.gpu_ms.clear()
    clock.host_us.clear()
    for _ in range(rounds):
        clock.start()
        for _ in range(reps):
            op()
        clock.stop(reps)
    return Timing(Stats.of(clock.gpu_ms), Stats.of(clock.host_us))


def time_host(op: Callable[[], Any], *, iterations: int, rounds: int, warmup: int = 1,
              after_round: Callable[[], Any] | None = None) -> Stats:
    """Host microseconds per call of ``op``; ``after_round`` runs untimed after each round."""
    samples = []
    for r in range(warmup + rounds):
        t0 = time.perf_counter()
        for _ in range(iterations):
            op()
        t1 = time.perf_counter()
        if after_round is not None:
            after_round()
        if r >= warmup:
            samples.append((t1 - t0) * 1e6 / iterations)
    return Stats.of(samples)


# ----------------------------------------------------------------- environment
def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe() -> dict[str, Any]:
    """Backend, mode, device, driver and library versions, as plain JSON values."""
    from .. import __version__, _driver
    from .._device import get_device

    b = _driver.get_backend()
    dev = get_device()
    major, minor = dev.compute_capability
    versions = {"gpuarray": __version__, "numpy": np.__version__,
                "python": sys.version.split()[0]}
    for dist in ("cuda-python", "cuda-bindings", "cupy-cuda13x", "cupy-cuda12x", "cupy", "torch",
                 "numba-cuda", "numba", "jax"):
        v = _version(dist)
        if v is not None:
            versions[dist] = v
    dv = b.driver_version()
    return {
        "backend": b.name,
        "mode": bench_mode(),
        "device": dev.name,
        "device_ordinal": dev.id,
        "compute_capability": f"{major}.{minor}",
        "total_memory": dev.total_memory,
        "l2_cache_size": dev.attribute("l2_cache_size"),
        "driver_version": dv,
        "driver": f"{dv // 1000}.{dv % 1000 // 10}",
        "versions": versions,
    }
