"""Fields of structured arrays: ``d["a"]`` views and Numba's ``DeviceRecord`` behaviour.

One concern: turning a field name into a view of a structured
``DeviceNDArray``.  ``arr[name]`` is NumPy's field view (same shape and
strides, the field's dtype, the field's byte offset; a subarray field adds
its dimensions).  An element of a structured array, ``arr[i]``, is a 0-d
view (a *record*, as Numba's ``DeviceRecord``) whose fields can be read and
assigned: ``arr[i]["a"] = 5`` writes the device memory.  Reading a field of a
record that is a plain scalar returns a host scalar (complete on return), as
Numba and NumPy do; nested records and subarray fields stay device views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _layout

if TYPE_CHECKING:  # the array module imports this one
    from ._array import DeviceNDArray

__all__ = ["field_view", "get_field"]


def field_view(arr: DeviceNDArray, name: str) -> DeviceNDArray:
    """The view of field ``name`` of structured array ``arr``.

    Raises
    ------
    IndexError
        If ``arr`` has no fields (NumPy's error for a string index).
    ValueError
        If ``arr``'s dtype has no field ``name`` (NumPy's error).
    """
    fields = arr.dtype.fields
    if fields is None:
        raise IndexError(f"only integers, slices, Ellipsis and None are valid indices of an array "
                         f"of dtype {arr.dtype}, got the field name {name!r}")
    entry = fields.get(name)
    if entry is None:
        raise ValueError(f"no field of name {name!r} in dtype {arr.dtype} "
                         f"(fields: {', '.join(map(repr, arr.dtype.names or ()))})")
    fdt: np.dtype = entry[0]
    offset: int = entry[1]
    shape, strides = arr.shape, arr.strides
    sub = fdt.subdtype
    if sub is not None:
        base, subshape = sub
        shape = shape + subshape
        strides = strides + _layout.c_strides(subshape, base.itemsize)
        fdt = base
    return arr._view(shape, strides, offset, dtype=fdt)


def get_field(arr: DeviceNDArray, name: str) -> Any:
    """``arr[name]``: a view, or a host scalar for a plain field of a record."""
    v = field_view(arr, name)
    if not v.shape and v.dtype.names is None:
        return v.copy_to_host()[()]
    return v

