"""DLPack glue: the array's ``__dlpack__`` and the consumer ``from_dlpack``.

Capsule mechanics (structs, deleters, names) live in ``_dlpack_capsule``,
``__dlpack__`` keywords and version negotiation in ``_dlpack_protocol``; this
module decides what to export and how to order streams.  Producer: the consumer's stream waits on an event recorded on the
array's stream (none for ``stream=-1``).  Consumer: the producer is asked to
order its work before our default stream; the producer's memory stays alive
until the last array viewing it dies, then its deleter runs once.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .. import _layout
from .._array import DeviceNDArray
from .._device import Device, get_device
from .._stream import default_stream, external_stream, order_after
from ..memory import MemoryPointer
from ._dlpack_capsule import (
    ImportedTensor,
    consume_capsule,
    kDLCPU,
    kDLCUDA,
    kDLCUDAHost,
    kDLCUDAManaged,
    make_capsule,
)
from ._dlpack_protocol import DLPACK_MAX_VERSION, parse_dlpack_request

__all__ = ["from_dlpack", "export_capsule"]


def export_capsule(arr: DeviceNDArray, *, stream: Any, max_version: Any, dl_device: Any,
                   copy: bool | None) -> Any:
    """The work of ``DeviceNDArray.__dlpack__`` (see its docstring)."""
    req = parse_dlpack_request(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
    version = req.version or DLPACK_MAX_VERSION
    here = arr.__dlpack_device__()
    if req.dl_device is not None and tuple(req.dl_device) != here:
        if tuple(req.dl_device) != (kDLCPU, 0):
            raise BufferError(f"cannot export an array on DLPack device {here} to {req.dl_device}")
        if req.copy is False:
            raise BufferError("exporting device memory to the CPU needs a copy, and copy=False")
        host = arr.copy_to_host()  # complete when it returns
        return make_capsule(data_ptr=host.ctypes.data, shape=host.shape, byte_strides=host.strides,
                            dtype=host.dtype, device_type=kDLCPU, device_id=0, owner=host,
                            readonly=False, is_copied=True, versioned=req.versioned, version=version)
    owner = arr
    if req.stream is not None:
        consumer = external_stream(req.stream, arr.device)
        if req.copy:
            # bind() records the consumer's stream, so a stream-ordered free
            # of the copy waits for the consumer's work on it.
            owner = arr.copy(order="K", stream=consumer).bind(consumer)
        else:
            order_after(consumer, arr.stream)
    elif req.copy:
        owner = arr.copy(order="K")
    return make_capsule(data_ptr=owner.ptr, shape=owner.shape, byte_strides=owner.strides,
                        dtype=owner.dtype, device_type=here[0], device_id=here[1], owner=owner,
                        readonly=owner.readonly, is_copied=owner is not arr,
                        versioned=req.versioned, version=version)


def _is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _target_device(device: Any, dev_type: int, dev_id: int) -> Device:
    if device is not None:
        if isinstance(device, Device):
            return device
        if isinstance(device, tuple) and len(device) == 2 and device[0] == kDLCUDA:
            return get_device(device[1])
        raise ValueError(f"from_dlpack(device=...) must be a gpuarray.Device or (2, ordinal), got {device!r}")
    if dev_type == kDLCUDA:
        return get_device(dev_id)
    return get_device()


def _request(x: Any, dev: Device, dev_type: int, copy: bool | None, device: Any) -> Any:
    # Streams are for memory the device accesses asynchronously: CUDA device
    # and managed memory. Host producers (kDLCPU, kDLCUDAHost) get None, as
    # the DLPack specification asks (PyTorch refuses a stream for them).
    stream = default_stream(dev).cai_value if dev_type in (kDLCUDA, kDLCUDAManaged) else None
    kwargs: dict[str, Any] = {"stream": stream, "max_version": DLPACK_MAX_VERSION}
    if copy is not None:
        kwargs["copy"] = copy
    if device is not None and dev_type != kDLCPU:
        kwargs["dl_device"] = (kDLCUDA, dev.id)
    with dev.activate():  # PyTorch refuses to export from another current device
        try:
            return x.__dlpack__(**kwargs)
        except TypeError:
            if copy is not None or "dl_device" in kwargs:
                raise  # the caller asked for something an old producer cannot do
            return x.__dlpack__(stream=stream)


def _host_view(t: ImportedTensor) -> np.ndarray:
    """A NumPy view of an imported host tensor (any strides, negative included)."""
    lo, hi = _layout.extent(t.shape, t.byte_strides, t.dtype.itemsize)
    if hi == lo:
        return np.empty(t.shape, dtype=t.dtype)
    buf = (ctypes.c_uint8 * (hi - lo)).from_address(t.data_ptr + lo)
    # A ctypes array exports the buffer protocol; NumPy's stub lists only some buffer types.
    return np.ndarray(t.shape, t.dtype, buffer=buf,  # type: ignore[arg-type]
                      offset=-lo, strides=t.byte_strides)


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
        version), or host data with ``copy=False``.
    TypeError
        If ``x`` is neither a DLPack producer nor a capsule.

    Examples
    --------
    >>> d = gpuarray.from_dlpack(np.arange(3))            # host data: copied
    >>> t = gpuarray.from_dlpack(torch.ones(3, device="cuda"))   # doctest: +SKIP
    """
    if _is_capsule(x):
        t = consume_capsule(x)
        dev = _target_device(device, t.device_type, t.device_id)
    else:
        if not hasattr(x, "__dlpack__"):
            raise TypeError(f"{type(x).__name__} object is not a DLPack producer (no __dlpack__)")
        dev_type, dev_id = (x.__dlpack_device__() if hasattr(x, "__dlpack_device__")
                            else (kDLCPU, 0))
        dev = _target_device(device, dev_type, dev_id)
        t = consume_capsule(_request(x, dev, dev_type, copy, device))
    if t.device_type == kDLCPU:
        if copy is False:
            t.release()
            raise BufferError("the producer's data is in host memory; it cannot be used on the "
                              "device without a copy (copy=False)")
        from .._creation import to_device

        with dev.activate():
            out = to_device(_host_view(t))  # complete: pageable copies are staged at the call
            out.stream.synchronize()
        t.release()
        return out
    if t.device_type not in (kDLCUDA, kDLCUDAHost, kDLCUDAManaged):
        t.release()
        raise BufferError(f"DLPack device type {t.device_type} is not CUDA memory "
                          "(supported: 1 CPU, 2 CUDA, 3 CUDA host, 13 CUDA managed)")
    size = int(np.prod(t.shape)) if t.shape else 1
    lo, hi = _layout.extent(t.shape, t.byte_strides, t.dtype.itemsize)
    mem = MemoryPointer(dev, t.data_ptr + lo if size else 0, hi - lo, owner=t)
    arr = DeviceNDArray._make(tuple(t.shape), tuple(t.byte_strides), t.dtype, t.data_ptr, mem,
                              default_stream(dev), bool(t.readonly), dev)
    arr._dl = t.device_type
    return arr.copy() if copy and not t.is_copied else arr  # the producer may have copied
