#!/usr/bin/env python
"""Run numba-cuda's kernel tests (``numba.cuda.tests.cudapy``), unmodified, over the stand-in driver.

Usage (in ``.venv-peers``: numba-cuda 0.30.4 and gpuarray installed;
``make test-numba-cudapy``)::

    python sim/tools/numba_cudapy/run.py [--whole] [--workers N] [--junit FILE] [--time-limit S]
                                         [-- PYTEST_ARGS...]

What runs: the modules of :data:`SELECTION` -- a CI-sized choice of the
suite, kernels that use warp shuffles, votes and matches, shared (static and
dynamic), local and constant memory, barriers, reductions, recursion,
cooperative launches with grid.sync, a whole program (Black-Scholes) -- under ``python -m gpuarray standin --``, with numba-cuda's
pytest settings and conftest plugin (``sim/tools/numba_driver``) and a per-test
time limit (``timeout_plugin.py``: ``--per-test-timeout``, 120 s here).  The
simulator executes the PTX numba-cuda compiles (under the stand-in an
installed nvJitLink is replaced by the stand-in's, which links into the
simulator's image: ``sim/gpuarray_sim/standin/__init__.py``).

As ``sim/tools/numba_driver/run.py``: every failure must be listed with its
reason (:data:`NEEDS_KERNEL`: a kernel the simulator cannot execute;
:data:`OTHER_EXPECTED`: any other reason), and a listed test that passes
makes the list stale.  Exit status 0 when all is as listed, 1 otherwise, 2
when the run could not be made.

``--whole`` runs the whole ``numba.cuda.tests.cudapy`` package and only
reports its counts (no judgement; about 8-40 minutes on 2 cores): the
number issue 36's notes give.

Each run has a wall-clock limit too (``--time-limit``: :data:`TIME_LIMIT`
seconds for the selection, :data:`WHOLE_TIME_LIMIT` with ``--whole``): a
pytest-xdist worker that dies (one crashed in NVVM under load) leaves the
run waiting for ever.  Past it the run's process group is killed and the
exit status is 2, with the counts of what finished and the tests left
running (``sim/tools/numba_driver/run.py``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("numba_driver_run", HERE.parent / "numba_driver" / "run.py")
assert _spec is not None and _spec.loader is not None
driver_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(driver_run)

PACKAGE = "numba.cuda.tests.cudapy"
#: The modules CI runs (about 40 s on 2 workers; test_laplace, test_matmul and the
#: subprocess-heavy test_print take 80, 37 and 60 s more, so they run with --whole only).
SELECTION = tuple(f"{PACKAGE}.{m}" for m in (
    "test_warp_ops", "test_sm", "test_sync", "test_localmem", "test_constmem",
    "test_reduction", "test_blackscholes", "test_idiv", "test_recursion", "test_freevar",
    "test_globals", "test_cooperative_groups",
))
#: "::Class::test" (numba's module paths are not in the report) -> the kernel it needs
#: executed that the simulator cannot execute.
#: Empty: test_external_cooperative_func's linked cuda::barrier (mbarrier.init, arrive,
#: try_wait) runs since the PTX executor runs mbarrier objects.
NEEDS_KERNEL: dict[str, str] = {}
#: Failures for another reason, with that reason.
OTHER_EXPECTED: dict[str, str] = {}
#: Tests not run, with the reason (a test that would poison its process, as on a GPU,
#: so that every later test of the same pytest worker would fail after it).  Empty:
#: test_struct_model_type_arr and test_dispatcher_cpointer_arguments, which read and
#: write a few elements past their arrays, run as on a GPU -- inside the allocations'
#: mapped granule, reported as memcheck reports them (gpuarray_sim/_memcheck.py).
NOT_RUN: dict[str, str] = {}
#: Per-test time limit (seconds) for the selection and for --whole.
PER_TEST_TIMEOUT = "120"
#: Wall-clock limit (seconds) of the selection's run (about 25-60 s on 2 workers).
TIME_LIMIT = 900.0
#: Wall-clock limit (seconds) of a --whole run (8 minutes on a quiet machine, 20-40 loaded).
WHOLE_TIME_LIMIT = 3600.0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    whole = "--whole" in argv
    if whole:
        argv.remove("--whole")
    extra = [] if any(a.startswith("--per-test-timeout") for a in argv) else [
        f"--per-test-timeout={PER_TEST_TIMEOUT}"]
    if NOT_RUN:
        extra += ["-k", "not (" + " or ".join(NOT_RUN) + ")"]
    for test, why in NOT_RUN.items():
        print(f"not run: {test}: {why}")
    argv += extra if "--" in argv else ["--", *extra]
    return driver_run.referee(
        argv, (PACKAGE,) if whole else SELECTION, NEEDS_KERNEL, OTHER_EXPECTED,
        "kernel tests (whole cudapy suite) over the stand-in" if whole
        else "kernel tests (CI selection of cudapy) over the stand-in",
        plugins=("timeout_plugin",), judge=not whole,
        time_limit=WHOLE_TIME_LIMIT if whole else TIME_LIMIT)


if __name__ == "__main__":
    sys.exit(main())
