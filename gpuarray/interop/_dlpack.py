"""DLPack consumer: ``from_dlpack``, and host producers as NumPy views.

Capsule mechanics (structs, deleters, names) live in ``_dlpack_capsule``,
``__dlpack__`` keywords and version negotiation in ``_dlpack_protocol``, the
array's own export in ``_dlpack_export``. Consumer: the producer is asked to
order its work before our default stream; the producer's memory stays alive
until the last array viewing it dies, then its deleter runs once. This module
builds arrays, so it sits above ``_array`` (and imports nothing above it).
"""

from __future__ import annotations

import ctypes
import datetime
from typing import Any

import numpy as np

from .._array import DeviceNDArray, upload
from .._device import Device, get_device
from .._stream import Stream, default_stream, device_default_stream, order_after_producer
from ..memory import MemoryPointer
from ._dlpack_capsule import (
    ImportedTensor,
    consume_capsule,
    consume_exchange,
    exchange_api_of,
    exchange_stream,
    kDLCPU,
    kDLCUDA,
    kDLCUDAHost,
    kDLCUDAManaged,
)
from ._dlpack_protocol import DLPACK_MAX_VERSION, parse_dlpack_device

__all__ = ["from_dlpack", "host_array_from_dlpack", "source_from_table"]

_CapsuleType = type(datetime.datetime_CAPI)  # PyCapsule (types.CapsuleType from 3.13 on)
_DEVICE_KINDS = (kDLCUDA, kDLCUDAHost, kDLCUDAManaged)


def _target(device: Any, dev_type: int, dev_id: int) -> tuple[Device, Stream]:
    """The device of the result (``device=``, else the producer's CUDA device, else the
    current one) and its default stream."""
    if device is not None:
        if isinstance(device, Device):
            return device, default_stream(device)
        if not (isinstance(device, tuple) and len(device) == 2 and device[0] == kDLCUDA):
            raise ValueError(f"from_dlpack(device=...) must be a gpuarray.Device or (2, ordinal), got {device!r}")
        return device_default_stream(device[1])
    return device_default_stream(dev_id if dev_type == kDLCUDA else None)


def _request(x: Any, dev: Device, dev_type: int, copy: bool | None, device: Any,
             ours: Any = None) -> Any:
    # Streams are for memory the device accesses asynchronously: CUDA device
    # and managed memory. Host producers (kDLCPU, kDLCUDAHost) get None, as
    # the DLPack specification asks (PyTorch refuses a stream for them).
    if dev_type == kDLCUDA or dev_type == kDLCUDAManaged:
        stream = (default_stream(dev) if ours is None else ours).handle
    else:
        stream = None
    if copy is None and device is None:
        with dev.activate():  # PyTorch refuses to export from another current device
            try:
                return x.__dlpack__(stream=stream, max_version=DLPACK_MAX_VERSION)
            except TypeError:
                return x.__dlpack__(stream=stream)  # a producer without DLPack 1.x keywords
    kwargs: dict[str, Any] = {"stream": stream, "max_version": DLPACK_MAX_VERSION}
    if copy is not None:
        kwargs["copy"] = copy
    if device is not None and dev_type != kDLCPU:
        kwargs["dl_device"] = (kDLCUDA, dev.id)
    with dev.activate():
        try:
            return x.__dlpack__(**kwargs)
        except TypeError:
            if copy is not None or "dl_device" in kwargs:
                raise  # the caller asked for something an old producer cannot do
            return x.__dlpack__(stream=stream)


def _through_table(x: Any, api: Any) -> ImportedTensor | None:
    """``x``'s tensor through its type's DLPack C exchange table, or None.

    None when the table fails (the caller then takes the ``__dlpack__`` path,
    so the table adds no failure of its own).  The table's functions do no
    stream ordering: for device and managed memory our stream is made to
    wait for the producer's current work stream (NULL: the legacy default
    stream), as ``__dlpack__(stream=ours)`` would have done it.
    """
    try:
        t = consume_exchange(api, x)
    except Exception:
        return None
    kind = t.device_type
    if kind == kDLCUDA or kind == kDLCUDAManaged:
        try:
            handle = exchange_stream(api, kind, t.device_id)
            order_after_producer(t.device_id if kind == kDLCUDA else None, handle)
        except Exception:
            t.release()
            return None
    return t


def _host_view(t: ImportedTensor) -> np.ndarray:
    """A NumPy view of an imported host tensor (any strides, negative included).

    The view keeps ``t`` alive (through its buffer), so the producer's
    deleter runs when the last view dies.
    """
    lo, hi = t.extent
    if hi == lo:
        return np.empty(t.shape, dtype=t.dtype)
    buf = (ctypes.c_uint8 * (hi - lo)).from_address(t.data_ptr + lo)
    buf._dlpack_tensor = t  # type: ignore[attr-defined]  # lifetime: the view's base
    # A ctypes array exports the buffer protocol; NumPy's stub lists only some buffer types.
    view = np.ndarray(t.shape, t.dtype, buffer=buf,  # type: ignore[arg-type]
                      offset=-lo, strides=t.byte_strides)
    if t.readonly:
        view.flags.writeable = False
    return view


def host_array_from_dlpack(x: Any) -> np.ndarray:
    """A NumPy view of a host (``kDLCPU``) DLPack producer's data, zero-copy.

    Unlike ``np.from_dlpack`` it takes every dtype gpuarray maps (bfloat16
    included); the view keeps the producer's memory alive.

    Parameters
    ----------
    x : object
        A DLPack producer whose ``__dlpack_device__`` is ``(1, 0)``.

    Returns
    -------
    numpy.ndarray

    Raises
    ------
    BufferError
        The capsule is not host memory, or cannot be used (dtype, version).
    """
    api = exchange_api_of(type(x))
    t = None if api is None else _through_table(x, api)
    if t is None:
        t = consume_capsule(_request(x, get_device(), kDLCPU, None, None))
    if t.device_type != kDLCPU:
        t.release()
        raise BufferError(f"{type(x).__name__}.__dlpack__ gave DLPack device type "
                          f"{t.device_type}, not host memory (1)")
    return _host_view(t)


def _pinned_producer(x: Any) -> bool:
    """Whether ``x.__dlpack_device__()`` says page-locked host memory (kDLCUDAHost)."""
    get = getattr(x, "__dlpack_device__", None)
    try:
        return get is not None and get()[0] == kDLCUDAHost
    except Exception:
        return False


def _host_to_device(t: ImportedTensor, stream: Stream) -> DeviceNDArray:
    """A device copy of an imported host tensor, on ``stream`` (its device's default stream),
    complete when it returns (the producer may free its memory then)."""
    out = upload(_host_view(t), stream)
    stream.synchronize()
    return out


def from_dlpack(x: Any, *, device: Any = None, copy: bool | None = None) -> DeviceNDArray:
    """Import any DLPack producer (or a raw capsule) as a :class:`DeviceNDArray`.

    Parameters
    ----------
    x : object
        Has ``__dlpack__`` and ``__dlpack_device__`` (CuPy, PyTorch, JAX,
        NumPy ...) or is a DLPack capsule.
    device : Device or (2, ordinal), optional
        Device of the result for host producers (default: current device).
    copy : bool, optional
        True: always copy; False: never copy (host data is then refused);
        None: copy only host data.

    Returns
    -------
    DeviceNDArray
        Zero-copy for device, page-locked and managed memory; it keeps the
        producer's memory alive and releases it when the last view dies.

    Raises
    ------
    BufferError
        For a capsule gpuarray cannot use (unsupported device, dtype or
        version; sizes, strides or addresses that do not fit 64 bits), or
        host data with ``copy=False``.
    TypeError
        If ``x`` is neither a DLPack producer nor a capsule, or its
        ``__dlpack_device__`` does not return two ints.

    Examples
    --------
    >>> d = gpuarray.from_dlpack(np.arange(3))            # host data: copied
    >>> t = gpuarray.from_dlpack(torch.ones(3, device="cuda"))   # doctest: +SKIP
    """
    # A producer type's DLPack C exchange table first (PyTorch, cuda.core...);
    # not gpuarray's own: the table orders on the device's default stream,
    # and our arrays' __dlpack__ orders after each array's own stream.
    api = exchange_api_of(type(x)) if device is None and not isinstance(x, DeviceNDArray) else None
    via_table = None if api is None else _through_table(x, api)
    if via_table is not None and via_table.device_type == kDLCPU and _pinned_producer(x):
        # PyTorch's table says kDLCPU for a pinned tensor, its __dlpack_device__ says
        # kDLCUDAHost: page-locked memory is imported zero-copy, so ask __dlpack__ (seen on
        # an H200 run, 2026-11-28: the table's answer made it a copy)
        via_table.release()
        via_table = None
    if type(x) is _CapsuleType:
        t = consume_capsule(x)
        dev, stream = _target(device, t.device_type, t.device_id)
    elif via_table is not None:
        t = via_table
        dev, stream = _target(None, t.device_type, t.device_id)
    else:
        if not hasattr(x, "__dlpack__"):
            raise TypeError(f"{type(x).__name__} object is not a DLPack producer (no __dlpack__)")
        get = getattr(x, "__dlpack_device__", None)
        dev_type, dev_id = (kDLCPU, 0) if get is None else parse_dlpack_device(get(), x)
        dev, stream = _target(device, dev_type, dev_id)
        t = consume_capsule(_request(x, dev, dev_type, copy, device, stream))
    return _imported_array(t, dev, stream, copy)


def _imported_array(t: ImportedTensor, dev: Device, stream: Stream, copy: bool | None) -> DeviceNDArray:
    kind = t.device_type
    if kind == kDLCPU:
        if copy is False:
            t.release()
            raise BufferError("the producer's data is in host memory; it cannot be used on the "
                              "device without a copy (copy=False)")
        out = _host_to_device(t, stream)
        t.release()
        return out
    if kind not in _DEVICE_KINDS:
        t.release()
        raise BufferError(f"DLPack device type {kind} is not CUDA memory "
                          "(supported: 1 CPU, 2 CUDA, 3 CUDA host, 13 CUDA managed)")
    lo, hi = t.extent
    mem = MemoryPointer(dev, t.data_ptr + lo if t.size else 0, hi - lo, owner=t)
    # Imported memory is not stream-ordered: no stream to record on it.
    arr = DeviceNDArray._make(t.shape, t.byte_strides, t.dtype, t.data_ptr, mem, stream,
                              t.readonly, dev, False)
    arr._dl = kind
    return arr.copy() if copy and not t.is_copied else arr  # the producer may have copied


def source_from_table(x: Any, api: Any) -> Any:
    """What ``as_device_source`` makes of ``x`` through its type's exchange table.

    A :class:`DeviceNDArray` (zero-copy) for CUDA device, page-locked or
    managed memory, a NumPy view for host memory, or None when the table
    cannot give it (the caller then uses ``x``'s Python protocols).
    """
    t = _through_table(x, api)
    if t is None:
        return None
    if t.device_type == kDLCPU:
        return _host_view(t)
    if t.device_type not in _DEVICE_KINDS:
        t.release()
        return None
    dev, stream = _target(None, t.device_type, t.device_id)
    return _imported_array(t, dev, stream, None)
