"""The simulator as a checker: deliberately wrong stream code is caught,
and the same code with the right event wait is not (the simulator, or the
cuda backend over the stand-in driver with the simulator behind it)."""

from __future__ import annotations

import numpy as np
import pytest

import gpuarray
from tests.support import raises_stream_order_error, simulated

pytestmark = pytest.mark.skipif(not simulated(), reason="the race detector is a simulator feature")


def _producer():
    """An array with pending writes on a non-blocking stream (no host sync)."""
    s = gpuarray.stream(non_blocking=True)
    a = gpuarray.empty(256, np.float32, stream=s)
    a.fill(3.0)
    return a


def _raw_read(ptr, nbytes, stream):
    out = np.empty(nbytes // 4, np.float32)
    gpuarray._driver.get_backend().memcpy_dtoh_async(out.ctypes.data, ptr, nbytes, stream.handle)
    return out


def test_raw_cai_consumer_that_ignores_the_stream_is_caught():
    a = _producer()
    cai = a.__cuda_array_interface__
    mine = gpuarray.stream(non_blocking=True)
    with raises_stream_order_error(match="unordered access"):
        _raw_read(cai["data"][0], a.nbytes, mine)


def test_raw_cai_consumer_that_waits_on_the_stream_is_not():
    a = _producer()
    cai = a.__cuda_array_interface__
    mine = gpuarray.stream(non_blocking=True)
    producer = gpuarray.external_stream(cai["stream"])
    mine.wait_event(producer.record())
    assert (_raw_read(cai["data"][0], a.nbytes, mine) == 3).all()


def test_reading_pinned_memory_before_synchronising_shows_garbage():
    a = _producer()
    out = gpuarray.pinned_array(256, np.float32)
    a.copy_to_host(out, stream=a.stream)
    assert np.isnan(out).all()      # wrong: read before a.stream.synchronize()
    a.stream.synchronize()
    assert (out == 3).all()         # right


def test_kernel_on_one_stream_reading_what_another_writes_is_caught():
    sa, sb = gpuarray.stream(non_blocking=True), gpuarray.stream(non_blocking=True)
    base = gpuarray.zeros((64, 64), np.float32)
    base.stream.synchronize()
    on_a, on_b = base.bind(sa), base.bind(sb)
    on_a[:, ::2] = 1.0               # a strided fill kernel on stream A
    with raises_stream_order_error() as e:
        on_b.T.copy()                # a copy kernel on stream B reads it, unordered
    assert "kernel" in str(e.value)


def test_the_same_kernels_with_an_event_wait_are_not():
    sa, sb = gpuarray.stream(non_blocking=True), gpuarray.stream(non_blocking=True)
    base = gpuarray.zeros((64, 64), np.float32)
    base.stream.synchronize()
    on_a, on_b = base.bind(sa), base.bind(sb)
    on_a[:, ::2] = 1.0
    sb.wait_event(sa.record())
    t = on_b.T.copy()
    expect = np.zeros((64, 64), np.float32)
    expect[:, ::2] = 1
    np.testing.assert_array_equal(t.copy_to_host(), expect.T)
