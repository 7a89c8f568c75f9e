"""Host time of launching a ``@cuda.jit`` kernel with gpuarray arrays, next to Numba's and CuPy's.

Numba's own device arrays are typed directly; gpuarray's and CuPy's arrays
are read through the CUDA Array Interface on every launch (Numba also
synchronises on the exported stream, ``CUDA_ARRAY_INTERFACE_SYNC``).  The
same compiled kernel, the same grid, one process; the rows are microseconds
of host time per launch and ``ratio_vs_numba`` compares each row with
Numba's own arrays measured in the same run.  A second case passes mapped
host arrays (Numba's ``mapped_array`` and gpuarray's ``MappedNDArray``).  GPU only: on the simulator
Numba has no device to launch on, so every row skips with the reason.
"""

from __future__ import annotations

from typing import Any

import _impls
import numpy as np
import pytest
from _harness import ctx, host, peer

N = 1 << 12
CASES = [("device", "numba"), ("device", "gpuarray"), ("device", "cupy"),
         ("mapped", "numba"), ("mapped", "gpuarray")]
_kernel: Any = None
_numba_us: dict[str, float] = {}


def _get_kernel(cuda: Any) -> Any:
    global _kernel
    if _kernel is None:
        @cuda.jit
        def axpy(x, out, a):
            i = cuda.grid(1)
            if i < x.shape[0]:
                out[i] = a * x[i] + out[i]

        _kernel = axpy
    return _kernel


def _arrays(memory: str, impl: str, cuda: Any) -> tuple[Any, Any]:
    if memory == "mapped":
        if impl == "gpuarray":
            import gpuarray

            make = gpuarray.mapped_array
        else:
            make = cuda.mapped_array
        x, out = make(N, np.float32), make(N, np.float32)
        x[:] = 1
        out[:] = 0
        return x, out
    return _impls.ones(impl, (N,), np.float32), _impls.ones(impl, (N,), np.float32)


@pytest.mark.parametrize(("memory", "impl"), CASES, ids=[f"{m}-{i}" for m, i in CASES])
def test_numba_kernel_launch(benchmark, memory, impl):
    cuda = peer("numba")
    if impl == "cupy":
        peer("cupy")
    kernel = _get_kernel(cuda)
    x, out = _arrays(memory, impl, cuda)
    grid = (N + 255) // 256
    kernel[grid, 256](x, out, 2.0)   # compile and warm the argument path
    cuda.synchronize()
    ctx().stream.synchronize()
    case = f"@cuda.jit launch, 2 {memory} arrays + scalar"
    host(benchmark, suite="host", case=case, impl=impl,
         op=lambda: kernel[grid, 256](x, out, 2.0), after_round=cuda.synchronize,
         target="gpuarray arrays within 1.5x of Numba's own")
    if benchmark.stats is None:
        return
    us = benchmark.stats.stats.median * 1e6
    if impl == "numba":
        _numba_us[memory] = us
    elif memory in _numba_us:
        benchmark.extra_info["ratio_vs_numba"] = us / _numba_us[memory]
