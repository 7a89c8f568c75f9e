"""Opening IPC memory with a layout given by the caller: ``open_ipc_array`` and ``IpcHandle.open_array``.

Numba's ``cuda.open_ipc_array(handle, shape, dtype, strides, offset)`` takes
the raw 64-byte driver handle of an allocation; ``IpcHandle.open_array``
ignores the layout a handle carries.  The cross-process checks run in one
spawned child with its own simulator.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback

import numpy as np
import pytest

import gpuarray
from gpuarray import memory

pytestmark = pytest.mark.usefixtures("sim")


def _child(raw: bytes, offset: int, handle, queue) -> None:
    try:
        import numpy as np

        import gpuarray

        out = {}
        with gpuarray.open_ipc_array(raw, (2, 3), np.float64, offset=offset) as arr:
            out["raw"] = arr.copy_to_host()
            arr[0, 0] = -5.0
            gpuarray.synchronize()
        with gpuarray.open_ipc_array(list(raw), 3, "f8", strides=(16,), offset=offset) as arr:
            out["strided"] = arr.copy_to_host()
        arr2 = handle.open_array(None, shape=(6,), dtype=np.float64)
        out["open_array"] = arr2.copy_to_host()
        try:
            handle.open()
        except ValueError as e:
            out["twice"] = str(e)
        handle.close()
        queue.put(("ok", out))
    except BaseException:
        queue.put(("error", traceback.format_exc()))


def test_a_spawned_process_opens_raw_handles(monkeypatch):
    monkeypatch.setenv("GPUARRAY_BACKEND", "sim")
    host = np.arange(8.0)
    d = gpuarray.to_device(host)
    h = d[2:].get_ipc_handle()                  # offset 16 inside the allocation
    d.stream.synchronize()                      # IPC carries no stream ordering
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_child, args=(h.handle, h.offset, h, queue))
    p.start()
    try:
        status, out = queue.get(timeout=120)
    finally:
        p.join(timeout=60)
    assert status == "ok", out
    np.testing.assert_array_equal(out["raw"], host[2:].reshape(2, 3))
    np.testing.assert_array_equal(out["strided"], [-5.0, 4.0, 6.0])  # after the write above
    expect = host.copy()
    expect[2] = -5.0
    np.testing.assert_array_equal(out["open_array"], expect[2:])
    assert "already opened" in out["twice"]
    np.testing.assert_array_equal(d.copy_to_host(), expect)


def test_open_ipc_array_refuses_bad_handles():
    with pytest.raises(ValueError, match="64 bytes, got 3"):
        with gpuarray.open_ipc_array(b"abc", 4, np.float32):
            pass


def test_open_array_checks_its_arguments():
    d = gpuarray.zeros(4)
    h = d.get_ipc_handle()
    with pytest.raises(TypeError, match="shape= and dtype="):
        h.open_array(None, shape=(4,))
    with pytest.raises(ValueError, match="needs 40 bytes; the IPC handle shares 32"):
        h.open_array(None, shape=(5,), dtype=np.float64)
    with pytest.raises(ValueError, match="do not match"):
        h.open_array(None, shape=(2, 2), dtype=np.float64, strides=(8,))
    with pytest.raises(TypeError, match="Device or Context"):
        h.open_array("gpu0", shape=(4,), dtype=np.float64)
    assert not h.is_open


def test_open_array_in_the_exporting_process_is_refused_as_cuda_does():
    d = gpuarray.zeros(4)
    h = memory.get_memory_manager().get_ipc_handle(d.gpu_data)
    with pytest.raises(gpuarray.CudaError):
        h.open_array(gpuarray.current_context(), shape=(4,), dtype=np.float64)
    assert not h.is_open
