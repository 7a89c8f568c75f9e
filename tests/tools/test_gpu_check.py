"""``make gpu-check`` (issue 27): the one prepared run on a lent GPU machine.

What can be checked without a GPU, cheaply (no test here runs the suite):

- the device tool's run as tools/gpu_check/device_run.json spells it fits the
  tool's limits: a command line of at most 2,000 characters, at most 8
  carried paths, ``timeout_s`` at most 600 and above the run's own budget,
  and what travels (the working tree's tracked and untracked-not-ignored
  files, plus the carried wheels) under 64 MiB;
- tools/gpu_check/run.py stops a hung step at its limit, process group and
  all, and runs every later step after a failure or a hang; it keeps the
  report's time when the budget runs out; it writes at most 8 files (the
  tool brings back 8), named as the tool accepts;
- tools/gpu_check/report.py reports counts, failures, skip reasons and sanitizer
  findings from the JUnit XML and the log;
- over the stand-in driver the benchmarks neither measure peers on simulated
  memory nor write committable (non ``tmp-``) results.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "gpu_check"
DEVICE_RUN = json.loads((TOOL / "device_run.json").read_text(encoding="utf-8"))
MiB = 1 << 20


def _load_run():
    spec = importlib.util.spec_from_file_location("gpu_check_run", TOOL / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


run_py = _load_run()


# ------------------------------------------------------- the device tool's limits
def test_the_device_command_fits_the_tools_limits():
    cmd = DEVICE_RUN["command"]
    assert len(cmd) <= 2000, len(cmd)
    assert "make gpu-check" in cmd and "tools/gpu_check/run.py" in cmd
    assert len(DEVICE_RUN["carry"]) <= 8
    assert all(len(p) <= 200 and not p.startswith("/") for p in DEVICE_RUN["carry"])
    # the tool's per-command limit, and room above the run's own budget for the
    # kill grace of a step at its limit and the writing of the outputs
    assert run_py.BUDGET_S + 30 <= DEVICE_RUN["timeout_s"] <= 600


def test_the_command_is_documented_as_it_is_in_device_run_json():
    text = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    assert DEVICE_RUN["command"] in text
    assert f"timeout_s={DEVICE_RUN['timeout_s']}" in text
    assert json.dumps(DEVICE_RUN["carry"]) in text


def _git_lines(*args: str) -> list[str]:
    p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        pytest.skip(f"not a git checkout ({p.stderr.strip()[:200]}): what travels is what git lists")
    return [x for x in p.stdout.split("\0") if x]


def _size(path: Path) -> int:
    if path.is_symlink() or not path.exists():
        return 0   # a link travels as a link
    if path.is_file():
        return path.stat().st_size
    return sum(_size(p) for p in path.rglob("*") if not p.is_symlink() and p.is_file())


def test_what_travels_is_under_64_MiB():
    files = _git_lines("ls-files", "-z", "--cached", "--others", "--exclude-standard")
    tree = sum(_size(ROOT / f) for f in files)
    if (ROOT / "shared").is_dir():
        tree += _size(ROOT / "shared")
    carried = 0
    for p in DEVICE_RUN["carry"]:
        here = _size(ROOT / p)
        # not fetched yet: the stated bound per wheel (the check below keeps it honest)
        carried += here or DEVICE_RUN["wheel_bound_bytes"] * len(DEVICE_RUN["wheels"])
    assert tree + carried < 64 * MiB, (tree / MiB, carried / MiB)
    for w in (ROOT / ".whl").glob("*.whl"):
        assert w.stat().st_size <= DEVICE_RUN["wheel_bound_bytes"], w.name


def test_the_carried_folder_is_ignored_by_git():
    # an ignored folder travels only because `carry` names it, never twice
    # (a file inside each: a fresh checkout has no such folder, and a folder
    # pattern such as ".whl/" matches no path that is not a folder)
    probes = [f"{c}/probe.whl" for c in DEVICE_RUN["carry"]]
    p = subprocess.run(["git", "check-ignore", "--no-index", *probes], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    if p.returncode == 128:
        pytest.skip(f"not a git checkout ({p.stderr.strip()[:200]})")
    assert sorted(p.stdout.split()) == sorted(probes)


# ------------------------------------------------------------- the runner
def _step(name, code, cap=30.0, floor=0.0, ok_codes=(0,)):
    return run_py.Step(name, name, cap, floor, argv=[sys.executable, "-c", code],
                       ok_codes=ok_codes)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper is not)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def test_a_hung_step_is_stopped_with_its_children_at_its_limit(tmp_path):
    pidfile = tmp_path / "pid"
    code = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
            f"open({str(pidfile)!r}, 'w').write(str(c.pid))\n"
            "print('started', flush=True)\n"
            "time.sleep(120)\n")
    with open(tmp_path / "log", "w") as log:
        r = run_py.run_step(_step("hang", code), 3.0, dict(os.environ), log)
    assert r["timed_out"] and r["seconds"] < 60
    assert "started" in r["output"] and "started" in (tmp_path / "log").read_text()
    grandchild = int(pidfile.read_text())
    for _ in range(100):
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)


def _fake_run(monkeypatch, tmp_path, steps, budget):
    monkeypatch.setattr(run_py, "plan", lambda run: steps)
    monkeypatch.delenv("GPU_CHECK_TIME_SCALE", raising=False)
    out = tmp_path / "out"
    rc = run_py.main(["--out", str(out), "--budget", str(budget)])
    files = sorted(out.iterdir())
    (steps_json,) = [f for f in files if f.name.endswith(".steps.json")]
    return rc, files, {e["name"]: e for e in json.loads(steps_json.read_text())["steps"]}


def test_every_step_runs_after_a_failure_and_a_hang(monkeypatch, tmp_path):
    steps = [_step("fails", "raise SystemExit(3)"),
             _step("hangs", "import time; time.sleep(120)", cap=2.0),
             _step("nothing", "raise SystemExit(5)", ok_codes=(0, 5)),
             _step("passes", "print('3 passed, 1 skipped in 0.10s')"),
             run_py.Step("skipped", "skipped", 10, 1, skip="no such tool here"),
             _step("report", "print('report')")]
    rc, files, got = _fake_run(monkeypatch, tmp_path, steps, budget=120)
    assert rc == 1
    assert got["fails"]["rc"] == 3 and not got["fails"]["ok"]
    assert got["hangs"]["timed_out"] and not got["hangs"]["ok"]
    assert got["nothing"]["ok"] and got["passes"]["ok"]
    assert got["passes"]["summary"] == "3 passed, 1 skipped in 0.10s"
    assert got["skipped"]["skipped"] == "no such tool here" and got["skipped"]["ok"]
    assert got["report"]["ok"]
    # the device tool brings back at most 8 files, named in letters, digits, '.', '_', '-'
    assert len(files) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", f.name) for f in files)
    log = next(f for f in files if f.name.endswith(".log")).read_text()
    assert "step hangs: TIMED OUT" in log and "step fails: FAILED (exit 3)" in log


def test_a_spent_budget_skips_steps_but_keeps_the_reports_time(monkeypatch, tmp_path):
    steps = [_step("slow", "import time; time.sleep(120)", cap=60.0, floor=1.0),
             _step("later", "print('ran')", floor=5.0),
             _step("report", "print('report')", floor=10.0)]
    rc, _, got = _fake_run(monkeypatch, tmp_path, steps, budget=20)
    # slow may use 20 - (5 + 10) s; then later no longer fits; the report still runs
    assert got["slow"]["timed_out"] and got["slow"]["limit_s"] <= 5.0
    assert "budget" in got["later"]["skipped"]
    assert got["report"]["rc"] == 0 and rc == 1


def test_the_plan_over_the_stand_in_skips_the_sanitizers_saying_why():
    env = {"GPUARRAY_BACKEND": "cuda", "GPUARRAY_STANDIN": "/x"}
    why = run_py.sanitizer_skip_reason(env)
    assert why is not None and "stand-in" in why
    run = run_py.Run(sys.executable, Path("/tmp/w"), Path("/tmp/o"), "gpu-check-x", env, 8, 1.0)
    steps = {s.name: s for s in run_py.plan(run)}
    assert steps["memcheck"].skip == why and steps["racecheck"].skip == why
    assert list(steps)[-1] == "report"
    assert steps["bench"].env["GPUARRAY_BENCH_MODE"] == "quick"
    suite = " ".join(steps["suite"].argv)
    assert "--junitxml=" in suite and suite.endswith(" tests sim/tests")
    # the GPU image's pytest-benchmark 5.2 fails pytest's configure under xdist with
    # filterwarnings=error: the suite's pytest steps leave that plugin out
    for name in ("suite", "memcheck", "racecheck"):
        if steps[name].argv is not None:
            assert "-p no:benchmark" in " ".join(steps[name].argv), name
    # pytest --strict-markers refuses `-m serial` while no such marker is registered
    if run_py.serial_marker():
        assert "not serial" in suite and "-m serial" in " ".join(steps["serial"].argv)
    else:
        assert "serial" not in suite and "marker" in steps["serial"].skip


def test_the_suite_runs_again_in_one_process_when_xdist_workers_disagree():
    run = run_py.Run(sys.executable, Path("/tmp/w"), Path("/tmp/o"), "gpu-check-x", {}, 8, 1.0)
    suite = run_py.Step("suite", "suite", 300, 60, argv=["pytest"], junit=Path("/tmp/w/suite.xml"))
    out = "ERROR gw2 - Different tests were collected between gw0 and gw2. The differenc..."
    fallback = run_py.suite_fallback(run, suite, out)
    assert fallback is not None and "no:xdist" in fallback.argv
    assert fallback.junit != suite.junit
    assert run_py.suite_fallback(run, suite, "1 failed, 3 passed in 1.0s") is None


def test_pytest_summary_and_wheel_tags():
    assert run_py.pytest_summary("x\n== 5 passed, 2 skipped in 3.2s ==\n") == \
        "5 passed, 2 skipped in 3.2s"
    assert run_py.pytest_summary("==== 143 skipped, 5 reasons ====\n") is None
    assert run_py.pytest_summary("1 failed, 2 passed in 0.5s (0:00:00)\n").startswith("1 failed")
    w = "apache_tvm_ffi-0.1.15.post2-cp312-cp312-manylinux_2_28_x86_64.whl"
    assert run_py.wheel_fits(w, (3, 12)) and not run_py.wheel_fits(w, (3, 11))
    assert run_py.wheel_fits("x-1.0-cp310-abi3-manylinux_2_17_x86_64.whl", (3, 12))
    assert not run_py.wheel_fits("x-1.0-cp313-abi3-manylinux_2_17_x86_64.whl", (3, 12))
    assert run_py.wheel_fits("x-1.0-py3-none-any.whl", (3, 11))


def test_the_readme_example_is_found():
    code, expected = run_py.readme_example()
    assert "import gpuarray" in code and expected.strip().endswith("36.0")


# ---------------------------------------------------------------- the report
_JUNIT = """<?xml version="1.0"?>
<testsuites>
 <testsuite name="suite">
  <testcase classname="tests.test_a" name="test_ok"/>
  <testcase classname="tests.test_a" name="test_bad"><failure message="assert 1 == 2">x</failure></testcase>
  <testcase classname="tests.test_b" name="test_skip"><skipped type="pytest.skip" message="needs the simulator"/></testcase>
  <testcase classname="tests.test_b" name="test_err"><error message="fixture broke">y</error></testcase>
 </testsuite>
 <testsuite name="memcheck"><testcase classname="tests.test_k" name="test_launch"/></testsuite>
</testsuites>
"""
_LOG = """===== gpu-check step suite: the suite (limit 300 s)
== 1 failed, 1 passed, 1 skipped, 1 error in 2.0s ==
===== gpu-check step suite: FAILED (exit 1) in 2 s
===== gpu-check step memcheck: compute-sanitizer (limit 90 s)
========= Invalid __global__ write of size 4 bytes
=========     at ga_copy__f4__f8__1__i32__g+0x1d0
========= ERROR SUMMARY: 1 error
===== gpu-check step memcheck: FAILED (exit 86) in 40 s
"""


def test_the_report_counts_failures_skips_and_sanitizer_findings(tmp_path):
    (tmp_path / "j.xml").write_text(_JUNIT)
    (tmp_path / "log").write_text(_LOG)
    (tmp_path / "env").write_text("Fri Nov 21 20:30:00 UTC 2026\nLinux 6.8.0 x86_64\nPython 3.12.3\n"
                                  "commit: abc1234\nNVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB, 9.0\n"
                                  "CUDA driver: 13.0 (cuDriverGetVersion 13000)\nNVRTC: 13.0\n")
    steps = [{"name": "suite", "rc": 1, "ok": False, "seconds": 2, "limit_s": 300,
              "timed_out": False, "skipped": None, "summary": "1 failed, 1 passed in 2.0s"},
             {"name": "memcheck", "rc": 86, "ok": False, "seconds": 40, "limit_s": 90,
              "timed_out": False, "skipped": None},
             {"name": "racecheck", "rc": None, "ok": True, "skipped": "no compute-sanitizer"}]
    (tmp_path / "s.json").write_text(json.dumps({"steps": steps}))
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check" / "report.py"),
                        "--steps", str(tmp_path / "s.json"), "--log", str(tmp_path / "log"),
                        "--env", str(tmp_path / "env"), "--junit", str(tmp_path / "j.xml"),
                        "--bench-json", str(tmp_path / "none.json"),
                        "--out", str(tmp_path / "r.md"), "--summary"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    md = (tmp_path / "r.md").read_text()
    assert "1 passed, 1 failed, 1 errors, 1 skipped" in md
    assert "`tests/test_a.py::test_bad`: assert 1 == 2" in md
    assert "| 1 | needs the simulator |" in md
    assert "ERROR SUMMARY: 1 error" in md and "Invalid __global__ write of size 4 bytes" in md
    assert "racecheck: skipped: no compute-sanitizer" in md
    assert "- Commit: abc1234" in md and "NVRTC: 13.0" in md and "driver 580.65.06" in md
    assert "memcheck: ========= ERROR SUMMARY: 1 error" in p.stdout
    assert "suite failed: tests/test_a.py::test_bad" in p.stdout


# --------------------------------------------------- benchmarks over the stand-in
def test_benchmarks_over_the_stand_in_write_tmp_results_and_skip_the_peers(tmp_path):
    code = ("import sys; sys.path.insert(0, 'bench'); import _harness as h\n"
            "print(h.results_path('x', '.md').name); print(h._load_peer('torch')[1])\n"
            "print(h.SIZES['copy'])\n")
    env = {**os.environ, "GPUARRAY_BACKEND": "cuda", "GPUARRAY_STANDIN": str(tmp_path),
           "GPUARRAY_BENCH_MODE": "quick",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    name, reason, sizes = p.stdout.splitlines()
    assert name.startswith("tmp-x-cuda-")
    assert "stand-in" in reason
    assert max(eval(sizes)) < MiB   # the simulator copies on the CPU: kilobyte sizes


def test_quick_mode_on_a_gpu_measures_at_perf_sizes():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("_harness_sizes", ROOT / "bench" / "_harness.py")
        h = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = h  # its dataclasses look the module up by name
        spec.loader.exec_module(h)
    finally:
        sys.path.remove(str(ROOT / "bench"))
        sys.modules.pop("_harness_sizes", None)
    q, full = h._SIZES["quick-gpu"], h._SIZES["full"]
    assert set(q) == set(full) == set(h._SIZES["quick"])
    assert 256 * MiB in q["transfer"]                   # PERF.md: pinned transfers, 256 MiB
    assert q["copy"] == [max(full["copy"])]             # contiguous copy at 1 GiB
    assert q["fill_big"] == full["fill_big"]
    for key in ("strided", "transpose", "permute", "astype", "alloc_copy"):
        assert q[key] == full[key], key


def test_the_tree_hash_names_the_sources_that_ran(tmp_path):
    """The device's git metadata can lag (both H200 runs of 2026-11-28 said aa3ff9f): the
    env step also records a hash of the sources, which changes with any of their bytes."""
    for part in ("gpuarray", "tests"):
        (tmp_path / part).mkdir()
    (tmp_path / "gpuarray" / "a.py").write_text("x = 1\n")
    (tmp_path / "tests" / "t.py").write_text("y = 2\n")
    (tmp_path / "gpuarray" / "__pycache__").mkdir()
    first = run_py.tree_hash(tmp_path)
    (tmp_path / "gpuarray" / "__pycache__" / "a.pyc").write_bytes(b"ignored")
    assert run_py.tree_hash(tmp_path) == first
    (tmp_path / "gpuarray" / "a.py").write_text("x = 2\n")
    assert run_py.tree_hash(tmp_path) != first
