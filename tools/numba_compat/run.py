#!/usr/bin/env python
"""Run numba-cuda's own host-API tests against gpuarray, on the simulator.

Usage (with the project's virtual environment, where gpuarray is installed)::

    .venv/bin/python tools/numba_compat/run.py [--json report.json] [--keep]
    make numba-compat

Steps:

1. ``pip install --no-deps --target TMP/site`` numba-cuda at the pinned
   version (its wheel holds ``numba_cuda/numba/cuda/tests``) and the pinned
   packages its test helpers import (``selection.PINS``), into a temporary
   folder: nothing of Numba's enters the repository or the virtual
   environment. Needs the package index.
2. For each module of ``selection.TEST_MODULES``, TMP/run/<dir>/<file>.py
   re-exports the module (``from numba.cuda.tests.<dir>.<file> import *``),
   so its tests are collected under their real module name (child processes
   of the IPC tests import them by that name).
3. pytest runs there with ``GPUARRAY_BACKEND=sim`` (two simulated devices
   unless ``GPUARRAY_SIM_DEVICES`` says otherwise), the shim
   (``shim/sitecustomize.py``: numba.cuda's public host-API names replaced by
   gpuarray's in every process of the run) and the plugin
   (``shim/numba_compat_plugin.py``: deselects ``selection.DESELECTED``,
   records outcomes).
4. The outcomes are classified (``report.py``) against
   ``selection.EXPECTED_FAILURES``; the summary is printed.

Exit status: 0 when every failure is an expected one (a deliberate
difference listed in docs/migrating.rst), 1 when a failure is UNEXPECTED or
the tables no longer match the run, 2 when the run itself could not be made
(no index, pytest crashed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402
import selection  # noqa: E402

SHIM = HERE / "shim"


def install(site: Path) -> None:
    """Install the pinned numba-cuda and its test helpers' packages into ``site``."""
    reqs = [f"numba-cuda=={selection.NUMBA_CUDA_VERSION}"] + [
        f"{name}=={version}" for name, version in selection.PINS.items()
    ]
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site)]
    print("$", " ".join(cmd + reqs), flush=True)
    subprocess.run(cmd + reqs, check=True)
    tests = site / "numba_cuda" / "numba" / "cuda" / "tests"
    if not tests.is_dir():
        raise RuntimeError(f"numba-cuda {selection.NUMBA_CUDA_VERSION} installed no tests at {tests}")


def write_run_folder(run: Path) -> None:
    """The wrapper test files, the pytest.ini and the deselection list."""
    for module in selection.TEST_MODULES:
        folder, name = module.split("/")
        (run / folder).mkdir(parents=True, exist_ok=True)
        (run / folder / f"{name}.py").write_text(
            f"from numba.cuda.tests.{folder}.{name} import *  # noqa: F401,F403\n"
        )
    # Numba's tests are not written for filterwarnings=error: pytest's defaults.
    (run / "pytest.ini").write_text("[pytest]\n")
    (run / "deselect.json").write_text(json.dumps(selection.DESELECTED, indent=1))


def run_pytest(tmp: Path, extra: list[str]) -> Path:
    """Run the selected tests; returns the plugin's results file."""
    run, site, results = tmp / "run", tmp / "site", tmp / "results.json"
    env = dict(os.environ)
    # Two simulated devices: the multi-GPU tests (context switches, staged
    # IPC on every device) run instead of skipping.
    env.setdefault("GPUARRAY_SIM_DEVICES", "2")
    env.update(
        GPUARRAY_BACKEND="sim",
        NUMBA_COMPAT_SITE=str(site),
        NUMBA_COMPAT_DESELECT=str(run / "deselect.json"),
        NUMBA_COMPAT_RESULTS=str(results),
        PYTHONPATH=os.pathsep.join(filter(None, [str(SHIM), env.get("PYTHONPATH")])),
    )
    files = [f"{m}.py" for m in selection.TEST_MODULES]
    cmd = [sys.executable, "-m", "pytest", "-c", "pytest.ini", "--rootdir", str(run)]
    cmd += ["-p", "numba_compat_plugin", "-p", "no:cacheprovider", "--import-mode=importlib"]
    # A module that does not import is one failure (the plugin records it),
    # not the end of the run.
    cmd += ["-q", "-rN", "--continue-on-collection-errors", *extra, *files]
    print("$ (in", run, ")", " ".join(cmd[1:]), flush=True)
    code = subprocess.run(cmd, cwd=run, env=env).returncode
    if not results.exists():
        raise RuntimeError(f"pytest exited with status {code} and no results: see its output above")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, help="also write the summary as JSON to this file")
    p.add_argument("--keep", action="store_true", help="keep the temporary folder and print it")
    p.add_argument(
        "--site",
        type=Path,
        help="reuse a folder a previous --keep run installed into (TMP/site): no download",
    )
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = p.parse_args(argv)
    try:
        import gpuarray  # noqa: F401
    except ImportError as e:
        print(f"run.py: gpuarray does not import in {sys.executable}: {e}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="numba-compat-"))
    try:
        if args.site:
            (tmp / "site").symlink_to(args.site.resolve())
        else:
            install(tmp / "site")
        write_run_folder(tmp / "run")
        results = json.loads(run_pytest(tmp, args.pytest_args).read_text())
    except (subprocess.CalledProcessError, RuntimeError) as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 2
    finally:
        if args.keep:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    summary = report.classify(
        results, selection.EXPECTED_FAILURES, selection.DIFFERENCES, selection.MAY_PASS
    )
    header = (
        f"numba-cuda {selection.NUMBA_CUDA_VERSION} host-API tests against gpuarray "
        f"(GPUARRAY_BACKEND=sim; {len(selection.TEST_MODULES)} modules run, "
        f"{len(selection.EXCLUDED_MODULES)} excluded: see selection.py)"
    )
    print()
    print(report.format_summary(summary, selection.DIFFERENCES, header))
    if args.json:
        data = summary.as_dict()
        data["numba_cuda_version"] = selection.NUMBA_CUDA_VERSION
        data["modules"] = list(selection.TEST_MODULES)
        data["excluded_modules"] = selection.EXCLUDED_MODULES
        data["deselected_reasons"] = selection.DESELECTED
        data["skip_reasons"] = {
            i: e["message"] for i, e in results["outcomes"].items() if e["outcome"] == "skipped"
        }
        args.json.write_text(json.dumps(data, indent=1))
    return summary.exit_status


if __name__ == "__main__":
    sys.exit(main())
