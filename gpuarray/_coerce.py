"""Turning "anything array-like" into a device array or host data.

``as_device_source`` is what every array-accepting entry point
(``asarray``, ``to_device``, ``copy_to_device``, ``__setitem__``) uses:
a ``DeviceNDArray`` is returned as is; an object exporting
``__cuda_array_interface__`` or a device ``__dlpack__`` is wrapped zero-copy
(keeping the object alive); a host ``__dlpack__`` producer without
``__array__`` becomes a NumPy view; anything else is host data for NumPy.
"""

from __future__ import annotations

from typing import Any

from ._array import DeviceNDArray
from ._device import Device

__all__ = ["as_device_source", "is_foreign_device_array"]


def is_foreign_device_array(obj: Any) -> bool:
    """Whether ``obj`` exports device memory (CAI, or DLPack on a CUDA device)."""
    if isinstance(obj, DeviceNDArray):
        return False
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is not None and hasattr(obj, "__dlpack__"):
        try:
            return dev()[0] in (2, 3, 13)
        except Exception:  # a broken exporter is treated as host data
            return False
    return False


def as_device_source(obj: Any, device: Device | None = None) -> Any:
    """A ``DeviceNDArray`` for device data (zero-copy), else ``obj`` unchanged."""
    if isinstance(obj, DeviceNDArray):
        return obj
    if hasattr(obj, "__cuda_array_interface__"):
        from .interop import as_cuda_array

        return as_cuda_array(obj)
    if is_foreign_device_array(obj):
        from .interop import from_dlpack

        return from_dlpack(obj)
    if hasattr(obj, "__dlpack__") and not hasattr(obj, "__array__"):
        import numpy as np  # a host DLPack producer NumPy cannot see otherwise

        return np.from_dlpack(obj)
    return obj
