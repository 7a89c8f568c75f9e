"""CUDA Array Interface consumer: wrap foreign device memory zero-copy.

Ownership: ``as_cuda_array(obj)`` keeps ``obj`` alive as long as the array or
any view of it lives; ``from_cuda_array_interface(desc, owner=None)`` keeps
nothing alive unless ``owner`` is given.

Stream ordering (``sync=True``, the default, unless
``GPUARRAY_CUDA_ARRAY_INTERFACE_SYNC=0``), never blocking the host: with an
owner, the new array adopts the producer's stream as its default stream (the
owner keeps the stream alive), so every later operation is ordered after the
producer's work; without one, the library default stream waits on an event
recorded on the producer's stream.

When you pass ``arr.ptr`` (or the CAI pointer) to code outside gpuarray
yourself, that code must order its work after ``arr.stream``: run on that
stream, or record an event on it and wait on the event from your stream.
"""

from __future__ import annotations

from typing import Any

from .. import _config
from .._array import DeviceNDArray
from .._device import Device, get_device
from .._driver import get_backend
from .._driver._base import MEMORYTYPE_DEVICE, MEMORYTYPE_HOST
from .._stream import default_stream, external_stream, order_after
from ..memory import MemoryPointer
from ._cai_desc import parse_cai

__all__ = ["as_cuda_array", "from_cuda_array_interface", "is_cuda_array"]


def is_cuda_array(obj: Any) -> bool:
    """Whether ``obj`` exports ``__cuda_array_interface__``.

    Parameters
    ----------
    obj : object

    Returns
    -------
    bool

    Examples
    --------
    >>> gpuarray.is_cuda_array(gpuarray.zeros(3))   # doctest: +SKIP
    True
    """
    return hasattr(obj, "__cuda_array_interface__")


def _device_of(ptr: int) -> tuple[Device, int]:
    """The device owning ``ptr`` and its DLPack memory kind (2 device, 3 host, 13 managed)."""
    current = get_device()
    if ptr == 0:
        return current, 2
    info = get_backend().pointer_info(ptr)
    if info.memory_type == MEMORYTYPE_DEVICE or info.is_managed:
        dev = get_device(info.device_ordinal) if info.device_ordinal >= 0 else current
        return dev, 13 if info.is_managed else 2
    if info.memory_type == MEMORYTYPE_HOST:
        return current, 3
    raise ValueError(f"__cuda_array_interface__ data pointer 0x{ptr:x} is not memory CUDA knows "
                     "(pageable host memory or a freed/invalid address)")


def from_cuda_array_interface(desc: Any, owner: Any = None, sync: bool = True) -> DeviceNDArray:
    """Make a zero-copy array from a ``__cuda_array_interface__`` dictionary.

    Parameters
    ----------
    desc : dict
        The interface dictionary (versions 0 to 3).
    owner : object, optional
        Kept alive as long as the array and its views; when given, the array
        adopts the producer's stream as its default stream.
    sync : bool, default True
        Order the new array after the producer's stream (no host blocking).

    Returns
    -------
    DeviceNDArray
        Read-only when the interface says so.

    Raises
    ------
    TypeError, ValueError
        For a malformed description; the message names the key.
    NotImplementedError
        For a mask.

    Examples
    --------
    >>> a = gpuarray.from_cuda_array_interface(c.__cuda_array_interface__, owner=c)   # doctest: +SKIP
    """
    d = parse_cai(desc)
    # A size-0 array touches no memory: its pointer may be anything (e.g. one
    # past the end of an allocation), so it is never looked up.
    dev, kind = _device_of(d.ptr if d.size else 0)
    lo = hi = 0  # the extent, as _layout.extent, on already validated ints
    if d.size:
        for n, st in zip(d.shape, d.strides, strict=True):
            if st < 0:
                lo += st * (n - 1)
            else:
                hi += st * (n - 1)
        hi += d.dtype.itemsize
    mem = MemoryPointer(dev, d.ptr + lo if d.size else 0, hi - lo, owner=owner)
    stream = default_stream(dev)
    if sync and d.stream is not None and _config.get().cai_import_sync:
        producer = external_stream(d.stream, dev, owner=owner)
        if owner is not None:
            stream = producer
        else:
            order_after(stream, producer)
    arr = DeviceNDArray._make(d.shape, d.strides, d.dtype, d.ptr, mem, stream, d.readonly, dev)
    arr._dl = kind
    return arr


def as_cuda_array(obj: Any, sync: bool = True) -> DeviceNDArray:
    """A zero-copy :class:`DeviceNDArray` over an object's device memory.

    Parameters
    ----------
    obj : object
        Exports ``__cuda_array_interface__`` (CuPy, PyTorch, Numba, JAX ...).
        A DeviceNDArray is returned as is.
    sync : bool, default True
        Order the array after the producer's stream (adopting it as the
        array's default stream), without blocking the host.

    Returns
    -------
    DeviceNDArray
        Keeps ``obj`` alive as long as it or any view of it lives.

    Raises
    ------
    TypeError
        If ``obj`` does not export the interface.

    Examples
    --------
    >>> a = gpuarray.as_cuda_array(cupy.arange(4))   # doctest: +SKIP
    """
    if isinstance(obj, DeviceNDArray):
        return obj
    try:
        desc = obj.__cuda_array_interface__
    except AttributeError:
        raise TypeError(f"{type(obj).__name__} object does not export __cuda_array_interface__") from None
    return from_cuda_array_interface(desc, owner=obj, sync=sync)
