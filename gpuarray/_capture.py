"""Which streams gpuarray is capturing: the graphs' record, and the frees held meanwhile.

One concern: the process-wide record of the captures gpuarray began
(:meth:`gpuarray.Stream.begin_capture`) with what each captured (graph
memory, what the graph keeps alive).  The capture rules themselves are
applied where every driver call passes, the capture checkpoint
(``_driver/_checkpoint.py``); the two that keep gpuarray from invalidating a
capture -- its own or another library's -- are:

- **Relaxed mode around potentially unsafe calls**.  CUDA
  refuses ``cuMemAlloc``, ``cuMemFree``, page-locked allocation and
  registration, pool attributes and module loads on a thread in the default
  *global* capture mode while *any* thread captures in global mode (PyTorch's
  default), and the refusal invalidates that capture.  The driver's own
  control for this is ``cuThreadExchangeStreamCaptureMode``: a thread in
  *relaxed* mode "is not prohibited from potentially unsafe API calls".  So
  the checkpoint makes these calls in relaxed mode and restores the thread's
  mode after (the pattern CCCL's relaxed capture scope and PyTorch's
  allocator use); whatever other thread captures, they never touch its
  capture.
- **Frees held while gpuarray captures** (:func:`holding`).  A free
  (``cuMemFree``) synchronises the device; while a capture of gpuarray's is in
  progress the deferred-free queues and the stream-ordered pool hold their
  frees, and the end of the last capture releases them (:func:`on_idle`).
  Memory a capture allocates on its capturing stream is graph memory
  (``cuMemAllocAsync`` captured as an allocation node, ``_graph.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

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
