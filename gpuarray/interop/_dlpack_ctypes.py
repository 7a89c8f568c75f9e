"""The ctypes core of DLPack: the fallback for ``_dlpack_core`` (C).

Same functions as the C extension (``make``, ``consume``, ``host_address``,
``live_exports``, ``deleter_calls``), for machines where it was not built, or when
``GPUARRAY_DLPACK_CORE=python`` forces this one. ``_dlpack_capsule`` selects
the core at import and holds everything else (validation, dtypes,
``ImportedTensor``).

Lifetime of an export (see :func:`make`)
----------------------------------------
* One zeroed ctypes block per export holds the managed struct, then shape and
  strides; ``_EXPORTS[address] = (owner, block)`` keeps both alive until the
  deleter pops the entry (once; a second call finds nothing).
* The deleter and capsule destructor are ``CFUNCTYPE`` thunks made at import
  and leaked on purpose, as are the capsule names; the callbacks take what they
  use as default arguments, so module teardown cannot break them. During
  interpreter finalization the deleter leaks the entry rather than run the
  owner's teardown in a half-finalized interpreter.
* A ctypes callback cannot restore an exception that was set when it was
  called: NumPy's ``from_dlpack`` drops a rejected capsule right after setting
  its error, which would become ``SystemError``. So exported capsules are also
  held here and dropped by :func:`sweep_capsules` (on the next export/import,
  after each garbage collection, at exit) once nobody else holds them: an
  unconsumed capsule's destructor runs then, with no exception in flight.
  That machinery is installed by :func:`install_sweeps`, only when this core
  is the one in use.
* Limits: a consumer that calls the deleter with an exception set loses it
  (reported as unraisable; the release still happens); a deleter call after
  ``Py_Finalize`` cannot reach any Python callback. The C core has neither.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import struct
import sys
import threading
import weakref
from typing import Any

import numpy as np

__all__ = [
    "DLDevice", "DLDataType", "DLTensor", "DLManagedTensor", "DLPackVersion",
    "DLManagedTensorVersioned", "Releaser", "consume", "deleter_calls", "host_address", "install_sweeps",
    "live_exports", "make", "sweep_capsules",
]

_INT64_MAX = 2**63 - 1
_MAX_NDIM = 64


class DLDevice(ctypes.Structure):
    """``DLDevice``: device type (an ``int32`` enum) and ordinal."""

    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """``DLDataType``: type code, bits per lane, lanes."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """``DLTensor`` (48 bytes on 64-bit platforms); strides in elements."""

    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    """Legacy ``DLManagedTensor`` (capsule ``"dltensor"``); ``deleter`` as an address."""

    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    """``DLPackVersion``: major and minor ABI version."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    """``DLManagedTensorVersioned`` (``"dltensor_versioned"``); ABI-stable up to ``flags``."""

    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


# Packed images of the structs, for writing an export in one call (no padding).
_TENSOR_FMT = "QiiiBBHQQQ"  # data, device, ndim, dtype, shape, strides, byte_offset
_PACK = {False: struct.Struct("=" + _TENSOR_FMT + "QQ"),   # + manager_ctx, deleter
         True: struct.Struct("=IIQQQ" + _TENSOR_FMT)}      # version, ctx, deleter, flags
if (_PACK[False].size, _PACK[True].size) != (ctypes.sizeof(DLManagedTensor),
                                              ctypes.sizeof(DLManagedTensorVersioned)):
    raise ImportError("unexpected DLPack struct layout on this platform")


# --- private C-API prototypes (argtypes of ctypes.pythonapi.* are never touched) ---
_vp = ctypes.c_void_p


def _capi(name: str, restype: Any, *argtypes: Any) -> Any:
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_Py_IncRef = _capi("Py_IncRef", None, ctypes.py_object)
_PyCapsule_New = _capi("PyCapsule_New", ctypes.py_object, _vp, _vp, _vp)
_PyCapsule_GetName = _capi("PyCapsule_GetName", ctypes.c_char_p, ctypes.py_object)
_PyCapsule_GetPointer = _capi("PyCapsule_GetPointer", _vp, ctypes.py_object, _vp)
_PyCapsule_SetName = _capi("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, _vp)
# The destructor gets a dying capsule: pass it as a bare address, never py_object.
_PyCapsule_GetName_raw = _capi("PyCapsule_GetName", ctypes.c_char_p, _vp)
_PyCapsule_GetPointer_raw = _capi("PyCapsule_GetPointer", _vp, _vp, ctypes.c_char_p)
# First call of each callback: a PYFUNCTYPE call raises, as a Python exception,
# any error the C caller had set, so the callback's own work runs cleanly.
_raise_pending = _capi("PyErr_Occurred", _vp)
_CallbackFunc = ctypes.CFUNCTYPE(None, _vp)     # ctypes takes the GIL when called
_ForeignDeleter = ctypes.PYFUNCTYPE(None, _vp)  # a producer's deleter, called with the GIL


def _immortal_name(text: bytes) -> int:
    buf = ctypes.create_string_buffer(text)
    _Py_IncRef(buf)  # leaked: a capsule may still point at it after module teardown
    return ctypes.addressof(buf)


_NAME = {False: _immortal_name(b"dltensor"), True: _immortal_name(b"dltensor_versioned")}
_USED_NAME = {False: _immortal_name(b"used_dltensor"),
              True: _immortal_name(b"used_dltensor_versioned")}
_CAPSULE_NAMES = {b"dltensor": False, b"dltensor_versioned": True}
_USED_NAMES = (b"used_dltensor", b"used_dltensor_versioned")
_CapsuleType = type(_PyCapsule_New(_NAME[False], _NAME[False], None))

# --- export registry and the two callbacks ---
_EXPORTS: dict[int, tuple[object, object]] = {}  # manager address -> (owner, block)
_LEAKED: list[tuple[object, object]] = []        # deleter called during finalization
_COUNTS = {"deleter_calls": 0, "released": 0, "leaked": 0}


def _release_export(addr: int, _exports: dict = _EXPORTS, _leaked: list = _LEAKED,
                    _counts: dict = _COUNTS, _finalizing: Any = sys.is_finalizing) -> None:
    _counts["deleter_calls"] += 1
    entry = _exports.pop(addr, None)
    if entry is None:  # unknown address, or a second call: ignored
        return
    if _finalizing():
        _leaked.append(entry)
        _counts["leaked"] += 1
        return
    _counts["released"] += 1  # returning drops `entry`: owner and block


def _deleter_callback(addr: int, _probe: Any = _raise_pending,
                      _release: Any = _release_export, _base: Any = BaseException) -> None:
    pending = None
    try:
        _probe()
    except _base as exc:
        pending = exc
    try:
        _release(addr)
    except _base:
        pass
    if pending is not None:
        raise pending  # ctypes reports it as unraisable: it cannot be restored


def _destructor_callback(capsule: int, _probe: Any = _raise_pending,
                         _get_name: Any = _PyCapsule_GetName_raw,
                         _get_pointer: Any = _PyCapsule_GetPointer_raw,
                         _release: Any = _release_export,
                         _unused: tuple = (b"dltensor", b"dltensor_versioned"),
                         _base: Any = BaseException) -> None:
    pending = None
    try:
        _probe()
    except _base as exc:
        pending = exc
    try:
        name = _get_name(capsule)
        if name in _unused:  # never consumed: this is the one release
            _release(_get_pointer(capsule, name))
    except _base:
        pass
    if pending is not None:
        raise pending


_DELETER = _CallbackFunc(_deleter_callback)
_DESTRUCTOR = _CallbackFunc(_destructor_callback)
_Py_IncRef(_DELETER)  # never collected: a consumer may call it at any time
_Py_IncRef(_DESTRUCTOR)
_DELETER_ADDR: int = ctypes.cast(_DELETER, _vp).value or 0
_DESTRUCTOR_ADDR: int = ctypes.cast(_DESTRUCTOR, _vp).value or 0

# --- deferred capsule death (module docstring) ---
# Generational, so that automatic sweeps cost O(new capsules): a capsule that
# survives one sweep (someone still holds it) moves to the old set, scanned by
# full sweeps only (explicit calls, gc generations 1 and 2, exit, or when the
# old set has doubled in size).
_LIVE_CAPSULES: dict[int, object] = {}  # young: exported since the last sweep
_OLD_CAPSULES: dict[int, object] = {}
_OLD_LIMIT = [64]
_SWEEP_LOCK = threading.Lock()


def _refs(mapping: dict, key: int, _getrefcount: Any = sys.getrefcount) -> int:
    return _getrefcount(mapping[key])


_SOLE_REFS = _refs({0: object()}, 0)  # the count when only the dict holds it


def _sweep(full: bool) -> int:
    if not _SWEEP_LOCK.acquire(blocking=False):
        return 0
    dropped = []
    try:
        young, old = _LIVE_CAPSULES, _OLD_CAPSULES
        full = full or len(old) >= _OLD_LIMIT[0]
        for key in list(old) if full else ():
            if _refs(old, key) <= _SOLE_REFS:
                dropped.append(old.pop(key))
        for key in list(young):  # capsules added meanwhile stay young
            if _refs(young, key) <= _SOLE_REFS:
                dropped.append(young.pop(key))
            else:
                old[key] = young.pop(key)
        if full:
            _OLD_LIMIT[0] = max(64, 2 * len(old))
    finally:
        _SWEEP_LOCK.release()
    count = len(dropped)
    dropped.clear()  # destructors run here, outside the lock
    return count


def sweep_capsules() -> int:
    """Drop this module's reference to exported capsules nobody else holds.

    An unconsumed one dies now, which runs its deleter (once). New capsules
    are also swept by each export and import and after each garbage
    collection; all of them after collections of generations 1 and 2, and
    at exit.

    Returns
    -------
    int
        How many capsules were dropped.

    """
    return _sweep(True)


def _gc_callback(phase: str, info: dict, _young: dict = _LIVE_CAPSULES,
                 _old: dict = _OLD_CAPSULES, _sweep: Any = _sweep,
                 _finalizing: Any = sys.is_finalizing) -> None:
    if phase == "stop" and (_young or _old) and not _finalizing():
        try:
            _sweep(info.get("generation", 2) >= 1)
        except Exception:
            pass


_INSTALLED = [False]


def install_sweeps() -> None:
    """Sweep after each garbage collection and at exit (this core only; idempotent)."""
    if not _INSTALLED[0]:
        _INSTALLED[0] = True
        gc.callbacks.append(_gc_callback)
        atexit.register(sweep_capsules)


def live_exports() -> int:
    """Return how many exports still hold their owner (deleter not run yet).

    Returns
    -------
    int
    """
    return len(_EXPORTS)




def deleter_calls() -> int:
    """How many times this core's deleter has run (second calls included).

    Returns
    -------
    int
    """
    return _COUNTS["deleter_calls"]




class _ArrayInterface(ctypes.Structure):
    """NumPy's ``PyArrayInterface``: what ``__array_struct__``'s capsule points to."""

    _fields_ = [("two", ctypes.c_int), ("nd", ctypes.c_int), ("typekind", ctypes.c_char),
                ("itemsize", ctypes.c_int), ("flags", ctypes.c_int), ("shape", _vp),
                ("strides", _vp), ("data", _vp), ("descr", _vp)]


def host_address(obj: Any, _addressof: Any = ctypes.addressof,
                 _char: Any = ctypes.c_char) -> int:
    """Address of element ``[0, ..., 0]`` of an object with the NumPy array interface.

    As the C core's: reads ``obj.__array_struct__``.  A writable contiguous
    ndarray takes ctypes' ``from_buffer`` first, the same address at a third
    of the cost.
    """
    if type(obj) is np.ndarray:
        try:
            return _addressof(_char.from_buffer(obj))
        except (TypeError, ValueError, BufferError):  # read-only, not contiguous, or empty
            pass
    try:
        cap = obj.__array_struct__
    except AttributeError:
        raise TypeError("host_address needs an object with the NumPy array interface "
                        f"(__array_struct__), got {type(obj)!r}") from None
    if type(cap).__name__ != "PyCapsule":
        raise TypeError(f"__array_struct__ of {type(obj)!r} is {type(cap)!r}, not a capsule")
    iface = _ArrayInterface.from_address(_PyCapsule_GetPointer(cap, _PyCapsule_GetName(cap)))
    if iface.two != 2:
        raise ValueError(f"__array_struct__ of {type(obj)!r} is not a NumPy array interface "
                         f"(its first field is {iface.two}, not 2)")
    return iface.data or 0


def make(owner: object, data: int, shape: tuple[int, ...], byte_strides: tuple[int, ...],
         itemsize: int, code: int, bits: int, lanes: int, device_type: int, device_id: int,
         versioned: bool, major: int, minor: int, flags: int) -> Any:
    """A capsule from validated plain values (``_dlpack_capsule.make_capsule`` checks them).

    Strides are bytes here and exported in elements; raises ``BufferError``
    for a byte stride that is not a whole number of elements on an axis of
    extent > 1, ``ValueError`` for values DLPack cannot hold.
    """
    ndim = len(shape)
    if ndim > _MAX_NDIM or len(byte_strides) != ndim or not 0 <= data < 2**64:
        raise ValueError(f"invalid export: shape {shape}, byte_strides {byte_strides}")
    size = 0 if 0 in shape else 1
    extent = 1
    for n in shape:
        if not 0 <= n <= _INT64_MAX:
            raise ValueError(f"shape entry {n} is out of range for DLPack")
        extent *= max(n, 1)
    if extent * itemsize > _INT64_MAX:
        raise ValueError(f"shape {shape} is too large for DLPack")
    elem_strides, expected = [0] * ndim, 1
    for i in range(ndim - 1, -1, -1):
        if abs(byte_strides[i]) > _INT64_MAX:
            raise ValueError(f"byte stride {byte_strides[i]} is out of range for DLPack")
        q, r = divmod(byte_strides[i], itemsize)
        if r:
            if shape[i] > 1 and size:
                raise BufferError(f"byte strides {byte_strides} are not multiples of the "
                                  f"item size {itemsize}: DLPack counts strides in elements")
            q = expected  # the stride of an axis of extent <= 1 does not matter
        elem_strides[i], expected = q, expected * max(shape[i], 1)
    versioned = bool(versioned)
    pack = _PACK[versioned]
    block = ctypes.create_string_buffer(pack.size + 16 * ndim)  # one per export
    addr = ctypes.addressof(block)
    arrays = (addr + pack.size, addr + pack.size + 8 * ndim) if ndim else (0, 0)
    tensor = (data if size else 0, device_type, device_id, ndim, code, bits, lanes, *arrays, 0)
    if versioned:
        pack.pack_into(block, 0, major, minor, addr, _DELETER_ADDR, flags, *tensor)
    else:
        pack.pack_into(block, 0, *tensor, addr, _DELETER_ADDR)
    if ndim:
        struct.pack_into(f"={2 * ndim}q", block, pack.size, *shape, *elem_strides)
    if _LIVE_CAPSULES:
        _sweep(False)
    _EXPORTS[addr] = (owner, block)
    try:
        capsule = _PyCapsule_New(addr, _NAME[versioned], _DESTRUCTOR_ADDR)
    except BaseException:
        _EXPORTS.pop(addr, None)
        raise
    _LIVE_CAPSULES[id(capsule)] = capsule
    return capsule


def _call_deleter(manager: int, deleter: int) -> None:
    if deleter == _DELETER_ADDR:
        _release_export(manager)
    elif deleter:
        _ForeignDeleter(deleter)(manager)


class Releaser:
    """Calls a consumed tensor's deleter exactly once: on :meth:`release` or when collected."""

    __slots__ = ("_finalizer", "__weakref__")

    def __init__(self, manager: int, deleter: int) -> None:
        self._finalizer = weakref.finalize(self, _call_deleter, manager, deleter)

    def release(self) -> None:
        """Call the producer's deleter now; later calls do nothing."""
        self._finalizer()

    @property
    def released(self) -> bool:
        """Whether the deleter has been called."""
        return not self._finalizer.alive


_CONSUME_LOCK = threading.RLock()  # a gc-triggered sweep may re-enter


def consume(capsule: Any) -> tuple:
    """``(releaser, versioned, major, minor, flags, data_ptr, device_type, device_id, code,
    bits, lanes, shape, byte_strides, size, lo, hi)``, as the C core's ``consume``
    (same checks, same errors)."""
    if type(capsule) is not _CapsuleType:
        raise TypeError(f"expected a DLPack PyCapsule, got {type(capsule).__name__}")
    if _LIVE_CAPSULES:
        _sweep(False)
    with _CONSUME_LOCK:
        name = _PyCapsule_GetName(capsule)
        if name in _USED_NAMES:
            raise BufferError(f"this DLPack capsule was already consumed (its name is "
                              f"{name.decode()!r}); a capsule can be consumed only once")
        if name not in _CAPSULE_NAMES:
            raise ValueError(f"not a DLPack capsule: its name is {name!r}, expected "
                             "'dltensor' or 'dltensor_versioned'")
        versioned = _CAPSULE_NAMES[name]
        manager = _PyCapsule_GetPointer(capsule, _NAME[versioned])
        managed = (DLManagedTensorVersioned if versioned else DLManagedTensor
                   ).from_address(manager)
        rel = Releaser(manager, managed.deleter or 0)
        try:
            _PyCapsule_SetName(capsule, _USED_NAME[versioned])
        except BaseException:
            rel._finalizer.detach()
            raise
    try:
        return _fields(rel, versioned, managed)
    except BufferError:
        rel.release()
        raise


def _fields(rel: Releaser, versioned: bool, managed: Any) -> tuple:
    major = minor = flags = 0
    if versioned:
        major, minor, flags = managed.version.major, managed.version.minor, managed.flags
        if major != 1:  # only the fields up to `flags` may be read
            return (rel, True, major, minor, flags) + (None,) * 11
    t = managed.dl_tensor
    ndim, code, bits, lanes = t.ndim, t.dtype.code, t.dtype.bits, t.dtype.lanes
    dev = (t.device.device_type, t.device.device_id)
    if not 0 <= ndim <= _MAX_NDIM or (ndim and not t.shape):
        raise BufferError(f"invalid DLPack tensor: ndim={ndim}, shape pointer "
                          f"{'set' if t.shape else 'NULL'}")
    if lanes != 1 or not bits or bits % 8:
        return (rel, versioned, major, minor, flags, 0, *dev, code, bits, lanes) + (None,) * 5
    itemsize = bits // 8
    shape = tuple(t.shape[:ndim]) if ndim else ()
    strides = tuple(t.strides[:ndim]) if ndim and t.strides else None
    size, lo, hi, acc, out = 1, 0, itemsize, itemsize, [0] * ndim
    for i in range(ndim - 1, -1, -1):
        n = shape[i]
        if n < 0:
            raise BufferError(f"invalid DLPack tensor: negative shape {shape}")
        size *= n
        if strides is not None:
            step = strides[i] * itemsize
        else:
            step = acc
            acc *= max(n, 1)
        if abs(step) > _INT64_MAX:
            which = ("a stride" if strides is None else
                     f"a stride of {strides[i]} elements of {itemsize} bytes (axis {i})")
            raise BufferError(f"DLPack tensor of shape {shape} has {which} that does not fit "
                              "64 bits in bytes")
        out[i] = step
        if n > 1:
            if step < 0:
                lo += step * (n - 1)
            else:
                hi += step * (n - 1)
    if size and (size * itemsize > _INT64_MAX or hi - lo > _INT64_MAX):
        raise BufferError(f"DLPack tensor of shape {shape} is too large for a 64-bit "
                          "address space")
    ptr = (t.data or 0) + t.byte_offset
    if not size:
        lo = hi = 0
    elif not t.data:
        raise BufferError(f"invalid DLPack tensor: NULL data for shape {shape}")
    if ptr + lo < 0 or ptr + hi > 2**64 or ptr >= 2**64:
        raise BufferError(f"DLPack tensor data {t.data or 0:#x} + byte_offset "
                          f"{t.byte_offset:#x} with shape {shape} addresses memory outside a "
                          "64-bit address space")
    return (rel, versioned, major, minor, flags, ptr, *dev, code, bits, lanes, shape,
            tuple(out), size, lo, hi)
