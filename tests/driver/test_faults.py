"""Fault injection over the public operations (the simulator, or the cuda backend over
the stand-in driver, where the faults come back through the cuda backend and the real bindings).

For every operation and every kind of driver call it makes, each of those
calls is made to fail in turn.  After each failure: the error is a CudaError,
device and page-locked memory return to what they were before the operation
(once deferred frees are flushed), and the same operation then succeeds and
gives NumPy's answer.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import gpuarray
from gpuarray import memory
from gpuarray.errors import CudaError
from tests.support import backend_is_sim, simulated, the_simulator

pytestmark = pytest.mark.skipif(not simulated(), reason="fault injection is a simulator feature")

HOST = np.arange(24, dtype=np.float32).reshape(4, 6)


def _flush():
    gc.collect()
    for i in range(gpuarray.device_count()):
        memory.get_memory_manager(gpuarray.get_device(i)).deallocations.clear()
    gpuarray.synchronize()  # stream-ordered managers free when their streams get there


def _state(b):
    _flush()
    live_host = sum(1 for a in b.memory._allocs if a.alive and a.is_host)
    return (tuple(b.memory.used), live_host)


def _src():
    return gpuarray.to_device(HOST)


# name -> (setup() -> inputs, op(inputs) -> host result to compare, expected)
OPERATIONS = {
    "to_device": (lambda: None, lambda _: gpuarray.to_device(HOST).copy_to_host(), HOST),
    "to_device strided": (lambda: None, lambda _: gpuarray.to_device(HOST[:, ::-2]).copy_to_host(),
                          HOST[:, ::-2]),
    "zeros": (lambda: None, lambda _: gpuarray.zeros((3, 5), np.int16).copy_to_host(),
              np.zeros((3, 5), np.int16)),
    "full_like": (lambda: None, lambda _: gpuarray.full_like(HOST, 2.5).copy_to_host(),
                  np.full_like(HOST, 2.5)),
    "copy_to_host strided": (_src, lambda d: d[:, 1::2].copy_to_host(), HOST[:, 1::2]),
    "copy_to_host into F": (_src, lambda d: d.copy_to_host(np.zeros((4, 6), np.float64, order="F")),
                            HOST.astype(np.float64)),
    "setitem host": (_src, lambda d: (d.__setitem__((slice(None), 0), np.arange(4)), d.copy_to_host())[1],
                     np.where(np.arange(6) == 0, np.arange(4)[:, None], HOST).astype(np.float32)),
    "setitem overlap": (_src, lambda d: (d.__setitem__(slice(1, None), d[:-1]), d.copy_to_host())[1],
                        np.concatenate([HOST[:1], HOST[:-1]])),
    "astype": (_src, lambda d: d.T.astype(np.float16).copy_to_host(), HOST.T.astype(np.float16)),
    "reshape copy": (_src, lambda d: d.T.reshape(-1).copy_to_host(), HOST.T.reshape(-1)),
    "scalar index": (_src, lambda d: np.asarray(d[2, 3]), np.asarray(HOST[2, 3])),
    "pinned_array round trip": (
        _src, lambda d: d.copy_to_host(gpuarray.pinned_array((4, 6), np.float32)).copy(), HOST),
    "stream work": (lambda: None, lambda _: gpuarray.full(4, 1.0, stream=gpuarray.stream()).copy_to_host(),
                    np.ones(4)),
    "from_dlpack host": (lambda: None, lambda _: gpuarray.from_dlpack(HOST).copy_to_host(), HOST),
    "dlpack to cpu": (_src, lambda d: np.from_dlpack(d, device="cpu").copy(), HOST),
}


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_every_failure_leaves_no_leak_and_no_broken_state(name):
    b = the_simulator()
    setup, op, expected = OPERATIONS[name]
    failures = {}
    for kind in b.FAULT_KINDS:
        for nth in range(1, 40):
            inputs = setup()
            before = _state(b)
            b.inject_fault(kind, nth=nth)
            try:
                op(inputs)
            except CudaError:
                failures[kind] = nth
            else:
                b._faults.clear()  # the operation made fewer than nth such calls
                break
            assert _state(b) == before, f"{name}: memory leaked after failing {kind} call {nth}"
            del inputs
            inputs = setup()
            np.testing.assert_array_equal(op(inputs), expected)  # the next attempt succeeds
            del inputs
        else:
            pytest.fail(f"{name} made 40 or more {kind} calls")
    assert failures, f"{name} made no driver call that could fail"


def test_injected_fault_names_the_call_and_is_typed():
    b = the_simulator()
    b.inject_fault("alloc")
    assert gpuarray.empty(10).size == 10  # one out-of-memory is absorbed: flush and retry once
    b.inject_fault("alloc")
    b.inject_fault("alloc", nth=2)
    with pytest.raises(gpuarray.CudaOutOfMemoryError, match="cuMemAlloc"):
        gpuarray.empty(10)
    b.inject_fault("copy", code=700)
    with pytest.raises(CudaError) as e:
        gpuarray.to_device(HOST)
    assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    if backend_is_sim():  # over the stand-in the cuda backend words the error; the simulator's is kept
        assert "injected" in str(e.value)
    else:
        from gpuarray_sim.standin import _serve as _standin_serve

        assert "injected" in str(_standin_serve.last_error())
    with pytest.raises(ValueError, match="fault kind"):
        b.inject_fault("network")
