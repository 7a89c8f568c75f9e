"""Binding state of the real backend: the driver module, what the hot paths cache from it, and the result check.

Everything here is bound once by :func:`_bind` when a :class:`~gpuarray._driver.cuda.CudaBackend`
initialises (``cuda.bindings.driver`` is never imported before); the call modules of this
package read it as ``S._d``, ``S._DEV_ATTRS``, ... at call time, so a rebind (tests bind
fake driver modules) is seen everywhere.  :func:`_check` is the one result check every driver
call's result goes through.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

from ...errors import CUDA_ERROR_NAMES, CudaError, CudaOutOfMemoryError
from .. import _fork
from .._base import DEVICE_ATTRIBUTES, Backend

# Result codes handled by value (no driver needed to know them).
_ERR_INVALID_VALUE = 1
_ERR_OUT_OF_MEMORY = 2
_ERR_NOT_READY = 600
_ERR_PEER_ACCESS_ALREADY_ENABLED = 704

#: cuInit results that mean "CUDA cannot be used here", with what to tell the user.
_UNAVAILABLE_CODES: dict[int, str] = {
    3: "the driver could not be initialised",  # CUDA_ERROR_NOT_INITIALIZED
    34: "the CUDA driver found is a stub library, not a real driver",  # STUB_LIBRARY
    # 35 is cudaErrorInsufficientDriver (a runtime-API code, listed for safety)
    35: "the installed NVIDIA driver is too old for this CUDA version",
    36: "the installed NVIDIA driver is too old for this CUDA version",  # CALL_REQUIRES_NEWER_DRIVER
    46: "the CUDA device is unavailable (busy or exclusive-process)",  # DEVICE_UNAVAILABLE
    100: "no CUDA-capable device is detected",  # NO_DEVICE
    802: "the system is not ready (fabric manager not running?)",  # SYSTEM_NOT_READY
    803: "the NVIDIA kernel module and user-mode driver versions do not match",
    804: "the forward-compatibility driver does not support this device",
}

# ---------------------------------------------------------------------------
# Module state bound by _bind() at init: the driver module, enum members and
# constructors the hot paths use.  None until a backend initialised.
_d: Any = None
_CUresult: Any = None
_CUipcMemHandle: Any = None
_CUDA_MEMCPY2D: Any = None
_cuuint64_t: Any = None
_cuDeviceGetUuid: Any = None
_MT_HOST: Any = None
_MT_DEVICE: Any = None
_RELEASE_THRESHOLD: Any = None
_PTR_ATTRS: list[Any] = []
#: cuda-bindings 13.2.0-13.4.2 write CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL into one field of
#: their helper and read it back from another (its value is always 0: seen with 13.3.1 on
#: an H200 run and over the stand-in); then the ordinal comes from the pointer's context
#: (CU_POINTER_ATTRIBUTE_CONTEXT, cuCtxGetDevice_v2).
_ORDINAL_VIA_CONTEXT = False


def misreads_device_ordinal(version: str) -> bool:
    """Whether a cuda-bindings ``version`` misreads CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL."""
    try:
        key = tuple(int(x) for x in version.split("+")[0].split(".")[:3])
    except ValueError:
        return False
    return (13, 2, 0) <= key <= (13, 4, 2)
_DEV_ATTRS: dict[str, Any] = {}
_STREAM_NON_BLOCKING = 1
_EVENT_DISABLE_TIMING = 2
_EVENT_INTERPROCESS = 4
_HOSTALLOC_PORTABLE = 1
_HOSTALLOC_DEVICEMAP = 2
_HOSTALLOC_WRITECOMBINED = 4
_HOSTREGISTER_PORTABLE = 1
_HOSTREGISTER_DEVICEMAP = 2
_IPC_LAZY_PEER = 1
_CAPTURE_MODES: list[Any] = []  # CUstreamCaptureMode members, in _base.CAPTURE_MODES order
_GRAPH_AUTO_FREE_ON_LAUNCH = 1
_EVENT_WAIT_EXTERNAL = 1
_cuGraphInstantiate: Any = None

_VOID_P = ctypes.c_void_p
_PARAM_ARRAYS: dict[int, Any] = {}  # n -> ctypes.c_void_p * n
_addressof = ctypes.addressof
_IPC_HANDLE_SIZE = 64
_ELF_MAGIC = b"\x7fELF"
_FATBIN_MAGIC = b"\x50\xed\x55\xba"


def _load_driver() -> Any:
    """Import ``cuda.bindings.driver`` (does not load libcuda; the first call does)."""
    from cuda.bindings import driver

    return driver


def _bind(drv: Any) -> None:
    """Cache what the hot paths need from the driver module in module globals.

    cuda-bindings differences resolved here:

    - ``cuDeviceGetUuid``: 12.x has the legacy call plus ``cuDeviceGetUuid_v2``
      (MIG-aware); 13.x has only ``cuDeviceGetUuid`` with the v2 behaviour.
      The ``_v2`` name is preferred when present.
    - ``CUipcMemHandle.reserved`` exists in 12.8 only; the handle's bytes are
      read and written through ``getPtr()`` and ctypes in every version.
    - ``cuGraphInstantiateWithFlags`` is bound as ``cuGraphInstantiate(hGraph, flags)``.
    - Enums are ``enum.IntEnum`` in 12.x and cuda.bindings ``FastEnum`` in
      13.x; both are ``int`` subclasses, so flags are stored as plain ints where
      the signature is ``unsigned int`` and as members where the binding calls
      ``.value`` on the argument (``cuDeviceGetAttribute``,
      ``cuPointerGetAttributes``, ``cuMemPoolSetAttribute``).
    """
    global _d, _CUresult, _CUipcMemHandle, _CUDA_MEMCPY2D, _cuuint64_t, _cuDeviceGetUuid
    global _MT_HOST, _MT_DEVICE, _RELEASE_THRESHOLD, _PTR_ATTRS, _DEV_ATTRS
    global _STREAM_NON_BLOCKING, _EVENT_DISABLE_TIMING, _EVENT_INTERPROCESS
    global _HOSTALLOC_PORTABLE, _HOSTALLOC_DEVICEMAP, _HOSTALLOC_WRITECOMBINED
    global _HOSTREGISTER_PORTABLE, _HOSTREGISTER_DEVICEMAP, _IPC_LAZY_PEER
    global _CAPTURE_MODES, _GRAPH_AUTO_FREE_ON_LAUNCH, _EVENT_WAIT_EXTERNAL, _cuGraphInstantiate
    global _ORDINAL_VIA_CONTEXT

    pa = drv.CUpointer_attribute
    _PTR_ATTRS = [
        pa.CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        pa.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        pa.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        pa.CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        pa.CU_POINTER_ATTRIBUTE_IS_MANAGED,
        pa.CU_POINTER_ATTRIBUTE_MAPPED,
    ]
    try:
        from importlib.metadata import version as _version

        _ORDINAL_VIA_CONTEXT = (misreads_device_ordinal(_version("cuda-bindings"))
                                and hasattr(drv, "cuCtxGetDevice_v2"))
    except Exception:  # metadata missing (a source tree on PYTHONPATH): assume a good binding
        _ORDINAL_VIA_CONTEXT = False
    if _ORDINAL_VIA_CONTEXT:
        _PTR_ATTRS.append(pa.CU_POINTER_ATTRIBUTE_CONTEXT)
    da = drv.CUdevice_attribute
    _DEV_ATTRS = {a: getattr(da, "CU_DEVICE_ATTRIBUTE_" + a.upper()) for a in DEVICE_ATTRIBUTES}
    _CUresult = drv.CUresult
    _CUipcMemHandle = drv.CUipcMemHandle
    _CUDA_MEMCPY2D = drv.CUDA_MEMCPY2D
    _cuuint64_t = drv.cuuint64_t
    _cuDeviceGetUuid = getattr(drv, "cuDeviceGetUuid_v2", None) or drv.cuDeviceGetUuid
    _MT_HOST = drv.CUmemorytype.CU_MEMORYTYPE_HOST
    _MT_DEVICE = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
    _RELEASE_THRESHOLD = drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    _STREAM_NON_BLOCKING = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
    _EVENT_DISABLE_TIMING = int(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    _EVENT_INTERPROCESS = int(drv.CUevent_flags.CU_EVENT_INTERPROCESS)
    _HOSTALLOC_PORTABLE = int(drv.CU_MEMHOSTALLOC_PORTABLE)
    _HOSTALLOC_DEVICEMAP = int(drv.CU_MEMHOSTALLOC_DEVICEMAP)
    _HOSTALLOC_WRITECOMBINED = int(drv.CU_MEMHOSTALLOC_WRITECOMBINED)
    _HOSTREGISTER_PORTABLE = int(drv.CU_MEMHOSTREGISTER_PORTABLE)
    _HOSTREGISTER_DEVICEMAP = int(drv.CU_MEMHOSTREGISTER_DEVICEMAP)
    _IPC_LAZY_PEER = int(drv.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    cm = drv.CUstreamCaptureMode
    _CAPTURE_MODES = [cm.CU_STREAM_CAPTURE_MODE_GLOBAL, cm.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                      cm.CU_STREAM_CAPTURE_MODE_RELAXED]
    _GRAPH_AUTO_FREE_ON_LAUNCH = int(
        drv.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
    _EVENT_WAIT_EXTERNAL = int(drv.CUevent_wait_flags.CU_EVENT_WAIT_EXTERNAL)
    # cuGraphInstantiateWithFlags is bound as cuGraphInstantiate(hGraph, flags) in 12.x and 13.x.
    _cuGraphInstantiate = getattr(drv, "cuGraphInstantiateWithFlags", None) or drv.cuGraphInstantiate
    _d = drv


# ---------------------------------------------------------------- result check
def _result_name(code: int) -> str:
    """The ``CUresult`` member name of ``code`` (from cuda.bindings when importable)."""
    enum = _CUresult
    if enum is None:
        try:
            enum = _load_driver().CUresult
        except ImportError:
            enum = None
    if enum is not None:
        try:
            return str(enum(code).name)
        except ValueError:
            pass
    return CUDA_ERROR_NAMES.get(code, f"CUDA_ERROR_{code}")


def _error(code: Any, call: str, detail: str | Callable[[], str] = "") -> CudaError:
    """The exception for a failed driver call (not raised here)."""
    code = int(code)
    if callable(detail):
        detail = detail()
    if code == _fork.NOT_INITIALIZED and (_fork.forked_from() or _fork.fork_parent()) is not None:
        return _fork.error(call, detail)  # a fork child of a process that used CUDA (_fork.py)
    cls = CudaOutOfMemoryError if code == _ERR_OUT_OF_MEMORY else CudaError
    return cls(code, call, detail, name=_result_name(code))


def _check(result: tuple, call: str, detail: str | Callable[[], str] = "") -> Any:
    """The result check every driver call goes through (the capture checkpoint is above it).

    Parameters
    ----------
    result : tuple
        What a cuda.bindings call returned: ``(CUresult, *outputs)``.
    call : str
        The driver function's name, e.g. ``"cuMemAlloc"``.
    detail : str or callable, optional
        What gpuarray was doing; a callable is evaluated only on failure, so
        hot paths pay nothing for a descriptive message.

    Returns
    -------
    None, the single output, or a tuple of the outputs.

    Raises
    ------
    CudaOutOfMemoryError
        For ``CUDA_ERROR_OUT_OF_MEMORY``.
    CudaError
        For any other non-zero result.
    """
    err = result[0]
    if err:
        raise _error(err, call, detail)
    n = len(result)
    if n == 2:
        return result[1]
    if n == 1:
        return None
    return result[1:]


def _bad_param(params: Sequence[Any]) -> TypeError:
    """The TypeError for the first kernel parameter that is not a ctypes object."""
    for i, p in enumerate(params):
        try:
            _addressof(p)
        except TypeError:
            return TypeError(
                f"kernel parameter {i} must be a ctypes object (c_uint64, c_int32, a "
                f"Structure, ...), not {type(p).__name__}: {p!r}"
            )
    return TypeError("kernel parameters must be ctypes objects")


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


class CallsBase(Backend):
    """What the call mixins of :class:`~gpuarray._driver.cuda.CudaBackend` rely on."""

    _ready: bool
    _devices: dict[int, Any]

    def _dev(self, ordinal: int) -> Any:
        raise NotImplementedError
