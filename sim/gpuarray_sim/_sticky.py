"""Sticky errors of simulated contexts, and the primary-context reset that clears them.

CUDA documents a class of device faults -- illegal address, misaligned
address, launch failure, illegal instruction, invalid PC, invalid address
space, hardware stack error, device-side assert -- as leaving the context
"in an inconsistent state": the faulting context is unusable and any further
work in it returns the same error.  The simulator models that:

- a fault of queued work (found when the work runs, at a synchronising call
  or while the queue drains) poisons the context of the stream it ran on;
  the work still queued in that context is discarded, as a GPU abandons it;
- every later call that works in that context (through the current context,
  or a stream, event, module or allocation of it) raises a ``CudaError``
  with the same code, naming the call and the original fault;
- device queries, ``cuCtxGetCurrent``/``cuCtxSetCurrent`` and the primary
  context calls keep working; ``cuDevicePrimaryCtxReset`` (or releasing the
  last reference, which CUDA documents as a reset) destroys every
  allocation, stream, event and module of the context and makes it usable
  again.  CUDA's own advice for the runtime API is to restart the process.

Errors a call refuses at once (a copy's range checked when it is queued, an
injected fault) are not faults of device work and are not sticky, as on
CUDA, where argument checks fail without touching the context.
"""

from __future__ import annotations

from typing import Any, Protocol

from gpuarray.errors import CudaError

from ._memory import AddressSpace
from ._sched import Scheduler, SimContext


class _Resources(Protocol):
    """What a reset destroys: the simulator's memory, scheduler and handle tables."""

    memory: AddressSpace
    sched: Scheduler
    _streams: dict[int, Any]
    _events: dict[int, Any]
    _modules: dict[int, tuple[SimContext, bytes]]
    _functions: dict[int, tuple[SimContext, str, Any, int]]  # ctx, name, impl, module
    _globals: dict[tuple[int, str], tuple[int, int]]
    _captures: dict[int, Any]


#: CUresult codes CUDA documents as sticky (the context cannot be used after them).
STICKY_CODES = frozenset({
    700,  # CUDA_ERROR_ILLEGAL_ADDRESS
    710,  # CUDA_ERROR_ASSERT
    714,  # CUDA_ERROR_HARDWARE_STACK_ERROR
    715,  # CUDA_ERROR_ILLEGAL_INSTRUCTION
    716,  # CUDA_ERROR_MISALIGNED_ADDRESS
    717,  # CUDA_ERROR_INVALID_ADDRESS_SPACE
    718,  # CUDA_ERROR_INVALID_PC
    719,  # CUDA_ERROR_LAUNCH_FAILED
    702,  # CUDA_ERROR_LAUNCH_TIMEOUT (a PTX kernel's spin-wait past the limit)
})


def poison(sched: Scheduler, ctx: SimContext, code: int, detail: str) -> None:
    """Make ``ctx`` unusable after a sticky fault; drop its queued work."""
    if ctx.sticky is None:
        ctx.sticky = (code, detail)
    sched.discard(ctx)


def check(ctx: SimContext | None, call: str) -> None:
    """Raise the sticky error of ``ctx`` for ``call`` (nothing when it is healthy)."""
    if ctx is not None and ctx.sticky is not None:
        code, detail = ctx.sticky
        raise CudaError(code, call, f"(sticky: the context of device {ctx.device} is unusable "
                                    f"since an earlier fault: {detail}; restart the process, "
                                    "or reset the primary context: cuDevicePrimaryCtxReset)")


def reset(backend: _Resources, ctx: SimContext, call: str = "cuDevicePrimaryCtxReset") -> None:
    """``cuDevicePrimaryCtxReset``: destroy every resource of ``ctx`` and clear its error.

    Only ``ctx``'s: the memory allocated in it, never another context's on
    the same device (``cuCtxDestroy`` of a created context, which ``call``
    names, destroys that context's resources the same way).
    """
    sched = backend.sched
    sched.discard(ctx)
    for a in list(backend.memory._allocs):
        if a.alive and a.store is not None and a.owner is ctx and a.kind in ("device", "pool"):
            backend.memory.free_device(a.base, call)
    for h, s in list(backend._streams.items()):
        if s.ctx is ctx:
            del backend._streams[h]
            s.destroyed = True
    for h, ev in list(backend._events.items()):
        if ev.ctx is ctx:
            del backend._events[h]
    for h, (mctx, _image) in list(backend._modules.items()):
        if mctx is ctx:
            del backend._modules[h]
    for key in [k for k in backend._globals if k[0] not in backend._modules]:
        del backend._globals[key]  # their memory went with the context's allocations
    for h, (fctx, *_rest) in list(backend._functions.items()):
        if fctx is ctx:
            del backend._functions[h]
    for s in sched.streams_by_ctx.get(id(ctx), ()):
        s.destroyed = True
        sched.host_observes(s.vc)
    sched.streams_by_ctx[id(ctx)] = []
    for cid, cap in list(backend._captures.items()):  # captures of the context end with it
        if cap.ctx is ctx:
            del backend._captures[cid]
            sched.capturing -= 1
    ctx.per_thread.clear()
    ctx.peers.clear()
    ctx.profiling = False
    ctx.legacy = sched.new_stream(ctx.legacy.handle, ctx, "legacy")
    ctx.sticky = None
