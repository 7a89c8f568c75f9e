"""The array's ``__dlpack__``: what to export, and how to order the consumer's stream.

Below the array class: ``DeviceNDArray.__dlpack__`` calls
:func:`export_capsule` with itself, and this module uses only the array's
attributes and methods (no import of ``_array``), streams, and the capsule
core. The consumer's stream waits on an event recorded on the array's stream
(none for ``stream=-1``, or when the consumer's stream is the array's own).

The common call (a consumer's ``stream`` and an exact ``max_version`` tuple,
no ``dl_device`` and no ``copy``) takes a fast path that goes straight to
the capsule core; everything else goes through
:func:`~gpuarray.interop._dlpack_protocol.parse_dlpack_request`.
"""

from __future__ import annotations

from typing import Any

from .. import _graph
from .._stream import external_stream, order_after
from . import _dlpack_capsule as _cap
from ._dlpack_capsule import kDLCPU, make_capsule
from ._dlpack_protocol import DLPACK_MAX_VERSION, export_version, parse_dlpack_request

__all__ = ["export_capsule"]

# (major, minor) a consumer may pass -> the minor version exported (major 1),
# precomputed from export_version for the common requests.
_MINOR = {v: export_version(v)[1] for v in ((1, 0), (1, 1), (1, 2), (1, 3), (2, 0))}  # type: ignore[index]


def export_capsule(arr: Any, stream: Any, max_version: Any, dl_device: Any, copy: Any) -> Any:
    """The work of ``DeviceNDArray.__dlpack__`` (see its docstring)."""
    if _graph._unlaunched:
        _graph.check_graph_memory(arr.stream, "a DLPack export", arr._ptr)
    if dl_device is None and copy is None:
        # Fast path: exactly-typed keywords and no ordering work to do.
        if max_version is None:
            minor = -1
        elif (type(max_version) is tuple and len(max_version) == 2
              and type(max_version[0]) is int and type(max_version[1]) is int):
            minor = _MINOR.get(max_version, -2)
        else:
            minor = -2
        s = arr.stream
        if minor != -2 and (stream == -1 and type(stream) is int or (
                not s.closed and s.handle == (1 if stream is None else stream)
                and type(stream) in (int, type(None)) and s.device is arr.device)):
            code, bits, lanes, itemsize = _cap._dl_dtype(arr.dtype)
            kind = arr._dl
            if minor >= 0:
                return _cap._make(arr, arr._ptr, arr.shape, arr.strides, itemsize, code, bits,
                                  lanes, kind, arr.device.id if kind == 2 else 0, True, 1, minor,
                                  1 if arr.readonly else 0)
            if not arr.readonly:
                return _cap._make(arr, arr._ptr, arr.shape, arr.strides, itemsize, code, bits,
                                  lanes, kind, arr.device.id if kind == 2 else 0, False, 1, 0, 0)
    req = parse_dlpack_request(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
    version = req.version or DLPACK_MAX_VERSION
    here = arr.__dlpack_device__()
    if req.dl_device is not None and tuple(req.dl_device) != here:
        if tuple(req.dl_device) != (kDLCPU, 0):
            raise BufferError(f"cannot export an array on DLPack device {here} to {req.dl_device}")
        if req.copy is False:
            raise BufferError("exporting device memory to the CPU needs a copy, and copy=False")
        host = arr.copy_to_host()  # complete when it returns
        return make_capsule(data_ptr=_cap.host_address(host), shape=host.shape, byte_strides=host.strides,
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
