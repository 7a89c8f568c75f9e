"""Driver-API peers on simulated device memory: cuda.core and numba-cuda over the stand-in (issue 29).

cuda.core and numba-cuda make their own driver calls (allocations, streams,
copies) through the real cuda-bindings; over the stand-in driver those reach
the same simulator as gpuarray's, so arrays move between them and gpuarray
through the CUDA Array Interface and DLPack, zero-copy, with their streams
ordered and their memory kept alive by whoever holds a view.  Run by
``make test-numba-driver`` in ``.venv-peers`` (tests/requirements-peers.txt);
each test skips, saying which, when a peer is not installed or the process
does not run over the stand-in.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from gpuarray_sim import standin as _standin

import gpuarray

pytestmark = pytest.mark.skipif(
    not _standin.active() or gpuarray._driver.backend_name() != "cuda",
    reason="needs the cuda backend over the stand-in driver (python -m gpuarray standin -- pytest)")


@pytest.fixture
def nb_cuda():
    pytest.importorskip("numba_cuda", reason="numba-cuda is not installed "
                                             "(pip install -r tests/requirements-peers.txt)")
    from numba import cuda

    return cuda


def test_numba_device_arrays_and_gpuarray_share_memory_both_ways(nb_cuda):
    host = np.arange(24, dtype=np.float64).reshape(4, 6)
    n = nb_cuda.to_device(host)
    g = gpuarray.as_cuda_array(n)                     # numba -> gpuarray through CAI
    assert g.__cuda_array_interface__["data"][0] == n.__cuda_array_interface__["data"][0]
    np.testing.assert_array_equal(g.copy_to_host(), host)
    g[1:3, ::2] = -1.0                                # written by gpuarray, seen by numba
    expected = host.copy()
    expected[1:3, ::2] = -1.0
    np.testing.assert_array_equal(n.copy_to_host(), expected)

    a = gpuarray.to_device(np.arange(10, dtype=np.int32))
    m = nb_cuda.as_cuda_array(a)                      # gpuarray -> numba through CAI
    assert m.device_ctypes_pointer.value == a.__cuda_array_interface__["data"][0]
    out = nb_cuda.device_array(10, dtype=np.int32)
    out.copy_to_device(m)                             # numba's own device-to-device copy
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(10))


def test_a_numba_view_keeps_gpuarray_memory_alive(nb_cuda):
    a = gpuarray.to_device(np.arange(8, dtype=np.float32))
    m = nb_cuda.as_cuda_array(a)
    del a
    gc.collect()
    np.testing.assert_array_equal(m.copy_to_host(), np.arange(8))


def test_numba_stream_work_is_ordered_for_gpuarray(nb_cuda):
    s = nb_cuda.stream()
    host = nb_cuda.pinned_array(1 << 12, dtype=np.uint8)
    host[:] = 7
    n = nb_cuda.to_device(host, stream=s)             # queued on numba's stream
    g = gpuarray.as_cuda_array(n)                     # CAI v3 carries the stream
    assert g.copy_to_host().sum() == 7 * (1 << 12)    # ordered after numba's copy


def test_cuda_core_views_gpuarray_arrays_through_cai_and_dlpack(core):
    mod, dev = core
    from cuda.core.utils import StridedMemoryView

    s = dev.create_stream()
    a = gpuarray.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    for v in (StridedMemoryView.from_cuda_array_interface(a, stream_ptr=int(s.handle)),
              StridedMemoryView.from_dlpack(a, stream_ptr=int(s.handle))):
        assert v.ptr == a.__cuda_array_interface__["data"][0]
        assert tuple(v.shape) == (3, 4) and v.is_device_accessible
    b = gpuarray.from_dlpack(a[::2])
    np.testing.assert_array_equal(b.copy_to_host(), np.arange(12).reshape(3, 4)[::2])


def test_cuda_core_buffers_become_gpuarray_arrays(core):
    mod, dev = core
    s = dev.create_stream()
    buf = dev.memory_resource.allocate(64, stream=s)
    s.sync()
    g = gpuarray.from_cuda_array_interface(
        {"shape": (16,), "typestr": "<i4", "data": (int(buf.handle), False), "version": 3,
         "strides": None, "stream": None}, owner=buf)
    g[:] = 5
    np.testing.assert_array_equal(g.copy_to_host(), np.full(16, 5))
    buf.close(s)
