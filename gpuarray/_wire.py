"""What crosses a process boundary: a DeviceNDArray as one frame plus a small header.

Pickling (``DeviceNDArray.__reduce_ex__``) and the Dask serializers of
:mod:`gpuarray.dask` share this format, so every path sends the same bytes:

- axes of stride 0 (broadcast views) are cut to length 1 and restored on
  arrival, so a broadcast array sends its distinct elements only;
- what is left is sent as it lies when it is C- or Fortran-contiguous, else
  compacted on the device (C order) first;
- the *host* frame is that data copied down once (``copy_to_host``) into a
  new array whose memory is the frame: pickle protocol 5 passes it out of
  band (``pickle.PickleBuffer``), Dask passes it as a frame; no other host
  copy is made.  Arrival is one host-to-device copy on the receiver's
  current device;
- the *device* frame is the same data left on the device: a 1-D ``uint8``
  array over its bytes, which exports ``__cuda_array_interface__`` (UCX and
  any CAI consumer can send it); arrival wraps whatever CAI object carried
  the bytes, without a copy.

The header records the shape, the shape and order of the frame, the dtype
and the read-only flag, so values, dtype, C/F order, broadcast axes and the
read-only flag arrive intact.  Other layouts (gaps, negative steps) arrive
C-contiguous, as NumPy's pickling and Dask's NumPy serializer give them.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from . import _layout
from ._array import DeviceNDArray
from ._coerce import _DEVICE_KINDS, _dlpack_kind  # the one test of a DLPack device
from ._creation import to_device
from .interop._cai import as_cuda_array
from .interop._dlpack import from_dlpack

__all__ = ["to_host_frame", "from_host_frame", "to_device_frame", "from_device_frame",
           "reduce_array", "rebuild", "encode_dtype", "decode_dtype"]

_U8 = np.dtype(np.uint8)


def _payload(arr: DeviceNDArray) -> tuple[DeviceNDArray, dict[str, Any]]:
    """The contiguous device data to send and the header that rebuilds ``arr`` from it."""
    cut = tuple(slice(0, 1) if (s == 0 and n > 1) else slice(None)
                for n, s in zip(arr.shape, arr.strides, strict=True))
    core = arr[cut] if any(c != slice(None) for c in cut) else arr
    c = core.is_c_contiguous()
    f = core.is_f_contiguous()
    if not (c or f):
        core = core.copy(order="C")
        c = True
    header = {"shape": tuple(arr.shape), "core": tuple(core.shape),
              "order": "C" if c else "F", "dtype": arr.dtype, "readonly": bool(arr.readonly)}
    return core, header


def _check_header(header: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...], str, np.dtype]:
    try:
        shape = tuple(int(n) for n in header["shape"])
        core = tuple(int(n) for n in header["core"])
        order = header["order"]
        dtype = decode_dtype(header["dtype"])
    except (KeyError, TypeError) as e:
        raise ValueError(f"not a gpuarray frame header: {header!r} ({e})") from None
    if order not in ("C", "F") or len(core) != len(shape) or any(
            k != n and k != 1 for k, n in zip(core, shape, strict=True)):
        raise ValueError(f"not a gpuarray frame header: {header!r}")
    return shape, core, order, dtype


def _finish(dev: DeviceNDArray, shape: tuple[int, ...], readonly: bool) -> DeviceNDArray:
    """Restore the broadcast axes and the read-only flag of an arrived array."""
    dev.readonly = bool(readonly)  # before anyone could have cached its interface
    if dev.shape != shape:
        strides = tuple(0 if k != n else s for k, n, s in zip(dev.shape, shape, dev.strides, strict=True))
        dev = dev._view(shape, strides)
    return dev


def _strides(core: tuple[int, ...], order: str, itemsize: int) -> tuple[int, ...]:

    return (_layout.c_strides if order == "C" else _layout.f_strides)(core, itemsize)


# ------------------------------------------------------------------ host frames
def to_host_frame(arr: DeviceNDArray) -> tuple[dict[str, Any], np.ndarray]:
    """The header and the host frame (a 1-D ``uint8`` array) of ``arr``: one device-to-host copy."""
    core, header = _payload(arr)
    host = core.copy_to_host()  # C or F like ``core``: its memory is the frame
    flat = host.ravel(order="K")  # a view: ``host`` is contiguous in that order
    return header, flat.view(_U8)


def from_host_frame(header: dict[str, Any], frame: Any) -> DeviceNDArray:
    """Rebuild an array on the current device from a header and a host frame (one copy up).

    ``frame`` is any object exporting a contiguous buffer (bytes, bytearray,
    memoryview, NumPy array, ``pickle.PickleBuffer``).
    """

    shape, core, order, dtype = _check_header(header)
    data = np.frombuffer(memoryview(frame).cast("B"), dtype=_U8)
    want = int(np.prod(core, dtype=np.int64)) * dtype.itemsize
    if data.size != want:
        raise ValueError(f"a gpuarray frame of shape {core} and dtype {dtype} holds {want} bytes, "
                         f"got {data.size}")
    host = data.view(dtype).reshape(core, order=order)  # type: ignore[call-overload]
    return _finish(to_device(host), shape, bool(header.get("readonly", False)))


# ---------------------------------------------------------------- device frames
def to_device_frame(arr: DeviceNDArray) -> tuple[dict[str, Any], DeviceNDArray]:
    """The header and the device frame (1-D ``uint8`` over the data) of ``arr``.

    The frame's pending work is complete on return: consumers such as UCX
    read device memory outside CUDA stream order.
    """
    core, header = _payload(arr)
    frame = DeviceNDArray._make((core.nbytes,), (1,), _U8, core._ptr, core._mem, core.stream,
                                core.readonly, core.device, record=False)
    core.stream.synchronize()
    return header, frame


def from_device_frame(header: dict[str, Any], frame: Any) -> DeviceNDArray:
    """Rebuild an array over a device frame (any CAI or DLPack exporter), without copying."""

    shape, core, order, dtype = _check_header(header)
    if isinstance(frame, DeviceNDArray) or hasattr(frame, "__cuda_array_interface__"):
        f = as_cuda_array(frame)
    elif hasattr(frame, "__dlpack__") and _dlpack_on_device(frame):
        f = from_dlpack(frame)
    else:
        raise TypeError(f"a device frame must export __cuda_array_interface__ or __dlpack__ "
                        f"of device memory, got {type(frame).__name__}")
    # read-only when the sender said so, or when the frame itself is read-only
    readonly = bool(header.get("readonly", False)) or f.readonly
    want = int(np.prod(core, dtype=np.int64)) * dtype.itemsize
    if f.nbytes != want or not (f.is_c_contiguous() or f.is_f_contiguous()):
        raise ValueError(f"a gpuarray frame of shape {core} and dtype {dtype} is {want} contiguous "
                         f"bytes, got shape {f.shape}, strides {f.strides}, dtype {f.dtype}")
    dev = DeviceNDArray._make(core, _strides(core, order, dtype.itemsize), dtype, f._ptr, f._mem,
                              f.stream, readonly, f.device, record=False)
    return _finish(dev, shape, readonly)


def _dlpack_on_device(frame: Any) -> bool:

    return _dlpack_kind(frame) in _DEVICE_KINDS


# ----------------------------------------------------------------------- pickle
def reduce_array(arr: DeviceNDArray, protocol: int) -> tuple[Any, tuple[Any, ...]]:
    """``__reduce_ex__`` of a DeviceNDArray: protocol 5 passes the host frame out of band."""
    header, frame = to_host_frame(arr)
    payload: Any = pickle.PickleBuffer(frame.data) if protocol >= 5 else frame
    return rebuild, (header, payload)


def rebuild(header: dict[str, Any], frame: Any) -> DeviceNDArray:
    """Unpickle a DeviceNDArray on the current device."""
    return from_host_frame(header, frame)


# ------------------------------------------------------------------------ dtype
# A header comes from a peer: it is data, never code. Dtypes travel as plain
# values (no pickle, which would run whatever a header carried).
def encode_dtype(dtype: np.dtype) -> Any:
    """A dtype as a msgpack-safe value: its ``str``, or a dict of plain values.

    Structured dtypes give ``{"names", "formats", "offsets", "itemsize"}``
    (formats encoded the same way), subarray fields ``{"base", "shape"}``,
    ``ml_dtypes`` types (bfloat16...) ``{"ml_dtypes": name}``.
    """
    dtype = np.dtype(dtype)
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return {"base": encode_dtype(base), "shape": list(shape)}
    if dtype.fields is not None:
        names = list(dtype.names or ())
        return {"names": names,
                "formats": [encode_dtype(dtype.fields[n][0]) for n in names],
                "offsets": [int(dtype.fields[n][1]) for n in names],
                "itemsize": dtype.itemsize}
    if dtype.kind == "V" and dtype.type.__module__.startswith("ml_dtypes"):
        return {"ml_dtypes": dtype.name}
    if np.dtype(dtype.str) == dtype:
        return dtype.str
    raise ValueError(f"dtype {dtype!r} cannot travel in a gpuarray frame header")


def decode_dtype(value: Any) -> np.dtype:
    """Inverse of :func:`encode_dtype` (a dtype passes through); ValueError for anything else."""
    if isinstance(value, np.dtype):
        return value
    try:
        if isinstance(value, str):
            return np.dtype(value)
        if isinstance(value, dict):
            if set(value) == {"base", "shape"}:
                return np.dtype((decode_dtype(value["base"]), tuple(int(n) for n in value["shape"])))
            if set(value) == {"names", "formats", "offsets", "itemsize"}:
                return np.dtype({"names": [str(n) for n in value["names"]],
                                 "formats": [decode_dtype(f) for f in value["formats"]],
                                 "offsets": [int(o) for o in value["offsets"]],
                                 "itemsize": int(value["itemsize"])})
            if set(value) == {"ml_dtypes"} and isinstance(value["ml_dtypes"], str):
                import ml_dtypes

                dt = getattr(ml_dtypes, value["ml_dtypes"], None)
                if dt is not None:
                    return np.dtype(dt)
    except (TypeError, ValueError, ImportError) as e:
        raise ValueError(f"the frame header's dtype {value!r} is not a dtype: {e}") from None
    raise ValueError(f"the frame header's dtype {value!r} is not a dtype")

