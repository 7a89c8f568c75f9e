"""Where a strided layout's bytes lie (part of the "layout" layer).

`_layout` derives views from layouts (indexing, reshape, transpose,
broadcasting, dtype views); this module describes the bytes a layout
addresses: the strides of a fresh dense array (`c_strides`, `f_strides`),
whether a layout is dense (`is_c_contiguous`, `is_f_contiguous`), its byte
range (`extent`, hence the allocation size), whether two layouts of one
allocation share bytes (`may_overlap`, conservative; `overlaps_exact`, as
``np.shares_memory``), and the fewest axes that walk the same byte offsets
in the same order (`collapse_dims`, what a strided kernel iterates over).
`_layout` re-exports every name, and ``gpuarray._layout.<name>`` is the
import callers use; so this module imports nothing from it, and the
vocabulary both share (the `Shape`, `Strides`, `Ints` aliases and the
validation of a shape/strides pair) is defined here.

It holds no memory and never imports CUDA or the driver; the tests check it
against NumPy as the oracle.

Conventions
-----------
* ``shape`` and ``strides`` are sequences of ints of equal length (else
  ValueError); strides are in **bytes**, as in NumPy, and may be negative or
  zero; ``itemsize`` is the element size in bytes.
* Contiguity follows NumPy's relaxed rules: size-1 axes are ignored, any
  size-0 array and any 0-d array are both C- and F-contiguous.
* Fresh contiguous strides (`c_strides`, `f_strides`, reshape of a contiguous
  array) follow NumPy's ``_array_fill_strides``: a size-0 axis counts as size
  1.  (NumPy 2.x's ``np.empty`` gives all-zero strides to size-0 arrays; both
  are valid since no element is addressed.)
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "c_strides",
    "f_strides",
    "is_c_contiguous",
    "is_f_contiguous",
    "extent",
    "may_overlap",
    "overlaps_exact",
    "collapse_dims",
]

Shape = tuple[int, ...]
Strides = tuple[int, ...]
Ints = Sequence[int]


def _ints(seq: Sequence[Any]) -> tuple[int, ...]:
    return tuple(operator.index(x) for x in seq)


def _layout(shape: Ints, strides: Ints) -> tuple[Shape, Strides]:
    shape, strides = _ints(shape), _ints(strides)
    if len(shape) != len(strides):
        raise ValueError(f"shape {shape} and strides {strides} differ in length")
    return shape, strides


# ---------------------------------------------------------- dense layouts


def _fill_strides(shape: Ints, itemsize: int, fortran: bool) -> Strides:
    out, step = [], operator.index(itemsize)
    for n in shape if fortran else reversed(shape):
        out.append(step)
        step *= n or 1
    return tuple(out) if fortran else tuple(reversed(out))


def c_strides(shape: Ints, itemsize: int) -> Strides:
    """Strides of a C-ordered (row-major) contiguous array.

    Parameters
    ----------
    shape : sequence of int
    itemsize : int

    Returns
    -------
    tuple of int
        Byte strides; a size-0 axis counts as size 1 (as NumPy's reshape).

    Raises
    ------
    TypeError
        If `shape` holds a non-integer.
    """
    return _fill_strides(_ints(shape), itemsize, False)


def f_strides(shape: Ints, itemsize: int) -> Strides:
    """Strides of a Fortran-ordered (column-major) contiguous array.

    Parameters
    ----------
    shape : sequence of int
    itemsize : int

    Returns
    -------
    tuple of int
        Byte strides; a size-0 axis counts as size 1.

    Raises
    ------
    TypeError
        If `shape` holds a non-integer.
    """
    return _fill_strides(_ints(shape), itemsize, True)


def _contiguous(shape: Ints, strides: Ints, itemsize: int, fortran: bool) -> bool:
    shape, strides = _layout(shape, strides)
    if 0 in shape:
        return True
    expected = itemsize
    axes = range(len(shape)) if fortran else range(len(shape) - 1, -1, -1)
    for i in axes:
        if shape[i] != 1:
            if strides[i] != expected:
                return False
            expected *= shape[i]
    return True


def is_c_contiguous(shape: Ints, strides: Ints, itemsize: int) -> bool:
    """Whether a layout is C-contiguous, as ``ndarray.flags.c_contiguous``.

    Parameters
    ----------
    shape, strides : sequence of int
    itemsize : int

    Returns
    -------
    bool
        NumPy's relaxed rule: size-1 axes are ignored, size-0 and 0-d arrays
        are contiguous.

    Raises
    ------
    ValueError
        If `shape` and `strides` differ in length.
    """
    return _contiguous(shape, strides, itemsize, False)


def is_f_contiguous(shape: Ints, strides: Ints, itemsize: int) -> bool:
    """Whether a layout is F-contiguous, as ``ndarray.flags.f_contiguous``.

    Parameters
    ----------
    shape, strides : sequence of int
    itemsize : int

    Returns
    -------
    bool
        NumPy's relaxed rule, as `is_c_contiguous`.

    Raises
    ------
    ValueError
        If `shape` and `strides` differ in length.
    """
    return _contiguous(shape, strides, itemsize, True)


# ---------------------------------------------------------------- overlap


def extent(shape: Ints, strides: Ints, itemsize: int) -> tuple[int, int]:
    """Byte range that a layout touches, relative to its element ``[0..0]``.

    Parameters
    ----------
    shape, strides : sequence of int
    itemsize : int

    Returns
    -------
    lo, hi : int
        Half-open range ``[lo, hi)`` with ``lo <= 0``; ``(0, 0)`` for size 0.

    Raises
    ------
    ValueError
        If `shape` and `strides` differ in length.
    """
    shape, strides = _layout(shape, strides)
    if 0 in shape:
        return 0, 0
    lo = sum(s * (n - 1) for n, s in zip(shape, strides, strict=True) if s < 0)
    hi = sum(s * (n - 1) for n, s in zip(shape, strides, strict=True) if s > 0)
    return lo, hi + operator.index(itemsize)


def may_overlap(
    off_a: int,
    shape_a: Ints,
    strides_a: Ints,
    itemsize_a: int,
    off_b: int,
    shape_b: Ints,
    strides_b: Ints,
    itemsize_b: int,
) -> bool:
    """Conservative overlap test of two views of one allocation.

    Parameters
    ----------
    off_a, off_b : int
        Byte offsets of each view's element ``[0..0]`` from a common origin.
    shape_a, strides_a, itemsize_a, shape_b, strides_b, itemsize_b
        Layouts of the two views.

    Returns
    -------
    bool
        False only if the byte extents are disjoint or a view is empty (as
        ``np.may_share_memory``); True may be a false positive.

    Raises
    ------
    ValueError
        If a shape and its strides differ in length.
    """
    lo_a, hi_a = extent(shape_a, strides_a, itemsize_a)
    lo_b, hi_b = extent(shape_b, strides_b, itemsize_b)
    if lo_a == hi_a or lo_b == hi_b:
        return False
    return off_a + lo_a < off_b + hi_b and off_b + lo_b < off_a + hi_a


def _starts(off: int, shape: Shape, strides: Strides) -> np.ndarray:
    acc = np.array([off], dtype=np.int64)
    for n, s in zip(shape, strides, strict=True):
        acc = (acc[:, None] + np.arange(n, dtype=np.int64) * s).ravel()
    return acc


def overlaps_exact(
    off_a: int,
    shape_a: Ints,
    strides_a: Ints,
    itemsize_a: int,
    off_b: int,
    shape_b: Ints,
    strides_b: Ints,
    itemsize_b: int,
    *,
    max_elements: int = 1 << 22,
) -> bool:
    """Exact overlap test of two views of one allocation (``np.shares_memory``).

    Enumerates the elements of both views: O(n log n) time and O(n) memory
    for n elements in all.  When the extents intersect and n exceeds
    `max_elements`, it returns the conservative answer True instead.

    Parameters
    ----------
    off_a, off_b : int
        Byte offsets of each view's element ``[0..0]`` from a common origin.
    shape_a, strides_a, itemsize_a, shape_b, strides_b, itemsize_b
        Layouts of the two views.
    max_elements : int, optional
        Budget of enumerated elements (sum of both sizes).

    Returns
    -------
    bool
        True if some byte belongs to an element of both views (or the budget
        was exceeded and the extents intersect).

    Raises
    ------
    ValueError
        If a shape and its strides differ in length.
    """
    shape_a, strides_a = _layout(shape_a, strides_a)
    shape_b, strides_b = _layout(shape_b, strides_b)
    if not may_overlap(
        off_a, shape_a, strides_a, itemsize_a, off_b, shape_b, strides_b, itemsize_b
    ):
        return False
    if math.prod(shape_a) + math.prod(shape_b) > max_elements:
        return True
    a = np.unique(_starts(off_a, shape_a, strides_a))
    b = _starts(off_b, shape_b, strides_b)
    # element b at x overlaps element a at y iff x - itemsize_a < y < x + itemsize_b
    left = np.searchsorted(a, b - itemsize_a, side="right")
    right = np.searchsorted(a, b + itemsize_b, side="left")
    return bool(np.any(left < right))


# ---------------------------------------------------------------- kernels


def collapse_dims(shape: Ints, *strides_list: Ints) -> tuple[Shape, list]:
    """Merge the axes of several same-shape operands for a strided kernel.

    Size-1 axes are dropped, and adjacent axes ``i, i+1`` are merged when
    ``strides[i] == shape[i+1] * strides[i+1]`` holds for *every* operand, so
    that C-order iteration of the result visits, for each operand, the same
    byte offsets in the same order as C-order iteration of the input.

    Parameters
    ----------
    shape : sequence of int
        Common shape of the operands.
    *strides_list : sequence of int
        Byte strides of each operand.

    Returns
    -------
    shape : tuple of int
        Collapsed shape: ``(0,)`` if the size is 0, ``()`` if it is 1.
    strides : list of tuple of int
        Collapsed strides, one tuple per operand (``(0,)`` for size 0).

    Raises
    ------
    ValueError
        If some strides differ in length from `shape`.
    """
    shape = _ints(shape)
    ops = [_layout(shape, s)[1] for s in strides_list]
    if 0 in shape:
        return (0,), [(0,) for _ in ops]
    out_shape: list = []
    out_ops: list = [[] for _ in ops]
    for i in range(len(shape) - 1, -1, -1):  # innermost first
        if shape[i] == 1:
            continue
        if out_shape and all(
            st[i] == out_shape[-1] * os[-1] for st, os in zip(ops, out_ops, strict=True)
        ):
            out_shape[-1] *= shape[i]
            continue
        out_shape.append(shape[i])
        for st, os in zip(ops, out_ops, strict=True):
            os.append(st[i])
    return tuple(reversed(out_shape)), [tuple(reversed(os)) for os in out_ops]
