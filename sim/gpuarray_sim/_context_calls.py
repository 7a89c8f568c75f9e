"""The simulator's context-stack and created-context calls.

One concern: the calls about which context is current beyond
``cuCtxSetCurrent`` -- the per-thread context stack (``cuCtxPushCurrent``,
``cuCtxPopCurrent``), contexts made with ``cuCtxCreate`` and destroyed with
``cuCtxDestroy``, and the context queries drivers answer from the device
(``cuCtxGetStreamPriorityRange``).  CUDA's rules:

- each thread has a stack of contexts; the current context is its top.
  ``cuCtxSetCurrent`` replaces the top (pushes onto an empty stack), and
  with NULL pops it; ``cuCtxPushCurrent`` pushes; ``cuCtxPopCurrent`` pops
  and returns the popped context (``CUDA_ERROR_INVALID_CONTEXT`` on an
  empty stack);
- ``cuCtxCreate`` makes a new context on a device (its own default stream,
  streams, events and modules; memory is the device's) and pushes it;
- ``cuCtxDestroy`` destroys a created context -- its queued work is waited
  for, its streams, events and modules go -- and pops it if it is current on
  the calling thread.  A thread that still has it current gets
  ``CUDA_ERROR_CONTEXT_IS_DESTROYED`` from every call that works in it, as
  does a thread whose current context is a primary context no one retains
  (``SimCore._current``); passing a destroyed context's handle is
  ``CUDA_ERROR_INVALID_CONTEXT``, and so is destroying a primary context
  (``cuDevicePrimaryCtxRelease`` is its way out);
- flags (``CUctx_flags``): at most one scheduling flag (SPIN, YIELD,
  BLOCKING_SYNC); ``cuCtxCreate``'s and ``cuDevicePrimaryCtxSetFlags``'s are
  kept and ``cuCtxGetFlags`` answers them;
- peer access (``cuCtxEnablePeerAccess``/``cuCtxDisablePeerAccess``) is
  granted per device pair that ``cuDeviceCanAccessPeer`` allows: two
  different devices of the same compute capability major (cuda.h: "same
  major compute capability").
"""

from __future__ import annotations

from gpuarray._driver._base import STREAM_LEGACY
from gpuarray.errors import CudaError

from . import _sticky
from ._codes import INVALID_CONTEXT, PEER_ACCESS_NOT_ENABLED
from ._core import INVALID_VALUE, SimContext, SimCore, _api, _locked

#: ``CU_CTX_SCHED_MASK`` and ``CU_CTX_FLAGS_MASK`` of cuda.h.
SCHED_MASK, FLAGS_MASK = 0x07, 0xFF

#: Stream priorities the simulator accepts: CUDA's range on an H100 (least, greatest).
STREAM_PRIORITY_RANGE = (0, -5)


class SimContextCalls(SimCore):
    """Context-stack, created-context and context-query calls of the simulator."""

    def _below(self) -> list[SimContext]:
        """The calling thread's context stack under its top (the top is ``_tls.ctx``)."""
        below = getattr(self._tls, "below", None)
        if below is None:
            below = self._tls.below = []
        return below

    def _set_top(self, ctx: SimContext | None) -> None:
        """``cuCtxSetCurrent``: replace the top of the stack; None pops it."""
        if ctx is None:
            below = self._below()
            self._tls.ctx = below.pop() if below else None
        else:
            self._tls.ctx = ctx

    @_api
    def ctx_push_current(self, ctx: int) -> None:
        """``cuCtxPushCurrent``: make ``ctx`` current, keeping the previous one below it."""
        c = self._ctx_by_handle(int(ctx), "cuCtxPushCurrent") if ctx else None
        if c is None:
            raise CudaError(INVALID_CONTEXT, "cuCtxPushCurrent", "(NULL context)")
        top = getattr(self._tls, "ctx", None)
        if top is not None:
            self._below().append(top)
        self._tls.ctx = c

    @_api
    def ctx_pop_current(self) -> int:
        """``cuCtxPopCurrent``: pop the current context; return its handle."""
        top = getattr(self._tls, "ctx", None)
        if top is None:
            raise CudaError(INVALID_CONTEXT, "cuCtxPopCurrent", "(no context is current on this thread)")
        self._set_top(None)
        return top.handle

    @_locked
    def ctx_create(self, ordinal: int, flags: int = 0) -> int:
        """``cuCtxCreate``: a new context on device ``ordinal``, pushed on this thread's stack."""
        call = "cuCtxCreate"
        d = self._dev(ordinal, call)
        check_ctx_flags(call, flags)
        ctx = SimContext(self._handle(), d)
        self._ctx_flags[ctx.handle] = int(flags)
        ctx.primary = False
        ctx.legacy = self.sched.new_stream(STREAM_LEGACY, ctx, "legacy")
        self._created[ctx.handle] = ctx
        top = getattr(self._tls, "ctx", None)
        if top is not None:
            self._below().append(top)
        self._tls.ctx = ctx
        return ctx.handle

    @_locked
    def ctx_destroy(self, ctx: int) -> None:
        """``cuCtxDestroy``: destroy a context of ``cuCtxCreate``; pop it if current here."""
        call = "cuCtxDestroy"
        c = self._created.get(int(ctx))
        if c is None:
            what = "a primary context (release it instead)" if any(
                p.handle == ctx for p in self._contexts) else "not a context (destroyed?)"
            raise CudaError(INVALID_CONTEXT, call, f"0x{int(ctx):x} is {what}")
        if c.sticky is None:
            self._sync(call, lambda: self.sched.complete_all(c))
        _sticky.reset(self, c, call)  # its memory, streams, events and modules go
        c.destroyed = True
        del self._created[c.handle]
        if getattr(self._tls, "ctx", None) is c:
            self._set_top(None)
        below = self._below()
        below[:] = [x for x in below if x is not c]

    @_api
    def ctx_stream_priority_range(self) -> tuple[int, int]:
        """``cuCtxGetStreamPriorityRange``: (least, greatest) stream priority."""
        return STREAM_PRIORITY_RANGE

    @_api
    def primary_ctx_refs(self, ordinal: int) -> int:
        """Simulator only: the retain count of device ``ordinal``'s primary context."""
        return self._contexts[self._dev(ordinal, "cuDevicePrimaryCtxGetState")].refs

    @_api
    def ctx_get_flags(self) -> int:
        """``cuCtxGetFlags``: the flags of the current context."""
        return self._ctx_flags.get(self._current("cuCtxGetFlags", work=False).handle, 0)

    @_locked
    def primary_ctx_set_flags(self, ordinal: int, flags: int) -> None:
        """``cuDevicePrimaryCtxSetFlags``: the flags of device ``ordinal``'s primary context."""
        call = "cuDevicePrimaryCtxSetFlags"
        ctx = self._contexts[self._dev(ordinal, call)]
        check_ctx_flags(call, flags)
        self._ctx_flags[ctx.handle] = int(flags)

    @_api
    def primary_ctx_flags(self, ordinal: int) -> int:
        """``cuDevicePrimaryCtxGetState``'s flags: those of device ``ordinal``'s primary context."""
        return self._ctx_flags.get(self._contexts[self._dev(ordinal, "cuDevicePrimaryCtxGetState")].handle, 0)

    @_locked
    def ctx_disable_peer_access(self, peer_ctx: int) -> None:
        """``cuCtxDisablePeerAccess``: end the current context's access to ``peer_ctx``'s memory."""
        call = "cuCtxDisablePeerAccess"
        ctx = self._current(call)
        peer = self._ctx_by_handle(int(peer_ctx), call) if peer_ctx else None
        if peer is None:
            raise CudaError(INVALID_CONTEXT, call, "(NULL peer context)")
        if peer.device not in ctx.peers:
            raise CudaError(PEER_ACCESS_NOT_ENABLED, call, f"device {ctx.device} -> {peer.device}")
        ctx.peers.discard(peer.device)

    @_api
    def primary_ctx_handle(self, ordinal: int) -> int:
        """Simulator only: the handle of device ``ordinal``'s primary context (retained or not)."""
        return self._contexts[self._dev(ordinal, "cuPointerGetAttribute")].handle


def check_ctx_flags(call: str, flags: int) -> None:
    """Context flags as cuda.h allows them: ``CU_CTX_FLAGS_MASK``, one scheduling flag at most."""
    if flags & ~FLAGS_MASK:
        raise CudaError(INVALID_VALUE, call, f"flags {flags:#x} (CU_CTX_FLAGS_MASK is {FLAGS_MASK:#x})")
    sched = flags & SCHED_MASK
    if sched & (sched - 1):
        raise CudaError(INVALID_VALUE, call, f"flags {flags:#x} set more than one of CU_CTX_SCHED_SPIN, "
                                             "CU_CTX_SCHED_YIELD and CU_CTX_SCHED_BLOCKING_SYNC")
