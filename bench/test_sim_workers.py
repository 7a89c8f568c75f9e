"""The simulator's blocks on several host threads: one worker against two, in the same run.

Simulator only (PERF.md: "simulator kernel execution: the blocks of a grid
on every core").  Rows:

- ``test_ptx_launch_workers[1]`` / ``[2]``: one large launch of a PTX kernel
  (1024 blocks of 256 threads, 256 dependent FMAs each, the translated
  build) with ``GPUARRAY_SIM_WORKERS`` 1 and 2, rounds interleaved;
  ``extra_info["ratio_to_1"]`` is the best time with 2 workers over the
  best with 1 (the same run, so the machine's load moves both), and
  ``machine_ratio`` the same ratio for work that is perfectly parallel
  (SHA-256 of 64 MiB in one thread, then in two threads of 32 MiB each;
  hashlib releases the GIL), measured between the rounds: what two threads
  can gain on this machine at this moment (about 0.5 idle; near 1 when
  other processes take the second core); ``cpu_ratio_to_1`` the process's
  CPU time with 2 workers over that with 1 (the work the workers add: near
  1 means the wall time divides by the cores a machine gives them).
- ``test_numba_cudapy_workers[1]`` / ``[2]``: numba-cuda's ``test_matmul``
  (one launch of 2500 blocks x 1024 threads) and ``test_laplace`` (1000
  launches of 256 x 256) over the stand-in, one pytest process, warm kernel
  cache, with 1 and 2 workers; ``extra_info`` the wall time of each module
  and the ratio to 1 worker.  Minutes, and needs numba-cuda
  (``.venv-peers``): only with ``GPUARRAY_BENCH_CUDAPY=1``, as
  ``test_cudapy_sim.py``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _harness import SIM

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.skipif(not SIM, reason="the simulator's workers")

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"
FMA = HEAD + """
.visible .entry fmas(.param .u64 out, .param .u32 iters)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [iters];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    cvt.rn.f32.s32 %f1, %r5;
    mov.f32 %f2, 0f00000000;
    mov.u32 %r6, 0;
$L:
    fma.rn.f32 %f2, %f1, 0f3F800001, %f2;
    add.s32 %r6, %r6, 1;
    setp.lt.u32 %p1, %r6, %r1;
    @%p1 bra $L;
    mul.wide.s32 %rd2, %r5, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.f32 [%rd3], %f2;
    ret;
}
"""
BLOCKS, THREADS, ITERS, ROUNDS = 1024, 256, 256, 5
_BEST: dict[str, float] = {}


def _launcher():
    from sim.tests.ptx.support import backend

    b = backend()
    out = b.mem_alloc(BLOCKS * THREADS * 4)
    f = b.module_get_function(b.module_load_data(FMA.encode() + b"\0"), "fmas")
    params = [ctypes.c_uint64(out), ctypes.c_uint32(ITERS)]

    def run(workers: int) -> tuple[float, float]:
        os.environ["GPUARRAY_SIM_WORKERS"] = str(workers)
        t, c = time.perf_counter(), time.process_time()
        b.launch_kernel(f, (BLOCKS, 1, 1), (THREADS, 1, 1), 0, 1, params)
        b.ctx_synchronize()
        return time.perf_counter() - t, time.process_time() - c

    return b, out, run


def _hash_time(threads: int, data: bytes) -> float:
    part = len(data) // threads
    views = [memoryview(data)[i * part:(i + 1) * part] for i in range(threads)]
    workers = [threading.Thread(target=hashlib.sha256, args=(v,)) for v in views]
    t = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - t


@pytest.fixture(scope="module")
def timings():
    """Both worker counts' launch times, rounds interleaved (1, 2, 1, 2, ...)."""
    saved = {k: os.environ.get(k) for k in ("GPUARRAY_SIM_WORKERS", "GPUARRAY_SIM_PTX_TIER",
                                            "GPUARRAY_SIM_SEED")}
    os.environ["GPUARRAY_SIM_PTX_TIER"] = "compiled"
    os.environ.pop("GPUARRAY_SIM_SEED", None)
    try:
        b, out, run = _launcher()
        run(1)  # build and warm
        times: dict[str, list[float]] = {k: [] for k in ("1", "2", "cpu1", "cpu2", "hash1",
                                                          "hash2")}
        data = os.urandom(64 << 20)
        for _ in range(ROUNDS):
            for w in ("1", "2"):
                wall, cpu = run(int(w))
                times[w].append(wall)
                times["cpu" + w].append(cpu)
                times["hash" + w].append(_hash_time(int(w), data))
        got = np.zeros(BLOCKS * THREADS, np.float32)
        b.memcpy_dtoh_async(got.ctypes.data, out, got.nbytes, 1)
        b.ctx_synchronize()
        assert got[1] > 0  # the kernel ran
        return times
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ptx_launch_workers(benchmark, timings, workers):
    it = iter(timings[workers])
    benchmark.pedantic(lambda: next(it), rounds=ROUNDS, iterations=1)
    best = min(timings[workers])
    benchmark.extra_info.update({"suite": "sim-workers", "blocks": BLOCKS, "threads": THREADS,
                                 "fmas_per_thread": ITERS, "best_s": best,
                                 "ratio_to_1": best / min(timings["1"]),
                                 "machine_ratio": min(timings["hash2"]) / min(timings["hash1"]),
                                 "cpu_s": min(timings["cpu" + workers]),
                                 "cpu_ratio_to_1": min(timings["cpu" + workers])
                                 / min(timings["cpu1"]),
                                 "load": os.getloadavg()[0]})
    sys.stdout.write(f"\nPTX launch {BLOCKS}x{THREADS}, {workers} worker(s): best {best * 1e3:.1f} "
                     f"ms, {best / min(timings['1']):.2f}x one worker (perfectly parallel work: "
                     f"{min(timings['hash2']) / min(timings['hash1']):.2f}x); CPU time "
                     f"{min(timings['cpu' + workers]) * 1e3:.1f} ms, "
                     f"{min(timings['cpu' + workers]) / min(timings['cpu1']):.2f}x one worker's\n")


def _numba_skip() -> str | None:
    if os.environ.get("GPUARRAY_BENCH_CUDAPY", "") != "1":
        return "runs numba-cuda's test_matmul and test_laplace (minutes): GPUARRAY_BENCH_CUDAPY=1"
    if not (ROOT / ".venv-peers" / "bin" / "python").exists():
        return "needs numba-cuda's environment at .venv-peers (make test-numba-cudapy makes it)"
    return None


def _numba(workers: int, cache: Path) -> tuple[float, float, str]:
    py = str(ROOT / ".venv-peers" / "bin" / "python")
    tools = ROOT / "sim" / "tools"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env.pop("GPUARRAY_SIM_SEED", None)
    env.update({"PYTHONPATH": f"{tools / 'numba_driver'}{os.pathsep}{tools / 'numba_cudapy'}",
                "GPUARRAY_KERNEL_CACHE_DIR": str(cache), "GPUARRAY_SIM_WORKERS": str(workers)})
    cmd = [py, "-m", "gpuarray_sim", "standin", "--", py, "-m", "pytest", "-c",
           str(tools / "numba_driver" / "pytest.ini"), "--rootdir", str(tools / "numba_driver"),
           "-q", "-p", "no:cacheprovider", "--durations=3",
           "numba.cuda.tests.cudapy.test_matmul", "numba.cuda.tests.cudapy.test_laplace"]
    t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return wall, cpu, r.stdout[-600:]


_NUMBA: dict[str, float] = {}


@pytest.mark.skipif(_numba_skip() is not None, reason=str(_numba_skip()))
@pytest.mark.parametrize("workers", ["1", "2"])
def test_numba_cudapy_workers(benchmark, tmp_path_factory, workers):
    cache = tmp_path_factory.getbasetemp() / "numba-workers-cache"
    if not _NUMBA:
        _numba(1, cache)  # build every kernel first (untimed): the rows time execution
    wall, cpu, tail = benchmark.pedantic(lambda: _numba(int(workers), cache), rounds=1,
                                         iterations=1)
    _NUMBA[workers], _NUMBA["cpu" + workers] = wall, cpu
    benchmark.extra_info.update({"suite": "sim-workers", "wall_s": wall, "cpu_s": cpu,
                                 "ratio_to_1": wall / _NUMBA.get("1", wall),
                                 "cpu_ratio_to_1": cpu / _NUMBA.get("cpu1", cpu),
                                 "load": os.getloadavg()[0], "durations": tail})
    sys.stdout.write(f"\nnumba-cuda test_matmul + test_laplace, {workers} worker(s): {wall:.1f} s"
                     f" ({wall / _NUMBA.get('1', wall):.2f}x one worker), CPU {cpu:.1f} s "
                     f"({cpu / _NUMBA.get('cpu1', cpu):.2f}x)\n{tail}\n")
