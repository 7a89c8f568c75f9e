"""Element types of the kernels: NumPy dtype <-> kernel type code.

A *type code* is NumPy's type string without byte order (``"f4"``,
``"c16"``, ``"b1"``); the CUDA type is ``ga_<code>`` (``kernels/ga_common.cuh``).
Two families exist:

- *cast codes*: the 14 dtypes the conversion kernels support (bool, signed
  and unsigned integers of 1-8 bytes, float16/32/64, complex64/128);
- *raw codes*: units that are only moved, never converted (``u1``, ``u2``,
  ``u4``, ``u8`` and the 16-byte ``v16``); any same-dtype copy or fill runs
  on raw units, whatever the dtype.

Pure: no CUDA, no driver.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "CAST_CODES",
    "RAW_CODES",
    "cast_code",
    "raw_code",
    "code_dtype",
    "code_itemsize",
    "is_bitwise_cast",
]

#: Dtypes the conversion kernels handle, as type codes.
CAST_CODES = ("b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
              "f2", "f4", "f8", "c8", "c16")

#: Raw unit code for each unit size.
RAW_CODES = {1: "u1", 2: "u2", 4: "u4", 8: "u8", 16: "v16"}

_CODE_DTYPE = {c: np.dtype(c if c != "b1" else "?") for c in CAST_CODES}
_CODE_DTYPE["v16"] = np.dtype("V16")
_CAST_CACHE: dict = {}  # np.dtype -> code (only dtypes already validated)


def cast_code(dtype) -> str:
    """The type code of a dtype the conversion kernels support.

    Parameters
    ----------
    dtype : dtype-like
        A NumPy dtype.

    Returns
    -------
    str
        ``"b1"``, ``"i1"`` ... ``"c16"``.

    Raises
    ------
    TypeError
        If the dtype is not one of :data:`CAST_CODES` (or not native-order).

    Examples
    --------
    >>> cast_code("float32"), cast_code(bool), cast_code("int64")
    ('f4', 'b1', 'i8')
    """
    code = _CAST_CACHE.get(dtype)
    if code is not None:
        return code
    dt = np.dtype(dtype)
    if not dt.isnative:
        raise TypeError(f"dtype {dt} is not in native byte order; the device kernels "
                        "only convert native-order data")
    if dt.kind == "b":
        code = "b1"
    elif dt.kind in "iufc" and dt.fields is None:
        code = f"{dt.kind}{dt.itemsize}"
    else:
        code = ""
    if code not in _CODE_DTYPE or code == "v16":
        raise TypeError(f"cannot convert to or from dtype {dt} on the device: supported are "
                        "bool, int8-int64, uint8-uint64, float16/32/64, complex64/128")
    if isinstance(dtype, np.dtype):
        _CAST_CACHE[dtype] = code
    return code


def raw_code(unit: int) -> str:
    """The raw unit type code for a unit of ``unit`` bytes (1, 2, 4, 8, 16)."""
    try:
        return RAW_CODES[unit]
    except KeyError:
        raise ValueError(f"no raw unit of {unit} bytes (use 1, 2, 4, 8 or 16)") from None


def code_dtype(code: str) -> np.dtype:
    """The NumPy dtype of a type code (``v16`` is ``numpy.dtype('V16')``)."""
    return _CODE_DTYPE[code]


def code_itemsize(code: str) -> int:
    """Size in bytes of an element of type ``code``."""
    return _CODE_DTYPE[code].itemsize


def is_bitwise_cast(dst, src) -> bool:
    """True when ``src.astype(dst)`` only moves bytes (same dtype, or integers of one size).

    Integer casts between equal sizes wrap modulo 2^bits, which is the
    identity on the bit pattern, so they run as raw moves (and ``memcpy``).
    """
    dst, src = np.dtype(dst), np.dtype(src)
    if dst == src:
        return True
    return (dst.kind in "iu" and src.kind in "iu" and dst.itemsize == src.itemsize
            and dst.isnative and src.isnative)
