"""Numba's host-side array API on gpuarray: contexts, devices, managed/mapped arrays.

``current_context()``, ``gpus``, ``list_devices()``, ``detect()``, ``close()``,
``managed_array``, ``mapped_array`` (a NumPy subclass exporting the CUDA Array
Interface), ``mapped()``, ``*_array_like``, ``MemoryPointer.own()``,
``DeviceNDArray.getitem/setitem``.  Streams' host callbacks are in
``test_stream_callbacks.py``; IPC opening by raw handle in ``test_ipc_arrays.py``.
"""

from __future__ import annotations

import ctypes
import gc
import io
import weakref

import numpy as np
import pytest

import gpuarray
from gpuarray import memory
from gpuarray._driver import get_backend
from gpuarray.errors import CudaOutOfMemoryError
from tests.support import allocated, exact_free_memory


# ------------------------------------------------------------ current_context
def test_current_context_is_a_facade_of_the_current_device():
    ctx = gpuarray.current_context()
    assert ctx is gpuarray.current_context()
    assert ctx.device == gpuarray.get_device() and ctx.id == 0
    assert ctx.handle == gpuarray.get_device().context_handle
    assert ctx.memory_manager is memory.get_memory_manager()
    assert ctx.deallocations is memory.get_memory_manager().deallocations
    info = ctx.get_memory_info()
    assert isinstance(info, gpuarray.MemoryInfo) and 0 < info.free <= info.total
    with pytest.raises(TypeError, match="current_context"):
        gpuarray.Context()


def test_context_allocations_go_through_the_manager():
    ctx = gpuarray.current_context()
    exact = exact_free_memory()
    before = ctx.get_memory_info().free
    d = ctx.memalloc(1 << 20)
    assert isinstance(d, gpuarray.MemoryPointer) and d.size == 1 << 20
    assert d.device_pointer in ctx.memory_manager.allocations and allocated(d.device_pointer)
    assert not exact or ctx.get_memory_info().free == before - (1 << 20)
    h = ctx.memhostalloc(64, mapped=True)
    assert isinstance(h, gpuarray.MappedMemory)
    p = ctx.memhostalloc(64)
    assert type(p) is gpuarray.PinnedMemory
    owner = np.zeros(16)
    pin = ctx.mempin(owner, owner.ctypes.data, owner.nbytes, mapped=True)
    assert isinstance(pin, gpuarray.MappedMemory) and pin.owner is owner
    m = ctx.memallocmanaged(128)
    assert isinstance(m, gpuarray.ManagedMemory) and m.host_pointer == m.device_pointer
    assert get_backend().pointer_info(m.device_pointer).is_managed
    handle = ctx.get_ipc_handle(d)
    assert isinstance(handle, gpuarray.IpcHandle) and handle.size == 1 << 20
    ptr = d.device_pointer
    ctx.memfree(d)
    ctx.deallocations.clear()
    assert not allocated(ptr)
    assert not exact or ctx.get_memory_info().free >= before - 128
    pin.free()


def test_context_refuses_bad_sizes():
    ctx = gpuarray.current_context()
    with pytest.raises(TypeError, match="'12'"):
        ctx.memalloc("12")
    with pytest.raises(ValueError, match="-1"):
        ctx.memhostalloc(-1)


def test_deallocations_len_and_clear():
    ctx = gpuarray.current_context()
    ctx.deallocations.clear()
    d = gpuarray.zeros(4)
    del d
    gc.collect()
    assert len(ctx.deallocations) == 1
    ctx.deallocations.clear()
    assert len(ctx.deallocations) == 0


def test_context_streams_and_events():
    ctx = gpuarray.current_context()
    s = ctx.create_stream()
    assert s.kind == "owned" and s.device == ctx.device and not s.external
    assert ctx.get_default_stream() == gpuarray.default_stream()
    assert ctx.get_legacy_default_stream().handle == 1
    assert ctx.get_per_thread_default_stream().handle == 2
    ext = ctx.create_external_stream(s.handle)
    assert ext.external and ext.handle == s.handle
    ev = ctx.create_event(timing=False)
    assert isinstance(ev, gpuarray.Event) and not ev.timing
    ctx.synchronize()


def test_context_reset_runs_deferred_frees():
    ctx = gpuarray.current_context()
    d = gpuarray.zeros(1 << 10)
    ptr = d.ptr
    free = ctx.get_memory_info().free
    del d
    gc.collect()
    assert len(ctx.deallocations) == 1 and allocated(ptr)  # deferred
    ctx.reset()
    assert len(ctx.deallocations) == 0 and not allocated(ptr)
    assert not exact_free_memory() or ctx.get_memory_info().free > free


def test_context_of_another_device_and_peers(make_sim):
    make_sim(devices=2)
    ctx1 = gpuarray.current_context(1)
    assert ctx1.device.id == 1 and gpuarray.get_device().id == 1
    assert ctx1.can_access_peer(0) and ctx1.can_access_peer(gpuarray.get_device(0))
    ctx0 = gpuarray.current_context(0)
    ctx0.push()
    assert gpuarray.get_device().id == 0
    ctx1.push()
    assert gpuarray.get_device().id == 1
    ctx1.pop()
    assert gpuarray.get_device().id == 0
    ctx0.pop()
    with pytest.raises(ValueError, match="out of range"):
        gpuarray.current_context(5)


# ------------------------------------------------------------ devices
def test_gpus_and_list_devices(make_sim):
    make_sim(devices=2)
    assert len(gpuarray.gpus) == 2
    assert [d.id for d in gpuarray.gpus] == [0, 1] == [d.id for d in gpuarray.list_devices()]
    assert gpuarray.gpus[-1].id == 1 and gpuarray.gpus.lst[0].id == 0
    with gpuarray.gpus[1]:
        assert gpuarray.gpus.current.id == 1
        assert gpuarray.zeros(2).device.id == 1
    assert gpuarray.gpus.current.id == 0
    with pytest.raises(IndexError, match="out of range"):
        gpuarray.gpus[2]
    with pytest.raises(TypeError, match="'a'"):
        gpuarray.gpus["a"]


def test_detect_prints_the_devices():
    out = io.StringIO()
    assert gpuarray.detect(file=out) is True
    text = out.getvalue()
    assert "Found 1 CUDA devices" in text and "[SUPPORTED]" in text
    assert "1/1 devices are supported" in text


def test_detect_reports_an_old_device(make_sim):
    make_sim(compute_capability=[(3, 5)])
    out = io.StringIO()
    assert gpuarray.detect(file=out) is False
    assert "NOT SUPPORTED" in out.getvalue()


def test_close_finishes_work_and_leaves_no_context_current():
    d = gpuarray.zeros(8)
    del d
    gc.collect()
    gpuarray.close()
    assert get_backend().ctx_get_current() == 0
    assert len(memory.get_memory_manager().deallocations) == 0
    assert gpuarray.to_device(np.arange(3)).copy_to_host().tolist() == [0, 1, 2]  # usable again


# ------------------------------------------------------------ managed memory
def test_managed_array_is_host_and_device_memory():
    m = gpuarray.managed_array((2, 3), dtype=np.int32)
    assert isinstance(m, gpuarray.ManagedNDArray) and isinstance(m, np.ndarray)
    m[:] = np.arange(6).reshape(2, 3)
    info = get_backend().pointer_info(m.ctypes.data)
    assert info.is_managed and info.memory_type == 2 and info.size >= m.nbytes
    cai = m.__cuda_array_interface__
    assert cai["data"] == (m.ctypes.data, False) and cai["shape"] == (2, 3) and cai["stream"] == 1
    d = gpuarray.asarray(m)              # zero copy
    assert d.ptr == m.ctypes.data and d.__dlpack_device__() == (13, 0)
    d[1, :] = -1                          # device writes ...
    gpuarray.synchronize()
    assert m.tolist() == [[0, 1, 2], [-1, -1, -1]]  # ... the host sees
    plain = np.asarray(m)
    assert type(plain) is np.ndarray and plain.ctypes.data == m.ctypes.data


def test_managed_array_copies_and_layouts():
    m = gpuarray.managed_array(4, dtype=np.float32, order="F")
    m[:] = [1, 2, 3, 4]
    d = gpuarray.to_device(m)            # a device copy of managed memory
    assert d.ptr != m.ctypes.data
    np.testing.assert_array_equal(d.copy_to_host(), [1, 2, 3, 4])
    d.copy_to_host(m[::-1])
    assert m.tolist() == [4, 3, 2, 1]
    f = gpuarray.managed_array((2, 3), order="F")
    assert f.flags.f_contiguous
    assert gpuarray.managed_array((3,), strides=(16,), dtype=np.float64).strides == (16,)


def test_managed_memory_is_freed_with_its_last_view():
    ctx = gpuarray.current_context()
    exact = exact_free_memory()
    free = ctx.get_memory_info().free
    m = gpuarray.managed_array(1 << 20, dtype=np.uint8)
    ptr = m.ctypes.data  # a NumPy array over managed memory: the same address on both sides
    view = m[10:20]
    assert not exact or ctx.get_memory_info().free == free - (1 << 20)
    del m
    gc.collect()
    ctx.deallocations.clear()
    assert allocated(ptr)  # the view keeps it
    assert not exact or ctx.get_memory_info().free < free
    del view
    gc.collect()
    ctx.deallocations.clear()
    assert not allocated(ptr)
    assert not exact or ctx.get_memory_info().free == free


def test_managed_out_of_memory_names_the_size(make_sim):
    make_sim(memory=1 << 20)
    with pytest.raises(CudaOutOfMemoryError, match="managed memory"):
        gpuarray.managed_array(2 << 20, dtype=np.uint8)


def test_simulated_managed_memory_is_checked_and_freed(sim):
    sim.ctx_set_current(sim.primary_ctx_retain(0))
    p = sim.mem_alloc_managed(64)
    ctypes.memset(p, 7, 64)                # the host writes it directly
    d = sim.mem_alloc(64)
    sim.memcpy_dtod_async(d, p, 64, 1)     # the device reads it
    out = np.zeros(64, np.uint8)
    sim.memcpy_dtoh_async(out.ctypes.data, d, 64, 1)
    assert (out == 7).all()
    with pytest.raises(gpuarray.CudaError, match="past the end"):
        sim.memcpy_dtod_async(d, p + 32, 64, 1)
    sim.mem_free(p)
    assert sim.pointer_info(p).memory_type == 0
    with pytest.raises(gpuarray.CudaError):
        sim.mem_alloc_managed(0)


# ------------------------------------------------------------ mapped memory
def test_mapped_array_is_a_numpy_array_with_a_device_interface():
    h = gpuarray.mapped_array((3, 4), dtype=np.int16)
    assert isinstance(h, gpuarray.MappedNDArray)
    h[:] = 5
    assert gpuarray.is_cuda_array(h)
    view = h[1:, ::2]
    cai = view.__cuda_array_interface__
    assert cai["data"][0] == h.__cuda_array_interface__["data"][0] + 4 * 2
    assert cai["strides"] == view.strides
    d = view.device_view()
    assert d.__dlpack_device__() == (3, 0)
    d.fill(1)
    gpuarray.synchronize()
    assert h[1:, ::2].tolist() == [[1, 1], [1, 1]] and h[0].tolist() == [5, 5, 5, 5]
    assert h.device_ctypes_pointer.value == h.__cuda_array_interface__["data"][0]
    assert h.gpu_data.size >= h.nbytes


def test_numpy_results_in_new_memory_export_no_interface():
    h = gpuarray.mapped_array(4)
    r = h + 1                             # NumPy's new memory, still the subclass
    assert not gpuarray.is_cuda_array(r)
    with pytest.raises(ValueError, match="not in device-accessible memory"):
        r.device_view()
    assert type(np.asarray(h)) is np.ndarray


def test_mapped_array_stream_and_readonly_export():
    s = gpuarray.stream()
    h = gpuarray.mapped_array(2, stream=s)
    assert h.__cuda_array_interface__["stream"] == s.handle
    h.flags.writeable = False
    assert h.__cuda_array_interface__["data"][1] is True
    assert gpuarray.asarray(h).readonly


def test_memory_mapped_array_stays_plain_numpy():
    h = memory.mapped_array(4)
    assert type(h) is np.ndarray
    assert gpuarray.asarray(h).__dlpack_device__() == (3, 0)


def test_like_allocators_follow_the_layout():
    f = np.zeros((3, 4), order="F")
    assert gpuarray.mapped_array_like(f).flags.f_contiguous
    assert gpuarray.pinned_array_like(f).flags.f_contiguous
    base = np.zeros((4, 6, 8), dtype=np.float32)
    odd = base.transpose(1, 2, 0)[:, ::2]          # neither C nor F contiguous
    like = gpuarray.pinned_array_like(odd)
    assert like.shape == odd.shape and like.dtype == np.float32
    assert np.argsort(like.strides).tolist() == np.argsort(odd.strides).tolist()
    assert like.flags.c_contiguous is False and like.nbytes == odd.nbytes
    dev = gpuarray.zeros((2, 2), dtype=np.int8)
    m = gpuarray.mapped_array_like(dev)
    assert isinstance(m, gpuarray.MappedNDArray) and m.dtype == np.int8
    assert get_backend().pointer_info(gpuarray.pinned_array_like(dev).ctypes.data).memory_type == 1


def test_mapped_context_manager():
    a = np.arange(6.0)
    b = np.zeros((2, 2), dtype=np.int32)
    with gpuarray.mapped(a, b) as (da, db):
        assert da.ptr != 0 and da.__dlpack_device__() == (3, 0)
        da[::2] = -1
        db.fill(3)
    assert a.tolist() == [-1, 1, -1, 3, -1, 5] and (b == 3).all()
    with gpuarray.mapped(a) as one:
        assert isinstance(one, gpuarray.DeviceNDArray)
    with gpuarray.mapped(np.zeros(0)) as empty:
        assert empty.size == 0
    with pytest.raises(TypeError, match="list"):
        with gpuarray.mapped([1, 2]):
            pass
    # unpinned at exit: pinning again works
    with gpuarray.pinned(a):
        pass


def test_pinning_again_inside_defer_cleanup():
    # Regression: the second pin failed with CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    # because the first unpin was only queued by defer_cleanup().
    arr = np.zeros(4)
    with gpuarray.defer_cleanup():
        with gpuarray.pinned(arr):
            pass
        with gpuarray.pinned(arr):
            pass
        with gpuarray.mapped(arr):
            pass


# ------------------------------------------------------------ pointers
@pytest.mark.parametrize("make", [
    lambda ctx: ctx.memalloc(64),
    lambda ctx: ctx.memhostalloc(64),
    lambda ctx: ctx.memhostalloc(64, mapped=True),
    lambda ctx: ctx.memallocmanaged(64),
], ids=["device", "pinned", "mapped", "managed"])
def test_own_keeps_the_memory_and_its_kind(make):
    ctx = gpuarray.current_context()
    p = make(ctx)
    q = p.own()
    assert type(q) is type(p) and q.device_pointer == p.device_pointer and q.size == p.size
    assert q.base is p
    owner = weakref.ref(p)  # the allocation is released when p dies (its __del__)
    del p
    gc.collect()
    assert owner() is not None and owner().alive  # q keeps the allocation
    del q
    gc.collect()
    assert owner() is None


# ------------------------------------------------------------ getitem / setitem
def test_getitem_and_setitem_with_a_stream():
    s = gpuarray.stream()
    d = gpuarray.to_device(np.arange(6).reshape(2, 3))
    assert d.getitem((1, 2), stream=s) == 5
    row = d.getitem(0, stream=s)
    assert row.stream is s and row.copy_to_host().tolist() == [0, 1, 2]
    assert d.getitem(1) .copy_to_host().tolist() == [3, 4, 5]   # no stream: as d[1]
    d.setitem((slice(None), 0), [7, 8], stream=s)
    d.setitem(1, 9)
    assert d.copy_to_host().tolist() == [[7, 1, 2], [9, 9, 9]]
    with pytest.raises(IndexError):
        d.getitem(5, stream=s)


def test_getitem_and_setitem_of_records_with_a_stream():
    dt = np.dtype([("a", "i4"), ("b", "f8")])
    s = gpuarray.stream()
    d = gpuarray.to_device(np.zeros(3, dt))
    d.setitem(1, (4, 2.5), stream=s)
    d.setitem("b", 1.0, stream=s)
    assert d.getitem(1, stream=s)["a"] == 4
    assert d.getitem("a", stream=s).copy_to_host().tolist() == [0, 4, 0]
    assert d.getitem(1, stream=s).getitem("b", stream=s) == 1.0
    ro = gpuarray.from_cuda_array_interface({**d.__cuda_array_interface__,
                                             "data": (d.ptr, True)}, owner=d)
    with pytest.raises(ValueError, match="read-only"):
        ro.setitem(0, (1, 1.0), stream=s)


def test_close_makes_no_context_for_a_device_never_used(make_sim):
    from gpuarray import _device

    b = make_sim(devices=2)
    gpuarray.to_device(np.arange(3))              # device 0 only
    gpuarray.close()
    assert set(_device._devices) == {0}, "close() started device 1"
    assert b._contexts[1].refs == 0


def test_current_context_follows_a_replaced_backend(make_sim):
    make_sim(memory=1 << 30)
    first = gpuarray.current_context()
    make_sim(memory=1 << 20)                      # a new machine: new Device objects
    ctx = gpuarray.current_context()
    assert ctx is not first and ctx.device is gpuarray.get_device()
    assert ctx.get_memory_info().total == 1 << 20


def test_open_ipc_array_checks_the_layout_before_mapping():
    raw = bytes(64)
    with pytest.raises(ValueError, match="do not match shape"):
        with gpuarray.open_ipc_array(raw, (2, 3), np.float32, strides=(4,)):
            pass


def test_mapped_waits_for_work_on_any_stream_before_unmapping(sim, monkeypatch):
    # A kernel on another stream than the views' may still use the memory.
    other = gpuarray.stream()
    calls: list[str] = []
    sync = sim.ctx_synchronize
    monkeypatch.setattr(sim, "ctx_synchronize", lambda: (calls.append("ctx"), sync())[1])
    host = np.zeros(4, np.float32)
    with gpuarray.mapped(host) as d:
        d.bind(other).fill(1.0)      # queued on `other`, not on the view's stream
    assert calls, "mapped() unmapped without waiting for the device"
    assert host.tolist() == [1.0] * 4
