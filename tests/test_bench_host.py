"""How the host-overhead comparison judges a row against its goal (no timing involved)."""

from __future__ import annotations

from gpuarray._bench.host import PeerRow, format_peer_table


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
    assert b.mem_get_info() == used  # the real backend saw nothing
    assert gpuarray.to_device(host).copy_to_host().tolist() == list(range(8))


def test_compare_measures_paired_and_null_library_times_for_raw_rows():
    from gpuarray._bench.host import compare, peer_cases

    cases = [c for c in peer_cases(None, sizes=(8,)) if c[0].startswith(("to_device", "a[1:]"))]
    rows = {r.case: r for r in compare(cases, rounds=1, number=20, meter_rounds=1, null_rounds=1)}
    td, view = rows["to_device 8 B"], rows["a[1:]"]
    assert td.paired_library_us is not None and td.null_library_us is not None
    assert td.backend_calls >= 3  # allocation, copy and context query at least
    assert view.paired_library_us is None and view.null_library_us is None
