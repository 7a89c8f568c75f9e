"""Stream-ordered frees held while another library captures on a stream of the memory.

One concern: a free of the stream-ordered managers (``_pool.py``) that would
reach another library's capture.  Such a free is made on the memory's home
stream after ``home`` waited on an event recorded on each other stream that
used the memory.  When one of those streams is an *external* stream that
another library (PyTorch, CuPy, cuda.core) is capturing now, each of these
calls breaks that capture:

- ``cuMemFreeAsync`` on the capturing stream would be a free node of memory
  the graph did not allocate: CUDA refuses it (a graph free node frees graph
  memory only) and invalidates the capture;
- an event recorded on the capturing stream is a captured event: a wait on
  it by a stream outside the capture forks that stream into the capture
  (``CUDA_ERROR_STREAM_CAPTURE_UNJOINED`` at the end; ``..._IMPLICIT`` and an
  invalidated capture for the legacy stream);
- a wait of the capturing stream on an event recorded outside the capture is
  ``CUDA_ERROR_STREAM_CAPTURE_ISOLATION``, again invalidating it.

Memory of these managers is never allocated in another library's capture
(allocations on a capturing external stream are graph memory,
``_capture_foreign.py``), so every such free is of memory the capture does
not own: it is **held** (:func:`hold`) and retried (:func:`retry`) at the
managers' next allocation, free, ``reset()`` and flush, and at interpreter
exit, once ``cuStreamGetCaptureInfo`` says no stream of the memory captures.
It is then made as usual, on the same streams: a capture adds no work to the
stream it captures, so the free is still ordered after every use queued
before the capture, and before what comes after it.  Only external streams
are asked about (gpuarray's own captures hold every free already,
``_driver/_checkpoint.py``): with no external stream on the memory and nothing held, a
free pays one attribute test per stream.

A free still held at interpreter exit (the capture never ended) is reported
with a :class:`RuntimeWarning`; its memory goes with the process.
"""

from __future__ import annotations

import atexit
import threading
import warnings
from typing import Any

from .. import _capture_foreign
from .._driver import get_backend
from .._driver._finalize import remember
from ..errors import CudaError

#: ``(manager, backend, uses, ptr, release)`` of each held free, in the order held.
_held: list[tuple[Any, Any, Any, int, Any]] = []
_lock = threading.Lock()


def blocked(uses: Any) -> bool:
    """Whether a stream of ``uses`` (a ``StreamUses``) is an external stream that captures now."""
    for s in (uses.home, *uses.others):
        if s.kind == "external":
            try:
                if _capture_foreign.capturing(s):
                    return True
            except CudaError:  # a destroyed stream captures nothing (the free handles it)
                pass
    return False


def hold(manager: Any, backend: Any, uses: Any, ptr: int, release: Any,
         recheck: bool = True) -> None:
    """Keep the free of ``ptr`` for :func:`retry` (its allocation stays counted).

    With ``recheck``, the caller found ``uses`` :func:`blocked`; when the
    capture ended since, the free is made at once (else it would wait for the
    next pool operation).  Without it (the free needs the legacy stream,
    which a capture elsewhere makes unusable, not one of ``uses``' streams),
    it waits for the next pool operation: retrying at once would only hold
    it again.
    """
    with _lock:
        _held.append((manager, backend, uses, ptr, release))
    if recheck and not blocked(uses):
        retry()


def retry() -> None:
    """Make the held frees whose streams no longer capture (errors: raised by the next call)."""
    if not _held:
        return
    with _lock:
        items, _held[:] = list(_held), []
    keep = []
    for item in items:
        manager, backend, uses, ptr, release = item
        if get_backend() is not backend:
            manager.allocations.pop(ptr, None)  # the backend was replaced (tests): gone with it
            continue
        if blocked(uses):
            keep.append(item)
            continue
        try:
            manager._release(backend, uses, ptr, release)
        except Exception as e:  # a CUDA error of a free: the next gpuarray call raises it
            remember(e)
    if keep:
        with _lock:
            _held[:0] = keep


@atexit.register
def _at_exit() -> None:
    retry()
    if not _held:
        return
    n, size = len(_held), sum(m.allocations.get(p, 0) for m, _, _, p, _ in _held)
    _held.clear()
    warnings.warn(f"{n} stream-ordered free(s) of {size} bytes were never made: a stream of the "
                  "memory was still being captured by another library at interpreter exit "
                  "(end that capture before exiting); the memory goes with the process",
                  RuntimeWarning, stacklevel=1)
