"""How the host-overhead comparison judges a row against its goal (no timing involved)."""

from __future__ import annotations

from gpuarray._bench_host import PeerRow, format_peer_table


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
