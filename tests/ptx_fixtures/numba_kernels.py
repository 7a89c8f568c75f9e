"""The numba-cuda kernels whose PTX is in ``numba_*.ptx`` (the test fixtures).

Regenerate with ``.venv-peers/bin/python tests/ptx_fixtures/numba_kernels.py``
(numba-cuda 0.30.4; ``compile_ptx`` needs no GPU).  Each fixture is the
compiler's output for compute capability 9.0.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def kernels():
    from numba import cuda, float32, float64, int32, int64, uint32

    def warp_reduce(a, out):
        i = cuda.grid(1)
        v = a[i]
        for off in (16, 8, 4, 2, 1):
            v += cuda.shfl_down_sync(0xffffffff, v, off)
        if cuda.laneid == 0:
            cuda.atomic.add(out, 0, v)

    def shared_hist(data, hist):
        sh = cuda.shared.array(16, dtype=int32)
        t = cuda.threadIdx.x
        if t < 16:
            sh[t] = 0
        cuda.syncthreads()
        i = cuda.grid(1)
        if i < data.size:
            cuda.atomic.add(sh, data[i] % 16, 1)
        cuda.syncthreads()
        if t < 16:
            cuda.atomic.add(hist, t, sh[t])

    def votes(a, out):
        i = cuda.grid(1)
        p = a[i] > 0
        b = cuda.ballot_sync(0xffffffff, p)
        al = cuda.all_sync(0xffffffff, p)
        an = cuda.any_sync(0xffffffff, p)
        m = cuda.match_any_sync(0xffffffff, a[i])
        out[i] = b ^ (al << 1) ^ (an << 2) ^ m ^ cuda.activemask()

    def dynamic_shared(a, out):
        sh = cuda.shared.array(0, dtype=float64)
        t = cuda.threadIdx.x
        sh[t] = a[t] * 2
        cuda.syncthreads()
        out[t] = sh[cuda.blockDim.x - 1 - t] + cuda.syncthreads_count(1 if t > 3 else 0)

    def local(a, out):
        loc = cuda.local.array(8, dtype=int64)
        i = cuda.grid(1)
        for k in range(8):
            loc[k] = a[i] * k
        s = 0
        for k in range(8):
            s += loc[(k * 3 + i) % 8]
        out[i] = s

    def printf(a):
        i = cuda.grid(1)
        if i < 2:
            print("thread", i, "value", a[i])

    def math_(a, out):
        i = cuda.grid(1)
        x = a[i]
        out[i] = math.sqrt(x) + math.exp(x) + math.sin(x) + math.log(x + 1.0) + x ** 1.5

    const_data = np.arange(8, dtype=np.float32)

    def const(out):
        c = cuda.const.array_like(const_data)
        i = cuda.grid(1)
        out[i] = c[i % 8] * 2

    def atomics(a, out):
        i = cuda.grid(1)
        cuda.atomic.max(out, 0, a[i])
        cuda.atomic.min(out, 1, a[i])
        cuda.atomic.compare_and_swap(out[3:4], 0, a[i])
        cuda.atomic.exch(out, 4, a[i])
        cuda.atomic.and_(out, 5, a[i])
        cuda.atomic.or_(out, 6, a[i])
        cuda.atomic.xor(out, 7, a[i])

    def atom_incdec(a, out):
        i = cuda.grid(1)
        cuda.atomic.inc(out, 0, np.uint32(7))
        cuda.atomic.dec(out, 1, np.uint32(7))
        cuda.atomic.compare_and_swap(out[2:], np.uint32(0), a[i])

    def shfl_f64(a, out):
        i = cuda.grid(1)
        v = a[i]
        v2 = cuda.shfl_up_sync(0xffffffff, v, 1)
        v3 = cuda.shfl_xor_sync(0xffffffff, v, 3)
        v4 = cuda.shfl_sync(0xffffffff, v, 5)
        cuda.syncwarp()
        cuda.threadfence()
        out[i] = v2 + 2 * v3 + 3 * v4

    def int_ops(a, out):
        i = cuda.grid(1)
        x = a[i]
        out[i] = ((x // 7) + (x % 5) + (x >> 2) + (x << 3) + (x ^ 0x55) + int(float(x) * 0.3)
                  + min(x, 3) + max(x, -3) + abs(x))

    def bit_ops(a, out):
        i = cuda.grid(1)
        out[i] = cuda.popc(a[i]) + cuda.clz(a[i]) + cuda.ffs(a[i]) + cuda.brev(a[i])

    def match_all(a, out):
        i = cuda.grid(1)
        m = cuda.match_all_sync(0xffffffff, a[i])
        out[i] = m[0] + (1 if m[1] else 0) + cuda.lanemask_lt()

    def math_f64_2d(a, out):
        x, y = cuda.grid(2)
        if x < a.shape[0] and y < a.shape[1]:
            v = a[x, y]
            out[x, y] = (math.pow(v, 1.5) + math.exp(v) + math.log1p(v) + math.atan2(v, 2.0)
                         + math.tanh(v))

    return {
        "warp_reduce": (warp_reduce, (float32[:], float32[:])),
        "shared_hist": (shared_hist, (int32[:], int32[:])),
        "votes": (votes, (int32[:], uint32[:])),
        "dynamic_shared": (dynamic_shared, (float64[:], float64[:])),
        "local": (local, (int64[:], int64[:])),
        "printf": (printf, (float64[:],)),
        "math": (math_, (float32[:], float32[:])),
        "const": (const, (float32[:],)),
        "atomics": (atomics, (int32[:], int32[:])),
        "atom_incdec": (atom_incdec, (uint32[:], uint32[:])),
        "shfl_f64": (shfl_f64, (float64[:], float64[:])),
        "int_ops": (int_ops, (int64[:], int64[:])),
        "bit_ops": (bit_ops, (uint32[:], uint32[:])),
        "match_all": (match_all, (int32[:], uint32[:])),
        "math_f64_2d": (math_f64_2d, (float64[:, :], float64[:, :])),
    }


if __name__ == "__main__":
    from numba import cuda

    here = Path(__file__).parent
    for name, (fn, sig) in kernels().items():
        text, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
        (here / f"numba_{name}.ptx").write_text(text)
        print(name)
