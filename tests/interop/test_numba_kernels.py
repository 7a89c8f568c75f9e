"""``@cuda.jit`` kernels take gpuarray arrays, in stream order (needs numba-cuda and a GPU).

Numba reads gpuarray arrays through the CUDA Array Interface: it
synchronises on the exported stream before a launch (its
``CUDA_ARRAY_INTERFACE_SYNC`` default), so work queued on a gpuarray stream
is complete when the kernel runs; the kernel's results are ordered for
gpuarray by running the next gpuarray operation on the kernel's stream.
Mapped and managed host arrays from gpuarray go to kernels directly.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuarray
from tests.support import backend_is_sim

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.interop,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*[Gg]rid size.*"),  # NumbaPerformanceWarning on tiny grids
]


def _numba_cuda():
    if backend_is_sim():
        pytest.skip("needs the CUDA backend and a GPU: the simulator's memory is not CUDA "
                    "memory a Numba kernel could use (GPUARRAY_BACKEND=sim)")
    try:
        from numba import cuda
    except ImportError as e:
        pytest.skip(f"numba-cuda is not installed ({e})")
    if not cuda.is_available():
        pytest.skip("numba.cuda.is_available() is False")
    return cuda


@pytest.fixture(scope="module")
def kernels():
    cuda = _numba_cuda()

    @cuda.jit
    def scale_add(x, out, a, b):
        i = cuda.grid(1)
        if i < x.shape[0]:
            out[i] = a * x[i] + b

    @cuda.jit
    def spin_then_set(flag, out, n):
        # A long-running kernel: the consumer must not start before it ends.
        i = cuda.grid(1)
        if i == 0:
            acc = 0.0
            for k in range(n):
                acc += k * 1e-9
            out[0] = flag[0] + acc * 0.0

    return cuda, scale_add, spin_then_set


def test_kernel_reads_and_writes_gpuarray_arrays(kernels):
    cuda, scale_add, _ = kernels
    x = gpuarray.to_device(np.arange(1000, dtype=np.float32))
    out = gpuarray.empty(1000, np.float32)
    scale_add[8, 128](x, out, 2.0, 1.0)
    cuda.synchronize()
    np.testing.assert_allclose(out.copy_to_host(), 2 * np.arange(1000, dtype=np.float32) + 1)


def test_kernel_waits_for_work_queued_on_a_gpuarray_stream(kernels):
    cuda, scale_add, _ = kernels
    s = gpuarray.stream(non_blocking=True)
    big = np.full(1 << 24, 3.0, np.float32)   # a copy long enough to still be running
    x = gpuarray.to_device(big, stream=s)       # queued on s
    out = gpuarray.empty(big.size, np.float32, stream=s)
    ns = cuda.stream()                            # another stream: Numba syncs on s first
    scale_add[(big.size + 255) // 256, 256, ns](x, out, 1.0, 1.0)
    # gpuarray orders its next operation after the kernel by running on its stream
    host = out.copy_to_host(stream=ns)  # a Numba stream is accepted as is
    assert (host == 4.0).all()


def test_gpuarray_waits_for_a_kernel_on_numba_stream(kernels):
    cuda, _, spin_then_set = kernels
    ns = cuda.stream()
    flag = gpuarray.to_device(np.array([7.0]))
    out = gpuarray.zeros(1)
    gpuarray.synchronize()
    spin_then_set[1, 1, ns](flag, out, 1 << 22)
    result = out.copy_to_host(stream=ns)  # a Numba stream is accepted as is
    assert result[0] == 7.0


def test_kernel_on_the_stream_of_the_array(kernels):
    cuda, scale_add, _ = kernels
    s = gpuarray.stream()
    x = gpuarray.to_device(np.ones(256, np.float32), stream=s)
    ns = cuda.external_stream(s.handle)          # the same stream: in order, no sync needed
    scale_add[1, 256, ns](x, x, 3.0, 0.0)
    assert (x.copy_to_host() == 3.0).all()      # x's stream is s: after the kernel


@pytest.mark.parametrize("make", [gpuarray.mapped_array, gpuarray.managed_array],
                         ids=["mapped", "managed"])
def test_mapped_and_managed_arrays_go_to_kernels_directly(kernels, make):
    cuda, scale_add, _ = kernels
    h = make(64, dtype=np.float32)
    h[:] = np.arange(64)
    out = make(64, dtype=np.float32)
    scale_add[1, 64](h, out, 1.0, 0.5)
    cuda.synchronize()
    np.testing.assert_allclose(out, np.arange(64) + 0.5)
