"""Whole-process import times: gpuarray next to NumPy, cuda.core and numba.cuda, in one run.

``python bench/import_time.py [--rounds N] [--python PATH]`` starts a fresh
interpreter for each of ``pass``, ``import numpy``, ``import gpuarray``,
``import cuda.core`` and ``import numba.cuda`` (the peers where installed;
``make .venv-peers/.stamp`` has them), round after round in a rotating order,
and times each process from start to exit, started with ``-S`` as an
installed wheel imports (an editable install's finder, run by ``site``,
loads ``pathlib`` before the clock starts).  It prints the minimum and the
median of every command and each one's excess over ``import numpy`` (PERF.md:
``import gpuarray`` at most NumPy's import + 30 ms, whole-process minima), in
wall time and in the process's CPU time (user + system), which a machine
shared with other work inflates less.
Bytecode is written by an untimed warm-up round; ``GPUARRAY_BACKEND`` is left
as set (importing gpuarray never initialises CUDA either way).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COMMANDS = {
    "python -c pass": "pass",
    "import numpy": "import numpy",
    "import gpuarray": "import gpuarray",
    "import cuda.core": "import cuda.core",
    "import numba.cuda": "import numba.cuda",
}


def _run(python: str, code: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one process running ``code``."""
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # -S: no site, so no editable install's finder, which would load pathlib and urllib
    # before the clock starts and hide their cost to an installed wheel's import.
    r = subprocess.run([python, "-S", "-c", code], env=env, capture_output=True, cwd=ROOT)
    t = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise RuntimeError(r.stderr.decode(errors="replace").strip().splitlines()[-1])
    cpu = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
    return t * 1e3, cpu * 1e3


def measure(python: str, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) milliseconds per whole process, per command that runs here."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # python -S (see _run): the checkout's gpuarray, the interpreter's site-packages.
    where = subprocess.run([python, "-c", "import sysconfig; p = sysconfig.get_paths(); "
                            "print(p['purelib']); print(p['platlib'])"],
                           capture_output=True, text=True, check=True).stdout.split()
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(ROOT), *where]))
    names = []
    for name, code in COMMANDS.items():
        try:
            _run(python, code, env)  # warm-up: bytecode, page cache
            names.append(name)
        except RuntimeError as e:
            print(f"{name}: skipped ({e})", file=sys.stderr)
    times: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(_run(python, COMMANDS[name], env))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    times = measure(args.python, args.rounds)
    print(f"whole-process ms, {args.rounds} interleaved rounds ({args.python})")
    for i, what in enumerate(("wall", "CPU (user + system)")):
        base = min(t[i] for t in times["import numpy"])
        print(f"{what:<20} {'min':>8} {'median':>8} {'min - numpy':>12}")
        for name, ts in times.items():
            col = [t[i] for t in ts]
            print(f"{name:<20} {min(col):8.1f} {statistics.median(col):8.1f} {min(col) - base:12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
