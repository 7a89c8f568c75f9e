"""The stand-in driver's memory-pool calls: cuda.h's structures in, the simulator's pools behind.

One concern: the driver forms of the memory-pool family -- choosing a pool
(``cuDeviceGetDefaultMemPool``, ``cuDevice{Get,Set}MemPool``,
``cuMem{GetDefault,Get,Set}MemPool``), making and destroying one
(``cuMemPoolCreate`` from ``CUmemPoolProps``), its attributes, trimming and
access descriptors (``CUmemAccessDesc``), allocating from it
(``cuMemAllocFromPoolAsync``) and sharing it with another process
(``cuMemPoolExportToShareableHandle``: a POSIX file descriptor written to
``*handle_out``; ``cuMemPoolImportFromShareableHandle``: the descriptor
passed as the ``handle`` pointer's value, as cuda.h's samples do; 64-byte
``CUmemPoolPtrExportData``).  The model is the simulator's
(``sim/_pool_calls.py``, ``sim/_pools.py``).
"""

from __future__ import annotations

import ctypes

from gpuarray.errors import CudaError

from .. import _pools
from ._support import (
    _I32,
    _INVALID_VALUE,
    _U32,
    _U64,
    _device,
    _out,
    _output_first,
    _signed,
    _stream,
    backend,
)

#: ``CUmemPoolProps``: allocType, handleTypes, location (type, id), win32SecurityAttributes,
#: maxSize, usage, gpuDirectRDMACapable, reserved[53] (88 bytes).
_PROPS = 88


def _location(ptr: int, call: str) -> tuple[int, int]:
    """``(type, id)`` of the ``CUmemLocation`` at ``ptr``."""
    if not ptr:
        raise CudaError(_INVALID_VALUE, call, "(NULL location)")
    return _I32.from_address(ptr).value, _I32.from_address(ptr + 4).value


def _pool_device(call: str, dev: int) -> int:
    """A device argument of the calls whose cuda.h codes are SUCCESS and INVALID_VALUE only."""
    d = _signed(dev)
    if not 0 <= d < backend().device_count():
        raise CudaError(_INVALID_VALUE, call, f"device {d} (the simulator has "
                                              f"{backend().device_count()})")
    return d


# ------------------------------------------------------------ choosing pools
@_output_first
def cuDeviceGetDefaultMemPool(p: int, dev: int) -> None:
    _out("cuDeviceGetDefaultMemPool", p, _U64,
         backend().mempool_default(_device("cuDeviceGetDefaultMemPool", dev)))


@_output_first
def cuDeviceGetMemPool(p: int, dev: int) -> None:
    d = _pool_device("cuDeviceGetMemPool", dev)
    _out("cuDeviceGetMemPool", p, _U64, backend().mem_get_pool(_pools.LOC_DEVICE, d, _pools.PINNED))


def cuDeviceSetMemPool(dev: int, pool: int) -> None:
    d = _pool_device("cuDeviceSetMemPool", dev)
    backend().mem_set_pool(_pools.LOC_DEVICE, d, _pools.PINNED, pool, call="cuDeviceSetMemPool")


@_output_first
def cuMemGetDefaultMemPool(p: int, loc: int, alloc_type: int) -> None:
    call = "cuMemGetDefaultMemPool"
    t, i = _location(loc, call)
    _out(call, p, _U64, backend().mem_get_default_pool(t, i, _signed(alloc_type)))


@_output_first
def cuMemGetMemPool(p: int, loc: int, alloc_type: int) -> None:
    call = "cuMemGetMemPool"
    t, i = _location(loc, call)
    _out(call, p, _U64, backend().mem_get_pool(t, i, _signed(alloc_type)))


def cuMemSetMemPool(loc: int, alloc_type: int, pool: int) -> None:
    t, i = _location(loc, "cuMemSetMemPool")
    backend().mem_set_pool(t, i, _signed(alloc_type), pool)


# --------------------------------------------------------- create, destroy
@_output_first
def cuMemPoolCreate(p: int, props: int) -> None:
    call = "cuMemPoolCreate"
    if not props:
        raise CudaError(_INVALID_VALUE, call, "(NULL poolProps)")
    raw = ctypes.string_at(props, _PROPS)
    alloc_type, handle_types, loc_type, loc_id = (int.from_bytes(raw[o:o + 4], "little", signed=True)
                                                  for o in (0, 4, 8, 12))
    max_size = int.from_bytes(raw[24:32], "little")
    usage = int.from_bytes(raw[32:34], "little")
    rest_zero = not any(raw[16:24]) and not any(raw[34:])
    _out(call, p, _U64, backend().mempool_create(alloc_type, handle_types, loc_type, loc_id,
                                                 max_size, usage, rest_zero))


def cuMemPoolDestroy(pool: int) -> None:
    backend().mempool_destroy(pool)


def cuMemPoolTrimTo(pool: int, keep: int) -> None:
    backend().mempool_trim_to(pool, keep)


# ---------------------------------------------------------------- attributes
def cuMemPoolSetAttribute(pool: int, attr: int, value: int) -> None:
    call = "cuMemPoolSetAttribute"
    if not value:
        raise CudaError(_INVALID_VALUE, call, "(NULL value)")
    attr = _signed(attr)
    ctype = _U64 if attr in _pools.WIDE_ATTRIBUTES else _I32
    backend().mempool_set_attribute(pool, attr, ctype.from_address(value).value)


def cuMemPoolGetAttribute(pool: int, attr: int, value: int) -> None:
    call = "cuMemPoolGetAttribute"
    attr = _signed(attr)
    got = backend().mempool_get_attribute(pool, attr)
    _out(call, value, _U64 if attr in _pools.WIDE_ATTRIBUTES else _I32, got)


# -------------------------------------------------------------------- access
def cuMemPoolSetAccess(pool: int, descs: int, count: int) -> None:
    call = "cuMemPoolSetAccess"
    if count and not descs:
        raise CudaError(_INVALID_VALUE, call, "(NULL map)")
    entries = []
    for k in range(count):  # CUmemAccessDesc: location (type, id), flags: 12 bytes
        at = descs + 12 * k
        entries.append((_I32.from_address(at).value, _I32.from_address(at + 4).value,
                        _I32.from_address(at + 8).value))
    backend().mempool_set_access(pool, entries)


@_output_first
def cuMemPoolGetAccess(p: int, pool: int, loc: int) -> None:
    call = "cuMemPoolGetAccess"
    t, i = _location(loc, call)
    _out(call, p, _U32, backend().mempool_get_access(pool, t, i))


# ---------------------------------------------------------------- allocation
@_output_first
def cuMemAllocFromPoolAsync(p: int, nbytes: int, pool: int, stream: int, ptsz: bool = False) -> None:
    _out("cuMemAllocFromPoolAsync", p, _U64,
         backend().mem_alloc_from_pool_async(nbytes, pool, _stream(stream, ptsz)))


# ------------------------------------------------------------------- sharing
@_output_first
def cuMemPoolExportToShareableHandle(p: int, pool: int, handle_type: int, flags: int) -> None:
    fd = backend().mempool_export(pool, _signed(handle_type), flags)
    _I32.from_address(p).value = fd  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: an int


@_output_first
def cuMemPoolImportFromShareableHandle(p: int, handle: int, handle_type: int, flags: int) -> None:
    call = "cuMemPoolImportFromShareableHandle"
    fd = _signed(handle)  # a POSIX file descriptor travels as the pointer's value
    if not 0 <= fd < 1 << 31:
        raise CudaError(_INVALID_VALUE, call, f"{handle:#x} is not a file descriptor")
    _out(call, p, _U64, backend().mempool_import(fd, _signed(handle_type), flags))


@_output_first
def cuMemPoolExportPointer(p: int, ptr: int) -> None:
    data = backend().mempool_export_pointer(ptr)
    ctypes.memmove(p, data, len(data))


@_output_first
def cuMemPoolImportPointer(p: int, pool: int, data: int) -> None:
    call = "cuMemPoolImportPointer"
    if not data:
        raise CudaError(_INVALID_VALUE, call, "(NULL shareData)")
    _out(call, p, _U64, backend().mempool_import_pointer(pool, ctypes.string_at(data, 64)))
