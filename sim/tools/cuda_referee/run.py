#!/usr/bin/env python
"""Run cuda.core's and cuda.bindings' own tests, unmodified, over the stand-in driver.

Usage (in an environment with gpuarray, gpuarray-sim, the cuda-core and
cuda-bindings wheels under test and what ``requirements.txt`` next to this file
lists; ``make test-cuda-referee CUDA_PYTHON_REPO=GIT_DIR`` makes one,
``.venv-referee``, and runs this)::

    python sim/tools/cuda_referee/run.py --repo GIT_DIR [--commit C] [--suite core|bindings|both]
        [--workers N] [--junit-dir DIR] [--list] [-- PYTEST_ARGS...]

The tests are not in the wheels: they come from a cuda-python repository
(``--repo``, a git directory or a checkout: NVIDIA's, or a fork that has the
release commit) at the commit of the wheels' release (:data:`COMMIT`, the
commit that finalised cuda.core 1.1.0's release notes; cuda-bindings' tests
of the same commit).  ``git archive`` puts ``cuda_core/tests``,
``cuda_bindings/tests`` and ``cuda_python_test_helpers`` in a temporary
folder; nothing of them is kept or committed.  They run with the
repository's pytest settings under ``python -m gpuarray_sim standin --``
(cuda.core and cuda.bindings over the real bindings, which load the
stand-in ``libcuda.so.1`` over the simulator), ``-p no:randomly``, two
xdist workers and a per-test time limit.

Every failure and error is given a reason from :data:`REASONS` (the first
pattern that matches the test's id or its message); ``--list`` prints each
failed test with its reason, and the summary prints the count per reason and
the failures no pattern explains.  Exit status: 0 when every failure has a
reason, 1 otherwise, 2 when the run could not be made.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

#: The cuda-python commit whose tests judge the wheels (cuda.core 1.1.0's release commit,
#: "docs(core): finalize 1.1.0 release notes").
COMMIT = "8eb9dc2ba"
#: The wheels those tests belong with (``make test-cuda-referee`` installs them).
WHEELS = {"cuda-core": "1.1.0", "cuda-bindings": "13.5.0"}
SUITES = {
    "core": ["cuda_core/tests"],
    # the whole folder: the driver, NVRTC and runtime tests (the runtime's need libcudart,
    # which cannot start on the stand-in: see REASONS) and the toolkit libraries' (nvJitLink,
    # nvFatbin, NVVM, cuDLA...)
    "bindings": ["cuda_bindings/tests"],
    # the five files the first count named (docs/sim/testing.rst compares the two)
    "bindings-old": ["cuda_bindings/tests/test_cuda.py", "cuda_bindings/tests/test_cudart.py",
                 "cuda_bindings/tests/test_nvrtc.py", "cuda_bindings/tests/test_kernelParams.py",
                 "cuda_bindings/tests/test_interoperability.py"],
}

#: (pattern on "nodeid\nmessage", reason): why a test still fails over the stand-in.
REASONS: list[tuple[str, str]] = [
    (r"cuda_bindings/tests/test_cudart\.py|test_interoperability\.py.*cudart|cudaError|"
     r"test_ipc_duplicate_import",  # its child process ends with Device.sync(): libcudart
     "the CUDA runtime (libcudart) cannot start on the stand-in: it needs NVIDIA's private "
     "driver export tables (cuGetExportTable), which the simulator does not reproduce"),
    (r"CUDA_ERROR_INVALID_IMAGE|has no PTX|without PTX",
     "launches a kernel compiled to a cubin (SASS) with no PTX: the simulator executes PTX only"),
    (r"CUDA_ERROR_NOT_SUPPORTED",
     "calls an entry point the simulator does not model (it answers CUDA_ERROR_NOT_SUPPORTED)"),
    (r'"nvml" is an NVIDIA driver library|cuda_core\.tests\.system|cuda_bindings[./]tests[./]nvml',
     "needs NVML (libnvidia-ml), a driver library the stand-in does not provide"),
    (r"CUDA_ERROR_UNKNOWN",
     "the race detector reports unordered accesses (CUDA_ERROR_UNKNOWN, the report on stderr): "
     "memory allocated stream-ordered on the legacy default stream and used on a non-blocking "
     "stream with no ordering after the allocation, and a graph test that makes a race on purpose"),
    (r"test_device_launch|device_launch|test_graph_complete_options",
     "instantiates a graph for device launch (CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH), which "
     "the simulator does not model"),
    (r"ltoir",
     "loads LTO-IR (NVVM IR) into the driver: the simulator executes PTX only"),
    (r"members not covered by the wrapper mapping|has \d+ members, but expected|not covered by _CASES",
     "an enum coverage check between cuda.core 1.1.0 and cuda-bindings 13.5 (the wheels disagree; "
     "no driver call)"),
    (r"test_event\.py::test_timing_success",
     "times a %clock64 sleep loop with events: the PTX executor's %clock64 counts reads, not "
     "time, so the loop may end before the 10 ms the test expects (it passes or fails with the "
     "executor's speed)"),
    (r"has no attribute 'reserved'|test_cuda\.py::test_cuda_repr|test_nvvm\.py::test_add_module_to_program_fail|"
     r"test_cudla_error_str",
     "the tests of the release commit and the cuda-bindings 13.5.0 wheel disagree (the tests read "
     "'reserved' fields the wheel's CUipcMemHandle/CUgraphEdgeData/structure reprs do not have, expect "
     "a ValueError for a NULL NVVM buffer that the wheel hands to libNVVM, an older cuDLA error text): "
     "no driver call, the same on a GPU"),
    (r"build_test_binaries\.sh|CUDA checkpoint scenario|test_cython|test_nvjitlink\ncollection failure|cuLink driver linker does not "
     r"support|only supports 'nvjitlink' backend|fstat refused",
     "needs a tool or library the machine lacks (nvcc for the test binaries, Cython, the checkpoint "
     "utility, nvJitLink: not installed in the referee's environment, see requirements.txt) or "
     "checks the host file system, not the driver"),
]


#: The tests import ``cuda.bindings._test_helpers``, which is in the repository but not in the
#: wheel: it is taken from the same commit and found through ``cuda.bindings.__path__`` (a
#: pytest plugin of the run, :data:`_PLUGIN`, loaded by every xdist worker too).
_BINDINGS_HELPERS = "cuda_bindings/cuda/bindings/_test_helpers"
_PLUGIN = "_cuda_referee_paths"
_PLUGIN_SOURCE = """\
import cuda.bindings

if {helpers!r} not in cuda.bindings.__path__:
    cuda.bindings.__path__.append({helpers!r})
"""


def _key(tc: ET.Element) -> str:
    cls = tc.get("classname", "")
    return f"{cls.replace('.', '/')}.py::{tc.get('name')}" if cls else tc.get("name", "")


def _outcomes(junit: Path) -> tuple[collections.Counter, list[tuple[str, str]]]:
    counts: collections.Counter = collections.Counter()
    failed: list[tuple[str, str]] = []
    for tc in ET.parse(junit).iter("testcase"):
        bad = tc.find("failure")
        if bad is None:
            bad = tc.find("error")
        if bad is not None:
            counts["failed" if bad.tag == "failure" else "errors"] += 1
            failed.append((_key(tc), (bad.get("message") or bad.text or "").strip()))
        elif tc.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts, failed


def reason_of(test: str, message: str) -> str | None:
    text = f"{test}\n{message}"
    for pattern, reason in REASONS:
        if re.search(pattern, text):
            return reason
    return None


def _extract(repo: Path, commit: str, into: Path) -> None:
    git_dir = repo / ".git" if (repo / ".git").exists() else repo
    archive = into / "tests.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", f"--git-dir={git_dir}", "archive", commit, "cuda_core/tests",
                        "cuda_bindings/tests", _BINDINGS_HELPERS, "cuda_python_test_helpers",
                        "pytest.ini", "conftest.py"], stdout=f, check=True)
    with tarfile.open(archive) as t:
        t.extractall(into, filter="data")
    archive.unlink()
    (into / f"{_PLUGIN}.py").write_text(_PLUGIN_SOURCE.format(
        helpers=str(into / Path(_BINDINGS_HELPERS).parent)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", type=Path, required=True, help="a cuda-python git directory")
    p.add_argument("--commit", default=COMMIT)
    p.add_argument("--suite", choices=(*SUITES, "both"), default="both")
    p.add_argument("--workers", default="2")
    p.add_argument("--timeout", default="300", help="seconds per test (pytest-timeout)")
    p.add_argument("--junit-dir", type=Path, help="keep the JUnit XML reports here")
    p.add_argument("--list", action="store_true", help="print every failure with its reason")
    p.add_argument("pytest_args", nargs="*")
    a = p.parse_args(argv)
    suites = ["core", "bindings"] if a.suite == "both" else [a.suite]
    status = 0
    with tempfile.TemporaryDirectory(prefix="cuda-referee-") as tmp:
        root = Path(tmp)
        try:
            _extract(a.repo, a.commit, root)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"cannot take the tests of {a.commit} from {a.repo}: {e}", file=sys.stderr)
            return 2
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(root), str(root / "cuda_python_test_helpers"),
             *filter(None, [env.get("PYTHONPATH")])])
        for suite in suites:
            junit = (a.junit_dir or root) / f"cuda-referee-{suite}.xml"
            junit.parent.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "gpuarray_sim", "standin", "--", sys.executable, "-m",
                   "pytest", *SUITES[suite], "-p", _PLUGIN, "-p", "no:randomly", "-p", "no:cacheprovider",
                   "-o", "addopts=", "-q", "-n", a.workers, "--timeout", a.timeout,
                   f"--junitxml={junit}", *a.pytest_args]
            t0 = time.monotonic()
            subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, check=False)
            wall = time.monotonic() - t0
            if not junit.is_file():
                print(f"{suite}: pytest wrote no report", file=sys.stderr)
                return 2
            counts, failed = _outcomes(junit)
            by_reason: collections.Counter = collections.Counter()
            unexplained = []
            for test, message in failed:
                reason = reason_of(test, message)
                if reason is None:
                    unexplained.append((test, message))
                else:
                    by_reason[reason] += 1
                if a.list:
                    print(f"{test}: {reason or 'UNEXPLAINED: ' + message.splitlines()[0][:200] if message else ''}")
            print(f"== {suite} ({a.commit}): {counts['passed']} passed, {counts['failed']} failed, "
                  f"{counts['errors']} errors, {counts['skipped']} skipped in {wall:.0f} s")
            for reason, n in by_reason.most_common():
                print(f"  {n:5d}  {reason}")
            if unexplained:
                status = 1
                print(f"  {len(unexplained)} failures with no listed reason:")
                firsts = collections.Counter(
                    re.sub(r"0x[0-9a-f]+|\d+", "N", (m.splitlines() or [""])[0])[:160]
                    for _, m in unexplained)
                for line, n in firsts.most_common(40):
                    print(f"  {n:5d}  {line}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
