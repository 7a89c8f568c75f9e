"""DLPack capsules: make them and consume them.

One concern: the C-level half of DLPack (``dlpack.h`` 1.x structs, capsule
names and lifetimes, as the DLPack Python specification sets them), with no
array class and no CUDA. The array glue passes plain values (pointer, shape,
byte strides, dtype, device, an owner object) and gets plain values back.
The Python-level half -- ``__dlpack__`` keywords, version negotiation and
the dtype mapping -- is ``_dlpack_protocol``; its names are re-exported here.

The core: ``_dlpack_core``, a C extension (Limited API, built by the
package's own build), makes and consumes the capsules, and reads host
arrays' addresses (:func:`host_address`); its deleter and
capsule destructor save and restore the error indicator, so a consumer's
pending exception survives them. Where it was not built, or with
``GPUARRAY_DLPACK_CORE=python``, ``_dlpack_ctypes`` does the same over ctypes
(with the limits its docstring lists). :data:`CORE` says which one is in use
(``python -m gpuarray info`` prints it); ``GPUARRAY_DLPACK_CORE=c`` insists
on the C one.

Conventions
-----------
* Strides are **bytes** in every argument and result here; the DLPack structs
  hold elements and the conversion happens in the core.
* Exports set ``byte_offset = 0`` (``data`` is element ``[0, ..., 0]``), NULL
  ``data`` for size 0, NULL ``shape``/``strides`` for ndim 0.
* ``BufferError`` for what DLPack cannot express (dtype, strides, read-only on
  a legacy capsule, unknown major version) and for an import whose sizes do
  not fit a 64-bit address space; ``TypeError``/``ValueError`` for malformed
  arguments.
* An export keeps its owner alive until the consumer calls the deleter (once),
  or until the capsule dies unconsumed.
"""

from __future__ import annotations

import datetime
import importlib
from typing import Any

import numpy as np

from . import _core as _cores

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
    "DLPACK_MAX_VERSION", "CORE", "DLPackRequest", "ImportedTensor", "consume_capsule",
    "consume_exchange", "deleter_calls", "dlpack_to_dtype", "exchange_api_of", "exchange_stream",
    "dtype_to_dlpack", "export_version", "host_address", "live_exports", "make_capsule",
    "parse_dlpack_request", "parse_dlpack_stream", "sweep_capsules",
    "wants_versioned",
]

kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged = 1, 2, 3, 13
DLPACK_FLAG_BITMASK_READ_ONLY = 1
DLPACK_FLAG_BITMASK_IS_COPIED = 2
_INT64_MAX = 2**63 - 1
_MAX_NDIM = 64
_STRUCTS = ("DLDevice", "DLDataType", "DLTensor", "DLManagedTensor", "DLPackVersion",
            "DLManagedTensorVersioned")


# The ctypes struct definitions (DLDevice, DLDataType, DLTensor, DLManagedTensor,
# DLPackVersion, DLManagedTensorVersioned) are attributes of this module too,
# loaded from _dlpack_ctypes on first use (see __getattr__).


# The core (the C extension, or its ctypes twin) is chosen by ``_core.py``, at the
# bottom of the package: the transfer layers below this module take host_address
# from there.  The names below follow it (``_set_core`` switches both).
_core, CORE, CORE_DESCRIPTION = _cores.core, _cores.CORE, _cores.CORE_DESCRIPTION
_make, _consume = _core.make, _core.consume
#: ``host_address(obj) -> int`` (see ``_core.py``), re-exported.
host_address: Any = _core.host_address
_C = CORE == "c"


def __getattr__(name: str) -> Any:
    # The ctypes struct definitions, for tests and callers that poke at raw
    # capsules; loaded on first use (the C core does not need them).
    if name in _STRUCTS:
        return getattr(importlib.import_module("._dlpack_ctypes", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    return int(_core.live_exports())


def deleter_calls() -> int:
    """Return how many times the deleter of this module's exports has run.

    Returns
    -------
    int

    Examples
    --------
    >>> deleter_calls() >= 0
    True
    """
    return int(_core.deleter_calls())


def sweep_capsules() -> int:
    """Let unconsumed capsules nobody holds die now (ctypes core only).

    The ctypes core holds every capsule it exports until nobody else does (so
    that its destructor runs with no exception in flight), and drops them on
    the next export or import, after garbage collections and at exit; this
    drops them now. The C core needs none of that: it returns 0.

    Returns
    -------
    int
        How many capsules were dropped.

    Examples
    --------
    >>> sweep_capsules() >= 0
    True
    """
    return 0 if _C else int(_core.sweep_capsules())


# --- producer ---
_DL_OF: dict[np.dtype, tuple[int, int, int, int]] = {}  # dtype -> (code, bits, lanes, itemsize)


def _dl_dtype(dtype: Any) -> tuple[int, int, int, int]:
    found = _DL_OF.get(dtype) if isinstance(dtype, np.dtype) else None
    if found is None:
        dt = np.dtype(dtype)
        found = (*dtype_to_dlpack(dt), dt.itemsize)
        if isinstance(dtype, np.dtype):
            _DL_OF[dtype] = found
    return found


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


def _checked(data_ptr: Any, shape: Any, byte_strides: Any, device_type: Any, device_id: Any,
             version: Any) -> tuple:
    shape, strides = _ints(shape, "shape"), _ints(byte_strides, "byte_strides")
    ptr = _int(data_ptr, "data_ptr")
    dev = (_int(device_type, "device_type"), _int(device_id, "device_id"))
    if (len(strides) != len(shape) or min(shape, default=0) < 0 or not 0 <= ptr < 2**64
            or not all(-(2**31) <= v < 2**31 for v in dev)):
        raise ValueError(f"invalid export: shape {shape}, byte_strides {strides}, "
                         f"data_ptr {ptr:#x}, device {dev}")
    major, minor = _ints(version, "version")
    if major != 1 or not 0 <= minor < 2**32:
        raise ValueError(f"can only produce DLPack 1.x, not version {version!r}")
    return ptr, shape, strides, dev[0], dev[1], major, minor


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
        when the capsule dies unconsumed.
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
    code, bits, lanes, itemsize = _dl_dtype(dtype)
    if versioned:
        flags = (DLPACK_FLAG_BITMASK_READ_ONLY if readonly else 0) | (
            DLPACK_FLAG_BITMASK_IS_COPIED if is_copied else 0)
        if _C and type(version) is tuple and len(version) == 2:
            try:  # exactly-typed values go straight to C, which checks their ranges
                return _make(owner, data_ptr, shape, byte_strides, itemsize, code, bits, lanes,
                             device_type, device_id, True, version[0], version[1], flags)
            except TypeError:
                pass  # NumPy integers, lists...: normalised below, or the right error
    elif readonly:
        raise BufferError("a read-only array cannot be exported as a legacy DLPack "
                          "capsule (no READ_ONLY flag); ask for max_version >= (1, 0)")
    else:
        flags, version = 0, DLPACK_MAX_VERSION
        if _C:
            try:
                return _make(owner, data_ptr, shape, byte_strides, itemsize, code, bits, lanes,
                             device_type, device_id, False, 1, 0, 0)
            except TypeError:
                pass
    ptr, shape, strides, dev_type, dev_id, major, minor = _checked(
        data_ptr, shape, byte_strides, device_type, device_id, version)
    return _make(owner, ptr, shape, strides, itemsize, code, bits, lanes, dev_type, dev_id,
                 bool(versioned), major, minor, flags)


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
    size : int
        Number of elements.
    extent : tuple of int
        ``(lo, hi)``: the bytes the tensor addresses are ``data_ptr + lo`` up
        to ``data_ptr + hi`` (``(0, 0)`` when the size is 0).
    """

    __slots__ = ("data_ptr", "shape", "byte_strides", "dtype", "device_type",
                 "device_id", "readonly", "is_copied", "versioned", "version",
                 "size", "extent", "_rel")
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
    size: int
    extent: tuple[int, int]
    _rel: Any

    def release(self) -> None:
        """Call the producer's deleter now; later calls do nothing.

        Examples
        --------
        >>> import numpy as np
        >>> t = consume_capsule(np.zeros(2).__dlpack__())
        >>> t.release(); t.release(); t.released
        True
        """
        self._rel.release()

    @property
    def released(self) -> bool:
        """Whether the producer's deleter has been called."""
        return bool(self._rel.released)

    def __repr__(self) -> str:
        return (f"ImportedTensor(data_ptr={self.data_ptr:#x}, shape={self.shape}, "
                f"byte_strides={self.byte_strides}, dtype={self.dtype}, "
                f"device=({self.device_type}, {self.device_id}), readonly="
                f"{self.readonly}, version={self.version}, released={self.released})")


def _imported(fields: tuple) -> ImportedTensor:
    rel = fields[0]
    out = ImportedTensor()
    out._rel = rel
    try:
        _fill(out, fields)
    except BufferError:
        rel.release()
        raise
    return out


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
        than 1, ``lanes != 1``, an unsupported dtype, a bad ndim or shape,
        NULL data for a non-empty tensor, or sizes, strides or addresses that
        do not fit 64 bits (the message names the value).

    Examples
    --------
    >>> import numpy as np
    >>> a = np.arange(6, dtype=np.int32).reshape(2, 3).T
    >>> t = consume_capsule(a.__dlpack__(max_version=(1, 0)))
    >>> t.shape, t.byte_strides, t.data_ptr == a.ctypes.data
    ((3, 2), (4, 12), True)
    """
    try:
        fields = _consume(capsule)
    except TypeError:
        raise TypeError(f"expected a DLPack PyCapsule, got {type(capsule).__name__}") from None
    return _imported(fields)


# --- consumer of the DLPack C exchange table (dlpack.h 1.3) ---
_CAPSULE_TYPE = type(datetime.datetime_CAPI)  # PyCapsule (types.CapsuleType from 3.13 on)
_TABLES: dict[type, Any] = {}  # producer type -> its "dlpack_exchange_api" capsule, or None


def exchange_api_of(tp: type) -> Any:
    """The DLPack C exchange table a producer type publishes, or None.

    Looks up ``tp.__dlpack_c_exchange_api__`` once per type (the table is
    static for the process, the specification says) and keeps it if it is a
    PyCapsule. Always None with the ctypes core, which cannot call the table.

    Parameters
    ----------
    tp : type
        The producer's type (``type(x)``).

    Returns
    -------
    PyCapsule or None

    Examples
    --------
    >>> import numpy as np
    >>> exchange_api_of(np.ndarray) is None
    True
    """
    if not _C:
        return None
    try:
        return _TABLES[tp]
    except KeyError:
        pass
    api = getattr(tp, "__dlpack_c_exchange_api__", None)
    _TABLES[tp] = api = api if type(api) is _CAPSULE_TYPE else None
    return api


def consume_exchange(api: Any, obj: Any) -> ImportedTensor:
    """Take ``obj``'s tensor through its type's DLPack C exchange table.

    Calls the table's ``managed_tensor_from_py_object_no_sync`` (no stream
    ordering: see :func:`exchange_stream`) and takes ownership as
    :func:`consume_capsule` does.

    Parameters
    ----------
    api : PyCapsule
        As :func:`exchange_api_of` returns it.
    obj : object
        An instance of the type that published ``api``.

    Returns
    -------
    ImportedTensor

    Raises
    ------
    TypeError
        ``api`` is not a ``"dlpack_exchange_api"`` capsule.
    BufferError
        The table has no major version 1, or the tensor cannot be used (as
        :func:`consume_capsule`); whatever the producer raised otherwise.
    """
    return _imported(_core.exchange_import(api, obj))


def exchange_stream(api: Any, device_type: int, device_id: int) -> int | None:
    """The producer's current work stream (``current_work_stream``) on a device.

    Parameters
    ----------
    api : PyCapsule
        As :func:`exchange_api_of` returns it.
    device_type, device_id : int
        The DLPack device.

    Returns
    -------
    int or None
        The ``CUstream`` handle (0: NULL), or None when the table has no
        ``current_work_stream``.
    """
    return _core.exchange_stream(api, device_type, device_id)


_DTYPE_OF: dict[tuple[int, int, int], np.dtype] = {}  # (code, bits, lanes) -> dtype


def _fill(out: ImportedTensor, fields: tuple) -> None:
    # The core checked ndim, shape, strides and addresses (BufferError naming
    # them); what is left is the version and the dtype.
    (_, versioned, major, minor, flags, ptr, dev_type, dev_id, code, bits, lanes,
     shape, byte_strides, size, lo, hi) = fields
    if versioned:
        out.versioned, out.version = True, (major, minor)
        if major != 1:
            raise BufferError(f"DLPack version {major}.{minor} is not supported (this "
                              "consumer reads major version 1)")
    else:
        out.versioned, out.version = False, None
    dtype = _DTYPE_OF.get((code, bits, lanes))
    if dtype is None:
        dtype = _DTYPE_OF[(code, bits, lanes)] = dlpack_to_dtype(code, bits, lanes)
    out.data_ptr, out.shape, out.byte_strides, out.dtype = ptr, shape, byte_strides, dtype
    out.size, out.extent = size, (lo, hi)
    out.device_type, out.device_id = dev_type, dev_id
    out.readonly = bool(flags & DLPACK_FLAG_BITMASK_READ_ONLY)
    out.is_copied = bool(flags & DLPACK_FLAG_BITMASK_IS_COPIED)


def _set_core(name: str) -> str:
    """Switch to the ``"c"`` or ``"python"`` core; returns the previous one's name.

    For tests, which run one suite against both cores in one process.
    Capsules carry their own deleter, so exports made under one core stay
    valid under the other.
    """
    global _core, _make, _consume, _C, CORE, CORE_DESCRIPTION, host_address
    previous = _cores.select(name)
    _core, CORE, CORE_DESCRIPTION = _cores.core, _cores.CORE, _cores.CORE_DESCRIPTION
    _make, _consume, _C, host_address = _core.make, _core.consume, CORE == "c", _core.host_address
    return previous
