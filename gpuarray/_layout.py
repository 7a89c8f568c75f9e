"""Pure shape/stride arithmetic for strided arrays: views (the "layout" layer).

This module holds no memory and never imports CUDA or the driver: functions
map tuples of Python ints to tuples of Python ints, and the tests check them
against NumPy as the oracle.  It derives a view's layout from its parent's:
basic indexing (`index`: key -> offset, shape, strides), reshape as a view
(`normalize_shape`, `reshape_strides`), `transpose`, `squeeze`,
broadcasting (`broadcast_shapes`, `broadcast_strides`) and dtype views
(`view_as_dtype`).

Where a layout's bytes lie -- fresh dense strides, contiguity, the byte
extent, overlap tests and axis collapsing for kernels -- is ``_footprint``'s
concern; this module re-exports those names, so ``gpuarray._layout.<name>``
is the one import point of the layout layer.

Conventions
-----------
* ``shape`` and ``strides`` are sequences of ints of equal length (else
  ValueError); strides are in **bytes**, as in NumPy, and may be negative or
  zero; ``itemsize`` is the element size in bytes.
* An *offset* is the byte distance from the parent's element ``[0, ..., 0]``
  to the view's element ``[0, ..., 0]``; it is negative when the parent has
  negative strides and the view starts "before" the parent's first element.
  A view's data pointer is ``parent_ptr + offset``.  Views made by
  `transpose`, `squeeze`, `reshape_strides`, `broadcast_strides` and
  `view_as_dtype` have offset 0.
* Contiguity and fresh strides follow NumPy's rules (see ``_footprint``).
"""

from __future__ import annotations

import math
import operator
import reprlib
from typing import Any, NamedTuple

import numpy as np

from ._footprint import (
    Ints,
    Shape,
    Strides,
    _fill_strides,
    _ints,
    _layout,
    c_strides,
    collapse_dims,
    extent,
    f_strides,
    is_c_contiguous,
    is_f_contiguous,
    may_overlap,
    overlaps_exact,
)

try:  # NumPy >= 1.25
    from numpy.exceptions import AxisError
except ImportError:  # pragma: no cover - older NumPy
    AxisError = np.AxisError  # type: ignore[attr-defined,misc]

__all__ = [
    "AxisError",
    "IndexResult",
    "c_strides",
    "f_strides",
    "is_c_contiguous",
    "is_f_contiguous",
    "normalize_index",
    "index",
    "normalize_shape",
    "reshape_strides",
    "transpose",
    "squeeze",
    "broadcast_shapes",
    "broadcast_strides",
    "view_as_dtype",
    "extent",
    "may_overlap",
    "overlaps_exact",
    "collapse_dims",
]

_BASIC_ONLY = "gpuarray supports basic indexing only (integers, slices, Ellipsis, None)"


# --------------------------------------------------------------- indexing


class IndexResult(NamedTuple):
    """Result of basic indexing: a view described relative to its parent.

    Attributes
    ----------
    offset : int
        Byte offset of the view's element ``[0, ..., 0]`` from the parent's.
    shape, strides : tuple of int
        Layout of the view (``()`` for 0-d).
    scalar : bool
        True when every axis was indexed by an integer with no Ellipsis and
        no None: where NumPy returns a scalar instead of a 0-d view.
    """

    offset: int
    shape: Shape
    strides: Strides
    scalar: bool


def _bad_key(item: Any) -> IndexError:
    if hasattr(item, "shape") and not isinstance(item, np.generic):  # never repr arrays
        what = f"an array of shape {tuple(item.shape)}"
    else:
        what = reprlib.repr(item)
    return IndexError(f"{_BASIC_ONLY}; got {what} of type {type(item).__name__}")


def _norm_item(item: Any) -> Any:
    if item is None or item is Ellipsis:
        return item
    if isinstance(item, slice):
        try:
            bounds = [
                b if b is None else operator.index(b) for b in (item.start, item.stop, item.step)
            ]
        except TypeError:
            raise TypeError(
                f"slice indices must be integers or None or have an __index__ method; got {item!r}"
            ) from None
        if bounds[2] == 0:
            raise ValueError(f"slice step cannot be zero: {item!r}")
        return slice(*bounds)
    if isinstance(item, (bool, np.bool_, np.ndarray, list, tuple)):
        raise _bad_key(item)
    try:
        return operator.index(item)
    except TypeError:
        raise _bad_key(item) from None


def _normalize(key: Any, ndim: int) -> tuple[tuple, bool]:
    items = tuple(_norm_item(k) for k in (key if isinstance(key, tuple) else (key,)))
    n_ellipsis = sum(1 for k in items if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError(f"an index can only have a single ellipsis ('...'); got {key!r}")
    used = sum(1 for k in items if k is not None and k is not Ellipsis)
    if used > ndim:
        raise IndexError(
            f"too many indices for array: array is {ndim}-"
            f"dimensional, but {used} were indexed (key {key!r})"
        )
    fill = (slice(None),) * (ndim - used)
    if n_ellipsis:
        at = items.index(Ellipsis)
        return items[:at] + fill + items[at + 1 :], True
    return items + fill, False


def normalize_index(key: Any, ndim: int) -> tuple:
    """Check a basic-indexing key and expand it to one entry per axis.

    Parameters
    ----------
    key : object
        An int (or object with ``__index__``), slice, Ellipsis, None, or a
        tuple of these.
    ndim : int
        Number of dimensions of the indexed array.

    Returns
    -------
    tuple
        Python ints, slices with int-or-None bounds, and None; the Ellipsis
        (or the missing trailing axes) become ``slice(None)``, so exactly
        `ndim` entries are not None.  Bounds are not checked.

    Raises
    ------
    IndexError
        For advanced indices (lists, arrays, bools, floats, ...), more than
        one Ellipsis, or more indices than dimensions.
    TypeError
        For slice bounds that are not integers.
    ValueError
        For a slice step of zero.
    """
    return _normalize(key, operator.index(ndim))[0]


def _index_fast(shape: Ints, strides: Ints, key: Any) -> IndexResult | None:
    """`index` for the common keys: ints and slices with int or None bounds,
    no more than ``ndim`` of them.  None means "take the general path" (which
    also produces every error message)."""
    if type(key) is not tuple:
        key = (key,)
    ndim = len(shape)
    if len(key) > ndim or len(strides) != ndim:
        return None
    offset = 0
    new_shape: list[int] = []
    new_strides: list[int] = []
    for axis, item in enumerate(key):
        n, s = shape[axis], strides[axis]
        t = type(item)
        if t is int:
            i = item + n if item < 0 else item
            if not 0 <= i < n:
                return None
            offset += i * s
        elif t is slice:
            a, b, c = item.start, item.stop, item.step
            if not ((a is None or type(a) is int) and (b is None or type(b) is int)
                    and (c is None or (type(c) is int and c != 0))):
                return None
            start, stop, step = item.indices(n)
            length = len(range(start, stop, step))
            if length:
                offset += start * s
                new_strides.append(s * step)
            else:
                new_strides.append(s)
            new_shape.append(length)
        else:
            return None
    if len(key) < ndim:
        new_shape.extend(shape[len(key):])
        new_strides.extend(strides[len(key):])
    return IndexResult(offset, tuple(new_shape), tuple(new_strides), not new_shape and len(key) == ndim)


def index(shape: Ints, strides: Ints, key: Any) -> IndexResult:
    """Apply a NumPy basic-indexing key to a layout.

    Parameters
    ----------
    shape, strides : sequence of int
        Layout of the parent array.
    key : object
        Basic index, as accepted by `normalize_index`.

    Returns
    -------
    IndexResult
        Offset, shape and strides of the view, and whether NumPy returns a
        scalar.  As in NumPy, new axes (None) get stride 0 and an empty slice
        keeps the axis stride and adds no offset.

    Raises
    ------
    IndexError
        For an out-of-range integer (the message names index, axis and
        size), and as `normalize_index`.
    TypeError, ValueError
        As `normalize_index`.

    Examples
    --------
    >>> index((4, 5), (40, 8), (1, slice(None, None, -2)))
    IndexResult(offset=72, shape=(3,), strides=(-16,), scalar=False)
    """
    fast = _index_fast(shape, strides, key)
    if fast is not None:
        return fast
    shape, strides = _layout(shape, strides)
    items, had_ellipsis = _normalize(key, len(shape))
    offset = axis = n_int = 0
    new_shape, new_strides = [], []
    for item in items:
        if item is None:
            new_shape.append(1)
            new_strides.append(0)
            continue
        n, s = shape[axis], strides[axis]
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            length = len(range(start, stop, step))
            if length == 0:
                start, step = 0, 1
            offset += start * s
            new_shape.append(length)
            new_strides.append(s * step)
        else:
            i = item + n if item < 0 else item
            if not 0 <= i < n:
                raise IndexError(f"index {item} is out of bounds for axis {axis} with size {n}")
            offset += i * s
            n_int += 1
        axis += 1
    scalar = not had_ellipsis and n_int == len(shape) and None not in items
    return IndexResult(offset, tuple(new_shape), tuple(new_strides), scalar)


# ---------------------------------------------------------------- reshape


def _shape_entries(newshape: Any) -> list:
    try:
        return [operator.index(newshape)]
    except TypeError:
        pass
    try:
        return [operator.index(d) for d in newshape]
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got {newshape!r}") from None


def normalize_shape(newshape: Any, size: int, *, oldshape: Ints | None = None) -> Shape:
    """Resolve a single ``-1`` in a requested shape and validate it.

    Parameters
    ----------
    newshape : int or sequence of int
        Requested shape; at most one entry may be ``-1``.
    size : int
        Number of elements the shape must hold.
    oldshape : sequence of int, optional
        Shape of the array being reshaped, only used in error messages.

    Returns
    -------
    tuple of int
        The shape with ``-1`` resolved.

    Raises
    ------
    TypeError
        If an entry is not an integer.
    ValueError
        If an entry is negative (other than one ``-1``), there are several
        ``-1``, or the element count differs from `size`.
    """
    dims = _shape_entries(newshape)
    what = (
        f"array of shape {tuple(oldshape)} (size {size})"
        if oldshape is not None
        else f"array of size {size}"
    )
    bad = [d for d in dims if d < -1]
    if bad:
        raise ValueError(f"negative dimension {bad[0]} in shape {tuple(dims)}")
    unknown = [i for i, d in enumerate(dims) if d == -1]
    if len(unknown) > 1:
        raise ValueError(f"can only specify one unknown dimension, got {tuple(dims)}")
    known = math.prod(d for d in dims if d != -1)
    if unknown and known and size % known == 0:
        dims[unknown[0]] = size // known
    elif unknown or known != size:
        raise ValueError(f"cannot reshape {what} into shape {tuple(dims)}")
    return tuple(dims)


def _nocopy_reshape(
    shape: Shape, strides: Strides, newdims: Shape, itemsize: int, fortran: bool
) -> Strides | None:
    # NumPy's _attempt_nocopy_reshape (shape.c); equal, non-zero sizes.
    old = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]
    olddims, oldstr = [n for n, _ in old], [s for _, s in old]
    newnd, oldnd = len(newdims), len(olddims)
    newstr = [0] * newnd
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < newnd and oi < oldnd:
        np_, op = newdims[ni], olddims[oi]
        while np_ != op:
            if np_ < op:
                np_ *= newdims[nj]
                nj += 1
            else:
                op *= olddims[oj]
                oj += 1
        for ok in range(oi, oj - 1):
            if fortran:
                if oldstr[ok + 1] != olddims[ok] * oldstr[ok]:
                    return None
            elif oldstr[ok] != olddims[ok + 1] * oldstr[ok + 1]:
                return None
        if fortran:
            newstr[ni] = oldstr[oi]
            for nk in range(ni + 1, nj):
                newstr[nk] = newstr[nk - 1] * newdims[nk - 1]
        else:
            newstr[nj - 1] = oldstr[oj - 1]
            for nk in range(nj - 1, ni, -1):
                newstr[nk - 1] = newstr[nk] * newdims[nk]
        ni, nj, oi, oj = nj, nj + 1, oj, oj + 1
    last = newstr[ni - 1] if ni >= 1 else itemsize
    if fortran and ni >= 1:
        last *= newdims[ni - 1]
    newstr[ni:] = [last] * (newnd - ni)  # trailing size-1 axes
    return tuple(newstr)


def reshape_strides(
    shape: Ints, strides: Ints, itemsize: int, newshape: Any, order: str = "C"
) -> Strides | None:
    """Strides for reshaping a layout without copying, if that is possible.

    Parameters
    ----------
    shape, strides : sequence of int
        Layout of the array being reshaped.
    itemsize : int
    newshape : int or sequence of int
        Requested shape, possibly with one ``-1``; the view's shape is
        ``normalize_shape(newshape, size)``.
    order : {'C', 'F', 'A'}
        Index order, as in ``numpy.reshape``.

    Returns
    -------
    tuple of int or None
        The view's strides, identical to NumPy's (offset 0), or None when
        NumPy would have to copy (the caller then copies in `order`).

    Raises
    ------
    ValueError
        For a bad `order`, or a shape holding a different number of elements
        (the message names both shapes).
    TypeError
        For non-integer shape entries.
    """
    shape, strides = _layout(shape, strides)
    newdims = normalize_shape(newshape, math.prod(shape), oldshape=shape)
    if order not in ("C", "F", "A"):
        raise ValueError(f"order must be 'C', 'F' or 'A', got {order!r}")
    c_contig = is_c_contiguous(shape, strides, itemsize)
    f_contig = is_f_contiguous(shape, strides, itemsize)
    if order == "A":
        order = "F" if f_contig and not c_contig else "C"
    if tuple(_shape_entries(newshape)) == shape:  # NumPy: same shape, no -1
        return strides
    fortran = order == "F"
    if f_contig if fortran else c_contig:
        return _fill_strides(newdims, itemsize, fortran)
    return _nocopy_reshape(shape, strides, newdims, itemsize, fortran)


# ------------------------------------------------------- axes manipulation


def _axis(axis: Any, ndim: int) -> int:
    a = operator.index(axis)
    if not -ndim <= a < ndim:
        raise AxisError(a, ndim)
    return a % ndim


def transpose(shape: Ints, strides: Ints, axes: Ints | None = None) -> tuple[Shape, Strides]:
    """Permute the axes of a layout.

    Parameters
    ----------
    shape, strides : sequence of int
    axes : sequence of int, optional
        Permutation (negative axes allowed); default reverses the axes.

    Returns
    -------
    shape, strides : tuple of int
        Permuted layout.

    Raises
    ------
    AxisError
        If an axis is out of range (a ValueError and an IndexError).
    ValueError
        If `axes` has the wrong length or repeats an axis.
    """
    shape, strides = _layout(shape, strides)
    ndim = len(shape)
    if axes is None:
        perm: tuple[int, ...] = tuple(range(ndim - 1, -1, -1))
    else:
        axes = tuple(axes)
        if len(axes) != ndim:
            raise ValueError(f"axes {axes} don't match array of dimension {ndim}")
        perm = tuple(_axis(a, ndim) for a in axes)
        if len(set(perm)) != ndim:
            raise ValueError(f"repeated axis in transpose: axes {axes}")
    return tuple(shape[p] for p in perm), tuple(strides[p] for p in perm)


def squeeze(shape: Ints, strides: Ints, axis: Any = None) -> tuple[Shape, Strides]:
    """Remove size-1 axes from a layout.

    Parameters
    ----------
    shape, strides : sequence of int
    axis : int or tuple of int, optional
        Axes to remove; default all size-1 axes.

    Returns
    -------
    shape, strides : tuple of int
        Layout without those axes.

    Raises
    ------
    AxisError
        If an axis is out of range.
    ValueError
        If an axis is repeated or its size is not 1.
    """
    shape, strides = _layout(shape, strides)
    if axis is None:
        drop = [i for i, n in enumerate(shape) if n == 1]
    else:
        drop = [_axis(a, len(shape)) for a in (axis if isinstance(axis, tuple) else (axis,))]
        if len(set(drop)) != len(drop):
            raise ValueError(f"duplicate value in 'axis': {axis!r}")
        for a in drop:
            if shape[a] != 1:
                raise ValueError(
                    f"cannot select an axis to squeeze out which has size not "
                    f"equal to one: axis {a} of shape {shape} has size "
                    f"{shape[a]}"
                )
    keep = [i for i in range(len(shape)) if i not in drop]
    return tuple(shape[i] for i in keep), tuple(strides[i] for i in keep)


# ----------------------------------------------------------- broadcasting


def broadcast_shapes(*shapes: Ints) -> Shape:
    """Shape that the given shapes broadcast to (NumPy's rules).

    Parameters
    ----------
    *shapes : sequence of int

    Returns
    -------
    tuple of int
        The broadcast shape (``()`` for no arguments).

    Raises
    ------
    ValueError
        If two shapes are incompatible; NumPy's message, naming both.
    """
    shapes_t = [_ints(s) for s in shapes]
    ndim = max((len(s) for s in shapes_t), default=0)
    out, owner = [1] * ndim, [0] * ndim
    for k, s in enumerate(shapes_t):
        for i, n in enumerate(s, ndim - len(s)):
            if n == 1:
                continue
            if out[i] == 1:
                out[i], owner[i] = n, k
            elif out[i] != n:
                j = owner[i]
                raise ValueError(
                    f"shape mismatch: objects cannot be broadcast to a single "
                    f"shape.  Mismatch is between arg {j} with shape "
                    f"{shapes_t[j]} and arg {k} with shape {s}."
                )
    return tuple(out)


def broadcast_strides(shape: Ints, strides: Ints, target_shape: Ints) -> Strides:
    """Strides that present a layout as broadcast to `target_shape`.

    Parameters
    ----------
    shape, strides : sequence of int
        Layout being broadcast.
    target_shape : sequence of int

    Returns
    -------
    tuple of int
        Strides as ``np.broadcast_to`` gives them: 0 for new leading axes and
        for every size-1 axis, the original stride elsewhere.

    Raises
    ------
    ValueError
        If `shape` cannot be broadcast to `target_shape` (names both).
    """
    shape, strides = _layout(shape, strides)
    target = _ints(target_shape)
    lead = len(target) - len(shape)
    if lead < 0 or any(n not in (1, t) for n, t in zip(shape, target[lead:], strict=True)):
        raise ValueError(f"cannot broadcast an array of shape {shape} to shape {target}")
    return (0,) * lead + tuple(s if n != 1 else 0 for n, s in zip(shape, strides, strict=True))


# ------------------------------------------------------------ dtype views


def view_as_dtype(
    shape: Ints, strides: Ints, old_itemsize: int, new_itemsize: int
) -> tuple[Shape, Strides]:
    """Layout of ``arr.view(dtype)`` when the item size changes.

    Parameters
    ----------
    shape, strides : sequence of int
    old_itemsize, new_itemsize : int
        Item sizes in bytes of the current and the new dtype.

    Returns
    -------
    shape, strides : tuple of int
        Layout of the view: NumPy rescales the last axis.

    Raises
    ------
    ValueError
        For a 0-d array with a different item size, a last axis that is not
        contiguous, or sizes that do not divide (NumPy's messages, plus the
        values involved).
    """
    shape, strides = _layout(shape, strides)
    old, new = operator.index(old_itemsize), operator.index(new_itemsize)
    if old == new:
        return shape, strides
    if not shape:
        raise ValueError(
            f"Changing the dtype of a 0d array is only supported "
            f"if the itemsize is unchanged ({old} -> {new})"
        )
    n, s = shape[-1], strides[-1]
    if n != 1 and 0 not in shape and s != old:
        raise ValueError(
            f"To change to a dtype of a different size, the last "
            f"axis must be contiguous (stride {s}, itemsize {old})"
        )
    if new < old:
        if new <= 0 or old % new:
            raise ValueError(
                f"When changing to a smaller dtype, its size must "
                f"be a divisor of the size of original dtype "
                f"({new} does not divide {old})"
            )
        n *= old // new
    else:
        if (n * old) % new:
            raise ValueError(
                f"When changing to a larger dtype, its size must "
                f"be a divisor of the total size in bytes of the "
                f"last axis of the array ({new} does not divide "
                f"{n * old})"
            )
        n = n * old // new
    return shape[:-1] + (n,), strides[:-1] + (new,)
