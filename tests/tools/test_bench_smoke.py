"""The benchmarks must not rot: run them on the simulator (speed is never asserted).

Runs in subprocesses, always on the simulator in quick mode:

- every benchmark of ``bench/`` once, with ``--benchmark-disable``;
- a few benchmarks for real into a JSON, then ``tools/gpu_check/report.py`` on that
  JSON and that log (and ``bench/plot.py`` when matplotlib is installed);
- ``python -m gpuarray bench`` on one case.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("pytest_benchmark") is None or not BENCH.is_dir(),
    reason="needs pytest-benchmark and the bench/ folder of a source checkout")


def _env() -> dict[str, str]:
    # A pytest-xdist worker's identity is not the child's: pytest-benchmark
    # would take the child for a worker and disable itself.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env.update(GPUARRAY_BACKEND="sim", GPUARRAY_BENCH_MODE="quick")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=300)


def test_every_benchmark_runs_once():
    r = _run("-m", "pytest", "bench", "--benchmark-disable", "-q", "-p", "no:cacheprovider")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout


def test_json_report_and_plots(tmp_path):
    out = tmp_path / "bench.json"
    r = _run("-m", "pytest", "bench", "--benchmark-only", "-q", "-p", "no:cacheprovider",
             f"--benchmark-json={out}", "-k", "test_copy_contiguous or test_view or test_fill_one")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["machine_info"]["gpuarray"]["backend"] == "sim"
    rows = [b["extra_info"] for b in data["benchmarks"]]
    assert {row["impl"] for row in rows} >= {"raw", "gpuarray"}
    assert all(row["ratio"] > 0 for row in rows if row["suite"] == "copy")
    assert all(row["host_us"]["median"] > 0 for row in rows if row["suite"] == "host")

    log = tmp_path / "tests.txt"
    log.write_text(r.stdout)
    env = tmp_path / "env.txt"
    env.write_text("Fri Nov 21 20:30:00 UTC 2026\nLinux 6.8.0 x86_64\nPython 3.12.3\n"
                   "DLPack core: C extension (gpuarray.interop._dlpack_core)\n"
                   "NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB, 9.0\nnumpy 2.3.1\n"
                   "torch: not installed\n")
    md = tmp_path / "report.md"
    r = _run(str(ROOT / "tools" / "gpu_check" / "report.py"), "--env", str(env), "--tests-log", str(log),
             "--tests-status", "0", "--bench-status", "0", "--bench-json", str(out),
             "--out", str(md))
    assert r.returncode == 0, r.stdout + r.stderr
    text = md.read_text()
    assert "NVIDIA H100 80GB HBM3" in text and "driver 580.65.06" in text
    assert "simulator host overheads, not GPU performance" in text
    assert "| copy | copy |" in text and "| view a.T |" in text
    assert " passed" in text and "torch not installed" in text
    assert "- DLPack core: C extension (gpuarray.interop._dlpack_core)" in text

    if importlib.util.find_spec("matplotlib") is not None:
        r = _run(str(BENCH / "plot.py"), str(out))
        assert r.returncode == 0, r.stdout + r.stderr
        assert (tmp_path / "bench-bandwidth.png").stat().st_size > 0
        assert (tmp_path / "bench-host.png").stat().st_size > 0


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_plot_of_table_only_rows_is_no_failure(tmp_path):
    # make bench-cudapy's rows (simulator comparisons) carry no plot: a good run is not an
    # error; a file without any benchmark still is.
    tables = tmp_path / "cudapy.json"
    tables.write_text(json.dumps({"benchmarks": [
        {"name": "test_cudapy_modules[cudasim]", "extra_info": {"wall_s": 30.0}}]}))
    r = _run(str(BENCH / "plot.py"), str(tables))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nothing to plot in test_cudapy_modules[cudasim]" in r.stdout
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"benchmarks": []}))
    r = _run(str(BENCH / "plot.py"), str(empty))
    assert r.returncode == 1 and "has no benchmark rows" in r.stderr


def test_command_line_bench():
    r = _run("-m", "gpuarray", "bench", "-k", "copy")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "simulator" in r.stdout and "copy d2d" in r.stdout


def test_the_raw_rows_call_the_driver_past_the_capture_checkpoint():
    # The raw path of "to_device 8 B" is cuMemAlloc + cuMemcpyHtoDAsync + cuMemFree (its
    # round's stream synchronisation shared by the round): through the checkpoint its
    # allocation and free would each be three calls (relaxed switches), seven in all.
    from gpuarray._bench import _Env, run_suite

    (row,) = run_suite(_Env(), only="to_device 8 B")
    assert not row.error, row.error
    assert row.raw_calls is not None and 3.0 <= row.raw_calls < 3.1
    assert row.calls is not None and row.calls > row.raw_calls
