#!/usr/bin/env python3
"""``make gpu-check``: the one prepared run on a lent GPU machine (issue 27).

A GPU machine is lent for 15 minutes of device time in all, so this script is
the whole visit: every step below runs under its own time limit (a hang costs
that step, never the run), every step runs even after an earlier one failed,
and a total budget (``--budget``, 480 s) leaves the report its time.

Steps, in order (``--only`` picks some, by name):

``wheels``    install the wheels carried in ``.whl/`` (packages the machine
              lacks, e.g. apache-tvm-ffi) into a scratch folder on PYTHONPATH;
``build``     the C DLPack core in place (``setup.py build_ext --inplace``);
              when it fails the ctypes core runs and the report says so;
``env``       date, commit, host, Python, DLPack core, nvidia-smi, the CUDA
              driver and NVRTC versions, package versions;
``suite``     the whole suite on the ``cuda`` backend with pytest-xdist
              (``-n 8``, less the tests marked ``serial``) when importable,
              else serially: the doctests and the peer interop tests
              (CuPy/PyTorch/JAX/numba-cuda on device memory) are in it;
``serial``    the tests marked ``serial``, in one process (after ``suite``);
``readme``    the README's example, run as the README says for a GPU, its
              output compared with the one the README shows;
``peer-exports`` ``tools/gpu_check/peer_exports.py``: what each peer exports
              (CAI dicts with the bytes at their pointers, DLPack capsule
              fields) for a few dtypes and layouts, into the log: an interop
              failure is then gpuarray's or the peer's by the record;
``ptx-vs-gpu`` ``sim/tools/ptx_compare/ptx_compare.py`` (gpuarray-sim's referee): each PTX program (the
              per-instruction programs of sim/tests/ptx/test_ptx_ops.py, numba-cuda's
              fixtures, ``kernels/`` as NVRTC's PTX) on the GPU and on the
              simulator's PTX executor, same inputs, outputs bit for bit;
              differences in the executor's documented unknown classes are
              findings, others fail the step (``.ptx.json``: per program);
``bench``     ``bench/`` in quick mode (``GPUARRAY_BENCH_MODE=quick``): on a
              GPU each bandwidth case at its PERF.md size, ratios to the raw
              driver call, CuPy and PyTorch in the same process; and the
              memory-manager rows (``bench/test_memory_managers.py``: the
              default manager against the stream-ordered pool, host time and
              driver calls per operation), which decide the default manager
              (docs/guide/memory.rst);
``memcheck``  ``compute-sanitizer --tool memcheck`` over the kernel
              differential tests (sim/tests/hostrt/test_kernels_reference.py, cuda
              launches), on a reduced case set (``-k``; see MEMCHECK_K);
``racecheck`` the same with ``--tool racecheck`` (RACECHECK_K);
``report``    ``tools/gpu_check/report.py``: the Markdown report and a summary.

Outputs (at most 8 files: the device tool brings back 8), in ``$OUT`` when it
is set, else in ``bench/results/``, named ``gpu-check-<UTC stamp>.*``
(``tmp-gpu-check-*``, git-ignored, when no GPU ran them: simulator or
stand-in): ``.log`` (everything the steps printed), ``.junit.xml`` (one
``testsuite`` per pytest step), ``.bench.json``, ``.env.txt``,
``.steps.json`` (each step's command, limit, status, seconds), ``.ptx.json``
(the ptx-vs-gpu comparison) and ``.md`` (the report).  Standard library only:
it runs on the GPU machine's system python3, which has no package registry.

Exit status: 0 when every step that ran passed (a step skipped for a stated
reason, e.g. no compute-sanitizer over the stand-in, is not a failure).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNEL_TESTS = "sim/tests/hostrt/test_kernels_reference.py"
# The reduced case sets of the sanitizer steps (pytest -k over KERNEL_TESTS, cuda
# launches only): every launch family (copy with conversions, fill, transposes
# with shared-memory tiles) for memcheck; the shared-memory kernels and two
# copies for racecheck, whose instrumentation of shared memory is the slower.
MEMCHECK_K = "cuda and (launch_copy or launch_fill or array_transpose_copy)"
RACECHECK_K = "cuda and (array_transpose_copy or launch_copy and (f4-f8 or u1-u1))"
SANITIZER_PLACES = ("/usr/local/cuda/bin/compute-sanitizer",
                    "/usr/local/cuda/compute-sanitizer/compute-sanitizer",
                    "/usr/local/cuda-*/bin/compute-sanitizer",
                    "/opt/nvidia/*/compute-sanitizer/compute-sanitizer",
                    "/opt/nvidia/*/compute-sanitizer")
#: The suite: both distributions' tests (gpuarray's, gpuarray-sim's).
SUITE = ("tests", "sim/tests")
#: The folders a source-tree run puts on PYTHONPATH: gpuarray (the root) and gpuarray-sim.
TREES = (ROOT, ROOT / "sim")
WORKERS = 8
BUDGET_S = 480.0
TEST_TIMEOUT_S = 150  # one test, when pytest-timeout is installed


# ------------------------------------------------------------------ helpers
def standin_active(env: dict[str, str]) -> bool:
    """Whether the stand-in driver is in place (``python -m gpuarray standin -- ...``)."""
    return bool(env.get("GPUARRAY_STANDIN", "").strip())


def imports_this_tree() -> bool:
    """Whether this interpreter imports gpuarray from this tree already (an editable install).

    Then PYTHONPATH stays as it is: with the tree on it, pip would take the
    editable install's metadata in the tree for an installed gpuarray
    (tests/package/test_packaging.py resolves the extras; seen in the rehearsal).  On
    the GPU machine nothing is installed and the tree goes on PYTHONPATH.
    """
    spec = importlib.util.find_spec("gpuarray")
    origin = spec.origin if spec is not None else None
    return origin is not None and Path(origin).resolve().is_relative_to(ROOT)


def entry_points_of(pyproject: str) -> str:
    """The ``entry_points.txt`` of a distribution, from its ``pyproject.toml`` text.

    Only the ``[project.entry-points."GROUP"]`` tables with ``name = "object"``
    lines (what gpuarray-sim declares); the standard library of Python 3.10
    has no TOML parser.
    """
    out, group = [], None
    for line in pyproject.splitlines():
        head = re.fullmatch(r"""\[project\.entry-points\.["']([^"']+)["']\]\s*""", line)
        if head:
            group = head.group(1)
            out.append(f"\n[{group}]")
        elif line.startswith("["):
            group = None
        elif group and "=" in line and not line.lstrip().startswith("#"):
            name, value = (x.strip().strip("\"'") for x in line.split("=", 1))
            out.append(f"{name} = {value}")
    return "\n".join(out).lstrip() + "\n"


def register_tree(site: Path) -> None:
    """Make gpuarray-sim's entry points visible to a source-tree run (PYTHONPATH, nothing installed).

    gpuarray finds its simulator (``GPUARRAY_BACKEND=sim``, ``python -m gpuarray
    standin``) through entry points, which only installed metadata declares: a
    ``.dist-info`` with ``entry_points.txt`` in ``site`` (on PYTHONPATH) declares
    them, the code coming from ``sim/`` on PYTHONPATH.
    """
    text = (ROOT / "sim" / "pyproject.toml").read_text(encoding="utf-8")
    version = re.search(r'^version = "([^"]+)"', text, re.M)
    info = site / f"gpuarray_sim-{version.group(1) if version else '0'}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: gpuarray-sim\nVersion: {version.group(1) if version else '0'}\n",
        encoding="utf-8")
    (info / "entry_points.txt").write_text(entry_points_of(text), encoding="utf-8")


def serial_marker() -> bool:
    """Whether the suite registers the ``serial`` marker (tests that cannot share a process).

    pytest's ``--strict-markers`` refuses ``-m serial`` until it is registered.
    """
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    text += (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
    return re.search(r"""["']serial\s*:""", text) is not None


def suite_fallback(run: Run, step: Step, output: str) -> Step | None:
    """The suite again in one process when xdist's workers collected different tests."""
    if step.name != "suite" or "Different tests were collected between" not in output:
        return None
    return Step("suite1", "the suite in one process (the xdist workers collected different "
                "tests)", 390 * run.scale, 60 * run.scale, junit=run.work / "suite1.xml",
                argv=_pytest(run, "-p", "no:xdist", f"--junitxml={run.work / 'suite1.xml'}",
                             *SUITE))


def find_sanitizer() -> str | None:
    """compute-sanitizer on PATH, else in the CUDA toolkit's usual folders."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for pattern in SANITIZER_PLACES:
        for path in sorted(glob.glob(pattern)):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


def sanitizer_skip_reason(env: dict[str, str]) -> str | None:
    """Why the sanitizer steps cannot run here (None: they can)."""
    if env.get("GPUARRAY_BACKEND", "cuda") != "cuda":
        return f"GPUARRAY_BACKEND={env['GPUARRAY_BACKEND']}: compute-sanitizer needs the cuda backend"
    if standin_active(env):
        return ("the stand-in driver is in place (GPUARRAY_STANDIN): compute-sanitizer "
                "instruments kernels on a real GPU, and the stand-in's kernels run on the CPU")
    if find_sanitizer() is None:
        return ("compute-sanitizer not found (PATH, " + ", ".join(SANITIZER_PLACES[:2]) + "): "
                "it comes with the CUDA toolkit")
    return None


def step_summary(text: str) -> str | None:
    """pytest's summary line, else the last ``ptx-vs-gpu: N programs: ...`` line."""
    found = pytest_summary(text)
    if found is None:
        lines = [ln.strip() for ln in text.splitlines()
                 if re.match(r"ptx-vs-gpu: \d+ programs:", ln)]
        found = lines[-1] if lines else None
    return found


def pytest_summary(text: str) -> str | None:
    """pytest's last summary line (``3 passed, 1 skipped in 2.0s``, ``=``-framed or not)."""
    pat = re.compile(r"^=*\s*(\d+ (passed|failed|skipped|errors?|deselected|xfailed|xpassed|"
                     r"warnings?)\b|no tests ran\b).* in [\d.]+s\b.*$")
    lines = [ln.strip() for ln in text.splitlines() if pat.match(ln.strip())]
    return lines[-1].strip("= ") if lines else None


def wheel_fits(name: str, version: tuple[int, int] = sys.version_info[:2]) -> bool:
    """Whether a wheel's Python tag fits this interpreter (``cp312``, ``abi3`` from below, ``py3``)."""
    parts = Path(name).name[:-len(".whl")].split("-")
    if len(parts) < 5:
        return False
    py_tags, abi = parts[-3].split("."), parts[-2]
    here = version[0] * 100 + version[1]
    for tag in py_tags:
        if tag in ("py3", f"py{version[0]}{version[1]}", f"cp{version[0]}{version[1]}"):
            return True
        m = re.fullmatch(r"cp(\d)(\d+)", tag)
        if m and abi == "abi3" and int(m.group(1)) * 100 + int(m.group(2)) <= here:
            return True
    return False


def merge_junit(parts: list[tuple[str, Path]], out: Path) -> int:
    """One ``<testsuites>`` holding each pytest step's suite, named after the step."""
    root = ET.Element("testsuites")
    n = 0
    for step, path in parts:
        if not path.is_file():
            continue
        try:
            tree = ET.parse(path)
        except ET.ParseError as e:  # a run killed while writing it
            bad = ET.SubElement(root, "testsuite", name=step, errors="1", tests="0")
            ET.SubElement(bad, "system-err").text = f"unreadable JUnit XML {path}: {e}"
            continue
        suites = [tree.getroot()] if tree.getroot().tag == "testsuite" else list(tree.getroot())
        for s in suites:
            s.set("name", step)
            root.append(s)
            n += 1
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)
    return n


# -------------------------------------------------------------------- steps
@dataclasses.dataclass
class Step:
    """One step: its command (or the reason it cannot run), its time limit and a floor."""

    name: str
    title: str
    cap: float           # seconds it may take at most
    floor: float         # the least worth starting it with (reserved by the steps before)
    argv: list[str] | None = None
    skip: str | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    ok_codes: tuple[int, ...] = (0,)
    junit: Path | None = None


@dataclasses.dataclass
class Run:
    """What the steps share: interpreter, folders, output names, environment."""

    python: str
    work: Path
    out: Path
    base: str
    env: dict[str, str]
    workers: int
    scale: float

    def path(self, suffix: str) -> Path:
        return self.out / f"{self.base}{suffix}"


def _pytest(run: Run, *args: str) -> list[str]:
    # no:benchmark -- the suite has no benchmarks; pytest-benchmark 5.2 (the GPU image's)
    # warns at configure time when xdist is active, and the project's
    # ``filterwarnings = error`` made that an INTERNALERROR (first GPU run, 2026-11-28)
    argv = [run.python, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:benchmark",
            "-q", "-rfE"]
    if importlib.util.find_spec("pytest_timeout") is not None:
        argv += [f"--timeout={int(TEST_TIMEOUT_S * run.scale)}"]
    return argv + list(args)


def plan(run: Run) -> list[Step]:
    """The steps of a run, in order (see the module docstring)."""
    py, w, s = run.python, run.work, run.scale
    carried = sorted(glob.glob(str(ROOT / ".whl" / "*.whl")))
    wheels = [w_ for w_ in carried if wheel_fits(w_)]
    if not carried:
        no_wheels = "no wheels in .whl/ (see docs/validation.md: what the GPU machine lacks)"
    else:
        no_wheels = (f"no wheel in .whl/ is for Python {sys.version_info[0]}."
                     f"{sys.version_info[1]}: they are for the GPU machine's python3 ("
                     + ", ".join(Path(x).name for x in carried) + ")")
    steps = [
        Step("wheels", "install the carried wheels", 60 * s, 5 * s,
             argv=[py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                   "--no-cache-dir", "--upgrade", "--target", str(w / "site"), *wheels]
             if wheels else None,
             skip=None if wheels else no_wheels),
        Step("build", "the C DLPack core, in place", 90 * s, 10 * s,
             argv=[py, "setup.py", "-q", "build_ext", "--inplace"]),
        Step("env", "machine, driver and versions", 60 * s, 10 * s,
             env={"GPU_CHECK_ENV_FILE": str(run.path(".env.txt"))},
             argv=[py, str(Path(__file__)), "env"]),
    ]
    xdist = importlib.util.find_spec("xdist") is not None and run.workers > 1
    suite_junit, serial_junit = w / "suite.xml", w / "serial.xml"
    serial = serial_marker()
    if xdist:
        # worksteal: idle workers take queued tests from busy ones (as make test)
        select = ["-m", "not serial"] if serial else []
        steps.append(Step("suite", f"the suite on {run.workers} workers (pytest-xdist)",
                          300 * s, 60 * s, junit=suite_junit,
                          argv=_pytest(run, "-p", "xdist", "-n", str(run.workers), "--dist",
                                       "worksteal", *select, f"--junitxml={suite_junit}",
                                       *SUITE)))
        steps.append(Step("serial", "the tests marked serial, in one process", 120 * s, 20 * s,
                          junit=serial_junit, ok_codes=(0, 5),
                          skip=None if serial else
                          "no `serial` marker is registered (pyproject.toml): every test ran "
                          "in the suite step",
                          argv=_pytest(run, "-p", "no:xdist", "-m", "serial",
                                       f"--junitxml={serial_junit}", *SUITE)
                          if serial else None))
    else:
        why = ("pytest-xdist is not installed" if run.workers > 1
               else f"--workers {run.workers}")
        steps.append(Step("suite", f"the suite in one process ({why})", 390 * s, 60 * s,
                          junit=suite_junit,
                          argv=_pytest(run, "-p", "no:xdist", f"--junitxml={suite_junit}",
                                       *SUITE)))
    steps.append(Step("readme", "the README example on the GPU", 60 * s, 10 * s,
                      argv=[py, str(Path(__file__)), "readme"]))
    steps.append(Step("peer-exports", "what CuPy, PyTorch and JAX export (CAI, DLPack)",
                      60 * s, 10 * s,
                      argv=[py, str(Path(__file__).with_name("peer_exports.py"))]))
    # ~10 s over the stand-in on 2 cores (the simulator's C++ builds, cold); after the
    # suite, whose PTX tests leave the same builds in the run's kernel cache
    steps.append(Step("ptx-vs-gpu", "PTX programs on the GPU and the simulator, bit for bit",
                      60 * s, 20 * s,
                      argv=[py, str(ROOT / "sim" / "tools" / "ptx_compare" / "ptx_compare.py"),
                            "--json", str(run.path(".ptx.json"))]))
    bench_json = run.path(".bench.json")
    steps.append(Step("bench", "bench/ in quick mode", 120 * s, 30 * s,
                      env={"GPUARRAY_BENCH_MODE": "quick"},
                      argv=[py, "-m", "pytest", "-p", "no:cacheprovider", "-q", "bench",
                            "--benchmark-only", f"--benchmark-json={bench_json}"]))
    why = sanitizer_skip_reason(run.env)
    san = find_sanitizer() if why is None else None
    for tool, k in (("memcheck", MEMCHECK_K), ("racecheck", RACECHECK_K)):
        junit = w / f"{tool}.xml"
        extra = ["--report-api-errors", "no"] if tool == "memcheck" else []
        steps.append(Step(
            tool, f"compute-sanitizer --tool {tool}, reduced kernel cases", 90 * s, 30 * s,
            junit=junit, skip=why,
            argv=None if san is None else
            [san, "--tool", tool, "--error-exitcode", "86", "--print-limit", "50", *extra,
             *_pytest(run, "-p", "no:xdist", "-m", "gpu", "-k", k, f"--junitxml={junit}",
                      KERNEL_TESTS)]))
    steps.append(Step("report", "tools/gpu_check/report.py: the report", 60 * s, 15 * s,
                      argv=[py, str(Path(__file__).with_name("report.py")),
                            "--steps", str(run.path(".steps.json")),
                            "--log", str(run.path(".log")),
                            "--env", str(run.path(".env.txt")),
                            "--junit", str(run.path(".junit.xml")),
                            "--bench-json", str(bench_json),
                            "--out", str(run.path(".md")), "--summary"]))
    return steps


def run_step(step: Step, timeout: float, env: dict[str, str], log, echo=None) -> dict:
    """Run ``step.argv`` in its own process group; kill the group at ``timeout``."""
    t0 = time.monotonic()
    proc = subprocess.Popen(step.argv, cwd=ROOT, env={**env, **step.env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    captured: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace")
            captured.append(line)
            log.write(line)
            log.flush()
            if echo is not None:
                echo(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        rc = proc.wait(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        rc = proc.wait()
    reader.join(15)
    if not reader.is_alive() and proc.stdout is not None:  # else a process that left the
        proc.stdout.close()                                  # group still holds the pipe
    return {"rc": rc, "timed_out": timed_out, "seconds": round(time.monotonic() - t0, 1),
            "output": "".join(captured)}


# ---------------------------------------------------------------- main run
def main_run(args: argparse.Namespace) -> int:
    scale = float(os.environ.get("GPU_CHECK_TIME_SCALE", "1") or 1)
    budget = args.budget * scale
    started = time.monotonic()
    env = dict(os.environ)
    env.setdefault("GPUARRAY_BACKEND", "cuda")
    env["PYTHONUNBUFFERED"] = "1"
    # JAX takes 75% of the GPU's memory in every process that imports it:
    # eight test workers would starve one another.
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    not_gpu = env["GPUARRAY_BACKEND"] != "cuda" or standin_active(env)
    out = Path(args.out or env.get("OUT") or ROOT / "bench" / "results")
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = f"{'tmp-' if not_gpu else ''}gpu-check-{stamp}"
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    env["GPUARRAY_KERNEL_CACHE_DIR"] = str(work / "kernel-cache")
    if not imports_this_tree():  # nothing installed: both distributions from the tree
        register_tree(work / "site")
    env["PYTHONPATH"] = os.pathsep.join(
        ([] if imports_this_tree() else [str(t) for t in TREES]) + [str(work / "site")]
        + [p for p in [env.get("PYTHONPATH")] if p])
    run = Run(args.python, work, out, base, env, args.workers, scale)
    steps = plan(run)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {s.name for s in steps}
        if unknown:
            print(f"gpu-check: no step named {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        steps = [s for s in steps if s.name in wanted or s.name == "report"]
    results: list[dict] = []
    log_path = run.path(".log")
    print(f"gpu-check: {len(steps)} steps, budget {budget:.0f} s, outputs {out}/{base}.*"
          + (" (not a GPU: simulator or stand-in)" if not_gpu else ""), flush=True)
    with open(log_path, "w", encoding="utf-8") as log:
        i = -1
        while i + 1 < len(steps):
            i += 1
            step = steps[i]
            left = budget - (time.monotonic() - started)
            reserve = sum(s.floor for s in steps[i + 1:] if s.argv is not None)
            timeout = min(step.cap, left - reserve)
            if step.name == "report":  # the report always runs, with at least its floor
                timeout = max(timeout, step.floor)
            entry = {"name": step.name, "title": step.title, "argv": step.argv,
                     "limit_s": round(max(timeout, 0.0), 1), "rc": None, "seconds": 0.0,
                     "timed_out": False, "skipped": step.skip, "ok": True}
            if step.name == "report":
                _finish(run, steps, results)
            if step.argv is None:
                entry["skipped"] = step.skip or "nothing to run"
            elif timeout < step.floor and step.name != "report":
                entry["skipped"] = (f"the run's budget ({budget:.0f} s) is spent: "
                                    f"{max(left, 0):.0f} s left, {reserve:.0f} s kept for later steps")
            header = f"===== gpu-check step {step.name}: {step.title}"
            if entry["skipped"]:
                line = f"{header}: SKIPPED: {entry['skipped']}"
                log.write(line + "\n")
                print(line, flush=True)
                results.append(entry)
                continue
            log.write(f"{header} (limit {timeout:.0f} s)\n$ {' '.join(step.argv)}\n")
            log.flush()
            print(f"{header} (limit {timeout:.0f} s) ...", flush=True)
            echo = (lambda s: print(s, end="", flush=True)) if step.name == "report" else None
            r = run_step(step, timeout, env, log, echo)
            entry.update(rc=r["rc"], seconds=r["seconds"], timed_out=r["timed_out"],
                         ok=r["rc"] in step.ok_codes and not r["timed_out"],
                         summary=step_summary(r["output"]))
            status = ("TIMED OUT" if r["timed_out"] else "ok" if entry["ok"]
                      else f"FAILED (exit {r['rc']})")
            tail = f": {entry['summary']}" if entry.get("summary") else ""
            line = f"===== gpu-check step {step.name}: {status} in {r['seconds']:.0f} s{tail}"
            log.write(line + "\n")
            log.flush()
            print(line, flush=True)
            results.append(entry)
            fallback = None if entry["ok"] else suite_fallback(run, step, r["output"])
            if fallback is not None:
                steps.insert(i + 1, fallback)
        _write_steps(run, results)
    shutil.rmtree(work, ignore_errors=True)
    failed = [e["name"] for e in results if not e["ok"]]
    total = time.monotonic() - started
    print(f"gpu-check: {len(results)} steps in {total:.0f} s; "
          + (f"FAILED: {', '.join(failed)}" if failed else "every step that ran passed")
          + f"; outputs: {', '.join(sorted(p.name for p in out.glob(base + '.*')))} in {out}",
          flush=True)
    return 1 if failed else 0


def _write_steps(run: Run, results: list[dict]) -> None:
    with open(run.path(".steps.json"), "w", encoding="utf-8") as f:
        json.dump({"steps": results, "workers": run.workers, "scale": run.scale}, f, indent=1)


def _finish(run: Run, steps: list[Step], results: list[dict]) -> None:
    """Before the report: the merged JUnit XML and the steps so far."""
    merge_junit([(s.name, s.junit) for s in steps if s.junit is not None],
                run.path(".junit.xml"))
    env_text = ""
    for e in results:
        if e["name"] == "env":
            env_text = "env step: " + ("skipped" if e["skipped"] else f"exit {e['rc']}")
    if not run.path(".env.txt").exists():
        run.path(".env.txt").write_text(f"{time.strftime('%c UTC', time.gmtime())}\n{env_text}\n")
    _write_steps(run, results + [{"name": "report", "title": "", "rc": None, "ok": True,
                                  "skipped": None, "seconds": 0.0, "timed_out": False,
                                  "argv": None, "limit_s": 0}])


# ----------------------------------------------------------- sub-commands
TREE_PARTS = ("gpuarray", "sim", "kernels", "tests", "bench", "tools", "pyproject.toml", "setup.py",
              "Makefile")


def tree_hash(root: Path = ROOT) -> str:
    """A hash of the sources that run (names and bytes of the files under TREE_PARTS).

    The device machine's copy of the tree carried the git metadata of the session's
    start: both H200 runs of 2026-11-28 said "commit: aa3ff9f" while the second ran three
    commits later.  ``python3 tools/gpu_check/run.py tree-hash`` at a commit gives the
    same value when that commit is what ran.
    """
    h = hashlib.sha256()
    for part in TREE_PARTS:
        base = root / part
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for f in files:
            rel = f.relative_to(root).as_posix()
            if "__pycache__" in rel or f.suffix in (".so", ".pyc") or "/results/" in rel:
                continue
            h.update(rel.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def main_env(out_file: Path | None) -> int:
    """Print (and write) the machine's description for the report (``env`` step)."""
    lines: list[str] = [time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())]
    u = os.uname()
    lines.append(f"{u.sysname} {u.release} {u.machine}")
    lines.append(f"Python {sys.version.split()[0]}")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                capture_output=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    lines.append(f"commit: {commit or '-- (no git checkout here: the session records it)'}")
    lines.append(f"tree: {tree_hash()} (tools/gpu_check/run.py tree-hash at a commit: the "
                 "same value when that commit ran; the commit line can lag)")
    if standin_active(dict(os.environ)):
        lines.append(f"stand-in: {os.environ['GPUARRAY_STANDIN']} (the simulator, not a GPU)")
    try:
        from gpuarray.interop import _dlpack_capsule
        lines.append(f"DLPack core: {_dlpack_capsule.CORE_DESCRIPTION}")
    except Exception as e:
        lines.append(f"DLPack core: -- (import failed: {type(e).__name__}: {e})")
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,"
                              "compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        lines += ([ln for ln in smi.stdout.splitlines() if ln.strip()] if smi.returncode == 0
                  else [f"nvidia-smi: exit {smi.returncode}: {smi.stderr.strip()[:200]}"])
    except (OSError, subprocess.SubprocessError) as e:
        lines.append(f"nvidia-smi: not available ({type(e).__name__})")
    try:
        from gpuarray import _driver
        b = _driver.get_backend()
        b.init()
        v = b.driver_version()
        lines.append(f"CUDA driver: {v // 1000}.{v % 1000 // 10} (cuDriverGetVersion {v})")
        import gpuarray
        d = gpuarray.get_device()
        major, minor = d.compute_capability
        lines.append(f"gpuarray device: {d.name}, compute capability {major}.{minor}, "
                     f"{d.total_memory >> 20} MiB")
    except Exception as e:
        lines.append(f"CUDA driver: -- ({type(e).__name__}: {e})")
    try:
        from gpuarray._kernels import _nvrtc
        major, minor = _nvrtc.nvrtc_version()
        lines.append(f"NVRTC: {major}.{minor}")
    except Exception as e:
        lines.append(f"NVRTC: -- ({type(e).__name__}: {e})")
    import importlib.metadata as md
    for p in ("cuda-bindings", "cuda-core", "cuda-pathfinder", "nvidia-cuda-nvrtc",
              "nvidia-cuda-nvrtc-cu12", "numpy", "cupy-cuda13x", "cupy-cuda12x", "torch", "jax",
              "jaxlib", "numba", "numba-cuda", "apache-tvm-ffi", "ml_dtypes", "pytest",
              "pytest-xdist", "pytest-benchmark", "pytest-timeout", "hypothesis"):
        try:
            lines.append(f"{p} {md.version(p)}")
        except md.PackageNotFoundError:
            lines.append(f"{p}: not installed")
    san = find_sanitizer()
    lines.append(f"compute-sanitizer: {san or 'not found'}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out_file is not None:
        out_file.write_text(text, encoding="utf-8")
    return 0


FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def readme_example() -> tuple[str, str]:
    """The README's ``example.py`` and the output it shows."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [(m.group(1), m.group(2)) for m in
              FENCE.finditer(text, text.index("Save this as `example.py`"))]
    (lang, code), _, (out_lang, expected) = blocks[:3]
    if (lang, out_lang) != ("python", "text"):
        raise ValueError(f"README: the example's blocks are {lang!r} and {out_lang!r}")
    return code, expected


def main_readme() -> int:
    """Run the README's example as it says for a GPU (``python example.py``); compare."""
    code, expected = readme_example()
    with tempfile.TemporaryDirectory() as d:
        Path(d, "example.py").write_text(code, encoding="utf-8")
        env = dict(os.environ)
        p = subprocess.run([sys.executable, "example.py"], cwd=d, env=env, text=True,
                           capture_output=True, timeout=300)
    print(p.stdout, end="")
    print(p.stderr, end="", file=sys.stderr)
    if p.returncode != 0:
        print(f"README example: exit {p.returncode}")
        return 1
    if p.stdout != expected:
        print(f"README example: output differs from the README's:\n{expected}")
        return 1
    print("README example: output as the README shows")
    return 0


DEVICE_RUN = Path(__file__).with_name("device_run.json")
# pip's flags for wheels of the GPU machine's python3 (3.12, x86-64 Linux).
_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
              "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")


def main_fetch_wheels() -> int:
    """Download the wheels device_run.json names into .whl/ (here, where pip reaches PyPI)."""
    spec = json.loads(DEVICE_RUN.read_text(encoding="utf-8"))
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--python-version", "3.12", "--implementation", "cp",
            *(f"--platform={p}" for p in _PLATFORMS), "-d", str(ROOT / ".whl"), *spec["wheels"]]
    print("$ " + " ".join(argv), flush=True)
    return subprocess.run(argv).returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="?", default="run",
                   choices=["run", "env", "readme", "fetch-wheels", "tree-hash"],
                   help="run (default): every step; env, readme: one step's own work; "
                        "fetch-wheels: download the carried wheels into .whl/ (before the run)")
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter of the steps (make passes $(PYTHON))")
    p.add_argument("--out", help="output folder (default: $OUT, else bench/results)")
    p.add_argument("--budget", type=float, default=BUDGET_S,
                   help="seconds for the whole run (times GPU_CHECK_TIME_SCALE)")
    p.add_argument("--workers", type=int,
                   default=int(os.environ.get("GPU_CHECK_WORKERS", WORKERS)),
                   help="pytest-xdist workers of the suite step (GPU_CHECK_WORKERS)")
    p.add_argument("--only", help="comma-separated step names (the report always runs)")
    args = p.parse_args(argv)
    if args.what == "env":
        env_out = os.environ.get("GPU_CHECK_ENV_FILE")
        return main_env(Path(env_out) if env_out else None)
    if args.what == "readme":
        return main_readme()
    if args.what == "fetch-wheels":
        return main_fetch_wheels()
    if args.what == "tree-hash":
        print(tree_hash())
        return 0
    return main_run(args)


if __name__ == "__main__":
    sys.exit(main())
