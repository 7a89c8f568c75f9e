"""numba-cuda's kernel tests without a GPU: the stand-in driver against numba's own simulator.

Simulator rows (PERF.md: "numba-cuda's kernel tests without a GPU").  One
run executes the same eight modules of numba-cuda 0.30.4's ``cudapy`` suite
(:data:`MODULES`: atomics, warp operations, synchronisation, reductions and
four whole programs), unmodified, with numba-cuda's pytest settings
(``sim/tools/numba_driver``) and two pytest-xdist workers, in this order:

1. ``cudasim``: under ``NUMBA_ENABLE_CUDASIM=1`` (numba re-runs each
   kernel's Python in threads; it skips what it cannot run);
2. ``standin-cold``: over the stand-in driver (``python -m gpuarray_sim
   standin``) with an empty kernel cache (``GPUARRAY_KERNEL_CACHE_DIR`` a
   fresh folder: CI's case);
3. ``standin-warm``: the same again with that cache;
4. ``cudasim`` again (its two wall times say how much the machine's load
   moved during the run).

Each row is one command's wall time (pytest-benchmark's columns: one round);
``extra_info`` holds the counts (passed, skipped, failed), the wall time of
each module (the sum of its tests' times in the JUnit report), the ratio to
cudasim (the mean of its two runs) and, for the stand-in rows, the
simulator's split (``gpuarray_sim._phases``, summed over the run's
processes): ``parse`` and ``translate`` (PTX to syntax tree, to C++ or the
interpreter's form), ``build`` (the C++ compiler), ``load`` (cache read,
``dlopen``), ``execute`` (the fiber runtime), ``launch`` (a launch's host
side, ``execute`` included) and ``driver`` (every driver call the stand-in
served, all of the above included); the rest of the wall time is numba-cuda
and pytest.  The table is printed at the end of the run.

PERF.md's targets: warm less wall time than cudasim, cold at most 2x.  Two
modules do not run the same work under both (:data:`SHRUNK_UNDER_CUDASIM`:
numba-cuda's tests shrink them for cudasim), and cudasim never compiles a
kernel (the stand-in runs numba-cuda's whole NVVM compilation): the table
therefore also sums the modules of equal work, and the split says how much
of the stand-in's time is the simulator's.

It takes minutes and needs numba-cuda (``.venv-peers``, which ``make
test-numba-cudapy`` makes), so it runs only when asked:
``GPUARRAY_BENCH_CUDAPY=1`` (``make bench-cudapy``);
``GPUARRAY_BENCH_CUDAPY_PYTHON`` names another interpreter with numba-cuda.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from _harness import SIM

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "sim" / "tools"
PACKAGE = "numba.cuda.tests.cudapy"
#: The modules: atomics, warp operations, synchronisation, reductions, four whole programs.
MODULES = ("test_atomics", "test_warp_ops", "test_sync", "test_reduction",
           "test_blackscholes", "test_laplace", "test_matmul", "test_montecarlo")
#: Modules whose tests shrink the problem under cudasim (``config.ENABLE_CUDASIM``):
#: test_laplace 4x4 for 20 iterations instead of 256x256 for 1000 (4096x the
#: thread-iterations), test_matmul 16x16 instead of 1600x1600 (16,000x the
#: threads).  The table also sums the other modules, which run the same work.
SHRUNK_UNDER_CUDASIM = ("test_laplace", "test_matmul")
CONFIGS = ("cudasim", "standin-cold", "standin-warm", "cudasim-again")
PHASES = ("parse", "translate", "build", "load", "execute", "launch", "driver")


def _python() -> Path:
    return Path(os.environ.get("GPUARRAY_BENCH_CUDAPY_PYTHON")
                or ROOT / ".venv-peers" / "bin" / "python")


def _skip_reason() -> str | None:
    if not SIM:
        return "compares simulators: runs on the simulator only"
    if os.environ.get("GPUARRAY_BENCH_CUDAPY", "") != "1":
        return ("runs numba-cuda's kernel tests four times (minutes): set "
                "GPUARRAY_BENCH_CUDAPY=1 (make bench-cudapy)")
    py = _python()
    if not py.exists():
        return f"needs numba-cuda's environment at {py} (make test-numba-cudapy makes it)"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def _command(config: str, junit: Path) -> list[str]:
    py = str(_python())
    pytest_cmd = [py, "-m", "pytest", "-c", str(TOOLS / "numba_driver" / "pytest.ini"),
                  "--rootdir", str(TOOLS / "numba_driver"), "-n", "2", "-p", "timeout_plugin",
                  "--per-test-timeout=600", "-q", "--tb=native", f"--junitxml={junit}",
                  *(f"{PACKAGE}.{m}" for m in MODULES)]
    if config.startswith("cudasim"):
        return pytest_cmd
    return [py, "-m", "gpuarray_sim", "standin", "--", *pytest_cmd]


_OWNERS: dict[str, str] = {}


def _owners() -> dict[str, str]:
    """Test class and module-level test function names -> the module of :data:`MODULES` defining them.

    numba-cuda's plugin leaves the module out of the JUnit ``classname``
    (``.TestCudaAtomics``, or empty for a function), so the modules' sources
    say where each test lives.
    """
    if not _OWNERS:
        where = subprocess.run(
            [str(_python()), "-c", "import importlib.util as u; "
             f"print(u.find_spec('{PACKAGE}').submodule_search_locations[0])"],
            capture_output=True, text=True, env={**os.environ, "NUMBA_ENABLE_CUDASIM": "1"})
        folder = Path(where.stdout.strip())
        for m in MODULES:
            src = folder / f"{m}.py"
            if not src.exists():
                continue
            text = src.read_text()
            for name in re.findall(r"^class (\w+)", text, re.M):
                _OWNERS.setdefault(name, m)
            for name in re.findall(r"^def (test_\w+)", text, re.M):
                _OWNERS.setdefault(name, m)
    return _OWNERS


def _counts(junit: Path) -> tuple[dict[str, int], dict[str, float], dict[str, float]]:
    """Counts, seconds per module and seconds per passed test (``module::class::name``)."""
    counts = {"passed": 0, "skipped": 0, "failed": 0}
    per_module = {m: 0.0 for m in MODULES}
    passed: dict[str, float] = {}
    if not junit.exists():
        return counts, per_module, passed
    owners = _owners()
    for tc in ET.parse(junit).iter("testcase"):
        if tc.find("failure") is not None or tc.find("error") is not None:
            status = "failed"
        elif tc.find("skipped") is not None:
            status = "skipped"
        else:
            status = "passed"
        counts[status] += 1
        cls = tc.get("classname", "").split(".")[-1]
        m = owners.get(cls) or owners.get(tc.get("name", ""))
        seconds = float(tc.get("time") or 0.0)
        if m is not None:
            per_module[m] += seconds
        if status == "passed":
            passed[f"{m}::{cls}::{tc.get('name')}"] = seconds
    return counts, per_module, passed


def _phases(folder: Path) -> dict[str, float]:
    out = {p: 0.0 for p in PHASES}
    for f in folder.glob("phases-*.json"):
        for name, v in json.loads(f.read_text()).items():
            out[name] = out.get(name, 0.0) + v["seconds"]
    return out


_WORK = Path(tempfile.mkdtemp(prefix="gpuarray-bench-cudapy-"))
_CACHE = _WORK / "kernel-cache"
_RESULTS: dict[str, dict] = {}
_INFO: dict[str, dict] = {}


def _run(config: str) -> dict:
    """Run ``config`` once; its wall time, counts, per-module times and split."""
    junit = _WORK / f"{config}.xml"
    phases = _WORK / f"phases-{config}"
    _CACHE.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["PYTHONPATH"] = os.pathsep.join([str(TOOLS / "numba_driver"), str(TOOLS / "numba_cudapy")])
    env["GPUARRAY_KERNEL_CACHE_DIR"] = str(_CACHE)
    env["GPUARRAY_SIM_PHASES"] = str(phases)
    if config.startswith("cudasim"):
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    t = time.perf_counter()
    r = subprocess.run(_command(config, junit), env=env, cwd=_WORK, capture_output=True, text=True)
    wall = time.perf_counter() - t
    counts, per_module, passed = _counts(junit)
    return {"wall_s": wall, "returncode": r.returncode, **counts, "modules_s": per_module,
            "tests_s": passed,
            "phases_s": _phases(phases) if not config.startswith("cudasim") else {},
            "tail": r.stdout[-1500:] + r.stderr[-1500:]}


def _print_table(results: dict) -> None:
    lines = ["", "numba-cuda cudapy modules: " + ", ".join(MODULES),
             f"{'run':<14}{'wall s':>9}{'/cudasim':>10}{'passed':>8}{'skipped':>8}{'failed':>8}"]
    for config, r in results.items():
        lines.append(f"{config:<14}{r['wall_s']:>9.1f}{r.get('ratio_to_cudasim', 0.0):>10.2f}"
                     f"{r['passed']:>8}{r['skipped']:>8}{r['failed']:>8}")
    lines.append("per module (s, sum of test times): " + " ".join(f"{m[5:]:>11}" for m in MODULES))
    for config, r in results.items():
        lines.append(f"  {config:<33}" + " ".join(f"{r['modules_s'][m]:>11.1f}" for m in MODULES))
    # the tests that passed under every run, less the modules cudasim shrinks
    common = set.intersection(*(set(r.get("tests_s", {})) for r in results.values()))
    common = {t for t in common if t.split("::")[0] not in SHRUNK_UNDER_CUDASIM}
    lines.append(f"same work: the {len(common)} tests every run passed, less "
                 + ", ".join(SHRUNK_UNDER_CUDASIM) + " (s, sum of test times):")
    for config, r in results.items():
        lines.append(f"  {config:<33}{sum(r['tests_s'][t] for t in common):>11.1f}")
    lines.append("stand-in split (s, all processes): " + " ".join(f"{p:>9}" for p in PHASES))
    for config in ("standin-cold", "standin-warm"):
        if config not in results:
            continue
        p = results[config]["phases_s"]
        lines.append(f"  {config:<33}" + " ".join(f"{p.get(x, 0.0):>9.1f}" for x in PHASES))
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


@pytest.mark.parametrize("config", CONFIGS)
def test_cudapy_modules(benchmark, config):
    if config == "standin-warm" and "standin-cold" not in _RESULTS:
        _run("standin-cold")  # selected alone: warm the cache first (untimed)
    if config == "standin-cold" and _CACHE.exists():
        for f in _CACHE.rglob("*"):  # cold: nothing in the kernel cache
            if f.is_file():
                f.unlink()
    r = benchmark.pedantic(lambda: _run(config), rounds=1, iterations=1)
    _RESULTS[config] = r
    _INFO[config] = benchmark.extra_info
    benchmark.extra_info.update({k: v for k, v in r.items() if k not in ("tail", "tests_s")})
    benchmark.extra_info["suite"] = "cudapy-sim"
    benchmark.extra_info["modules"] = list(MODULES)
    sims = [_RESULTS[c]["wall_s"] for c in ("cudasim", "cudasim-again") if c in _RESULTS]
    if sims:  # the ratio to cudasim of every row so far (the mean of its runs)
        for c, res in _RESULTS.items():
            res["ratio_to_cudasim"] = res["wall_s"] / (sum(sims) / len(sims))
            _INFO[c]["ratio_to_cudasim"] = res["ratio_to_cudasim"]
    if config == CONFIGS[-1] or len(_RESULTS) == len(CONFIGS):
        _print_table(_RESULTS)
    assert r["passed"] > 0, r["tail"]  # the run ran (never a speed assertion)
