"""The default memory manager against the stream-ordered pool, in host time and driver calls.

The issue-37 table (``bench/_managers.py``): the NBEP 7 default
(``cuMemAlloc`` + deferred ``cuMemFree``) and the stream-ordered pool
(``cuMemAllocAsync`` / ``cuMemFreeAsync``) doing the same work, interleaved in
one process -- small and large allocate-and-drop, alloc-free churn with a ring
of live arrays, and the churn with a memset of each new array queued (device
work pending when a free comes: ``cuMemFree`` waits for it).  The table is
printed and written next to the JSON results; every row is in ``extra_info``
(suite ``managers``), which ``tools/gpu_check/report.py`` renders, so the first GPU
run of ``make gpu-check`` decides which manager should be the default.  On
the simulator only the driver-call counts carry over (its allocations copy
and poison bytes in Python), and the large size is 1 MiB, not 64 MiB.
"""

from __future__ import annotations

import sys

import _managers as managers
from _harness import BACKEND, FULL, SIM, _common, ctx, results_path


def test_memory_managers(benchmark, capsys):
    import gpuarray

    if gpuarray._config.get().memory_manager:
        import pytest

        pytest.skip("GPUARRAY_MEMORY_MANAGER is set: managers cannot be switched")
    ctx()
    large = (1 << 20) if SIM else (64 << 20)
    rounds, number = (15, 1000) if FULL else (5, 200 if SIM else 400)
    rows = benchmark.pedantic(
        lambda: managers.compare_managers(managers.manager_cases(large=large),
                                          rounds=rounds, number=number),
        rounds=1, iterations=1)
    table = managers.format_manager_table(rows, BACKEND)
    path = results_path("memory-managers", ".md")
    path.write_text(table + "\n")
    with capsys.disabled():
        sys.stdout.write("\n" + table + f"\n(written to {path})\n")
    benchmark.extra_info.update(_common("managers", "default vs pool", "gpuarray"))
    benchmark.extra_info["rows"] = [
        {"case": r.case, "manager": r.manager, "host_us": r.us, "spread": r.spread,
         "calls": r.calls, "by_call": r.by_call} for r in rows]
