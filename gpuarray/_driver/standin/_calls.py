"""The stand-in driver's calls: each driver form ``cuda.py`` reaches, served by the simulator.

One concern: one function per driver form (named after it: ``cuMemAlloc_v2``),
taking that form's arguments as the C side passes them and doing the call
on the simulator of ``_support.py``; a failure is a
:class:`~gpuarray.errors.CudaError` (``_serve.serve`` turns it into
the ``CUresult``).  ``_ptsz`` forms reuse the plain function with
``ptsz=True``: a NULL stream then means the per-thread default stream.
"""

from __future__ import annotations

import ctypes

from ...errors import CudaError
from ._support import (
    _DEVICE_ATTRIBUTES,
    _I32,
    _INVALID_VALUE,
    _MEMPOOL_RELEASE_THRESHOLD,
    _NOT_SUPPORTED,
    _PA_DEVICE_ORDINAL,
    _PA_IS_MANAGED,
    _PA_MEMORY_TYPE,
    _PA_RANGE_SIZE,
    _PA_RANGE_START,
    _POOL_BASE,
    _SIZE,
    _U32,
    _U64,
    _device,
    _out,
    _output_first,
    _signed,
    _stream,
    _with_ctx,
    backend,
)


def cuInit(flags: int) -> None:
    backend().init()


def cuDriverGetVersion(p: int) -> None:
    _out("cuDriverGetVersion", p, _I32, backend().driver_version())


def cuDeviceGet(p: int, ordinal: int) -> None:
    _out("cuDeviceGet", p, _I32, _device("cuDeviceGet", ordinal))


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
    d = _device("cuDeviceGetDefaultMemPool", dev)
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
    backend().stream_wait_event(_stream(stream, ptsz), event, external=bool(flags & 1))


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
