"""The simulator backend: the driver interface implemented on the CPU.

See ``gpuarray/_driver/_base.py`` for the interface and ``_sched.py`` /
``_memory.py`` for the models of asynchrony and memory.  Faithfulness rules:

- device work is queued and runs later; errors of queued work (illegal
  addresses in kernels, use after ``cuMemFreeAsync``) are reported by the
  synchronising call that ran it, as ``CUDA_ERROR_ILLEGAL_ADDRESS``;
- copies check their byte ranges when called (out of range or freed:
  ``CUDA_ERROR_ILLEGAL_ADDRESS`` at once);
- host-to-device copies from pageable memory read the source at the call;
  device-to-host copies into pageable memory complete before returning;
  copies to or from page-locked memory are fully asynchronous, and the
  page-locked destination of a queued copy reads as ``0xFF`` bytes until the
  copy completes, except bytes that work queued ahead of it still reads:
  those keep their value until that work is done (``_poisoner``), so an
  unsynchronised host read sees garbage and valid programs see their data;
- ``cuMemFree`` and ``cuMemFreeHost`` wait for all queued work, as in CUDA;
- faults of queued work are sticky (``_sticky.py``);
- a thread with no current context gets ``CUDA_ERROR_INVALID_CONTEXT`` from
  the calls that act on the current context: allocations (``cuMemAlloc``,
  ``cuMemHostAlloc``, ``cuMemHostRegister``), creations (streams, events,
  modules), ``cuMemGetInfo``, ``cuCtxSynchronize`` and the default-stream
  handles 0/1/2.  Calls whose handle or pointer names the resource
  (``cuStreamDestroy``, ``cuEventDestroy``, ``cuMemFree``, ``cuMemFreeHost``,
  ``cuMemHostUnregister``, work on an explicit stream) are accepted: the
  driver documentation lists ``CUDA_ERROR_INVALID_CONTEXT`` among their
  results but does not ask for a current context, and drivers accept them
  without one, so refusing them would make the simulator stricter than CUDA.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, overload

import numpy as np

from ...errors import CudaError, CudaOutOfMemoryError, CudaUnavailableError
from .. import sim_kernels
from .._base import (
    DEVICE_ATTRIBUTES,
    MEMORYTYPE_DEVICE,
    MEMORYTYPE_HOST,
    STREAM_LEGACY,
    STREAM_PER_THREAD,
    Backend,
    PointerInfo,
)
from . import _sticky
from ._ipc import SimIpc
from ._memory import AddressSpace, Allocation, DeviceFault, read_host, write_host
from ._sched import Op, Scheduler, SimEvent, SimStream
from ._visible import machine_uuid, parse_visible_devices, visible_list

INVALID_VALUE = 1
INVALID_CONTEXT = 201
INVALID_HANDLE = 400
NOT_FOUND = 500
NOT_READY = 600
ILLEGAL_ADDRESS = 700


def _parse_size(name: str, text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    try:
        value = int(float(t) * mult)
    except ValueError:
        value = -1
    if value <= 0:
        raise ValueError(f"{name}={text!r} is not a memory size (e.g. 4G, 512M, 1048576)")
    return value


@overload
def _env_int(name: str, default: int, minimum: int) -> int: ...


@overload
def _env_int(name: str, default: None, minimum: int) -> int | None: ...


def _env_int(name: str, default: int | None, minimum: int) -> int | None:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"{name}={text!r} must be at least {minimum}")
    return value


class SimContext:
    def __init__(self, handle: int, device: int) -> None:
        self.handle = handle
        self.device = device
        self.refs = 0
        self.legacy: SimStream = None  # type: ignore[assignment]
        self.per_thread: dict[int, SimStream] = {}
        self.peers: set[int] = set()
        #: ``(code, detail)`` of the sticky fault that made it unusable (see _sticky.py).
        self.sticky: tuple[int, str] | None = None


def _locked(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


class _KernelMemory:
    """The ``SimMemoryAccess`` given to reference kernels of one launch."""

    def __init__(self, backend: SimBackend, ctx: SimContext, kernel: str) -> None:
        self._b = backend
        self._ctx = ctx
        self._kernel = kernel

    def _resolve(self, address: int, nbytes: int) -> tuple[Allocation, int]:
        a, off = self._b.memory.resolve(int(address), int(nbytes), f"kernel {self._kernel}")
        if a.store is not None and a.device != self._ctx.device and a.device not in self._ctx.peers:
            raise DeviceFault(ILLEGAL_ADDRESS, f"kernel {self._kernel} on device {self._ctx.device} "
                                               f"accessed {a.describe()} without peer access enabled")
        return a, off

    def read(self, address: int, nbytes: int) -> np.ndarray:
        a, off = self._resolve(address, nbytes)
        return self._b.memory.read(a, off, int(nbytes))

    def write(self, address: int, data: Any) -> None:
        data = np.ascontiguousarray(np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8))
        a, off = self._resolve(address, data.size)
        self._b.memory.write(a, off, data)


class SimBackend(Backend):
    """CPU simulator of the driver interface.

    Parameters
    ----------
    devices : int
        Number of simulated devices.
    memory : int
        Bytes of memory per device.
    compute_capability : sequence of (int, int)
        Per device; the last entry repeats.
    racecheck : {"error", "warn", "0"}
        What the race detector does on an unordered access.
    seed : int or None
        Randomise the order of ready work across streams with this seed.
    max_queue : int
        Queued operations beyond which work runs without a host sync.
    visible : sequence of int, optional
        The simulated machine's devices this process sees, in order, as
        ``CUDA_VISIBLE_DEVICES`` selects them: visible ordinal ``i`` is
        machine device ``visible[i]`` (its name, UUID, PCI bus id and compute
        capability).  All ``devices`` when omitted; empty: ``init`` raises
        ``CudaUnavailableError`` as ``cuInit`` fails with
        ``CUDA_ERROR_NO_DEVICE``.
    """

    name = "sim"

    def __init__(self, devices: int = 1, memory: int = 4 << 30,
                 compute_capability: Sequence[tuple[int, int]] = ((9, 0),),
                 racecheck: str = "error", seed: int | None = None, max_queue: int = 64,
                 visible: Sequence[int] | None = None) -> None:
        if devices < 1:
            raise ValueError(f"the simulator needs at least 1 device, got {devices}")
        if racecheck not in ("error", "warn", "0"):
            raise ValueError(f"racecheck must be 'error', 'warn' or '0', got {racecheck!r}")
        #: machine device of each visible ordinal (CUDA_VISIBLE_DEVICES)
        self.physical = visible_list(devices, visible)
        self.compute_capability = [tuple(compute_capability[min(i, len(compute_capability) - 1)])
                                   for i in self.physical]
        self.machine_devices = devices
        devices = self.devices = len(self.physical)
        self.memory = AddressSpace([memory] * devices)
        self.sched = Scheduler(self.memory, racecheck=racecheck, seed=seed, max_queue=max_queue)
        self._lock = self.sched.lock
        self._tls = threading.local()
        self._contexts: list[SimContext] = []
        self._streams: dict[int, SimStream] = {}
        self._events: dict[int, SimEvent] = {}
        self._modules: dict[int, tuple[SimContext, bytes]] = {}
        self._functions: dict[int, tuple[SimContext, str, Any]] = {}
        self._release_threshold = [0] * devices
        self._ipc = SimIpc(self)
        self._faults: dict[str, list[list[int]]] = {}  # kind -> [[calls left, code], ...]
        self._next_handle = 0x5100_0000
        self.sched.on_fault = self._fault_while_draining
        for d in range(devices):
            ctx = SimContext(0x0C00_0000 + 0x100 * (d + 1), d)
            ctx.legacy = self.sched.new_stream(STREAM_LEGACY, ctx, "legacy")
            self._contexts.append(ctx)

    @classmethod
    def from_environment(cls) -> SimBackend:
        """Build a simulator from the ``GPUARRAY_SIM_*`` environment variables.

        ``GPUARRAY_SIM_DEVICES`` (default 1), ``GPUARRAY_SIM_MEMORY`` (per
        device, default ``4G``), ``GPUARRAY_SIM_CC`` (e.g. ``9.0`` or
        ``9.0,8.6``), ``GPUARRAY_SIM_RACECHECK`` (``error``, ``warn`` or
        ``0``), ``GPUARRAY_SIM_SEED`` (randomised scheduling),
        ``GPUARRAY_SIM_MAX_QUEUE`` (default 64).  ``CUDA_VISIBLE_DEVICES``
        selects which of the ``GPUARRAY_SIM_DEVICES`` devices this process
        sees, by CUDA's rules (``_visible.py``).
        """
        devices = _env_int("GPUARRAY_SIM_DEVICES", 1, 1)
        memory = _parse_size("GPUARRAY_SIM_MEMORY", os.environ.get("GPUARRAY_SIM_MEMORY", "4G"))
        ccs = []
        cc_text = os.environ.get("GPUARRAY_SIM_CC", "9.0")
        for part in cc_text.split(","):
            try:
                major, minor = (int(x) for x in part.strip().split("."))
            except ValueError:
                raise ValueError(f"GPUARRAY_SIM_CC={cc_text!r}: {part!r} is not MAJOR.MINOR") from None
            ccs.append((major, minor))
        racecheck = os.environ.get("GPUARRAY_SIM_RACECHECK", "error").strip().lower() or "error"
        if racecheck not in ("error", "warn", "0"):
            raise ValueError(f"GPUARRAY_SIM_RACECHECK={racecheck!r}: use error, warn or 0")
        seed = _env_int("GPUARRAY_SIM_SEED", None, 0)
        max_queue = _env_int("GPUARRAY_SIM_MAX_QUEUE", 64, 2)
        visible = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"),
                                        [machine_uuid(d) for d in range(devices)])
        return cls(devices, memory, ccs, racecheck, seed, max_queue, visible=visible)

    def _handle(self) -> int:
        self._next_handle += 0x40
        return self._next_handle

    # ------------------------------------------------------ fault injection
    FAULT_KINDS = ("alloc", "copy", "launch", "stream", "module")

    @_locked
    def inject_fault(self, kind: str, nth: int = 1, code: int = 2) -> None:
        """Make the ``nth`` next driver call of ``kind`` fail with CUDA error ``code``.

        Parameters
        ----------
        kind : {"alloc", "copy", "launch", "stream", "module"}
            ``alloc``: device, stream-ordered and page-locked allocations and
            host registration; ``copy``: every memcpy and memset; ``launch``:
            kernel launches; ``stream``: stream and event creation;
            ``module``: module loads.
        nth : int, default 1
            Which call from now fails (1: the next one).
        code : int, default 2 (CUDA_ERROR_OUT_OF_MEMORY)
            The CUDA result code raised (out of memory raises
            ``CudaOutOfMemoryError``).

        Examples
        --------
        >>> b = SimBackend()
        >>> b.inject_fault("alloc", nth=2)
        """
        if kind not in self.FAULT_KINDS:
            raise ValueError(f"fault kind {kind!r} is not one of {', '.join(self.FAULT_KINDS)}")
        if int(nth) < 1:
            raise ValueError(f"nth must be at least 1, got {nth}")
        self._faults.setdefault(kind, []).append([int(nth), int(code)])

    def _fault(self, kind: str, call: str) -> None:
        plans = self._faults.get(kind)
        if not plans:
            return
        fire = None
        for plan in plans:
            plan[0] -= 1
            if plan[0] == 0 and fire is None:
                fire = plan
        if fire is not None:
            plans.remove(fire)
            cls = CudaOutOfMemoryError if fire[1] == 2 else CudaError
            raise cls(fire[1], call, "(fault injected by the simulator)")

    # ---------------------------------------------------------------- init
    def init(self) -> None:
        if not self.devices:  # cuInit: CUDA_ERROR_NO_DEVICE
            raise CudaUnavailableError(
                f"no CUDA-capable device is detected: CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')!r} hides all "
                f"{self.machine_devices} simulated device(s)")

    def driver_version(self) -> int:
        return 13000

    # ------------------------------------------------------------- devices
    def _dev(self, ordinal: int, call: str) -> int:
        if not isinstance(ordinal, (int, np.integer)) or not 0 <= ordinal < self.devices:
            raise CudaError(101, call, f"device {ordinal!r} (the simulator has {self.devices})")
        return int(ordinal)

    def device_count(self) -> int:
        return self.devices

    def device_name(self, ordinal: int) -> str:
        d = self._dev(ordinal, "cuDeviceGetName")
        major, minor = self.compute_capability[d]
        return f"gpuarray simulated device {self.physical[d]} (sm_{major}{minor})"

    def device_attribute(self, attr: str, ordinal: int) -> int:
        if attr not in DEVICE_ATTRIBUTES:
            raise ValueError(f"unknown device attribute {attr!r}; known: {', '.join(DEVICE_ATTRIBUTES)}")
        d = self._dev(ordinal, "cuDeviceGetAttribute")
        major, minor = self.compute_capability[d]
        return {
            "compute_capability_major": major, "compute_capability_minor": minor,
            "multiprocessor_count": 132, "max_threads_per_block": 1024,
            "max_shared_memory_per_block": 48 << 10, "warp_size": 32, "l2_cache_size": 50 << 20,
            "unified_addressing": 1, "can_map_host_memory": 1, "memory_pools_supported": 1,
            "pci_bus_id": 0x10 + self.physical[d], "pci_device_id": 0, "max_grid_dim_x": 2**31 - 1,
            "max_grid_dim_y": 65535, "max_grid_dim_z": 65535, "concurrent_managed_access": 1,
            "integrated": 0,
        }[attr]

    def device_total_memory(self, ordinal: int) -> int:
        return self.memory.capacities[self._dev(ordinal, "cuDeviceTotalMem")]

    def device_uuid(self, ordinal: int) -> bytes:
        return machine_uuid(self.physical[self._dev(ordinal, "cuDeviceGetUuid")])

    def device_can_access_peer(self, ordinal: int, peer: int) -> bool:
        return self._dev(ordinal, "cuDeviceCanAccessPeer") != self._dev(peer, "cuDeviceCanAccessPeer")

    # ------------------------------------------------------------ contexts
    def _current(self, call: str, work: bool = True) -> SimContext:
        """The current context; INVALID_CONTEXT when none, its sticky error when ``work``."""
        ctx = getattr(self._tls, "ctx", None)
        if ctx is None:
            raise CudaError(INVALID_CONTEXT, call, "(no context is current on this thread)")
        if work and ctx.sticky is not None:
            _sticky.check(ctx, call)
        return ctx

    def _check_current(self, call: str) -> None:
        """The sticky error of the current context, if one is current (else nothing)."""
        _sticky.check(getattr(self._tls, "ctx", None), call)

    def _ctx_by_handle(self, handle: int, call: str) -> SimContext:
        for ctx in self._contexts:
            if ctx.handle == handle:
                return ctx
        raise CudaError(INVALID_CONTEXT, call, f"0x{handle:x} is not a context")

    @_locked
    def primary_ctx_retain(self, ordinal: int) -> int:
        ctx = self._contexts[self._dev(ordinal, "cuDevicePrimaryCtxRetain")]
        ctx.refs += 1
        return ctx.handle

    @_locked
    def primary_ctx_release(self, ordinal: int) -> None:
        ctx = self._contexts[self._dev(ordinal, "cuDevicePrimaryCtxRelease")]
        if ctx.refs <= 0:
            raise CudaError(INVALID_CONTEXT, "cuDevicePrimaryCtxRelease", f"device {ordinal} was not retained")
        ctx.refs -= 1
        if ctx.refs == 0:  # CUDA: "automatically reset once the last reference is released"
            _sticky.reset(self, ctx)

    @_locked
    def primary_ctx_reset(self, ordinal: int) -> None:
        _sticky.reset(self, self._contexts[self._dev(ordinal, "cuDevicePrimaryCtxReset")])

    def ctx_set_current(self, ctx: int) -> None:
        self._tls.ctx = None if not ctx else self._ctx_by_handle(ctx, "cuCtxSetCurrent")

    def ctx_get_current(self) -> int:
        ctx = getattr(self._tls, "ctx", None)
        return 0 if ctx is None else ctx.handle

    def ctx_get_device(self) -> int:
        return self._current("cuCtxGetDevice", work=False).device

    @_locked
    def ctx_synchronize(self) -> None:
        ctx = self._current("cuCtxSynchronize")
        self._sync("cuCtxSynchronize", lambda: self.sched.complete_all(ctx))
        for s in self.sched.streams_by_ctx.get(id(ctx), ()):
            self.sched.host_observes(s.vc)
        self.sched.prune_streams(ctx)

    @_locked
    def ctx_enable_peer_access(self, peer_ctx: int) -> None:
        ctx = self._current("cuCtxEnablePeerAccess")
        peer = self._ctx_by_handle(peer_ctx, "cuCtxEnablePeerAccess")
        if peer is ctx:
            raise CudaError(INVALID_VALUE, "cuCtxEnablePeerAccess", "a context cannot be its own peer")
        if peer.device in ctx.peers:
            raise CudaError(704, "cuCtxEnablePeerAccess", f"device {ctx.device} -> {peer.device}")
        ctx.peers.add(peer.device)

    # ------------------------------------------------------------- helpers
    def _sync(self, call: str, fn) -> None:
        """Run queued work; device faults become CudaError of ``call`` (sticky ones poison)."""
        try:
            fn()
        except DeviceFault as f:
            self._poison_if_sticky(f.code, f.detail)
            raise CudaError(f.code, call, f.detail) from None
        except CudaError as e:  # raised by a kernel's reference (launch checks)
            self._poison_if_sticky(e.code, e.detail)
            raise

    def _poison_if_sticky(self, code: int, detail: str) -> bool:
        op = self.sched.failed_op
        if code not in _sticky.STICKY_CODES or op is None:
            return False
        _sticky.poison(self, op.stream.ctx, code, detail)
        return True

    def _fault_while_draining(self, op: Op, e: BaseException) -> bool:
        # Work that ran because the queue grew: no call is synchronising, so
        # a sticky fault is reported by the context's next call, as on CUDA.
        if isinstance(e, (DeviceFault, CudaError)):
            return self._poison_if_sticky(e.code, e.detail)
        return False

    def _stream(self, handle: int, call: str) -> SimStream:
        if handle in (0, STREAM_LEGACY):
            return self._current(call).legacy
        if handle == STREAM_PER_THREAD:
            ctx = self._current(call)
            tid = threading.get_ident()
            s = ctx.per_thread.get(tid)
            if s is None:
                s = ctx.per_thread[tid] = self.sched.new_stream(STREAM_PER_THREAD, ctx, "per_thread")
            return s
        s = self._streams.get(handle)
        if s is None or s.destroyed:
            raise CudaError(INVALID_HANDLE, call, f"stream 0x{int(handle):x} does not exist (destroyed?)")
        if s.ctx.sticky is not None:
            _sticky.check(s.ctx, call)
        return s

    def _check_range(self, address: int, nbytes: int, call: str, role: str) -> Allocation:
        """A device (or page-locked) range, checked now; returns its allocation."""
        try:
            a, _ = self.memory.resolve(address, nbytes, f"{call} {role}")
        except DeviceFault as f:
            raise CudaError(f.code, call, f.detail) from None
        return a

    def _check_host(self, address: int, call: str, role: str) -> None:
        if address == 0 or self.memory.is_device_address(address):
            raise CudaError(INVALID_VALUE, call, f"{role} 0x{address:x} is not host memory")

    def _mem_rw(self, address: int, nbytes: int):
        a, off = self.memory.resolve(address, nbytes, "copy")
        return a, off

    # -------------------------------------------------------------- memory
    @_locked
    def mem_alloc(self, nbytes: int) -> int:
        ctx = self._current("cuMemAlloc")
        self._fault("alloc", "cuMemAlloc")
        return self.memory.alloc_device(ctx.device, int(nbytes)).base

    @_locked
    def mem_free(self, ptr: int) -> None:
        a = self.memory.find(int(ptr))
        if a is not None and a.alive and a.kind == "ipc":
            raise CudaError(INVALID_VALUE, "cuMemFree", f"0x{int(ptr):x} is an IPC mapping: "
                                                        "close it with cuIpcCloseMemHandle")
        if a is not None and 0 <= a.device < self.devices:
            _sticky.check(self._contexts[a.device], "cuMemFree")
        self._check_current("cuMemFree")
        self._sync("cuMemFree", lambda: self.sched.complete_all())
        for ctx in self._contexts:
            for s in self.sched.streams_by_ctx.get(id(ctx), ()):
                self.sched.host_observes(s.vc)
        self.memory.free_device(int(ptr), "cuMemFree")

    @_locked
    def mem_alloc_async(self, nbytes: int, stream: int) -> int:
        s = self._stream(stream, "cuMemAllocAsync")
        self._fault("alloc", "cuMemAllocAsync")
        a = self.memory.alloc_device(s.ctx.device, int(nbytes), kind="pool", call="cuMemAllocAsync")
        self.sched.enqueue(s, None, f"cuMemAllocAsync of 0x{a.base:x}", [(a.base, a.size, True)])
        return a.base

    @_locked
    def mem_free_async(self, ptr: int, stream: int) -> None:
        s = self._stream(stream, "cuMemFreeAsync")
        a = self.memory.find(int(ptr))
        if a is None or a.base != ptr or not a.alive or a.is_host:
            raise CudaError(INVALID_VALUE, "cuMemFreeAsync", f"0x{int(ptr):x} is not a live device allocation")
        self.sched.enqueue(s, lambda: self.memory.free_device(a.base, "cuMemFreeAsync"),
                           f"cuMemFreeAsync of 0x{a.base:x}", [(a.base, a.size, True)])

    def mempool_set_release_threshold(self, ordinal: int, nbytes: int) -> None:
        self._release_threshold[self._dev(ordinal, "cuMemPoolSetAttribute")] = int(nbytes)

    @_locked
    def mem_get_info(self) -> tuple[int, int]:
        d = self._current("cuMemGetInfo").device
        return self.memory.capacities[d] - self.memory.used[d], self.memory.capacities[d]

    @_locked
    def mem_host_alloc(self, nbytes: int, mapped: bool = False, portable: bool = False,
                       write_combined: bool = False) -> int:
        self._current("cuMemHostAlloc")  # allocates for the current context (see _current)
        self._fault("alloc", "cuMemHostAlloc")
        return self.memory.alloc_host(int(nbytes), mapped).base

    @_locked
    def mem_free_host(self, ptr: int) -> None:
        self._check_current("cuMemFreeHost")
        self._sync("cuMemFreeHost", lambda: self.sched.complete_all())
        self.memory.free_host(int(ptr))

    @_locked
    def mem_host_register(self, ptr: int, nbytes: int, mapped: bool = False, portable: bool = False) -> None:
        self._current("cuMemHostRegister")
        self._fault("alloc", "cuMemHostRegister")
        self.memory.register_host(int(ptr), int(nbytes), mapped)

    @_locked
    def mem_host_unregister(self, ptr: int) -> None:
        self._check_current("cuMemHostUnregister")
        self._sync("cuMemHostUnregister", lambda: self.sched.complete_all())
        self.memory.unregister_host(int(ptr))

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
        return PointerInfo(MEMORYTYPE_DEVICE, a.device, a.base, a.size, a.kind == "managed")

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
        data = None if pinned else read_host(src_host, nbytes)

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

        def run():
            a, off = self._mem_rw(src, nbytes)
            write_host(dst_host, self.memory.read(a, off, nbytes))

        acc = [(src, nbytes, False)] + ([(dst_host, nbytes, True)] if pinned else [])
        poison = self._poisoner(dst_host, nbytes, None) if pinned else None
        op = self.sched.enqueue(s, run, f"{call} of {nbytes} bytes from 0x{src:x}", acc,
                                on_ready=poison[1] if poison else None)
        if not pinned:  # pageable destination: returns once the copy is done
            self._complete(op, call)
        elif poison is not None:
            poison[0]()

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

    def _complete(self, op: Op, call: str) -> None:
        self._sync(call, lambda: self.sched.complete(op))
        self.sched.host_observes(op.vc)

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
        snapshot = None
        if not src_is_device and pinned_src is None:
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
        if not dst_is_device and pinned_dst is None:
            self._complete(op, call)
        elif poison is not None:
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
    def memset_d8_async(self, dst: int, value: int, count: int, stream: int) -> None:
        self._memset(8, dst, value, count, stream)

    @_locked
    def memset_d16_async(self, dst: int, value: int, count: int, stream: int) -> None:
        self._memset(16, dst, value, count, stream)

    @_locked
    def memset_d32_async(self, dst: int, value: int, count: int, stream: int) -> None:
        self._memset(32, dst, value, count, stream)

    # ------------------------------------------------------------- streams
    @_locked
    def stream_create(self, non_blocking: bool = False, priority: int = 0) -> int:
        ctx = self._current("cuStreamCreate")
        self._fault("stream", "cuStreamCreate")
        h = self._handle()
        s = self.sched.new_stream(h, ctx, "non_blocking" if non_blocking else "blocking")
        self._streams[h] = s
        return h

    @_locked
    def stream_destroy(self, stream: int) -> None:
        if stream in (0, STREAM_LEGACY, STREAM_PER_THREAD):
            raise CudaError(INVALID_HANDLE, "cuStreamDestroy", f"cannot destroy default stream {stream}")
        s = self._stream(stream, "cuStreamDestroy")
        del self._streams[stream]
        self.sched.forget_stream(s)

    @_locked
    def stream_query(self, stream: int) -> bool:
        s = self._stream(stream, "cuStreamQuery")
        if s.tail is not None:
            self._complete(s.tail, "cuStreamQuery")
        return True

    @_locked
    def stream_synchronize(self, stream: int) -> None:
        s = self._stream(stream, "cuStreamSynchronize")
        if s.tail is not None:
            self._complete(s.tail, "cuStreamSynchronize")
        self.sched.host_observes(s.vc)

    @_locked
    def stream_wait_event(self, stream: int, event: int) -> None:
        s = self._stream(stream, "cuStreamWaitEvent")
        ev = self._event(event, "cuStreamWaitEvent")
        if ev.op is None:
            return
        self.sched.enqueue(s, None, "cuStreamWaitEvent", extra_deps=[ev.op], extra_vc=ev.vc)

    @_locked
    def stream_get_ctx(self, stream: int) -> int:
        return self._stream(stream, "cuStreamGetCtx").ctx.handle

    # -------------------------------------------------------------- events
    def _event(self, event: int, call: str) -> SimEvent:
        ev = self._events.get(event)
        if ev is None:
            raise CudaError(INVALID_HANDLE, call, f"event 0x{int(event):x} does not exist (destroyed?)")
        _sticky.check(ev.ctx, call)
        return ev

    @_locked
    def event_create(self, timing: bool = True, interprocess: bool = False) -> int:
        ctx = self._current("cuEventCreate")
        self._fault("stream", "cuEventCreate")
        h = self._handle()
        self._events[h] = SimEvent(h, timing, ctx)
        return h

    @_locked
    def event_destroy(self, event: int) -> None:
        self._event(event, "cuEventDestroy")
        del self._events[event]

    @_locked
    def event_record(self, event: int, stream: int) -> None:
        ev = self._event(event, "cuEventRecord")
        s = self._stream(stream, "cuEventRecord")
        ev.op = self.sched.enqueue(s, None, "cuEventRecord")
        ev.vc = dict(ev.op.vc)

    @_locked
    def event_query(self, event: int) -> bool:
        ev = self._event(event, "cuEventQuery")
        if ev.op is not None:
            self._complete(ev.op, "cuEventQuery")
        return True

    @_locked
    def event_synchronize(self, event: int) -> None:
        ev = self._event(event, "cuEventSynchronize")
        if ev.op is not None:
            self._complete(ev.op, "cuEventSynchronize")

    @_locked
    def event_elapsed_time(self, start: int, end: int) -> float:
        a = self._event(start, "cuEventElapsedTime")
        b = self._event(end, "cuEventElapsedTime")
        if not (a.timing and b.timing):
            raise CudaError(INVALID_HANDLE, "cuEventElapsedTime", "an event was created without timing")
        if a.op is None or b.op is None:
            raise CudaError(INVALID_HANDLE, "cuEventElapsedTime", "an event was never recorded")
        if not (a.op.done and b.op.done):
            raise CudaError(NOT_READY, "cuEventElapsedTime", "an event has not completed")
        return (b.op.t_done - a.op.t_done) * 1000.0

    # --------------------------------------------------- modules, launches
    @_locked
    def module_load_data(self, image: bytes) -> int:
        ctx = self._current("cuModuleLoadData")
        self._fault("module", "cuModuleLoadData")
        if not image:
            raise CudaError(200, "cuModuleLoadData", "empty image")
        h = self._handle()
        self._modules[h] = (ctx, bytes(image))
        return h

    @_locked
    def module_unload(self, module: int) -> None:
        entry = self._modules.get(module)
        if entry is None:
            raise CudaError(INVALID_HANDLE, "cuModuleUnload", f"module 0x{int(module):x}")
        _sticky.check(entry[0], "cuModuleUnload")
        del self._modules[module]

    @_locked
    def module_get_function(self, module: int, name: str) -> int:
        entry = self._modules.get(module)
        if entry is None:
            raise CudaError(INVALID_HANDLE, "cuModuleGetFunction", f"module 0x{int(module):x}")
        _sticky.check(entry[0], "cuModuleGetFunction")
        impl = sim_kernels.lookup(name)
        if impl is None:
            raise CudaError(NOT_FOUND, "cuModuleGetFunction",
                            f"{name!r} has no reference implementation registered for the simulator")
        h = self._handle()
        self._functions[h] = (entry[0], name, impl)
        return h

    @_locked
    def launch_kernel(self, func: int, grid: tuple[int, int, int], block: tuple[int, int, int],
                      shared_mem: int, stream: int, params: Sequence[Any]) -> None:
        call = "cuLaunchKernel"
        entry = self._functions.get(func)
        if entry is None:
            raise CudaError(INVALID_HANDLE, call, f"function 0x{int(func):x}")
        ctx, name, impl = entry
        s = self._stream(stream, call)
        self._fault("launch", call)
        if s.ctx is not ctx:
            raise CudaError(INVALID_HANDLE, call, f"{name}: stream of device {s.ctx.device}, "
                                                  f"module of device {ctx.device}")
        g = tuple(int(x) for x in grid)
        b = tuple(int(x) for x in block)
        if (len(g) != 3 or len(b) != 3 or min(g + b) < 1 or g[0] > 2**31 - 1
                or max(g[1:]) > 65535 or b[0] * b[1] * b[2] > 1024 or b[2] > 64):
            raise CudaError(INVALID_VALUE, call, f"{name}: grid {g} block {b}")
        if shared_mem > 48 << 10:
            raise CudaError(INVALID_VALUE, call, f"{name}: {shared_mem} bytes of shared memory")
        try:
            snap = [type(p).from_buffer_copy(p) for p in params]  # CUDA copies parameters at launch
        except TypeError:
            raise TypeError(f"{name}: kernel parameters must be ctypes objects, got "
                            f"{[type(p).__name__ for p in params]}") from None
        acc = impl.accesses(snap)
        mem = _KernelMemory(self, ctx, name)
        self.sched.enqueue(s, lambda: impl.run(mem, g, b, shared_mem, snap),
                           f"kernel {name}", acc)

    # ----------------------------------------------------------------- IPC
    # Across processes through shared memory: see _ipc.py.
    @_locked
    def ipc_get_mem_handle(self, ptr: int) -> bytes:
        return self._ipc.get_handle(int(ptr))

    @_locked
    def ipc_open_mem_handle(self, handle: bytes) -> int:
        return self._ipc.open(bytes(handle))

    @_locked
    def ipc_close_mem_handle(self, ptr: int) -> None:
        self._ipc.close(int(ptr))

    # ------------------------------------------ managed memory, host callbacks
    @_locked
    def mem_alloc_managed(self, nbytes: int, attach_global: bool = True) -> int:
        ctx = self._current("cuMemAllocManaged")
        self._fault("alloc", "cuMemAllocManaged")
        return self.memory.alloc_managed(ctx.device, int(nbytes)).base

    @_locked
    def stream_add_callback(self, stream: int, fn: Callable[[int], None]) -> None:
        call = "cuStreamAddCallback"
        s = self._stream(stream, call)
        if not callable(fn):
            raise TypeError(f"{call}: the callback must be callable, got {type(fn).__name__}")
        status = [0]
        ran = [False]

        def run() -> None:
            ran[0] = True
            try:
                fn(status[0])
            except Exception as e:  # CUDA cannot raise into the host: report, never lose
                _unraisable(e, fn)

        op = self.sched.enqueue(s, run, f"{call} host function {getattr(fn, '__name__', fn)!r}")
        # The GPU makes progress without the host: a driver thread runs the
        # stream up to the callback and calls it, as CUDA's callback thread does.
        threading.Thread(target=self._run_host_fn, args=(s, op, status, run, ran), daemon=True,
                         name="gpuarray-sim-callback").start()

    def _run_host_fn(self, s: SimStream, op: Op, status: list[int], run: Callable[[], None],
                     ran: list[bool]) -> None:
        with self._lock:
            while not op.done:
                try:
                    self.sched.complete(op)
                except DeviceFault as f:
                    # Earlier work failed: the callback gets the error status.
                    # A sticky fault poisons the context here, as a sync would
                    # (its next call reports it); any other stays on the stream
                    # for the host's next sync of it. It never vanishes here.
                    status[0] = status[0] or f.code
                    if self._poison_if_sticky(f.code, f.detail):
                        break

                    def refault(f: DeviceFault = f) -> None:
                        raise f

                    self.sched.enqueue(s, refault, "fault of work before a host callback")
            if not ran[0]:
                # A sticky fault dropped the context's queued work, this
                # callback with it (here or in another thread's sync): CUDA
                # still calls a stream callback, with the persistent error.
                status[0] = status[0] or (s.ctx.sticky[0] if s.ctx.sticky else ILLEGAL_ADDRESS)
                run()


def _unraisable(exc: BaseException, fn: Any) -> None:
    """Report an exception of a host callback as CPython reports one of a ctypes callback."""
    import sys
    import types

    sys.unraisablehook(types.SimpleNamespace(
        exc_type=type(exc), exc_value=exc, exc_traceback=exc.__traceback__,
        err_msg="Exception ignored in a stream callback", object=fn))
