"""State and checks shared by the simulator's call groups.

One concern: what every simulated driver call needs around its own work --
the per-device contexts, the handle tables, the lock (``_locked``: the
scheduler's lock serialises every call), fault injection's countdown, and the
checks that turn a handle, an ordinal or an address range into a simulator
object or a ``CudaError`` (``_current``, ``_stream``, ``_check_range``,
``_sync``, ``_complete``...).  :class:`SimCore` holds them; the call groups
(``_memory_calls.py``, ``_stream_calls.py``, ``_module_calls.py``) subclass
it and ``SimBackend`` (``_backend.py``) combines them.  The faithfulness
rules are in ``_backend.py``'s docstring.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuarray._driver import _fork
from gpuarray._driver._base import STREAM_LEGACY, STREAM_PER_THREAD, Backend
from gpuarray.errors import CudaError, CudaOutOfMemoryError

from . import _capture, _hostfn, _memcheck, _sticky
from ._codes import (
    CONTEXT_IS_DESTROYED,
    INVALID_CONTEXT,
    INVALID_HANDLE,
)
from ._hostfn import CALL_NAMES
from ._ipc import SimIpc, SimIpcEvents
from ._memory import AddressSpace, Allocation, DeviceFault
from ._sched import Op, Scheduler, SimContext, SimEvent, SimStream, _Blocked
from ._visible import visible_list

INVALID_VALUE = 1




def _driver_call(method, locked: bool):
    """Wrap a driver call: refused inside a host function (``_hostfn.py``); under the lock if ``locked``."""
    call = CALL_NAMES.get(method.__name__, method.__name__)
    state = _hostfn._state

    # In a child forked after init (``.._fork``) every call fails with
    # CUDA_ERROR_NOT_INITIALIZED, as a driver's do: checked before the lock,
    # which another thread of the parent may have held at the fork.
    if method.__name__ in _capture.UNSAFE_CALLS:  # see _capture.py
        needs_ctx = method.__name__ in _capture.NEEDS_CONTEXT

        def wrapper(self, *args, **kwargs):
            if self._forked_from is not None:
                raise _fork.error(call)
            if state.active:
                _hostfn.refuse(call)
            with self._lock:
                if needs_ctx and getattr(self._tls, "ctx", None) is None:
                    self._current(call)  # INVALID_CONTEXT, before any capture rule
                if self.sched.capturing:
                    _capture.check_unsafe(self, call)
                return method(self, *args, **kwargs)
    elif locked:
        def wrapper(self, *args, **kwargs):
            if self._forked_from is not None:
                raise _fork.error(call)
            if state.active:
                _hostfn.refuse(call)
            with self._lock:
                return method(self, *args, **kwargs)
    else:
        def wrapper(self, *args, **kwargs):
            if self._forked_from is not None:
                raise _fork.error(call)
            if state.active:
                _hostfn.refuse(call)
            return method(self, *args, **kwargs)

    return functools.wraps(method)(wrapper)


def _locked(method):
    """A driver call: refused inside a host function, else run under the simulator's lock."""
    return _driver_call(method, locked=True)


def _api(method):
    """A driver call that needs no lock: still refused inside a host function."""
    return _driver_call(method, locked=False)


class SimCore(Backend):
    """The simulator's state and the checks its calls share (parameters: ``SimBackend``)."""

    #: Queue host function ``fn`` on a stream (``_stream_calls.py``; graph replays use it).
    _queue_host_fn: Any
    #: Graph memory nodes of a capture (``_graph.py``; the memory calls use them).
    _capture_alloc: Any
    _capture_free: Any
    #: Memory pools (``_pool_calls.py``; the memory calls allocate from and free to them).
    _default_pool: Any
    _current_device_pool: Any
    _pool_alloc: Any
    _pool_freed: Any
    _free_pool_host: Any
    _release_pools: Any
    #: Graphs by handle and user-object references (``_graph.py``, ``_userobj.py``).
    _graph: Any
    _take_user_refs: Any
    _release_user_refs: Any

    def __init__(self, devices: int = 1, memory: int = 4 << 30,
                 compute_capability: Sequence[tuple[int, int]] = ((9, 0),),
                 racecheck: str = "error", seed: int | None = None, max_queue: int = 64,
                 visible: Sequence[int] | None = None, memcheck: str | None = None) -> None:
        if devices < 1:
            raise ValueError(f"the simulator needs at least 1 device, got {devices}")
        if racecheck not in ("error", "warn", "0"):
            raise ValueError(f"racecheck must be 'error', 'warn' or '0', got {racecheck!r}")
        if memcheck is None:
            memcheck = _memcheck.mode_from_environment()
        if memcheck not in _memcheck.MODES:
            raise ValueError(f"memcheck must be 'report' or 'strict', got {memcheck!r}")
        #: An access past an allocation's end inside its mapped slack (PTX kernels):
        #: ``report`` (it runs, reported as memcheck does) or ``strict`` (a fault): _memcheck.py.
        self.memcheck = memcheck
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
        self._contexts: list[SimContext] = []  # the primary context of each device
        #: Contexts of ``cuCtxCreate``, by handle (``_context_calls.py``).
        self._created: dict[int, SimContext] = {}
        #: The flags of each context (``CUctx_flags``), by handle: ``cuCtxCreate``'s, and
        #: ``cuDevicePrimaryCtxSetFlags``'s for primary contexts (``_context_calls.py``).
        self._ctx_flags: dict[int, int] = {}
        self._streams: dict[int, SimStream] = {}
        self._events: dict[int, SimEvent] = {}
        self._modules: dict[int, tuple[SimContext, bytes]] = {}
        self._functions: dict[int, tuple[SimContext, str, Any, int]] = {}  # ctx, name, impl, module
        #: Dynamic shared memory a function opted in to (``cuFuncSetAttribute``), by handle.
        self._smem_optin: dict[int, int] = {}
        #: Device variables of loaded images: (module, name) -> (address, size).
        self._globals: dict[tuple[int, str], tuple[int, int]] = {}
        #: Memory pools by handle, the current pool of each (allocation type, location
        #: type, location id) that cuMemSetMemPool chose, and the default pools
        #: (``_pool_calls.py``; made when first asked for).
        self._pools: dict[int, Any] = {}
        self._current_pools: dict[tuple[int, int, int], Any] = {}
        self._default_pools: dict[tuple[int, int, int], Any] = {}
        self._ipc = SimIpc(self)
        self._ipc_events_of = SimIpcEvents(self)
        self._faults: dict[str, list[list[int]]] = {}  # kind -> [[calls left, code], ...]
        self._next_handle = 0x5100_0000
        #: The host-function driver thread of each context (``_hostfn.Worker``), by ``id(ctx)``.
        self._host_fn_workers: dict[int, _hostfn.Worker] = {}
        #: The pid of the parent, in a process forked after ``init`` (``.._fork.track``).
        self._forked_from: int | None = None
        self._init_pid: int | None = None
        self.sched.on_fault = self._fault_while_draining
        #: Capture sequences in progress, graphs and executable graphs (``_capture.py``, ``_graph.py``).
        self._captures: dict[int, Any] = {}
        self._graphs: dict[int, Any] = {}
        self._execs: dict[int, Any] = {}
        #: Conditional handles (``_graph_build.py``), by handle (their device address).
        self._cond_handles: dict[int, Any] = {}
        #: Graph memory mapped now, and its high watermark, per device (``_graph.py``).
        self._graph_mem_used = [0] * devices
        self._graph_mem_high = [0] * devices
        #: User objects (``_userobj.py``) and the driver thread their destructors run on.
        self._user_objects: dict[int, Any] = {}
        self._user_object_worker = _hostfn.Worker()
        self.sched.capture_hook = functools.partial(_capture.captured, self)
        for d in range(devices):
            ctx = SimContext(0x0C00_0000 + 0x100 * (d + 1), d)
            ctx.legacy = self.sched.new_stream(STREAM_LEGACY, ctx, "legacy")
            self._contexts.append(ctx)

    def _handle(self) -> int:
        self._next_handle += 0x40
        return self._next_handle

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

    def _dev(self, ordinal: int, call: str) -> int:
        if not isinstance(ordinal, (int, np.integer)) or not 0 <= ordinal < self.devices:
            raise CudaError(101, call, f"device {ordinal!r} (the simulator has {self.devices})")
        return int(ordinal)

    def _current(self, call: str, work: bool = True) -> SimContext:
        """The current context; INVALID_CONTEXT when none, its sticky error when ``work``."""
        ctx = getattr(self._tls, "ctx", None)
        if ctx is None:
            raise CudaError(INVALID_CONTEXT, call, "(no context is current on this thread)")
        if ctx.destroyed:  # cuda.h (cuCtxDestroy): current elsewhere, it is CONTEXT_IS_DESTROYED
            raise CudaError(CONTEXT_IS_DESTROYED, call, "(the current context was destroyed)")
        if ctx.primary and ctx.refs <= 0:  # cuda.h: "a primary context which has not yet been initialized"
            raise CudaError(CONTEXT_IS_DESTROYED, call, f"(the current context is device {ctx.device}'s "
                                                        "primary context, which no one retains: its last "
                                                        "retain was released, or it was never retained)")
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
        created = self._created.get(handle)
        if created is not None:
            return created
        raise CudaError(INVALID_CONTEXT, call, f"0x{handle:x} is not a context (destroyed?)")

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

    def _sync_for_free(self, call: str, ctx: SimContext | None, lo: int, hi: int) -> None:
        """The implicit synchronisation of a free of ``[lo, hi)`` owned by ``ctx``.

        Runs the queued work of ``ctx`` and any queued work (of any context)
        that accesses those bytes, as a GPU would before the memory goes.
        Faults of work in ``ctx`` are this call's (raised, sticky ones
        poison); a fault of another context's work stays with that context,
        as on CUDA: a sticky one poisons it (its next call reports it), any
        other is queued again on its stream for that stream's next sync.
        """
        sched = self.sched
        targets = [] if ctx is None else sched.queued(ctx)
        if hi > lo:
            targets += sched.pending_touching(lo, hi)
        # Inside cuStreamAddCallback (a collection freeing memory there) the
        # host function being queued is not waited for: see _hostfn.adding.
        wait = not _hostfn.adding()
        for t in targets:
            while not t.done:
                try:
                    sched.complete(t, wait=wait)
                except _Blocked:
                    break
                except (DeviceFault, CudaError) as e:
                    op = sched.failed_op
                    if op is None or op.stream.ctx is ctx:
                        self._poison_if_sticky(e.code, e.detail)
                        if isinstance(e, DeviceFault):
                            raise CudaError(e.code, call, e.detail) from None
                        raise
                    if not self._poison_if_sticky(e.code, e.detail):
                        def refault(e: BaseException = e) -> None:
                            raise e

                        sched.enqueue(op.stream, refault, f"fault of {op.desc}")
            if t.done:
                sched.host_observes(t.vc)

    def _poison_if_sticky(self, code: int, detail: str) -> bool:
        op = self.sched.failed_op
        if code not in _sticky.STICKY_CODES or op is None:
            return False
        _sticky.poison(self.sched, op.stream.ctx, code, detail)
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
        """A device (or page-locked) range, checked now; returns its allocation.

        A range outside any live allocation is the call's argument error,
        ``CUDA_ERROR_INVALID_VALUE``: the code cuda.h documents for copies and
        memsets (never the sticky ``CUDA_ERROR_ILLEGAL_ADDRESS`` of device
        work, which would make the context unusable on a GPU).
        """
        try:
            a, _ = self.memory.resolve(address, nbytes, f"{call} {role}", reserved=True)
        except DeviceFault as f:
            raise CudaError(INVALID_VALUE, call, f.detail) from None
        return a

    def _check_host(self, address: int, call: str, role: str) -> None:
        if address == 0 or self.memory.is_device_address(address):
            raise CudaError(INVALID_VALUE, call, f"{role} 0x{address:x} is not host memory")

    def _mem_rw(self, address: int, nbytes: int):
        a, off = self.memory.resolve(address, nbytes, "copy")
        return a, off

    def _complete(self, op: Op, call: str, own: bool = False) -> None:
        # own: ``op`` is this call's (see Scheduler.complete)
        self._sync(call, lambda: self.sched.complete(op, own=own))
        self.sched.host_observes(op.vc)

    def _query(self, op: Op, call: str) -> bool:
        """``cuStreamQuery``/``cuEventQuery`` of work ending with ``op``: whether it is done.

        Runs the device work ``op`` needs, as the GPU may have by now; a host
        function on the way that has not returned makes it NOT_READY (False),
        as on CUDA: a query never waits, so polling while a callback waits
        for the polling thread cannot deadlock.
        """
        try:
            self._sync(call, lambda: self.sched.complete(op, wait=False))
        except _Blocked:
            return False
        self.sched.host_observes(op.vc)
        return True
