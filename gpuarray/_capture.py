"""Which streams gpuarray is capturing, and how its own calls stay out of every capture's way.

One concern: the process-wide record of the captures gpuarray began
(:meth:`gpuarray.Stream.begin_capture`), the checks the array and memory
layers make against it before any driver call, and the two rules that keep
gpuarray from invalidating a capture -- its own or another library's:

- **Relaxed mode around potentially unsafe calls** (:func:`relaxed`).  CUDA
  refuses ``cuMemAlloc``, ``cuMemFree``, page-locked allocation and
  registration, pool attributes and module loads on a thread in the default
  *global* capture mode while *any* thread captures in global mode (PyTorch's
  default), and the refusal invalidates that capture.  The driver's own
  control for this is ``cuThreadExchangeStreamCaptureMode``: a thread in
  *relaxed* mode "is not prohibited from potentially unsafe API calls".  So
  gpuarray makes these calls in relaxed mode and restores the thread's mode
  after (the pattern CCCL's relaxed capture scope and PyTorch's allocator
  use); whatever other thread captures, they never touch its capture.
- **Frees held while gpuarray captures** (:func:`holding`).  A free
  (``cuMemFree``) synchronises the device; while a capture of gpuarray's is in
  progress the deferred-free queues and the stream-ordered pool hold their
  frees, and the end of the last capture releases them (:func:`on_idle`).
  Memory a capture allocates on its capturing stream is graph memory
  (``cuMemAllocAsync`` captured as an allocation node, ``_graph.py``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ._driver import get_backend
from .errors import StreamCaptureError

#: ``(device id, stream handle)`` -> the capture gpuarray began there (``_graph.Capture``).
_captures: dict[tuple[int, int], Any] = {}
#: Called (no arguments) when the last capture of gpuarray ends: releases held frees.
_idle_hooks: list[Callable[[], None]] = []
_lock = threading.Lock()


def active() -> bool:
    """Whether gpuarray is capturing on any stream now (one dict test: hot paths ask)."""
    return bool(_captures)


def holding() -> bool:
    """Whether frees are held back now (a capture of gpuarray's is in progress)."""
    return bool(_captures)


def capture_of(device_id: int, handle: int) -> Any:
    """The capture gpuarray began on stream ``handle`` of device ``device_id``, or None."""
    return _captures.get((device_id, handle)) if _captures else None


def on_idle(hook: Callable[[], None]) -> None:
    """Run ``hook()`` each time the last capture of gpuarray ends (the memory layer's flush)."""
    _idle_hooks.append(hook)


def add(key: tuple[int, int], capture: Any) -> None:
    with _lock:
        _captures[key] = capture


def remove(key: tuple[int, int]) -> None:
    with _lock:
        _captures.pop(key, None)
        idle = not _captures
    if idle:
        for hook in list(_idle_hooks):
            hook()


@contextlib.contextmanager
def relaxed(backend: Any = None) -> Iterator[None]:
    """Run the block's driver calls in relaxed capture mode (see the module docstring)."""
    b = backend if backend is not None else get_backend()
    prev = b.exchange_capture_mode("relaxed")
    try:
        yield
    finally:
        b.exchange_capture_mode(prev)


def call_relaxed(b: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in relaxed capture mode (a driver call of ``b``)."""
    prev = b.exchange_capture_mode("relaxed")
    try:
        return fn(*args, **kwargs)
    finally:
        b.exchange_capture_mode(prev)


def check_device(device_id: int, op: str) -> None:
    """A device-wide synchronisation while gpuarray captures on that device: refused."""
    for (dev, _), cap in list(_captures.items()):
        if dev == device_id:
            raise StreamCaptureError(
                f"{op} of device {dev} while {cap.stream!r} captures a graph: a device-wide "
                "synchronisation would invalidate the capture (CUDA_ERROR_STREAM_CAPTURE_"
                "UNSUPPORTED). Synchronise a stream that is not capturing, or after end_capture()")
