"""Memory layer: MemoryPointer lifetimes, NBEP 7 managers, deferred frees, host memory."""

from __future__ import annotations

import contextlib
import gc
import sys
import types

import numpy as np
import pytest

import gpuarray
from gpuarray import memory
from gpuarray.errors import CudaOutOfMemoryError
from gpuarray.memory import MemoryPointer
from tests.support import allocated, exact_free_memory


def test_finalizer_runs_once_after_the_last_view():
    calls = []
    p = MemoryPointer(None, 0x1000, 64, finalizer=lambda: calls.append(1))
    v = p.view(8, 16)
    vv = v.view(2, 4)
    assert vv.device_pointer == 0x1000 + 10 and vv.base is p
    del p, v
    gc.collect()
    assert calls == []
    del vv
    gc.collect()
    assert calls == [1]


def test_explicit_free_runs_the_finalizer_once():
    calls = []
    p = MemoryPointer(None, 0x1000, 64, finalizer=lambda: calls.append(1))
    p.free()
    p.free()
    del p
    gc.collect()
    assert calls == [1]


def test_pointer_validation():
    with pytest.raises(IndexError, match="outside"):
        MemoryPointer(None, 0x1000, 8).view(4, 12)
    with pytest.raises(ValueError, match="size"):
        MemoryPointer(None, 0x1000, -1)
    with pytest.raises(TypeError, match="pointer"):
        MemoryPointer(None, "0x1000", 8)


def _used():
    info = gpuarray.get_memory_info()
    return info.total - info.free


def test_deferred_frees_flush_past_the_count_threshold(monkeypatch):
    monkeypatch.setenv("GPUARRAY_MAX_PENDING_DEALLOCS_COUNT", "3")
    gpuarray._config.reload()
    exact = exact_free_memory()
    start = _used()
    arrays = [gpuarray.empty(1024, np.uint8) for _ in range(4)]
    ptrs = [a.ptr for a in arrays]
    assert not exact or _used() == start + 4 * 1024
    mgr = memory.get_memory_manager()
    del arrays[:3]
    gc.collect()
    assert mgr.deallocations.pending_count == 3 and all(allocated(p) for p in ptrs)
    assert not exact or _used() == start + 4 * 1024
    arrays.clear()
    gc.collect()
    assert mgr.deallocations.pending_count == 0 and not any(allocated(p) for p in ptrs)
    assert not exact or _used() == start


def test_deferred_frees_flush_past_the_size_threshold(make_sim, monkeypatch):
    make_sim(memory=1 << 20)
    monkeypatch.setenv("GPUARRAY_MAX_PENDING_DEALLOCS_RATIO", "0.25")
    gpuarray._config.reload()
    a = gpuarray.empty(200 << 10, np.uint8)
    b = gpuarray.empty(100 << 10, np.uint8)
    mgr = memory.get_memory_manager()
    del a
    gc.collect()
    assert mgr.deallocations.pending_count == 1
    assert mgr.deallocations.pending_size == 200 << 10  # under 25% of 1 MiB: held
    del b
    gc.collect()
    assert mgr.deallocations.pending_count == 0


def test_a_size_ratio_of_zero_holds_frees_by_count_only(make_sim, monkeypatch):
    make_sim(memory=1 << 20)
    monkeypatch.setenv("GPUARRAY_MAX_PENDING_DEALLOCS_RATIO", "0")
    monkeypatch.setenv("GPUARRAY_MAX_PENDING_DEALLOCS_COUNT", "2")
    gpuarray._config.reload()
    q = memory.get_memory_manager().deallocations
    arrays = [gpuarray.empty(300 << 10, np.uint8) for _ in range(3)]
    del arrays[:2]
    gc.collect()
    assert q.pending_count == 2 and q.pending_size == 600 << 10  # 60% of the memory: held
    arrays.clear()
    gc.collect()
    assert q.pending_count == 0 and q.pending_size == 0


@pytest.mark.parametrize("kind", ["device", "managed"])
def test_out_of_memory_flushes_pending_frees_then_retries(make_sim, monkeypatch, kind):
    make_sim(memory=1 << 20)
    monkeypatch.setenv("GPUARRAY_MAX_PENDING_DEALLOCS_RATIO", "1")
    gpuarray._config.reload()
    a = gpuarray.empty(600 << 10, np.uint8)
    del a
    gc.collect()
    assert memory.get_memory_manager().deallocations.pending_count == 1
    alloc = {"device": lambda n: gpuarray.empty(n, np.uint8).gpu_data,
             "managed": memory.managed_alloc}[kind]
    b = alloc(600 << 10)  # succeeds only because the pending free ran
    assert b.size == 600 << 10
    with pytest.raises(CudaOutOfMemoryError) as e:
        alloc(1 << 20)
    what = "" if kind == "device" else " of managed memory"
    assert f"while allocating 1.0 MiB (1048576 bytes){what} on device 0" in str(e.value)
    assert isinstance(e.value, MemoryError)


def test_defer_cleanup_nests_and_survives_exceptions(make_sim):
    make_sim(memory=1 << 20)
    mgr = memory.get_memory_manager()
    with pytest.raises(RuntimeError):
        with gpuarray.defer_cleanup():
            with gpuarray.defer_cleanup():
                a = gpuarray.empty(600 << 10, np.uint8)
                del a
                gc.collect()
                mgr.deallocations.clear()
                assert mgr.deallocations.pending_count == 1  # held back
                with pytest.raises(CudaOutOfMemoryError):
                    gpuarray.empty(600 << 10, np.uint8)  # the flush is deferred too
            assert mgr.deallocations.is_disabled
            raise RuntimeError("boom")
    assert not mgr.deallocations.is_disabled
    assert gpuarray.empty(600 << 10, np.uint8).size == 600 << 10


def test_many_allocate_free_cycles_return_memory_to_start():
    start = _used()
    for _ in range(20_000):
        a = gpuarray.empty(64, np.uint8)
        del a
    memory.get_memory_manager().deallocations.clear()
    assert _used() == start


class CountingManager(memory.HostOnlyCUDAMemoryManager):
    """A plugin that allocates through the default manager and counts."""

    allocations_seen: list[int] = []
    frees_seen: list[int] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._inner = memory.DefaultMemoryManager(context=self.context)

    def memalloc(self, size):
        inner = self._inner.memalloc(size)
        CountingManager.allocations_seen.append(size)

        def finalizer(inner=inner, size=size):
            CountingManager.frees_seen.append(size)
            inner.free()

        return MemoryPointer(self.context, inner.device_pointer, size, finalizer=finalizer)

    def get_memory_info(self):
        return self._inner.get_memory_info()

    def get_ipc_handle(self, memory_pointer):
        raise NotImplementedError

    @property
    def interface_version(self):
        return 1


def test_a_plugin_receives_every_allocation():
    CountingManager.allocations_seen = []
    CountingManager.frees_seen = []
    gpuarray.set_memory_manager(CountingManager)
    d = gpuarray.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert CountingManager.allocations_seen == [48]
    v = d[:, ::2]                        # a view allocates nothing
    assert len(CountingManager.allocations_seen) == 1
    v.copy_to_host()                     # non-contiguous: a staging buffer
    assert len(CountingManager.allocations_seen) == 2
    d.T.copy()                           # a new array
    assert len(CountingManager.allocations_seen) == 3
    del d, v
    gc.collect()
    assert sum(CountingManager.frees_seen) == sum(CountingManager.allocations_seen)


class _WrongVersion(CountingManager):
    @property
    def interface_version(self):
        return 2


def test_wrong_interface_version_is_refused_naming_both_versions():
    with pytest.raises(RuntimeError, match=r"version 2.*supports version 1"):
        gpuarray.set_memory_manager(_WrongVersion)


def test_environment_variable_selects_the_manager_and_set_is_ignored(monkeypatch):
    mod = types.ModuleType("gpuarray_test_emm")
    mod._gpuarray_memory_manager = CountingManager
    monkeypatch.setitem(sys.modules, "gpuarray_test_emm", mod)
    monkeypatch.setenv("GPUARRAY_MEMORY_MANAGER", "gpuarray_test_emm")
    gpuarray._config.reload()
    CountingManager.allocations_seen = []
    gpuarray.zeros(5)
    assert CountingManager.allocations_seen == [40]
    with pytest.warns(UserWarning, match="ignored"):
        gpuarray.set_memory_manager(memory.DefaultMemoryManager)
    assert isinstance(memory.get_memory_manager(), CountingManager)


def test_initialize_may_be_called_again_and_reset_releases():
    mgr = memory.get_memory_manager()
    mgr.initialize()
    a = gpuarray.empty(16)
    del a
    gc.collect()
    mgr.reset()
    assert mgr.deallocations.pending_count == 0


# ------------------------------------------------------------ host memory
def test_pinned_and_mapped_arrays_are_page_locked_and_released():
    b = gpuarray._driver.get_backend()
    h = gpuarray.pinned_array((4, 4), dtype=np.float32)
    m = gpuarray.mapped_array(8, dtype=np.int64)
    assert b.pointer_info(h.ctypes.data).memory_type == 1
    assert b.pointer_info(m.ctypes.data).memory_type == 1
    h[:] = 1
    assert h.sum() == 16
    ptr = h.ctypes.data
    view = h[1:]
    del h
    gc.collect()
    assert b.pointer_info(ptr).memory_type == 1  # the view keeps it
    del view
    gc.collect()
    memory.get_memory_manager().deallocations.clear()
    assert b.pointer_info(ptr).memory_type == 0


def test_pinned_context_manager_pins_and_unpins_and_can_repeat():
    b = gpuarray._driver.get_backend()
    a = np.zeros(100)
    for _ in range(2):
        with gpuarray.pinned(a):
            assert b.pointer_info(a.ctypes.data).memory_type == 1
        assert b.pointer_info(a.ctypes.data).memory_type == 0
    with pytest.raises(TypeError, match="NumPy"):
        with gpuarray.pinned([1, 2]):
            pass


def test_pinned_unpins_even_when_the_block_raises():
    b = gpuarray._driver.get_backend()
    a = np.zeros(10)
    with contextlib.suppress(KeyError):
        with gpuarray.pinned(a):
            raise KeyError
    assert b.pointer_info(a.ctypes.data).memory_type == 0
