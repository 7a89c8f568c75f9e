"""Device memory belongs to the context it was allocated in.

``cuMemAlloc`` allocates in the current context; ``cuCtxDestroy`` "destroys
the CUDA context specified by ctx ... all the resources allocated by it"
and ``cuDevicePrimaryCtxReset`` "destroys all allocations ... on the primary
context": the memory of the destroyed or reset context only, never another
context's on the same device.  The simulator freed every allocation of the
device instead, so destroying a context of ``cuCtxCreate`` freed the primary
context's memory under its queued work: a sticky
``CUDA_ERROR_ILLEGAL_ADDRESS`` that cascaded through numba-cuda's driver
tests (``Test3rdPartyContext`` creates and destroys a context, now and then
while numba-cuda's context still had copies queued).  ``cuMemFree`` waits for
the queued work of the memory's own context.
"""

from __future__ import annotations

import numpy as np
import pytest
from gpuarray_sim import SimBackend

from gpuarray.errors import CudaError
from sim.tests.backend.test_sim_callbacks_and_frees import _kernel, _launch, _Record
from tests.support import backend_is_sim

pytestmark = pytest.mark.skipif(not backend_is_sim(), reason="checks the simulator's model of CUDA")

LEGACY = 1


def _backend() -> tuple[SimBackend, int]:
    b = SimBackend()
    b.init()
    primary = b.primary_ctx_retain(0)
    b.ctx_set_current(primary)
    return b, primary


def _read(b, ptr, n, stream=LEGACY):
    out = np.zeros(n, np.uint8)
    b.memcpy_dtoh_async(out.ctypes.data, ptr, n, stream)  # pageable: complete on return
    return out


def test_destroying_a_created_context_frees_its_memory_and_no_other_contexts():
    b, primary = _backend()
    x = b.mem_alloc(64)
    b.memset_d8_async(x, 7, 64, LEGACY)
    c = b.ctx_create(0)
    y = b.mem_alloc(64)
    b.ctx_destroy(c)
    assert b.ctx_get_current() == primary
    np.testing.assert_array_equal(_read(b, x, 64), 7)  # before: freed by the destroy
    with pytest.raises(CudaError, match="cuCtxDestroy") as e:  # freed, by cuCtxDestroy
        b.mem_free(y)
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE"
    b.mem_free(x)


def test_work_queued_in_the_primary_context_survives_destroying_another_context():
    b, _primary = _backend()
    s = b.stream_create(non_blocking=True)
    x, z = b.mem_alloc(64), b.mem_alloc(64)
    b.memset_d8_async(x, 3, 64, s)
    b.memcpy_dtod_async(z, x, 64, s)  # queued: nothing synchronised it
    c = b.ctx_create(0)
    b.ctx_destroy(c)
    b.stream_synchronize(s)  # before: CUDA_ERROR_ILLEGAL_ADDRESS (sticky), x and z freed
    np.testing.assert_array_equal(_read(b, z, 64), 3)


def test_resetting_the_primary_context_keeps_the_memory_and_work_of_a_created_context():
    b, primary = _backend()
    c = b.ctx_create(0)
    y = b.mem_alloc(64)
    s = b.stream_create(non_blocking=True)
    b.memset_d8_async(y, 5, 64, s)
    b.ctx_push_current(primary)
    x = b.mem_alloc(64)
    b.primary_ctx_reset(0)
    with pytest.raises(CudaError, match="cuDevicePrimaryCtxReset"):  # the primary's: freed
        b.mem_free(x)
    assert b.ctx_pop_current() == primary and b.ctx_get_current() == c
    b.stream_synchronize(s)  # before: CUDA_ERROR_ILLEGAL_ADDRESS
    np.testing.assert_array_equal(_read(b, y, 64, s), 5)
    b.mem_free(y)


def test_freeing_memory_of_a_created_context_waits_for_that_contexts_work():
    # From another context: cuMemFree waits for the work of the memory's
    # context, here a kernel that may use it (it declares no access, as a
    # kernel reaching memory through a pointer in a structure). Before: the
    # primary context's work was waited for, and the kernel ran after the free.
    b, primary = _backend()
    log: list[str] = []
    c = b.ctx_create(0)
    y = b.mem_alloc(64)
    f = _kernel(b, "context_memory_record", _Record(log))  # declares no access
    _launch(b, f, y, 64)
    b.ctx_set_current(primary)
    b.mem_free(y)
    assert log == [f"kernel {y}"]
    b.ctx_set_current(c)
    b.ctx_destroy(c)
