"""numba-cuda kernels on gpuarray arrays, without a GPU.

Run it over gpuarray's stand-in driver (the CPU simulator behind libcuda):

    python -m gpuarray standin -- python examples/numba_kernels.py

numba-cuda compiles each kernel to PTX and links it through the driver; the
simulator executes that PTX, thread by thread, checking every memory access.
docs/sim/numba_kernels.rst walks through it.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

import gpuarray


# --- a kernel on gpuarray arrays --------------------------------------------
@cuda.jit
def axpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


# --- a block reduction: warp shuffles, shared memory, an atomic --------------
@cuda.jit
def block_sum(x, total):
    partial = cuda.shared.array(32, np.float32)     # one slot per warp
    i = cuda.grid(1)
    v = x[i] if i < x.size else np.float32(0)
    lane, warp = cuda.laneid, cuda.threadIdx.x // 32
    offset = 16
    while offset > 0:                              # reduce within the warp
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
        offset //= 2
    if lane == 0:
        partial[warp] = v
    cuda.syncthreads()
    if warp == 0:                                  # the first warp reduces the warps
        v = partial[lane] if lane < cuda.blockDim.x // 32 else np.float32(0)
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        if lane == 0:
            cuda.atomic.add(total, 0, v)           # one atomic per block


# --- bugs the simulator catches: stores past the end --------------------------
@cuda.jit
def off_by_one(out):
    i = cuda.grid(1)
    if i <= out.size:                              # should be <
        out[i] = i


@cuda.jit
def wrong_stride(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i * 1024] = i                          # should be out[i]


def main() -> None:
    n = 1000
    x = gpuarray.to_device(np.arange(n, dtype=np.float32))
    y = gpuarray.to_device(np.ones(n, dtype=np.float32))
    out = gpuarray.empty(n, np.float32)
    axpy[(n + 127) // 128, 128](np.float32(2), x, y, out)
    cuda.synchronize()
    assert np.array_equal(out.copy_to_host(), 2 * np.arange(n, dtype=np.float32) + 1)

    total = gpuarray.zeros(1, np.float32)
    block_sum[(n + 255) // 256, 256](x, total)
    cuda.synchronize()
    assert total.copy_to_host()[0] == n * (n - 1) / 2
    print("axpy and block_sum: right answers")

    # One element past the end lands in the allocation's mapped 512-byte granule:
    # a GPU does not fault there and neither does the simulator (by default); it
    # reports the store as compute-sanitizer's memcheck does, on stderr.
    small = gpuarray.empty(100, np.int32)
    off_by_one[1, 128](small)
    cuda.synchronize()
    print("off_by_one: ran, as on a GPU; the simulator's memcheck report is on stderr")

    # Far past the end, where nothing is mapped: a fault, sticky as on a GPU.
    try:
        wrong_stride[1, 128](small)
        cuda.synchronize()
    except Exception as e:                         # numba's CudaAPIError
        print("wrong_stride:", e)
    else:
        raise AssertionError("the store past the end was not caught")


if __name__ == "__main__":
    main()
