"""The Python side of the stand-in driver: CUDA driver calls served by the simulator.

One concern: the entry point :func:`serve` that the driver entry points of
``_libcuda.c`` (the stand-in ``libcuda.so.1``) call, and what becomes of
errors.  The calls are served by one :class:`~gpuarray_sim.SimBackend`
per process (``_support.py``), one handler per driver form, in one
module per concern: ``_device_calls.py`` (initialisation, devices, primary
contexts, error strings), ``_context_calls.py`` (the current context and
its stack), ``_memory_calls.py`` (allocations, pointer queries, IPC),
``_pool_calls.py`` (memory pools), ``_managed_calls.py`` (managed-memory
advice, prefetches, range attributes),
``_copy_calls.py`` (copies and memsets), ``_stream_calls.py`` (streams,
events, callbacks), ``_module_calls.py`` (modules, libraries, the linker,
kernels, launches) and ``_graph_calls.py`` (stream capture and graphs; ``_graph_node_calls.py``
graphs built node by node, ``_graph_id_calls.py`` their ids) and ``_coredump_calls.py`` (GPU coredump
settings), ``_resource_calls.py`` (SM resources and their splits).
The C side passes every argument as an unsigned 64-bit integer (pointers
as addresses; signed ``int`` arguments sign-extended) and returns what :func:`serve` returns; outputs are written
through their pointers with ctypes, with the sizes of ``cuda.h``.

Conventions
-----------
- Each handler is named after the driver form it serves (``cuMemAlloc_v2``)
  and gets the call's arguments; ``_ptsz`` forms reuse the plain handler with
  a NULL stream meaning the per-thread default stream.
- :func:`serve` never raises: a :class:`~gpuarray.errors.CudaError` becomes
  its code; :class:`~gpuarray.errors.CudaUnavailableError` (no visible
  device) becomes ``CUDA_ERROR_NO_DEVICE``; anything else (a simulator
  check such as :class:`~gpuarray.errors.StreamOrderError`, or a bug here)
  becomes ``CUDA_ERROR_UNKNOWN`` and its traceback is printed to stderr.
  The exception of the last failed call of each thread is kept
  (:func:`last_error`), so a test can see the simulator's own message.
  An interruption -- an exception a Python signal handler raised on the
  main thread while the simulator served a call there: Ctrl-C's
  ``KeyboardInterrupt``, a test runner's time limit (SIGALRM) -- is
  :data:`INTERRUPTED`: the C side fails the call with
  ``CUDA_ERROR_UNKNOWN`` and schedules :func:`reraise_interruption`
  (``Py_AddPendingCall``), which raises the same exception in the caller at
  its next Python instruction once the call has returned -- where a real
  driver's caller would get it, since no handler runs inside a C driver
  call.  Never lost, never a bare ``CUDA_ERROR_UNKNOWN``.  (The simulator
  holds asynchronous signals back on the main thread while it runs device
  work, ``_signals.py``, but a thread of the program that does not block
  them -- OpenBLAS's, in every NumPy process -- takes the signal then, and
  CPython runs the handler on the main thread all the same.)
- Before ``cuInit`` succeeds every call but the version and the error
  strings (``_support.BEFORE_INIT``) answers ``CUDA_ERROR_NOT_INITIALIZED``.
- The stand-in nvJitLink (``_libnvjitlink.c``) is served here too: its
  ``nvJitLink*`` calls go to ``_nvjitlink_calls.py``, need no ``cuInit``, and
  answer nvJitLink's result codes (its ``NvJitLinkError``'s; anything else
  is ``NVJITLINK_ERROR_INTERNAL``, the traceback printed).
- The C wrapper runs on the caller's thread, so the simulator's per-thread
  current context is the caller's, as with a real driver.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from time import perf_counter as _clock

from gpuarray.errors import CudaError, CudaUnavailableError

from .. import _phases, _sticky
from .._codes import INVALID_IMAGE as _INVALID_IMAGE
from .._codes import NO_DEVICE as _NO_DEVICE
from .._codes import UNKNOWN as _UNKNOWN
from . import (
    _context_calls,
    _copy_calls,
    _coredump_calls,
    _device_calls,
    _graph_calls,
    _graph_id_calls,
    _graph_node_calls,
    _managed_calls,
    _memory_calls,
    _module_calls,
    _nvjitlink_calls,
    _pool_calls,
    _resource_calls,
    _stream_calls,
    _support,
)
from ._support import BEFORE_INIT, STANDIN_DEVICE_MARK, backend

__all__ = ["serve", "backend", "last_error", "reraise_interruption", "STANDIN_DEVICE_MARK",
           "INTERRUPTED"]

_NOT_INITIALIZED = 3
#: What :func:`serve` returns for a call a signal handler's exception interrupted (not a
#: CUresult; ``_libcuda.c`` returns ``CUDA_ERROR_UNKNOWN`` and has the exception raised again
#: in the caller: :func:`reraise_interruption`).
INTERRUPTED = -2
#: The interruption :func:`reraise_interruption` raises next (main thread only).
_interruption: BaseException | None = None

_tls = threading.local()
#: ``GPUARRAY_STANDIN_TRACE=errors``: print the simulator's message of each failed call.
_TRACE_ERRORS = os.environ.get("GPUARRAY_STANDIN_TRACE", "") == "errors"

_MODULES = (_device_calls, _context_calls, _memory_calls, _pool_calls, _managed_calls,
            _copy_calls, _stream_calls, _module_calls, _graph_calls, _graph_node_calls,
            _graph_id_calls, _coredump_calls, _resource_calls)

#: The handler of each driver form, by name (the ``_*_calls.py`` modules).
_HANDLERS: dict[str, Callable[..., None]] = {
    k: v for m in _MODULES for k, v in vars(m).items() if k.startswith("cu") and callable(v)
}
_HANDLERS.update({k: getattr(_nvjitlink_calls, k) for k in _nvjitlink_calls.__all__
                  if k.startswith("nvJitLink")})


def _keep(e: BaseException) -> None:
    """Keep ``e`` for :func:`last_error`, without tracebacks.

    A traceback holds its frames and, through ``f_back``, every caller's
    (the cuda backend and the layers above it): keeping it would keep their locals --
    temporary device arrays -- allocated until this thread's next failure.
    """
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        x.__traceback__ = None
        x = x.__cause__ or x.__context__
    _tls.error = e


_REPORTED: set[str] = set()


def _report_fault(e: CudaError) -> None:
    """Print the simulator's message of a sticky fault or an unlaunchable kernel, once each.

    The caller gets only the code (``CUDA_ERROR_ILLEGAL_ADDRESS``, or
    ``CUDA_ERROR_INVALID_IMAGE`` for a kernel the simulator cannot execute);
    the line names the kernel, the PTX instruction and the thread, as
    compute-sanitizer would on a GPU, or says how to get PTX.
    """
    text = str(e)
    detail = text.split(")", 1)[-1].strip() if ")" in text else text
    if detail in _REPORTED or "(sticky: " in text:  # a later call repeating the fault
        return
    _REPORTED.add(detail)
    print(f"gpuarray stand-in driver: {e.name}: {detail}", file=sys.stderr)


def _interrupted(e: BaseException) -> bool:
    """Whether ``e``, caught on the main thread, was raised by a Python signal handler.

    ``KeyboardInterrupt`` (SIGINT's default handler is C); otherwise one of
    the traceback's frames runs the code of a handler installed now (or of
    :func:`reraise_interruption`, when a pending re-raise fires inside a
    later call that the caller's C code makes before any Python runs).
    """
    if isinstance(e, KeyboardInterrupt):
        return True
    codes = {reraise_interruption.__code__}
    for s in signal.valid_signals():
        try:
            h = signal.getsignal(s)
        except (OSError, ValueError):
            continue
        code = getattr(getattr(h, "__func__", h), "__code__", None)
        if code is not None:
            codes.add(code)
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            return True
        tb = tb.tb_next
    return False


def reraise_interruption() -> None:
    """Raise the interruption of the last call :data:`INTERRUPTED` (none: return).

    ``_libcuda.c`` schedules it with ``Py_AddPendingCall`` when a call
    returns :data:`INTERRUPTED`: CPython runs it on the main thread at the
    caller's next Python instruction, and the exception the signal handler
    raised -- the same object -- propagates from there.
    """
    global _interruption
    e, _interruption = _interruption, None
    if e is not None:
        raise e


def last_error() -> BaseException | None:
    """The exception behind the calling thread's last failed driver call (None if none)."""
    return getattr(_tls, "error", None)


def serve(name: str, args: tuple[int, ...]) -> int:
    """Serve driver call ``name`` with ``args``; return its ``CUresult`` (never raises)."""
    t0 = _clock()
    try:
        return _serve(name, args)
    finally:
        _phases.add("driver", _clock() - t0)


def _serve(name: str, args: tuple[int, ...]) -> int:
    global _interruption
    try:
        ptsz = name.endswith("_ptsz")
        base = name[:-5] if ptsz else name
        nvjitlink = base.startswith("nvJitLink")
        if not _support.initialized and base not in BEFORE_INIT and not nvjitlink:
            # cuda.h (cuInit): "If cuInit() has not been called, any function from the
            # driver API will return CUDA_ERROR_NOT_INITIALIZED".
            _keep(CudaError(_NOT_INITIALIZED, base, "(cuInit has not been called)"))
            return _NOT_INITIALIZED
        handler = _HANDLERS[base]
        if ptsz:
            handler(*args, ptsz=True)
        else:
            handler(*args)
        return 0
    except _nvjitlink_calls.NvJitLinkError as e:
        _keep(e)
        if _TRACE_ERRORS:
            print(f"gpuarray stand-in nvJitLink: {e}", file=sys.stderr)
        return e.code
    except CudaError as e:
        _keep(e)
        if _TRACE_ERRORS:
            print(f"gpuarray stand-in driver: {name}: {e}", file=sys.stderr)
        if e.code in _sticky.STICKY_CODES or e.code == _INVALID_IMAGE:
            _report_fault(e)  # the caller sees only the code: say what the simulator saw
        return e.code
    except CudaUnavailableError as e:
        _keep(e)
        return _NO_DEVICE
    except BaseException as e:  # never lost: printed, kept, and a CUDA error code
        interrupted = threading.current_thread() is threading.main_thread() and _interrupted(e)
        _keep(e)
        if interrupted:
            _interruption = e  # raised again in the caller (see the module)
            return INTERRUPTED
        nvjitlink = name.startswith("nvJitLink")
        print(f"gpuarray stand-in {'nvJitLink' if nvjitlink else 'driver'}: {name} failed "
              f"({'NVJITLINK_ERROR_INTERNAL' if nvjitlink else 'CUDA_ERROR_UNKNOWN'}):",
              file=sys.stderr)
        traceback.print_exception(e, file=sys.stderr)
        return _nvjitlink_calls.INTERNAL if nvjitlink else _UNKNOWN
