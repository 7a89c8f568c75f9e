"""Interop at the array level, on any backend: CAI v3 and DLPack 1.x both ways.

Every test names the INTEROP.md checklist items it checks.  Foreign libraries
are played by stand-ins that expose exactly one protocol (cuda.core's
``_EnforceCAIView`` and Numba's ``ForeignArray`` are the model):

* :class:`CAIOnly` exposes only ``__cuda_array_interface__``: the dict of a
  gpuarray array, edited (any key replaced or dropped), or a dict given whole;
* :class:`DLPackOnly` exposes only ``__dlpack__``/``__dlpack_device__``,
  forwarding to a gpuarray or NumPy array, counting calls and recording the
  keywords and the current device it was called with;
* :class:`Exporter` makes capsules over gpuarray memory with
  ``_dlpack_capsule.make_capsule`` and an owner whose death is observed, so
  deleter calls are counted exactly.

Stream ordering is shown with the simulator's race detector (an unordered
access raises ``StreamOrderError``) and a recorder of driver calls; those tests
take the ``sim`` fixture and are skipped on the real backend.
"""

from __future__ import annotations

import ctypes
import gc
import inspect
import weakref

import numpy as np
import pytest

import gpuarray
from gpuarray import DeviceNDArray, _config
from gpuarray.errors import StreamOrderError
from gpuarray.interop import _dlpack_capsule as dl
from tests.support import backend_is_sim

# --------------------------------------------------------------- helpers
_api = ctypes.pythonapi
_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_DROP = object()

DTYPES = ["?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"]
DL_TRIPLES = {"?": (6, 8, 1), "i1": (0, 8, 1), "i2": (0, 16, 1), "i4": (0, 32, 1),
              "i8": (0, 64, 1), "u1": (1, 8, 1), "u2": (1, 16, 1), "u4": (1, 32, 1),
              "u8": (1, 64, 1), "f2": (2, 16, 1), "f4": (2, 32, 1), "f8": (2, 64, 1),
              "c8": (5, 64, 1), "c16": (5, 128, 1)}


def sample(shape, dtype, seed=0):
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _broadcast(d: DeviceNDArray) -> DeviceNDArray:
    """A (3, 4) stride-0 view of the first row of a (3, 4) array."""
    return DeviceNDArray((3, 4), (0, d.strides[1]), d.dtype, stream=d.stream, gpu_data=d.gpu_data)


# The round-trip layouts of INTEROP.md: name -> (host view, device view).
def layout_pair(name, dtype="f8"):
    if name == "()":
        base = sample((3, 4), dtype)
        return base[1, 2, ...], gpuarray.to_device(base)[1, 2, ...]
    if name in ("(0,)", "(3,0,2)"):
        h = np.empty((0,) if name == "(0,)" else (3, 0, 2), dtype)
        return h, gpuarray.to_device(h)
    base = sample((3, 4), dtype)
    d = gpuarray.to_device(base)
    if name == "broadcast":
        return np.broadcast_to(base[0], (3, 4)), _broadcast(d)
    view = {"contiguous": lambda a: a, "transposed": lambda a: a.T,
            "step": lambda a: a[:, ::2], "reversed": lambda a: a[::-1]}[name]
    return view(base), view(d)


LAYOUTS = ["()", "(0,)", "(3,0,2)", "contiguous", "transposed", "step", "reversed", "broadcast"]


def same_layout(got: DeviceNDArray, want: DeviceNDArray):
    """Zero-copy import: same address, shape, dtype and (where they matter) strides."""
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.ptr == want.ptr
    for n, s_got, s_want in zip(want.shape, got.strides, want.strides, strict=True):
        if n > 1 and want.size:
            assert s_got == s_want


class CAIOnly:
    """Exposes only ``__cuda_array_interface__``.

    ``CAIOnly(arr, key=value, ...)`` forwards ``arr``'s dict with keys replaced
    (``_DROP`` removes one); ``CAIOnly(desc=dict)`` exposes that dict.  Holds
    ``arr`` (as a producer holds its memory) and counts accesses.
    """

    def __init__(self, arr=None, desc=None, **edits):
        self.arr, self._desc, self._edits, self.reads = arr, desc, edits, 0

    @property
    def __cuda_array_interface__(self):
        self.reads += 1
        desc = dict(self._desc if self._desc is not None else self.arr.__cuda_array_interface__)
        for key, value in self._edits.items():
            if value is _DROP:
                desc.pop(key, None)
            else:
                desc[key] = value
        return desc


class DLPackOnly:
    """Exposes only DLPack, forwarding to ``src``; records every call.

    ``calls`` lists ``("device", current device id)`` and ``("dlpack",
    current device id, keywords)`` in call order.  ``old=True`` plays a
    producer predating ``max_version``/``dl_device``/``copy`` (TypeError for
    them); ``legacy=True`` answers with a legacy capsule whatever is asked
    (as JAX does).
    """

    def __init__(self, src, *, old=False, legacy=False):
        self.src, self.old, self.legacy, self.calls = src, old, legacy, []

    def __dlpack_device__(self):
        self.calls.append(("device", _current_id()))
        return self.src.__dlpack_device__()

    def __dlpack__(self, **kw):
        self.calls.append(("dlpack", _current_id(), dict(kw)))
        if self.old and set(kw) - {"stream"}:
            raise TypeError(f"__dlpack__() got unexpected keyword arguments {sorted(set(kw) - {'stream'})}")
        if self.legacy:
            kw.pop("max_version", None)
        if isinstance(self.src, np.ndarray):
            kw["stream"] = None  # NumPy takes no stream for host memory
        return self.src.__dlpack__(**kw)

    @property
    def kwargs(self):
        return [c[2] for c in self.calls if c[0] == "dlpack"]


def _current_id():
    return gpuarray.get_device().id


class Owner:
    """Stands for a producer's manager context: keeps ``arr`` alive, logs its death."""

    def __init__(self, arr, deaths):
        self.arr = arr
        weakref.finalize(self, deaths.append, 1)


class Exporter:
    """A DLPack producer over gpuarray memory built on ``make_capsule``."""

    def __init__(self, arr, *, device_type=dl.kDLCUDA, readonly=False, versioned=True):
        self.arr, self.device_type, self.readonly, self.versioned = arr, device_type, readonly, versioned
        self.deaths = []

    def capsule(self, **patch):
        a = self.arr
        cap = dl.make_capsule(data_ptr=a.ptr, shape=a.shape, byte_strides=a.strides, dtype=a.dtype,
                              device_type=self.device_type,
                              device_id=a.device.id if self.device_type == dl.kDLCUDA else 0,
                              owner=Owner(a, self.deaths), readonly=self.readonly,
                              versioned=self.versioned)
        return _patch(cap, **patch) if patch else cap

    def __dlpack_device__(self):
        return (self.device_type, self.arr.device.id if self.device_type == dl.kDLCUDA else 0)

    def __dlpack__(self, **kw):
        return self.capsule()


def _managed(cap):
    name = _GetName(cap)
    cls = dl.DLManagedTensorVersioned if name == b"dltensor_versioned" else dl.DLManagedTensor
    return cls.from_address(_GetPointer(cap, name))


def _patch(cap, **fields):
    """Edit an unconsumed capsule in place: major, byte_offset, data, null_strides, lanes."""
    m = _managed(cap)
    t = m.dl_tensor
    for key, value in fields.items():
        if key == "major":
            m.version.major = value
        elif key == "null_strides":
            t.strides = None
        elif key == "lanes":
            t.dtype.lanes = value
        else:
            setattr(t, key, value)
    return cap


def peek(cap):
    """The fields of an unconsumed capsule (strides in elements, None when NULL)."""
    name = _GetName(cap)
    m = _managed(cap)
    t = m.dl_tensor
    out = {"name": name.decode(), "data": t.data or 0, "device": (t.device.device_type, t.device.device_id),
           "ndim": t.ndim, "dtype": (t.dtype.code, t.dtype.bits, t.dtype.lanes),
           "shape": tuple(t.shape[:t.ndim]) if t.shape else None,
           "strides": tuple(t.strides[:t.ndim]) if t.strides else None,
           "byte_offset": t.byte_offset, "version": None, "flags": None}
    if name == b"dltensor_versioned":
        out["version"], out["flags"] = (m.version.major, m.version.minor), m.flags
    return out


def _drop(*caps):
    del caps
    dl.sweep_capsules()
    gc.collect()


@pytest.fixture(autouse=True)
def no_leaked_exports():
    dl.sweep_capsules()
    gc.collect()
    before = dl.live_exports()
    yield
    dl.sweep_capsules()
    gc.collect()
    assert dl.live_exports() == before, "an export's deleter never ran"


@pytest.fixture
def recorder(sim, monkeypatch):
    """Records the simulator's stream/event/copy calls as (name, args)."""
    calls = []
    names = ("event_create", "event_record", "stream_wait_event", "stream_synchronize",
             "ctx_synchronize", "event_synchronize", "memcpy_dtod_async", "memcpy_dtoh_async",
             "memcpy_htod_async", "launch_kernel", "stream_create")
    for name in names:
        orig = getattr(sim, name)

        def record(*args, _name=name, _orig=orig, **kw):
            calls.append((_name, args))
            return _orig(*args, **kw)

        monkeypatch.setattr(sim, name, record)
    return calls


def _read_raw(sim, ptr, nbytes, stream_handle, dtype):
    """Read device memory with a bare driver copy on ``stream_handle`` (no gpuarray ordering)."""
    out = np.empty(nbytes // np.dtype(dtype).itemsize, dtype)
    with gpuarray.get_device().activate():
        sim.memcpy_dtoh_async(out.ctypes.data, ptr, nbytes, stream_handle)
    return out


def _pending(value, n=4096, dtype=np.float32):
    """An array whose fill is still queued on a fresh non-blocking stream."""
    s = gpuarray.stream(non_blocking=True)
    return gpuarray.full(n, value, dtype=dtype, stream=s)


# ======================================================= CAI producer (1-5)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cai_keys_and_typestr(dtype):
    """Item 1: shape, typestr in native order, data, version 3, strides, stream; no descr."""
    d = gpuarray.to_device(sample((2, 3), dtype))
    cai = d.__cuda_array_interface__
    assert set(cai) == {"shape", "typestr", "data", "version", "strides", "stream"}
    assert cai["shape"] == (2, 3) and isinstance(cai["shape"], tuple)
    assert cai["typestr"] == np.dtype(dtype).str and cai["typestr"][0] in "<|"
    assert cai["data"] == (d.ptr, False) and cai["version"] == 3 and cai["strides"] is None


@pytest.mark.parametrize("name", LAYOUTS)
def test_cai_strides_none_exactly_when_c_contiguous(name):
    """Items 1 and 4: strides None iff C-contiguous; a stride-0 view exports its strides."""
    host, d = layout_pair(name)
    cai = d.__cuda_array_interface__
    contiguous = name in ("()", "(0,)", "(3,0,2)", "contiguous")
    assert (cai["strides"] is None) is contiguous
    if not contiguous:
        assert cai["strides"] == d.strides
        if name == "broadcast":
            assert cai["strides"][0] == 0
    assert cai["shape"] == host.shape
    assert cai["data"][0] == (0 if host.size == 0 else d.ptr)


def test_cai_more_layouts_and_descr():
    """Item 1: extent-1 and Fortran layouts; size-0 slices of real memory export ptr 0;
    structured dtypes export descr."""
    d = gpuarray.to_device(np.arange(12.0).reshape(3, 4))
    assert d[1:2].__cuda_array_interface__["strides"] is None        # extent-1 axis
    f = gpuarray.to_device(np.asfortranarray(np.ones((3, 4))))
    assert f.__cuda_array_interface__["strides"] == (8, 24)
    empty = d[:, 2:2]
    assert empty.size == 0 and empty.__cuda_array_interface__["data"] == (0, False)
    rec = gpuarray.empty(3, dtype=[("a", "<f4"), ("b", "<i4")])
    cai = rec.__cuda_array_interface__
    assert cai["typestr"] == "|V8" and cai["descr"] == [("a", "<f4"), ("b", "<i4")]
    back = gpuarray.as_cuda_array(CAIOnly(rec))
    assert back.dtype == rec.dtype and back.ptr == rec.ptr


def test_cai_stream_values(monkeypatch):
    """Item 2: 1 legacy, 2 per-thread, the handle otherwise; never 0; None when switched off."""
    assert gpuarray.zeros(3).__cuda_array_interface__["stream"] == 1
    assert gpuarray.zeros(3).bind(gpuarray.legacy_default_stream()).__cuda_array_interface__["stream"] == 1
    s = gpuarray.stream()
    assert gpuarray.zeros(3, stream=s).__cuda_array_interface__["stream"] == s.handle not in (0, 1, 2)
    assert gpuarray.zeros(3, stream=0).__cuda_array_interface__["stream"] == 1   # stream=0 means default
    monkeypatch.setenv("GPUARRAY_PER_THREAD_DEFAULT_STREAM", "1")
    _config.reload()
    assert gpuarray.zeros(3).__cuda_array_interface__["stream"] == 2
    monkeypatch.setenv("GPUARRAY_CAI_EXPORT_STREAM", "0")
    _config.reload()
    assert gpuarray.zeros(3, stream=s).__cuda_array_interface__["stream"] is None


def test_cai_exported_stream_outlives_the_stream_object(sim):
    """Item 2: the array holds its Stream, so the exported handle stays valid."""
    s = gpuarray.stream(non_blocking=True)
    d = gpuarray.full(8, 2.0, stream=s)
    handle = s.handle
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is d.stream and d.__cuda_array_interface__["stream"] == handle
    gpuarray.external_stream(handle).synchronize()  # still a live stream
    del d
    gc.collect()
    assert ref() is None


def test_cai_dict_is_cached_and_side_effect_free(sim):
    """Item 3: the dict is cached per array; producing it queues no work."""
    d = gpuarray.full(16, 1.0, stream=gpuarray.stream(non_blocking=True))
    seq = sim.sched._seq
    first = d.__cuda_array_interface__
    assert d.__cuda_array_interface__ is first
    assert sim.sched._seq == seq  # nothing enqueued, no event, no sync


def test_cai_readonly_exported_only_for_readonly_arrays():
    """Item 5: normal arrays export readonly=False; read-only imports re-export True."""
    d = gpuarray.to_device(np.arange(4.0))
    assert d.__cuda_array_interface__["data"][1] is False
    ro = gpuarray.as_cuda_array(CAIOnly(d, data=(d.ptr, True)))
    assert ro.__cuda_array_interface__["data"] == (d.ptr, True)
    assert ro[1:].__cuda_array_interface__["data"][1] is True


# ======================================================= CAI consumer (6-10)
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_cai_import_every_version(version):
    """Item 6: versions 0-3, with no stream key before v3 (PyTorch and JAX export v2)."""
    host = sample((3, 4), "f4")
    d = gpuarray.to_device(host)
    edits = {"version": version}
    if version < 3:
        edits["stream"] = _DROP
    if version == 0:
        edits["strides"] = _DROP
    g = gpuarray.as_cuda_array(CAIOnly(d, **edits))
    same_layout(g, d)
    assert g.stream == gpuarray.default_stream()
    np.testing.assert_array_equal(g.copy_to_host(), host)


@pytest.mark.parametrize("edit, exc, key", [
    ({"shape": _DROP}, ValueError, "shape"),
    ({"typestr": _DROP}, ValueError, "typestr"),
    ({"data": _DROP}, ValueError, "data"),
    ({"version": _DROP}, ValueError, "version"),
    ({"version": 4}, ValueError, "version"),
    ({"version": "3"}, TypeError, "version"),
    ({"shape": "3"}, TypeError, "shape"),
    ({"shape": (-3,)}, ValueError, "shape"),
    ({"typestr": 8}, TypeError, "typestr"),
    ({"typestr": ">f8"}, ValueError, "typestr"),
    ({"data": (1234,)}, TypeError, "data"),
    ({"data": ("0x10", False)}, TypeError, "data"),
    ({"strides": (8, 8)}, ValueError, "strides"),
    ({"strides": "8"}, TypeError, "strides"),
    ({"stream": 0}, ValueError, "stream"),
    ({"stream": 1.5}, TypeError, "stream"),
    ({"stream": -7}, ValueError, "stream"),
])
def test_cai_import_rejects_malformed_dicts_naming_the_key(edit, exc, key):
    """Item 6: missing keys, wrong types, stream 0, negative shape, big-endian typestr."""
    d = gpuarray.to_device(np.arange(3.0))
    with pytest.raises(exc, match=f"'{key}'"):
        gpuarray.as_cuda_array(CAIOnly(d, **edit))


def test_cai_import_mask_and_unknown_memory():
    """Item 6: a mask is NotImplementedError; item 8: a pointer CUDA does not know is refused."""
    d = gpuarray.to_device(np.arange(3.0))
    with pytest.raises(NotImplementedError, match="mask"):
        gpuarray.as_cuda_array(CAIOnly(d, mask=CAIOnly(d)))
    assert gpuarray.as_cuda_array(CAIOnly(d, mask=None)).ptr == d.ptr
    host = np.arange(3.0)
    with pytest.raises(ValueError, match="not memory CUDA knows"):
        gpuarray.as_cuda_array(CAIOnly(d, data=(host.ctypes.data, False)))
    with pytest.raises(TypeError, match="__cuda_array_interface__"):
        gpuarray.as_cuda_array(object())
    assert gpuarray.as_cuda_array(d) is d


def test_cai_import_strides_none_missing_and_odd_bytes():
    """Item 7: None or missing strides mean C order; byte strides that are not whole
    items are kept as byte strides (values read correctly) and refused by DLPack."""
    host = np.arange(12, dtype=np.int32).reshape(3, 4)
    d = gpuarray.to_device(host)
    for edit in ({"strides": None}, {"strides": _DROP}):
        g = gpuarray.as_cuda_array(CAIOnly(d, **edit))
        assert g.strides == (16, 4) and g.is_c_contiguous()
    raw = np.arange(20, dtype=np.uint8)
    b = gpuarray.to_device(raw)
    g = gpuarray.as_cuda_array(CAIOnly(b, shape=(5,), typestr="<i2", strides=(3,)))
    assert g.strides == (3,)
    expect = np.ndarray((5,), "<i2", raw.tobytes(), 0, (3,))
    np.testing.assert_array_equal(g.copy_to_host(), expect)
    with pytest.raises(BufferError, match="multiples of the item size"):
        g.__dlpack__(max_version=(1, 0))


def test_cai_import_device_comes_from_the_pointer(make_sim):
    """Item 8: memory of device 1 imported with device 0 current; ptr 0 uses the current device."""
    make_sim(devices=2)
    d1 = gpuarray.get_device(1)
    with d1:
        a = gpuarray.to_device(np.arange(5.0))
    assert gpuarray.get_device().id == 0
    for g in (gpuarray.as_cuda_array(CAIOnly(a)),
              gpuarray.from_cuda_array_interface(a.__cuda_array_interface__)):
        assert g.device == d1 and g.stream.device == d1
        assert g.__dlpack_device__() == (2, 1)
        np.testing.assert_array_equal(g.copy_to_host(), np.arange(5.0))
    with d1:
        empty = gpuarray.from_cuda_array_interface({"shape": (0,), "typestr": "<f8",
                                                     "data": (0, False), "version": 3})
    assert empty.device == d1 and empty.size == 0


def test_cai_size0_import_ignores_its_pointer():
    """Item 8: a size-0 import touches no memory, so its pointer (here one nobody knows,
    as a producer's empty slice a[n:] one past its allocation) is never looked up."""
    g = gpuarray.from_cuda_array_interface({"shape": (0, 3), "typestr": "<f4", "version": 3,
                                            "data": (0xDEAD0000, False)})
    assert g.size == 0 and g.device == gpuarray.get_device()
    assert g.__cuda_array_interface__["data"] == (0, False)
    assert g.copy_to_host().shape == (0, 3)


class _Producer:
    """A CAI producer that can be weakly referenced."""

    def __init__(self, arr):
        self.arr = arr

    @property
    def __cuda_array_interface__(self):
        return self.arr.__cuda_array_interface__


def test_as_cuda_array_keeps_the_producer_alive_through_views():
    """Item 9: the producer dies exactly when the last view of the import dies."""
    p = _Producer(gpuarray.to_device(np.arange(6.0)))
    ref = weakref.ref(p)
    g = gpuarray.as_cuda_array(p)
    v = g[::2].T
    w = v.view(np.int64)
    del p, g
    gc.collect()
    assert ref() is not None
    del v
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(w.copy_to_host().view(np.float64), [0.0, 2.0, 4.0])
    del w
    gc.collect()
    assert ref() is None


def test_from_cuda_array_interface_keeps_only_an_explicit_owner():
    """Item 9: without owner nothing is kept alive; with owner= it is."""
    p = _Producer(gpuarray.to_device(np.arange(6.0)))
    ref = weakref.ref(p)
    g = gpuarray.from_cuda_array_interface(p.__cuda_array_interface__)
    del p
    gc.collect()
    assert ref() is None   # the caller's responsibility now: g is not read after this
    del g
    p = _Producer(gpuarray.to_device(np.arange(6.0)))
    ref = weakref.ref(p)
    g = gpuarray.from_cuda_array_interface(p.__cuda_array_interface__, owner=p)[1:]
    del p
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(g.copy_to_host(), np.arange(1.0, 6.0))
    del g
    gc.collect()
    assert ref() is None


def test_readonly_import_refuses_writes_and_reexports_readonly():
    """Item 10 (and 12, 13): writes raise ValueError; CAI and DLPack re-exports carry the flag."""
    d = gpuarray.to_device(np.arange(6.0).reshape(2, 3))
    ro = gpuarray.as_cuda_array(CAIOnly(d, data=(d.ptr, True)))
    assert ro.readonly and not ro.flags["WRITEABLE"]
    for write in (lambda: ro.__setitem__(0, 1.0), lambda: ro.fill(1.0),
                  lambda: ro.copy_to_device(np.zeros((2, 3))), lambda: ro.T.__setitem__(0, 1.0),
                  lambda: gpuarray.to_device(np.zeros((2, 3)), to=ro[:, :])):
        with pytest.raises(ValueError, match="read-only"):
            write()
    np.testing.assert_array_equal(ro.copy_to_host(), np.arange(6.0).reshape(2, 3))
    assert ro[:, 1].readonly and ro.T.readonly and ro.reshape(6).readonly
    assert not ro.copy().readonly
    with pytest.raises(BufferError, match="legacy"):
        ro.__dlpack__()
    cap = ro.__dlpack__(max_version=(1, 0))
    assert peek(cap)["flags"] == dl.DLPACK_FLAG_BITMASK_READ_ONLY
    back = gpuarray.from_dlpack(cap)
    assert back.readonly and back.ptr == d.ptr
    with pytest.raises(ValueError):
        back[0, 0] = 5.0


# ---------------------------------------------------- CAI import and streams
@pytest.mark.parametrize("how", ["owner", "no-owner"])
def test_cai_sync_orders_after_an_unsynchronised_producer(sim, how):
    """sync=True: with an owner the import adopts the producer's stream; without one the
    default stream waits on it.  The producer wrote on a non-blocking stream and did not
    synchronise: a missing edge would be a StreamOrderError (and stale data)."""
    src = _pending(7.0)
    producer = src.stream
    if how == "owner":
        g = gpuarray.as_cuda_array(CAIOnly(src))
        assert g.stream.handle == producer.handle and g.stream.kind == "external"
    else:
        g = gpuarray.from_cuda_array_interface(src.__cuda_array_interface__)
        assert g.stream == gpuarray.default_stream()
    assert (g.copy_to_host() == 7.0).all()
    out = gpuarray.zeros_like(g)
    out[:] = g
    assert (out.copy_to_host() == 7.0).all()


@pytest.mark.parametrize("how", ["sync=False", "env"])
def test_cai_without_sync_the_race_is_caught(sim, monkeypatch, how):
    """The same setup with the ordering switched off: the race detector fires, which
    proves the ordering above is what makes the read correct."""
    src = _pending(7.0)
    if how == "env":
        monkeypatch.setenv("GPUARRAY_CUDA_ARRAY_INTERFACE_SYNC", "0")
        _config.reload()
        g = gpuarray.as_cuda_array(CAIOnly(src))
    else:
        g = gpuarray.as_cuda_array(CAIOnly(src), sync=False)
    assert g.stream == gpuarray.default_stream()
    with pytest.raises(StreamOrderError):
        g.copy_to_host()


def test_cai_sync_records_no_host_synchronisation(recorder):
    """Ordering on import is an event and a stream wait, never a host block."""
    src = _pending(3.0)
    recorder.clear()
    gpuarray.from_cuda_array_interface(src.__cuda_array_interface__)
    names = [c[0] for c in recorder]
    assert "stream_wait_event" in names and "event_record" in names
    assert not {"stream_synchronize", "ctx_synchronize", "event_synchronize"} & set(names)
    recorder.clear()
    gpuarray.as_cuda_array(CAIOnly(src))   # adopts the stream: nothing to do at all
    assert [c for c in recorder if c[0] != "event_create"] == []


def test_cai_stream_none_and_stream_owner_lifetime(sim):
    """A v3 dict with stream None asks for no ordering; an adopted stream keeps its owner."""
    src = gpuarray.full(16, 4.0)
    src.stream.synchronize()
    g = gpuarray.as_cuda_array(CAIOnly(src, stream=None))
    assert g.stream == gpuarray.default_stream()
    assert (g.copy_to_host() == 4.0).all()
    p = CAIOnly(_pending(5.0))
    g = gpuarray.as_cuda_array(p)
    assert g.stream._owner is p


# ================================================== DLPack producer (11-21)
def test_dlpack_keywords_are_keyword_only():
    """Item 11."""
    d = gpuarray.zeros(3)
    params = inspect.signature(d.__dlpack__).parameters
    assert [p.kind for p in params.values()] == [inspect.Parameter.KEYWORD_ONLY] * 4
    assert list(params) == ["stream", "max_version", "dl_device", "copy"]
    assert all(p.default is None for p in params.values())
    with pytest.raises(TypeError):
        d.__dlpack__(None)


@pytest.mark.parametrize("max_version, name, version", [
    (None, "dltensor", None), ((0, 8), "dltensor", None), ((1, 0), "dltensor_versioned", (1, 0)),
    ((1, 1), "dltensor_versioned", (1, 1)), ((1, 9), "dltensor_versioned", (1, 1)),
    ((2, 0), "dltensor_versioned", (1, 1)),
])
def test_dlpack_capsule_kind_follows_max_version(max_version, name, version):
    """Item 12: legacy capsule for None or major 0, versioned 1.x otherwise."""
    cap = gpuarray.zeros(3).__dlpack__(max_version=max_version)
    info = peek(cap)
    assert (info["name"], info["version"]) == (name, version)


def test_dlpack_flags():
    """Item 13: READ_ONLY exactly for read-only arrays, IS_COPIED exactly for copies."""
    d = gpuarray.to_device(np.arange(4.0))
    ro = gpuarray.as_cuda_array(CAIOnly(d, data=(d.ptr, True)))
    v = (1, 1)
    assert peek(d.__dlpack__(max_version=v))["flags"] == 0
    assert peek(d.__dlpack__(max_version=v, copy=False))["flags"] == 0
    assert peek(ro.__dlpack__(max_version=v))["flags"] == dl.DLPACK_FLAG_BITMASK_READ_ONLY
    assert peek(d.__dlpack__(max_version=v, copy=True))["flags"] == dl.DLPACK_FLAG_BITMASK_IS_COPIED
    assert peek(d.__dlpack__(max_version=v, dl_device=(1, 0)))["flags"] == dl.DLPACK_FLAG_BITMASK_IS_COPIED
    assert peek(ro.__dlpack__(max_version=v, copy=True))["flags"] == dl.DLPACK_FLAG_BITMASK_IS_COPIED


@pytest.mark.parametrize("name", LAYOUTS)
def test_dlpack_tensor_fields(name):
    """Item 14 (and 15): shape/strides in elements, NULL data for size 0, byte_offset 0,
    data is element [0, ..., 0]; negative strides exported as they are."""
    host, d = layout_pair(name)
    for max_version in (None, (1, 0)):
        info = peek(d.__dlpack__(max_version=max_version))
        assert info["byte_offset"] == 0 and info["device"] == (2, 0)
        assert info["ndim"] == host.ndim and info["dtype"] == (2, 64, 1)
        assert info["data"] == (0 if host.size == 0 else d.ptr)
        if host.ndim:
            assert info["shape"] == host.shape
            assert info["strides"] is not None
            for n, s, want in zip(host.shape, info["strides"], host.strides, strict=True):
                if n > 1 and host.size:
                    assert s == want // 8
        if name == "reversed":
            assert info["strides"] == (-4, 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dlpack_dtype_codes(dtype):
    """Item 16: (code, bits, lanes) per dtype, lanes always 1."""
    assert peek(gpuarray.zeros(2, dtype=dtype).__dlpack__())["dtype"] == DL_TRIPLES[dtype]


def test_dlpack_bfloat16_and_unsupported_dtypes():
    """Item 16: bfloat16 (4, 16, 1) with ml_dtypes; other dtypes are a BufferError."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    host = np.arange(6, dtype=np.float32).astype(bf16)
    d = gpuarray.to_device(host)
    assert peek(d.__dlpack__())["dtype"] == (4, 16, 1)
    back = gpuarray.from_dlpack(DLPackOnly(d))
    assert back.dtype == bf16 and back.ptr == d.ptr
    np.testing.assert_array_equal(back.copy_to_host().view(np.uint16), host.view(np.uint16))
    for bad in ("M8[ns]", [("a", "<f4"), ("b", "<i4")], "V3"):
        with pytest.raises(BufferError, match="cannot export dtype"):
            gpuarray.empty(2, dtype=bad).__dlpack__(max_version=(1, 0))


def test_dlpack_device(make_sim):
    """Item 17: (2, ordinal) for device memory, (3, 0) for page-locked host memory,
    (13, 0) for managed memory."""
    make_sim(devices=2)
    assert gpuarray.zeros(2).__dlpack_device__() == (2, 0)
    with gpuarray.get_device(1):
        d1 = gpuarray.zeros(2)
    assert d1.__dlpack_device__() == (2, 1)
    pinned = gpuarray.pinned_array(4)
    pinned[:] = 3.0
    view = gpuarray.from_cuda_array_interface({"shape": (4,), "typestr": "<f8", "version": 3,
                                               "data": (pinned.ctypes.data, False)}, owner=pinned)
    assert view.__dlpack_device__() == (3, 0) and view[1:].__dlpack_device__() == (3, 0)
    info = peek(view.__dlpack__(max_version=(1, 0)))
    assert info["device"] == (3, 0) and info["data"] == pinned.ctypes.data
    managed = gpuarray.from_dlpack(Exporter(gpuarray.zeros(4), device_type=dl.kDLCUDAManaged))
    assert managed.__dlpack_device__() == (13, 0)
    assert peek(managed.__dlpack__())["device"] == (13, 0)


def test_dlpack_device_of_a_mapped_host_view():
    """Item 17: a zero-copy device view of mapped page-locked memory is kDLCUDAHost."""
    h = gpuarray.mapped_array(4)
    view = gpuarray.asarray(h)
    assert view.ptr == h.ctypes.data
    assert view.__dlpack_device__() == (3, 0)


def _waits(calls):
    return [c for c in calls if c[0] in ("event_record", "stream_wait_event")]


@pytest.mark.parametrize("stream, waiter", [(None, 1), (1, 1), (2, 2), ("handle", "handle")])
def test_dlpack_consumer_stream_waits_on_the_array_stream(recorder, stream, waiter):
    """Item 18: an event recorded on arr.stream, waited on by the consumer's stream."""
    d = _pending(1.0)
    consumer = gpuarray.stream(non_blocking=True)
    stream = consumer.handle if stream == "handle" else stream
    waiter = consumer.handle if waiter == "handle" else waiter
    recorder.clear()
    cap = d.__dlpack__(stream=stream)
    waits = _waits(recorder)
    assert [c[0] for c in waits] == ["event_record", "stream_wait_event"]
    event = waits[0][1][0]
    assert waits[0][1] == (event, d.stream.handle) and waits[1][1] == (waiter, event)
    _drop(cap)


def test_dlpack_stream_of_the_array_itself_and_minus_one_make_no_driver_call(recorder):
    """Items 18 and 21: -1 means no ordering and no driver call, cheaply and repeatably;
    the array's own stream needs no event either."""
    d = _pending(1.0)
    recorder.clear()
    caps = [d.__dlpack__(stream=-1, max_version=(1, 1)) for _ in range(200)]
    caps.append(d.__dlpack__(stream=d.stream.handle))
    assert recorder == []
    assert len({peek(c)["data"] for c in caps}) == 1
    _drop(*caps)


def test_dlpack_stream_zero_warns_and_means_legacy(recorder):
    """Item 18: 0 warns, then behaves as 1."""
    d = _pending(1.0)
    recorder.clear()
    with pytest.warns(UserWarning, match="stream=0"):
        cap = d.__dlpack__(stream=0)
    assert _waits(recorder)[-1][1][0] == 1
    _drop(cap)


@pytest.mark.parametrize("bad, exc", [("1", TypeError), (1.0, TypeError), (True, TypeError),
                                      (-2, ValueError), (2**64, ValueError)])
def test_dlpack_bad_stream_arguments(bad, exc):
    """Item 18: non-int streams are a TypeError."""
    with pytest.raises(exc, match="stream"):
        gpuarray.zeros(2).__dlpack__(stream=bad)


@pytest.mark.parametrize("consumer", [1, 2, "handle"])
@pytest.mark.parametrize("mode", ["ordered", "minus-one"])
def test_dlpack_consumer_stream_ordering_seen_by_the_race_detector(sim, consumer, mode):
    """Item 18: the consumer reads the exported pointer with a bare driver copy on its own
    stream; without the wait (stream=-1) that read is a race."""
    d = _pending(6.0)
    owned = gpuarray.stream(non_blocking=True)   # held until the end of the test
    handle = owned.handle if consumer == "handle" else consumer
    t = dl.consume_capsule(d.__dlpack__(stream=handle if mode == "ordered" else -1,
                                        max_version=(1, 1)))
    try:
        if mode == "ordered":
            assert (_read_raw(sim, t.data_ptr, d.nbytes, handle, d.dtype) == 6.0).all()
        else:
            with pytest.raises(StreamOrderError):
                _read_raw(sim, t.data_ptr, d.nbytes, handle, d.dtype)
    finally:
        t.release()


def test_dlpack_host_copy(sim):
    """Item 19: dl_device=(1, 0) synchronises and copies to the host (IS_COPIED);
    copy=False refuses; NumPy is a real consumer."""
    host = sample((3, 4), "f4")
    d = gpuarray.to_device(host)
    d.fill(2.5)   # queued: the export must synchronise first
    cap = d.__dlpack__(dl_device=(1, 0), max_version=(1, 1))
    info = peek(cap)
    assert info["device"] == (1, 0) and info["flags"] == dl.DLPACK_FLAG_BITMASK_IS_COPIED
    assert info["data"] != d.ptr and not sim.memory.is_device_address(info["data"])
    _drop(cap)
    with pytest.raises(BufferError, match="copy=False"):
        d.__dlpack__(dl_device=(1, 0), copy=False)
    got = np.from_dlpack(d, device="cpu")
    assert got.flags.writeable
    np.testing.assert_array_equal(got, np.full((3, 4), 2.5, np.float32))
    with pytest.raises(BufferError):
        np.from_dlpack(d, device="cpu", copy=False)


@pytest.mark.parametrize("dl_device", [(2, 1), (3, 0), (13, 0), (4, 0), (1, 1)])
def test_dlpack_foreign_devices_are_refused(dl_device):
    """Item 19: any other device is a BufferError; the array's own device is fine."""
    d = gpuarray.zeros(3)
    with pytest.raises(BufferError, match="cannot export"):
        d.__dlpack__(dl_device=dl_device)
    assert peek(d.__dlpack__(dl_device=(2, 0)))["data"] == d.ptr


def test_dlpack_device_copy_runs_on_the_consumer_stream(sim):
    """Item 19: copy=True on the same device copies on the consumer's stream (IS_COPIED).
    Reading the copy on that stream is ordered; on the legacy stream it races."""
    d = _pending(8.0)
    consumer = gpuarray.stream(non_blocking=True)
    t = dl.consume_capsule(d.__dlpack__(stream=consumer.handle, copy=True, max_version=(1, 1)))
    assert t.is_copied and t.data_ptr != d.ptr
    with pytest.raises(StreamOrderError):   # first: a completed read is a host sync
        _read_raw(sim, t.data_ptr, d.nbytes, 1, d.dtype)
    assert (_read_raw(sim, t.data_ptr, d.nbytes, consumer.handle, d.dtype) == 8.0).all()
    d.fill(1.0)   # the copy is independent of the source
    assert (_read_raw(sim, t.data_ptr, d.nbytes, consumer.handle, d.dtype) == 8.0).all()
    t.release()


def test_dlpack_lifetime_deleter_once():
    """Item 20: the capsule holds the array until the deleter runs, once: at release
    by the consumer, or when an unconsumed capsule dies."""
    calls = dl.deleter_calls()
    d = gpuarray.zeros(4)
    ref = weakref.ref(d)
    cap = d.__dlpack__(max_version=(1, 0))
    del d
    gc.collect()
    assert ref() is not None
    del cap
    dl.sweep_capsules()
    assert ref() is None and dl.deleter_calls() == calls + 1
    d = gpuarray.zeros(4)
    ref = weakref.ref(d)
    imported = gpuarray.from_dlpack(d.__dlpack__())   # raw legacy capsule
    view = imported[1:]
    del d, imported
    dl.sweep_capsules()
    gc.collect()
    assert ref() is not None and dl.deleter_calls() == calls + 1
    del view
    gc.collect()
    assert ref() is None and dl.deleter_calls() == calls + 2


def test_dlpack_export_from_another_device(make_sim, recorder):
    """Item 21: export works whatever device is current; the event goes on the array's device."""
    make_sim(devices=2)
    with gpuarray.get_device(1):
        d = gpuarray.full(4, 9.0, stream=gpuarray.stream(non_blocking=True))
    assert gpuarray.get_device().id == 0
    cap = d.__dlpack__(stream=1, max_version=(1, 0))
    assert peek(cap)["device"] == (2, 1)
    g = gpuarray.from_dlpack(cap)
    assert g.device.id == 1 and (g.copy_to_host() == 9.0).all()


# ================================================== DLPack consumer (22-28)
def test_from_dlpack_asks_the_device_first_and_makes_it_current(make_sim):
    """Item 22: __dlpack_device__ first; the producer's device is current during __dlpack__."""
    make_sim(devices=2)
    with gpuarray.get_device(1):
        d = gpuarray.to_device(np.arange(4.0))
    w = DLPackOnly(d)
    g = gpuarray.from_dlpack(w)
    assert [c[:2] for c in w.calls] == [("device", 0), ("dlpack", 1)]
    assert gpuarray.get_device().id == 0
    assert g.device.id == 1 and g.ptr == d.ptr


def test_from_dlpack_passes_the_real_consumer_stream(monkeypatch):
    """Item 23: stream 1 (legacy) or 2 (per-thread), never 0; max_version (1, 1);
    copy and dl_device only when asked; host producers get stream None."""
    d = gpuarray.zeros(3)
    w = DLPackOnly(d)
    gpuarray.from_dlpack(w)
    assert w.kwargs == [{"stream": 1, "max_version": (1, 1)}]
    w = DLPackOnly(d)
    gpuarray.from_dlpack(w, copy=True)
    assert w.kwargs == [{"stream": 1, "max_version": (1, 1), "copy": True}]
    w = DLPackOnly(d)
    gpuarray.from_dlpack(w, device=(2, 0))
    assert w.kwargs == [{"stream": 1, "max_version": (1, 1), "dl_device": (2, 0)}]
    h = DLPackOnly(np.arange(3.0))
    gpuarray.from_dlpack(h)
    assert h.kwargs == [{"stream": None, "max_version": (1, 1)}]
    monkeypatch.setenv("GPUARRAY_PER_THREAD_DEFAULT_STREAM", "1")
    _config.reload()
    w = DLPackOnly(d)
    g = gpuarray.from_dlpack(w)
    assert w.kwargs[0]["stream"] == 2 and g.stream == gpuarray.per_thread_default_stream()


def test_from_dlpack_retries_old_producers_without_new_keywords():
    """Item 23: TypeError -> retry with stream only; re-raised when copy/device were given."""
    d = gpuarray.to_device(np.arange(3.0))
    w = DLPackOnly(d, old=True)
    g = gpuarray.from_dlpack(w)
    assert w.kwargs == [{"stream": 1, "max_version": (1, 1)}, {"stream": 1}]
    assert g.ptr == d.ptr
    for kw in ({"copy": True}, {"copy": False}, {"device": (2, 0)}):
        w = DLPackOnly(d, old=True)
        with pytest.raises(TypeError, match="unexpected keyword"):
            gpuarray.from_dlpack(w, **kw)
        assert len(w.kwargs) == 1


def test_from_dlpack_goes_by_the_capsule_name():
    """Item 24: a legacy capsule when versioned was asked (JAX) is accepted."""
    d = gpuarray.to_device(np.arange(3.0))
    w = DLPackOnly(d, legacy=True)
    g = gpuarray.from_dlpack(w)
    assert w.kwargs[0]["max_version"] == (1, 1)
    assert g.ptr == d.ptr and not g.readonly


def test_from_dlpack_unknown_major_version_releases_and_refuses():
    """Item 24: major version != 1 -> deleter called, BufferError."""
    exp = Exporter(gpuarray.zeros(3))
    cap = exp.capsule(major=2)
    with pytest.raises(BufferError, match="version 2"):
        gpuarray.from_dlpack(cap)
    assert exp.deaths == [1] and _GetName(cap) == b"used_dltensor_versioned"


def test_from_dlpack_honours_read_only():
    """Item 24: READ_ONLY gives a read-only array."""
    exp = Exporter(gpuarray.to_device(np.arange(3.0)), readonly=True)
    g = gpuarray.from_dlpack(exp)
    assert g.readonly
    with pytest.raises(ValueError, match="read-only"):
        g.fill(0)
    del g
    gc.collect()
    assert exp.deaths == [1]


@pytest.mark.parametrize("versioned", [True, False])
def test_from_dlpack_renames_and_deletes_once_when_the_last_view_dies(versioned):
    """Item 25: capsule renamed used_*; the producer's deleter runs once, after every view."""
    exp = Exporter(gpuarray.to_device(np.arange(12.0).reshape(3, 4)), versioned=versioned)
    cap = exp.capsule()
    calls = dl.deleter_calls()
    g = gpuarray.from_dlpack(cap)
    assert _GetName(cap) == (b"used_dltensor_versioned" if versioned else b"used_dltensor")
    views = [g[::-1], g.T, g[1, ...], g[:, 1:3].view(np.int64)]
    del g, cap
    dl.sweep_capsules()
    gc.collect()
    assert exp.deaths == []
    np.testing.assert_array_equal(views[0].copy_to_host(), np.arange(12.0).reshape(3, 4)[::-1])
    views.pop(0)
    gc.collect()
    assert exp.deaths == []
    del views
    gc.collect()
    assert exp.deaths == [1] and dl.deleter_calls() == calls + 1
    with pytest.raises(BufferError, match="already consumed"):
        gpuarray.from_dlpack(_consumed_capsule())


def _consumed_capsule():
    cap = gpuarray.zeros(1).__dlpack__()
    dl.consume_capsule(cap).release()
    return cap


def test_from_dlpack_byte_offset_null_strides_and_lanes():
    """Item 26: pointer = data + byte_offset; NULL strides mean C order; lanes != 1 refused."""
    host = np.arange(12.0).reshape(3, 4)
    base = gpuarray.to_device(host)
    exp = Exporter(base)
    g = gpuarray.from_dlpack(exp.capsule(byte_offset=8))
    assert g.ptr == base.ptr + 8 and g.shape == (3, 4)
    np.testing.assert_array_equal(g[:2].copy_to_host(), host.ravel()[1:9].reshape(2, 4))
    t = Exporter(base.T)
    g = gpuarray.from_dlpack(t.capsule(null_strides=True))
    assert g.strides == (24, 8) and g.is_c_contiguous()
    lanes = Exporter(base)
    with pytest.raises(BufferError, match="lanes=2"):
        gpuarray.from_dlpack(lanes.capsule(lanes=2))
    assert lanes.deaths == [1]


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("dtype", ["?", "i1", "u8", "f2", "f8", "c16"])
def test_dlpack_round_trip_layouts(name, dtype):
    """Items 14, 15, 26: every layout through a DLPack-only producer, zero-copy; NumPy consumer."""
    host, d = layout_pair(name, dtype)
    g = gpuarray.from_dlpack(DLPackOnly(d))
    same_layout(g, d)
    np.testing.assert_array_equal(g.copy_to_host(), host)
    np.testing.assert_array_equal(np.from_dlpack(d, device="cpu"), host)
    np.testing.assert_array_equal(np.from_dlpack(g, device="cpu"), host)


@pytest.mark.parametrize("name", LAYOUTS)
def test_cai_round_trip_layouts(name):
    """Items 1, 6, 7: every layout through a CAI-only producer, zero-copy."""
    host, d = layout_pair(name, "c8")
    g = gpuarray.as_cuda_array(CAIOnly(d))
    same_layout(g, d)
    np.testing.assert_array_equal(g.copy_to_host(), host)
    if host.ndim:
        np.testing.assert_array_equal(g[..., ::-1].copy_to_host(), host[..., ::-1])


def test_numpy_refuses_device_memory_without_a_cpu_request():
    """A real consumer that cannot use CUDA memory refuses it; nothing leaks (autouse check)."""
    with pytest.raises((BufferError, RuntimeError)):
        np.from_dlpack(gpuarray.zeros(3))


@pytest.mark.parametrize("device_type", [dl.kDLCUDA, dl.kDLCUDAHost, dl.kDLCUDAManaged])
def test_from_dlpack_cuda_device_types_are_zero_copy(device_type):
    """Item 27: CUDA, CUDA host and CUDA managed memory are wrapped, not copied."""
    src = gpuarray.to_device(np.arange(5.0))
    exp = Exporter(src, device_type=device_type)
    g = gpuarray.from_dlpack(exp)
    assert g.ptr == src.ptr and g.__dlpack_device__()[0] == device_type
    np.testing.assert_array_equal(g.copy_to_host(), np.arange(5.0))


class PinnedLikeTorch(Exporter):
    """Page-locked host memory (kDLCUDAHost) exported the way PyTorch exports a pinned CPU
    tensor: its ``__dlpack__`` takes only ``stream=None`` (torch/_tensor.py: "stream should be
    None on cpu"; the array API: "On CPU and other device types without streams, only None
    is accepted")."""

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream is not None and stream != -1:
            raise AssertionError("stream should be None on cpu.")
        return self.capsule()


def test_from_dlpack_pinned_producer_without_streams():
    """Item 23: kDLCUDAHost producers get stream=None (PyTorch refuses any other value
    for pinned CPU tensors)."""
    pinned = gpuarray.pinned_array(4)
    pinned[:] = 2.0
    view = gpuarray.from_cuda_array_interface({"shape": (4,), "typestr": "<f8", "version": 3,
                                               "data": (pinned.ctypes.data, False)}, owner=pinned)
    g = gpuarray.from_dlpack(PinnedLikeTorch(view, device_type=dl.kDLCUDAHost))
    assert g.ptr == pinned.ctypes.data and g.__dlpack_device__() == (3, 0)
    np.testing.assert_array_equal(g.copy_to_host(), np.full(4, 2.0))


def test_a_table_that_calls_pinned_memory_cpu_memory_does_not_make_it_a_copy(monkeypatch):
    """PyTorch's exchange table gives a pinned tensor as kDLCPU while its
    ``__dlpack_device__`` says kDLCUDAHost (an H200 run, 2026-11-28): gpuarray copied it.
    Page-locked memory is imported zero-copy, so ``__dlpack__`` decides."""
    from gpuarray.interop import _dlpack

    pinned = gpuarray.pinned_array(4)
    pinned[:] = 3.0
    view = gpuarray.from_cuda_array_interface({"shape": (4,), "typestr": "<f8", "version": 3,
                                               "data": (pinned.ctypes.data, False)}, owner=pinned)
    producer = PinnedLikeTorch(view, device_type=dl.kDLCUDAHost)

    def table_says_cpu(x, api):  # what PyTorch's table hands over: the same memory, as kDLCPU
        # (released again: the autouse check fails a test whose export's deleter never ran)
        return dl.consume_capsule(dl.make_capsule(
            data_ptr=pinned.ctypes.data, shape=(4,), byte_strides=(8,), dtype=np.float64,
            device_type=dl.kDLCPU, device_id=0, owner=pinned))

    monkeypatch.setattr(_dlpack, "exchange_api_of", lambda tp: object())
    monkeypatch.setattr(_dlpack, "_through_table", table_says_cpu)
    g = gpuarray.from_dlpack(producer)
    assert g.ptr == pinned.ctypes.data and g.__dlpack_device__() == (3, 0)
    np.testing.assert_array_equal(g.copy_to_host(), np.full(4, 3.0))


class JaxLike(CAIOnly):
    """A producer that exports CAI version 2 without a stream and without waiting for its
    data, as jaxlib does; its ``block_until_ready`` is counted."""

    def __init__(self, arr, **edits):
        super().__init__(arr, **{"version": 2, "stream": _DROP, **edits})
        self.waits = 0

    def block_until_ready(self):
        self.waits += 1
        return self


def test_as_cuda_array_waits_for_a_jax_like_producer_that_exports_no_stream():
    """JAX's CAI (version 2, no stream) comes before its data is written: an import on an
    H200 read another array's bytes.  gpuarray asks such a producer to be ready first."""
    d = gpuarray.to_device(np.arange(6.0))
    j = JaxLike(d)
    g = gpuarray.as_cuda_array(j)
    assert j.waits == 1 and g.ptr == d.ptr
    np.testing.assert_array_equal(g.copy_to_host(), np.arange(6.0))
    gpuarray.as_cuda_array(j, sync=False)  # the caller took the ordering on itself
    assert j.waits == 1
    with_stream = JaxLike(d, stream=1, version=3)  # a stream to order after: no host wait
    gpuarray.as_cuda_array(with_stream)
    assert with_stream.waits == 0


def test_from_dlpack_copy_keyword_on_device_data():
    """copy=True gives an independent device copy; copy=False and None are zero-copy."""
    d = gpuarray.to_device(np.arange(4.0))
    assert gpuarray.from_dlpack(DLPackOnly(d), copy=False).ptr == d.ptr
    c = gpuarray.from_dlpack(DLPackOnly(d), copy=True)
    assert c.ptr != d.ptr and not c.readonly
    d.fill(0)
    np.testing.assert_array_equal(c.copy_to_host(), np.arange(4.0))


def test_from_dlpack_other_device_types_are_refused():
    """Item 27: e.g. OpenCL (4) is a BufferError; the deleter still runs."""
    exp = Exporter(gpuarray.zeros(3), device_type=4)
    with pytest.raises(BufferError, match="device type 4"):
        gpuarray.from_dlpack(exp.capsule())
    assert exp.deaths == [1]


HOST_LAYOUTS = {"contiguous": lambda a: a, "transposed": lambda a: a.T,
                "negative": lambda a: a[::-1, ::-2], "0-d": lambda a: a[1, 2, ...],
                "size-0": lambda a: a[:, 2:2], "broadcast": lambda a: np.broadcast_to(a[0], (3, 4))}


@pytest.mark.parametrize("name", list(HOST_LAYOUTS))
def test_from_dlpack_host_numpy_is_copied(name):
    """Item 27: kDLCPU data is copied to the device; copy=False refuses (and releases)."""
    base = np.arange(12.0).reshape(3, 4)
    host = HOST_LAYOUTS[name](base)
    for x in (host, DLPackOnly(host)):
        g = gpuarray.from_dlpack(x)
        assert g.shape == host.shape and g.dtype == host.dtype
        assert g.__dlpack_device__() == (2, 0)
        np.testing.assert_array_equal(g.copy_to_host(), host)
        if host.size:
            assert g.ptr != host.__array_interface__["data"][0]
    ref = weakref.ref(base)
    with pytest.raises(BufferError, match="copy=False"):
        gpuarray.from_dlpack(host, copy=False)
    del host, base, x, g
    gc.collect()
    assert ref() is None   # NumPy's deleter ran


def test_from_dlpack_host_data_on_a_chosen_device(make_sim):
    make_sim(devices=2)
    g = gpuarray.from_dlpack(np.arange(3.0), device=gpuarray.get_device(1))
    assert g.device.id == 1
    np.testing.assert_array_equal(g.copy_to_host(), np.arange(3.0))
    with pytest.raises(ValueError, match="device"):
        gpuarray.from_dlpack(np.arange(3.0), device="cuda:1")


def test_from_dlpack_torch_cpu_is_copied():
    """Item 27 with a second real host producer."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).T
    g = gpuarray.from_dlpack(t)
    assert g.shape == (4, 3)
    np.testing.assert_array_equal(g.copy_to_host(), t.numpy())
    with pytest.raises(BufferError, match="copy=False"):
        gpuarray.from_dlpack(t, copy=False)
    b = torch.tensor([True, False, True])
    np.testing.assert_array_equal(gpuarray.from_dlpack(b).copy_to_host(), [True, False, True])


def test_from_dlpack_raw_capsules():
    """Item 28: raw capsules, device and host."""
    d = gpuarray.to_device(np.arange(4.0))
    for max_version in (None, (1, 0)):
        g = gpuarray.from_dlpack(d.__dlpack__(max_version=max_version))
        assert g.ptr == d.ptr
    h = gpuarray.from_dlpack(np.arange(4.0).__dlpack__(max_version=(1, 0)))
    np.testing.assert_array_equal(h.copy_to_host(), np.arange(4.0))
    with pytest.raises(TypeError, match="not a DLPack producer"):
        gpuarray.from_dlpack(object())


def test_from_dlpack_orders_after_an_unsynchronised_producer(sim):
    """Item 23 seen end to end: the consumer's stream is handed to the producer, which
    orders it after its pending work; the import is read correctly with no host sync."""
    src = _pending(4.0)
    g = gpuarray.from_dlpack(DLPackOnly(src))
    assert g.stream == gpuarray.default_stream() and g.ptr == src.ptr
    assert (g.copy_to_host() == 4.0).all()


# ========================================== whole library: CAI-only, DLPack-only
@pytest.mark.parametrize("wrap", [CAIOnly, DLPackOnly], ids=["cai", "dlpack"])
def test_every_entry_point_accepts_one_protocol_objects(wrap):
    host = np.arange(6, dtype=np.int32).reshape(2, 3)
    src = gpuarray.to_device(host)
    a = gpuarray.asarray(wrap(src))
    assert isinstance(a, DeviceNDArray) and a.ptr == src.ptr          # zero-copy
    f = gpuarray.asarray(wrap(src), dtype=np.float64)
    assert f.dtype == np.float64 and f.ptr != src.ptr
    np.testing.assert_array_equal(f.copy_to_host(), host)
    c = gpuarray.to_device(wrap(src))
    assert c.ptr != src.ptr
    np.testing.assert_array_equal(c.copy_to_host(), host)
    dst = gpuarray.zeros((2, 3), dtype=np.float32)
    dst.copy_to_device(wrap(src))
    np.testing.assert_array_equal(dst.copy_to_host(), host)
    dst[:] = 0
    dst[1] = wrap(src[0])
    dst[:, 2] = wrap(src[::-1, 0])
    np.testing.assert_array_equal(dst.copy_to_host(), [[0, 0, 3], [0, 1, 0]])
    gpuarray.to_device(wrap(src[:, ::-1]), to=dst)                      # to= path
    np.testing.assert_array_equal(dst.copy_to_host(), host[:, ::-1])
    assert gpuarray.is_cuda_array(wrap(src)) is (wrap is CAIOnly)


def test_entry_points_accept_dlpack_only_host_producers():
    """A DLPack-only host producer (kDLCPU, no __array__) is host data for every entry point."""
    host = np.arange(6.0)
    np.testing.assert_array_equal(gpuarray.asarray(DLPackOnly(host)).copy_to_host(), host)
    np.testing.assert_array_equal(gpuarray.to_device(DLPackOnly(host)).copy_to_host(), host)
    d = gpuarray.zeros(6)
    d[:] = DLPackOnly(host)
    np.testing.assert_array_equal(d.copy_to_host(), host)


# ----------------------------------------- hardening issue, items 4 to 7
class _HostBoth:
    """A host producer with DLPack and an ``__array__`` that cannot give its dtype
    (PyTorch's bfloat16: "Got unsupported ScalarType BFloat16")."""

    def __init__(self, arr):
        self.arr, self.deaths = arr, []

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        a = self.arr
        return dl.make_capsule(data_ptr=a.ctypes.data, shape=a.shape, byte_strides=a.strides,
                               dtype=a.dtype, device_type=dl.kDLCPU, device_id=0, owner=a,
                               versioned=max_version is not None)

    def __dlpack_device__(self):
        return (dl.kDLCPU, 0)

    def __array__(self, dtype=None, copy=None):
        raise TypeError("Got unsupported ScalarType BFloat16")


def test_host_dlpack_preferred_over_array_for_bfloat16():
    """Item 5: asarray, to_device and d[:] = x take a host producer's __dlpack__ first."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    src = np.arange(6, dtype=np.float32).astype(bf16).reshape(2, 3)
    p = _HostBoth(src)
    for out in (gpuarray.asarray(p), gpuarray.to_device(p)):
        assert out.dtype == bf16 and out.shape == (2, 3)
        assert out.copy_to_host().tobytes() == src.tobytes()
    d = gpuarray.zeros((2, 3), dtype=bf16)
    d[:] = p
    assert d.copy_to_host().tobytes() == src.tobytes()


def test_torch_bfloat16_cpu_tensor_to_device():
    """Item 5 with the real peer: a bfloat16 PyTorch CPU tensor."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes")
    t = torch.arange(6, dtype=torch.float32).to(torch.bfloat16).reshape(2, 3)
    want = t.view(torch.int16).numpy().tobytes()
    assert gpuarray.asarray(t).copy_to_host().tobytes() == want
    assert gpuarray.to_device(t).copy_to_host().tobytes() == want
    d = gpuarray.empty((2, 3), dtype=gpuarray.asarray(t).dtype)
    d[:] = t
    assert d.copy_to_host().tobytes() == want


def test_torch_rejecting_our_capsule_keeps_its_error():
    """Item 4: PyTorch CPU takes a CUDA capsule, then rejects it and calls the deleter
    with its error set; the user must see PyTorch's error, not SystemError. The C
    core keeps it; the ctypes fallback cannot (its documented limit)."""
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if dl.CORE != "c":
        pytest.skip("the ctypes DLPack core cannot restore a pending error (documented limit; "
                    "tests/interop/test_dlpack_capsule.py covers both cores)")
    d = gpuarray.zeros(3)
    if torch.cuda.is_available() and not backend_is_sim():  # a GPU: PyTorch takes it
        for cap in (d.__dlpack__(max_version=(1, 0)), d.__dlpack__()):
            assert torch.from_dlpack(cap).data_ptr() == d.ptr
        return
    for cap in (d.__dlpack__(max_version=(1, 0)), d.__dlpack__()):
        with pytest.raises(Exception) as info:
            torch.from_dlpack(cap)
        assert not isinstance(info.value, SystemError), info.value


def _capsule_with(**fields):
    """A host capsule of 4 float64 whose DLPack fields are then overwritten."""
    a = np.arange(4.0)
    deaths = []
    owner = type("Owner", (), {})()
    owner.a = a
    weakref.finalize(owner, deaths.append, 1)
    cap = dl.make_capsule(data_ptr=a.ctypes.data, shape=a.shape, byte_strides=a.strides,
                          dtype=a.dtype, device_type=dl.kDLCPU, device_id=0, owner=owner)
    m = dl.DLManagedTensorVersioned.from_address(_GetPointer(cap, b"dltensor_versioned"))
    t = m.dl_tensor
    for name, value in fields.items():
        if name == "shape":
            t.ndim = len(value)
            t.shape = (ctypes.c_int64 * len(value))(*value)
            owner.shape = t.shape
            t.strides = (ctypes.c_int64 * len(value))(*([1] * len(value)))
            owner.strides = t.strides
        elif name == "strides":
            t.strides[0] = value
        else:
            setattr(t, name, value)
    del owner
    return cap, deaths


@pytest.mark.parametrize("fields, match", [
    ({"shape": (2**40, 2**40)}, r"shape \(1099511627776, 1099511627776\)"),
    ({"strides": 2**61}, r"stride of 2305843009213693952 elements of 8 bytes \(axis 0\)"),
    ({"byte_offset": 2**64 - 8}, r"byte_offset 0xfffffffffffffff8"),
])
def test_dlpack_import_refuses_sizes_beyond_64_bits(fields, match):
    """Item 6: refused at import with BufferError naming the value; the deleter runs."""
    cap, deaths = _capsule_with(**fields)
    with pytest.raises(BufferError, match=match):
        gpuarray.from_dlpack(cap)
    del cap
    gc.collect()
    assert deaths == [1]


def test_dlpack_device_of_strings_is_refused():
    """Item 6: ("2", "0") is not "not CUDA": it is refused, naming the value."""
    class Strings:
        def __dlpack__(self, **kw):
            return np.arange(3.0).__dlpack__(**kw)

        def __dlpack_device__(self):
            return ("2", "0")

    for fn in (gpuarray.from_dlpack, gpuarray.asarray, gpuarray.to_device):
        with pytest.raises(TypeError, match=r"\('2', '0'\)"):
            fn(Strings())


def test_cai_import_extent_checked_against_the_allocation():
    """Item 7: an extent past the allocation, or outside the address space, is refused
    at import with ValueError naming the overshoot; size 0 stays exempt."""
    d = gpuarray.zeros(16, np.float32)
    desc = dict(d.__cuda_array_interface__)
    with pytest.raises(ValueError, match="64 bytes outside its allocation"):
        gpuarray.from_cuda_array_interface({**desc, "shape": (32,)})
    with pytest.raises(ValueError, match="4 bytes outside its allocation"):
        gpuarray.from_cuda_array_interface({**desc, "data": (d.ptr + 4, False)})
    with pytest.raises(ValueError, match="outside the 64-bit address space"):
        gpuarray.from_cuda_array_interface({**desc, "shape": (3,), "strides": (-(2**62),)})
    ok = gpuarray.from_cuda_array_interface({**desc, "shape": (0,), "data": (d.ptr + 4096, False)})
    assert ok.size == 0
    back = gpuarray.from_cuda_array_interface({**desc, "data": (d.ptr + 16, False), "shape": (12,)})
    assert back.size == 12


def test_no_upward_imports_between_array_creation_coerce_and_interop():
    """Issue 13: _dlpack_export < _array < interop glue < _coerce < _creation: no import (at module
    level or inside a function) from a module to one above it."""
    import ast
    from pathlib import Path

    root = Path(gpuarray.__file__).parent
    order = ["interop/_dlpack_export", "_array", "interop/_cai", "interop/_dlpack", "_coerce",
             "_creation"]
    rank = {name.replace("/", "."): i for i, name in enumerate(order)}
    for name in order:
        path = root / f"{name}.py"
        package = "gpuarray" + ("" if "/" not in name else ".interop")
        here = rank[name.replace("/", ".")]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):  # import gpuarray._coerce
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:  # from gpuarray._x import y
                mod = node.module or ""
                targets = [mod, *(f"{mod}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                targets = [".".join([*base, *(node.module.split(".") if node.module else [])])]
                if not node.module:
                    targets = [".".join([*base, alias.name]) for alias in node.names]
            else:
                continue
            for target in targets:
                short = target.removeprefix("gpuarray.")
                if short in rank:
                    assert rank[short] < here or short == name.replace("/", "."), \
                        f"{name} imports {short}, which is above it"
