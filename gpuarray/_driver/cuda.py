"""The real driver backend: :class:`Backend` implemented with ``cuda.bindings.driver``.

This module's one concern is translating the driver interface of
:mod:`gpuarray._driver._base` into CUDA driver API calls and their result
codes into gpuarray exceptions.

Conventions
-----------
- **Nothing is loaded at import.**  ``cuda.bindings.driver`` is imported by
  :meth:`CudaBackend.init` (which then calls ``cuInit``), so importing this
  module on a machine without a driver, or without cuda-python, succeeds.
- **Lazy initialisation.**  Every public method starts with
  ``if not self._ready: self.init()`` (one attribute test once initialised), so
  a method called before the device layer initialised CUDA raises
  :class:`~gpuarray.errors.CudaUnavailableError` rather than an obscure
  ``AttributeError``.
- **One checkpoint.**  Every driver call's result tuple goes through
  :func:`_check`, which returns the outputs or raises
  :class:`~gpuarray.errors.CudaError` (``CudaOutOfMemoryError`` for
  ``CUDA_ERROR_OUT_OF_MEMORY``) named after the enum member and the call.
- **Handles are ints** in and out.  cuda.bindings accepts a plain ``int``
  wherever it takes a ``CUstream``/``CUevent``/``CUdeviceptr``/... (it builds
  the wrapper itself), so ints are passed straight through; results are
  converted with ``int(...)``.  Stream ``0`` is mapped to ``1``
  (``CU_STREAM_LEGACY``) explicitly, because the bindings may be switched to
  per-thread default-stream semantics (``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM``),
  in which case a NULL stream would mean the per-thread stream.
- **cuda-bindings 12.8+ and 13.x** are both supported; the differences that
  matter here are resolved once, in :func:`_bind` (see its docstring).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import (
    CUDA_ERROR_NAMES,
    CudaError,
    CudaOutOfMemoryError,
    CudaUnavailableError,
)
from . import _fork
from ._base import (
    DEVICE_ATTRIBUTES,
    Backend,
    PointerInfo,
)

__all__ = ["CudaBackend"]

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

    pa = drv.CUpointer_attribute
    _PTR_ATTRS = [
        pa.CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        pa.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        pa.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        pa.CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        pa.CU_POINTER_ATTRIBUTE_IS_MANAGED,
    ]
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
    _d = drv


# ---------------------------------------------------------------- checkpoint
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
    if code == _fork.NOT_INITIALIZED and _fork.forked_from() is not None:
        return _fork.error(call, detail)  # a fork child of a process that used CUDA
    cls = CudaOutOfMemoryError if code == _ERR_OUT_OF_MEMORY else CudaError
    return cls(code, call, detail, name=_result_name(code))


def _check(result: tuple, call: str, detail: str | Callable[[], str] = "") -> Any:
    """The checkpoint every driver call goes through.

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


# ------------------------------------------------------------------ backend
class CudaBackend(Backend):
    """The driver interface on a real GPU, through ``cuda.bindings.driver``.

    Construction is free: no import of cuda.bindings, no ``cuInit``.  The
    first method call (or :meth:`init`) initialises the driver; a missing
    driver library, a missing device or an unusable driver raise
    :class:`~gpuarray.errors.CudaUnavailableError`, whose message points to
    ``GPUARRAY_BACKEND=sim``.  A failed initialisation is remembered and
    re-raised by later calls without retrying.

    Examples
    --------
    >>> b = CudaBackend()          # never touches the driver
    >>> b.name
    'cuda'
    """

    name = "cuda"

    def __init__(self) -> None:
        self._ready = False
        self._lock = threading.Lock()
        self._failure: tuple[str, BaseException] | None = None
        self._devices: dict[int, Any] = {}

    # ---------------------------------------------------------------- init
    def init(self) -> None:
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            if self._failure is None:
                self._failure = self._try_init()
            if self._failure is not None:
                reason, cause = self._failure
                raise CudaUnavailableError(reason) from cause
            self._ready = True

    def _try_init(self) -> tuple[str, BaseException] | None:
        """Import the bindings and call ``cuInit``; ``(reason, cause)`` on failure."""
        try:
            drv = _load_driver()
        except ImportError as e:
            return ("cuda-bindings is not installed (importing cuda.bindings.driver failed: "
                    f'{e}); pip install "gpuarray[cu13]" (or "gpuarray[cu12]")', e)
        try:
            res = drv.cuInit(0)
        except (RuntimeError, OSError) as e:
            # cuda.pathfinder's DynamicLibNotFoundError (a RuntimeError) in
            # 12.9+/13.x; RuntimeError("Failed to dlopen libcuda.so.1") in 12.8.
            return (
                "the NVIDIA driver library (libcuda) could not be loaded "
                f"[{type(e).__name__}: {e}]",
                e,
            )
        code = int(res[0])
        if code in _UNAVAILABLE_CODES:
            err = _error(code, "cuInit")
            version = ""
            try:  # works without cuInit: tells which driver was found
                vres = drv.cuDriverGetVersion()
                if not vres[0]:
                    v = int(vres[1])
                    version = f"; the driver supports CUDA {v // 1000}.{v % 1000 // 10}"
            except (RuntimeError, OSError):
                pass
            return (f"{_UNAVAILABLE_CODES[code]} [{err}]{version}", err)
        if code:
            raise _error(code, "cuInit")
        _bind(drv)
        return None

    def driver_version(self) -> int:
        if not self._ready:
            self.init()
        return int(_check(_d.cuDriverGetVersion(), "cuDriverGetVersion"))

    # -------------------------------------------------------------- devices
    def _dev(self, ordinal: int) -> Any:
        dev = self._devices.get(ordinal)
        if dev is None:
            if not self._ready:
                self.init()
            dev = _check(_d.cuDeviceGet(ordinal), "cuDeviceGet", lambda: f"for device {ordinal}")
            self._devices[ordinal] = dev
        return dev

    def device_count(self) -> int:
        if not self._ready:
            self.init()
        return int(_check(_d.cuDeviceGetCount(), "cuDeviceGetCount"))

    def device_name(self, ordinal: int) -> str:
        dev = self._dev(ordinal)  # before `_d.` is evaluated: it may initialise
        raw = _check(_d.cuDeviceGetName(256, dev), "cuDeviceGetName")
        return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")

    def device_attribute(self, attr: str, ordinal: int) -> int:
        if attr not in DEVICE_ATTRIBUTES:
            raise ValueError(
                f"unknown device attribute {attr!r}; expected one of {', '.join(DEVICE_ATTRIBUTES)}"
            )
        dev = self._dev(ordinal)
        return int(
            _check(
                _d.cuDeviceGetAttribute(_DEV_ATTRS[attr], dev),
                "cuDeviceGetAttribute",
                lambda: f"for attribute {attr!r} of device {ordinal}",
            )
        )

    def device_total_memory(self, ordinal: int) -> int:
        dev = self._dev(ordinal)
        return int(_check(_d.cuDeviceTotalMem(dev), "cuDeviceTotalMem"))

    def device_uuid(self, ordinal: int) -> bytes:
        dev = self._dev(ordinal)
        uuid = _check(_cuDeviceGetUuid(dev), "cuDeviceGetUuid")
        return bytes(uuid.bytes)[:16]

    def device_can_access_peer(self, ordinal: int, peer: int) -> bool:
        dev, peer_dev = self._dev(ordinal), self._dev(peer)
        return bool(_check(_d.cuDeviceCanAccessPeer(dev, peer_dev), "cuDeviceCanAccessPeer"))

    # ------------------------------------------------------------- contexts
    def primary_ctx_retain(self, ordinal: int) -> int:
        dev = self._dev(ordinal)
        return int(
            _check(
                _d.cuDevicePrimaryCtxRetain(dev),
                "cuDevicePrimaryCtxRetain",
                lambda: f"for device {ordinal}",
            )
        )

    def primary_ctx_release(self, ordinal: int) -> None:
        dev = self._dev(ordinal)
        _check(_d.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")

    def primary_ctx_reset(self, ordinal: int) -> None:
        dev = self._dev(ordinal)
        _check(_d.cuDevicePrimaryCtxReset(dev), "cuDevicePrimaryCtxReset",
               lambda: f"for device {ordinal}")

    def ctx_set_current(self, ctx: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def ctx_get_current(self) -> int:
        if not self._ready:
            self.init()
        ctx = _check(_d.cuCtxGetCurrent(), "cuCtxGetCurrent")
        return int(ctx) if ctx is not None else 0

    def ctx_get_device(self) -> int:
        if not self._ready:
            self.init()
        return int(_check(_d.cuCtxGetDevice(), "cuCtxGetDevice"))

    def ctx_synchronize(self) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuCtxSynchronize(), "cuCtxSynchronize")

    def ctx_enable_peer_access(self, peer_ctx: int) -> None:
        if not self._ready:
            self.init()
        res = _d.cuCtxEnablePeerAccess(peer_ctx, 0)
        if int(res[0]) != _ERR_PEER_ACCESS_ALREADY_ENABLED:
            _check(res, "cuCtxEnablePeerAccess")

    def profiler_start(self) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuProfilerStart(), "cuProfilerStart")

    def profiler_stop(self) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuProfilerStop(), "cuProfilerStop")

    # --------------------------------------------------------------- memory
    def mem_alloc(self, nbytes: int) -> int:
        if not self._ready:
            self.init()
        return int(
            _check(
                _d.cuMemAlloc(nbytes),
                "cuMemAlloc",
                lambda: f"while allocating {_fmt_bytes(nbytes)}",
            )
        )

    def mem_free(self, ptr: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuMemFree(ptr), "cuMemFree")

    def mem_alloc_async(self, nbytes: int, stream: int) -> int:
        if not self._ready:
            self.init()
        return int(
            _check(
                _d.cuMemAllocAsync(nbytes, stream or 1),
                "cuMemAllocAsync",
                lambda: f"while allocating {_fmt_bytes(nbytes)} on stream {stream:#x}",
            )
        )

    def mem_free_async(self, ptr: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuMemFreeAsync(ptr, stream or 1), "cuMemFreeAsync")

    def mempool_set_release_threshold(self, ordinal: int, nbytes: int) -> None:
        dev = self._dev(ordinal)
        pool = _check(_d.cuDeviceGetDefaultMemPool(dev), "cuDeviceGetDefaultMemPool")
        _check(
            _d.cuMemPoolSetAttribute(pool, _RELEASE_THRESHOLD, _cuuint64_t(nbytes)),
            "cuMemPoolSetAttribute",
            "(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)",
        )

    def mem_get_info(self) -> tuple[int, int]:
        if not self._ready:
            self.init()
        free, total = _check(_d.cuMemGetInfo(), "cuMemGetInfo")
        return int(free), int(total)

    def mem_host_alloc(
        self,
        nbytes: int,
        mapped: bool = False,
        portable: bool = False,
        write_combined: bool = False,
    ) -> int:
        if not self._ready:
            self.init()
        flags = (
            (_HOSTALLOC_DEVICEMAP if mapped else 0)
            | (_HOSTALLOC_PORTABLE if portable else 0)
            | (_HOSTALLOC_WRITECOMBINED if write_combined else 0)
        )
        return int(
            _check(
                _d.cuMemHostAlloc(nbytes, flags),
                "cuMemHostAlloc",
                lambda: f"while allocating {_fmt_bytes(nbytes)} of pinned host memory",
            )
        )

    def mem_free_host(self, ptr: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuMemFreeHost(ptr), "cuMemFreeHost")

    def mem_host_register(
        self, ptr: int, nbytes: int, mapped: bool = False, portable: bool = False
    ) -> None:
        if not self._ready:
            self.init()
        flags = (_HOSTREGISTER_DEVICEMAP if mapped else 0) | (
            _HOSTREGISTER_PORTABLE if portable else 0
        )
        _check(
            _d.cuMemHostRegister(ptr, nbytes, flags),
            "cuMemHostRegister",
            lambda: f"while page-locking {_fmt_bytes(nbytes)} at {ptr:#x}",
        )

    def mem_host_unregister(self, ptr: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuMemHostUnregister(ptr), "cuMemHostUnregister")

    def mem_host_get_device_pointer(self, host_ptr: int) -> int:
        if not self._ready:
            self.init()
        return int(_check(_d.cuMemHostGetDevicePointer(host_ptr, 0), "cuMemHostGetDevicePointer"))

    def pointer_info(self, ptr: int) -> PointerInfo:
        if not self._ready:
            self.init()
        res = _d.cuPointerGetAttributes(5, _PTR_ATTRS, ptr)
        if int(res[0]) == _ERR_INVALID_VALUE:
            # Older drivers report unknown (pageable) host memory this way.
            return PointerInfo(0, -1, 0, 0)
        mtype, ordinal, base, size, managed = _check(res, "cuPointerGetAttributes")
        mtype = int(mtype)
        if mtype == 0:
            # Not a CUDA address: the driver fills defaults (ordinal -2).
            return PointerInfo(0, -1, 0, 0)
        return PointerInfo(mtype, int(ordinal), int(base), int(size), bool(managed))

    # ----------------------------------------------------- copies and sets
    def memcpy_htod_async(self, dst: int, src_host: int, nbytes: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuMemcpyHtoDAsync(dst, src_host, nbytes, stream or 1), "cuMemcpyHtoDAsync")

    def memcpy_dtoh_async(self, dst_host: int, src: int, nbytes: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuMemcpyDtoHAsync(dst_host, src, nbytes, stream or 1), "cuMemcpyDtoHAsync")

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuMemcpyDtoDAsync(dst, src, nbytes, stream or 1), "cuMemcpyDtoDAsync")

    def memcpy_2d_async(
        self,
        dst: int,
        dst_pitch: int,
        dst_is_device: bool,
        src: int,
        src_pitch: int,
        src_is_device: bool,
        width_bytes: int,
        height: int,
        stream: int,
    ) -> None:
        if not self._ready:
            self.init()
        p = _CUDA_MEMCPY2D()  # zero-initialised: X/Y offsets 0
        if src_is_device:
            p.srcMemoryType = _MT_DEVICE
            p.srcDevice = src
        else:
            p.srcMemoryType = _MT_HOST
            p.srcHost = src
        p.srcPitch = src_pitch
        if dst_is_device:
            p.dstMemoryType = _MT_DEVICE
            p.dstDevice = dst
        else:
            p.dstMemoryType = _MT_HOST
            p.dstHost = dst
        p.dstPitch = dst_pitch
        p.WidthInBytes = width_bytes
        p.Height = height
        _check(
            _d.cuMemcpy2DAsync(p, stream or 1),
            "cuMemcpy2DAsync",
            lambda: (
                f"copying {height} rows of {width_bytes} bytes "
                f"(src pitch {src_pitch}, dst pitch {dst_pitch})"
            ),
        )

    # Values are taken modulo 2**bits, so signed patterns (-1) are accepted.
    def memset_d8_async(self, dst: int, value: int, count: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuMemsetD8Async(dst, value & 0xFF, count, stream or 1), "cuMemsetD8Async")

    def memset_d16_async(self, dst: int, value: int, count: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuMemsetD16Async(dst, value & 0xFFFF, count, stream or 1), "cuMemsetD16Async")

    def memset_d32_async(self, dst: int, value: int, count: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuMemsetD32Async(dst, value & 0xFFFFFFFF, count, stream or 1), "cuMemsetD32Async")

    # -------------------------------------------------------------- streams
    def stream_create(self, non_blocking: bool = False, priority: int = 0) -> int:
        if not self._ready:
            self.init()
        flags = _STREAM_NON_BLOCKING if non_blocking else 0
        return int(
            _check(_d.cuStreamCreateWithPriority(flags, priority), "cuStreamCreateWithPriority")
        )

    def stream_destroy(self, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuStreamDestroy(stream), "cuStreamDestroy")

    def stream_query(self, stream: int) -> bool:
        if not self._ready:
            self.init()
        res = _d.cuStreamQuery(stream or 1)
        if int(res[0]) == _ERR_NOT_READY:
            return False
        _check(res, "cuStreamQuery")
        return True

    def stream_synchronize(self, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuStreamSynchronize(stream or 1), "cuStreamSynchronize")

    def stream_wait_event(self, stream: int, event: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuStreamWaitEvent(stream or 1, event, 0), "cuStreamWaitEvent")

    def stream_get_ctx(self, stream: int) -> int:
        if not self._ready:
            self.init()
        return int(_check(_d.cuStreamGetCtx(stream or 1), "cuStreamGetCtx"))

    # --------------------------------------------------------------- events
    def event_create(self, timing: bool = True, interprocess: bool = False) -> int:
        # CUDA requires interprocess events to disable timing: asking for both
        # is refused by the driver (CUDA_ERROR_INVALID_VALUE), not corrected here.
        if not self._ready:
            self.init()
        flags = (0 if timing else _EVENT_DISABLE_TIMING) | (
            _EVENT_INTERPROCESS if interprocess else 0
        )
        return int(_check(_d.cuEventCreate(flags), "cuEventCreate"))

    def event_destroy(self, event: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuEventDestroy(event), "cuEventDestroy")

    def event_record(self, event: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuEventRecord(event, stream or 1), "cuEventRecord")

    def event_query(self, event: int) -> bool:
        if not self._ready:
            self.init()
        res = _d.cuEventQuery(event)
        if int(res[0]) == _ERR_NOT_READY:
            return False
        _check(res, "cuEventQuery")
        return True

    def event_synchronize(self, event: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuEventSynchronize(event), "cuEventSynchronize")

    def event_elapsed_time(self, start: int, end: int) -> float:
        if not self._ready:
            self.init()
        return float(_check(_d.cuEventElapsedTime(start, end), "cuEventElapsedTime"))

    # -------------------------------------------------- modules and launches
    def module_load_data(self, image: bytes) -> int:
        if not self._ready:
            self.init()
        image = bytes(image)
        head = image[:4]
        if head != _ELF_MAGIC and head != _FATBIN_MAGIC and not image.endswith(b"\0"):
            image += b"\0"  # PTX text must be NUL-terminated
        return int(
            _check(
                _d.cuModuleLoadData(image),
                "cuModuleLoadData",
                lambda: f"while loading a {len(image)}-byte module image",
            )
        )

    def module_unload(self, module: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuModuleUnload(module), "cuModuleUnload")

    def module_get_function(self, module: int, name: str) -> int:
        if not self._ready:
            self.init()
        return int(
            _check(
                _d.cuModuleGetFunction(module, name.encode()),
                "cuModuleGetFunction",
                lambda: f"for kernel {name!r}",
            )
        )

    def launch_kernel(
        self,
        func: int,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: int,
        params: Sequence[Any],
    ) -> None:
        if not self._ready:
            self.init()
        n = len(params)
        if n:
            # The caller's `params` keeps the ctypes objects alive for the
            # call; `args` (the void*[] of their addresses) lives in this frame.
            array_type = _PARAM_ARRAYS.get(n)
            if array_type is None:
                array_type = _PARAM_ARRAYS[n] = _VOID_P * n
            args = array_type()
            try:
                args[:] = [_addressof(p) for p in params]  # faster than array_type(*...)
            except TypeError:
                raise _bad_param(params) from None
            kp = _addressof(args)
        else:
            kp = 0
        gx, gy, gz = grid
        bx, by, bz = block
        _check(
            _d.cuLaunchKernel(func, gx, gy, gz, bx, by, bz, shared_mem, stream or 1, kp, 0),
            "cuLaunchKernel",
            lambda: (
                f"launching grid {tuple(grid)} block {tuple(block)} "
                f"with {shared_mem} bytes of shared memory"
            ),
        )

    # ------------------------------------------------------------------ IPC
    def ipc_get_mem_handle(self, ptr: int) -> bytes:
        if not self._ready:
            self.init()
        handle = _check(_d.cuIpcGetMemHandle(ptr), "cuIpcGetMemHandle", lambda: f"for {ptr:#x}")
        return ctypes.string_at(handle.getPtr(), _IPC_HANDLE_SIZE)

    def ipc_open_mem_handle(self, handle: bytes) -> int:
        if not self._ready:
            self.init()
        raw = bytes(handle)
        if len(raw) != _IPC_HANDLE_SIZE:
            raise ValueError(f"an IPC memory handle is {_IPC_HANDLE_SIZE} bytes, got {len(raw)}")
        h = _CUipcMemHandle()
        ctypes.memmove(h.getPtr(), raw, _IPC_HANDLE_SIZE)
        return int(_check(_d.cuIpcOpenMemHandle(h, _IPC_LAZY_PEER), "cuIpcOpenMemHandle"))

    def ipc_close_mem_handle(self, ptr: int) -> None:
        if not self._ready:
            self.init()
        _check(_d.cuIpcCloseMemHandle(ptr), "cuIpcCloseMemHandle")

    # ------------------------------------------ managed memory, host callbacks
    def mem_alloc_managed(self, nbytes: int, attach_global: bool = True) -> int:
        if not self._ready:
            self.init()
        flags = _d.CUmemAttach_flags
        flag = flags.CU_MEM_ATTACH_GLOBAL if attach_global else flags.CU_MEM_ATTACH_HOST
        return int(
            _check(
                _d.cuMemAllocManaged(nbytes, int(flag)),
                "cuMemAllocManaged",
                lambda: f"while allocating {_fmt_bytes(nbytes)} of managed memory",
            )
        )

    def stream_add_callback(self, stream: int, fn: Callable[[int], None]) -> None:
        if not self._ready:
            self.init()
        token = _register_host_fn(fn)
        try:
            _check(
                _d.cuStreamAddCallback(stream or 1, _d.CUstreamCallback(_HOST_FN_ADDR), token, 0),
                "cuStreamAddCallback",
            )
        except BaseException:
            _host_fns.pop(token, None)  # never called: do not keep it
            raise


# Host callbacks (cuStreamAddCallback rather than cuLaunchHostFunc: the latter
# is not called at all when the context has failed, so a waiter would hang;
# the former is called with the error status).  The driver calls one ctypes
# trampoline with a token; the token names the Python callable, which is
# dropped once called.  An exception in the callable is reported by ctypes as
# unraisable ("Exception ignored on calling ctypes callback function").
_host_fns: dict[int, Callable[[int], None]] = {}
_host_fn_tokens = iter(range(1, 1 << 62))
_host_fn_lock = threading.Lock()


def _register_host_fn(fn: Callable[[int], None]) -> int:
    with _host_fn_lock:
        token = next(_host_fn_tokens)
        _host_fns[token] = fn
    return token


@ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
def _host_fn_trampoline(stream: Any, status: int, token: Any) -> None:
    fn = _host_fns.pop(int(token or 0), None)
    if fn is not None:
        fn(int(status))


_HOST_FN_ADDR = ctypes.cast(_host_fn_trampoline, ctypes.c_void_p).value
