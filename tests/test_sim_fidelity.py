"""Simulator fidelity: neither false failures nor lost faults (issue 12, items 1-3).

1. Page-locked destinations of queued copies read as garbage only to
   genuinely unsynchronised host reads: the poison respects stream order.
2. Device faults are sticky, as on CUDA: the context is unusable until it is
   reset, and a fault first seen in a garbage-collection finalizer is raised
   by the next call instead of vanishing.
3. Finalizers make their context current; the simulator refuses, on a thread
   with no current context, exactly the calls CUDA refuses there.
"""

from __future__ import annotations

import ctypes
import gc
import threading

import numpy as np
import pytest

import gpuarray
from gpuarray import _driver
from gpuarray._driver.sim import SimBackend
from gpuarray.errors import CudaError

from .conftest import backend_is_sim

pytestmark = pytest.mark.skipif(not backend_is_sim(), reason="checks the simulator's model of CUDA")

LEGACY = 1


def _backend(**kw) -> SimBackend:
    b = SimBackend(**kw)
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    return b


def _pinned(b, n):
    ptr = b.mem_host_alloc(n)
    return ptr, np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))


# ------------------------------------------------- 1. poison in stream order
def test_round_trip_through_the_same_pinned_buffer_on_one_stream():
    # The program: valid CUDA, which prints 0..7.
    s = gpuarray.stream()
    c = gpuarray.pinned_array(8, dtype=np.int32)
    c[:] = np.arange(8)
    p = gpuarray.to_device(c, stream=s)  # H2D from c, queued
    p.copy_to_host(c, stream=s)          # D2H into c, same stream, after it
    s.synchronize()
    np.testing.assert_array_equal(c, np.arange(8))


def test_queued_reader_of_a_pinned_buffer_sees_its_bytes_not_the_poison():
    b = _backend()
    d1, d2 = b.mem_alloc(16), b.mem_alloc(16)
    b.memset_d8_async(d2, 9, 16, LEGACY)
    ptr, host = _pinned(b, 16)
    host[:] = 5
    s = b.stream_create()
    b.memcpy_htod_async(d1, ptr, 16, s)   # reads host when it runs
    b.memcpy_dtoh_async(ptr, d2, 16, s)   # then overwrites it
    b.stream_synchronize(s)
    out = np.zeros(16, np.uint8)
    b.memcpy_dtoh_async(out.ctypes.data, d1, 16, LEGACY)
    assert (out == 5).all(), "the upload read the poison of a later copy on its stream"
    assert (host == 9).all()


def test_unsynchronised_read_still_sees_garbage_once_the_copy_is_next():
    b = _backend()
    d1, d2 = b.mem_alloc(16), b.mem_alloc(16)
    b.memset_d8_async(d2, 9, 16, LEGACY)
    b.ctx_synchronize()
    ptr, host = _pinned(b, 16)
    host[:] = 5
    s = b.stream_create()
    ev = b.event_create(timing=False)
    b.memcpy_htod_async(d1, ptr, 16, s)
    b.event_record(ev, s)                 # after the upload, before the download
    b.memcpy_dtoh_async(ptr, d2, 16, s)
    assert (host == 5).all(), "poisoned while queued work still read the buffer"
    b.event_synchronize(ev)               # the upload is done; the download is not
    assert (host == 0xFF).all(), "an unfinished copy into pinned memory was readable"
    b.stream_synchronize(s)
    assert (host == 9).all()


def test_copy_with_nothing_before_it_poisons_at_once():
    b = _backend()
    d = b.mem_alloc(8)
    b.memset_d8_async(d, 3, 8, LEGACY)
    b.ctx_synchronize()
    ptr, host = _pinned(b, 8)
    host[:] = 0
    s = b.stream_create()
    b.memcpy_dtoh_async(ptr, d, 8, s)
    assert (host == 0xFF).all()
    b.stream_synchronize(s)
    assert (host == 3).all()


def test_pitched_copy_into_pinned_memory_poisons_in_stream_order_too():
    b = _backend()
    d1, d2 = b.mem_alloc(32), b.mem_alloc(32)
    b.memset_d8_async(d2, 4, 32, LEGACY)
    b.ctx_synchronize()
    ptr, host = _pinned(b, 32)
    host[:] = 6
    s = b.stream_create()
    b.memcpy_htod_async(d1, ptr, 32, s)
    b.memcpy_2d_async(ptr, 16, False, d2, 16, True, 8, 2, s)   # 2 rows of 8 bytes
    b.stream_synchronize(s)
    out = np.zeros(32, np.uint8)
    b.memcpy_dtoh_async(out.ctypes.data, d1, 32, LEGACY)
    assert (out == 6).all()
    assert (host.reshape(2, 16)[:, :8] == 4).all() and (host.reshape(2, 16)[:, 8:] == 6).all()
