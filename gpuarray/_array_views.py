"""How a ``DeviceNDArray`` makes views of itself: reshaping and indexing.

One concern: every way to get another array over the same memory --
``transpose``, ``reshape`` (a copy only when no view can do), ``ravel``,
``view``, ``squeeze``, ``bind``, ``split`` and basic indexing
(``__getitem__``, ``getitem``) -- and assignment to an indexed selection
(``__setitem__``, ``setitem``).  :class:`ArrayViewsMixin` holds it;
``DeviceNDArray`` inherits it and provides the layout, ``_view`` (a view at a
byte offset, sharing the memory pointer and the stream), ``_assign`` and
``copy``.  Layout arithmetic is ``_layout``'s; a scalar result is copied to
the host and complete on return.  Structured arrays: ``arr[name]`` is NumPy's
field view (same shape and strides, the field's dtype, the field's byte
offset; a subarray field adds its dimensions).  An element of a structured
array, ``arr[i]``, is a 0-d view (a *record*, as Numba's ``DeviceRecord``)
whose fields can be read and assigned: ``arr[i]["a"] = 5`` writes the device
memory.  Reading a field of a record that is a plain scalar returns a host
scalar (complete on return), as Numba and NumPy do; nested records and
subarray fields stay device views.
``_check_dtype`` (which dtypes device memory holds) lives here because
``view`` needs it; ``_array`` re-exports it.
"""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _layout, _transfer
from ._stream import as_stream, order_after
from .memory import record_stream

if TYPE_CHECKING:  # DeviceNDArray inherits this mixin: its methods return Self
    from typing_extensions import Self

    from ._device import Device
    from ._stream import Stream
    from .memory import MemoryPointer

__all__ = ["ArrayViewsMixin"]


def _check_dtype(dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError(f"dtype {dt} holds Python objects and cannot live in device memory")
    if dt.byteorder == (">" if np.little_endian else "<"):
        raise TypeError(f"dtype {dt.str} is not in native byte order; use {dt.newbyteorder('=').str}")
    return dt


class ArrayViewsMixin:
    """Views of the array (reshaping, indexing) and assignment to an indexed selection."""

    if not TYPE_CHECKING:  # to mypy, the attributes below are the mixin's own (Self is typed as it)
        __slots__ = ()

    # Provided by DeviceNDArray.
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype
    stream: Stream
    device: Device
    _mem: MemoryPointer
    _ptr: int

    if TYPE_CHECKING:
        @property
        def size(self) -> int: ...

        @property
        def ndim(self) -> int: ...

        def _view(self, shape, strides, offset: int = 0, dtype=None) -> Self: ...

        def _contiguity(self) -> tuple[bool, bool]: ...

        def is_c_contiguous(self) -> bool: ...

        def is_f_contiguous(self) -> bool: ...

        def _check_writeable(self, what: str) -> None: ...

        def _stream(self, stream: Any) -> Stream: ...

        def copy(self, order: str = "C", stream: Any = None) -> Self: ...

        def copy_to_host(self, ary: Any = None, stream: Any = None) -> Any: ...

        def _assign(self, value: Any, s: Stream) -> None: ...

    # --------------------------------------------------------------- views
    def transpose(self, *axes: Any) -> Self:
        """Permute the axes (a view).

        Parameters
        ----------
        *axes : int or a tuple of int, optional
            Default: reverse the axes.

        Returns
        -------
        DeviceNDArray
        """
        perm: Any = axes
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            perm = axes[0]
        if not perm:  # the common case needs no validation
            return self._view(self.shape[::-1], self.strides[::-1])
        shape, strides = _layout.transpose(self.shape, self.strides, perm)
        return self._view(shape, strides)

    def reshape(self, *newshape: Any, order: str = "C", copy: bool | None = None) -> Self:
        """Give the array a new shape: a view when possible, else a copy (as NumPy).

        Parameters
        ----------
        *newshape : int or tuple of int
            One entry may be -1.
        order : {"C", "F", "A"}
        copy : bool, optional
            False: raise instead of copying; True: always copy.

        Returns
        -------
        DeviceNDArray

        Raises
        ------
        ValueError
            If the sizes differ, or a copy is needed and ``copy=False``.
        """
        if len(newshape) == 1:
            n = newshape[0]
            if type(n) is int and order == "C" and not copy and n >= 0:
                # reshape(n) of a C-contiguous array, the common case: no planner
                if n == math.prod(self.shape) and self._contiguity()[0]:
                    return self._view((n,), (self.dtype.itemsize,))
            if not isinstance(n, (int, np.integer)):
                newshape = n
        shape = _layout.normalize_shape(newshape, self.size, oldshape=self.shape)
        order = order.upper()
        if order == "A":
            order = "F" if self.is_f_contiguous() and not self.is_c_contiguous() else "C"
        if copy:
            strides = None
        elif order == "C" and self.is_c_contiguous():
            strides = _layout.c_strides(shape, self.dtype.itemsize)
        else:
            strides = _layout.reshape_strides(self.shape, self.strides, self.dtype.itemsize,
                                              shape, order)
        if strides is not None:
            return self._view(shape, strides)
        if copy is False:
            raise ValueError(f"cannot reshape {self.shape} with strides {self.strides} to {shape} "
                             "without copying (copy=False)")
        return self.copy(order=order).reshape(shape, order=order)

    def ravel(self, order: str = "C") -> Self:
        """A 1-D array of the elements (a view when possible, else a copy).

        Parameters
        ----------
        order : {"C", "F", "A"}
            Read the elements in C or Fortran order.

        Returns
        -------
        DeviceNDArray
        """
        return self.reshape(-1, order=order)

    def view(self, dtype: Any) -> Self:
        """The same memory read as ``dtype`` (NumPy's ``ndarray.view`` rules).

        Parameters
        ----------
        dtype : data-type

        Returns
        -------
        DeviceNDArray
        """
        dt = _check_dtype(dtype)
        shape, strides = _layout.view_as_dtype(self.shape, self.strides, self.dtype.itemsize, dt.itemsize)
        return self._view(shape, strides, dtype=dt)

    def squeeze(self, axis: Any = None) -> Self:
        """Remove axes of length one (a view).

        Parameters
        ----------
        axis : int or tuple of int, optional
            The axes to remove (each must have length one); all length-one
            axes when omitted.

        Returns
        -------
        DeviceNDArray

        Raises
        ------
        ValueError
            If a selected axis does not have length one.
        """
        shape, strides = _layout.squeeze(self.shape, self.strides, axis)
        return self._view(shape, strides)

    def bind(self, stream: Any = None) -> Self:
        """The same array with another default stream (a view).

        Parameters
        ----------
        stream : Stream, int or None

        Returns
        -------
        DeviceNDArray
        """
        v = self._view(self.shape, self.strides)
        v.stream = as_stream(stream, self.device)
        record_stream(v._mem, v.stream)
        return v

    def split(self, section: int, stream: Any = None) -> list[Self]:
        """Split a 1-D array into views of ``section`` elements (the last may be shorter).

        Parameters
        ----------
        section : int
        stream : Stream, optional
            Default stream of the pieces (default: this array's).

        Returns
        -------
        list of DeviceNDArray
        """
        if self.ndim != 1:
            raise ValueError(f"split() needs a 1-D array, got shape {self.shape}")
        section = operator.index(section)
        if section <= 0:
            raise ValueError(f"section must be positive, got {section}")
        s = self.stream if stream is None else as_stream(stream, self.device)
        out = []
        for start in range(0, self.shape[0], section):
            n = min(section, self.shape[0] - start)
            v = self._view((n,), self.strides, start * self.strides[0])
            v.stream = s
            record_stream(v._mem, s)
            out.append(v)
        return out

    def __getitem__(self, key: Any) -> Any:
        """Basic indexing as NumPy: a view, or a NumPy scalar when every axis gets an int.

        Ints, slices with any step, Ellipsis and None; anything else (lists,
        arrays, booleans) raises ``IndexError`` naming the key.  A scalar
        result is copied to the host and complete on return.  For a
        structured dtype, an element is a 0-d *view* (a record, as Numba's
        ``DeviceRecord``) and a field name gives the field's view, so
        ``d[i]["a"] = 5`` writes the device memory.
        """
        if isinstance(key, str):
            return self._get_field(key)
        shape = self.shape
        if type(key) is slice and key.step is None and shape:
            # a[i:j], the most common key: no general index planner
            start, stop = key.start, key.stop
            if (start is None or type(start) is int) and (stop is None or type(stop) is int):
                start, stop, _ = key.indices(shape[0])
                s0 = self.strides[0]
                if stop > start:
                    return self._view((stop - start, *shape[1:]), self.strides, start * s0)
                return self._view((0, *shape[1:]), self.strides)
        r = _layout.index(shape, self.strides, key)
        v = self._view(r.shape, r.strides, r.offset)
        if r.scalar:
            if self.dtype.names is not None:
                return v  # a record: a 0-d view whose fields write through (Numba's DeviceRecord)
            return v.copy_to_host()[()]
        return v

    def getitem(self, item: Any, stream: Any = None) -> Any:
        """``self[item]`` with the work on ``stream`` (Numba's ``getitem``).

        Parameters
        ----------
        item : index
            As for ``self[item]``.
        stream : Stream, optional
            A scalar is copied on this stream (complete on return); a view
            gets it as its default stream, ordered after this array's pending
            work.  Without it, the same as ``self[item]``.

        Returns
        -------
        DeviceNDArray or NumPy scalar

        Raises
        ------
        IndexError
            For an index that is not basic indexing or is out of range.

        Examples
        --------
        >>> s = gpuarray.stream()
        >>> gpuarray.to_device(np.arange(5)).getitem(3, stream=s)
        np.int64(3)
        """
        if stream is None:
            return self[item]
        s = as_stream(stream, self.device)
        if isinstance(item, str):
            v = self._field_view(item)
        else:
            r = _layout.index(self.shape, self.strides, item)
            v = self._view(r.shape, r.strides, r.offset)
        if not v.shape and v.dtype.names is None and (isinstance(item, str) or r.scalar):
            with _transfer.on_stream(s, self.stream):
                host = np.empty((), dtype=v.dtype)
                _transfer.dtoh(self.device, s, host, v._ptr, v.strides, v.dtype, sync=True)
            return host[()]
        order_after(s, self.stream)
        v.stream = s
        record_stream(v._mem, s)
        return v

    def setitem(self, key: Any, value: Any, stream: Any = None) -> None:
        """``self[key] = value`` with the copy on ``stream`` (Numba's ``setitem``).

        Parameters
        ----------
        key : index
            As for ``self[key] = value`` (a field name for structured arrays).
        value : array_like or scalar
        stream : Stream, optional
            Where the copy runs (ordered with this array's stream as every
            operation with ``stream=``).  Default: this array's stream.

        Raises
        ------
        ValueError
            For a read-only array, or a value that does not broadcast.

        Examples
        --------
        >>> d = gpuarray.zeros(4, dtype=np.int32)
        >>> d.setitem(slice(1, 3), 7, stream=gpuarray.stream())
        >>> d.copy_to_host()
        array([0, 7, 7, 0], dtype=int32)
        """
        self._check_writeable("assignment")
        s = self._stream(stream)
        if isinstance(key, str):
            v = self._field_view(key)
        else:
            if self.dtype.names is not None and isinstance(value, (tuple, list)):
                # records given as tuples (or a list of them), as NumPy takes them
                value = np.array(value, dtype=self.dtype)
            r = _layout.index(self.shape, self.strides, key)
            v = self._view(r.shape, r.strides, r.offset)
        v._assign(value, s)

    def __setitem__(self, key: Any, value: Any) -> None:
        """Assign to a basic-indexing selection, broadcasting and casting as NumPy.

        ``value`` may be a scalar, host data, a DeviceNDArray, or an object
        exporting ``__cuda_array_interface__`` or ``__dlpack__``; overlapping
        sources give NumPy's result.  Runs on the array's stream.
        """
        self.setitem(key, value)

    # ------------------------------------------------- structured fields
    def _field_view(self, name: str) -> Self:
        """The view of field ``name`` of this structured array.

        Raises
        ------
        IndexError
            If ``arr`` has no fields (NumPy's error for a string index).
        ValueError
            If ``arr``'s dtype has no field ``name`` (NumPy's error).
        """
        fields = self.dtype.fields
        if fields is None:
            raise IndexError(f"only integers, slices, Ellipsis and None are valid indices of an array "
                             f"of dtype {self.dtype}, got the field name {name!r}")
        entry = fields.get(name)
        if entry is None:
            raise ValueError(f"no field of name {name!r} in dtype {self.dtype} "
                             f"(fields: {', '.join(map(repr, self.dtype.names or ()))})")
        fdt: np.dtype = entry[0]
        offset: int = entry[1]
        shape, strides = self.shape, self.strides
        sub = fdt.subdtype
        if sub is not None:
            base, subshape = sub
            shape = shape + subshape
            strides = strides + _layout.c_strides(subshape, base.itemsize)
            fdt = base
        return self._view(shape, strides, offset, dtype=fdt)


    def _get_field(self, name: str) -> Any:
        """``arr[name]``: a view, or a host scalar for a plain field of a record."""
        v = self._field_view(name)
        if not v.shape and v.dtype.names is None:
            return v.copy_to_host()[()]
        return v
