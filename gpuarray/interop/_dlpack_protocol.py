"""DLPack's Python-level values: ``__dlpack__`` keywords and dtype codes.

One concern: turning what a consumer or producer says in Python into checked
plain values, with no ctypes, no capsule and no array class.  The keywords of
``__dlpack__`` (``stream``, ``max_version``, ``dl_device``, ``copy``) become a
:class:`DLPackRequest` (:func:`parse_dlpack_request`; one keyword at a time:
:func:`parse_dlpack_stream`, :func:`wants_versioned`, :func:`export_version`),
and NumPy dtypes map to and from DLPack ``(code, bits, lanes)`` triples
(:func:`dtype_to_dlpack`, :func:`dlpack_to_dtype`).  ``_dlpack_capsule``
(the C-level half: structs, capsules, lifetimes) builds on this module and
re-exports its names.

Conventions
-----------
* Streams use the CUDA Array Interface encoding (1 legacy, 2 per-thread, else
  a handle; never 0); None means no ordering (``stream=-1``).
* ``BufferError`` for a dtype DLPack cannot carry; ``TypeError``/``ValueError``
  for malformed keywords, naming the keyword and the value.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "DLPACK_MAX_VERSION", "DLPackRequest", "dlpack_to_dtype", "dtype_to_dlpack", "parse_dlpack_device",
    "export_version", "parse_dlpack_request", "parse_dlpack_stream", "wants_versioned",
]

#: Highest DLPack version produced (the default of ``make_capsule`` and the
#: cap of :func:`export_version`).
DLPACK_MAX_VERSION = (1, 1)


def _int(value: Any, what: str) -> int:
    """``value`` as an int (NumPy integers too, bools refused); also ``_dlpack_capsule``'s check."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {value!r}")
    return int(value)


# --- dtypes ---
_DL_BOOL, _DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_COMPLEX = 6, 0, 1, 2, 4, 5
_FROM_DL = {(code, 8 * np.dtype(name).itemsize): np.dtype(name)
            for code, names in ((_DL_BOOL, "?"), (_DL_INT, "i1 i2 i4 i8"),
                                (_DL_UINT, "u1 u2 u4 u8"), (_DL_FLOAT, "f2 f4 f8"),
                                (_DL_COMPLEX, "c8 c16"))
            for name in names.split()}
_KIND_CODE = {"b": _DL_BOOL, "i": _DL_INT, "u": _DL_UINT, "f": _DL_FLOAT, "c": _DL_COMPLEX}
_SUPPORTED = ("bool, int8-int64, uint8-uint64, float16/32/64, complex64/128, "
              "bfloat16 (with ml_dtypes)")


def _bfloat16(import_it: bool) -> np.dtype | None:
    mod = sys.modules.get("ml_dtypes")
    if mod is None and import_it:
        try:
            mod = importlib.import_module("ml_dtypes")
        except ImportError:
            return None
    return None if mod is None else np.dtype(mod.bfloat16)


def dtype_to_dlpack(dtype: Any) -> tuple[int, int, int]:
    """Map a NumPy dtype to a DLPack ``(code, bits, lanes)`` triple.

    Parameters
    ----------
    dtype : dtype-like
        Native byte order; bool is ``(6, 8, 1)``, bfloat16 ``(4, 16, 1)``.

    Returns
    -------
    tuple of int

    Raises
    ------
    BufferError
        Any dtype DLPack cannot carry; the message names it.

    Examples
    --------
    >>> dtype_to_dlpack("float32")
    (2, 32, 1)
    """
    dt = np.dtype(dtype)
    if dt.fields is None and dt.subdtype is None and dt.isnative:
        code = _KIND_CODE.get(dt.kind)
        if code is not None and (code, 8 * dt.itemsize) in _FROM_DL:
            return (code, 8 * dt.itemsize, 1)
        if dt.kind == "V" and dt.itemsize == 2:
            bfloat16 = _bfloat16(False)
            if bfloat16 is not None and dt == bfloat16:
                return (_DL_BFLOAT, 16, 1)
    order = "" if dt.isnative else " (not in native byte order)"
    raise BufferError(f"DLPack cannot export dtype {dt!r}{order}; supported: {_SUPPORTED}")


def dlpack_to_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    """Map a DLPack ``(code, bits, lanes)`` triple to a NumPy dtype.

    Parameters
    ----------
    code, bits, lanes : int
        The fields of a ``DLDataType``.

    Returns
    -------
    numpy.dtype

    Raises
    ------
    BufferError
        ``lanes != 1`` or an unsupported code/width (bfloat16 needs
        ``ml_dtypes``); the message names code, bits and lanes.

    Examples
    --------
    >>> dlpack_to_dtype(5, 64, 1)
    dtype('complex64')
    """
    dt = _FROM_DL.get((code, bits)) if lanes == 1 else None
    if dt is None and lanes == 1 and (code, bits) == (_DL_BFLOAT, 16):
        dt = _bfloat16(True)
    if dt is None:
        raise BufferError(f"unsupported DLPack dtype (code={code}, bits={bits}, "
                          f"lanes={lanes}); supported: {_SUPPORTED}, lanes=1")
    return dt


# --- __dlpack__ keyword handling ---
def parse_dlpack_stream(stream: Any) -> int | None:
    """Validate the ``stream`` argument of ``__dlpack__`` (CUDA export).

    Parameters
    ----------
    stream : int or None
        None or 1: legacy default stream; 2: per-thread; -1: no ordering;
        0: warns, then legacy; other positive ints: a ``CUstream`` handle.

    Returns
    -------
    int or None
        None for -1, else 1, 2 or the handle (the CAI encoding); never 0.

    Raises
    ------
    TypeError
        Not an int (bool included).
    ValueError
        Negative other than -1, or wider than 64 bits.

    Examples
    --------
    >>> parse_dlpack_stream(None), parse_dlpack_stream(2), parse_dlpack_stream(-1)
    (1, 2, None)
    """
    return _parse_stream(stream, 4)


def _parse_stream(stream: Any, stacklevel: int) -> int | None:
    if stream is None:
        return 1
    value = _int(stream, "__dlpack__ stream")
    if value == -1:
        return None
    if value == 0:
        warnings.warn("__dlpack__(stream=0) is ambiguous and disallowed for CUDA by the "
                      "DLPack specification; using the legacy default stream (1)",
                      UserWarning, stacklevel=stacklevel)
        return 1
    if not 0 < value < 2**64:
        raise ValueError(f"__dlpack__ stream {value} is not -1, 1, 2 or a stream handle")
    return value


def _pair(value: Any, what: str) -> tuple[int, int]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{what} must be None or a tuple of two ints, got {value!r}")
    return (_int(value[0], what), _int(value[1], what))


def wants_versioned(max_version: Any) -> bool:
    """Whether ``max_version`` asks for a ``"dltensor_versioned"`` capsule.

    Parameters
    ----------
    max_version : tuple of int or None
        None or major 0: legacy capsule; major >= 1: versioned.

    Returns
    -------
    bool

    Raises
    ------
    TypeError
        Not None and not a pair of ints.

    Examples
    --------
    >>> wants_versioned(None), wants_versioned((1, 0)), wants_versioned((0, 8))
    (False, True, False)
    """
    return max_version is not None and _pair(max_version, "max_version")[0] >= 1


def export_version(max_version: Any) -> tuple[int, int] | None:
    """The DLPack version to export for a consumer's ``max_version``.

    Parameters
    ----------
    max_version : tuple of int or None
        The ``__dlpack__`` argument.

    Returns
    -------
    tuple of int or None
        None (legacy capsule) or ``(1, minor)``, at most ``max_version`` and
        :data:`DLPACK_MAX_VERSION`.

    Examples
    --------
    >>> export_version((1, 0)), export_version((2, 3)), export_version(None)
    ((1, 0), (1, 1), None)
    """
    if not wants_versioned(max_version):
        return None
    major, minor = _pair(max_version, "max_version")
    if major > 1 or minor >= DLPACK_MAX_VERSION[1]:
        return DLPACK_MAX_VERSION
    return (1, max(minor, 0))


@dataclass(frozen=True)
class DLPackRequest:
    """The validated keywords of one ``__dlpack__`` call.

    Parameters
    ----------
    stream : int or None
        As :func:`parse_dlpack_stream` returns it (None: no ordering).
    version : tuple of int or None
        As :func:`export_version` returns it (None: legacy capsule).
    dl_device : tuple of int or None
        ``(device_type, device_id)`` asked for, if any.
    copy : bool or None
        The consumer's ``copy`` argument.
    """

    stream: int | None
    version: tuple[int, int] | None
    dl_device: tuple[int, int] | None
    copy: bool | None

    @property
    def versioned(self) -> bool:
        """Whether to produce a ``"dltensor_versioned"`` capsule."""
        return self.version is not None


def parse_dlpack_request(*, stream: Any = None, max_version: Any = None,
                         dl_device: Any = None, copy: Any = None) -> DLPackRequest:
    """Validate all keywords of ``__dlpack__`` at once.

    Parameters
    ----------
    stream, max_version : int, tuple of int or None
        See :func:`parse_dlpack_stream` and :func:`export_version`.
    dl_device : tuple of int or None
        ``(device_type, device_id)`` asked for by the consumer.
    copy : bool or None
        Whether the consumer demands (True) or forbids (False) a copy.

    Returns
    -------
    DLPackRequest

    Raises
    ------
    TypeError, ValueError
        A malformed keyword; the message names it.

    Examples
    --------
    >>> parse_dlpack_request(max_version=(1, 2), dl_device=(2, 0))
    DLPackRequest(stream=1, version=(1, 1), dl_device=(2, 0), copy=None)
    """
    if copy is not None and not isinstance(copy, (bool, np.bool_)):
        raise TypeError(f"__dlpack__ copy must be None or a bool, got {copy!r}")
    return DLPackRequest(
        stream=_parse_stream(stream, 4), version=export_version(max_version),
        dl_device=None if dl_device is None else _pair(dl_device, "dl_device"),
        copy=None if copy is None else bool(copy))


def parse_dlpack_device(value: Any, producer: Any = None) -> tuple[int, int]:
    """Validate what a producer's ``__dlpack_device__()`` returned.

    Parameters
    ----------
    value : object
        Should be ``(device_type, device_id)``, two ints (an ``IntEnum``
        device type, as PyTorch's, is an int).
    producer : object, optional
        Named in the error message.

    Returns
    -------
    tuple of int

    Raises
    ------
    TypeError
        Anything else (strings such as ``("2", "0")`` included); the message
        names the value.

    Examples
    --------
    >>> parse_dlpack_device((2, 0))
    (2, 0)
    """
    if type(value) is tuple and len(value) == 2 and type(value[0]) is int \
            and type(value[1]) is int:
        return value
    try:
        dev_type, dev_id = value
        return (_int(dev_type, "device type"), _int(dev_id, "device id"))
    except (TypeError, ValueError):
        who = "" if producer is None else f"{type(producer).__name__}."
        raise TypeError(f"{who}__dlpack_device__() must return (device_type, device_id) "
                        f"as two ints, got {value!r}") from None
