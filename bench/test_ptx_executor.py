"""The simulator's PTX executor: translated kernels next to the host build, and load costs.

Simulator only (a GPU runs PTX itself).  Rows:

- ``test_ptx_vs_host_build[case]``: a kernel of ``kernels/`` run from the
  PTX NVRTC makes (translated to C++) and from the host build of the same
  CUDA C, same launch, same data; pytest-benchmark's columns time the PTX
  launch, ``extra_info`` holds nanoseconds per element of both and
  ``ratio`` = PTX / host build (issue 36's target: within 2x).
- ``test_ptx_first_build``: a typical numba-cuda kernel (a warp-shuffle
  reduction with an atomic) parsed, translated and compiled with an empty
  cache (target: under 1 s).
- ``test_ptx_cached_load``: the same from the disk cache in a fresh program
  (parse, cache read, ``dlopen``; target: under 5 ms).
- ``test_barrier_passage[threads]``: a loop of ``bar.sync 0`` in blocks of
  32, 256 and 1024 threads, translated, one worker; ``extra_info`` holds
  nanoseconds per thread per passage and ``ratio`` = that over the same
  loop without the barrier, in the same run (what a passage costs beyond
  the loop itself: the fiber switch and the barrier's bookkeeping).
"""

from __future__ import annotations

import os
import re
import sys
import time

import numpy as np
import pytest
from _harness import SIM

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from sim.tests.ptx.support import backend, fixture, upload  # noqa: E402

pytestmark = pytest.mark.skipif(not SIM, reason="the PTX executor is the simulator's")

N = 1 << 18
CASES = {  # (dst dtype, src dtype, shape, dst strides in elements, src strides in elements)
    "copy_f2_f4_1d": (np.float16, np.float32, (N,), (1,), (1,)),
    "copy_f4_f8_2d": (np.float32, np.float64, (512, 512), (512, 1), (1, 512)),
    "transpose_f4": (np.float32, np.float32, (512, 512), (512, 1), (1, 512)),
}


def _timed(fn, reps=3):
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


@pytest.mark.parametrize("case", list(CASES))
def test_ptx_vs_host_build(benchmark, case):
    from gpuarray_sim._images import PLACEHOLDER

    from gpuarray._kernels import _launch, _nvrtc, _plan, _source, _specs, _toolchain

    if _toolchain.current() is None:
        pytest.skip("NVRTC is not available to make the PTX")
    dt, st, shape, dstr, sstr = CASES[case]
    b = backend()
    n = int(np.prod(shape))
    src = upload(b, np.random.default_rng(0).random(n).astype(st))
    dst = b.mem_alloc(n * np.dtype(dt).itemsize)
    (op,) = _plan.plan_copy(dst, [s * np.dtype(dt).itemsize for s in dstr], dt, src,
                            [s * np.dtype(st).itemsize for s in sstr], st, shape)
    sym = op.spec.symbol
    text = _nvrtc.compile_program(_specs.program_source([op.spec]), _source.kernel_headers(),
                                  _nvrtc.compile_options(_nvrtc.Target("ptx", "compute_90")),
                                  "ptx").rstrip(b"\0").decode()
    renamed = re.sub(rf"\b{sym}", "bench_" + sym, text)
    fh = b.module_get_function(b.module_load_data(PLACEHOLDER + sym.encode() + b"\0"), sym)
    fp = b.module_get_function(b.module_load_data(renamed.encode() + b"\0"), "bench_" + sym)
    block = (32, 8, 1) if op.spec.family == "transpose" else (256, 1, 1)
    grid = _launch.grid_for(op, 132)
    params = [_launch.params_for(op)]

    def run(f):
        b.launch_kernel(f, grid, block, 0, 1, params)
        b.ctx_synchronize()

    run(fh)
    run(fp)
    host = _timed(lambda: run(fh))
    ptx = _timed(lambda: run(fp))
    benchmark.extra_info.update({"host_ns_per_element": host / n * 1e9,
                                 "ptx_ns_per_element": ptx / n * 1e9, "ratio": ptx / host,
                                 "kernel": sym})
    benchmark.pedantic(run, args=(fp,), rounds=3, iterations=1)


def _fresh_cache(tmp_path, monkeypatch):
    from gpuarray_sim.ptx import _build

    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(tmp_path))
    _build._programs.clear()
    return _build


def test_ptx_first_build(benchmark, tmp_path, monkeypatch):
    build = _fresh_cache(tmp_path, monkeypatch)
    text = fixture("numba_warp_reduce")
    runs = iter(range(100))

    def first():  # a text the cache has never seen (a comment makes it new)
        build.load(text + f"\n// {next(runs)}\n").build()

    benchmark.pedantic(first, rounds=2, iterations=1)


def test_ptx_cached_load(benchmark, tmp_path, monkeypatch):
    from gpuarray_sim.kernels import _host

    build = _fresh_cache(tmp_path, monkeypatch)
    text = fixture("numba_warp_reduce")
    build.load(text).build()

    def cached():
        build._programs.clear()
        _host._loaded.clear()  # dlopen again, as a new process would
        assert build.load(text).build()["exports"]  # entries resolved from the cached library

    benchmark.pedantic(cached, rounds=5, iterations=1)


_BARS = """
.visible .entry bars(.param .u32 n)
{
  .reg .b32 %i, %n; .reg .pred %p;
  ld.param.u32 %n, [n];
  mov.u32 %i, 0;
L:
  setp.ge.u32 %p, %i, %n;
  @%p bra D;
  BARRIER
  add.u32 %i, %i, 1;
  bra L;
D:
  ret;
}
"""


@pytest.mark.parametrize("threads", [32, 256, 1024])
def test_barrier_passage(benchmark, monkeypatch, threads):
    import ctypes

    from sim.tests.ptx.support import HEAD

    monkeypatch.setenv("GPUARRAY_SIM_PTX_TIER", "compiled")
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS", "1")
    b = backend()
    blocks, n = 16, 200

    def kernel(barrier: str):
        m = b.module_load_data((HEAD + _BARS.replace("BARRIER", barrier)).encode() + b"\0")
        return b.module_get_function(m, "bars")

    with_bar, without = kernel("bar.sync 0;"), kernel("")

    def run(f):
        b.launch_kernel(f, (blocks, 1, 1), (threads, 1, 1), 0, 1, [ctypes.c_uint32(n)])
        b.ctx_synchronize()

    run(with_bar), run(without)  # built and loaded before timing
    passages = blocks * threads * n
    loop, bar = _timed(lambda: run(without)), _timed(lambda: run(with_bar))
    benchmark.extra_info.update(ns_per_passage=round(bar / passages * 1e9, 2),
                                ns_per_loop_iteration=round(loop / passages * 1e9, 2),
                                ratio=round(bar / loop, 2))
    benchmark.pedantic(run, args=(with_bar,), rounds=3, iterations=1)
