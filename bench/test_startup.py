"""Start-up costs: ``import gpuarray`` next to ``import numpy``, and the first kernel operation.

Every measurement runs in a fresh interpreter (a subprocess), because what is
measured is the first time.  The subprocesses may write bytecode (an
installed package has its ``.pyc`` files; ``PYTHONDONTWRITEBYTECODE`` is
dropped for them) and one untimed warm-up run comes first.

- ``import``: each round runs ``import numpy`` and ``import gpuarray`` in two
  fresh interpreters, interleaved; inside each, the import is timed with
  ``time.perf_counter`` (interpreter start-up excluded).  pytest-benchmark's
  own column is the whole ``python -c "import gpuarray"`` process.
  ``extra_info``: the medians, ``extra_ms`` (gpuarray - numpy; PERF.md: at
  most 30 ms), ``ratio_to_numpy`` and the slowest gpuarray modules of one
  ``-X importtime`` run; the same with CPU time (``*_cpu_ms``,
  ``time.process_time``), which a busy shared machine inflates less.
- ``first astype``: a fresh interpreter imports gpuarray, makes an array,
  then times its first ``astype`` -- which imports the kernels layer, finds
  the kernel in the disk cache and loads it -- and a second one (steady
  state).  ``warm``: the cache folder was filled by the untimed warm-up run;
  PERF.md wants at most 5 ms and no NVRTC load (``nvrtc_loaded`` must be
  False).  ``cold``: an empty cache folder every round (NVRTC loads and
  compiles), for scale.

On the simulator the first ``astype`` includes importing the reference
kernels that a GPU run does not need, and no driver module load; on a GPU the
reverse.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from _harness import BACKEND, FULL, SIM, _common

ROOT = Path(__file__).resolve().parent.parent
IMPORT_TARGET = "import gpuarray <= import numpy + 30 ms"
ASTYPE_TARGET = "first astype with a warm disk cache <= 5 ms, no NVRTC load"

_IMPORT = """
import time
t, c = time.perf_counter(), time.process_time()
import {module}
print(1e3 * (time.perf_counter() - t), 1e3 * (time.process_time() - c))
"""

_ASTYPE = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import gpuarray
t1 = time.perf_counter()
a = gpuarray.to_device(np.arange(4096, dtype=np.float32))
a.stream.synchronize()
t2, c2 = time.perf_counter(), time.process_time()
b = a.astype(np.float16)
t3, c3 = time.perf_counter(), time.process_time()
c = a.astype(np.float16)
t4 = time.perf_counter()
c.stream.synchronize()
assert (b.copy_to_host() == np.arange(4096, dtype=np.float16)).all()
print(json.dumps({"import_ms": 1e3 * (t1 - t0), "first_ms": 1e3 * (t3 - t2),
                  "first_cpu_ms": 1e3 * (c3 - c2),
                  "second_ms": 1e3 * (t4 - t3),
                  "nvrtc_loaded": "cuda.bindings.nvrtc" in sys.modules}))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["GPUARRAY_BACKEND"] = BACKEND
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def _python(code: str, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *flags, "-c", code], env=env, capture_output=True,
                       text=True, timeout=300, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"benchmark subprocess failed:\n{r.stdout}\n{r.stderr}")
    return r


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _slowest_modules(env: dict[str, str], n: int = 8) -> list[tuple[str, float]]:
    """The gpuarray modules with the largest self time in one ``-X importtime`` run (ms)."""
    r = _python("import numpy, gpuarray", env, "-S", "-X", "importtime")
    rows = []
    for line in r.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip().startswith("gpuarray"):
            try:
                rows.append((parts[2].strip(), int(parts[0].split(":")[1]) / 1e3))
            except ValueError:
                continue
    return sorted(rows, key=lambda r: -r[1])[:n]


def _rounds() -> int:
    return 15 if FULL else 5


def _wheel_env() -> dict[str, str]:
    """For ``python -S``: as an installed wheel imports, without site and so without an
    editable install's finder (which loads pathlib and urllib before the timing starts)."""
    where = sysconfig.get_paths()
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(ROOT), where["purelib"],
                                                       where["platlib"]]))
    return env


def test_import_time(benchmark):
    env = _wheel_env()
    _python("import gpuarray", env, "-S")                # warm-up: writes bytecode
    times: dict[str, list[tuple[float, float]]] = {"numpy": [], "gpuarray": []}

    def run(module: str) -> None:
        wall, cpu = _python(_IMPORT.format(module=module), env, "-S").stdout.split()
        times[module].append((float(wall), float(cpu)))

    benchmark.pedantic(lambda: run("gpuarray"), setup=lambda: run("numpy"), rounds=_rounds(),
                       iterations=1)
    if not times["numpy"]:   # --benchmark-disable calls the function alone
        run("numpy")
    info = benchmark.extra_info
    info.update(_common("startup", "import", "gpuarray"))
    info.update(target=IMPORT_TARGET, rounds=len(times["gpuarray"]),
                slowest_modules=_slowest_modules(env))
    # Wall time is the target's; CPU time (process_time) is what a busy
    # shared machine does not inflate.
    for clock, i in (("", 0), ("cpu_", 1)):
        n = _median([t[i] for t in times["numpy"]])
        g = _median([t[i] for t in times["gpuarray"]])
        info.update({f"numpy_import_{clock}ms": n, f"import_{clock}ms": g,
                     f"extra_{clock}ms": None if n is None or g is None else g - n,
                     f"ratio_to_numpy_{clock}".rstrip("_"): None if not n or g is None else g / n})


@pytest.mark.parametrize("cache", ["warm", "cold"])
def test_first_astype(benchmark, tmp_path, cache):
    base = tmp_path / "kcache"
    results: list[dict] = []
    state = {"n": 0}

    def env_for_round() -> dict[str, str]:
        if cache == "warm":
            return _env(GPUARRAY_KERNEL_CACHE_DIR=str(base))
        state["n"] += 1
        return _env(GPUARRAY_KERNEL_CACHE_DIR=str(base / str(state["n"])))

    _python(_ASTYPE, _env(GPUARRAY_KERNEL_CACHE_DIR=str(base)))   # warm-up: fills the cache

    def one():
        results.append(json.loads(_python(_ASTYPE, env_for_round()).stdout))

    benchmark.pedantic(one, rounds=1 if cache == "cold" and not FULL else _rounds(),
                       iterations=1)
    first = [r["first_ms"] for r in results]
    info = benchmark.extra_info
    info.update(_common("startup", f"first astype, {cache} cache", "gpuarray"))
    info.update(target=ASTYPE_TARGET if cache == "warm" else "",
                first_astype_ms=_median(first),
                first_astype_cpu_ms=_median([r["first_cpu_ms"] for r in results]),
                steady_astype_ms=_median([r["second_ms"] for r in results]),
                import_ms=_median([r["import_ms"] for r in results]),
                nvrtc_loaded=any(r["nvrtc_loaded"] for r in results),
                rounds=len(results), simulator=SIM)
