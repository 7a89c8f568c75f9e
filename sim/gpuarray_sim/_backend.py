"""The simulator backend: the driver interface implemented on the CPU.

One concern: :class:`SimBackend`, the one public class, and the calls that
are about the simulated machine itself -- construction (from the
``GPUARRAY_SIM_*`` environment), fault injection, devices and contexts.  The
other calls live in one module per group, each a subclass of ``SimCore``
(``_core.py``: the state and the checks every call shares) that
``SimBackend`` combines: ``_memory_calls.py`` (allocations, copies,
memsets), ``_stream_calls.py`` (streams, events, host callbacks),
``_module_calls.py`` (modules, launches, IPC), ``_pool_calls.py`` (memory
pools), ``_managed_calls.py`` (managed-memory advice) and ``_graph.py`` (stream capture and graphs; the capture rules are
in ``_capture.py``).  Subclasses rather than
module-level helpers so that every call stays a method of the backend, with
the same name, lock and attributes as before the split.

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
- ``cuMemFree`` and ``cuMemFreeHost`` wait for the queued work of the
  memory's context (the current one for page-locked memory) and for any
  queued work that accesses the memory; they report only faults of that
  context's work (a fault of another context stays with it: sticky errors
  belong to their context) and never skip the free because of one;
- a host function (``cuStreamAddCallback``) runs on its context's driver
  thread (one per context, host functions in queue order), without the
  simulator's lock; every driver call made from inside one fails with
  ``CUDA_ERROR_NOT_PERMITTED`` (``_hostfn.py``);
- faults of queued work are sticky (``_sticky.py``);
- a thread with no current context gets ``CUDA_ERROR_INVALID_CONTEXT`` from
  the calls that act on the current context: allocations (``cuMemAlloc``,
  ``cuMemHostAlloc``, ``cuMemHostRegister``), creations (streams, events,
  modules), ``cuMemGetInfo``, ``cuCtxSynchronize``, ``cuProfilerStart``,
  ``cuProfilerStop`` and the default-stream
  handles 0/1/2.  Calls whose handle or pointer names the resource
  (``cuStreamDestroy``, ``cuEventDestroy``, ``cuMemFree``, ``cuMemFreeHost``,
  ``cuMemHostUnregister``, work on an explicit stream) are accepted: the
  driver documentation lists ``CUDA_ERROR_INVALID_CONTEXT`` among their
  results but does not ask for a current context, and drivers accept them
  without one, so refusing them would make the simulator stricter than CUDA.
"""

from __future__ import annotations

import os
from typing import overload

from gpuarray._driver import _fork
from gpuarray._driver._base import DEVICE_ATTRIBUTES
from gpuarray.errors import CudaError, CudaUnavailableError

from . import _capture, _codes, _hostfn, _images, _profile, _sticky, kernels
from ._codes import INVALID_CONTEXT
from ._context_calls import SimContextCalls
from ._core import _api, _locked
from ._graph import SimGraphCalls
from ._graph_build import SimGraphBuildCalls
from ._managed_calls import SimManagedCalls
from ._memory_calls import SimMemoryCalls
from ._module_calls import SimModuleCalls
from ._pool_calls import SimPoolCalls
from ._stream_calls import SimStreamCalls
from ._userobj import SimUserObjectCalls
from ._visible import machine_uuid, parse_visible_devices


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


class SimBackend(SimMemoryCalls, SimPoolCalls, SimManagedCalls, SimStreamCalls, SimModuleCalls,
                 SimGraphCalls, SimGraphBuildCalls, SimUserObjectCalls, SimContextCalls):
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
    memcheck : {"report", "strict"}, optional
        What a PTX kernel's access past an allocation's end, inside the
        allocation's mapped 512-byte granule (where a GPU does not fault),
        is: reported as compute-sanitizer's memcheck does (``report``) or
        ``CUDA_ERROR_ILLEGAL_ADDRESS`` (``strict``); ``GPUARRAY_SIM_MEMCHECK``
        when omitted (default ``report``; ``_memcheck.py``).
    """

    name = "sim"

    @property
    def kernel_images(self) -> str:
        """``"ptx"`` with ``GPUARRAY_SIM_KERNELS=ptx`` (the PTX executor runs the image), else
        the simulator runs its own build of each gpuarray kernel (``kernels``) and the real
        source is compiled only to be checked (``"checked"``), or not at all with
        ``GPUARRAY_SIM_COMPILE=0`` (``"none"``)."""
        if kernels.mode() == "ptx":
            return "ptx"
        compile_ = os.environ.get("GPUARRAY_SIM_COMPILE", "1").strip().lower()
        return "none" if compile_ in ("0", "false", "no", "off") else "checked"

    @classmethod
    def from_environment(cls) -> SimBackend:
        """Build a simulator from the ``GPUARRAY_SIM_*`` environment variables.

        ``GPUARRAY_SIM_DEVICES`` (default 1), ``GPUARRAY_SIM_MEMORY`` (per
        device, default ``4G``), ``GPUARRAY_SIM_CC`` (e.g. ``9.0`` or
        ``9.0,8.6``), ``GPUARRAY_SIM_RACECHECK`` (``error``, ``warn`` or
        ``0``), ``GPUARRAY_SIM_SEED`` (randomised scheduling),
        ``GPUARRAY_SIM_MAX_QUEUE`` (default 64), ``GPUARRAY_SIM_MEMCHECK``
        (``report``, the default, or ``strict``).  ``CUDA_VISIBLE_DEVICES``
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

    # ---------------------------------------------------------------- init
    @_api
    def init(self) -> None:
        if self._init_pid is None:  # a fork child of this process cannot use it (_fork.py)
            _fork.track(self)
        if not self.devices:  # cuInit: CUDA_ERROR_NO_DEVICE
            raise CudaUnavailableError(
                f"no CUDA-capable device is detected: CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')!r} hides all "
                f"{self.machine_devices} simulated device(s)")

    @_api
    def driver_version(self) -> int:
        return _images.DRIVER_VERSION  # the CUDA of the bindings and NVRTC in use (_images.py)

    # ------------------------------------------------------------- devices
    @_api
    def device_count(self) -> int:
        return self.devices

    @_api
    def device_name(self, ordinal: int) -> str:
        d = self._dev(ordinal, "cuDeviceGetName")
        major, minor = self.compute_capability[d]
        return f"gpuarray simulated device {self.physical[d]} (sm_{major}{minor})"

    @_api
    def device_attribute(self, attr: str, ordinal: int) -> int:
        """The value of device attribute ``attr`` (a name of ``_profile.ATTRIBUTES``)."""
        if attr not in _profile.BY_NAME:
            raise ValueError(f"unknown device attribute {attr!r}; known: {', '.join(DEVICE_ATTRIBUTES)} "
                             "and the other CUdevice_attribute names of sim/gpuarray_sim/_profile.py")
        d = self._dev(ordinal, "cuDeviceGetAttribute")
        return _profile.value(attr, self.compute_capability[d], self.physical[d])

    @_api
    def device_total_memory(self, ordinal: int) -> int:
        return self.memory.capacities[self._dev(ordinal, "cuDeviceTotalMem")]

    @_api
    def device_uuid(self, ordinal: int) -> bytes:
        return machine_uuid(self.physical[self._dev(ordinal, "cuDeviceGetUuid")])

    @_api
    def device_can_access_peer(self, ordinal: int, peer: int) -> bool:
        d, p = self._dev(ordinal, "cuDeviceCanAccessPeer"), self._dev(peer, "cuDeviceCanAccessPeer")
        # cuda.h (cuCtxEnablePeerAccess): devices of the same compute capability major
        return d != p and self.compute_capability[d][0] == self.compute_capability[p][0]

    # ------------------------------------------------------------- memory
    def mem_alloc_relaxed(self, nbytes: int) -> int:
        """``cuMemAlloc`` with the thread in relaxed capture mode (``_base.Backend``).

        The three driver calls of the interface's default, with the two mode
        exchanges done here as a driver does them: on the calling thread's
        own state, with no lock (``_lock.THREAD_LOCAL_CALLS``).  Refused as
        the first of the three would be: in a forked child, inside a host
        function.
        """
        call = "cuThreadExchangeStreamCaptureMode"
        if self._forked_from is not None:
            raise _fork.error(call)
        if _hostfn._state.active:
            _hostfn.refuse(call)
        tls, prev = self._tls, _capture.thread_mode(self)
        tls.capture_mode = "relaxed"
        try:
            return self.mem_alloc(nbytes)
        finally:
            tls.capture_mode = prev

    # ------------------------------------------------------------ contexts
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

    @_api
    def ctx_set_current(self, ctx: int) -> None:
        # CUDA: replaces the top of the thread's context stack; NULL pops it.
        self._set_top(None if not ctx else self._ctx_by_handle(ctx, "cuCtxSetCurrent"))

    @_api
    def ctx_get_current(self) -> int:
        ctx = getattr(self._tls, "ctx", None)
        return 0 if ctx is None else ctx.handle

    @_api
    def ctx_get_device(self) -> int:
        return self._current("cuCtxGetDevice", work=False).device

    @_locked
    def ctx_synchronize(self) -> None:
        ctx = self._current("cuCtxSynchronize")
        caps = [c for c in self._captures.values() if c.ctx is ctx]
        if caps:
            _capture.refuse(self, _codes.STREAM_CAPTURE_UNSUPPORTED, "cuCtxSynchronize", caps,
                            "synchronizes a context with a capturing stream")
        self._sync("cuCtxSynchronize", lambda: self.sched.complete_all(ctx))
        for s in self.sched.streams_by_ctx.get(id(ctx), ()):
            self.sched.host_observes(s.vc)
        self.sched.prune_streams(ctx)
        self._release_pools()

    @_locked
    def ctx_enable_peer_access(self, peer_ctx: int) -> None:
        ctx = self._current("cuCtxEnablePeerAccess")
        peer = self._ctx_by_handle(peer_ctx, "cuCtxEnablePeerAccess")
        if peer is ctx:  # cuda.h: INVALID_CONTEXT "if the current context is peerContext"
            raise CudaError(INVALID_CONTEXT, "cuCtxEnablePeerAccess", "a context cannot be its own peer")
        if not self.device_can_access_peer(ctx.device, peer.device):
            raise CudaError(217, "cuCtxEnablePeerAccess", f"device {ctx.device} cannot access device "
                                                          f"{peer.device} (cuDeviceCanAccessPeer is 0)")
        if peer.device in ctx.peers:
            raise CudaError(704, "cuCtxEnablePeerAccess", f"device {ctx.device} -> {peer.device}")
        ctx.peers.add(peer.device)

    # ------------------------------------------------------------ profiler
    # No profiling tool watches the simulator: the calls only record the
    # request (``profiler_active``), with CUDA's need for a current context.
    @_locked
    def profiler_start(self) -> None:
        self._current("cuProfilerStart").profiling = True

    @_locked
    def profiler_stop(self) -> None:
        self._current("cuProfilerStop").profiling = False

    @_api
    def profiler_active(self, ordinal: int) -> bool:
        """Simulator only: whether profile collection is enabled in device ``ordinal``'s context."""
        return self._contexts[self._dev(ordinal, "profiler_active")].profiling
