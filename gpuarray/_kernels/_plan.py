"""Planning copies and fills: which driver calls and kernels, with what arguments.

Pure (no CUDA, no driver): :func:`plan_copy` and :func:`plan_fill` turn an
operation on strided memory into a list of operations --
:class:`Memcpy`, :class:`Memcpy2D`, :class:`Memset` or :class:`Launch` -- that
:mod:`gpuarray._kernels._launch` executes in order on one stream.

Dimension normalisation (:func:`normalize`): size-1 dimensions are dropped;
dimensions where the destination stride is negative are flipped in every
operand (pointers move to the last element); dimensions are sorted by
destination stride, largest first, so that the destination is traversed as
close to C order as possible (an element-wise copy may run in any order,
since the destination neither overlaps itself nor the source); adjacent
dimensions are merged when every operand is contiguous across them.

Decisions, in order:

copy, no conversion (same dtype, or integers of one size):
  elements are moved as raw units of the largest size in 1/2/4/8/16 that
  divides the itemsize, both pointers and all strides (a trailing dimension
  splits larger or misaligned elements); then
  1. one contiguous run -> ``cuMemcpyDtoDAsync``;
  2. two dimensions, rows contiguous in both, row >= 512 bytes, positive
     pitches -> ``cuMemcpy2DAsync``;
  3. a (batched) 2-D permutation -> the tiled transpose kernel: the word
     variant ``w`` for element sizes in :data:`WORD_TRANSPOSE_SIZES` when
     both pointers, pitches and batch strides are multiples of its word
     (4 bytes for 1/2-byte elements, 8 for 4-byte ones), else the
     per-element kernel;
  4. otherwise the N-d kernel (variant ``d`` when the destination is
     C-contiguous, ``g`` otherwise).
copy with conversion:
  an operand whose pointer or a stride is not a multiple of its itemsize
  selects variant ``u`` (byte-wise access); otherwise 1-D contiguous ->
  variant ``c``, a 2-D permutation -> transpose kernel (``w`` under the
  same conditions when both element sizes are equal), else ``d``/``g``.
fill:
  the value becomes its dtype's bytes (NumPy assignment semantics); a
  contiguous run whose pattern repeats every 1, 2 or 4 bytes ->
  ``cuMemsetD8/D16/D32Async``; otherwise the fill kernel (``c`` contiguous,
  ``g`` strided) on raw units; a misaligned destination is filled one unit
  position of the element at a time.

More than :data:`MAX_NDIM` dimensions left after normalisation: one launch
per index of the outer dimensions (rare: only for layouts that defeat
merging in more than 8 dimensions).

Index width: 32-bit when every byte offset of every operand and
``n + MAX_GRID * BLOCK * UNROLL`` fit in a signed 32-bit int, else 64-bit.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from . import _dtypes
from ._specs import (
    BLOCK,
    MAX_NDIM,
    UNROLL,
    WORD_TRANSPOSE_WORDS,
    KernelSpec,
    copy_spec,
    fill_spec,
    transpose_spec,
)

__all__ = [
    "Memcpy",
    "Memcpy2D",
    "Memset",
    "Launch",
    "normalize",
    "index_type",
    "plan_copy",
    "plan_fill",
    "fill_pattern",
    "MAX_GRID",
    "MEMCPY2D_MIN_WIDTH",
    "TRANSPOSE_MIN",
    "WORD_TRANSPOSE_SIZES",
]

#: Grid size cap of the grid-stride kernels (index slack depends on it).
MAX_GRID = 16384
_I32_MAX = 2**31 - 1
_SLACK = MAX_GRID * BLOCK * UNROLL
#: Rows narrower than this (bytes) use the N-d kernel instead of cuMemcpy2D;
#: ``None`` disables cuMemcpy2D.
MEMCPY2D_MIN_WIDTH: int | None = 512
#: Both transposed extents must be at least this for the tiled kernel.
TRANSPOSE_MIN = 16
#: Element sizes whose aligned transposes use the word kernel (``w``); a
#: subset of 1, 2, 4 (an empty set: always the per-element kernel, e.g. to
#: compare both on a GPU).
WORD_TRANSPOSE_SIZES: frozenset[int] = frozenset({1, 2, 4})


class Memcpy(NamedTuple):
    """``cuMemcpyDtoDAsync(dst, src, nbytes)``."""

    dst: int
    src: int
    nbytes: int


class Memcpy2D(NamedTuple):
    """``cuMemcpy2DAsync`` of ``height`` rows of ``width`` bytes, device to device."""

    dst: int
    dst_pitch: int
    src: int
    src_pitch: int
    width: int
    height: int


class Memset(NamedTuple):
    """``cuMemsetD{bits}Async(dst, value, count)``; ``words`` of ``bits`` bits each."""

    dst: int
    bits: int
    value: int
    words: int


class Launch(NamedTuple):
    """One kernel launch: the spec, the element count and the parameter values.

    ``fields`` maps parameter-block field names to values (pointers, shape,
    strides, pattern ...); the launcher adds the 32-bit dividers.
    """

    spec: KernelSpec
    n: int
    fields: dict[str, Any]


# ------------------------------------------------------------------ helpers
def normalize(shape: Sequence[int], ptrs: Sequence[int], strides_list: Sequence[Sequence[int]]):
    """Drop, flip, sort and merge dimensions (see the module docstring).

    Operand 0 (the destination) decides flips and order.

    Returns
    -------
    shape : tuple of int
    ptrs : list of int
        Pointers after flips.
    strides : list of tuple of int
        One tuple per operand.
    """
    ptrs = [int(p) for p in ptrs]
    nops = len(strides_list)
    if len(shape) == 1:  # fast path: one dimension
        n = int(shape[0])
        if n == 1:
            return (), ptrs, [()] * nops
        st = [int(s[0]) for s in strides_list]
        if st[0] < 0:
            for j in range(nops):
                ptrs[j] += (n - 1) * st[j]
                st[j] = -st[j]
        return (n,), ptrs, [(x,) for x in st]
    dims = []
    for k, n in enumerate(shape):
        n = int(n)
        if n == 1:
            continue
        st = [int(s[k]) for s in strides_list]
        if st[0] < 0:
            for j in range(nops):
                ptrs[j] += (n - 1) * st[j]
                st[j] = -st[j]
        dims.append((n, st))
    dims.sort(key=lambda d: -d[1][0])
    merged: list = []
    for n, st in dims:
        if merged:
            pn, pst = merged[-1]
            if all(pst[j] == st[j] * n for j in range(nops)):
                merged[-1] = (pn * n, st)
                continue
        merged.append((n, st))
    out_shape = tuple(n for n, _ in merged)
    out_strides = [tuple(st[j] for _, st in merged) for j in range(nops)]
    return out_shape, ptrs, out_strides


def _extent(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> int:
    return sum((n - 1) * abs(s) for n, s in zip(shape, strides, strict=True)) + itemsize


def index_type(n: int, extents: Sequence[int]) -> str:
    """``"i32"`` when ``n`` plus grid slack and every byte extent fit in int32, else ``"i64"``.

    Examples
    --------
    >>> index_type(1000, [4000, 8000]), index_type(2**31, [2**31])
    ('i32', 'i64')
    """
    if n + _SLACK <= _I32_MAX and all(e <= _I32_MAX for e in extents):
        return "i32"
    return "i64"


def _c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    out = []
    acc = itemsize
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def _lowbit16(a: int) -> int:
    """Largest power of two <= 16 dividing ``a`` (``a`` == 0 counts as divisible by all)."""
    if a == 0:
        return 16
    return min(16, a & -a)


def _aligned(ptr: int, strides: Sequence[int], itemsize: int) -> bool:
    return ptr % itemsize == 0 and all(s % itemsize == 0 for s in strides)


def _outer_split(shape, ptrs, strides_list):
    """Yield (ptrs, inner_shape, inner_strides_list) with at most MAX_NDIM dims each."""
    nd = len(shape)
    if nd <= MAX_NDIM:
        yield ptrs, shape, strides_list
        return
    k = nd - MAX_NDIM
    for idx in itertools.product(*(range(n) for n in shape[:k])):
        p = [ptr + sum(i * s for i, s in zip(idx, st[:k], strict=True))
             for ptr, st in zip(ptrs, strides_list, strict=True)]
        yield p, shape[k:], [st[k:] for st in strides_list]


def _check_args(shape, *strides_list) -> tuple[int, ...]:
    shape = tuple(shape)
    nd = len(shape)
    for st in strides_list:
        if len(st) != nd:
            raise ValueError(f"strides {tuple(st)} do not match shape {shape}")
    for n in shape:
        if n < 0:
            raise ValueError(f"negative dimension in shape {shape}")
    return shape


def _check_dst(shape, strides) -> None:
    for n, s in zip(shape, strides, strict=True):
        if n > 1 and s == 0:
            raise ValueError(f"destination strides {tuple(strides)} (shape {tuple(shape)}) have "
                             "a zero stride: several elements would share one address")


# ------------------------------------------------------------------- copies
def plan_copy(dst_ptr: int, dst_strides: Sequence[int], dst_dtype, src_ptr: int,
              src_strides: Sequence[int], src_dtype, shape: Sequence[int]) -> list:
    """Operations that perform ``dst[...] = src.astype(dst_dtype)`` (see the module docstring).

    Raises
    ------
    TypeError
        For a conversion between unsupported dtypes, or object dtypes.
    ValueError
        For mismatched shape/strides or a destination with a zero stride.
    """
    if type(dst_dtype) is not np.dtype:
        dst_dtype = np.dtype(dst_dtype)
    if type(src_dtype) is not np.dtype:
        src_dtype = np.dtype(src_dtype)
    k = dst_dtype.itemsize
    if (len(shape) <= 1 and dst_dtype == src_dtype and not dst_dtype.hasobject
            and len(dst_strides) == len(src_strides) == len(shape)):
        n = int(shape[0]) if shape else 1  # fast path: one contiguous run, no conversion
        if n == 0:
            return []
        if n == 1 or (dst_strides[0] == k and src_strides[0] == k):
            return [Memcpy(int(dst_ptr), int(src_ptr), n * k)]
    shape = _check_args(shape, dst_strides, src_strides)
    if dst_dtype.hasobject or src_dtype.hasobject:
        raise TypeError("object arrays cannot live in device memory")
    raw = _dtypes.is_bitwise_cast(dst_dtype, src_dtype)
    if not raw:  # validate before the size-0 early exit, as NumPy would
        dcode, scode = _dtypes.cast_code(dst_dtype), _dtypes.cast_code(src_dtype)
    if 0 in shape:
        return []
    _check_dst(shape, dst_strides)
    nshape, ptrs, strides = normalize(shape, (dst_ptr, src_ptr), (dst_strides, src_strides))
    if raw:
        return _plan_raw(nshape, ptrs, strides, dst_dtype.itemsize)
    return _plan_cast(nshape, ptrs, strides, dcode, scode)


def _plan_raw(shape, ptrs, strides, itemsize: int) -> list:
    unit = _lowbit16(math.gcd(itemsize, *ptrs, *strides[0], *strides[1]))
    if unit < itemsize:
        shape = shape + (itemsize // unit,)
        strides = [st + (unit,) for st in strides]
        shape, ptrs, strides = normalize(shape, ptrs, strides)
    if not shape:
        shape, strides = (1,), [(unit,), (unit,)]
    ds, ss = strides
    if len(shape) == 1 and ds[0] == unit and ss[0] == unit:
        return [Memcpy(ptrs[0], ptrs[1], shape[0] * unit)]
    if (len(shape) == 2 and MEMCPY2D_MIN_WIDTH is not None and ds[1] == unit and ss[1] == unit
            and shape[1] * unit >= MEMCPY2D_MIN_WIDTH and shape[1] * unit <= ss[0] < 2**31
            and ds[0] < 2**31):
        return [Memcpy2D(ptrs[0], ds[0], ptrs[1], ss[0], shape[1] * unit, shape[0])]
    code = _dtypes.raw_code(unit)
    return _plan_kernel(shape, ptrs, strides, code, code, unit, unit, aligned=True)


def _plan_cast(shape, ptrs, strides, dcode: str, scode: str) -> list:
    dsz, ssz = _dtypes.code_itemsize(dcode), _dtypes.code_itemsize(scode)
    if not shape:
        shape, strides = (1,), [(dsz,), (ssz,)]
    aligned = _aligned(ptrs[0], strides[0], dsz) and _aligned(ptrs[1], strides[1], ssz)
    return _plan_kernel(shape, ptrs, strides, dcode, scode, dsz, ssz, aligned)


def _is_transpose(shape, strides, dsz: int, ssz: int) -> bool:
    if len(shape) not in (2, 3):
        return False
    ds, ss = strides
    return (ds[-1] == dsz and ss[-2] == ssz and ss[-1] != 0
            and shape[-2] >= TRANSPOSE_MIN and shape[-1] >= TRANSPOSE_MIN)


def _plan_kernel(shape, ptrs, strides, dcode, scode, dsz, ssz, aligned: bool) -> list:
    ds, ss = strides
    if aligned and len(shape) == 1 and ds[0] == dsz and ss[0] == ssz:
        n = shape[0]
        idx = index_type(n, [n * dsz, n * ssz])
        spec = copy_spec(dcode, scode, 1, idx, "c")
        return [Launch(spec, n, dict(dst=ptrs[0], src=ptrs[1], shape=shape,
                                     dst_strides=ds, src_strides=ss))]
    if aligned and _is_transpose(shape, strides, dsz, ssz):
        rows, cols = shape[-2], shape[-1]
        batch = shape[0] if len(shape) == 3 else 1
        dbs = ds[0] if len(shape) == 3 else 0
        sbs = ss[0] if len(shape) == 3 else 0
        n = batch * rows * cols
        idx = index_type(n, [_extent(shape, ds, dsz), _extent(shape, ss, ssz)])
        variant = ""
        if dsz == ssz and dsz in WORD_TRANSPOSE_SIZES:
            word = WORD_TRANSPOSE_WORDS[dsz]
            if all(v % word == 0 for v in (ptrs[0], ptrs[1], ds[-2], ss[-1], dbs, sbs)):
                variant = "w"
        spec = transpose_spec(dcode, scode, idx, variant)
        return [Launch(spec, n, dict(dst=ptrs[0], src=ptrs[1], rows=rows, cols=cols,
                                     batch=batch, dst_pitch=ds[-2], src_pitch=ss[-1],
                                     dst_bstride=dbs, src_bstride=sbs))]
    ops = []
    for (dp, sp), ishape, (ids, iss) in _outer_split(shape, ptrs, strides):
        n = math.prod(ishape)
        if not aligned:
            variant = "u"
        elif ids == _c_strides(ishape, dsz):
            variant = "d"
        else:
            variant = "g"
        idx = index_type(n, [_extent(ishape, ids, dsz), _extent(ishape, iss, ssz)])
        spec = copy_spec(dcode, scode, len(ishape), idx, variant)
        ops.append(Launch(spec, n, dict(dst=dp, src=sp, shape=tuple(ishape),
                                        dst_strides=tuple(ids), src_strides=tuple(iss))))
    return ops


# -------------------------------------------------------------------- fills
def fill_pattern(value, dtype) -> bytes:
    """The bytes of ``value`` stored into an element of ``dtype`` (NumPy assignment rules).

    ``numpy.empty((), dtype)[()] = value``: Python integers out of range
    raise ``OverflowError``, NaN into an integer raises ``ValueError``, as
    ``ndarray.__setitem__`` does.

    Examples
    --------
    >>> fill_pattern(1, "int16")
    b'\\x01\\x00'
    """
    dt = dtype if type(dtype) is np.dtype else np.dtype(dtype)
    if type(value) is dt.type and dt.isbuiltin:  # a NumPy scalar of the dtype: its bytes
        return value.tobytes()
    if dt.hasobject:
        raise TypeError("object arrays cannot live in device memory")
    cell = np.empty((), dtype=dt)
    cell[()] = value
    return cell.tobytes()


def _period(pattern: bytes, limit: int) -> int:
    """Smallest power of two p <= limit with pattern == pattern[:p] * k, else len(pattern)."""
    p = 1
    while p < len(pattern) and p <= limit:
        if len(pattern) % p == 0 and pattern == pattern[:p] * (len(pattern) // p):
            return p
        p *= 2
    return len(pattern)


def plan_fill(dst_ptr: int, dst_strides: Sequence[int], dtype, shape: Sequence[int],
              value) -> list:
    """Operations that perform ``dst[...] = value`` (see the module docstring).

    Raises
    ------
    TypeError, ValueError, OverflowError
        As NumPy assignment of ``value`` to ``dtype`` does; ``ValueError``
        also for mismatched shape/strides or a zero destination stride.
    """
    dt = dtype if type(dtype) is np.dtype else np.dtype(dtype)
    pattern = fill_pattern(value, dt)
    k = dt.itemsize
    if len(shape) <= 1 and len(dst_strides) == len(shape):  # fast path: one contiguous run
        n = int(shape[0]) if shape else 1
        if n > 0 and (n == 1 or dst_strides[0] == k) and dst_ptr % k == 0:
            per = _period(pattern, 4)
            if per in (1, 2, 4):
                return [Memset(int(dst_ptr), 8 * per, int.from_bytes(pattern[:per], "little"),
                               n * k // per)]
            if n == 1 and k % 4 == 0:  # one 8/16-byte element: memsets beat a launch
                return [Memset(int(dst_ptr) + j, 32, int.from_bytes(pattern[j:j + 4], "little"), 1)
                        for j in range(0, k, 4)]
    shape = _check_args(shape, dst_strides)
    if 0 in shape:
        return []
    _check_dst(shape, dst_strides)
    nshape, (ptr,), (st,) = normalize(shape, (dst_ptr,), (dst_strides,))
    unit = _lowbit16(math.gcd(k, ptr, *st))
    pieces = []  # (ptr, shape, strides, unit pattern)
    if unit == k:
        pieces.append((ptr, nshape, st, pattern))
    elif pattern == pattern[:unit] * (k // unit):
        s2, (p2,), (st2,) = normalize(nshape + (k // unit,), (ptr,), (st + (unit,),))
        pieces.append((p2, s2, st2, pattern[:unit]))
    else:
        for j in range(k // unit):
            pieces.append((ptr + j * unit, nshape, st, pattern[j * unit:(j + 1) * unit]))
    ops: list = []
    for p, s, t, upat in pieces:
        if not s:
            s, t = (1,), (unit,)
        if len(s) == 1 and t[0] == unit:
            nbytes = s[0] * unit
            per = _period(upat, 4)
            if per in (1, 2, 4):
                ops.append(Memset(p, 8 * per, int.from_bytes(upat[:per], "little"),
                                  nbytes // per))
                continue
            idx = index_type(s[0], [nbytes])
            ops.append(_fill_launch(fill_spec(_dtypes.raw_code(unit), 1, idx, "c"),
                                    p, s, t, upat))
            continue
        for (pp,), ishape, (ist,) in _outer_split(s, [p], [t]):
            idx = index_type(math.prod(ishape), [_extent(ishape, ist, unit)])
            spec = fill_spec(_dtypes.raw_code(unit), len(ishape), idx, "g")
            ops.append(_fill_launch(spec, pp, tuple(ishape), tuple(ist), upat))
    return ops


def _fill_launch(spec: KernelSpec, ptr: int, shape, strides, upat: bytes) -> Launch:
    padded = upat.ljust(16, b"\0")
    return Launch(spec, math.prod(shape), dict(
        dst=ptr, shape=tuple(shape), strides=tuple(strides),
        pat_lo=int.from_bytes(padded[:8], "little"), pat_hi=int.from_bytes(padded[8:], "little")))
