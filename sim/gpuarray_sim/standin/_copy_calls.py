"""The stand-in driver's copies and memsets, stream-ordered and synchronous.

One concern: moving and setting bytes -- ``cuMemcpyHtoD_v2``/``DtoH_v2``/
``DtoD_v2`` and their ``Async`` forms, ``cuMemcpy``/``cuMemcpyAsync``
(unified addressing: the direction from the pointers), the 2-D copies and
``cuMemsetD8``/``D16``/``D32`` (``_v2``) and the 2-D ``cuMemsetD2D8``/``16``/``32``
with their ``Async`` forms, and the peer copies ``cuMemcpyPeer``/``Async``
(device memory of two contexts' devices; no peer access needed).

The synchronous forms are the stream-ordered ones on the legacy default
stream, as CUDA documents them: a copy returns once it is done (so it
waits for the work the legacy stream waits for, and reports its faults);
a memset is "asynchronous with respect to the host except when the target
is pinned host memory or a Unified Memory region": queued, and waited for
only then.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from gpuarray._driver._base import STREAM_LEGACY
from gpuarray.errors import CudaError

from .._codes import INVALID_CONTEXT as _INVALID_CONTEXT
from ._support import _INVALID_VALUE, _stream, _with_ctx, backend


def cuMemcpyHtoDAsync_v2(dst: int, src: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memcpy_htod_async(dst, src, n, _stream(stream, ptsz))


def cuMemcpyDtoHAsync_v2(dst: int, src: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memcpy_dtoh_async(dst, src, n, _stream(stream, ptsz))


def cuMemcpyDtoDAsync_v2(dst: int, src: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memcpy_dtod_async(dst, src, n, _stream(stream, ptsz))


def _synchronously(queue: object) -> None:
    """Run a copy queued on the legacy stream by ``queue()`` to completion."""
    b = backend()
    queue()  # type: ignore[operator]
    b.stream_synchronize(STREAM_LEGACY)


def cuMemcpyHtoD_v2(dst: int, src: int, n: int) -> None:
    _synchronously(lambda: cuMemcpyHtoDAsync_v2(dst, src, n, STREAM_LEGACY))


def cuMemcpyDtoH_v2(dst: int, src: int, n: int) -> None:
    _synchronously(lambda: cuMemcpyDtoHAsync_v2(dst, src, n, STREAM_LEGACY))


def cuMemcpyDtoD_v2(dst: int, src: int, n: int) -> None:
    _synchronously(lambda: cuMemcpyDtoDAsync_v2(dst, src, n, STREAM_LEGACY))


def _is_device(address: int) -> bool:
    """Device (or managed) memory: copies to and from it are device copies (unified
    addressing; a managed range is not pageable host memory, in a capture too)."""
    a = backend().allocation_of(address)
    return a is not None and not a.is_host


def cuMemcpyAsync(dst: int, src: int, n: int, stream: int, ptsz: bool = False) -> None:
    s = _stream(stream, ptsz)
    b = backend()
    d_dev, s_dev = _is_device(dst), _is_device(src)
    if d_dev and s_dev:
        b.memcpy_dtod_async(dst, src, n, s)
    elif d_dev:
        b.memcpy_htod_async(dst, src, n, s)
    elif s_dev:
        b.memcpy_dtoh_async(dst, src, n, s)
    else:  # host to host through unified addressing
        if not dst or not src:
            raise CudaError(_INVALID_VALUE, "cuMemcpyAsync", "(NULL pointer)")
        b.stream_synchronize(s)
        ctypes.memmove(dst, src, n)


def cuMemcpy(dst: int, src: int, n: int) -> None:
    _synchronously(lambda: cuMemcpyAsync(dst, src, n, STREAM_LEGACY))


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


_MAX_PITCH = 0x7FFFFFFF  # CU_DEVICE_ATTRIBUTE_MAX_PITCH of the simulator's profile


def _side(p: _Memcpy2D, which: str) -> tuple[int, bool]:
    mtype = getattr(p, which + "MemoryType")
    x, y = getattr(p, which + "XInBytes"), getattr(p, which + "Y")
    pitch = getattr(p, which + "Pitch")
    if mtype in (1, 2, 4) and (pitch < p.WidthInBytes + x or pitch > _MAX_PITCH):
        # cuda.h (cuMemcpy2D): "srcPitch must be greater than or equal to WidthInBytes +
        # srcXInBytes" (dst likewise), and no pitch beyond CU_DEVICE_ATTRIBUTE_MAX_PITCH
        raise CudaError(_INVALID_VALUE, "cuMemcpy2DAsync",
                        f"{which}Pitch {pitch} with WidthInBytes {p.WidthInBytes} and "
                        f"{which}XInBytes {x} (the pitch must hold the row and be at most "
                        f"{_MAX_PITCH})")
    if mtype == 1:  # HOST
        base, device = getattr(p, which + "Host") or 0, False
    elif mtype in (2, 4):  # DEVICE, UNIFIED
        base, device = getattr(p, which + "Device"), True
    else:  # CU_MEMORYTYPE_ARRAY: no CUDA arrays in the simulator (cuda.h: INVALID_VALUE)
        raise CudaError(_INVALID_VALUE, "cuMemcpy2DAsync",
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


def memcpy3d_as_2d(call: str, c: ctypes.Structure) -> Callable[[int], None]:
    """A ``CUDA_MEMCPY3D`` of depth 1 (a memcpy node's): the 2-D copy it is, on a stream."""
    p = _Memcpy2D()
    for f, *_ in _Memcpy2D._fields_:
        setattr(p, f, getattr(c, f))
    if p.Height <= 1:  # one row: its pitch is never used (a 1-D copy leaves it 0)
        p.Height = 1
        p.srcPitch = p.srcPitch or p.WidthInBytes + p.srcXInBytes
        p.dstPitch = p.dstPitch or p.WidthInBytes + p.dstXInBytes
    src, src_dev = _side(p, "src")
    dst, dst_dev = _side(p, "dst")

    def copy(stream: int) -> None:
        backend().memcpy_2d_async(dst, p.dstPitch, dst_dev, src, p.srcPitch, src_dev,
                                  p.WidthInBytes, p.Height or 1, stream)

    return copy


def cuMemcpy2D_v2(pcopy: int) -> None:
    _synchronously(lambda: cuMemcpy2DAsync_v2(pcopy, STREAM_LEGACY))


cuMemcpy2DUnaligned_v2 = cuMemcpy2D_v2


def cuMemsetD8Async(dst: int, v: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memset_d8_async(dst, v & 0xFF, n, _stream(stream, ptsz))


def cuMemsetD16Async(dst: int, v: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memset_d16_async(dst, v & 0xFFFF, n, _stream(stream, ptsz))


def cuMemsetD32Async(dst: int, v: int, n: int, stream: int, ptsz: bool = False) -> None:
    backend().memset_d32_async(dst, v & 0xFFFFFFFF, n, _stream(stream, ptsz))


def _memset(dst: int, queue: object) -> None:
    """A synchronous memset: queued; waited for when it writes host-visible memory."""
    a = backend().allocation_of(dst)
    if a is not None and (a.is_host or a.kind == "managed"):
        _synchronously(queue)
    else:
        queue()  # type: ignore[operator]


def cuMemsetD8_v2(dst: int, v: int, n: int) -> None:
    _memset(dst, lambda: cuMemsetD8Async(dst, v, n, STREAM_LEGACY))


def cuMemsetD16_v2(dst: int, v: int, n: int) -> None:
    _memset(dst, lambda: cuMemsetD16Async(dst, v, n, STREAM_LEGACY))


def cuMemsetD32_v2(dst: int, v: int, n: int) -> None:
    _memset(dst, lambda: cuMemsetD32Async(dst, v, n, STREAM_LEGACY))


def _memset_2d(bits: int, dst: int, pitch: int, v: int, width: int, height: int, stream: int,
               ptsz: bool) -> None:
    backend().memset_2d_async(bits, dst, pitch, v & ((1 << bits) - 1), width, height,
                              _stream(stream, ptsz))


def cuMemsetD2D8Async(dst: int, pitch: int, v: int, w: int, h: int, stream: int,
                      ptsz: bool = False) -> None:
    _memset_2d(8, dst, pitch, v, w, h, stream, ptsz)


def cuMemsetD2D16Async(dst: int, pitch: int, v: int, w: int, h: int, stream: int,
                       ptsz: bool = False) -> None:
    _memset_2d(16, dst, pitch, v, w, h, stream, ptsz)


def cuMemsetD2D32Async(dst: int, pitch: int, v: int, w: int, h: int, stream: int,
                       ptsz: bool = False) -> None:
    _memset_2d(32, dst, pitch, v, w, h, stream, ptsz)


def cuMemsetD2D8_v2(dst: int, pitch: int, v: int, w: int, h: int) -> None:
    _memset(dst, lambda: cuMemsetD2D8Async(dst, pitch, v, w, h, STREAM_LEGACY))


def cuMemsetD2D16_v2(dst: int, pitch: int, v: int, w: int, h: int) -> None:
    _memset(dst, lambda: cuMemsetD2D16Async(dst, pitch, v, w, h, STREAM_LEGACY))


def cuMemsetD2D32_v2(dst: int, pitch: int, v: int, w: int, h: int) -> None:
    _memset(dst, lambda: cuMemsetD2D32Async(dst, pitch, v, w, h, STREAM_LEGACY))


# ---------------------------------------------------------------- peer copies
def _peer_side(call: str, ptr: int, ctx: int, n: int, role: str) -> None:
    """``ptr`` is device memory of ``ctx``'s device (``INVALID_CONTEXT``: ``ctx`` is none)."""
    b = backend()
    if not ctx:
        raise CudaError(_INVALID_CONTEXT, call, f"(NULL {role} context)")
    c = b._ctx_by_handle(ctx, call)
    a = b.allocation_of(ptr)
    if n and (a is None or a.is_host or a.kind == "managed" or a.device != c.device):
        raise CudaError(_INVALID_VALUE, call, f"{role} 0x{ptr:x} is not device memory of the "
                                              f"{role} context's device {c.device}")


def cuMemcpyPeerAsync(dst: int, dst_ctx: int, src: int, src_ctx: int, n: int, stream: int,
                      ptsz: bool = False) -> None:
    call = "cuMemcpyPeerAsync"
    _peer_side(call, dst, dst_ctx, n, "destination")
    _peer_side(call, src, src_ctx, n, "source")
    backend().memcpy_dtod_async(dst, src, n, _stream(stream, ptsz))


def cuMemcpyPeer(dst: int, dst_ctx: int, src: int, src_ctx: int, n: int) -> None:
    call = "cuMemcpyPeer"
    _peer_side(call, dst, dst_ctx, n, "destination")
    _peer_side(call, src, src_ctx, n, "source")
    # Synchronous: on the destination context's legacy stream, waited for.
    _with_ctx(dst_ctx, lambda: _synchronously(
        lambda: backend().memcpy_dtod_async(dst, src, n, STREAM_LEGACY)))
