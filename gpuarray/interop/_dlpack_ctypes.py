"""DLPack capsules over ctypes: make them and consume them.

One concern: the C-level half of DLPack (``dlpack.h`` 1.x structs, capsule
names and lifetimes, as the DLPack Python specification sets them), with no
array class and no CUDA. The array glue passes plain values (pointer, shape,
byte strides, dtype, device, an owner object) and gets plain values back.
The Python-level half -- ``__dlpack__`` keywords, version negotiation and
the dtype mapping -- is ``_dlpack_protocol``; its names are re-exported here.

Conventions
-----------
* Strides are **bytes** in every argument and result here; the DLPack structs
  hold elements and the conversion happens in this module.
* Exports set ``byte_offset = 0`` (``data`` is element ``[0, ..., 0]``), NULL
  ``data`` for size 0, NULL ``shape``/``strides`` for ndim 0.
* ``BufferError`` for what DLPack cannot express (dtype, strides, read-only on
  a legacy capsule, unknown major version); ``TypeError``/``ValueError`` for
  malformed arguments.

Lifetime of an export (see :func:`make_capsule`)
------------------------------------------------
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
* Limits: a consumer that calls the deleter with an exception set loses it
  (reported as unraisable; the release still happens); a deleter call after
  ``Py_Finalize`` cannot reach any Python callback.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import math
import struct
import sys
import threading
import weakref
from typing import Any

import numpy as np

# The Python-level half (keywords, versions, dtype codes) is re-exported here,
# where callers and tests import it from.
from ._dlpack_protocol import (
    DLPACK_MAX_VERSION,
    DLPackRequest,
    _int,
    dlpack_to_dtype,
    dtype_to_dlpack,
    export_version,
    parse_dlpack_request,
    parse_dlpack_stream,
    wants_versioned,
)

__all__ = [
    "kDLCPU", "kDLCUDA", "kDLCUDAHost", "kDLCUDAManaged",
    "DLPACK_FLAG_BITMASK_READ_ONLY", "DLPACK_FLAG_BITMASK_IS_COPIED",
    "DLPACK_MAX_VERSION", "DLDevice", "DLDataType", "DLTensor",
    "DLManagedTensor", "DLPackVersion", "DLManagedTensorVersioned",
    "DLPackRequest", "ImportedTensor", "consume_capsule", "dlpack_to_dtype",
    "dtype_to_dlpack", "export_version", "live_exports", "make_capsule",
    "parse_dlpack_request", "parse_dlpack_stream", "sweep_capsules",
    "wants_versioned",
]

kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged = 1, 2, 3, 13
DLPACK_FLAG_BITMASK_READ_ONLY = 1
DLPACK_FLAG_BITMASK_IS_COPIED = 2
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

    Examples
    --------
    >>> sweep_capsules() >= 0
    True
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


gc.callbacks.append(_gc_callback)
atexit.register(sweep_capsules)


def live_exports() -> int:
    """Return how many exports still hold their owner (deleter not run yet).

    Returns
    -------
    int

    Examples
    --------
    >>> live_exports() >= 0
    True
    """
    return len(_EXPORTS)


# --- producer ---
def _ints(values: Any, what: str) -> tuple[int, ...]:
    if type(values) is tuple and all(type(v) is int for v in values):
        out = values
    else:
        try:
            out = tuple(_int(v, what) for v in values)
        except TypeError as exc:
            raise TypeError(f"{what} must be a sequence of ints, got {values!r}") from exc
    if len(out) > _MAX_NDIM or any(abs(v) > _INT64_MAX for v in out):
        raise ValueError(f"{what} {out!r} does not fit DLPack (int64, ndim <= {_MAX_NDIM})")
    return out


def make_capsule(*, data_ptr: int, shape: Any, byte_strides: Any, dtype: Any,
                 device_type: int, device_id: int, owner: object,
                 readonly: bool = False, is_copied: bool = False,
                 versioned: bool = True,
                 version: tuple[int, int] = DLPACK_MAX_VERSION) -> Any:
    """Export memory as a DLPack capsule that keeps ``owner`` alive.

    Parameters
    ----------
    data_ptr : int
        Address of element ``[0, ..., 0]``.
    shape, byte_strides : sequence of int
        Strides in **bytes** (exported in elements).
    dtype : dtype-like
        See :func:`dtype_to_dlpack`.
    device_type, device_id : int
        The ``DLDevice`` (``kDLCUDA``, ``kDLCUDAHost``, ``kDLCUDAManaged``...).
    owner : object
        Held until the deleter runs: when the consumer releases the tensor, or
        when the capsule dies unconsumed (at a :func:`sweep_capsules`).
    readonly, is_copied : bool
        ``READ_ONLY`` / ``IS_COPIED`` flags of a versioned capsule.
    versioned : bool
        ``"dltensor_versioned"`` if true, else legacy ``"dltensor"``.
    version : tuple of int
        Version of a versioned capsule (major 1), see :func:`export_version`.

    Returns
    -------
    PyCapsule

    Raises
    ------
    BufferError
        Unsupported dtype; a byte stride not a multiple of the item size on an
        axis of extent > 1; ``readonly`` on a legacy capsule.
    TypeError, ValueError
        Malformed arguments.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.arange(3.0)
    >>> cap = make_capsule(data_ptr=a.ctypes.data, shape=a.shape, owner=a,
    ...                    byte_strides=a.strides, dtype=a.dtype,
    ...                    device_type=kDLCPU, device_id=0)
    >>> class Host:
    ...     def __dlpack__(self, **kw): return cap
    ...     def __dlpack_device__(self): return (kDLCPU, 0)
    >>> np.from_dlpack(Host()).tolist()
    [0.0, 1.0, 2.0]
    """
    dt = np.dtype(dtype)
    code, bits, lanes = dtype_to_dlpack(dt)
    shape, strides = _ints(shape, "shape"), _ints(byte_strides, "byte_strides")
    ptr = _int(data_ptr, "data_ptr")
    dev = (_int(device_type, "device_type"), _int(device_id, "device_id"))
    if (len(strides) != len(shape) or min(shape, default=0) < 0 or not 0 <= ptr < 2**64
            or not all(-(2**31) <= v < 2**31 for v in dev)):
        raise ValueError(f"invalid export: shape {shape}, byte_strides {strides}, "
                         f"data_ptr {ptr:#x}, device {dev}")
    if versioned:
        major, minor = _ints(version, "version")
        if major != 1 or not 0 <= minor < 2**32:
            raise ValueError(f"can only produce DLPack 1.x, not version {version!r}")
    elif readonly:
        raise BufferError("a read-only array cannot be exported as a legacy DLPack "
                          "capsule (no READ_ONLY flag); ask for max_version >= (1, 0)")
    ndim, itemsize = len(shape), dt.itemsize
    extent = math.prod(max(n, 1) for n in shape)
    if extent * itemsize > _INT64_MAX:
        raise ValueError(f"shape {shape} is too large for DLPack")
    size = 0 if 0 in shape else extent
    elem_strides, expected = [0] * ndim, 1
    for i in range(ndim - 1, -1, -1):
        q, r = divmod(strides[i], itemsize)
        if r:
            if shape[i] > 1 and size:
                raise BufferError(f"byte strides {strides} are not multiples of the "
                                  f"item size {itemsize}: DLPack counts strides in elements")
            q = expected  # the stride of an axis of extent <= 1 does not matter
        elem_strides[i], expected = q, expected * max(shape[i], 1)

    versioned = bool(versioned)
    pack = _PACK[versioned]
    block = ctypes.create_string_buffer(pack.size + 16 * ndim)  # one per export
    addr = ctypes.addressof(block)
    arrays = (addr + pack.size, addr + pack.size + 8 * ndim) if ndim else (0, 0)
    tensor = (ptr if size else 0, *dev, ndim, code, bits, lanes, *arrays, 0)
    if versioned:
        flags = ((DLPACK_FLAG_BITMASK_READ_ONLY if readonly else 0)
                 | (DLPACK_FLAG_BITMASK_IS_COPIED if is_copied else 0))
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


# --- consumer ---
class ImportedTensor:
    """A consumed DLPack tensor: its fields, and the duty to call its deleter.

    Attributes
    ----------
    data_ptr : int
        ``data + byte_offset``.
    shape, byte_strides : tuple of int
        Strides in bytes (C-contiguous ones when the producer gave NULL).
    dtype : numpy.dtype
    device_type, device_id : int
    readonly, is_copied : bool
        The ``READ_ONLY`` / ``IS_COPIED`` flags (false for legacy capsules).
    versioned : bool
    version : tuple of int or None
        ``(major, minor)``; None for a legacy capsule.
    """

    __slots__ = ("data_ptr", "shape", "byte_strides", "dtype", "device_type",
                 "device_id", "readonly", "is_copied", "versioned", "version",
                 "_finalizer", "__weakref__")
    data_ptr: int
    shape: tuple[int, ...]
    byte_strides: tuple[int, ...]
    dtype: np.dtype
    device_type: int
    device_id: int
    readonly: bool
    is_copied: bool
    versioned: bool
    version: tuple[int, int] | None
    _finalizer: weakref.finalize

    def release(self) -> None:
        """Call the producer's deleter now; later calls do nothing.

        Examples
        --------
        >>> import numpy as np
        >>> t = consume_capsule(np.zeros(2).__dlpack__())
        >>> t.release(); t.release(); t.released
        True
        """
        self._finalizer()

    @property
    def released(self) -> bool:
        """Whether the producer's deleter has been called."""
        return not self._finalizer.alive

    def __repr__(self) -> str:
        return (f"ImportedTensor(data_ptr={self.data_ptr:#x}, shape={self.shape}, "
                f"byte_strides={self.byte_strides}, dtype={self.dtype}, "
                f"device=({self.device_type}, {self.device_id}), readonly="
                f"{self.readonly}, version={self.version}, released={self.released})")


def _call_deleter(manager: int, deleter: int) -> None:
    if deleter == _DELETER_ADDR:
        _release_export(manager)
    elif deleter:
        _ForeignDeleter(deleter)(manager)


_CONSUME_LOCK = threading.RLock()  # a gc-triggered sweep may re-enter


def consume_capsule(capsule: Any) -> ImportedTensor:
    """Take ownership of a ``"dltensor"`` or ``"dltensor_versioned"`` capsule.

    Legacy or versioned is decided by the capsule's name. The capsule is
    renamed ``"used_dltensor[_versioned]"``; the producer's deleter then runs
    once: on :meth:`ImportedTensor.release`, or when the result is collected.

    Parameters
    ----------
    capsule : PyCapsule
        As returned by a ``__dlpack__`` method.

    Returns
    -------
    ImportedTensor

    Raises
    ------
    TypeError
        Not a PyCapsule.
    ValueError
        A PyCapsule with a name that is not a DLPack one.
    BufferError
        Already consumed; or (after calling the deleter) a major version other
        than 1, ``lanes != 1``, an unsupported dtype, a bad ndim or shape, or
        NULL data for a non-empty tensor.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.arange(6, dtype=np.int32).reshape(2, 3).T
    >>> t = consume_capsule(a.__dlpack__(max_version=(1, 0)))
    >>> t.shape, t.byte_strides, t.data_ptr == a.ctypes.data
    ((3, 2), (4, 12), True)
    """
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
        out = ImportedTensor()
        out._finalizer = weakref.finalize(out, _call_deleter, manager, managed.deleter or 0)
        try:
            _PyCapsule_SetName(capsule, _USED_NAME[versioned])
        except BaseException:
            out._finalizer.detach()
            raise
    try:
        _fill(out, managed, versioned)
    except BufferError:
        out.release()
        raise
    return out


def _fill(out: ImportedTensor, managed: Any, versioned: bool) -> None:
    flags, out.versioned, out.version = 0, versioned, None
    if versioned:
        out.version = (managed.version.major, managed.version.minor)
        if out.version[0] != 1:  # only the fields up to `flags` may be read
            raise BufferError(f"DLPack version {out.version[0]}.{out.version[1]} is not "
                              "supported (this consumer reads major version 1)")
        flags = managed.flags
    tensor = managed.dl_tensor
    ndim, dl_dtype = tensor.ndim, tensor.dtype
    dtype = dlpack_to_dtype(dl_dtype.code, dl_dtype.bits, dl_dtype.lanes)
    if not 0 <= ndim <= _MAX_NDIM or (ndim and not tensor.shape):
        raise BufferError(f"invalid DLPack tensor: ndim={ndim}, shape pointer "
                          f"{'set' if tensor.shape else 'NULL'}")
    shape = tuple(tensor.shape[:ndim]) if ndim else ()
    if min(shape, default=0) < 0:
        raise BufferError(f"invalid DLPack tensor: negative shape {shape}")
    itemsize = dtype.itemsize
    if tensor.strides and ndim:
        strides = tuple(s * itemsize for s in tensor.strides[:ndim])
    else:
        acc, rev = itemsize, []
        for n in reversed(shape):
            rev.append(acc)
            acc *= max(n, 1)
        strides = tuple(reversed(rev))
    ptr = (tensor.data or 0) + tensor.byte_offset
    if not ptr and 0 not in shape:
        raise BufferError(f"invalid DLPack tensor: NULL data for shape {shape}")
    out.data_ptr, out.shape, out.byte_strides, out.dtype = ptr, shape, strides, dtype
    out.device_type, out.device_id = tensor.device.device_type, tensor.device.device_id
    out.readonly = bool(flags & DLPACK_FLAG_BITMASK_READ_ONLY)
    out.is_copied = bool(flags & DLPACK_FLAG_BITMASK_IS_COPIED)
