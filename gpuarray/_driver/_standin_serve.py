"""The Python side of the stand-in driver: CUDA driver calls served by the simulator.

One concern: turning the driver entry points of ``_standin.c`` (the stand-in
``libcuda.so.1``) into calls of one :class:`~gpuarray._driver.sim.SimBackend`
per process, configured from ``GPUARRAY_SIM_*`` as the ``sim`` backend is.
The C side passes every argument as an unsigned 64-bit integer (pointers as
addresses; signed ``int`` arguments sign-extended) and returns what
:func:`serve` returns; outputs are written here through their pointers with
ctypes, with the sizes of ``cuda.h``.

Conventions
-----------
- Each handler is named after the driver form it serves (``cuMemAlloc_v2``)
  and gets the call's arguments; ``_ptsz`` forms reuse the plain handler with
  a NULL stream meaning the per-thread default stream.
- :func:`serve` never raises: a :class:`~gpuarray.errors.CudaError` becomes
  its code; :class:`~gpuarray.errors.CudaUnavailableError` (no visible
  device) becomes ``CUDA_ERROR_NO_DEVICE``; anything else (a simulator
  check such as :class:`~gpuarray.errors.StreamOrderError`, or a bug here)
  becomes ``CUDA_ERROR_UNKNOWN`` and its traceback is printed to stderr.
  The exception of the last failed call of each thread is kept
  (:func:`last_error`), so a test can see the simulator's own message.
- The C wrapper runs on the caller's thread, so the simulator's per-thread
  current context is the caller's, as with a real driver.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import CudaError, CudaUnavailableError
from .sim import SimBackend

__all__ = ["serve", "backend", "last_error", "STANDIN_DEVICE_MARK"]

#: Part of every device name the stand-in reports: how a test tells it from a GPU.
STANDIN_DEVICE_MARK = "gpuarray simulated device"

_INVALID_VALUE = 1
_NO_DEVICE = 100
_NOT_SUPPORTED = 801
_UNKNOWN = 999

_lock = threading.Lock()
_sim: SimBackend | None = None
_tls = threading.local()


def backend() -> SimBackend:
    """The simulator serving this process's driver calls (created on first use)."""
    global _sim
    s = _sim
    if s is None:
        with _lock:
            if _sim is None:
                _sim = SimBackend.from_environment()
            s = _sim
    return s


def last_error() -> BaseException | None:
    """The exception behind the calling thread's last failed driver call (None if none)."""
    return getattr(_tls, "error", None)


def serve(name: str, args: tuple[int, ...]) -> int:
    """Serve driver call ``name`` with ``args``; return its ``CUresult`` (never raises)."""
    try:
        ptsz = name.endswith("_ptsz")
        handler = _HANDLERS[name[:-5] if ptsz else name]
        if ptsz:
            handler(*args, ptsz=True)
        else:
            handler(*args)
        return 0
    except CudaError as e:
        _tls.error = e
        return e.code
    except CudaUnavailableError as e:
        _tls.error = e
        return _NO_DEVICE
    except BaseException as e:  # never lost: printed, kept, and a CUDA error code
        _tls.error = e
        print(f"gpuarray stand-in driver: {name} failed (CUDA_ERROR_UNKNOWN):",
              file=sys.stderr)
        traceback.print_exception(e, file=sys.stderr)
        return _UNKNOWN


# ------------------------------------------------------------------ helpers
def _signed(v: int) -> int:
    """An ``int`` argument (sign-extended to 64 bits by the C side)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _out(call: str, ptr: int, ctype: Any, value: Any) -> None:
    if not ptr:
        raise CudaError(_INVALID_VALUE, call, "(NULL output pointer)")
    ctype.from_address(ptr).value = value


def _output_first(fn: Callable[..., None]) -> Callable[..., None]:
    """Refuse a NULL first (output) argument before doing anything, as the driver does.

    Without this a call that creates something (an allocation, a stream...)
    would create it and then fail to hand it back: a leak.
    """
    def checked(p: int, *args: Any, **kwargs: Any) -> None:
        if not p:
            raise CudaError(_INVALID_VALUE, fn.__name__.removesuffix("_v2"), "(NULL output pointer)")
        fn(p, *args, **kwargs)

    checked.__name__ = fn.__name__
    return checked


def _stream(s: int, ptsz: bool) -> int:
    return 2 if ptsz and s == 0 else s  # NULL is the per-thread stream in _ptsz forms


def _with_ctx(ctx: int, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` with context ``ctx`` current (0: the current one), as the CUDA 13 forms do."""
    b = backend()
    if not ctx:
        return fn()
    prev = b.ctx_get_current()
    b.ctx_set_current(ctx)
    try:
        return fn()
    finally:
        b.ctx_set_current(prev)


_U32, _I32, _U64, _SIZE = ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_size_t

# cuda.h enum values (the same in CUDA 12 and 13).
_DEVICE_ATTRIBUTES = {
    75: "compute_capability_major", 76: "compute_capability_minor",
    16: "multiprocessor_count", 1: "max_threads_per_block",
    8: "max_shared_memory_per_block", 10: "warp_size", 38: "l2_cache_size",
    41: "unified_addressing", 19: "can_map_host_memory", 115: "memory_pools_supported",
    33: "pci_bus_id", 34: "pci_device_id", 5: "max_grid_dim_x", 6: "max_grid_dim_y",
    7: "max_grid_dim_z", 89: "concurrent_managed_access", 18: "integrated",
}
_PA_MEMORY_TYPE, _PA_IS_MANAGED, _PA_DEVICE_ORDINAL = 2, 8, 9
_PA_RANGE_START, _PA_RANGE_SIZE = 11, 12
_MEMPOOL_RELEASE_THRESHOLD = 4
_POOL_BASE = 0x7E00_0000  # default mem pool handle of device d: _POOL_BASE + 0x10 * (d + 1)


# ------------------------------------------------------------ the handlers
def cuInit(flags: int) -> None:
    backend().init()


def cuDriverGetVersion(p: int) -> None:
    _out("cuDriverGetVersion", p, _I32, backend().driver_version())


def cuDeviceGet(p: int, ordinal: int) -> None:
    b = backend()
    ordinal = _signed(ordinal)
    b._dev(ordinal, "cuDeviceGet")  # CUDA_ERROR_INVALID_DEVICE for a bad ordinal
    _out("cuDeviceGet", p, _I32, ordinal)


def cuDeviceGetCount(p: int) -> None:
    _out("cuDeviceGetCount", p, _I32, backend().device_count())


def cuDeviceGetName(p: int, length: int, dev: int) -> None:
    name = backend().device_name(_signed(dev)).encode()
    n = _signed(length)
    if not p or n <= 0:
        raise CudaError(_INVALID_VALUE, "cuDeviceGetName", f"(buffer {p:#x} of {n} bytes)")
    raw = name[: n - 1] + b"\0"
    ctypes.memmove(p, raw, len(raw))


def cuDeviceGetAttribute(p: int, attrib: int, dev: int) -> None:
    attrib = _signed(attrib)
    name = _DEVICE_ATTRIBUTES.get(attrib)
    if name is None:
        raise CudaError(_INVALID_VALUE, "cuDeviceGetAttribute",
                        f"attribute {attrib} is not one the stand-in serves")
    _out("cuDeviceGetAttribute", p, _I32, backend().device_attribute(name, _signed(dev)))


def cuDeviceTotalMem_v2(p: int, dev: int) -> None:
    _out("cuDeviceTotalMem", p, _SIZE, backend().device_total_memory(_signed(dev)))


def cuDeviceGetUuid_v2(p: int, dev: int) -> None:
    uuid = backend().device_uuid(_signed(dev))
    if not p:
        raise CudaError(_INVALID_VALUE, "cuDeviceGetUuid", "(NULL output pointer)")
    ctypes.memmove(p, uuid, 16)


cuDeviceGetUuid = cuDeviceGetUuid_v2


def cuDeviceCanAccessPeer(p: int, dev: int, peer: int) -> None:
    ok = backend().device_can_access_peer(_signed(dev), _signed(peer))
    _out("cuDeviceCanAccessPeer", p, _I32, int(ok))


@_output_first
def cuDevicePrimaryCtxRetain(p: int, dev: int) -> None:
    _out("cuDevicePrimaryCtxRetain", p, _U64, backend().primary_ctx_retain(_signed(dev)))


def cuDevicePrimaryCtxRelease_v2(dev: int) -> None:
    backend().primary_ctx_release(_signed(dev))


def cuDevicePrimaryCtxReset_v2(dev: int) -> None:
    backend().primary_ctx_reset(_signed(dev))


def cuDeviceGetDefaultMemPool(p: int, dev: int) -> None:
    d = backend()._dev(_signed(dev), "cuDeviceGetDefaultMemPool")
    _out("cuDeviceGetDefaultMemPool", p, _U64, _POOL_BASE + 0x10 * (d + 1))


def cuMemPoolSetAttribute(pool: int, attr: int, value: int) -> None:
    call = "cuMemPoolSetAttribute"
    d = (pool - _POOL_BASE) // 0x10 - 1
    if pool <= _POOL_BASE or (pool - _POOL_BASE) % 0x10 or not 0 <= d < backend().devices:
        raise CudaError(_INVALID_VALUE, call, f"{pool:#x} is not a memory pool")
    if _signed(attr) != _MEMPOOL_RELEASE_THRESHOLD:
        raise CudaError(_NOT_SUPPORTED, call, f"attribute {_signed(attr)} (the stand-in serves "
                                              "CU_MEMPOOL_ATTR_RELEASE_THRESHOLD only)")
    if not value:
        raise CudaError(_INVALID_VALUE, call, "(NULL value)")
    backend().mempool_set_release_threshold(d, _U64.from_address(value).value)


def cuCtxSetCurrent(ctx: int) -> None:
    backend().ctx_set_current(ctx)


def cuCtxGetCurrent(p: int) -> None:
    _out("cuCtxGetCurrent", p, _U64, backend().ctx_get_current())


def cuCtxGetDevice(p: int) -> None:
    _out("cuCtxGetDevice", p, _I32, backend().ctx_get_device())


def cuCtxGetDevice_v2(p: int, ctx: int) -> None:
    _out("cuCtxGetDevice", p, _I32, _with_ctx(ctx, backend().ctx_get_device))


def cuCtxSynchronize() -> None:
    backend().ctx_synchronize()


def cuCtxSynchronize_v2(ctx: int) -> None:
    _with_ctx(ctx, backend().ctx_synchronize)


def cuCtxEnablePeerAccess(ctx: int, flags: int) -> None:
    if flags:
        raise CudaError(_INVALID_VALUE, "cuCtxEnablePeerAccess", f"flags {flags} (must be 0)")
    backend().ctx_enable_peer_access(ctx)


def cuProfilerStart() -> None:
    backend().profiler_start()


def cuProfilerStop() -> None:
    backend().profiler_stop()


# ------------------------------------------------------------------ memory
@_output_first
def cuMemAlloc_v2(p: int, nbytes: int) -> None:
    _out("cuMemAlloc", p, _U64, backend().mem_alloc(nbytes))


def cuMemFree_v2(ptr: int) -> None:
    backend().mem_free(ptr)


@_output_first
def cuMemAllocAsync(p: int, nbytes: int, stream: int, ptsz: bool = False) -> None:
    _out("cuMemAllocAsync", p, _U64, backend().mem_alloc_async(nbytes, _stream(stream, ptsz)))


def cuMemFreeAsync(ptr: int, stream: int, ptsz: bool = False) -> None:
    backend().mem_free_async(ptr, _stream(stream, ptsz))


def cuMemGetInfo_v2(pfree: int, ptotal: int) -> None:
    free, total = backend().mem_get_info()
    _out("cuMemGetInfo", pfree, _SIZE, free)
    _out("cuMemGetInfo", ptotal, _SIZE, total)


@_output_first
def cuMemHostAlloc(p: int, nbytes: int, flags: int) -> None:
    if flags & ~7:
        raise CudaError(_INVALID_VALUE, "cuMemHostAlloc", f"flags {flags:#x}")
    ptr = backend().mem_host_alloc(nbytes, mapped=bool(flags & 2), portable=bool(flags & 1),
                                   write_combined=bool(flags & 4))
    _out("cuMemHostAlloc", p, _U64, ptr)


def cuMemFreeHost(ptr: int) -> None:
    backend().mem_free_host(ptr)


def cuMemHostRegister_v2(ptr: int, nbytes: int, flags: int) -> None:
    if flags & ~3:
        raise CudaError(_NOT_SUPPORTED, "cuMemHostRegister", f"flags {flags:#x} (the stand-in "
                                                             "serves PORTABLE and DEVICEMAP)")
    backend().mem_host_register(ptr, nbytes, mapped=bool(flags & 2), portable=bool(flags & 1))


def cuMemHostUnregister(ptr: int) -> None:
    backend().mem_host_unregister(ptr)


def cuMemHostGetDevicePointer_v2(p: int, host: int, flags: int) -> None:
    if flags:
        raise CudaError(_INVALID_VALUE, "cuMemHostGetDevicePointer", f"flags {flags} (must be 0)")
    _out("cuMemHostGetDevicePointer", p, _U64, backend().mem_host_get_device_pointer(host))


def cuPointerGetAttributes(n: int, attrs: int, data: int, ptr: int) -> None:
    call = "cuPointerGetAttributes"
    if not attrs or not data:
        raise CudaError(_INVALID_VALUE, call, "(NULL attributes or data)")
    info = backend().pointer_info(ptr)
    known = info.memory_type != 0
    for i in range(n):
        attr = _I32.from_address(attrs + 4 * i).value
        out = ctypes.c_void_p.from_address(data + 8 * i).value
        if not out:
            continue  # CUDA skips a NULL data slot
        if attr == _PA_MEMORY_TYPE:
            _U32.from_address(out).value = info.memory_type
        elif attr == _PA_DEVICE_ORDINAL:
            _I32.from_address(out).value = info.device_ordinal if known else -2
        elif attr == _PA_RANGE_START:
            _U64.from_address(out).value = info.base
        elif attr == _PA_RANGE_SIZE:
            _SIZE.from_address(out).value = info.size
        elif attr == _PA_IS_MANAGED:
            ctypes.c_bool.from_address(out).value = bool(info.is_managed)
        else:
            raise CudaError(_NOT_SUPPORTED, call, f"pointer attribute {attr} is not one the "
                                                  "stand-in serves")


@_output_first
def cuMemAllocManaged(p: int, nbytes: int, flags: int) -> None:
    if flags not in (1, 2):  # CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST
        raise CudaError(_INVALID_VALUE, "cuMemAllocManaged", f"flags {flags}")
    _out("cuMemAllocManaged", p, _U64, backend().mem_alloc_managed(nbytes, flags == 1))


def cuMemcpyHtoDAsync_v2(dst: int, src: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memcpy_htod_async(dst, src, n, _stream(stream, ptsz))


def cuMemcpyDtoHAsync_v2(dst: int, src: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memcpy_dtoh_async(dst, src, n, _stream(stream, ptsz))


def cuMemcpyDtoDAsync_v2(dst: int, src: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memcpy_dtod_async(dst, src, n, _stream(stream, ptsz))


class _Memcpy2D(ctypes.Structure):
    """``CUDA_MEMCPY2D`` of cuda.h."""

    _fields_ = [
        ("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t),
        ("srcMemoryType", ctypes.c_int), ("srcHost", ctypes.c_void_p),
        ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
        ("srcPitch", ctypes.c_size_t),
        ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t),
        ("dstMemoryType", ctypes.c_int), ("dstHost", ctypes.c_void_p),
        ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p),
        ("dstPitch", ctypes.c_size_t),
        ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t),
    ]


def _side(p: _Memcpy2D, which: str) -> tuple[int, bool]:
    mtype = getattr(p, which + "MemoryType")
    x, y = getattr(p, which + "XInBytes"), getattr(p, which + "Y")
    pitch = getattr(p, which + "Pitch")
    if mtype == 1:  # HOST
        base, device = getattr(p, which + "Host") or 0, False
    elif mtype in (2, 4):  # DEVICE, UNIFIED
        base, device = getattr(p, which + "Device"), True
    else:
        raise CudaError(_NOT_SUPPORTED, "cuMemcpy2DAsync",
                        f"{which} memory type {mtype} (the stand-in serves HOST, DEVICE, UNIFIED)")
    return base + y * pitch + x, device


def cuMemcpy2DAsync_v2(pcopy: int, stream: int, ptsz: bool = False) -> None:
    if not pcopy:
        raise CudaError(_INVALID_VALUE, "cuMemcpy2DAsync", "(NULL CUDA_MEMCPY2D)")
    p = _Memcpy2D.from_buffer_copy(ctypes.string_at(pcopy, ctypes.sizeof(_Memcpy2D)))
    src, src_dev = _side(p, "src")
    dst, dst_dev = _side(p, "dst")
    backend().memcpy_2d_async(dst, p.dstPitch, dst_dev, src, p.srcPitch, src_dev,
                              p.WidthInBytes, p.Height, _stream(stream, ptsz))


def cuMemsetD8Async(dst: int, v: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memset_d8_async(dst, v & 0xFF, n, _stream(stream, ptsz))


def cuMemsetD16Async(dst: int, v: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memset_d16_async(dst, v & 0xFFFF, n, _stream(stream, ptsz))


def cuMemsetD32Async(dst: int, v: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memset_d32_async(dst, v & 0xFFFFFFFF, n, _stream(stream, ptsz))


# ---------------------------------------------------------- streams, events
@_output_first
def cuStreamCreateWithPriority(p: int, flags: int, priority: int) -> None:
    if flags & ~1:
        raise CudaError(_INVALID_VALUE, "cuStreamCreateWithPriority", f"flags {flags:#x}")
    h = backend().stream_create(non_blocking=bool(flags & 1), priority=_signed(priority))
    _out("cuStreamCreateWithPriority", p, _U64, h)


def cuStreamDestroy_v2(stream: int) -> None:
    backend().stream_destroy(stream)


def cuStreamQuery(stream: int, ptsz: bool = False) -> None:
    if not backend().stream_query(_stream(stream, ptsz)):
        raise CudaError(600, "cuStreamQuery")  # CUDA_ERROR_NOT_READY


def cuStreamSynchronize(stream: int, ptsz: bool = False) -> None:
    backend().stream_synchronize(_stream(stream, ptsz))


def cuStreamWaitEvent(stream: int, event: int, flags: int, ptsz: bool = False) -> None:
    if flags & ~1:  # CU_EVENT_WAIT_DEFAULT / CU_EVENT_WAIT_EXTERNAL
        raise CudaError(_INVALID_VALUE, "cuStreamWaitEvent", f"flags {flags:#x}")
    backend().stream_wait_event(_stream(stream, ptsz), event)


def cuStreamGetCtx(stream: int, p: int, ptsz: bool = False) -> None:
    _out("cuStreamGetCtx", p, _U64, backend().stream_get_ctx(_stream(stream, ptsz)))


def cuStreamGetCtx_v2(stream: int, p: int, pgreen: int, ptsz: bool = False) -> None:
    cuStreamGetCtx(stream, p, ptsz)
    if pgreen:
        _U64.from_address(pgreen).value = 0  # no green contexts


_STREAM_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)


def cuStreamAddCallback(stream: int, fn: int, user: int, flags: int, ptsz: bool = False) -> None:
    call = "cuStreamAddCallback"
    if not fn:
        raise CudaError(_INVALID_VALUE, call, "(NULL callback)")
    if flags:
        raise CudaError(_INVALID_VALUE, call, f"flags {flags} (must be 0)")
    cfn = _STREAM_CALLBACK(fn)

    def host_fn(status: int) -> None:
        cfn(stream, status, user)  # CUDA passes the stream as given, the status, userData

    host_fn.__name__ = f"C callback {fn:#x}"
    backend().stream_add_callback(_stream(stream, ptsz), host_fn)


@_output_first
def cuEventCreate(p: int, flags: int) -> None:
    if flags & ~7:
        raise CudaError(_INVALID_VALUE, "cuEventCreate", f"flags {flags:#x}")
    if flags & 4 and not flags & 2:
        raise CudaError(_INVALID_VALUE, "cuEventCreate",
                        "CU_EVENT_INTERPROCESS needs CU_EVENT_DISABLE_TIMING")
    h = backend().event_create(timing=not flags & 2, interprocess=bool(flags & 4))
    _out("cuEventCreate", p, _U64, h)


def cuEventDestroy_v2(event: int) -> None:
    backend().event_destroy(event)


def cuEventRecord(event: int, stream: int, ptsz: bool = False) -> None:
    backend().event_record(event, _stream(stream, ptsz))


def cuEventQuery(event: int) -> None:
    if not backend().event_query(event):
        raise CudaError(600, "cuEventQuery")  # CUDA_ERROR_NOT_READY


def cuEventSynchronize(event: int) -> None:
    backend().event_synchronize(event)


def cuEventElapsedTime(p: int, start: int, end: int) -> None:
    _out("cuEventElapsedTime", p, ctypes.c_float, backend().event_elapsed_time(start, end))


cuEventElapsedTime_v2 = cuEventElapsedTime


# ------------------------------------------------------- modules, launches
def _image_size(p: int) -> int:
    """Bytes of the module image at ``p``: ELF and fatbin headers say; PTX is NUL-terminated."""
    head = ctypes.string_at(p, 4)
    if head == b"\x7fELF":
        hdr = ctypes.string_at(p, 64)
        if hdr[4] != 2:
            raise CudaError(200, "cuModuleLoadData", "(a 32-bit ELF image)")  # INVALID_IMAGE
        shoff = int.from_bytes(hdr[0x28:0x30], "little")
        phoff = int.from_bytes(hdr[0x20:0x28], "little")
        phentsize, phnum = (int.from_bytes(hdr[i:i + 2], "little") for i in (0x36, 0x38))
        shentsize, shnum = (int.from_bytes(hdr[i:i + 2], "little") for i in (0x3A, 0x3C))
        return max(64, shoff + shentsize * shnum, phoff + phentsize * phnum)
    if head == b"\x50\xed\x55\xba":
        hdr = ctypes.string_at(p, 16)
        return int.from_bytes(hdr[6:8], "little") + int.from_bytes(hdr[8:16], "little")
    return len(ctypes.string_at(p)) + 1


@_output_first
def cuModuleLoadData(p: int, image: int) -> None:
    if not image:
        raise CudaError(_INVALID_VALUE, "cuModuleLoadData", "(NULL image)")
    data = ctypes.string_at(image, _image_size(image))
    _out("cuModuleLoadData", p, _U64, backend().module_load_data(data))


def cuModuleUnload(module: int) -> None:
    backend().module_unload(module)


@_output_first
def cuModuleGetFunction(p: int, module: int, name: int) -> None:
    if not name:
        raise CudaError(_INVALID_VALUE, "cuModuleGetFunction", "(NULL name)")
    kname = ctypes.string_at(name).decode("utf-8", "replace")
    _out("cuModuleGetFunction", p, _U64, backend().module_get_function(module, kname))


def cuLaunchKernel(func: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                   shared: int, stream: int, params: int, extra: int, ptsz: bool = False) -> None:
    call = "cuLaunchKernel"
    b = backend()
    kernel = b.function_kernel(func)
    types = getattr(kernel, "param_types", None)
    if types is None:
        raise CudaError(_INVALID_VALUE, call, f"{kernel!r} has no param_types: the stand-in "
                                              "cannot decode its kernelParams")
    if extra:
        raise CudaError(_NOT_SUPPORTED, call, "(the stand-in serves kernelParams, not extra)")
    if types and not params:
        raise CudaError(_INVALID_VALUE, call, f"(NULL kernelParams for {len(types)} parameters)")
    values = []
    for i, t in enumerate(types):
        addr = ctypes.c_void_p.from_address(params + 8 * i).value
        if not addr:
            raise CudaError(_INVALID_VALUE, call, f"(kernelParams[{i}] is NULL)")
        values.append(t.from_buffer_copy(ctypes.string_at(addr, ctypes.sizeof(t))))
    b.launch_kernel(func, (gx, gy, gz), (bx, by, bz), shared, _stream(stream, ptsz), values)


# --------------------------------------------------------------------- IPC
@_output_first
def cuIpcGetMemHandle(p: int, ptr: int) -> None:
    handle = backend().ipc_get_mem_handle(ptr)
    if not p:
        raise CudaError(_INVALID_VALUE, "cuIpcGetMemHandle", "(NULL handle)")
    ctypes.memmove(p, handle, len(handle))


@_output_first
def cuIpcOpenMemHandle_v2(p: int, handle: int, flags: int) -> None:
    if flags & ~1:
        raise CudaError(_INVALID_VALUE, "cuIpcOpenMemHandle", f"flags {flags:#x}")
    _out("cuIpcOpenMemHandle", p, _U64, backend().ipc_open_mem_handle(ctypes.string_at(handle, 64)))


def cuIpcCloseMemHandle(ptr: int) -> None:
    backend().ipc_close_mem_handle(ptr)


_HANDLERS: dict[str, Callable[..., None]] = {
    k: v for k, v in dict(globals()).items() if k.startswith("cu") and callable(v)
}
