"""The stand-in driver's memory calls: allocations, page-locked memory, pointer queries, IPC.

One concern: the driver forms that make, free and describe memory --
``cuMemAlloc_v2``/``Free``, stream-ordered allocation, page-locked and
registered host memory, managed memory, ``cuMemGetInfo``,
``cuMemGetAddressRange_v2``, ``cuPointerGetAttribute`` and
``cuPointerGetAttributes`` (every ``CUpointer_attribute``),
``cuPointerSetAttribute`` (SYNC_MEMOPS, the one cuda.h lets one set),
pitched allocations (``cuMemAllocPitch_v2``), and the
``cuIpc*`` memory handles.  Copies and memsets are in ``_copy_calls.py``.

Pointer attributes follow cuda.h: ``cuPointerGetAttribute`` refuses an
address that is not CUDA memory (``CUDA_ERROR_INVALID_VALUE``) and an
attribute the memory has not (a host pointer of device memory...), while
``cuPointerGetAttributes`` never fails for the address: it answers the
defaults (zeros; ``DEVICE_ORDINAL`` -2) as CUDA does.
"""

from __future__ import annotations

import ctypes
from typing import Any

from gpuarray.errors import CudaError

from .._codes import NOT_FOUND as _NOT_FOUND
from .._codes import NOT_SUPPORTED as _NOT_SUPPORTED
from ._support import (
    _I32,
    _INVALID_VALUE,
    _POOL_BASE,
    _SIZE,
    _U32,
    _U64,
    _out,
    _output_first,
    _signed,
    _stream,
    backend,
)

_BOOL = ctypes.c_bool
_MT_HOST, _MT_DEVICE = 1, 2
_ACCESS_READWRITE = 3  # CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
_SYNC_MEMOPS = 6  # CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: the one cuPointerSetAttribute sets


@_output_first
def cuMemAlloc_v2(p: int, nbytes: int) -> None:
    _out("cuMemAlloc", p, _U64, backend().mem_alloc(nbytes))


def cuMemFree_v2(ptr: int) -> None:
    backend().mem_free(ptr)


@_output_first
def cuMemAllocAsync(p: int, nbytes: int, stream: int, ptsz: bool = False) -> None:
    _out("cuMemAllocAsync", p, _U64, backend().mem_alloc_async(nbytes, _stream(stream, ptsz)))


@_output_first
def cuMemAllocFromPoolAsync(p: int, nbytes: int, pool: int, stream: int, ptsz: bool = False) -> None:
    call = "cuMemAllocFromPoolAsync"
    b = backend()
    s = _stream(stream, ptsz)
    ctx = b.stream_get_ctx(s)
    dev = b._ctx_by_handle(ctx, call).device
    if pool != _POOL_BASE + 0x10 * (dev + 1):  # only the default pools exist
        raise CudaError(_INVALID_VALUE, call, f"{pool:#x} is not the memory pool of device {dev}")
    _out(call, p, _U64, b.mem_alloc_async(nbytes, s))


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


@_output_first
def cuMemAllocHost_v2(p: int, nbytes: int) -> None:
    cuMemHostAlloc(p, nbytes, 0)


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


def cuMemHostGetFlags(p: int, host: int) -> None:
    _out("cuMemHostGetFlags", p, _U32, backend().mem_host_get_flags(host))


#: cuMemAllocPitch: the pitch is the width rounded up to this (an H100's texture pitch
#: alignment is 32 bytes; drivers pad rows to 512), and the element sizes cuda.h allows.
_PITCH_ALIGN = 512
_ELEMENT_SIZES = (4, 8, 16)


def cuMemAllocPitch_v2(p: int, ppitch: int, width: int, height: int, element: int) -> None:
    call = "cuMemAllocPitch"
    if not p or not ppitch:
        raise CudaError(_INVALID_VALUE, call, "(NULL output pointer)")
    if element not in _ELEMENT_SIZES:
        raise CudaError(_INVALID_VALUE, call, f"ElementSizeBytes {element} (cuda.h: 4, 8 or 16)")
    b = backend()
    max_pitch = b.device_attribute("max_pitch", b.ctx_get_device())
    if not width or not height or width > max_pitch:
        raise CudaError(_INVALID_VALUE, call, f"{width} x {height} bytes (the width may be at most "
                                              f"CU_DEVICE_ATTRIBUTE_MAX_PITCH, {max_pitch})")
    pitch = -(-width // _PITCH_ALIGN) * _PITCH_ALIGN
    ptr = b.mem_alloc(pitch * height)
    _U64.from_address(p).value = ptr
    _SIZE.from_address(ppitch).value = pitch


@_output_first
def cuMemAllocManaged(p: int, nbytes: int, flags: int) -> None:
    if flags not in (1, 2):  # CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST
        raise CudaError(_INVALID_VALUE, "cuMemAllocManaged", f"flags {flags}")
    _out("cuMemAllocManaged", p, _U64, backend().mem_alloc_managed(nbytes, flags == 1))


def cuMemGetAddressRange_v2(pbase: int, psize: int, ptr: int) -> None:
    a = backend().allocation_of(ptr)
    if a is None:
        raise CudaError(_NOT_FOUND, "cuMemGetAddressRange", f"{ptr:#x} is not in an allocation")
    if pbase:  # cuda.h: either output may be NULL
        _U64.from_address(pbase).value = a.base
    if psize:
        _SIZE.from_address(psize).value = a.size


# ------------------------------------------------------------ pointer queries
def _attribute(b: Any, a: Any, attr: int, ptr: int) -> tuple[Any, Any] | None:
    """``(ctype, value)`` of pointer attribute ``attr`` of allocation ``a``; None: it has none."""
    host = a.is_host
    device = b.ctx_get_device() if host and b.ctx_get_current() else (0 if host else a.device)
    if attr == 1:  # CONTEXT: the one it was allocated or registered in
        if a.owner is not None:
            return _U64, a.owner.handle
        return _U64, 0 if host else b.primary_ctx_handle(a.device)  # graph and IPC memory
    if attr == 2:  # MEMORY_TYPE
        # managed memory is device memory to the driver API (IS_MANAGED tells it
        # apart; the runtime derives cudaMemoryTypeManaged from that)
        return _U32, _MT_HOST if host else _MT_DEVICE
    if attr == 3:  # DEVICE_POINTER: device memory, mapped page-locked and managed memory
        return (_U64, ptr) if not host or a.mapped else None
    if attr == 4:  # HOST_POINTER: page-locked and managed memory
        return (_U64, ptr) if host or a.kind == "managed" else None
    if attr == 5:  # P2P_TOKENS: RDMA is not simulated
        return None
    if attr == _SYNC_MEMOPS:  # cuPointerSetAttribute sets it
        return _BOOL, a.sync_memops
    if attr in (7, 20):  # BUFFER_ID, MEMORY_BLOCK_ID
        return _U64, a.serial
    if attr == 8:  # IS_MANAGED
        return _BOOL, a.kind == "managed"
    if attr == 9:  # DEVICE_ORDINAL
        return _I32, device
    if attr == 10:  # IS_LEGACY_CUDA_IPC_CAPABLE: cuMemAlloc memory
        return _BOOL, a.kind == "device"
    if attr in (11, 19):  # RANGE_START_ADDR, MAPPING_BASE_ADDR
        return _U64, a.base
    if attr in (12, 18):  # RANGE_SIZE, MAPPING_SIZE
        return _SIZE, a.size
    if attr == 13:  # MAPPED: graph memory of a graph not launched yet is reserved, not backed
        return _BOOL, a.mapped_now
    if attr == 14:  # ALLOWED_HANDLE_TYPES: none (no cuMemCreate)
        return _U64, 0
    if attr == 15:  # IS_GPU_DIRECT_RDMA_CAPABLE
        return _BOOL, False
    if attr == 16:  # ACCESS_FLAGS
        return _U32, _ACCESS_READWRITE
    if attr == 17:  # MEMPOOL_HANDLE: the default pool of stream-ordered allocations
        return _U64, _POOL_BASE + 0x10 * (a.device + 1) if a.kind == "pool" else 0
    if attr == 21:  # IS_HW_DECOMPRESS_CAPABLE
        return _BOOL, False
    if attr == 22:  # LOCALITY_DOMAIN_ORDINAL
        return _I32, 0
    raise CudaError(_INVALID_VALUE, "cuPointerGetAttribute", f"{attr} is not a CUpointer_attribute")


def cuPointerGetAttribute(data: int, attr: int, ptr: int) -> None:
    call = "cuPointerGetAttribute"
    if not data:
        raise CudaError(_INVALID_VALUE, call, "(NULL data)")
    b = backend()
    a = b.allocation_of(ptr)
    if a is None:
        raise CudaError(_INVALID_VALUE, call, f"{ptr:#x} is not memory CUDA knows")
    got = _attribute(b, a, attr, ptr)
    if got is None:
        raise CudaError(_INVALID_VALUE, call, f"{a.describe()} has no pointer attribute {attr}")
    got[0].from_address(data).value = got[1]


def cuPointerSetAttribute(value: int, attr: int, ptr: int) -> None:
    call = "cuPointerSetAttribute"
    if _signed(attr) != _SYNC_MEMOPS:  # cuda.h: "The supported attributes are: SYNC_MEMOPS"
        raise CudaError(_INVALID_VALUE, call, f"attribute {_signed(attr)} (only "
                                              "CU_POINTER_ATTRIBUTE_SYNC_MEMOPS can be set)")
    if not value:
        raise CudaError(_INVALID_VALUE, call, "(NULL value)")
    b = backend()
    a = b.allocation_of(ptr)
    if a is None:
        raise CudaError(_INVALID_VALUE, call, f"{ptr:#x} is not memory CUDA knows")
    on = bool(_U32.from_address(value).value)
    if on and not a.sync_memops and b.ctx_get_current():
        b.ctx_synchronize()  # cuda.h: pending synchronous memory operations complete first
    a.sync_memops = on


def cuPointerGetAttributes(n: int, attrs: int, data: int, ptr: int) -> None:
    call = "cuPointerGetAttributes"
    if not attrs or not data:
        raise CudaError(_INVALID_VALUE, call, "(NULL attributes or data)")
    b = backend()
    a = b.allocation_of(ptr)
    for i in range(n):
        attr = _I32.from_address(attrs + 4 * i).value
        out = ctypes.c_void_p.from_address(data + 8 * i).value
        if not out:
            continue  # CUDA skips a NULL data slot
        got = None if a is None else _attribute(b, a, attr, ptr)
        if got is None:  # not CUDA memory, or an attribute it has not: the default
            if not 1 <= attr <= 22:
                raise CudaError(_INVALID_VALUE, call, f"{attr} is not a CUpointer_attribute")
            if attr == 9:
                _I32.from_address(out).value = -2
            elif attr == 5:
                ctypes.memset(out, 0, 16)
            elif attr in (6, 8, 10, 13, 15, 21):
                _BOOL.from_address(out).value = False
            elif attr in (2, 16):
                _U32.from_address(out).value = 0
            else:
                _U64.from_address(out).value = 0
            continue
        got[0].from_address(out).value = got[1]


# --------------------------------------------------------------------- IPC
@_output_first
def cuIpcGetMemHandle(p: int, ptr: int) -> None:
    handle = backend().ipc_get_mem_handle(ptr)
    ctypes.memmove(p, handle, len(handle))


@_output_first
def cuIpcOpenMemHandle_v2(p: int, handle: int, flags: int) -> None:
    if flags & ~1:
        raise CudaError(_INVALID_VALUE, "cuIpcOpenMemHandle", f"flags {flags:#x}")
    _out("cuIpcOpenMemHandle", p, _U64, backend().ipc_open_mem_handle(ctypes.string_at(handle, 64)))


def cuIpcCloseMemHandle(ptr: int) -> None:
    backend().ipc_close_mem_handle(ptr)
