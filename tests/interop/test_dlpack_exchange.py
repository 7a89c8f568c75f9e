"""The DLPack C exchange table (dlpack.h 1.3 ``DLPackExchangeAPI``), both ways.

Producer: ``DeviceNDArray.__dlpack_c_exchange_api__``, its functions called
through ctypes the way a C consumer calls them (``PYFUNCTYPE``: the GIL held,
a pending Python exception raised after a -1), with wrong objects, NULL
pointers and bad prototypes. Consumer: a table that fails falls back to
``__dlpack__``; gpuarray's own arrays keep ``__dlpack__``'s stream ordering.
Deleter calls are counted through the C core's counter and the owners'
deaths. Real peers (PyTorch, tvm-ffi, cuda.core): test_dlpack_exchange_peers.py.
"""

import ctypes
import gc
import os
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

import gpuarray
from gpuarray import _config
from gpuarray.interop import _dlpack_capsule as dl
from gpuarray.interop import _dlpack_table
from gpuarray.memory import get_memory_manager
from tests.support import allocated, exact_free_memory

REPO = Path(__file__).resolve().parents[2]

if dl.CORE != "c":
    pytest.skip(f"the exchange table needs the C core; this process uses {dl.CORE_DESCRIPTION}",
                allow_module_level=True)

_api = ctypes.pythonapi
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api))
_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _api))
_INCREF = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", _api))
_DECREF = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(("Py_DecRef", _api))
_USED = ctypes.create_string_buffer(b"used_dltensor_versioned")

DLTensor, DLManaged = dl.DLTensor, dl.DLManagedTensorVersioned
_PDLTensor, _PManaged = ctypes.POINTER(DLTensor), ctypes.POINTER(DLManaged)
_SetErrorT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
# The table's functions with the GIL held, as a C consumer calls them; a -1
# with a Python exception set raises that exception here.
_Allocator = ctypes.PYFUNCTYPE(ctypes.c_int, _PDLTensor, ctypes.POINTER(_PManaged),
                               ctypes.c_void_p, _SetErrorT)
_FromPy = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_PManaged))
_ToPy = ctypes.PYFUNCTYPE(ctypes.c_int, _PManaged, ctypes.POINTER(ctypes.c_void_p))
_DLTensorFromPy = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _PDLTensor)
_Stream = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32,
                            ctypes.POINTER(ctypes.c_void_p))


class Header(ctypes.Structure):
    _fields_ = [("version", dl.DLPackVersion), ("prev_api", ctypes.c_void_p)]


class ExchangeAPI(ctypes.Structure):
    _fields_ = [("header", Header), ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
                ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
                ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
                ("current_work_stream", ctypes.c_void_p)]


def _table(tp=gpuarray.DeviceNDArray):
    cap = tp.__dlpack_c_exchange_api__
    return ExchangeAPI.from_address(_GetPointer(cap, b"dlpack_exchange_api"))


class Table:
    """The table's functions as ctypes callables (GIL held)."""

    def __init__(self, tp=gpuarray.DeviceNDArray):
        t = _table(tp)
        self.raw = t
        self.allocator = _Allocator(t.managed_tensor_allocator)
        self.from_py = _FromPy(t.managed_tensor_from_py_object_no_sync)
        self.to_py_fn = _ToPy(t.managed_tensor_to_py_object_no_sync)
        self.dltensor = _DLTensorFromPy(t.dltensor_from_py_object_no_sync)
        self.stream_fn = _Stream(t.current_work_stream)

    def managed(self, obj):
        out = _PManaged()
        assert self.from_py(id(obj), ctypes.byref(out)) == 0
        return out

    def to_py(self, managed):
        out = ctypes.c_void_p()
        assert self.to_py_fn(managed, ctypes.byref(out)) == 0
        obj = ctypes.cast(out, ctypes.py_object).value  # a new reference: ours to drop
        _DECREF(out.value)
        return obj

    def stream(self, device_type, device_id):
        out = ctypes.c_void_p(12345)
        assert self.stream_fn(device_type, device_id, ctypes.byref(out)) == 0
        return out.value or 0


def _shape(t):
    return tuple(t.shape[i] for i in range(t.ndim)) if t.ndim else ()


def _strides(t):
    return tuple(t.strides[i] for i in range(t.ndim)) if t.ndim else ()


def _delete(managed):
    ctypes.CFUNCTYPE(None, _PManaged)(managed.contents.deleter)(managed)


# --- the table itself ---
def test_table_is_a_dlpack_1_3_capsule_on_the_type_and_inherited():
    cap = getattr(gpuarray.DeviceNDArray, _dlpack_table.TABLE_ATTRIBUTE)
    assert _dlpack_table.TABLE_ATTRIBUTE == "__dlpack_c_exchange_api__"
    assert _GetName(cap) == b"dlpack_exchange_api"
    t = _table()
    assert (t.header.version.major, t.header.version.minor) == (1, 3)
    assert t.header.prev_api is None
    for name, _ in ExchangeAPI._fields_[1:]:
        assert getattr(t, name), f"{name} is NULL"

    class Sub(gpuarray.DeviceNDArray):
        __slots__ = ()

    assert Sub.__dlpack_c_exchange_api__ is cap  # static: one table for the process
    assert gpuarray.to_device(np.arange(2.0)).__dlpack_c_exchange_api__ is cap
    assert dl.exchange_api_of(Sub) is cap and dl.exchange_api_of(np.ndarray) is None


def test_ctypes_core_publishes_no_table():
    """With GPUARRAY_DLPACK_CORE=python the attribute is absent, not broken."""
    code = ("import gpuarray, sys; from gpuarray.interop import _dlpack_capsule as dl; "
            "sys.exit(hasattr(gpuarray.DeviceNDArray, '__dlpack_c_exchange_api__') "
            "or dl.CORE != 'python')")
    env = dict(os.environ, GPUARRAY_DLPACK_CORE="python", GPUARRAY_BACKEND="sim")
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    previous = dl._set_core("python")
    try:
        assert dl.exchange_api_of(gpuarray.DeviceNDArray) is None  # never called without C
    finally:
        dl._set_core(previous)


# --- dltensor_from_py_object_no_sync ---
@pytest.mark.parametrize("index", [np.s_[...], np.s_[::2, 1:], np.s_[::-1], np.s_[1, :]])
def test_dltensor_borrows_the_arrays_layout(index):
    tab = Table()
    host = np.arange(24, dtype=np.int16).reshape(4, 6)
    a = gpuarray.to_device(host)
    v = a[index] if index is not ... else a.T
    out = DLTensor()
    allocs = dl.live_exports()
    assert tab.dltensor(id(v), ctypes.byref(out)) == 0
    expect = host[index] if index is not ... else host.T
    assert out.data == v.ptr and out.byte_offset == 0
    assert (out.device.device_type, out.device.device_id) == (2, v.device.id)
    assert (out.dtype.code, out.dtype.bits, out.dtype.lanes) == (0, 16, 1)
    assert _shape(out) == expect.shape
    assert _strides(out) == tuple(s // 2 for s in expect.strides)
    again = DLTensor()
    assert tab.dltensor(id(v), ctypes.byref(again)) == 0
    # No allocation: the same shape and strides each time, owned by the array.
    assert ctypes.addressof(again.shape.contents) == ctypes.addressof(out.shape.contents)
    assert dl.live_exports() == allocs


def test_dltensor_of_empty_and_0d_arrays():
    tab = Table()
    out = DLTensor()
    e = gpuarray.to_device(np.zeros((3, 0)))
    assert tab.dltensor(id(e), ctypes.byref(out)) == 0
    assert out.data is None and _shape(out) == (3, 0)
    s = gpuarray.to_device(np.float32(2.5).reshape(()))
    assert tab.dltensor(id(s), ctypes.byref(out)) == 0
    assert out.ndim == 0 and out.data == s.ptr and (out.dtype.code, out.dtype.bits) == (2, 32)


# --- managed_tensor_from_py_object_no_sync ---
def test_managed_tensor_keeps_the_array_alive_until_its_deleter():
    tab = Table()
    a = gpuarray.to_device(np.arange(6.0).reshape(2, 3))
    ptr, gone = a.ptr, weakref.ref(a)
    calls, live = dl.deleter_calls(), dl.live_exports()
    m = tab.managed(a)
    t = m.contents
    assert (t.version.major, t.version.minor) == (1, dl.DLPACK_MAX_VERSION[1])
    assert t.flags == 0 and t.dl_tensor.data == ptr and _shape(t.dl_tensor) == (2, 3)
    assert _strides(t.dl_tensor) == (3, 1)
    assert dl.live_exports() == live + 1
    del a
    gc.collect()
    assert gone() is not None  # the managed tensor holds it
    _delete(m)
    gc.collect()
    assert gone() is None
    assert dl.deleter_calls() == calls + 1 and dl.live_exports() == live


def test_managed_tensor_of_a_readonly_array_is_flagged_read_only():
    tab = Table()
    a = gpuarray.to_device(np.arange(4.0))
    r = a[:]
    r.readonly = True  # before anything caches its DLTensor
    m = tab.managed(r)
    assert m.contents.flags & dl.DLPACK_FLAG_BITMASK_READ_ONLY
    back = tab.to_py(m)
    assert back.readonly and back.ptr == a.ptr


# --- managed_tensor_to_py_object_no_sync ---
def test_to_py_object_gives_a_device_array_owning_the_tensor():
    tab = Table()
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = gpuarray.to_device(host)
    calls = dl.deleter_calls()
    back = tab.to_py(tab.managed(a.T))
    assert type(back) is gpuarray.DeviceNDArray
    assert back.ptr == a.ptr and back.shape == (4, 3) and back.strides == (4, 16)
    np.testing.assert_array_equal(back.copy_to_host(), host.T)
    del a
    gc.collect()
    assert dl.deleter_calls() == calls
    del back
    gc.collect()
    assert dl.deleter_calls() == calls + 1  # exactly once, when the result died


def _numpy_managed(host):
    """A DLManagedTensorVersioned* of NumPy's (kDLCPU), ownership taken from its capsule."""
    cap = host.__dlpack__(max_version=(1, 0))
    ptr = _GetPointer(cap, b"dltensor_versioned")
    assert _SetName(cap, _USED) == 0  # consumed: the capsule no longer deletes it
    return ctypes.cast(ptr, _PManaged)


def test_to_py_object_refuses_host_memory_and_calls_its_deleter_once():
    tab = Table()
    host = np.arange(3.0)
    gone = weakref.ref(host)
    m = _numpy_managed(host)
    del host
    gc.collect()
    assert gone() is not None
    with pytest.raises(BufferError, match="host memory"):
        tab.to_py(m)
    gc.collect()
    assert gone() is None  # NumPy's deleter ran (once: a second would crash or free twice)


def test_to_py_object_refuses_an_unsupported_dtype_after_releasing_it():
    tab = Table()
    a = gpuarray.to_device(np.arange(4, dtype=np.uint8))
    calls = dl.deleter_calls()
    m = tab.managed(a)
    m.contents.dl_tensor.dtype.code = 9  # no such DLPack type code
    with pytest.raises(BufferError, match=r"unsupported DLPack dtype \(code=9, bits=8"):
        tab.to_py(m)
    gc.collect()
    assert dl.deleter_calls() == calls + 1


def test_to_py_object_with_null_arguments():
    tab = Table()
    out = ctypes.c_void_p()
    with pytest.raises(ValueError, match="tensor is NULL"):
        tab.to_py_fn(None, ctypes.byref(out))
    a = gpuarray.to_device(np.arange(2.0))
    calls = dl.deleter_calls()
    with pytest.raises(ValueError, match="out is NULL"):
        tab.to_py_fn(tab.managed(a), None)
    assert dl.deleter_calls() == calls + 1  # the tensor was handed over: released


# --- wrong objects and NULL pointers ---
@pytest.mark.parametrize("obj", [np.arange(3.0), None, 5, "array"])
def test_table_refuses_other_objects_with_a_type_error(obj):
    tab = Table()
    out, m = DLTensor(), _PManaged()
    live = dl.live_exports()
    with pytest.raises(TypeError, match="DeviceNDArray"):
        tab.dltensor(id(obj), ctypes.byref(out))
    with pytest.raises(TypeError, match="DeviceNDArray"):
        tab.from_py(id(obj), ctypes.byref(m))
    assert dl.live_exports() == live


def test_table_refuses_null_pointers():
    tab = Table()
    a = gpuarray.to_device(np.arange(2.0))
    with pytest.raises(ValueError, match="object is NULL"):
        tab.dltensor(None, ctypes.byref(DLTensor()))
    with pytest.raises(ValueError, match="out is NULL"):
        tab.dltensor(id(a), None)
    with pytest.raises(ValueError, match="object is NULL"):
        tab.from_py(None, ctypes.byref(_PManaged()))
    with pytest.raises(ValueError, match="out is NULL"):
        tab.from_py(id(a), None)
    with pytest.raises(ValueError, match="out_current_stream is NULL"):
        tab.stream_fn(2, 0, None)


def test_table_refuses_a_dtype_dlpack_cannot_carry():
    tab = Table()
    a = gpuarray.to_device(np.zeros(3, dtype=[("x", "<f4")]))
    live = dl.live_exports()
    with pytest.raises(BufferError, match="DLPack cannot export dtype"):
        tab.dltensor(id(a), ctypes.byref(DLTensor()))
    with pytest.raises(BufferError, match="DLPack cannot export dtype"):
        tab.from_py(id(a), ctypes.byref(_PManaged()))
    assert dl.live_exports() == live


# --- current_work_stream ---
def test_current_work_stream_is_gpuarrays_default_stream(monkeypatch):
    tab = Table()
    assert tab.stream(2, 0) == gpuarray.default_stream().handle == 1
    assert tab.stream(13, 0) == 1
    assert tab.stream(1, 0) == 0 and tab.stream(3, 0) == 0  # host memory: NULL
    with pytest.raises(ValueError, match="no work stream for DLPack device type 7"):
        tab.stream_fn(7, 0, ctypes.byref(ctypes.c_void_p()))
    monkeypatch.setenv("GPUARRAY_PER_THREAD_DEFAULT_STREAM", "1")
    _config.reload()  # a new configuration: the cached answer is not used
    assert tab.stream(2, 0) == gpuarray.per_thread_default_stream().handle == 2
    monkeypatch.delenv("GPUARRAY_PER_THREAD_DEFAULT_STREAM")
    _config.reload()
    assert tab.stream(2, 0) == 1


def test_current_work_stream_refuses_a_device_that_does_not_exist():
    tab = Table()
    with pytest.raises(ValueError, match="99"):
        tab.stream_fn(2, 99, ctypes.byref(ctypes.c_void_p()))


# --- managed_tensor_allocator ---
class Errors:
    def __init__(self):
        self.seen = []
        self.fn = _SetErrorT(lambda ctx, kind, msg: self.seen.append((kind.decode(), msg.decode())))


def _prototype(shape, code=2, bits=32, device=(2, 0)):
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    t = DLTensor()
    t.device.device_type, t.device.device_id = device
    t.ndim = len(shape)
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
    t.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    t._dims = dims  # keep the shape alive
    return t


def test_allocator_makes_a_c_ordered_device_array():
    tab, err = Table(), Errors()
    free = gpuarray.get_memory_info().free
    m = _PManaged()
    proto = _prototype((2, 3))
    assert tab.allocator(ctypes.byref(proto), ctypes.byref(m), None, err.fn) == 0
    assert err.seen == []
    t = m.contents.dl_tensor
    assert t.data and (t.device.device_type, t.device.device_id) == (2, 0)
    assert _shape(t) == (2, 3) and _strides(t) == (3, 1) and (t.dtype.code, t.dtype.bits) == (2, 32)
    arr = tab.to_py(m)
    arr[...] = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(arr.copy_to_host(), np.arange(6).reshape(2, 3))
    exact = exact_free_memory()
    assert not exact or gpuarray.get_memory_info().free < free
    ptr = arr.ptr
    assert ptr in get_memory_manager().allocations and allocated(ptr)  # through the manager
    del arr
    gc.collect()
    get_memory_manager().deallocations.clear()  # run the deferred frees now
    assert ptr not in get_memory_manager().allocations and not allocated(ptr)
    assert not exact or gpuarray.get_memory_info().free == free


@pytest.mark.parametrize("shape, code, device, kind, message", [
    ((2, -3), 2, (2, 0), "ValueError", "negative shape (2, -3)"),
    ((2**62, 2**62), 2, (2, 0), "ValueError", "overflows a 64-bit size"),
    ((4,), 9, (2, 0), "BufferError", "unsupported DLPack dtype (code=9"),
    ((4,), 2, (1, 0), "BufferError", "not device type 1"),
])
def test_allocator_reports_bad_prototypes_through_set_error(shape, code, device, kind, message):
    tab, err = Table(), Errors()
    live = dl.live_exports()
    m = _PManaged()
    rc = tab.allocator(ctypes.byref(_prototype(shape, code=code, device=device)), ctypes.byref(m),
                       None, err.fn)
    assert rc == -1 and not m  # and no Python exception left set (ctypes would raise it)
    assert len(err.seen) == 1 and err.seen[0][0] == kind and message in err.seen[0][1]
    assert dl.live_exports() == live


def test_allocator_reports_null_and_malformed_prototypes():
    tab, err = Table(), Errors()
    assert tab.allocator(None, ctypes.byref(_PManaged()), None, err.fn) == -1
    assert err.seen == [("ValueError", "managed_tensor_allocator: prototype is NULL")]
    bad = _prototype((3,))
    bad.shape = None
    assert tab.allocator(ctypes.byref(bad), ctypes.byref(_PManaged()), None, err.fn) == -1
    assert err.seen[1][0] == "ValueError" and "shape pointer NULL" in err.seen[1][1]
    bad.ndim = -1
    assert tab.allocator(ctypes.byref(bad), ctypes.byref(_PManaged()), None, err.fn) == -1
    assert "ndim=-1" in err.seen[2][1]
    assert tab.allocator(ctypes.byref(_prototype((3,))), None, None, err.fn) == -1
    assert err.seen[3] == ("ValueError", "managed_tensor_allocator: out is NULL")


def test_allocator_without_set_error_leaves_the_exception_set():
    tab = Table()
    with pytest.raises(ValueError, match="negative shape"):
        tab.allocator(ctypes.byref(_prototype((-1,))), ctypes.byref(_PManaged()), None,
                      ctypes.cast(None, _SetErrorT))


# --- consumer: our own table, and fallbacks ---
def test_from_dlpack_through_a_table_keeps_read_only_and_lifetime():
    a = gpuarray.to_device(np.arange(5.0))
    r = a[:]
    r.readonly = True

    class Wrapped:  # a foreign type that publishes gpuarray's table
        __dlpack_c_exchange_api__ = gpuarray.DeviceNDArray.__dlpack_c_exchange_api__

        def __dlpack__(self, **kw):
            raise AssertionError("the table is used, not __dlpack__")

        def __dlpack_device__(self):
            return (2, 0)

    # The table takes only DeviceNDArrays: for Wrapped it fails (TypeError)
    # and from_dlpack falls back to __dlpack__, which raises here.
    with pytest.raises(AssertionError, match="the table is used"):
        gpuarray.from_dlpack(Wrapped())
    gc.collect()  # capsules of earlier tests die first (their deleters count too)
    calls = dl.deleter_calls()
    api = dl.exchange_api_of(gpuarray.DeviceNDArray)
    t = dl.consume_exchange(api, r)  # what from_dlpack does with a foreign table
    assert t.readonly and t.data_ptr == a.ptr and t.shape == (5,) and t.versioned
    assert dl.exchange_stream(api, 2, 0) == gpuarray.default_stream().handle
    del t
    gc.collect()
    assert dl.deleter_calls() == calls + 1


def test_a_failing_table_falls_back_to_dlpack():
    """Item 2: no failure of the table's that __dlpack__ would not have."""
    host = np.arange(4.0)

    class Odd:
        __dlpack_c_exchange_api__ = gpuarray.DeviceNDArray.__dlpack_c_exchange_api__

        def __dlpack__(self, **kw):
            return host.__dlpack__(**{k: v for k, v in kw.items() if k != "stream"})

        def __dlpack_device__(self):
            return (1, 0)

    np.testing.assert_array_equal(gpuarray.from_dlpack(Odd()).copy_to_host(), host)
    np.testing.assert_array_equal(gpuarray.to_device(Odd()).copy_to_host(), host)


def test_from_dlpack_of_a_gpuarray_array_orders_after_its_own_stream(sim, monkeypatch):
    """The table only knows the device's work stream; for gpuarray's own arrays
    from_dlpack keeps __dlpack__'s ordering after the array's stream."""
    s = gpuarray.stream(non_blocking=True)
    src = gpuarray.to_device(np.full(4, 4.0), stream=s)
    calls = []
    for name in ("event_record", "stream_wait_event"):
        orig = getattr(sim, name)
        monkeypatch.setattr(sim, name, lambda *a, _n=name, _o=orig: calls.append((_n, a)) or _o(*a))
    g = gpuarray.from_dlpack(src)
    assert g.ptr == src.ptr and g.stream == gpuarray.default_stream()
    assert [c[0] for c in calls] == ["event_record", "stream_wait_event"]
    assert calls[0][1][1] == s.handle and calls[1][1][0] == gpuarray.default_stream().handle


@pytest.mark.parametrize("shape, code, bits, dtype", [
    ((0, 3), 2, 32, "float32"), ((), 6, 8, "bool"), ((2,), 2, 16, "float16"),
    ((2,), 5, 64, "complex64")])
def test_allocator_empty_0d_and_other_dtypes(shape, code, bits, dtype):
    tab, err = Table(), Errors()
    proto = _prototype(shape, code=code, bits=bits)
    if not shape:
        proto.shape = None  # allowed for ndim 0
    m = _PManaged()
    assert tab.allocator(ctypes.byref(proto), ctypes.byref(m), None, err.fn) == 0 and not err.seen
    arr = tab.to_py(m)
    assert arr.shape == shape and arr.dtype == np.dtype(dtype) and arr.flags["C_CONTIGUOUS"]


def test_allocator_on_a_device_that_does_not_exist():
    tab, err = Table(), Errors()
    assert tab.allocator(ctypes.byref(_prototype((2,), device=(2, 7))), ctypes.byref(_PManaged()),
                         None, err.fn) == -1
    assert err.seen[0][0] == "ValueError" and "device ordinal 7" in err.seen[0][1]
