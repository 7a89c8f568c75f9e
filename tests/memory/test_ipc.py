"""IPC: ``DeviceNDArray.get_ipc_handle()`` opened as an array in another process.

On the simulator the exported allocation moves into POSIX shared memory, so
a *spawned* child process (its own, fresh simulator) really reads and writes
the parent's array.  The child checks run in one spawn (starting a Python
process costs about a second); the rest runs in this process.  Every test
checks that no shared-memory segment of this process is left behind.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import pickle
import traceback

import numpy as np
import pytest

import gpuarray
from gpuarray import memory
from gpuarray.errors import CudaError

pytestmark = pytest.mark.usefixtures("sim")

INVALID_VALUE, INVALID_CONTEXT, MAP_FAILED = 1, 201, 205


@pytest.fixture(autouse=True)
def _manager_not_from_the_environment(monkeypatch):
    # These tests choose their managers; a GPUARRAY_MEMORY_MANAGER of the
    # caller's shell would turn every choice into a warning.
    monkeypatch.delenv("GPUARRAY_MEMORY_MANAGER", raising=False)
    gpuarray._config.reload()


def _segments() -> set[str]:
    from gpuarray_sim._ipc import SHM_PREFIX

    try:
        names = os.listdir("/dev/shm")
    except FileNotFoundError:  # not Linux: nothing to check
        return set()
    return {n for n in names if n.startswith(f"{SHM_PREFIX}{os.getpid()}_")}


def _flush() -> None:
    gc.collect()
    memory.get_memory_manager().deallocations.clear()


@pytest.fixture(autouse=True)
def _no_leaked_segments():
    before = _segments()
    yield
    _flush()
    gpuarray.synchronize()
    assert _segments() - before == set(), "shared-memory segments left in /dev/shm"


# ----------------------------------------------------- in this process
def test_handle_pickles_and_carries_the_layout():
    d = gpuarray.to_device(np.arange(12.0).reshape(3, 4))
    v = d[1:, 1:3]
    h = v.get_ipc_handle()
    assert isinstance(h, gpuarray.IpcHandle) and len(h.handle) == 64
    assert h.factory is gpuarray.DeviceNDArray
    assert h.factory_args == ((2, 2), (32, 8), np.dtype(np.float64), None)
    assert h.offset == 5 * 8 and h.size == 32 + 8 + 8 and h.origin == 0
    back = pickle.loads(pickle.dumps(h))
    assert back == h and not back.is_open
    assert d.get_ipc_handle().handle == h.handle  # IPC handles name whole allocations


def test_the_handle_keeps_the_exported_memory_allocated_here():
    # Numba's IpcHandle.base: the memory must not be freed (and its address
    # reused) while a handle to it may still be opened elsewhere.
    mgr = memory.get_memory_manager()
    d = gpuarray.to_device(np.arange(8.0))
    ptr = d.gpu_data.device_pointer
    h = d[2:].get_ipc_handle()
    assert h.base.device_pointer == ptr + 16 and h.base.size == 48  # the view's memory
    del d
    _flush()
    assert ptr in mgr.allocations  # still allocated: the handle holds it
    back = pickle.loads(pickle.dumps(h))
    assert back.base is None and back == h and "base" not in repr(h)
    del h
    _flush()
    assert ptr not in mgr.allocations


def test_negative_strides_put_the_origin_inside_the_shared_range():
    d = gpuarray.to_device(np.arange(10.0))
    h = d[::-2].get_ipc_handle()
    assert h.origin == 8 * 8 and h.offset == 8 and h.size == 9 * 8


def test_opening_in_the_exporting_process_is_refused_as_cuda_does():
    h = gpuarray.to_device(np.arange(4.0)).get_ipc_handle()
    with pytest.raises(CudaError) as e:
        h.open()
    assert e.value.code == INVALID_CONTEXT and e.value.call == "cuIpcOpenMemHandle"
    assert not h.is_open
    h.close()  # closing a handle that is not open does nothing


def test_exported_memory_moves_to_shared_memory_and_keeps_working(sim):
    d = gpuarray.to_device(np.arange(1000, dtype=np.int32))
    d.fill(7)  # queued: runs against the shared store
    before = _segments()
    h = d.get_ipc_handle()
    created = _segments() - before
    assert len(created) == 1
    assert d.copy_to_host().tolist() == [7] * 1000
    d[::3] = -1
    assert d.copy_to_host()[:4].tolist() == [-1, 7, 7, -1]
    assert d.get_ipc_handle().handle == h.handle  # the same handle again, no new segment
    assert _segments() - before == created
    del d
    _flush()
    assert _segments() - before == created  # the handle keeps the allocation
    del h
    _flush()  # the allocation is freed: its segment is unlinked
    assert _segments() - before == set()


def test_only_cumemalloc_memory_is_shareable(sim):
    gpuarray.set_memory_manager("pool")
    a = gpuarray.zeros(16)
    with pytest.raises(ValueError, match="cannot be shared through IPC"):
        a.get_ipc_handle()
    with pytest.raises(CudaError, match="pool memory") as e:
        memory.IpcHandle.from_memory(a.gpu_data)  # what a cuMemAlloc manager would try
    assert e.value.code == INVALID_VALUE
    with pytest.raises(ValueError, match="empty"):
        gpuarray.zeros(0).get_ipc_handle()
    gpuarray.set_memory_manager("default")
    b = gpuarray.zeros(16)
    with pytest.raises(CudaError, match="not its start") as e:
        sim.ipc_get_mem_handle(b.ptr + 8)
    assert e.value.code == INVALID_VALUE


def test_malformed_handles_and_pointers_are_refused(sim):
    a = gpuarray.zeros(4)
    with gpuarray.get_device():
        with pytest.raises(CudaError) as e:
            sim.ipc_open_mem_handle(bytes(64))
        assert e.value.code == INVALID_VALUE
        with pytest.raises(CudaError) as e:
            sim.ipc_close_mem_handle(a.ptr)
        assert e.value.code == INVALID_VALUE


# ------------------------------------------------ in a spawned process
def _child(handles: dict, queue) -> None:
    """Runs in a spawned process with a fresh simulator."""
    try:
        import gpuarray
        from gpuarray import _driver
        from gpuarray.errors import CudaError

        out: dict = {"backend": _driver.backend_name()}
        full, view, rev = handles["full"], handles["view"], handles["rev"]
        arr = full.open()
        out["full"] = arr.copy_to_host()
        out["type"] = type(arr).__name__
        try:
            full.open()
        except ValueError as e:
            out["second_open"] = str(e)
        with view as v:  # a view with an offset: writes land in the parent's array
            out["view"] = v.copy_to_host()
            v.fill(-1.0)
        rev_arr = rev.open()
        out["rev"] = rev_arr.copy_to_host()
        arr[0, 0] = 42.0
        gpuarray.synchronize()
        # A memory-level handle opens as a MemoryPointer.
        raw = handles["raw"]
        mem = raw.open()
        out["raw"] = (type(mem).__name__, mem.size)
        # Two objects of one handle: CUDA counts references to one mapping.
        twin = pickle.loads(pickle.dumps(full))
        twin_arr = twin.open()
        out["same_mapping"] = twin_arr.ptr == arr.ptr
        twin.close()
        out["after_twin_close"] = arr.copy_to_host()[0, 0]
        raw.close()
        rev.close()
        full.close()  # the last reference: unmapped
        try:
            arr.copy_to_host()
        except CudaError as e:
            out["after_close"] = (e.code, "use after free" in str(e))
        try:
            handles["freed"].open()
        except CudaError as e:
            out["freed"] = e.code
        queue.put(("ok", out))
    except BaseException:  # report everything to the parent
        queue.put(("error", traceback.format_exc()))


def test_a_spawned_process_reads_and_writes_the_array(monkeypatch):
    monkeypatch.setenv("GPUARRAY_BACKEND", "sim")
    host = np.arange(20.0).reshape(4, 5)
    d = gpuarray.to_device(host)
    gone = gpuarray.zeros(8)
    handles = {
        "full": d.get_ipc_handle(),
        "view": d[1:3, 2:4].get_ipc_handle(),   # offset inside the allocation
        "rev": d[::-1, ::-2].get_ipc_handle(),  # negative strides
        "raw": memory.get_memory_manager().get_ipc_handle(d.gpu_data),
        # what the child gets of memory freed here since: a copy of the
        # handle (as pickled), the handle itself dropped
        "freed": pickle.loads(pickle.dumps(gone.get_ipc_handle())),
    }
    del gone
    _flush()  # its segment is unlinked before the child tries it
    d.stream.synchronize()  # IPC carries no stream ordering
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_child, args=(handles, queue))
    p.start()
    try:
        status, out = queue.get(timeout=120)
    finally:
        p.join(timeout=60)
    assert status == "ok", out
    assert p.exitcode == 0
    assert out["backend"] == "sim" and out["type"] == "DeviceNDArray"
    np.testing.assert_array_equal(out["full"], host)
    assert "already open" in out["second_open"]
    np.testing.assert_array_equal(out["view"], host[1:3, 2:4])
    expected = host.copy()
    expected[1:3, 2:4] = -1.0  # written by the child through the view, before it read rev
    np.testing.assert_array_equal(out["rev"], expected[::-1, ::-2])
    assert out["raw"] == ("MemoryPointer", d.nbytes)
    assert out["same_mapping"] and out["after_twin_close"] == 42.0
    assert out["after_close"] == (INVALID_VALUE, True)  # a copy refused at the call (cuda.h)
    assert out["freed"] == MAP_FAILED
    expected[0, 0] = 42.0
    np.testing.assert_array_equal(d.copy_to_host(), expected)  # the child's writes


def test_cuMemFree_refuses_an_ipc_mapping(sim):
    """CUDA frees IPC mappings only through cuIpcCloseMemHandle."""
    from gpuarray_sim._memory import Allocation

    sim.init()
    sim.ctx_set_current(sim.primary_ctx_retain(0))
    mapping = sim.memory.alloc_device(0, 64, kind="ipc")
    with pytest.raises(gpuarray.CudaError, match="cuIpcCloseMemHandle") as e:
        sim.mem_free(mapping.base)
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert isinstance(mapping, Allocation) and mapping.alive
