"""The simulator's memory calls: allocation, copies and memsets.

One concern: the ``cuMem*`` calls of the driver interface -- device,
stream-ordered, page-locked, registered and managed allocations and their
frees, pointer queries, the 1-D and 2-D copies and the memsets -- on the
address space of ``_memory.py``, queued on the streams of ``_sched.py``.
The copy rules (pageable sources read at the call, pageable destinations
complete on return, page-locked destinations poisoned until the copy is
done: ``_poisoner``) are in ``_backend.py``'s docstring.
"""

from __future__ import annotations

import numpy as np

from gpuarray._driver._base import MEMORYTYPE_DEVICE, MEMORYTYPE_HOST, PointerInfo
from gpuarray.errors import CudaError

from . import _capture, _codes, _sticky
from ._core import INVALID_VALUE, SimCore, _api, _locked
from ._graph import claim_graph_free, free_graph_memory, unmap_graph_memory
from ._memory import Allocation, read_host, write_host
from ._sched import SimStream


class SimMemoryCalls(SimCore):
    """Memory, copy and memset calls of the simulator."""

    # -------------------------------------------------------------- memory
    @_locked
    def mem_alloc(self, nbytes: int) -> int:
        ctx = self._current("cuMemAlloc")
        self._fault("alloc", "cuMemAlloc")
        return self.memory.alloc_device(ctx.device, int(nbytes), owner=ctx).base

    @_locked
    def mem_free(self, ptr: int) -> None:
        a = self.memory.find(int(ptr))
        if a is not None and a.alive and a.kind == "ipc":
            raise CudaError(INVALID_VALUE, "cuMemFree", f"0x{int(ptr):x} is an IPC mapping: "
                                                        "close it with cuIpcCloseMemHandle")
        # The memory's context: the one it was allocated in (a primary
        # context's for memory no context owns).
        owner = None
        if a is not None and 0 <= a.device < self.devices:
            owner = a.owner if a.owner is not None else self._contexts[a.device]
            _sticky.check(owner, "cuMemFree")
        self._check_current("cuMemFree")
        # Waits for the work that can touch the memory: its own context's
        # (CUDA synchronises the device) and any peer access to it.
        if a is not None and a.alive and owner is not None:
            self._sync_for_free("cuMemFree", owner, a.base, a.base + a.size)
        else:  # not a live device allocation: free_device says what is wrong
            self._sync_for_free("cuMemFree", getattr(self._tls, "ctx", None), 0, 0)
        if a is not None and a.kind == "graph" and a.alive and a.base == ptr:
            free_graph_memory(self, a, "cuMemFree")
            return
        self.memory.free_device(int(ptr), "cuMemFree")

    @_locked
    def mem_alloc_async(self, nbytes: int, stream: int) -> int:
        s = self._stream(stream, "cuMemAllocAsync")
        self._fault("alloc", "cuMemAllocAsync")
        if nbytes == 0:
            # cuda.h states INVALID_VALUE for size 0 of cuMemAlloc and cuMemAllocManaged only;
            # the stream-ordered calls give a 0-byte allocation: NULL, which frees as nothing
            return 0
        if s.capture is not None:  # an allocation node (_graph.py)
            return self._capture_alloc(s, nbytes, "cuMemAllocAsync")
        if self.sched.capturing:  # outside the capture: potentially unsafe (see _capture.py)
            _capture.check_unsafe(self, "cuMemAllocAsync")
        a = self.memory.alloc_device(s.ctx.device, int(nbytes), kind="pool", call="cuMemAllocAsync",
                                     owner=s.ctx)
        self.sched.enqueue(s, None, f"cuMemAllocAsync of 0x{a.base:x}", [(a.base, a.size, True)])
        return a.base

    @_locked
    def mem_free_async(self, ptr: int, stream: int) -> None:
        s = self._stream(stream, "cuMemFreeAsync")
        if ptr == 0:  # the 0-byte allocation of cuMemAllocAsync(0)
            return
        a = self.memory.find(int(ptr))
        if s.capture is not None:  # a free node (_graph.py)
            self._capture_free(s, a, int(ptr), "cuMemFreeAsync")
            return
        if self.sched.capturing:  # outside the capture: potentially unsafe (see _capture.py)
            _capture.check_unsafe(self, "cuMemFreeAsync")
        if a is not None and a.kind == "graph" and a.base == ptr and a.alive:
            claim_graph_free(a, "cuMemFreeAsync")
            self.sched.enqueue(s, lambda: unmap_graph_memory(self, a, "freed by cuMemFreeAsync"),
                               f"cuMemFreeAsync of 0x{a.base:x} (graph memory)", [(a.base, a.size, True)])
            return
        if a is None or a.base != ptr or not a.alive or a.is_host:
            raise CudaError(INVALID_VALUE, "cuMemFreeAsync", f"0x{int(ptr):x} is not a live device allocation")
        self.sched.enqueue(s, lambda: self.memory.free_device(a.base, "cuMemFreeAsync"),
                           f"cuMemFreeAsync of 0x{a.base:x}", [(a.base, a.size, True)])

    @_api
    def mempool_set_release_threshold(self, ordinal: int, nbytes: int) -> None:
        self._release_threshold[self._dev(ordinal, "cuMemPoolSetAttribute")] = int(nbytes)

    @_api
    def mempool_release_threshold(self, ordinal: int) -> int:
        """Simulator only: the release threshold of device ``ordinal``'s default pool."""
        return self._release_threshold[self._dev(ordinal, "cuMemPoolGetAttribute")]

    @_locked
    def mem_get_info(self) -> tuple[int, int]:
        d = self._current("cuMemGetInfo").device
        return self.memory.capacities[d] - self.memory.used[d], self.memory.capacities[d]

    @_locked
    def mem_host_alloc(self, nbytes: int, mapped: bool = False, portable: bool = False,
                       write_combined: bool = False) -> int:
        ctx = self._current("cuMemHostAlloc")  # allocates for the current context (see _current)
        self._fault("alloc", "cuMemHostAlloc")
        flags = int(portable) | int(mapped) << 1 | int(write_combined) << 2  # CU_MEMHOSTALLOC_*
        return self.memory.alloc_host(int(nbytes), mapped, flags, owner=ctx).base

    @_locked
    def mem_host_get_flags(self, ptr: int) -> int:
        """``cuMemHostGetFlags``: the ``CU_MEMHOSTALLOC_*`` flags ``cuMemHostAlloc`` was given."""
        self._check_current("cuMemHostGetFlags")
        a = self.memory.find(int(ptr))
        if a is None or not a.alive or a.kind != "pinned":
            what = "registered memory" if a is not None and a.alive and a.kind == "registered" else \
                "not page-locked memory"
            raise CudaError(INVALID_VALUE, "cuMemHostGetFlags", f"0x{int(ptr):x} is {what} "
                                                                "(cuMemHostAlloc/cuMemAllocHost only)")
        return a.flags

    @_locked
    def mem_free_host(self, ptr: int) -> None:
        self._check_current("cuMemFreeHost")
        self._sync_host_range("cuMemFreeHost", int(ptr))
        self.memory.free_host(int(ptr))

    @_locked
    def mem_host_register(self, ptr: int, nbytes: int, mapped: bool = False, portable: bool = False) -> None:
        ctx = self._current("cuMemHostRegister")
        self._fault("alloc", "cuMemHostRegister")
        self.memory.register_host(int(ptr), int(nbytes), mapped, owner=ctx)

    @_locked
    def mem_host_unregister(self, ptr: int) -> None:
        self._check_current("cuMemHostUnregister")
        self._sync_host_range("cuMemHostUnregister", int(ptr))
        self.memory.unregister_host(int(ptr))

    def _sync_host_range(self, call: str, ptr: int) -> None:
        """Before page-locked memory goes: the current context's work and any that uses it."""
        a = self.memory.find(ptr)
        lo, hi = (a.base, a.base + a.size) if a is not None and a.alive and a.is_host else (0, 0)
        self._sync_for_free(call, getattr(self._tls, "ctx", None), lo, hi)

    @_locked
    def mem_host_get_device_pointer(self, host_ptr: int) -> int:
        self._check_current("cuMemHostGetDevicePointer")
        a = self.memory.host_kind(int(host_ptr), 1)
        if a is None:
            raise CudaError(INVALID_VALUE, "cuMemHostGetDevicePointer", f"0x{int(host_ptr):x} is not page-locked")
        return int(host_ptr)

    @_locked
    def pointer_info(self, ptr: int) -> PointerInfo:
        self._check_current("cuPointerGetAttributes")
        a = self.memory.find(int(ptr))
        if a is None or not a.alive:
            return PointerInfo(0, -1, 0, 0)
        if a.is_host:
            ctx = getattr(self._tls, "ctx", None)
            return PointerInfo(MEMORYTYPE_HOST, ctx.device if ctx else 0, a.base, a.size)
        # graph memory no launch maps (before its graph's first launch, after its free node):
        # an address reserved with nothing behind it (CU_POINTER_ATTRIBUTE_MAPPED 0)
        return PointerInfo(MEMORYTYPE_DEVICE, a.device, a.base, a.size, a.kind == "managed",
                           a.mapped_now)

    @_locked
    def allocation_of(self, ptr: int) -> Allocation | None:
        """Simulator only: the live allocation holding ``ptr`` (None: not CUDA memory).

        What the stand-in driver's pointer queries (``cuPointerGetAttribute``,
        ``cuMemGetAddressRange``) read; device memory of a sticky-faulted
        context answers its sticky error, as those calls do on CUDA.
        """
        self._check_current("cuPointerGetAttribute")
        a = self.memory.find(int(ptr))
        return a if a is not None and a.alive else None

    # ---------------------------------------------------- copies and sets
    @_locked
    def memcpy_htod_async(self, dst: int, src_host: int, nbytes: int, stream: int) -> None:
        call = "cuMemcpyHtoDAsync"
        s = self._stream(stream, call)
        self._fault("copy", call)
        if nbytes == 0:
            return
        self._check_host(src_host, call, "source")
        self._check_range(dst, nbytes, call, "destination")
        pinned = self.memory.host_kind(src_host, nbytes)
        if not pinned:
            self._refuse_pageable(s, call, "from")
        # pageable: read now (a node of the explicit graph API re-reads it at each launch)
        data = None if pinned or s.capture is not None else read_host(src_host, nbytes)

        def run():
            a, off = self._mem_rw(dst, nbytes)
            self.memory.write(a, off, read_host(src_host, nbytes) if data is None else data)

        acc = [(dst, nbytes, True)] + ([(src_host, nbytes, False)] if pinned else [])
        self.sched.enqueue(s, run, f"{call} of {nbytes} bytes to 0x{dst:x}", acc)

    @_locked
    def memcpy_dtoh_async(self, dst_host: int, src: int, nbytes: int, stream: int) -> None:
        call = "cuMemcpyDtoHAsync"
        s = self._stream(stream, call)
        self._fault("copy", call)
        if nbytes == 0:
            return
        self._check_host(dst_host, call, "destination")
        self._check_range(src, nbytes, call, "source")
        pinned = self.memory.host_kind(dst_host, nbytes)
        if not pinned:
            self._refuse_pageable(s, call, "to")

        def run():
            a, off = self._mem_rw(src, nbytes)
            write_host(dst_host, self.memory.read(a, off, nbytes))

        acc = [(src, nbytes, False)] + ([(dst_host, nbytes, True)] if pinned else [])
        poison = self._poisoner(dst_host, nbytes, None) if pinned else None
        op = self.sched.enqueue(s, run, f"{call} of {nbytes} bytes from 0x{src:x}", acc,
                                on_ready=poison[1] if poison else None)
        if not pinned and not op.captured:  # pageable destination: returns once the copy is done
            self._complete(op, call, own=True)
        elif poison is not None and not op.captured:
            poison[0]()

    def _refuse_pageable(self, s: SimStream, call: str, direction: str) -> None:
        """A copy {direction} pageable host memory on a capturing stream: 900 (see _capture.py)."""
        if s.capture is not None and not s.capture.explicit:
            _capture.refuse(self, _codes.STREAM_CAPTURE_UNSUPPORTED, call, [s.capture],
                            f"{direction} pageable host memory on a capturing stream (a graph "
                            "would re-read it at every launch)")

    def _poisoner(self, dst: int, span: int, mask: np.ndarray | None):
        """``(now, when_ready)``: poison a page-locked copy destination.

        Until a copy into page-locked memory completes, its destination is
        undefined: a host read before synchronising must show garbage
        (``0xFF`` bytes), not plausible old data.  But bytes that work queued
        ahead of the copy still reads keep their value until then: ``now``
        poisons the rest (call it once the copy is queued), ``when_ready``
        poisons every byte the copy writes when the copy is next to run.
        ``mask`` (``span`` booleans) selects the bytes written; None: all.
        """
        full = np.ones(span, bool) if mask is None else mask
        now_mask = full.copy()
        for lo, hi in self.sched.pending_reads(dst, dst + span):
            now_mask[lo - dst:hi - dst] = False

        def fill(m: np.ndarray) -> None:
            if m.all():
                write_host(dst, np.full(span, 0xFF, np.uint8))
            elif m.any():
                buf = read_host(dst, span)
                buf[m] = 0xFF
                write_host(dst, buf)

        return (lambda: fill(now_mask)), (lambda: fill(full))

    @_locked
    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        call = "cuMemcpyDtoDAsync"
        s = self._stream(stream, call)
        self._fault("copy", call)
        if nbytes == 0:
            return
        self._check_range(src, nbytes, call, "source")
        self._check_range(dst, nbytes, call, "destination")

        def run():
            a, off = self._mem_rw(src, nbytes)
            data = self.memory.read(a, off, nbytes)
            b, boff = self._mem_rw(dst, nbytes)
            self.memory.write(b, boff, data)

        self.sched.enqueue(s, run, f"{call} of {nbytes} bytes 0x{src:x} -> 0x{dst:x}",
                           [(src, nbytes, False), (dst, nbytes, True)])

    @_locked
    def memcpy_2d_async(self, dst: int, dst_pitch: int, dst_is_device: bool,
                        src: int, src_pitch: int, src_is_device: bool,
                        width_bytes: int, height: int, stream: int) -> None:
        call = "cuMemcpy2DAsync"
        s = self._stream(stream, call)
        self._fault("copy", call)
        if width_bytes == 0 or height == 0:
            return
        if width_bytes > dst_pitch or width_bytes > src_pitch or width_bytes < 0 or height < 0:
            raise CudaError(INVALID_VALUE, call, f"width {width_bytes} exceeds a pitch "
                                                 f"(src {src_pitch}, dst {dst_pitch})")
        src_span = (height - 1) * src_pitch + width_bytes
        dst_span = (height - 1) * dst_pitch + width_bytes
        pinned_src = pinned_dst = None
        for addr, span, is_dev, role in ((src, src_span, src_is_device, "source"),
                                         (dst, dst_span, dst_is_device, "destination")):
            if is_dev:
                self._check_range(addr, span, call, role)
            else:
                self._check_host(addr, call, role)
        if not src_is_device:
            pinned_src = self.memory.host_kind(src, src_span)
        if not dst_is_device:
            pinned_dst = self.memory.host_kind(dst, dst_span)
        if (not src_is_device and pinned_src is None) or (not dst_is_device and pinned_dst is None):
            self._refuse_pageable(s, call, "to or from")
        snapshot = None
        if not src_is_device and pinned_src is None and s.capture is None:
            snapshot = read_host(src, src_span)

        def rows(buf: np.ndarray, pitch: int) -> np.ndarray:
            return np.lib.stride_tricks.as_strided(buf, (height, width_bytes), (pitch, 1))

        def run():
            if snapshot is not None:
                sbuf = snapshot
            elif src_is_device:
                a, off = self._mem_rw(src, src_span)
                sbuf = self.memory.read(a, off, src_span)
            else:
                sbuf = read_host(src, src_span)
            data = rows(sbuf, src_pitch)
            if dst_is_device:
                a, off = self._mem_rw(dst, dst_span)
                dbuf = self.memory.read(a, off, dst_span)
                rows(dbuf, dst_pitch)[...] = data
                self.memory.write(a, off, dbuf)
            else:
                dbuf = read_host(dst, dst_span)
                rows(dbuf, dst_pitch)[...] = data
                write_host(dst, dbuf)

        acc = []
        if src_is_device or pinned_src is not None:
            acc.append((src, src_span, False))
        if dst_is_device or pinned_dst is not None:
            acc.append((dst, dst_span, True))
        poison = None
        if pinned_dst is not None:  # undefined until complete (see _poisoner)
            mask = np.zeros(dst_span, bool)
            rows(mask, dst_pitch)[...] = True
            poison = self._poisoner(dst, dst_span, mask)
        op = self.sched.enqueue(s, run, f"{call} of {height}x{width_bytes} bytes", acc,
                                on_ready=poison[1] if poison else None)
        if not dst_is_device and pinned_dst is None and not op.captured:
            self._complete(op, call, own=True)
        elif poison is not None and not op.captured:
            poison[0]()

    def _memset(self, bits: int, dst: int, value: int, count: int, stream: int) -> None:
        call = f"cuMemsetD{bits}Async"
        s = self._stream(stream, call)
        self._fault("copy", call)
        size = bits // 8
        if dst % size:
            raise CudaError(INVALID_VALUE, call, f"0x{dst:x} is not {size}-byte aligned")
        if count == 0:
            return
        nbytes = count * size
        self._check_range(dst, nbytes, call, "destination")
        dtype = {8: np.uint8, 16: np.uint16, 32: np.uint32}[bits]
        pattern = np.full(count, value & ((1 << bits) - 1), dtype=dtype)

        def run():
            a, off = self._mem_rw(dst, nbytes)
            self.memory.write(a, off, pattern.view(np.uint8))

        self.sched.enqueue(s, run, f"{call} of {count} x {size} bytes at 0x{dst:x}", [(dst, nbytes, True)])

    @_locked
    def memset_2d_async(self, bits: int, dst: int, pitch: int, value: int, width: int, height: int,
                        stream: int) -> None:
        """``cuMemsetD2D8/16/32Async``: ``height`` rows of ``width`` ``bits``-bit values, ``pitch`` bytes apart."""
        call = f"cuMemsetD2D{bits}Async"
        s = self._stream(stream, call)
        self._fault("copy", call)
        size = bits // 8
        if dst % size or (height > 1 and pitch % size):
            raise CudaError(INVALID_VALUE, call, f"0x{dst:x} or pitch {pitch} is not {size}-byte aligned")
        if width == 0 or height == 0:
            return
        if pitch < width * size:
            raise CudaError(INVALID_VALUE, call, f"pitch {pitch} is less than a row of {width} x {size} bytes")
        span = (height - 1) * pitch + width * size
        self._check_range(dst, span, call, "destination")
        dtype = {8: np.uint8, 16: np.uint16, 32: np.uint32}[bits]
        row = np.full(width, value & ((1 << bits) - 1), dtype=dtype).view(np.uint8)

        def run():
            a, off = self._mem_rw(dst, span)
            buf = self.memory.read(a, off, span)
            np.lib.stride_tricks.as_strided(buf, (height, width * size), (pitch, 1))[...] = row
            self.memory.write(a, off, buf)

        self.sched.enqueue(s, run, f"{call} of {height} rows of {width} x {size} bytes at 0x{dst:x}",
                           [(dst, span, True)])

    @_locked
    def memset_d8_async(self, dst: int, value: int, count: int, stream: int) -> None:
        self._memset(8, dst, value, count, stream)

    @_locked
    def memset_d16_async(self, dst: int, value: int, count: int, stream: int) -> None:
        self._memset(16, dst, value, count, stream)

    @_locked
    def memset_d32_async(self, dst: int, value: int, count: int, stream: int) -> None:
        self._memset(32, dst, value, count, stream)

    # ------------------------------------------------------ managed memory
    @_locked
    def mem_alloc_managed(self, nbytes: int, attach_global: bool = True) -> int:
        ctx = self._current("cuMemAllocManaged")
        self._fault("alloc", "cuMemAllocManaged")
        return self.memory.alloc_managed(ctx.device, int(nbytes), owner=ctx).base
