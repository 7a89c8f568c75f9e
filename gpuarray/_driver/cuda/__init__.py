"""The real driver backend: :class:`Backend` implemented with ``cuda.bindings.driver``.

This package's one concern is translating the driver interface of
:mod:`gpuarray._driver._base` into CUDA driver API calls and their result
codes into gpuarray exceptions.  It is split as the simulator is, one module
per concern, each a mixin of :class:`CudaBackend`: ``_device`` (devices,
contexts, profiler), ``_memory`` (device/pinned/managed/IPC memory, copies and
sets), ``_streams`` (streams, events, host callbacks), ``_modules`` (modules
and launches), ``_graphs`` (stream capture and graphs); ``_state`` holds what :func:`_bind` caches from the driver
module and the result check :func:`_check`.

Conventions
-----------
- **Nothing is loaded at import.**  ``cuda.bindings.driver`` is imported by
  :meth:`CudaBackend.init` (which then calls ``cuInit``), so importing this
  module on a machine without a driver, or without cuda-python, succeeds.
- **Lazy initialisation.**  Every public method starts with
  ``if not self._ready: self.init()`` (one attribute test once initialised), so
  a method called before the device layer initialised CUDA raises
  :class:`~gpuarray.errors.CudaUnavailableError` rather than an obscure
  ``AttributeError``.
- **One result check.**  Every driver call's result tuple goes through
  :func:`_check`, which returns the outputs or raises
  :class:`~gpuarray.errors.CudaError` (``CudaOutOfMemoryError`` for
  ``CUDA_ERROR_OUT_OF_MEMORY``) named after the enum member and the call.
- **Handles are ints** in and out.  cuda.bindings accepts a plain ``int``
  wherever it takes a ``CUstream``/``CUevent``/``CUdeviceptr``/... (it builds
  the wrapper itself), so ints are passed straight through; results are
  converted with ``int(...)``.  Stream ``0`` is mapped to ``1``
  (``CU_STREAM_LEGACY``) explicitly, because the bindings may be switched to
  per-thread default-stream semantics (``CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM``),
  in which case a NULL stream would mean the per-thread stream.
- **cuda-bindings 12.8+ and 13.x** are both supported; the differences that
  matter here are resolved once, in :func:`_bind` (see its docstring).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ...errors import CudaForkError, CudaUnavailableError
from . import _state as S
from ._device import DeviceCalls
from ._graphs import GraphCalls
from ._memory import MemoryCalls
from ._modules import ModuleCalls
from ._state import _UNAVAILABLE_CODES, _bind, _check, _error, _load_driver
from ._streams import StreamCalls, _host_fns  # noqa: F401  (tests read it)

__all__ = ["CudaBackend"]


class CudaBackend(DeviceCalls, MemoryCalls, StreamCalls, ModuleCalls, GraphCalls):
    """The driver interface on a real GPU, through ``cuda.bindings.driver``.

    Construction is free: no import of cuda.bindings, no ``cuInit``.  The
    first method call (or :meth:`init`) initialises the driver; a missing
    driver library, a missing device or an unusable driver raise
    :class:`~gpuarray.errors.CudaUnavailableError`, whose message points to
    ``GPUARRAY_BACKEND=sim``.  A failed initialisation is remembered and
    re-raised by later calls without retrying.

    Examples
    --------
    >>> b = CudaBackend()          # never touches the driver
    >>> b.name
    'cuda'
    """

    name = "cuda"

    @property
    def kernel_images(self) -> str:
        """``"cubin"``; ``"ptx"`` over the stand-in driver in its PTX mode.

        ``python -m gpuarray_sim standin`` marks its commands with
        ``GPUARRAY_STANDIN``; with ``GPUARRAY_SIM_KERNELS=ptx`` the simulator
        behind that ``libcuda.so.1`` executes the PTX of an image.
        """
        if (os.environ.get("GPUARRAY_STANDIN", "").strip()
                and os.environ.get("GPUARRAY_SIM_KERNELS", "").strip().lower() == "ptx"):
            return "ptx"
        return "cubin"

    def __init__(self) -> None:
        self._ready = False
        self._lock = threading.Lock()
        self._failure: tuple[str, BaseException] | None = None
        self._devices: dict[int, Any] = {}

    # ---------------------------------------------------------------- init
    def init(self) -> None:
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            if self._failure is None:
                self._failure = self._try_init()
            if self._failure is not None:
                reason, cause = self._failure
                raise CudaUnavailableError(reason) from cause
            self._ready = True

    def _try_init(self) -> tuple[str, BaseException] | None:
        """Import the bindings and call ``cuInit``; ``(reason, cause)`` on failure."""
        try:
            drv = _load_driver()
        except ImportError as e:
            return ("cuda-bindings is not installed (importing cuda.bindings.driver failed: "
                    f'{e}); pip install "gpuarray[cu13]" (or "gpuarray[cu12]")', e)
        try:
            res = drv.cuInit(0)
        except (RuntimeError, OSError) as e:
            # cuda.pathfinder's DynamicLibNotFoundError (a RuntimeError) in
            # 12.9+/13.x; RuntimeError("Failed to dlopen libcuda.so.1") in 12.8.
            return (
                "the NVIDIA driver library (libcuda) could not be loaded "
                f"[{type(e).__name__}: {e}]",
                e,
            )
        code = int(res[0])
        if code in _UNAVAILABLE_CODES:
            err = _error(code, "cuInit")
            if isinstance(err, CudaForkError):  # the parent used CUDA (_fork.py): not a missing GPU
                raise err
            version = ""
            try:  # works without cuInit: tells which driver was found
                vres = drv.cuDriverGetVersion()
                if not vres[0]:
                    v = int(vres[1])
                    version = f"; the driver supports CUDA {v // 1000}.{v % 1000 // 10}"
            except (RuntimeError, OSError):
                pass
            return (f"{_UNAVAILABLE_CODES[code]} [{err}]{version}", err)
        if code:
            raise _error(code, "cuInit")
        _bind(drv)
        return None

    def driver_version(self) -> int:
        if not self._ready:
            self.init()
        return int(_check(S._d.cuDriverGetVersion(), "cuDriverGetVersion"))

