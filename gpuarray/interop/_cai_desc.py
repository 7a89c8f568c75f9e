"""The ``__cuda_array_interface__`` dictionary (CAI v3): validate one, build one.

One concern: the pure-Python description of an array in CAI form. No CUDA, no
array class: :func:`parse_cai` turns a consumer's dict into a frozen
:class:`CAIDesc`, :func:`make_cai` turns plain values into the producer's dict.

Conventions
-----------
* Strides are in bytes. A missing or None ``strides`` means C-contiguous, and
  :class:`CAIDesc` always carries the computed strides. Byte strides that are
  not multiples of the item size are kept as given (they are valid CAI; the
  array layer decides what it can view).
* ``stream`` uses the CAI encoding: None (no synchronization), 1 (legacy
  default stream), 2 (per-thread default stream), else a ``CUstream`` handle;
  0 is disallowed by v3 and rejected.
* :func:`parse_cai` raises only ``TypeError`` (wrong type), ``ValueError``
  (bad value) or ``NotImplementedError`` (a mask), whatever the input; every
  message names the offending key and value.
"""

from __future__ import annotations

import math
import re
import reprlib
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.format import descr_to_dtype

__all__ = ["CAIDesc", "is_c_contiguous", "make_cai", "parse_cai"]

_INT64_MAX = 2**63 - 1
_MAX_NDIM = 64
_MISSING = object()
# numpy typestr: optional byte order, kind, item size, optional datetime unit
_TYPESTR = re.compile(r"[<>|=]?[biufcmMOSUV][0-9]{1,12}(\[[0-9]{0,6}[A-Za-z]{1,3}\])?")
_FOREIGN_ORDER = ">" if sys.byteorder == "little" else "<"
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60
_repr.maxlist = _repr.maxtuple = _repr.maxdict = 8
_repr.maxlevel = 3


def _show(value: Any) -> str:
    try:
        return _repr.repr(value)
    except Exception:  # a hostile __repr__ must not change the error raised
        return f"<{type(value).__name__} object>"


def _bad(key: str, value: Any, why: str, exc: type[Exception] = ValueError) -> Exception:
    return exc(f"__cuda_array_interface__[{key!r}] {why}, got {_show(value)}")


def _as_int(value: Any) -> int | None:
    """The int value of an int (not bool) or NumPy integer, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int.__index__(value)  # no user code for int subclasses
    if isinstance(value, np.integer):
        return int(value)
    return None


def _int_tuple(key: str, value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)):
        raise _bad(key, value, f"must be a tuple of {what}", TypeError)
    if len(value) > _MAX_NDIM:
        raise _bad(key, value, f"has more than {_MAX_NDIM} dimensions")
    out = []
    for item in value:
        number = _as_int(item)
        if number is None:
            raise _bad(key, value, f"must be a tuple of {what}", TypeError)
        out.append(number)
    return tuple(out)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    acc, rev = itemsize, []
    for n in reversed(shape):
        rev.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(rev))


def is_c_contiguous(shape: Any, byte_strides: Any, itemsize: int) -> bool:
    """Whether a layout is C-contiguous, by NumPy's rule.

    Axes of extent 1 are ignored and size-0 arrays are contiguous; a stride-0
    (broadcast) axis of extent > 1 is not. This decides when CAI exports
    ``strides=None``.

    Parameters
    ----------
    shape, byte_strides : sequence of int
        Extents and strides in bytes.
    itemsize : int
        Bytes per element.

    Returns
    -------
    bool

    Examples
    --------
    >>> is_c_contiguous((2, 3), (24, 8), 8), is_c_contiguous((2, 3), (0, 8), 8)
    (True, False)
    """
    if 0 in shape:
        return True
    expected = itemsize
    for n, s in zip(reversed(tuple(shape)), reversed(tuple(byte_strides)), strict=True):
        if n != 1:
            if s != expected:
                return False
            expected *= n
    return True


@dataclass(frozen=True, slots=True)
class CAIDesc:
    """A validated ``__cuda_array_interface__``.

    Parameters
    ----------
    ptr : int
        Device pointer (0 is allowed only for size 0).
    shape, strides : tuple of int
        Strides in bytes, computed (C order) when the dict had none.
    dtype : numpy.dtype
        From ``typestr`` (and ``descr`` for void types).
    readonly : bool
        ``data[1]``.
    stream : int or None
        None, 1, 2 or a stream handle (never 0).
    version : int
        0 to 3.
    typestr : str
        As given.
    descr : object
        The dict's ``descr``, or None when absent.
    """

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype
    readonly: bool
    stream: int | None
    version: int
    typestr: str
    descr: Any

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)


def _get(desc: dict, key: str) -> Any:
    return dict.get(desc, key, _MISSING)


def _required(desc: dict, key: str) -> Any:
    value = _get(desc, key)
    if value is _MISSING:
        raise ValueError(f"__cuda_array_interface__ is missing the required key {key!r}")
    return value


_DTYPE_CACHE: dict[str, np.dtype] = {}


def _typestr_dtype(typestr: Any) -> np.dtype:
    if not isinstance(typestr, str):
        raise _bad("typestr", typestr, "must be a str", TypeError)
    if not _TYPESTR.fullmatch(typestr):
        raise _bad("typestr", typestr, "is not a NumPy type string such as '<f4'")
    try:
        dtype = np.dtype(typestr)
    except Exception as exc:  # numpy raises TypeError/ValueError/warnings-as-errors
        raise _bad("typestr", typestr, "is not a valid NumPy type string") from exc
    if dtype.itemsize == 0 or dtype.kind == "O":
        raise _bad("typestr", typestr, "has item size 0 or is a Python-object type")
    if typestr[0] == _FOREIGN_ORDER and dtype.itemsize > 1:
        raise _bad("typestr", typestr, f"is not in the native byte order "
                   f"({sys.byteorder}-endian); only native or '|' is supported")
    if type(typestr) is str and len(_DTYPE_CACHE) < 256:
        _DTYPE_CACHE[typestr] = dtype
    return dtype


def _parse_dtype(typestr: Any, descr: Any) -> np.dtype:
    dtype = _DTYPE_CACHE.get(typestr) if type(typestr) is str else None
    if dtype is None:
        dtype = _typestr_dtype(typestr)
    if dtype.kind != "V" or descr is None:  # descr only refines void types
        return dtype
    try:
        if isinstance(descr, list) and bool(descr == [("", typestr)]):
            return dtype  # NumPy's description of a plain type
    except Exception:
        pass
    try:
        structured = descr_to_dtype(list(descr))  # drops NumPy's "" padding fields
    except Exception as exc:
        raise _bad("descr", descr, f"does not describe a dtype for {typestr!r}") from exc
    if structured.itemsize != dtype.itemsize or not structured.isnative:
        raise _bad("descr", descr, f"does not match typestr {typestr!r} "
                   "(item size or byte order)")
    return structured


#: Non-void typestrs the full validator has accepted -> their dtype.
_FAST_TYPESTRS: dict[str, np.dtype] = {}


def _parse_fast(desc: Any) -> CAIDesc | None:
    """`parse_cai` for the well-formed dictionaries real producers send: exact
    types, a typestr already seen, no mask.  None: use the full validator
    (which also writes every error message)."""
    t = parse_fields(desc)
    if t is None:
        return None
    ptr, shape, strides, dtype, readonly, stream = t[:6]
    return CAIDesc(ptr=ptr, shape=shape, strides=strides, dtype=dtype, readonly=readonly,
                   stream=stream, version=desc["version"], typestr=desc["typestr"],
                   descr=desc.get("descr"))


def _parse_fields(desc: Any) -> tuple | None:
    """The fast half of :func:`parse_cai` as plain values.

    ``(ptr, shape, strides, dtype, readonly, stream, size, lo, hi)`` for a
    well-formed dictionary with exact types and a typestr already seen, else
    None (then :func:`parse_cai` validates it and writes the error messages).
    ``[ptr + lo, ptr + hi)`` are the bytes the array addresses (computed once,
    with the validation; ``(0, 0)`` for size 0).
    """
    if type(desc) is not dict:
        return None
    get = desc.get
    typestr, shape, data, version = get("typestr"), get("shape"), get("data"), get("version")
    dtype = _FAST_TYPESTRS.get(typestr) if type(typestr) is str else None
    if (dtype is None or type(shape) is not tuple or type(data) is not tuple
            or type(version) is not int or len(data) != 2 or not 0 <= version <= 3
            or len(shape) > _MAX_NDIM or get("mask") is not None):
        return None
    ptr, readonly = data
    if type(ptr) is not int or type(readonly) is not bool or not 0 <= ptr < 2**64:
        return None
    strides = get("strides")
    itemsize = dtype.itemsize
    size, lo, hi = 1, 0, itemsize
    if strides is None:
        rev = []
        for n in reversed(shape):
            if type(n) is not int or n < 0:
                return None
            rev.append(hi)
            size *= n
            if n > 1:
                hi *= n
        strides = tuple(rev[::-1])
    elif type(strides) is not tuple or len(strides) != len(shape):
        return None
    else:
        for n, st in zip(shape, strides, strict=True):
            if (type(n) is not int or n < 0 or type(st) is not int
                    or not -_INT64_MAX <= st <= _INT64_MAX):
                return None
            size *= n
            if n > 1:
                if st < 0:
                    lo += st * (n - 1)
                else:
                    hi += st * (n - 1)
    if size == 0:
        lo = hi = 0
    elif ptr == 0 or size * itemsize > _INT64_MAX:
        return None
    stream = get("stream")
    if stream is not None and (type(stream) is not int or not 0 < stream < 2**64):
        return None
    return (ptr, shape, strides, dtype, readonly, stream, size, lo, hi)


def parse_cai(desc: Any) -> CAIDesc:
    """Validate a ``__cuda_array_interface__`` dict (versions 0 to 3).

    Parameters
    ----------
    desc : dict
        Required keys ``shape`` (tuple of non-negative ints), ``typestr`` (a
        NumPy type string in native or no byte order), ``data`` (``(ptr,
        readonly)``, ptr 0 only for size 0) and ``version`` (0 to 3). Optional:
        ``strides`` (None or a tuple of ints, bytes), ``descr`` (used for void
        types), ``mask`` (must be None), ``stream`` (None or an int > 0).
        Lists are accepted where tuples are expected.

    Returns
    -------
    CAIDesc

    Raises
    ------
    TypeError
        ``desc`` is not a dict, or a value has the wrong type (bools are not
        ints here).
    ValueError
        A missing required key or a bad value: negative shape, version out of
        range, foreign byte order, stream 0 (disallowed by v3), a NULL pointer
        for a non-empty array, sizes beyond int64.
    NotImplementedError
        A ``mask`` that is not None.

    Examples
    --------
    >>> d = parse_cai({"shape": (2, 3), "typestr": "<f4", "data": (4096, False),
    ...                "version": 3, "strides": None, "stream": 1})
    >>> d.strides, d.dtype, d.stream
    ((12, 4), dtype('float32'), 1)
    """
    fast = _parse_fast(desc)
    if fast is not None:
        return fast
    if not isinstance(desc, dict):
        raise TypeError(f"__cuda_array_interface__ must be a dict, got {_show(desc)}")
    version_value = _required(desc, "version")
    version = _as_int(version_value)
    if version is None:
        raise _bad("version", version_value, "must be an int", TypeError)
    if not 0 <= version <= 3:
        raise _bad("version", version_value, "must be 0, 1, 2 or 3")

    shape_value = _required(desc, "shape")
    shape = _int_tuple("shape", shape_value, "non-negative ints")
    if any(not 0 <= n <= _INT64_MAX for n in shape):
        raise _bad("shape", shape_value, "must hold non-negative ints below 2**63")

    descr = _get(desc, "descr")
    descr = None if descr is _MISSING else descr
    typestr = _required(desc, "typestr")
    dtype = _parse_dtype(typestr, descr)
    size = math.prod(shape)
    if size * dtype.itemsize > _INT64_MAX:
        raise _bad("shape", shape_value, f"is too large for item size {dtype.itemsize}")

    data = _required(desc, "data")
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise _bad("data", data, "must be a (pointer, readonly) tuple", TypeError)
    ptr, readonly = _as_int(data[0]), data[1]
    if ptr is None or not isinstance(readonly, (bool, np.bool_)):
        raise _bad("data", data, "must be a (int pointer, bool readonly) tuple", TypeError)
    if not 0 <= ptr < 2**64:
        raise _bad("data", data, "has a pointer outside [0, 2**64)")
    if ptr == 0 and size:
        raise _bad("data", data, f"has a NULL pointer for a non-empty array of shape {shape}")

    strides_value = _get(desc, "strides")
    if strides_value is _MISSING or strides_value is None:
        strides = _c_strides(shape, dtype.itemsize)
    else:
        strides = _int_tuple("strides", strides_value, "ints (bytes)")
        if len(strides) != len(shape):
            raise _bad("strides", strides_value, f"must have one entry per dimension "
                       f"of shape {shape}")
        if any(abs(s) > _INT64_MAX for s in strides):
            raise _bad("strides", strides_value, "must fit in int64")

    mask = _get(desc, "mask")
    if mask is not _MISSING and mask is not None:
        raise NotImplementedError("__cuda_array_interface__['mask'] is not supported "
                                  f"(masked arrays), got {_show(mask)}")

    stream_value = _get(desc, "stream")
    stream = None
    if stream_value is not _MISSING and stream_value is not None:
        stream = _as_int(stream_value)
        if stream is None:
            raise _bad("stream", stream_value, "must be None or an int", TypeError)
        if stream == 0:
            raise _bad("stream", stream_value, "is 0, which CAI v3 disallows (ambiguous); "
                       "use None, 1 (legacy) or 2 (per-thread)")
        if not 0 < stream < 2**64:
            raise _bad("stream", stream_value, "must be None, 1, 2 or a stream handle")

    if (dtype.kind != "V" and type(typestr) is str and dtype.isnative
            and len(_FAST_TYPESTRS) < 256):
        _FAST_TYPESTRS[typestr] = dtype
    return CAIDesc(ptr=ptr, shape=shape, strides=strides, dtype=dtype,
                   readonly=bool(readonly), stream=stream, version=version,
                   typestr=typestr, descr=descr)


_TYPESTR_CACHE: dict[np.dtype, tuple[str, Any]] = {}


def _typestr_descr(dtype: np.dtype) -> tuple[str, Any]:
    cached = _TYPESTR_CACHE.get(dtype)
    if cached is None:
        dt = np.dtype(dtype)
        # descr only where it says more than typestr: the CAI default is [("", typestr)],
        # and CuPy 14 reads that padding-named field as no field at all (dtype([]),
        # itemsize 0: bfloat16's '<V2' failed that way on a GPU run)
        descr = dt.descr if dt.kind == "V" else None
        cached = (dt.str, None if descr == [("", dt.str)] else descr)
        if len(_TYPESTR_CACHE) < 1024:
            _TYPESTR_CACHE[dt] = cached
    return cached


def make_cai(*, ptr: int, shape: tuple[int, ...], byte_strides: tuple[int, ...],
             dtype: Any, readonly: bool, stream_value: int | None,
             c_contiguous: bool) -> dict[str, Any]:
    """Build the CAI v3 dict a producer exports.

    Parameters
    ----------
    ptr : int
        Device pointer of element ``[0, ..., 0]``; exported as 0 for size 0.
    shape, byte_strides : tuple of int
        Extents and strides in bytes.
    dtype : dtype-like
        Gives ``typestr`` (``dtype.str``: ``'<f4'``, ``'|b1'``, ``'<c8'``) and,
        for void and structured dtypes, ``descr`` (``dtype.descr``), as NumPy's
        ``__array_interface__`` does.
    readonly : bool
        Exported in ``data[1]``: only for arrays that really are read-only.
    stream_value : int or None
        Already encoded by the caller (1, 2, a handle; None when stream export
        is switched off).
    c_contiguous : bool
        Whether the layout is C-contiguous (:func:`is_c_contiguous`);
        ``strides`` is None exactly then.

    Returns
    -------
    dict

    Raises
    ------
    ValueError
        ``stream_value`` is 0.

    Examples
    --------
    >>> make_cai(ptr=4096, shape=(3,), byte_strides=(4,), dtype=np.float32,
    ...          readonly=False, stream_value=1, c_contiguous=True)["strides"] is None
    True
    """
    if stream_value is not None and stream_value == 0:
        raise ValueError("CAI v3 forbids stream 0: encode the legacy default stream as 1")
    typestr, descr = _typestr_descr(dtype)
    out = {"shape": tuple(shape), "typestr": typestr,
           "data": (0 if 0 in shape else ptr, bool(readonly)), "version": 3,
           "strides": None if c_contiguous else tuple(byte_strides),
           "stream": stream_value}
    if descr is not None:
        out["descr"] = descr
    return out


def _c_fields() -> Any:
    """The C core's twin of :func:`_parse_fields` (``_cai_fields.c``), or None."""
    from . import _dlpack_capsule

    if _dlpack_capsule.CORE != "c":
        return None
    core = _dlpack_capsule._core
    core.cai_register(_FAST_TYPESTRS)  # the same typestrs, the same dict
    return core.cai_fields


#: The fast parser :func:`~gpuarray.interop._cai.from_cuda_array_interface`
#: uses: ``_parse_fields`` in C where the C DLPack core is in use (the same
#: rules; a test compares them), else the Python function.
parse_fields: Any = _c_fields() or _parse_fields
