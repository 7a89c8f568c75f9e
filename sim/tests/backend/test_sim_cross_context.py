"""A stream of another device's context, passed to a call made in the current one.

What CUDA does, from the driver API documentation (cuda.h 13.0) and the CUDA
C++ Programming Guide ("Stream and Event Behavior" under multi-device
systems):

- ``cuEventRecord``: "hEvent and hStream must be from the same context
  otherwise CUDA_ERROR_INVALID_HANDLE is returned";
- ``cuStreamWaitEvent``: "hEvent may be from a different context or device
  than hStream";
- memory copies and memsets succeed on a stream of another device than the
  current one: the work runs in the stream's context;
- ``cuLaunchKernel`` of a module's function on a stream of another context
  fails (the guide: "a kernel launch will fail if it is issued to a stream
  that is not associated to the current device"); the simulator refuses it
  with ``CUDA_ERROR_INVALID_HANDLE``;
- stream-ordered allocation (``cuMemAllocAsync``) allocates on the stream's
  device, which is how ``to_device(x, stream=s)`` lands on ``s``'s device.
"""

from __future__ import annotations

import numpy as np
import pytest
from gpuarray_sim import SimBackend

import gpuarray
from gpuarray.errors import CudaError
from tests.support import backend_is_sim

pytestmark = pytest.mark.skipif(not backend_is_sim(), reason="checks the simulator's model of CUDA")


def _two_devices() -> tuple[SimBackend, int, int]:
    b = SimBackend(devices=2)
    b.init()
    c0, c1 = b.primary_ctx_retain(0), b.primary_ctx_retain(1)
    return b, c0, c1


def test_event_record_on_a_stream_of_another_context_is_an_invalid_handle():
    b, c0, c1 = _two_devices()
    b.ctx_set_current(c1)
    s1 = b.stream_create()
    b.ctx_set_current(c0)
    ev0 = b.event_create()
    with pytest.raises(CudaError) as e:
        b.event_record(ev0, s1)
    assert e.value.name == "CUDA_ERROR_INVALID_HANDLE" and e.value.call == "cuEventRecord"
    b.event_record(ev0, 1)  # the current context's legacy stream: same context


def test_a_stream_may_wait_for_an_event_of_another_context():
    b, c0, c1 = _two_devices()
    b.ctx_set_current(c1)
    s1 = b.stream_create()
    ev1 = b.event_create()
    b.event_record(ev1, s1)
    b.ctx_set_current(c0)
    s0 = b.stream_create()
    b.stream_wait_event(s0, ev1)
    b.stream_synchronize(s0)


def test_copies_on_a_stream_of_another_device_run_in_its_context():
    b, c0, c1 = _two_devices()
    b.ctx_set_current(c1)
    s1 = b.stream_create()
    p1 = b.mem_alloc(64)
    b.ctx_set_current(c0)
    b.memset_d8_async(p1, 7, 64, s1)
    out = np.zeros(64, np.uint8)
    b.memcpy_dtoh_async(out.ctypes.data, p1, 64, s1)
    b.stream_synchronize(s1)
    assert (out == 7).all()
    p = b.mem_alloc_async(32, s1)  # stream-ordered: on the stream's device
    assert b.pointer_info(p).device_ordinal == 1
    b.mem_free_async(p, s1)
    b.stream_synchronize(s1)


def test_to_device_allocates_on_the_streams_device(make_sim):
    make_sim(devices=2)
    with gpuarray.get_device(1):
        s = gpuarray.stream()
    x = gpuarray.to_device(np.arange(4.0), stream=s)
    assert x.device.id == 1
    np.testing.assert_array_equal(x.copy_to_host(), np.arange(4.0))
