#!/usr/bin/env python
"""Run numba-cuda's own driver tests, unmodified, over gpuarray's stand-in driver.

Usage (in an environment with numba-cuda 0.30.4 and gpuarray installed:
``make test-numba-driver`` makes one, ``.venv-peers``)::

    python sim/tools/numba_driver/run.py [--workers N] [--junit FILE] [--time-limit S]
                                         [-- PYTEST_ARGS...]

What runs: ``numba.cuda.tests.cudadrv`` and
``numba.cuda.tests.cudapy.test_multiprocessing`` from the installed wheel,
with numba-cuda's pytest settings (``pytest.ini`` here: its repository's
``testing/pytest.ini``, which the wheel does not ship) and its conftest's
fixture and option (``numba_testing_plugin.py``), under
``python -m gpuarray standin --``: numba-cuda and cuda.core talk to the
real cuda-bindings, which load the stand-in ``libcuda.so.1`` over the
simulator.

The simulator executes the PTX of numba-cuda's kernels (its PTX executor,
``sim/gpuarray_sim/ptx``; under the stand-in an installed nvJitLink is
replaced by the stand-in's, which links numba-cuda's kernels -- LTO-IR,
compiled to PTX by the real library -- into the simulator's image).  :data:`NEEDS_KERNEL` lists each
test that still fails because a kernel cannot be executed, with what it
launches; :data:`OTHER_EXPECTED` lists the failures with another reason,
each stated.  The exit status is 0
when every failure is listed and every listed test failed (a listed test
that passes makes the list stale: 1), 1 otherwise, 2 when the run could not
be made.  The summary gives the counts and the wall time.

The run has a wall-clock limit (``--time-limit``, :data:`TIME_LIMIT`
seconds here; 0: none): a worker that dies can leave pytest-xdist waiting
for ever.  Past it the whole process group of the run is killed and the exit
status is 2, with what finished by then (``progress_plugin.py``'s log: the
counts, and the tests that started and never finished).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSION = "0.30.4"
PACKAGES = ("numba.cuda.tests.cudadrv", "numba.cuda.tests.cudapy.test_multiprocessing")

#: "module::Class::test" -> the kernel it needs executed that the simulator cannot execute.
NEEDS_KERNEL: dict[str, str] = {
    "test_cuda_driver::TestAcceleratedArchitecture::test_device_arch_specific":
        "CUDA C for sm_90a that uses tensormap.replace (a tensor-map instruction): the PTX "
        "executor implements no tensor maps, so the launch is refused "
        "(CUDA_ERROR_INVALID_IMAGE naming the instruction)",
}

#: Failures for another reason than a kernel launch, with that reason.
OTHER_EXPECTED: dict[str, str] = {
    "test_linker::TestLinker::test_set_registers_no_max":
        "needs the register count ptxas allocates for its kernel (> 57): the simulator "
        "compiles no machine code and reports 32 registers for every kernel",
}
#: What a NEEDS_KERNEL failure's message says (anything else is unexpected).
_KERNEL_MARKS = ("CUDA_ERROR_INVALID_IMAGE", "1 != 2")
#: Wall-clock limit of the run, seconds (about 1 minute on one worker; the limit is for a hang).
TIME_LIMIT = 900.0
#: Seconds between the SIGTERM and the SIGKILL of a run cut at its limit.
KILL_GRACE = 5.0

_progress_spec = importlib.util.spec_from_file_location("progress_plugin", HERE / "progress_plugin.py")
assert _progress_spec is not None and _progress_spec.loader is not None
progress_plugin = importlib.util.module_from_spec(_progress_spec)
_progress_spec.loader.exec_module(progress_plugin)


def _key(tc: ET.Element) -> str:
    cls = tc.get("classname", "")
    module, _, klass = cls.rpartition(".")
    return f"{module.rpartition('.')[2]}::{klass}::{tc.get('name')}"


def run_bounded(cmd: list[str], env: dict[str, str], cwd: Path,
                limit: float) -> tuple[int | None, float]:
    """Run ``cmd`` in a process group of its own for at most ``limit`` seconds (0: no limit).

    Returns its exit status (None when it was cut: the whole group got
    SIGTERM, then SIGKILL after :data:`KILL_GRACE` seconds) and the wall time.
    An exception here (Ctrl-C) kills the group too before it propagates.
    """
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, start_new_session=True)
    try:
        code = proc.wait(timeout=limit if limit > 0 else None)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None, time.monotonic() - t0
    except BaseException:
        _kill_group(proc)
        raise
    return code, time.monotonic() - t0


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM to ``proc``'s process group; SIGKILL to what is left of it :data:`KILL_GRACE` s on."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the leader's children too, if it has gone
    proc.wait()


def _command(args: argparse.Namespace, packages: tuple[str, ...], plugins: tuple[str, ...],
             junit: Path, progress: Path) -> list[str]:
    return [sys.executable, "-m", "gpuarray", "standin", "--", sys.executable, "-m", "pytest",
            "-c", str(HERE / "pytest.ini"), "--rootdir", str(HERE), "-n", args.workers,
            *(x for plugin in ("progress_plugin", *plugins) for x in ("-p", plugin)),
            f"--progress-log={progress}",
            # native tracebacks: pytest's own formatter parses numba's deep frames with
            # ast.parse, which CPython 3.11 can fail on (an INTERNALERROR, not a result)
            "--tb=native", "-q", "-rN", f"--junitxml={junit}", *args.pytest_args, *packages]


def _report_cut(wall: float, limit: float, progress: Path) -> None:
    counts, running = progress_plugin.summary(progress)
    print(f"\nrun.py: the run was cut after {wall:.0f} s (--time-limit={limit:g}): its process "
          "group was killed; finished by then: "
          + ", ".join(f"{n} {k}" for k, n in counts.items()), file=sys.stderr)
    for nodeid in running:
        print(f"run.py: started, never finished: {nodeid}", file=sys.stderr)


def referee(argv: list[str] | None, packages: tuple[str, ...], needs_kernel: dict[str, str],
            other_expected: dict[str, str], title: str, plugins: tuple[str, ...] = (),
            judge: bool = True, time_limit: float = TIME_LIMIT) -> int:
    """Run ``packages`` of numba-cuda's tests over the stand-in and judge every failure.

    The command line is this tool's (``--workers``, ``--junit``,
    ``--time-limit``, pytest arguments); ``plugins`` are pytest plugins to
    load (on ``PYTHONPATH``: this folder and the caller's); ``time_limit``
    is ``--time-limit``'s default.  Returns the exit status described above;
    with ``judge=False`` only the counts are reported (0 once there is a report).
    """
    p = argparse.ArgumentParser(description=title)
    p.add_argument("--workers", default="2", help="pytest-xdist workers (default 2)")
    p.add_argument("--junit", type=Path, help="keep the JUnit XML report here")
    p.add_argument("--time-limit", type=float, default=time_limit, metavar="SECONDS",
                   help=f"kill the run past this many seconds, exit status 2 (default "
                        f"{time_limit:g}; 0: no limit)")
    p.add_argument("pytest_args", nargs="*")
    args = p.parse_args(argv)
    if not args.time_limit >= 0:  # NaN too
        p.error(f"--time-limit={args.time_limit!r}: use a number of seconds >= 0")
    try:
        version = importlib.metadata.version("numba-cuda")
    except importlib.metadata.PackageNotFoundError:
        print("run.py: numba-cuda is not installed here (make test-numba-driver installs it)",
              file=sys.stderr)
        return 2
    if version != VERSION:
        print(f"run.py: numba-cuda {version} is installed; the list of expected failures is "
              f"for {VERSION}", file=sys.stderr)
        return 2
    junit = (args.junit or Path(tempfile.mkdtemp(prefix="numba-referee-")) / "junit.xml").resolve()
    progress = junit.with_name(junit.name + ".progress")
    progress.unlink(missing_ok=True)
    caller = Path(sys.argv[0]).resolve().parent
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), str(caller), env.get("PYTHONPATH")]))
    cmd = _command(args, packages, plugins, junit, progress)
    print("$", " ".join(cmd), flush=True)
    # In this folder: pytest run elsewhere with --pyargs loads the conftest.py of the
    # folder's test*/ subfolders (from the repository root: gpuarray's tests/conftest.py,
    # whose settings -- GPUARRAY_SIM_MEMCHECK=strict -- are not numba-cuda's).
    code, wall = run_bounded(cmd, env, HERE, args.time_limit)
    if code is None:
        _report_cut(wall, args.time_limit, progress)
        return 2
    if not junit.exists():
        print(f"run.py: pytest exited with status {code} and wrote no report", file=sys.stderr)
        return 2
    counts = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    unexpected, stale = [], set(needs_kernel) | set(other_expected)
    kernel_failed: set[str] = set()
    teardown: list[tuple[str, str]] = []
    for tc in ET.parse(junit).iter("testcase"):
        key = _key(tc)
        bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
        if bad is not None:
            counts["failed" if bad.tag == "failure" else "error"] += 1
            stale.discard(key)
            message = bad.get("message") or ""
            if message.startswith("failed on teardown"):
                teardown.append((key, message))
            elif key in needs_kernel and not any(m in message for m in _KERNEL_MARKS):
                unexpected.append(f"{key} (listed as needing a kernel, failed otherwise): "
                                  f"{message.splitlines()[:1]}")
            elif key in needs_kernel:
                kernel_failed.add(key)
            elif key not in other_expected:
                unexpected.append(f"{key}: {message.splitlines()[:1]}")
        elif tc.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    # A test whose kernel launch failed may leave what it allocated to its teardown,
    # after it released the context (a GPU would have run the kernel and freed first).
    for key, message in teardown:
        if key not in kernel_failed:
            unexpected.append(f"{key}: {message.splitlines()[:1]}")
    print(f"\nnumba-cuda {VERSION} {title}: "
          + ", ".join(f"{n} {k}" for k, n in counts.items()) + f" in {wall:.0f} s")
    if not judge:
        return 0
    for u in unexpected:
        print("UNEXPECTED failure:", u)
    for s in sorted(stale):
        print("listed as failing but did not fail (update run.py's lists):", s)
    return 1 if unexpected or stale or code not in (0, 1) else 0


def main(argv: list[str] | None = None) -> int:
    return referee(argv, PACKAGES, NEEDS_KERNEL, OTHER_EXPECTED,
                   "driver tests over the stand-in")


if __name__ == "__main__":
    sys.exit(main())
