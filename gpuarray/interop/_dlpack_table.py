"""gpuarray's DLPack C exchange table (dlpack.h 1.3): the producer side.

One concern: publishing ``DeviceNDArray.__dlpack_c_exchange_api__``, the
PyCapsule ``"dlpack_exchange_api"`` of a static ``DLPackExchangeAPI`` table
that C consumers (tvm-ffi and the libraries built on it) call without going
through ``__dlpack__``.  The table's functions are C (``_dlpack_exchange.c``
in the ``_dlpack_core`` extension) and know nothing of arrays; this module
registers the array type and the four hooks they call:

* ``_prepare(arr)``: the array's ``DLTensor`` (pointer, shape, strides in
  elements, dtype and device codes, read-only flag), made by the C core from
  the same values and rules as a ``__dlpack__`` export; C caches it on the
  array (slot ``_dlt``; the layout never changes), keeping the first one set
  when two threads prepare at once (a borrowed ``DLTensor`` points into it);
* ``_to_py(capsule)``: ``from_dlpack`` of a ``"dltensor_versioned"`` capsule,
  zero-copy only (host memory is refused: the consumer handed over memory
  and expects an array over it);
* ``_allocate(...)``: a new C-ordered array through the active memory manager
  on the prototype's device;
* ``_stream(device_type, device_id)``: the handle of gpuarray's default
  stream on that device (what ``__dlpack__`` consumers are ordered against),
  cached in C until the configuration is read again (``_config.reload``).

Only the C core publishes the table (the ctypes core cannot: the attribute
is then absent).  Imported by the package's ``__init__``; it sits above the
array class and ``_dlpack`` (which it uses) and nothing imports it back.
"""

from __future__ import annotations

from typing import Any

from .. import _config, _graph
from .._array import DeviceNDArray
from .._device import get_device
from .._stream import default_stream
from . import _dlpack_capsule as _cap
from ._dlpack import from_dlpack
from ._dlpack_capsule import kDLCUDA, kDLCUDAManaged
from ._dlpack_protocol import DLPACK_MAX_VERSION, dlpack_to_dtype

__all__ = ["TABLE_ATTRIBUTE", "install"]

#: The type attribute dlpack.h 1.3 names (a PyCapsule ``"dlpack_exchange_api"``).
TABLE_ATTRIBUTE = "__dlpack_c_exchange_api__"
_INT64_MAX = 2**63 - 1


def _prepare(arr: DeviceNDArray) -> Any:
    if _graph._unlaunched:
        _graph.check_graph_memory(arr.stream, "a DLPack export (exchange table)", arr._ptr)
    code, bits, lanes, itemsize = _cap._dl_dtype(arr.dtype)  # BufferError: no DLPack dtype
    kind = arr._dl
    return _core.exchange_prepare(arr._ptr, arr.shape, arr.strides, itemsize, code, bits,
                                  lanes, kind, arr.device.id if kind == kDLCUDA else 0,
                                  arr.readonly)


def _to_py(capsule: Any) -> DeviceNDArray:
    return from_dlpack(capsule, copy=False)


def _allocate(device_type: int, device_id: int, code: int, bits: int, lanes: int,
              shape: tuple[int, ...]) -> DeviceNDArray:
    dtype = dlpack_to_dtype(code, bits, lanes)  # BufferError naming the codes
    if device_type != kDLCUDA:
        raise BufferError(f"gpuarray allocates CUDA device memory (DLPack device type 2), "
                          f"not device type {device_type}")
    if any(n < 0 for n in shape):
        raise ValueError(f"cannot allocate a tensor of negative shape {shape}")
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    if nbytes > _INT64_MAX:
        raise ValueError(f"a {dtype} tensor of shape {shape} overflows a 64-bit size")
    dev = get_device(device_id)
    with dev.activate():
        return DeviceNDArray(shape, None, dtype)


def _stream(device_type: int, device_id: int) -> int:
    if device_type == kDLCUDA:
        return default_stream(get_device(device_id)).handle
    if device_type == kDLCUDAManaged:
        return default_stream(get_device()).handle
    raise ValueError(f"gpuarray has no work stream for DLPack device type {device_type}")


def install() -> bool:
    """Publish the table on ``DeviceNDArray`` (subclasses inherit it).

    Returns
    -------
    bool
        Whether it was published: only the C core can.
    """
    global _core
    if _cap.CORE != "c":
        return False
    from . import _dlpack_core

    _core = _dlpack_core
    # The default stream depends only on the device and the configuration: C
    # caches _stream's answers until the configuration is read again.
    api = _dlpack_core.exchange_install(DeviceNDArray, _prepare, _to_py, _allocate, _stream,
                                        DLPACK_MAX_VERSION[1])
    if _dlpack_core.exchange_forget_streams not in _config.on_reload:
        _config.on_reload.append(_dlpack_core.exchange_forget_streams)
    setattr(DeviceNDArray, TABLE_ATTRIBUTE, api)
    return True


_core: Any = None
install()
