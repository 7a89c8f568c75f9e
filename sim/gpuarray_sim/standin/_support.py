"""What the stand-in driver's call handlers share: the simulator behind them and argument helpers.

One concern: the state of the stand-in's serving side -- the one
:class:`~gpuarray_sim.SimBackend` of the process, built from the
``GPUARRAY_SIM_*`` environment as the ``sim`` backend is -- and the helpers
that read the C side's arguments (unsigned 64-bit integers; ``int``
arguments sign-extended) and write outputs through their pointers with the
sizes of ``cuda.h``.  The handlers are in the ``_*_calls.py``
modules (one per concern), the entry point in ``_serve.py``.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

from gpuarray.errors import CudaError

from .. import SimBackend

__all__ = ["backend", "STANDIN_DEVICE_MARK"]

#: Part of every device name the stand-in reports: how a test tells it from a GPU.
STANDIN_DEVICE_MARK = "gpuarray simulated device"

_INVALID_VALUE = 1

_lock = threading.Lock()
_sim: SimBackend | None = None
#: Whether ``cuInit`` succeeded in this process: until then every call but
#: those of :data:`BEFORE_INIT` answers ``CUDA_ERROR_NOT_INITIALIZED``.
initialized = False
#: The calls a driver answers before ``cuInit``: cuInit itself, and those
#: whose cuda.h documentation lists neither a context, a device nor
#: ``CUDA_ERROR_NOT_INITIALIZED`` -- the version and the error strings
#: (``cuGetProcAddress`` and ``cuGetExportTable`` are answered in C).
BEFORE_INIT = frozenset({"cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString"})


def backend() -> SimBackend:
    """The simulator serving this process's driver calls (created on first use)."""
    global _sim
    s = _sim
    if s is None:
        with _lock:
            if _sim is None:
                _sim = SimBackend.from_environment()
            s = _sim
    return s


# ------------------------------------------------------------------ helpers
def _signed(v: int) -> int:
    """An ``int`` argument (sign-extended to 64 bits by the C side)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _out(call: str, ptr: int, ctype: Any, value: Any) -> None:
    if not ptr:
        raise CudaError(_INVALID_VALUE, call, "(NULL output pointer)")
    ctype.from_address(ptr).value = value


def _output_first(fn: Callable[..., None]) -> Callable[..., None]:
    """Refuse a NULL first (output) argument before doing anything, as the driver does.

    Without this a call that creates something (an allocation, a stream...)
    would create it and then fail to hand it back: a leak.
    """
    def checked(p: int, *args: Any, **kwargs: Any) -> None:
        if not p:
            raise CudaError(_INVALID_VALUE, fn.__name__.removesuffix("_v2"), "(NULL output pointer)")
        fn(p, *args, **kwargs)

    checked.__name__ = fn.__name__
    return checked


def _device(call: str, ordinal: int) -> int:
    """A device ordinal argument, checked (``CUDA_ERROR_INVALID_DEVICE`` when out of range)."""
    d = _signed(ordinal)
    n = backend().device_count()
    if not 0 <= d < n:
        raise CudaError(101, call, f"device {d} (the simulator has {n})")
    return d


def _stream(s: int, ptsz: bool) -> int:
    return 2 if ptsz and s == 0 else s  # NULL is the per-thread stream in _ptsz forms


def _with_ctx(ctx: int, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` with context ``ctx`` current (0: the current one), as the CUDA 13 forms do."""
    b = backend()
    if not ctx:
        return fn()
    # The top of this thread's stack is put back as it was, not set again by
    # handle: a context destroyed by another thread stays current here (its
    # handle no longer names a context, so cuCtxSetCurrent would refuse it).
    prev = getattr(b._tls, "ctx", None)
    b.ctx_set_current(ctx)
    try:
        return fn()
    finally:
        b._tls.ctx = prev


_U32, _I32, _U64, _SIZE = ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_size_t



def _str_out(call: str, ptr: int, text: bytes, keep: dict[bytes, Any]) -> None:
    """Write to ``*ptr`` a ``const char *`` to ``text`` that stays valid (kept in ``keep``)."""
    if not ptr:
        raise CudaError(_INVALID_VALUE, call, "(NULL output pointer)")
    buf = keep.get(text)
    if buf is None:
        buf = keep[text] = ctypes.create_string_buffer(text)
    ctypes.c_void_p.from_address(ptr).value = ctypes.addressof(buf)
