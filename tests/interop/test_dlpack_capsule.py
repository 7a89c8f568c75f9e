"""Tests for gpuarray.interop._dlpack_capsule: DLPack capsules, both cores.

Every test runs twice: against the C core (``_dlpack_core``; skipped, saying
so, where the extension was not built) and against the ctypes fallback.
NumPy is the real external consumer and producer (host memory, kDLCPU);
PyTorch (CPU) is used too when installed. Deleter calls are counted through
the owners' deaths and the core's counter.
"""

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

from gpuarray.interop import _core as _cores
from gpuarray.interop import _dlpack_capsule as dl

REPO = Path(__file__).resolve().parents[2]

# Test-private C-API prototypes (the shared ctypes.pythonapi objects stay untouched).
_api = ctypes.pythonapi
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_GetName = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_SetName", _api))
_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api))
_NAMES = {n: ctypes.create_string_buffer(n) for n in
          (b"used_dltensor", b"used_dltensor_versioned", b"not_a_dltensor", b"dltensor")}


def _name_ptr(name):
    return ctypes.addressof(_NAMES[name])


def _deleter_calls():
    return dl.deleter_calls()


def _c_core_available():
    try:
        _cores._import_c_core()
    except ImportError as exc:
        return str(exc)
    return ""


@pytest.fixture(autouse=True, params=["c", "python"])
def core(request):
    """Run the test against one core; restore the one selected at import after it."""
    if request.param == "c" and _c_core_available():
        pytest.skip(f"the C core is not built here: {_c_core_available()}")
    previous = dl._set_core(request.param)
    yield request.param
    dl.sweep_capsules()
    dl._set_core(previous)


class Owner:
    """Keeps the host array alive for an export and records its own death."""

    def __init__(self, arr, deaths):
        self.arr = arr
        weakref.finalize(self, deaths.append, 1)


class HostExporter:
    """Exposes host memory only through DLPack, producing capsules with make_capsule."""

    def __init__(self, arr, *, readonly=False, legacy=False, device_type=dl.kDLCPU,
                 dtype=None):
        self.arr, self.readonly, self.legacy = arr, readonly, legacy
        self.device_type, self.dtype = device_type, dtype or arr.dtype
        self.deaths, self.asked = [], []

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        req = dl.parse_dlpack_request(stream=stream, max_version=max_version,
                                      dl_device=dl_device, copy=copy)
        self.asked.append(max_version)
        return self.capsule(versioned=req.versioned and not self.legacy,
                            version=req.version or dl.DLPACK_MAX_VERSION)

    def capsule(self, versioned=True, **kw):
        a = self.arr
        return dl.make_capsule(
            data_ptr=a.__array_interface__["data"][0], shape=a.shape,
            byte_strides=a.strides, dtype=self.dtype, device_type=self.device_type,
            device_id=0, owner=Owner(a, self.deaths), readonly=self.readonly,
            versioned=versioned, **kw)


@pytest.fixture(autouse=True)
def no_leaked_exports(core):
    dl.sweep_capsules()
    gc.collect()
    before = dl.live_exports()
    yield
    dl.sweep_capsules()
    gc.collect()
    assert dl.live_exports() == before, "an export's deleter never ran"


def _base():
    return np.arange(24, dtype=np.float64).reshape(4, 6)


LAYOUTS = {
    "contiguous": lambda: _base(),
    "transposed": lambda: _base().T,
    "negative": lambda: _base()[::-1, ::-2],
    "step2": lambda: _base()[:, ::2],
    "broadcast": lambda: np.broadcast_to(np.arange(3.0), (4, 3)),
    "zero-d": lambda: np.array(7.5),
    "size0": lambda: np.empty((0,)),
    "size0-3d": lambda: np.empty((3, 0, 2)),
    "extent1": lambda: _base()[1:2, :],
}


def _same_layout(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.size:
        assert got.__array_interface__["data"][0] == want.__array_interface__["data"][0]
        for n, s_got, s_want in zip(want.shape, got.strides, want.strides, strict=True):
            if n > 1:
                assert s_got == s_want
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("legacy", [False, True], ids=["versioned", "legacy"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_numpy_consumes_our_capsule(layout, legacy):
    src = LAYOUTS[layout]()
    exp = HostExporter(src, legacy=legacy)
    got = np.from_dlpack(exp)
    assert exp.asked and dl.wants_versioned(exp.asked[0])  # numpy 2.x asks for 1.x
    _same_layout(got, src)
    if not legacy:
        assert got.flags.writeable  # versioned without READ_ONLY
    assert exp.deaths == []
    del got
    gc.collect()
    assert exp.deaths == [1]


@pytest.mark.parametrize("dtype", ["?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
                                   "f2", "f4", "f8", "c8", "c16"])
def test_numpy_roundtrip_dtypes(dtype):
    src = (np.arange(12) % 3).astype(dtype).reshape(3, 4)[:, ::-1]
    exp = HostExporter(src)
    got = np.from_dlpack(exp)
    _same_layout(got, src)
    del got
    gc.collect()
    assert exp.deaths == [1]


def test_numpy_honours_read_only_flag():
    src = _base()
    got = np.from_dlpack(HostExporter(src, readonly=True))
    assert not got.flags.writeable
    with pytest.raises(ValueError):
        got[0, 0] = 1.0
    assert src[0, 0] == 0.0


def test_read_only_legacy_export_is_refused():
    exp = HostExporter(_base(), readonly=True, legacy=True)
    exports, calls = dl.live_exports(), _deleter_calls()
    with pytest.raises(BufferError, match="legacy"):
        np.from_dlpack(exp)
    with pytest.raises(BufferError, match="max_version"):
        exp.capsule(versioned=False)
    assert (dl.live_exports(), _deleter_calls()) == (exports, calls)  # nothing registered


def test_unconsumed_capsule_released_exactly_once(core):
    exp = HostExporter(_base())
    calls = _deleter_calls()
    cap = exp.capsule()
    del cap  # the ctypes core still holds it: destroyed at the next sweep
    assert dl.sweep_capsules() == (1 if core == "python" else 0)
    assert exp.deaths == [1] and _deleter_calls() == calls + 1
    assert dl.sweep_capsules() == 0
    cap = exp.capsule(versioned=False)
    del cap
    gc.collect()  # the gc callback sweeps too
    assert exp.deaths == [1, 1] and _deleter_calls() == calls + 2


def test_kept_capsule_is_not_released_by_sweeps():
    exp = HostExporter(_base())
    cap = exp.capsule()
    for _ in range(3):
        dl.sweep_capsules()
        gc.collect()
    assert exp.deaths == [] and _GetName(cap) == b"dltensor_versioned"
    del cap  # now an "old" capsule: full sweeps (gc generation >= 1) find it
    gc.collect()
    assert exp.deaths == [1]


@pytest.mark.parametrize("versioned", [True, False])
def test_consume_own_capsule_release_twice(versioned):
    src = _base()[::-1, ::2]
    exp = HostExporter(src, readonly=versioned)
    cap = exp.capsule(versioned=versioned)
    calls = _deleter_calls()
    t = dl.consume_capsule(cap)
    assert _GetName(cap) == (b"used_dltensor_versioned" if versioned else b"used_dltensor")
    assert t.data_ptr == src.__array_interface__["data"][0]
    assert (t.shape, t.byte_strides, t.dtype) == (src.shape, src.strides, src.dtype)
    assert (t.device_type, t.device_id) == (dl.kDLCPU, 0)
    assert t.versioned is versioned and t.readonly is versioned
    assert t.version == ((1, 1) if versioned else None)
    del cap
    dl.sweep_capsules()
    assert exp.deaths == []
    t.release()
    t.release()
    assert t.released and exp.deaths == [1] and _deleter_calls() == calls + 1
    del t
    gc.collect()
    assert exp.deaths == [1] and _deleter_calls() == calls + 1


def test_dropping_imported_tensor_releases_it():
    exp = HostExporter(_base())
    t = dl.consume_capsule(exp.capsule())
    assert "released=False" in repr(t)
    del t
    gc.collect()
    assert exp.deaths == [1]


def test_flags_and_null_fields():
    exp = HostExporter(np.empty((2, 0)))
    t = dl.consume_capsule(exp.capsule(is_copied=True, version=(1, 0)))
    assert t.is_copied and not t.readonly and t.version == (1, 0)
    assert t.data_ptr == 0 and t.shape == (2, 0)  # size 0 exports NULL data
    t.release()
    cap = HostExporter(np.array(3.0)).capsule()
    m = dl.DLManagedTensorVersioned.from_address(_GetPointer(cap, b"dltensor_versioned"))
    assert m.dl_tensor.ndim == 0 and not m.dl_tensor.shape and not m.dl_tensor.strides
    assert m.dl_tensor.byte_offset == 0 and m.manager_ctx and m.deleter
    t = dl.consume_capsule(cap)
    assert (t.shape, t.byte_strides) == ((), ())
    t.release()


@pytest.mark.parametrize("versioned", [None, (1, 0)], ids=["legacy", "versioned"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "negative", "step2",
                                    "zero-d", "size0-3d", "broadcast"])
def test_consume_numpy_capsules(layout, versioned):
    src = LAYOUTS[layout]()
    if layout == "broadcast" and versioned is None:
        pytest.skip("NumPy refuses to export a read-only view as a legacy capsule")
    refs = sys.getrefcount(src)
    t = dl.consume_capsule(src.__dlpack__(max_version=versioned))
    assert t.versioned is (versioned is not None)
    assert (t.shape, t.dtype) == (src.shape, src.dtype)
    for n, got, want in zip(src.shape, t.byte_strides, src.strides, strict=True):
        if n > 1:
            assert got == want
    assert t.readonly is (versioned is not None and not src.flags.writeable)
    if src.size:
        assert t.data_ptr == src.__array_interface__["data"][0]
        first = src[(0,) * src.ndim]
        assert ctypes.string_at(t.data_ptr, src.itemsize) == first.tobytes()
    assert sys.getrefcount(src) == refs + 1  # NumPy's capsule holds the array
    t.release()
    t.release()
    assert sys.getrefcount(src) == refs  # NumPy's deleter ran once


def test_null_deleter_is_allowed():
    exp = HostExporter(_base())
    cap = exp.capsule()
    manager = _GetPointer(cap, b"dltensor_versioned")
    m = dl.DLManagedTensorVersioned.from_address(manager)
    deleter, m.deleter = m.deleter, None  # "no way to provide a destructor"
    t = dl.consume_capsule(cap)
    t.release()
    assert t.released and exp.deaths == []
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(deleter)(manager)  # clean up by hand
    assert exp.deaths == [1]


def test_consume_numpy_read_only():
    src = _base()
    src.flags.writeable = False
    t = dl.consume_capsule(src.__dlpack__(max_version=(1, 0)))
    assert t.readonly and t.version[0] == 1
    t.release()


def test_not_a_capsule():
    for obj in (None, b"dltensor", object(), np.arange(3)):
        with pytest.raises(TypeError, match="PyCapsule"):
            dl.consume_capsule(obj)


def test_wrong_capsule_name():
    cap = _New(_name_ptr(b"dltensor"), _name_ptr(b"not_a_dltensor"), None)
    with pytest.raises(ValueError, match="not_a_dltensor"):
        dl.consume_capsule(cap)
    nameless = _New(_name_ptr(b"dltensor"), None, None)
    with pytest.raises(ValueError, match="None"):
        dl.consume_capsule(nameless)


def test_used_capsule_is_refused():
    exp = HostExporter(_base())
    cap = exp.capsule()
    t = dl.consume_capsule(cap)
    calls = _deleter_calls()
    with pytest.raises(BufferError, match="already consumed"):
        dl.consume_capsule(cap)
    np_cap = np.arange(3).__dlpack__()
    np.from_dlpack(type("Once", (), {"__dlpack__": lambda s, **k: np_cap,
                                     "__dlpack_device__": lambda s: (1, 0)})())
    with pytest.raises(BufferError, match="used_dltensor"):
        dl.consume_capsule(np_cap)
    assert _deleter_calls() == calls and exp.deaths == []
    t.release()
    assert exp.deaths == [1]


def _patched(cap, **fields):
    m = dl.DLManagedTensorVersioned.from_address(_GetPointer(cap, b"dltensor_versioned"))
    for name, value in fields.items():
        if name == "major":
            m.version.major = value
        else:
            setattr(m.dl_tensor.dtype, name, value)
    return cap


@pytest.mark.parametrize("fields, match", [
    ({"major": 2}, "version 2.1"),
    ({"lanes": 2}, "lanes=2"),
    ({"code": 3}, "code=3"),
    ({"bits": 24}, "bits=24"),
])
def test_malformed_versioned_capsule_calls_deleter(fields, match):
    exp = HostExporter(_base())
    cap = _patched(exp.capsule(), **fields)
    calls = _deleter_calls()
    with pytest.raises(BufferError, match=match):
        dl.consume_capsule(cap)
    assert exp.deaths == [1] and _deleter_calls() == calls + 1
    assert _GetName(cap) == b"used_dltensor_versioned"
    del cap
    dl.sweep_capsules()
    assert _deleter_calls() == calls + 1  # the destructor did not call it again


def test_numpy_made_capsule_with_major_2():
    src = np.arange(5)
    refs = sys.getrefcount(src)
    cap = _patched(src.__dlpack__(max_version=(1, 0)), major=2)
    with pytest.raises(BufferError, match="version 2"):
        dl.consume_capsule(cap)
    assert sys.getrefcount(src) == refs  # NumPy's deleter was called
    assert _GetName(cap) == b"used_dltensor_versioned"
    del cap
    gc.collect()
    assert sys.getrefcount(src) == refs


@pytest.mark.parametrize("bad", [
    {"device_type": dl.kDLCUDA},      # NumPy: "Unsupported device"
    {"major": 2},                     # NumPy: major version too high
])
def test_numpy_rejection_keeps_its_exception(bad, core):
    """NumPy drops a rejected capsule with its error set; that error must survive.

    Item 4 of the hardening issue: the C core's destructor and deleter run
    right then, with NumPy's error pending, and keep it; the ctypes core holds
    its capsules until a later sweep so that they never run then."""
    exp = HostExporter(_base(), device_type=bad.get("device_type", dl.kDLCPU))
    if "major" in bad:
        orig = exp.capsule
        exp.capsule = lambda **kw: _patched(orig(**kw), major=2)
    with pytest.raises((BufferError, RuntimeError)) as info:
        np.from_dlpack(exp)
    assert not isinstance(info.value, SystemError)
    assert "device" in str(info.value) or "version" in str(info.value)
    del info
    dl.sweep_capsules()
    assert exp.deaths == [1]


def test_bfloat16_roundtrip():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    assert dl.dtype_to_dlpack(bf16) == (4, 16, 1) and dl.dlpack_to_dtype(4, 16, 1) == bf16
    src = np.arange(6, dtype=np.float32).astype(bf16).reshape(2, 3)
    exp = HostExporter(src)
    t = dl.consume_capsule(exp.capsule())
    assert t.dtype == bf16 and t.byte_strides == (6, 2)
    t.release()
    assert exp.deaths == [1]


def test_dtype_mapping():
    table = {"?": (6, 8, 1), "i1": (0, 8, 1), "i8": (0, 64, 1), "u2": (1, 16, 1),
             "f2": (2, 16, 1), "f4": (2, 32, 1), "f8": (2, 64, 1), "c8": (5, 64, 1),
             "c16": (5, 128, 1)}
    for name, triple in table.items():
        assert dl.dtype_to_dlpack(name) == triple
        assert dl.dlpack_to_dtype(*triple) == np.dtype(name)
    bad = [">f4" if sys.byteorder == "little" else "<f4", "O", "V4", "U3", "M8[ns]",
           [("a", "f4")], ("f4", 2)]
    if np.dtype(np.longdouble).itemsize > 8:
        bad.append(np.longdouble)
    for dtype in bad:
        with pytest.raises(BufferError, match="cannot export dtype"):
            dl.dtype_to_dlpack(dtype)
    for triple in [(2, 32, 2), (3, 64, 1), (0, 128, 1), (6, 1, 1), (7, 8, 1)]:
        with pytest.raises(BufferError, match=f"code={triple[0]}, bits={triple[1]}"):
            dl.dlpack_to_dtype(*triple)


def test_make_capsule_validation():
    a = _base()
    kw = dict(data_ptr=a.ctypes.data, shape=(4, 6), byte_strides=(48, 8), dtype="f8",
              device_type=dl.kDLCUDA, device_id=0, owner=a)
    for change, exc in [({"byte_strides": (48, 4)}, BufferError),
                        ({"byte_strides": (48,)}, ValueError),
                        ({"shape": (4, -6)}, ValueError),
                        ({"shape": (4, 6.0)}, TypeError),
                        ({"shape": 4}, TypeError),
                        ({"data_ptr": True}, TypeError),
                        ({"data_ptr": -1}, ValueError),
                        ({"dtype": "O"}, BufferError),
                        ({"device_id": 2**31}, ValueError),
                        ({"device_type": None}, TypeError),
                        ({"version": (2, 0)}, ValueError),
                        ({"shape": (2**62, 4), "byte_strides": (8, 2)}, ValueError)]:
        with pytest.raises(exc):
            dl.make_capsule(**{**kw, **change})
    # strides of axes of extent 1, or of size-0 arrays, do not matter
    t = dl.consume_capsule(dl.make_capsule(**{**kw, "shape": (1, 6), "byte_strides": (3, 8)}))
    assert t.byte_strides == (48, 8)
    t.release()
    t = dl.consume_capsule(dl.make_capsule(**{**kw, "shape": (0, 6), "byte_strides": (3, 5)}))
    assert t.data_ptr == 0 and t.device_type == dl.kDLCUDA
    t.release()


def test_deleter_from_thread_without_gil(core):
    """A consumer thread that does not hold the GIL calls the deleter (ctypes
    releases the GIL around a call through a CFUNCTYPE pointer)."""
    exps = [HostExporter(_base()) for _ in range(8)]
    owned = []
    for exp in exps:
        cap = exp.capsule()
        manager = _GetPointer(cap, b"dltensor_versioned")
        assert _SetName(cap, _name_ptr(b"used_dltensor_versioned")) == 0  # consumed
        owned.append((manager, dl.DLManagedTensorVersioned.from_address(manager).deleter))
    calls = _deleter_calls()
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    barrier = threading.Barrier(len(owned))

    def consumer(manager, deleter):
        barrier.wait()
        call(deleter)(manager)

    threads = [threading.Thread(target=consumer, args=pair) for pair in owned]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    gc.collect()
    assert [e.deaths for e in exps] == [[1]] * len(exps)
    assert _deleter_calls() == calls + len(exps)
    if core == "python":  # the C core, as NumPy's, trusts the "exactly once" contract
        call(owned[0][1])(owned[0][0])  # a buggy second call is ignored
        assert exps[0].deaths == [1]


def test_many_exports_do_not_leak():
    src = _base()
    exp = HostExporter(src)
    for i in range(300):
        cap = exp.capsule(versioned=bool(i % 2))
        if i % 3 == 0:
            np.from_dlpack(type("W", (), {"__dlpack__": lambda s, c=cap, **k: c,
                                          "__dlpack_device__": lambda s: (1, 0)})())
        elif i % 3 == 1:
            dl.consume_capsule(cap).release()
        del cap
    dl.sweep_capsules()
    gc.collect()
    assert len(exp.deaths) == 300


def test_stream_argument():
    assert dl.parse_dlpack_stream(None) == 1
    assert dl.parse_dlpack_stream(1) == 1
    assert dl.parse_dlpack_stream(2) == 2
    assert dl.parse_dlpack_stream(-1) is None
    assert dl.parse_dlpack_stream(0xDEAD0) == 0xDEAD0
    assert dl.parse_dlpack_stream(np.int64(7)) == 7
    with pytest.warns(UserWarning, match="stream=0"):
        assert dl.parse_dlpack_stream(0) == 1
    for bad in (True, False, 1.0, "1", (1,), object()):
        with pytest.raises(TypeError, match="stream"):
            dl.parse_dlpack_stream(bad)
    for bad in (-2, 2**64):
        with pytest.raises(ValueError, match="stream"):
            dl.parse_dlpack_stream(bad)


def test_version_negotiation_and_request():
    assert [dl.wants_versioned(v) for v in (None, (0, 9), (1, 0), (2, 0))] == \
        [False, False, True, True]
    assert dl.export_version((1, 0)) == (1, 0)
    assert dl.export_version((1, 5)) == dl.DLPACK_MAX_VERSION == (1, 1)
    assert dl.export_version((3, 0)) == (1, 1)
    assert dl.export_version((0, 8)) is None
    for bad in ((1,), "1.0", (1.0, 0), (True, 0), 1):
        with pytest.raises(TypeError, match="max_version"):
            dl.wants_versioned(bad)
    req = dl.parse_dlpack_request(stream=-1, max_version=(1, 3), dl_device=(1, 0), copy=True)
    assert (req.stream, req.version, req.dl_device, req.copy, req.versioned) == \
        (None, (1, 1), (1, 0), True, True)
    assert not dl.parse_dlpack_request().versioned
    with pytest.raises(TypeError, match="copy"):
        dl.parse_dlpack_request(copy=1)
    with pytest.raises(TypeError, match="dl_device"):
        dl.parse_dlpack_request(dl_device=2)


def _run(code, core):
    env = {**os.environ, "GPUARRAY_DLPACK_CORE": core}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_objects_alive_at_interpreter_exit(core):
    """Capsules, imported tensors and NumPy views held in globals until exit."""
    res = _run("""
        import gc, numpy as np
        from gpuarray.interop import _dlpack_capsule as dl
        a = np.arange(10.0)
        def cap(**kw):
            return dl.make_capsule(data_ptr=a.ctypes.data, shape=a.shape, byte_strides=a.strides,
                                   dtype=a.dtype, device_type=1, device_id=0, owner=a, **kw)
        class W:
            def __init__(self, c): self.c = c
            def __dlpack__(self, **kw): return self.c
            def __dlpack_device__(self): return (1, 0)
        unconsumed = cap()
        unconsumed_legacy = cap(versioned=False)
        imported_own = dl.consume_capsule(cap())
        imported_numpy = dl.consume_capsule(np.arange(4).__dlpack__(max_version=(1, 0)))
        numpy_view = np.from_dlpack(W(cap()))
        cycle = [cap()]
        cycle.append(cycle)
        del cycle
        gc.disable()  # leave the cycle to interpreter teardown
        print("ok")
    """, core)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok" and res.stderr == ""


def test_deleter_called_late_during_finalization(core):
    """A NumPy array from our capsule dies during module teardown (after atexit):
    the deleter must run without touching this module's cleared globals."""
    res = _run("""
        import atexit, sys, numpy as np
        from gpuarray.interop import _dlpack_capsule as dl
        a = np.arange(10.0)
        class W:
            def __dlpack__(self, **kw):
                return dl.make_capsule(data_ptr=a.ctypes.data, shape=a.shape, owner=a,
                    byte_strides=a.strides, dtype=a.dtype, device_type=1, device_id=0)
            def __dlpack_device__(self): return (1, 0)
        class Holder:
            pass
        Holder.views = [np.from_dlpack(W()) for _ in range(3)]  # freed late
        sys.modules["__main__"].late = np.from_dlpack(W())
        print("ok")
    """, core)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok" and "Exception" not in res.stderr, res.stderr


def test_an_export_released_during_shutdown_leaks_its_owner_on_both_cores(core):
    """After atexit the interpreter is shutting down: a late deleter must not
    run the owner's teardown there (both cores leak instead); before it, the
    owner is released as usual."""
    res = _run("""
        import atexit, os, sys, numpy as np
        from gpuarray.interop import _dlpack_capsule as dl
        class Owner:
            def __init__(self, tag): self.tag, self.a = tag, np.arange(4.0)
            def __del__(self, _write=os.write):  # os.write: sys.stdout may be gone
                _write(1, ("released " + self.tag + "\\n").encode())
        def view(tag):
            o = Owner(tag)
            class W:
                def __dlpack__(self, **kw):
                    return dl.make_capsule(data_ptr=o.a.ctypes.data, shape=o.a.shape, owner=o,
                        byte_strides=o.a.strides, dtype=o.a.dtype, device_type=1, device_id=0)
                def __dlpack_device__(self): return (1, 0)
            return np.from_dlpack(W())
        early = view("early")
        atexit.register(lambda: globals().pop("early"))   # runs before the core's own hook
        sys.modules["__main__"].late = view("late")        # freed during module teardown
        print("ok", flush=True)
    """, core)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["ok", "released", "early"], res.stdout + res.stderr


def test_deleter_called_with_an_exception_set(core):
    """A consumer that calls the deleter while its own exception is set (here
    NumPy freeing an array popped off the stack during unwinding): the release
    happens exactly once and nothing crashes. The C core saves and restores
    the error indicator, so the consumer's exception survives (item 4 of the
    hardening issue); the ctypes core cannot restore it: it is reported as
    unraisable and CPython may raise SystemError in its place (its documented
    limit)."""
    res = _run("""
        import sys, numpy as np
        from gpuarray.interop import _dlpack_capsule as dl
        a = np.arange(10.0)
        seen = []
        sys.unraisablehook = lambda u: seen.append(type(u.exc_value).__name__)
        class W:
            def __dlpack__(self, **kw):
                return dl.make_capsule(data_ptr=a.ctypes.data, shape=a.shape, owner=a,
                    byte_strides=a.strides, dtype=a.dtype, device_type=1, device_id=0)
            def __dlpack_device__(self): return (1, 0)
        def f():
            return print(np.from_dlpack(W()), 1 / 0)
        try:
            f()
        except BaseException as exc:
            raised = type(exc).__name__
        print(dl.CORE, raised, seen, dl.live_exports(), dl.deleter_calls())
    """, core)
    assert res.returncode == 0, res.stderr
    used, raised, rest = res.stdout.split(" ", 2)
    assert used == core
    if core == "c":
        assert (raised, rest.strip()) == ("ZeroDivisionError", "[] 0 1")
    else:
        assert rest.strip() in ("['ZeroDivisionError'] 0 1", "[] 0 1")
        assert raised in ("ZeroDivisionError", "SystemError")


def test_torch_roundtrip():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    src = _base()[:, ::2]
    exp = HostExporter(src)
    t = torch.from_dlpack(exp)
    assert t.shape == src.shape and t.stride() == tuple(s // 8 for s in src.strides)
    np.testing.assert_array_equal(t.numpy(), src)
    del t
    gc.collect()
    assert exp.deaths == [1]
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).T
    for max_version in (None, (1, 0)):
        imp = dl.consume_capsule(t.__dlpack__(max_version=max_version)
                                 if max_version else t.__dlpack__())
        assert imp.shape == (4, 3) and imp.byte_strides == (4, 16)
        assert imp.data_ptr == t.data_ptr() and imp.dtype == np.float32
        imp.release()


# --- host_address: a host array's address through its NumPy array interface ---

_BASE = np.arange(24.0).reshape(4, 6)
_READONLY = _BASE.copy()
_READONLY.flags.writeable = False


@pytest.mark.parametrize("arr", [
    _BASE, _READONLY, _BASE[1:], _BASE[:, 2], _BASE[::-1], _BASE[::-1, ::-1], _BASE.T,
    np.array(3.0), np.empty(0), np.zeros((0, 3))[:, 1:], np.arange(5, dtype=np.uint8)[2:],
], ids=["c", "readonly", "offset", "column", "reversed", "reversed2d", "fortran", "0d",
        "empty", "empty-view", "bytes-offset"])
def test_host_address_is_the_first_elements_address(core, arr):
    assert dl.host_address(arr) == arr.__array_interface__["data"][0]


class _Struct(ctypes.Structure):  # NumPy's PyArrayInterface
    _fields_ = [("two", ctypes.c_int), ("nd", ctypes.c_int), ("typekind", ctypes.c_char),
                ("itemsize", ctypes.c_int), ("flags", ctypes.c_int), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("data", ctypes.c_void_p), ("descr", ctypes.c_void_p)]


class _StructOnly:
    """Exposes only ``__array_struct__`` (a named capsule), as a non-NumPy producer may."""

    def __init__(self, two, data):
        self.struct = _Struct(two=two, nd=0, typekind=b"u", itemsize=1, data=data)

    @property
    def __array_struct__(self):
        return _New(ctypes.addressof(self.struct), ctypes.addressof(_NAMES[b"not_a_dltensor"]), None)


def test_host_address_reads_any_array_struct(core):
    assert dl.host_address(_StructOnly(2, 0x1234_5600)) == 0x1234_5600


@pytest.mark.parametrize("obj, error, match", [
    ([1.0, 2.0], TypeError, r"NumPy array interface \(__array_struct__\), got <class 'list'>"),
    (bytearray(8), TypeError, "got <class 'bytearray'>"),  # a buffer, but no array interface
    (type("Bad", (), {"__array_struct__": 5})(), TypeError, "is <class 'int'>, not a capsule"),
    (_StructOnly(3, 0x1000), ValueError, "first field is 3, not 2"),
])
def test_host_address_rejects_what_has_no_array_interface(core, obj, error, match):
    with pytest.raises(error, match=match):
        dl.host_address(obj)


def test_a_c_core_built_from_older_sources_is_not_used(core, monkeypatch):
    import types

    import gpuarray.interop as interop

    stale = types.ModuleType("gpuarray.interop._dlpack_core")
    stale.__file__ = "/site/gpuarray/interop/_dlpack_core.abi3.so"
    for name in ("make", "consume", "live_exports", "deleter_calls", "exchange_install",
                 "exchange_prepare", "exchange_import", "exchange_stream",
                 "exchange_forget_streams", "cai_fields", "cai_register"):  # no host_address
        setattr(stale, name, lambda *args: None)
    monkeypatch.setitem(sys.modules, "gpuarray.interop._dlpack_core", stale)
    monkeypatch.setattr(interop, "_dlpack_core", stale, raising=False)
    with pytest.raises(ImportError, match=r"_dlpack_core.abi3.so is out of date \(no host_address\): "
                                          r"rebuild it with `pip install .`"):
        _cores._import_c_core()
    with pytest.raises(ImportError, match="out of date"):
        dl._set_core("c")
    assert dl.CORE == core  # unchanged
