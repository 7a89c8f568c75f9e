"""Creating device arrays: allocation, filling, and transfers from the host.

Names follow Numba (``to_device``, ``device_array``, ``device_array_like``)
and NumPy (``empty``, ``zeros``, ``ones``, ``full``, ``*_like``, ``asarray``).
New arrays are allocated through the active memory manager on the current
device and get ``stream`` (default: the library default stream) as their
default stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _layout
from ._array import DeviceNDArray, _check_dtype, _shape_tuple, upload
from ._coerce import as_device_source
from ._driver import get_backend
from ._driver._base import MEMORYTYPE_HOST
from ._stream import _device_for, as_stream
from .interop import _core as _cap
from .memory import MemoryPointer, allocate

__all__ = ["to_device", "device_array", "device_array_like", "empty", "zeros", "ones", "full",
           "empty_like", "zeros_like", "ones_like", "full_like", "asarray"]


def _new(shape, dtype, strides=None, order: str = "C", stream: Any = None) -> DeviceNDArray:
    dtype = _check_dtype(dtype)
    shape = _shape_tuple(shape)
    order = order.upper()
    if strides is None:
        if order not in ("C", "F"):
            raise ValueError(f"order must be 'C' or 'F', got {order!r}")
        strides = (_layout.f_strides if order == "F" else _layout.c_strides)(shape, dtype.itemsize)
    else:
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape):
            raise ValueError(f"strides {strides} do not match shape {shape}")
        if any(s < 0 for s in strides):
            raise ValueError(f"strides {strides} must be non-negative for a new array")
    dev = _device_for(stream)
    _, hi = _layout.extent(shape, strides, dtype.itemsize)
    s = as_stream(stream, dev)
    mem = allocate(hi, dev, s)
    return DeviceNDArray._make(shape, strides, dtype, mem.device_pointer, mem, s, False, dev)


def device_array(shape, dtype=np.float64, strides=None, order: str = "C", stream: Any = None) -> DeviceNDArray:
    """Allocate an uninitialised device array.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : data-type, default float64
    strides : tuple of int, optional
        Byte strides (non-negative).
    order : {"C", "F"}
    stream : Stream, optional
        The array's default stream; the array is allocated on its device.

    Returns
    -------
    DeviceNDArray

    Examples
    --------
    >>> d = gpuarray.device_array((2, 3), dtype=np.float32)   # doctest: +SKIP
    """
    return _new(shape, dtype, strides, order, stream)


def empty(shape, dtype=np.float64, order: str = "C", stream: Any = None) -> DeviceNDArray:
    """Allocate an uninitialised device array (NumPy's name for :func:`device_array`).

    Parameters
    ----------
    shape : int or tuple of int
    dtype : data-type, default float64
    order : {"C", "F"}
    stream : Stream, optional

    Returns
    -------
    DeviceNDArray
    """
    return _new(shape, dtype, None, order, stream)


def full(shape, fill_value: Any, dtype=None, order: str = "C", stream: Any = None) -> DeviceNDArray:
    """A device array filled with ``fill_value``.

    Parameters
    ----------
    shape : int or tuple of int
    fill_value : scalar
    dtype : data-type, optional
        Default: the NumPy dtype of ``fill_value``.
    order : {"C", "F"}
    stream : Stream, optional

    Returns
    -------
    DeviceNDArray

    Examples
    --------
    >>> gpuarray.full(3, 7, dtype=np.int32).copy_to_host()   # doctest: +SKIP
    array([7, 7, 7], dtype=int32)
    """
    dtype = np.asarray(fill_value).dtype if dtype is None else dtype
    return _new(shape, dtype, None, order, stream).fill(fill_value)


def zeros(shape, dtype=np.float64, order: str = "C", stream: Any = None) -> DeviceNDArray:
    """A device array of zeros.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : data-type, default float64
    order : {"C", "F"}
    stream : Stream, optional
        The array's default stream; the array is allocated on its device.

    Returns
    -------
    DeviceNDArray

    Examples
    --------
    >>> gpuarray.zeros((2, 2)).copy_to_host().sum()   # doctest: +SKIP
    0.0
    """
    return full(shape, 0, dtype, order, stream)


def ones(shape, dtype=np.float64, order: str = "C", stream: Any = None) -> DeviceNDArray:
    """A device array of ones.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : data-type, default float64
    order : {"C", "F"}
    stream : Stream, optional
        The array's default stream; the array is allocated on its device.

    Returns
    -------
    DeviceNDArray

    Examples
    --------
    >>> gpuarray.ones(2, np.int8).copy_to_host()   # doctest: +SKIP
    array([1, 1], dtype=int8)
    """
    return full(shape, 1, dtype, order, stream)


def _like_order(a: Any, order: str) -> str:
    order = order.upper()
    if order in ("K", "A"):
        f = a.flags["F_CONTIGUOUS"] if isinstance(a.flags, dict) else a.flags.f_contiguous
        c = a.flags["C_CONTIGUOUS"] if isinstance(a.flags, dict) else a.flags.c_contiguous
        return "F" if f and not c else "C"
    return order


def empty_like(a: Any, dtype=None, order: str = "K", stream: Any = None) -> DeviceNDArray:
    """An uninitialised device array with the shape (and, by default, dtype and order) of ``a``.

    Parameters
    ----------
    a : array_like
        Host or device array.
    dtype : data-type, optional
    order : {"K", "A", "C", "F"}
    stream : Stream, optional

    Returns
    -------
    DeviceNDArray
    """
    return _new(a.shape, a.dtype if dtype is None else dtype, None, _like_order(a, order), stream)


def zeros_like(a: Any, dtype=None, order: str = "K", stream: Any = None) -> DeviceNDArray:
    """A device array of zeros shaped like ``a``.

    Parameters
    ----------
    a : array_like
        Host or device array whose shape (and, by default, dtype and order) to use.
    dtype : data-type, optional
    order : {"K", "A", "C", "F"}
    stream : Stream, optional

    Returns
    -------
    DeviceNDArray
    """
    return empty_like(a, dtype, order, stream).fill(0)


def ones_like(a: Any, dtype=None, order: str = "K", stream: Any = None) -> DeviceNDArray:
    """A device array of ones shaped like ``a``.

    Parameters
    ----------
    a : array_like
        Host or device array whose shape (and, by default, dtype and order) to use.
    dtype : data-type, optional
    order : {"K", "A", "C", "F"}
    stream : Stream, optional

    Returns
    -------
    DeviceNDArray
    """
    return empty_like(a, dtype, order, stream).fill(1)


def full_like(a: Any, fill_value: Any, dtype=None, order: str = "K", stream: Any = None) -> DeviceNDArray:
    """A device array shaped like ``a`` filled with ``fill_value``.

    Parameters
    ----------
    a : array_like
    fill_value : scalar
    dtype : data-type, optional
    order : {"K", "A", "C", "F"}
    stream : Stream, optional

    Returns
    -------
    DeviceNDArray
    """
    return empty_like(a, dtype, order, stream).fill(fill_value)


def device_array_like(ary: Any, stream: Any = None) -> DeviceNDArray:
    """An uninitialised device array with the shape, dtype and layout order of ``ary``.

    Parameters
    ----------
    ary : array_like
    stream : Stream, optional

    Returns
    -------
    DeviceNDArray
    """
    return empty_like(ary, stream=stream)


def _host_array(obj: Any, dtype: Any = None) -> np.ndarray:
    host = np.asarray(obj, dtype=dtype)
    if host.dtype.hasobject:
        raise TypeError(f"cannot put an array of Python objects on the device (from {type(obj).__name__})")
    if not host.dtype.isnative:
        host = host.astype(host.dtype.newbyteorder("="))
    return host


def _mapped_view(host: np.ndarray, stream: Any) -> DeviceNDArray | None:
    """A zero-copy device view of host memory mapped into the device, else None."""
    if host.size == 0:
        return None
    b = get_backend()
    dev = _device_for(stream)
    with dev.activate():
        addr = _cap.host_address(host)
        info = b.pointer_info(addr)
        if info.memory_type != MEMORYTYPE_HOST:
            return None
        try:
            dptr = b.mem_host_get_device_pointer(addr)
        except Exception:  # pinned but not mapped
            return None
    lo, hi = _layout.extent(host.shape, host.strides, host.itemsize)
    mem = MemoryPointer(dev, dptr + lo, hi - lo, owner=host)
    arr = DeviceNDArray._make(host.shape, host.strides, host.dtype, dptr, mem,
                              as_stream(stream, dev), not host.flags.writeable, dev)
    arr._dl = 3  # page-locked host memory (kDLCUDAHost)
    return arr


def to_device(obj: Any, stream: Any = None, copy: bool = True, to: DeviceNDArray | None = None) -> DeviceNDArray:
    """Copy host data (or another device array) to a new device array.

    Parameters
    ----------
    obj : array_like
        NumPy array, scalar or sequence; or a device array (DeviceNDArray,
        CAI or DLPack exporter), which is copied on the device.
    stream : Stream, optional
        Stream of the copy and default stream of the result, which is
        allocated on the stream's device.  Without it the copy runs on the
        library default stream of the current device.
    copy : bool, default True
        False allocates the result without copying the data (Numba's meaning).
    to : DeviceNDArray, optional
        Copy into this existing array instead (shapes must match or broadcast).

    Returns
    -------
    DeviceNDArray
        C- or Fortran-ordered like ``obj`` when it is contiguous, else C-ordered.

    Examples
    --------
    >>> d = gpuarray.to_device(np.arange(4.0))   # doctest: +SKIP
    >>> d.copy_to_host()                          # doctest: +SKIP
    array([0., 1., 2., 3.])
    """
    if to is not None:
        if not isinstance(to, DeviceNDArray):
            raise TypeError(f"to= must be a DeviceNDArray, got {type(to).__name__}")
        to.copy_to_device(obj, stream=stream)
        return to
    if type(obj) is np.ndarray and (dt := obj.dtype).isnative and not dt.hasobject:
        host = obj  # the common case: no coercion probes
    else:
        src = as_device_source(obj)
        if isinstance(src, DeviceNDArray):
            return _device_copy(src, stream, copy)
        host = _host_array(src)
    return upload(host, stream, copy)


def _device_copy(src: DeviceNDArray, stream: Any, copy: bool) -> DeviceNDArray:
    """A new array like device array ``src`` (its order), with its data when ``copy``."""
    order = _like_order(src, "K")
    out = _new(src.shape, src.dtype, None, order, stream if stream is not None else src.stream)
    if copy:
        out._copy_from(src, out.stream)  # the copy's stream: stream= else src's, out's either way
    return out


def asarray(obj: Any, dtype: Any = None, stream: Any = None) -> DeviceNDArray:
    """A device array for ``obj``, without copying when it already is one.

    Parameters
    ----------
    obj : array_like
        A DeviceNDArray (returned as is), a CAI or DLPack device exporter
        (wrapped zero-copy, kept alive), page-locked mapped host memory
        (a zero-copy device view), or host data (copied).
    dtype : data-type, optional
        Cast (a copy) when it differs.
    stream : Stream, optional
        Stream of any copy and default stream of a new array.

    Returns
    -------
    DeviceNDArray

    Examples
    --------
    >>> d = gpuarray.asarray(torch.arange(3, device="cuda"))   # doctest: +SKIP
    """
    src = as_device_source(obj)
    if isinstance(src, DeviceNDArray):
        if dtype is not None and np.dtype(dtype) != src.dtype:
            return src.astype(dtype, stream=stream)
        return src
    host = _host_array(src, dtype)
    view = _mapped_view(host, stream)
    if view is not None:
        return view
    return to_device(host, stream=stream)
