"""How the host-overhead comparison judges a row against its goal (no timing involved)."""

from __future__ import annotations

from gpuarray._bench.host import PeerRow, format_peer_table
from tests.support import exact_free_memory


def _raw_row(ours: float, backend: float, raw: float = 20.0, raw_backend: float = 19.0) -> PeerRow:
    return PeerRow("to_device 8 B", "raw calls", 3.0, "raw",
                   us={"gpuarray": ours, "raw": raw}, spread={},
                   backend_calls=7.0, backend_us=backend, raw_backend_us=raw_backend)


def test_library_time_is_ours_less_backend_and_less_the_raw_rows_own_overhead():
    row = _raw_row(ours=30.0, backend=25.0)
    assert row.library_us == 30.0 - 25.0 - (20.0 - 19.0)
    assert row.meets_goal() is False  # 4 us > 3 us
    assert _raw_row(ours=27.0, backend=25.0).meets_goal() is True


def test_a_negative_library_time_is_noise_and_not_judged():
    # the metered backend time exceeded the whole call: the run's noise
    row = _raw_row(ours=35.0, backend=38.0)
    assert row.library_us < 0
    assert row.meets_goal() is None
    table = format_peer_table([row], "sim")
    line = next(x for x in table.splitlines() if x.startswith("| `to_device 8 B`"))
    assert line.rstrip().endswith("| - |"), line
    assert "not judged" in table


def test_paired_and_null_backend_library_times_take_precedence():
    row = _raw_row(ours=30.0, backend=25.0)  # formula: 4 us
    row.paired_library_us = 3.5
    assert row.library_us == 3.5 and row.meets_goal() is False
    row.null_library_us = 2.5  # the goal judges the library's own time when measured
    assert row.meets_goal() is True
    row.null_library_us = -0.1
    assert row.meets_goal() is None
    line = next(x for x in format_peer_table([_raw_row(30.0, 25.0)], "sim").splitlines()
                if x.startswith("| `to_device"))
    assert line.count("|") == 13  # the null-backend column is there, empty ("-")


def test_null_backend_runs_to_device_without_the_backend_and_leaves_nothing_behind():
    import gc

    import numpy as np

    import gpuarray
    from gpuarray._bench.host import NullBackend
    from gpuarray._driver import get_backend
    from gpuarray.memory import get_memory_manager

    b = get_backend()
    host = np.arange(8, dtype=np.uint8)
    gpuarray.to_device(host)  # the device, its manager and its default stream exist
    mgr = get_memory_manager()
    gc.collect()
    mgr.deallocations.clear()
    before = dict(mgr.allocations)
    used = b.mem_get_info()
    with NullBackend() as nb:
        arrays = [gpuarray.to_device(host) for _ in range(25)]  # flushes the queue twice
        fake = [a._ptr for a in arrays]
        assert min(fake) >= 1 << 60  # stub addresses, never the backend's
        del arrays
    assert nb.other_calls == 0
    assert "mem_alloc" not in b.backend.__dict__  # the real methods are back
    assert mgr.allocations == before and mgr.deallocations.pending_count == 0
    # the real backend saw nothing (a GPU's free memory also moves with other processes)
    assert not exact_free_memory() or b.mem_get_info() == used
    assert gpuarray.to_device(host).copy_to_host().tolist() == list(range(8))


def test_compare_measures_paired_and_null_library_times_for_raw_rows():
    from gpuarray._bench.host import compare, peer_cases

    cases = [c for c in peer_cases(None, sizes=(8,)) if c[0].startswith(("to_device", "a[1:]"))]
    rows = {r.case: r for r in compare(cases, rounds=1, number=20, meter_rounds=1, null_rounds=1)}
    td, view = rows["to_device 8 B"], rows["a[1:]"]
    assert td.paired_library_us is not None and td.null_library_us is not None
    assert td.backend_calls >= 3  # allocation, copy and context query at least
    assert view.paired_library_us is None and view.null_library_us is None
    # the raw path: cuMemAlloc + cuMemcpyHtoDAsync + cuMemFree, counted the same way
    assert td.raw_backend_calls == 3
    line = next(x for x in format_peer_table(list(rows.values()), "sim").splitlines()
                if x.startswith("| `to_device 8 B`"))
    assert f"| {td.backend_calls:.1f}, 3.0 (" in line


def test_the_meter_counts_driver_calls_not_interface_methods(monkeypatch):
    # A relaxed allocation is three driver calls whether the backend makes them
    # through the interface (the default: each metered, never timed twice) or
    # itself (the cuda backend: the meter counts them for it).
    import gpuarray
    from gpuarray._bench.host import BackendMeter
    from gpuarray._driver import get_backend

    gpuarray.get_device()
    b = get_backend().backend  # the backend itself, behind the capture checkpoint
    with BackendMeter() as meter:
        ptr = b.mem_alloc_relaxed(8)
    b.mem_free(ptr)
    assert meter.by_name == {"exchange_capture_mode": 2, "mem_alloc": 1}
    assert meter.calls == 3
    assert meter.backend_seconds() > 0

    def native(nbytes: int) -> int:
        # a backend's own version, calling the interface inside: those calls
        # are the composite's three, not counted again
        prev = b.exchange_capture_mode("relaxed")
        try:
            return b.mem_alloc(nbytes)
        finally:
            b.exchange_capture_mode(prev)

    monkeypatch.setattr(type(b), "mem_alloc_relaxed", lambda self, nbytes: native(nbytes))
    with BackendMeter() as meter:
        ptr = b.mem_alloc_relaxed(8)
    b.mem_free(ptr)
    assert meter.by_name == {"exchange_capture_mode": 2, "mem_alloc": 1}
    assert meter.calls == 3


def test_the_meter_counts_the_checkpoints_own_relaxed_switch_around_a_free():
    # Through the capture checkpoint a direct free (a manager with no deferred
    # queue) is a potentially unsafe call made in relaxed mode: three driver calls.
    import gpuarray
    from gpuarray._bench.host import BackendMeter
    from gpuarray._driver import get_backend

    gpuarray.get_device()
    cp = get_backend()
    ptr = cp.mem_alloc_relaxed(8)
    with BackendMeter() as meter:
        cp.mem_free(ptr)
    assert meter.by_name == {"exchange_capture_mode": 2, "mem_free": 1}


def test_the_memory_manager_rows_count_each_managers_driver_calls():
    # The issue-37 table: the default manager's cuMemAlloc + deferred cuMemFree
    # against the pool's cuMemAllocAsync + cuMemFreeAsync, and the manager is
    # restored after.
    import gpuarray
    from gpuarray import memory
    managers = _bench_module("_managers")
    gpuarray.get_device()
    before = type(memory.get_memory_manager())
    cases = [c for c in managers.manager_cases(small=256, large=4096)
             if c[0].startswith(("alloc+free 256", "churn + memset"))]
    rows = {(r.case, r.manager): r for r in managers.compare_managers(cases, rounds=1, number=22)}
    assert type(memory.get_memory_manager()) is before
    small, churn = cases[0][0], cases[1][0]
    default, pool = rows[small, "default"].by_call, rows[small, "pool"].by_call
    assert default["mem_alloc"] == 1 and default["mem_free"] == 1  # 22 frees: two flushes of 11
    assert default["exchange_capture_mode"] >= 2  # the relaxed switch around each cuMemAlloc
    assert "mem_alloc_async" not in default
    assert pool["mem_alloc_async"] == 1 and pool["mem_free_async"] == 1
    assert "mem_free" not in pool and "mem_alloc" not in pool
    assert rows[churn, "pool"].by_call["memset_d8_async"] == 1
    table = managers.format_manager_table(list(rows.values()), "sim")
    assert "| alloc+free 256 B | pool |" in table and "cuMemAllocAsync 1" in table


def _bench_module(name: str):
    """A support module of the repository's bench/ (not part of the package)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
