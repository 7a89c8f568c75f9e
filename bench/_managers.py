"""The default memory manager against the stream-ordered pool: host time and driver calls.

The NBEP 7 default (``default``: ``cuMemAlloc`` and a deferred-free queue
flushed with ``cuMemFree``) and the stream-ordered pool (``pool``:
``cuMemAllocAsync`` / ``cuMemFreeAsync`` from the device's pool, release
threshold raised) doing the same work, interleaved in one process (each
round runs every manager in turn, in a rotating order):

- ``alloc+free small`` / ``alloc+free large``: allocate and drop at once;
- ``churn``: a ring of live arrays of mixed sizes; each operation allocates
  one and drops the oldest (steady state of a program's temporaries);
- ``churn + work``: the same with an asynchronous memset of each new array,
  so device work is queued when a free comes (``cuMemFree`` waits for it).

Per row: host microseconds per operation (median over rounds) and driver
calls per operation (:class:`~gpuarray._bench.host.BackendMeter`, by call).
On the simulator only the call counts carry over to a GPU; ``make
gpu-check`` runs the same rows on a GPU (``bench/test_memory_managers.py``),
where the host time includes what ``cuMemFree``'s device synchronisation
costs.  ``python bench/_managers.py`` prints the table.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["ManagerRow", "MANAGERS", "manager_cases", "compare_managers", "format_manager_table"]

#: The managers compared (names of ``set_memory_manager``).
MANAGERS = ("default", "pool")
#: Live arrays in the churn rows, and their sizes in turn (bytes).
RING = 32
CHURN_SIZES = (256, 4096, 65536, 1 << 20, 512, 16384)

Case = tuple[str, Callable[[], Callable[[], Any]]]


@dataclasses.dataclass
class ManagerRow:
    """One case under one manager: host us per operation and driver calls per operation."""

    case: str
    manager: str
    us: float
    spread: float
    calls: float
    by_call: dict[str, float]


def manager_cases(small: int = 256, large: int = 1 << 20) -> list[Case]:
    """``(case, build)``: ``build()`` returns the operation, on the current manager and device."""
    import gpuarray
    from gpuarray import memory
    from gpuarray._driver import get_backend

    def cycle(n: int) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            return lambda: memory.allocate(n)  # dropped at once
        return build

    def churn(work: bool) -> Callable[[], Callable[[], Any]]:
        def build() -> Callable[[], Any]:
            b = get_backend()
            stream = gpuarray.legacy_default_stream()
            h = int(stream)
            ring: deque = deque(maxlen=RING)
            sizes = itertools.cycle(CHURN_SIZES)
            for _ in range(RING):
                ring.append(memory.allocate(next(sizes), stream=stream))

            def op() -> None:
                n = next(sizes)
                p = memory.allocate(n, stream=stream)
                if work:
                    b.memset_d8_async(p.handle, 1, n, h)
                ring.append(p)  # drops the oldest
            return op
        return build

    return [
        (f"alloc+free {_fmt(small)}", cycle(small)),
        (f"alloc+free {_fmt(large)}", cycle(large)),
        (f"churn, {RING} live, 256 B-1 MiB", churn(False)),
        (f"churn + memset each, {RING} live", churn(True)),
    ]


def _fmt(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def _flush() -> None:
    """Run every pending deferred free and finish the queued work (between rounds, untimed)."""
    import gc

    import gpuarray
    from gpuarray.memory import get_memory_manager

    gc.collect()
    queue = getattr(get_memory_manager(), "deallocations", None)
    if queue is not None:
        queue.clear()
    gpuarray.legacy_default_stream().synchronize()


def compare_managers(cases: list[Case] | None = None, managers: tuple[str, ...] = MANAGERS, *,
                     rounds: int = 7, number: int = 500) -> list[ManagerRow]:
    """Time and meter every case under every manager, interleaved; restores the manager after."""
    import gpuarray
    from gpuarray import memory
    from gpuarray._bench.host import BackendMeter

    gpuarray.get_device().make_current()
    cases = manager_cases() if cases is None else cases
    previous = type(memory.get_memory_manager())
    rows = []
    try:
        for name, build in cases:
            times: dict[str, list[float]] = {m: [] for m in managers}
            calls: dict[str, BackendMeter] = {}
            for r in range(rounds + 2):  # a warm-up round, then the timed ones, then a metered one
                for m in managers[r % len(managers):] + managers[:r % len(managers)]:
                    gpuarray.set_memory_manager(m)
                    op = build()
                    for _ in range(number // 10):  # the manager's steady state
                        op()
                    if r == rounds + 1:
                        with BackendMeter() as meter:
                            for _ in range(number):
                                op()
                        calls[m] = meter
                    else:
                        t0 = time.perf_counter()
                        for _ in range(number):
                            op()
                        us = (time.perf_counter() - t0) * 1e6 / number
                        if r:
                            times[m].append(us)
                    del op
                    _flush()
            for m in managers:
                med = statistics.median(times[m])
                q = statistics.quantiles(times[m], n=4) if len(times[m]) > 1 else [med] * 3
                meter = calls[m]
                rows.append(ManagerRow(name, m, med, (q[2] - q[0]) / med if med else 0.0,
                                       meter.calls / number,
                                       {k: v / number for k, v in sorted(meter.by_name.items())}))
    finally:
        _flush()
        gpuarray.set_memory_manager(previous)
    return rows


#: Short names of the driver calls in the table.
_SHORT = {
    "mem_alloc": "cuMemAlloc", "mem_free": "cuMemFree", "mem_alloc_async": "cuMemAllocAsync",
    "mem_free_async": "cuMemFreeAsync", "exchange_capture_mode": "mode exchange",
    "ctx_get_current": "cuCtxGetCurrent", "memset_d8_async": "cuMemsetD8Async",
    "event_record": "cuEventRecord", "stream_wait_event": "cuStreamWaitEvent",
    "event_create": "cuEventCreate", "event_destroy": "cuEventDestroy",
}


def format_manager_table(rows: list[ManagerRow], backend: str) -> str:
    """A Markdown table: case, manager, host us per op, driver calls per op and which."""
    out = [f"Memory managers ({backend} backend; medians of interleaved rounds, per operation)", "",
           "| case | manager | host us | driver calls | of which |", "|---|---|---|---|---|"]
    for r in rows:
        which = ", ".join(f"{_SHORT.get(k, k)} {v:.2f}".rstrip("0").rstrip(".")
                          for k, v in r.by_call.items() if v >= 0.005)
        out.append(f"| {r.case} | {r.manager} | {r.us:.2f} +-{r.spread * 50:.0f}% | "
                   f"{r.calls:.2f} | {which} |")
    return "\n".join(out)


def main() -> int:
    """Print the table for the current backend (``GPUARRAY_BACKEND``)."""
    import gpuarray
    from gpuarray._driver import get_backend

    gpuarray.get_device()
    sim = get_backend().name == "sim"
    cases = manager_cases(large=(1 << 20) if sim else (64 << 20))
    print(format_manager_table(compare_managers(cases), get_backend().name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
