"""Turning "anything array-like" into a device array or host data.

``as_device_source`` is what every array-accepting entry point
(``asarray``, ``to_device``, ``copy_to_device``, ``__setitem__``) uses:
a ``DeviceNDArray`` (or NumPy data) is returned as is; an object whose type
publishes a DLPack C exchange table (PyTorch, cuda.core) is taken through it
(device data zero-copy, host data as a NumPy view); an object exporting
``__cuda_array_interface__`` or a device ``__dlpack__`` is wrapped zero-copy
(keeping the object alive); a host (``kDLCPU``) ``__dlpack__`` producer
becomes a zero-copy NumPy view through DLPack, preferred over its
``__array__`` because DLPack carries more dtypes (a bfloat16 PyTorch tensor
has no ``__array__`` dtype); anything else is host data for NumPy.

Layering: this module sits above the array class and the interop glue and
imports them; the array class reaches it (``DeviceNDArray.__setitem__`` and
``copy_to_device``) as its ``_as_source``, which the package's ``__init__``
sets, so no module imports one above it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._array import DeviceNDArray
from ._device import Device
from .interop._cai import as_cuda_array
from .interop._dlpack import from_dlpack, host_array_from_dlpack, source_from_table
from .interop._dlpack_capsule import exchange_api_of
from .interop._dlpack_protocol import parse_dlpack_device

__all__ = ["as_device_source", "is_foreign_device_array"]

_DEVICE_KINDS = (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged


def _dlpack_kind(obj: Any) -> int | None:
    """The DLPack device type of a producer with ``__dlpack__`` and ``__dlpack_device__``."""
    get = getattr(obj, "__dlpack_device__", None)
    if get is None or not hasattr(obj, "__dlpack__"):
        return None
    try:
        value = get()
    except Exception:  # a broken exporter is treated as host data
        return None
    return parse_dlpack_device(value, obj)[0]  # TypeError for ("2", "0") and the like


def is_foreign_device_array(obj: Any) -> bool:
    """Whether ``obj`` exports device memory (CAI, or DLPack on a CUDA device)."""
    # Exactly ndarray: its subclasses may export device memory (gpuarray's
    # mapped/managed arrays, as Numba's, are host arrays that are also device arrays).
    if type(obj) is np.ndarray or isinstance(obj, DeviceNDArray):
        return False
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    return _dlpack_kind(obj) in _DEVICE_KINDS


def as_device_source(obj: Any, device: Device | None = None) -> Any:
    """A ``DeviceNDArray`` for device data (zero-copy), else host data (``obj`` or a view)."""
    if type(obj) is np.ndarray or isinstance(obj, (DeviceNDArray, np.generic)):
        return obj  # (an ndarray subclass may export device memory: see above)
    api = exchange_api_of(type(obj))  # the DLPack C exchange table first: the fastest
    if api is not None and (src := source_from_table(obj, api)) is not None:
        return src
    if hasattr(obj, "__cuda_array_interface__"):
        return as_cuda_array(obj)
    kind = _dlpack_kind(obj)
    if kind in _DEVICE_KINDS:
        return from_dlpack(obj)
    if kind == 1 or (kind is None and hasattr(obj, "__dlpack__")
                     and not hasattr(obj, "__array__")):
        try:
            return host_array_from_dlpack(obj)
        except BufferError:
            if hasattr(obj, "__array__"):
                return obj  # DLPack could not carry it; NumPy's protocol may
            raise
    return obj

