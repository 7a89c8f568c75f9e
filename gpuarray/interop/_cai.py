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

from .. import _config, _layout
from .._array import DeviceNDArray
from .._device import Device, get_device
from .._driver import get_backend
from .._driver._base import MEMORYTYPE_DEVICE, MEMORYTYPE_HOST
from .._graph import note_foreign_unmapped
from .._stream import default_stream, external_stream, legacy_default_stream, order_after
from ..memory import MemoryPointer
from ._cai_desc import parse_cai, parse_fields

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


def _device_of(ptr: int, lo: int, hi: int, info: Any = None) -> tuple[Device, int]:
    """The device owning ``ptr`` and its DLPack memory kind (2 device, 3 host, 13 managed).

    One pointer query (``info``, when the caller made it), which also gives
    the allocation: the bytes the import addresses, ``[ptr + lo, ptr + hi)``,
    must lie inside it.
    """
    if ptr + lo < 0 or ptr + hi > 2**64:
        raise ValueError(f"__cuda_array_interface__ data pointer 0x{ptr:x} with its shape and "
                         f"strides addresses [{ptr + lo:#x}, {ptr + hi:#x}), outside the "
                         "64-bit address space")
    if info is None:
        info = get_backend().pointer_info(ptr)
    if info.memory_type == MEMORYTYPE_DEVICE or info.is_managed:
        dev = get_device(info.device_ordinal) if info.device_ordinal >= 0 else get_device()
        kind = 13 if info.is_managed else 2
    elif info.memory_type == MEMORYTYPE_HOST:
        dev, kind = get_device(), 3
    else:
        raise ValueError(f"__cuda_array_interface__ data pointer 0x{ptr:x} is not memory CUDA "
                         "knows (pageable host memory or a freed/invalid address)")
    base, size = info.base, info.size
    if size and (ptr + lo < base or ptr + hi > base + size):
        over = max(base - (ptr + lo), ptr + hi - (base + size))
        raise ValueError(f"__cuda_array_interface__ data 0x{ptr:x} with its shape and strides "
                         f"addresses [{ptr + lo:#x}, {ptr + hi:#x}), {over} bytes outside its "
                         f"allocation [{base:#x}, {base + size:#x})")
    return dev, kind


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
        For a malformed description (the message names the key), memory CUDA
        does not know, or shape and strides that reach outside the pointer's
        allocation (the message names the overshoot; size 0 is exempt).
    NotImplementedError
        For a mask.

    Examples
    --------
    >>> a = gpuarray.from_cuda_array_interface(c.__cuda_array_interface__, owner=c)   # doctest: +SKIP
    """
    fields = parse_fields(desc)
    if fields is None:
        d = parse_cai(desc)
        lo, hi = _layout.extent(d.shape, d.strides, d.dtype.itemsize)
        fields = (d.ptr, d.shape, d.strides, d.dtype, d.readonly, d.stream, d.size, lo, hi)
    ptr, shape, strides, dtype, readonly, stream_value, size, lo, hi = fields
    if size:
        # _device_of, inlined on the common path (device memory inside its allocation)
        info = get_backend().pointer_info(ptr)
        base = info.base
        if (info.memory_type == MEMORYTYPE_DEVICE and not info.is_managed
                and info.device_ordinal >= 0 and base <= ptr + lo
                and ptr + hi <= base + info.size):
            dev, kind = get_device(info.device_ordinal), 2
        else:
            dev, kind = _device_of(ptr, lo, hi, info)
        if not info.mapped:  # another library's graph memory, its graph not launched yet
            note_foreign_unmapped(info.base, info.size, dev)
        mem = MemoryPointer(dev, ptr + lo, hi - lo, owner)
    else:
        # A size-0 array touches no memory: its pointer may be anything (e.g.
        # one past the end of an allocation), so it is never looked up.
        dev, kind = get_device(), 2
        mem = MemoryPointer(dev, 0, 0, owner=owner)
    if sync and stream_value is not None and _config.get().cai_import_sync:
        producer = (legacy_default_stream(dev) if stream_value == 1
                    else external_stream(stream_value, dev, owner=owner))
        if owner is not None:
            stream = producer
        else:
            stream = default_stream(dev)
            order_after(stream, producer)
    else:
        stream = default_stream(dev)
    # Imported memory is not stream-ordered (no stream to record on it) unless the
    # owner is gpuarray memory itself.
    arr = DeviceNDArray._make(shape, strides, dtype, ptr, mem, stream, readonly, dev,
                              isinstance(owner, MemoryPointer))
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
    if sync and _unready_v2(obj, desc) and _config.get().cai_import_sync:
        obj.block_until_ready()
    return from_cuda_array_interface(desc, obj, sync)


def _unready_v2(obj: Any, desc: Any) -> bool:
    """Whether ``obj`` is a JAX-like producer whose export says nothing of readiness.

    JAX exports CAI version 2 (no ``stream``) without waiting for the array's
    data to be written (jaxlib's ``CudaArrayInterface``, unlike its buffer
    protocol); an import read an earlier array's bytes on an H200 (2026-11-28).
    Such a producer has ``block_until_ready()``, which ``as_cuda_array`` calls.
    """
    return (isinstance(desc, dict) and desc.get("stream") is None
            and hasattr(obj, "block_until_ready"))
