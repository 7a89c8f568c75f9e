"""Device, pinned, managed and IPC memory, copies and sets: the driver calls of the real backend."""

from __future__ import annotations

import ctypes

from .._base import PointerInfo
from . import _state as S
from ._state import _ERR_INVALID_VALUE, _IPC_HANDLE_SIZE, CallsBase, _check, _error, _fmt_bytes


class MemoryCalls(CallsBase):
    """Device, pinned, managed and IPC memory, copies and sets: the driver calls of the real backend."""

    # --------------------------------------------------------------- memory
    def mem_alloc(self, nbytes: int) -> int:
        if not self._ready:
            self.init()
        return int(
            _check(
                S._d.cuMemAlloc(nbytes),
                "cuMemAlloc",
                lambda: f"while allocating {_fmt_bytes(nbytes)}",
            )
        )

    def mem_alloc_relaxed(self, nbytes: int) -> int:
        # The three driver calls without the wrappers' Python: every array of
        # the default manager is allocated here (issue 31: small to_device).
        if not self._ready:
            self.init()
        d = S._d
        err, prev = d.cuThreadExchangeStreamCaptureMode(S._CAPTURE_MODES[2])  # relaxed
        if err:
            raise _error(err, "cuThreadExchangeStreamCaptureMode")
        try:
            res = d.cuMemAlloc(nbytes)
        finally:
            d.cuThreadExchangeStreamCaptureMode(prev)
        return int(_check(res, "cuMemAlloc", lambda: f"while allocating {_fmt_bytes(nbytes)}"))

    def mem_free(self, ptr: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuMemFree(ptr), "cuMemFree")

    def mem_alloc_async(self, nbytes: int, stream: int) -> int:
        if not self._ready:
            self.init()
        return int(
            _check(
                S._d.cuMemAllocAsync(nbytes, stream or 1),
                "cuMemAllocAsync",
                lambda: f"while allocating {_fmt_bytes(nbytes)} on stream {stream:#x}",
            )
        )

    def mem_free_async(self, ptr: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuMemFreeAsync(ptr, stream or 1), "cuMemFreeAsync")

    def mempool_set_release_threshold(self, ordinal: int, nbytes: int) -> None:
        dev = self._dev(ordinal)
        pool = _check(S._d.cuDeviceGetDefaultMemPool(dev), "cuDeviceGetDefaultMemPool")
        _check(
            S._d.cuMemPoolSetAttribute(pool, S._RELEASE_THRESHOLD, S._cuuint64_t(nbytes)),
            "cuMemPoolSetAttribute",
            "(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)",
        )

    def mem_get_info(self) -> tuple[int, int]:
        if not self._ready:
            self.init()
        free, total = _check(S._d.cuMemGetInfo(), "cuMemGetInfo")
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
            (S._HOSTALLOC_DEVICEMAP if mapped else 0)
            | (S._HOSTALLOC_PORTABLE if portable else 0)
            | (S._HOSTALLOC_WRITECOMBINED if write_combined else 0)
        )
        return int(
            _check(
                S._d.cuMemHostAlloc(nbytes, flags),
                "cuMemHostAlloc",
                lambda: f"while allocating {_fmt_bytes(nbytes)} of pinned host memory",
            )
        )

    def mem_free_host(self, ptr: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuMemFreeHost(ptr), "cuMemFreeHost")

    def mem_host_register(
        self, ptr: int, nbytes: int, mapped: bool = False, portable: bool = False
    ) -> None:
        if not self._ready:
            self.init()
        flags = (S._HOSTREGISTER_DEVICEMAP if mapped else 0) | (
            S._HOSTREGISTER_PORTABLE if portable else 0
        )
        _check(
            S._d.cuMemHostRegister(ptr, nbytes, flags),
            "cuMemHostRegister",
            lambda: f"while page-locking {_fmt_bytes(nbytes)} at {ptr:#x}",
        )

    def mem_host_unregister(self, ptr: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuMemHostUnregister(ptr), "cuMemHostUnregister")

    def mem_host_get_device_pointer(self, host_ptr: int) -> int:
        if not self._ready:
            self.init()
        return int(_check(S._d.cuMemHostGetDevicePointer(host_ptr, 0), "cuMemHostGetDevicePointer"))

    def pointer_info(self, ptr: int) -> PointerInfo:
        if not self._ready:
            self.init()
        res = S._d.cuPointerGetAttributes(len(S._PTR_ATTRS), S._PTR_ATTRS, ptr)
        if int(res[0]) == _ERR_INVALID_VALUE:
            # Older drivers report unknown (pageable) host memory this way.
            return PointerInfo(0, -1, 0, 0)
        mtype, ordinal, base, size, managed, mapped = _check(res, "cuPointerGetAttributes")[:6]
        mtype = int(mtype)
        if mtype == 0:
            # Not a CUDA address: the driver fills defaults (ordinal -2).
            return PointerInfo(0, -1, 0, 0)
        if S._ORDINAL_VIA_CONTEXT and mtype == int(S._MT_DEVICE):  # see _state
            ctx = res[1][6]
            ordinal = _check(S._d.cuCtxGetDevice_v2(ctx), "cuCtxGetDevice_v2") if int(ctx) else ordinal
        return PointerInfo(mtype, int(ordinal), int(base), int(size), bool(managed), bool(mapped))

    # ----------------------------------------------------- copies and sets
    def memcpy_htod_async(self, dst: int, src_host: int, nbytes: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuMemcpyHtoDAsync(dst, src_host, nbytes, stream or 1), "cuMemcpyHtoDAsync")

    def memcpy_dtoh_async(self, dst_host: int, src: int, nbytes: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuMemcpyDtoHAsync(dst_host, src, nbytes, stream or 1), "cuMemcpyDtoHAsync")

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuMemcpyDtoDAsync(dst, src, nbytes, stream or 1), "cuMemcpyDtoDAsync")

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
        p = S._CUDA_MEMCPY2D()  # zero-initialised: X/Y offsets 0
        if src_is_device:
            p.srcMemoryType = S._MT_DEVICE
            p.srcDevice = src
        else:
            p.srcMemoryType = S._MT_HOST
            p.srcHost = src
        p.srcPitch = src_pitch
        if dst_is_device:
            p.dstMemoryType = S._MT_DEVICE
            p.dstDevice = dst
        else:
            p.dstMemoryType = S._MT_HOST
            p.dstHost = dst
        p.dstPitch = dst_pitch
        p.WidthInBytes = width_bytes
        p.Height = height
        _check(
            S._d.cuMemcpy2DAsync(p, stream or 1),
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
        _check(S._d.cuMemsetD8Async(dst, value & 0xFF, count, stream or 1), "cuMemsetD8Async")

    def memset_d16_async(self, dst: int, value: int, count: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuMemsetD16Async(dst, value & 0xFFFF, count, stream or 1), "cuMemsetD16Async")

    def memset_d32_async(self, dst: int, value: int, count: int, stream: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuMemsetD32Async(dst, value & 0xFFFFFFFF, count, stream or 1), "cuMemsetD32Async")

    # ------------------------------------------------------------------ IPC
    def ipc_get_mem_handle(self, ptr: int) -> bytes:
        if not self._ready:
            self.init()
        handle = _check(S._d.cuIpcGetMemHandle(ptr), "cuIpcGetMemHandle", lambda: f"for {ptr:#x}")
        return ctypes.string_at(handle.getPtr(), _IPC_HANDLE_SIZE)

    def ipc_open_mem_handle(self, handle: bytes) -> int:
        if not self._ready:
            self.init()
        raw = bytes(handle)
        if len(raw) != _IPC_HANDLE_SIZE:
            raise ValueError(f"an IPC memory handle is {_IPC_HANDLE_SIZE} bytes, got {len(raw)}")
        h = S._CUipcMemHandle()
        ctypes.memmove(h.getPtr(), raw, _IPC_HANDLE_SIZE)
        return int(_check(S._d.cuIpcOpenMemHandle(h, S._IPC_LAZY_PEER), "cuIpcOpenMemHandle"))

    def ipc_close_mem_handle(self, ptr: int) -> None:
        if not self._ready:
            self.init()
        _check(S._d.cuIpcCloseMemHandle(ptr), "cuIpcCloseMemHandle")

    # ------------------------------------------ managed memory, host callbacks
    def mem_alloc_managed(self, nbytes: int, attach_global: bool = True) -> int:
        if not self._ready:
            self.init()
        flags = S._d.CUmemAttach_flags
        flag = flags.CU_MEM_ATTACH_GLOBAL if attach_global else flags.CU_MEM_ATTACH_HOST
        return int(
            _check(
                S._d.cuMemAllocManaged(nbytes, int(flag)),
                "cuMemAllocManaged",
                lambda: f"while allocating {_fmt_bytes(nbytes)} of managed memory",
            )
        )
