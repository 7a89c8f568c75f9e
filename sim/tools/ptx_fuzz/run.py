#!/usr/bin/env python
"""The PTX executor's differential fuzzer: random CUDA C, NVRTC's PTX on the simulator vs the host.

Usage (in make test's environment, ``.venv``; needs NVRTC, a C++ compiler and
CUDA's ``cuda_fp16.h``/``cuda_bf16.h``, found under ``CUDA_HOME``,
``/usr/local/cuda`` or an ``nvidia`` wheel)::

    python sim/tools/ptx_fuzz/run.py [--seeds 0:200] [--kernels 4] [--statements 24]
                                     [--minutes M] [--keep DIR] [--mutants N]

Each seed makes one translation unit of random kernels (``gen.py``), which
NVRTC compiles to PTX for ``compute_90`` -- run by the simulator's PTX
executor over one 64-thread block, every access checked -- and g++ compiles
for the host with ``host.h`` (CUDA's built-ins written from CUDA's
documentation, threads as std::threads).  Every output word of every thread
must agree bit for bit (a NaN with any NaN).  A difference is printed with
the seed, kernel, thread, the statement that made the value and both
answers; ``--keep`` saves its source.  ``--mutants N`` also runs N
ptxas-judged one-change mutants of the PTX (``mutate.py``).  The summary
gives the counts (kernels run, outputs compared, differences; mutants,
disagreements); the exit status is 1 when anything differed.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

HERE = Path(__file__).resolve().parent


def _sibling(name: str) -> ModuleType:
    """This folder's ``name``.py, as module ``ptx_fuzz_<name>`` (no clash with another ``gen``)."""
    full = f"ptx_fuzz_{name}"
    if full not in sys.modules:
        spec = importlib.util.spec_from_file_location(full, HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[full] = mod
        spec.loader.exec_module(mod)
    return sys.modules[full]


gen = _sibling("gen")
mutate = _sibling("mutate")

#: The host side's build: -frounding-math so fesetround governs the directed intrinsics.
CXXFLAGS = ("-std=c++17", "-O1", "-frounding-math", "-fno-fast-math", "-fPIC", "-shared", "-pthread")
HARNESS = r"""
#include <thread>
#include <vector>
thread_local fz_dim3 threadIdx;
fz_dim3 blockDim{64, 1, 1};
fz_block* fz_blk;
typedef void (*fz_kernel)(const unsigned*, unsigned long long*);
extern "C" int fz_run(fz_kernel k, const unsigned* in, unsigned long long* out, unsigned n) {
    fz_block blk;
    fz_blk = &blk;
    std::vector<std::thread> ts;
    for (unsigned t = 0; t < n; ++t) ts.emplace_back([=] { threadIdx = {t, 0, 0}; k(in, out); });
    for (auto& t : ts) t.join();
    return 0;
}
"""


def cuda_include() -> Path | None:
    """A folder with CUDA's ``cuda_fp16.h`` and ``cuda_bf16.h``, or None."""
    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    cands = [Path(r) / "include" for r in roots if r]
    for p in sys.path:
        cands += [Path(p) / "nvidia" / "cu13" / "include", Path(p) / "nvidia" / "cuda_runtime" / "include"]
    for c in cands:
        if (c / "cuda_fp16.h").is_file() and (c / "cuda_bf16.h").is_file():
            return c
    return None


def compiler() -> str | None:
    for cc in (os.environ.get("CXX", ""), "g++", "c++", "clang++"):
        if cc and subprocess.run(["sh", "-c", f"command -v {cc}"], capture_output=True).returncode == 0:
            return cc
    return None


@dataclass
class Difference:
    seed: int
    kernel: str
    thread: int
    statement: str
    host: int
    device: int

    def __str__(self) -> str:
        return (f"seed {self.seed} {self.kernel} thread {self.thread}: {self.statement}\n"
                f"    host 0x{self.host:x}  simulator 0x{self.device:x}")


@dataclass
class Counts:
    programs: int = 0
    kernels: int = 0
    outputs: int = 0
    differences: list[Difference] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # a side that could not run a program
    mutants: mutate.Verdicts = field(default_factory=mutate.Verdicts)


def build_host(source: str, workdir: Path) -> ctypes.CDLL:
    """The host build of ``source`` (a shared library with ``fz_run``)."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C++ compiler")
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    src, lib = workdir / f"host_{key}.cpp", workdir / f"host_{key}.so"
    src.write_text(source + HARNESS, encoding="utf-8")
    r = subprocess.run([cc, *CXXFLAGS, f"-I{HERE}", str(src), "-o", str(lib)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"the host build failed:\n{r.stderr[-4000:]}")
    return ctypes.CDLL(str(lib))


def run_host(lib: ctypes.CDLL, kernels: Sequence[gen.Kernel], words: np.ndarray) -> list[np.ndarray]:
    out = []
    run = lib.fz_run
    run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
    for k in kernels:
        res = np.zeros(gen.THREADS * len(k.kinds), np.uint64)
        fn = ctypes.cast(getattr(lib, k.name), ctypes.c_void_p).value
        run(fn, words.ctypes.data, res.ctypes.data, gen.THREADS)
        out.append(res)
    return out


def nvrtc_ptx(source: str, include: Path) -> bytes:
    from gpuarray._kernels import _nvrtc

    return _nvrtc.compile_program(source, {}, ["--gpu-architecture=compute_90", f"-I{include}"],
                                  "ptx", name="fuzz.cu")


def run_device(ptx: bytes, kernels: Sequence[gen.Kernel], words: np.ndarray) -> list[np.ndarray]:
    """Each kernel over one 64-thread block on a fresh simulator (strict memcheck)."""
    from gpuarray_sim import SimBackend

    b = SimBackend(memcheck="strict")
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    module = b.module_load_data(ptx)
    inp = b.mem_alloc(words.nbytes)
    b.memcpy_htod_async(inp, words.ctypes.data, words.nbytes, 1)
    out = []
    for k in kernels:
        res = np.zeros(gen.THREADS * len(k.kinds), np.uint64)
        d = b.mem_alloc(res.nbytes)
        b.launch_kernel(b.module_get_function(module, k.name), (1, 1, 1), (gen.THREADS, 1, 1), 0, 1,
                        [ctypes.c_uint64(inp), ctypes.c_uint64(d)])
        b.ctx_synchronize()
        b.memcpy_dtoh_async(res.ctypes.data, d, res.nbytes, 1)
        b.ctx_synchronize()
        out.append(res)
    return out


_NAN = {"f32": (lambda x: (x & 0x7F800000) == 0x7F800000 and x & 0x7FFFFF),
        "f64": (lambda x: (x >> 52 & 0x7FF) == 0x7FF and x & ((1 << 52) - 1)),
        "f16": (lambda x: (x & 0x7C00) == 0x7C00 and x & 0x3FF),
        "bf16": (lambda x: (x & 0x7F80) == 0x7F80 and x & 0x7F)}


def compare(seed: int, kernels: Sequence[gen.Kernel], host: list[np.ndarray],
            dev: list[np.ndarray], counts: Counts) -> None:
    for k, h, d in zip(kernels, host, dev, strict=True):
        n = len(k.kinds)
        counts.kernels += 1
        counts.outputs += h.size
        for i in np.flatnonzero(h != d).tolist():
            t, slot = divmod(i, n)
            kind, hv, dv = k.kinds[slot], int(h[i]), int(d[i])
            if kind in _NAN and _NAN[kind](hv) and _NAN[kind](dv):
                continue
            counts.differences.append(Difference(seed, k.name, t, k.statements[slot], hv, dv))


def one(seed: int, kernels: int, statements: int, include: Path, workdir: Path, counts: Counts,
        keep: Path | None = None) -> bytes | None:
    """Run one seed's program both ways; returns its PTX (None when it could not be made)."""
    source, kerns = gen.program(seed, kernels, statements)
    words = np.array(gen.inputs(seed), np.uint32)
    before = len(counts.differences)
    counts.programs += 1
    try:
        ptx = nvrtc_ptx(source, include)
        host = run_host(build_host(source, workdir), kerns, words)
        dev = run_device(ptx, kerns, words)
    except Exception as e:  # a refusal of either side is a finding too
        counts.failures.append(f"seed {seed}: {type(e).__name__}: {str(e)[:2000]}")
        if keep is not None:
            (keep / f"seed{seed}.cu").write_text(source, encoding="utf-8")
        return None
    compare(seed, kerns, host, dev, counts)
    if keep is not None and len(counts.differences) > before:
        (keep / f"seed{seed}.cu").write_text(source, encoding="utf-8")
        (keep / f"seed{seed}.ptx").write_bytes(ptx.rstrip(b"\0"))
    return ptx


def campaign(seeds: Sequence[int], kernels: int = 4, statements: int = 24,
             minutes: float | None = None, keep: Path | None = None, mutants: int = 0,
             log=print) -> Counts:
    """Run ``seeds`` (until ``minutes`` pass, if given); the counts."""
    include = cuda_include()
    if include is None:
        raise RuntimeError("CUDA's cuda_fp16.h/cuda_bf16.h were not found (CUDA_HOME, "
                           "/usr/local/cuda, an nvidia wheel)")
    counts = Counts()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ptx-fuzz-") as tmp:
        workdir = Path(tmp)
        for seed in seeds:
            if minutes is not None and time.monotonic() - t0 > 60 * minutes:
                break
            ptx = one(seed, kernels, statements, include, workdir, counts, keep)
            if ptx is not None and mutants:
                try:
                    counts.mutants.add(mutate.judge(ptx.rstrip(b"\0").decode(), mutants, seed, workdir))
                except RuntimeError as e:  # ptxas or the loader refuses the unmutated PTX
                    counts.failures.append(f"seed {seed}: mutants: {e}")
            if counts.programs % 10 == 0:
                log(f"... {counts.programs} programs, {counts.kernels} kernels, "
                    f"{len(counts.differences)} differences, "
                    f"{counts.mutants.tried} mutants")
    return counts


def report(counts: Counts, wall: float) -> str:
    lines = [str(d) for d in counts.differences[:50]] + counts.failures[:20]
    m = counts.mutants
    if m.tried:
        lines += [f"mutant: {d}" for d in m.disagreements[:50]]
        g = m.matrix.get
        lines.append(f"mutants: {m.tried} judged; ptxas accepts / loader accepts {g((True, True), 0)}, "
                     f"ptxas accepts / loader refuses {g((True, False), 0)}, ptxas refuses / loader "
                     f"accepts {g((False, True), 0)}, ptxas refuses / loader refuses "
                     f"{g((False, False), 0)}; ptxas crashed on {m.crashed} (no verdict"
                     + (f", e.g. {m.crash_example})" if m.crashed else ")"))
    lines.append(f"ptx_fuzz: {counts.programs} programs, {counts.kernels} kernels run "
                 f"({counts.kernels * gen.THREADS} threads, {counts.outputs} outputs compared), "
                 f"{len(counts.differences)} differences, {len(counts.failures)} failures; "
                 f"{m.tried} ptxas-judged mutants, {len(m.disagreements)} disagreements; {wall:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0:50", help="A:B, a range of seeds (default 0:50)")
    p.add_argument("--kernels", type=int, default=4, help="kernels per program (default 4)")
    p.add_argument("--statements", type=int, default=24, help="statements per kernel (default 24)")
    p.add_argument("--minutes", type=float, help="stop starting new seeds after this long")
    p.add_argument("--keep", type=Path, help="save the source (and PTX) of each program that differed")
    p.add_argument("--mutants", type=int, default=0, help="ptxas-judged mutants per program")
    a = p.parse_args(argv)
    lo, _, hi = a.seeds.partition(":")
    seeds = range(int(lo), int(hi)) if hi else range(int(lo), int(lo) + 1)
    if a.keep:
        a.keep.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    counts = campaign(seeds, a.kernels, a.statements, a.minutes, a.keep, a.mutants)
    print(report(counts, time.monotonic() - t0))
    bad = counts.differences or counts.failures or counts.mutants.disagreements
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
