"""Captures gpuarray did not begin: another library's, on streams gpuarray knows as external.

One concern: keeping another library's capture valid when gpuarray works on
its stream.  PyTorch (``torch.cuda.graph``), CuPy (``Stream.begin_capture``)
and cuda.core (``GraphBuilder``) capture on streams that gpuarray sees only
as *external* streams (:func:`gpuarray.external_stream`, CAI and DLPack
imports, ``stream=`` objects).  gpuarray's record of captures
(the capture checkpoint's) does not know those captures, so for external streams --
and only for them: gpuarray's own streams pay nothing -- it asks the driver
(``cuStreamGetCaptureInfo``, a query that never invalidates a capture):

- **Host waits are refused before the driver call** by the capture
  checkpoint (``_driver/_checkpoint.py``), which asks the driver about the
  external streams this module's callers registered.
- **Allocations are graph memory** (:func:`alloc`), as in gpuarray's own
  captures: ``cuMemAllocAsync`` on the capturing stream, captured as an
  allocation node.  CUDA's rule decides it: a ``cuMemAlloc`` "is not
  enqueued asynchronously to a stream, and is not observed by stream
  capture", so a graph that depends on it -- a temporary freed during the
  capture, whose address the graph's nodes still use at every launch -- "would
  be invalid" (``cuThreadExchangeStreamCaptureMode``).  A stream-ordered
  allocation is replayed by each launch, and a free during the capture is a
  free node.  So an array freed during the capture is freed by the graph
  (``cuMemFreeAsync`` on the capturing stream); one that outlives the capture
  is a *static output* owned by the other library's graph: it holds data
  after a launch, and the graph's restrictions for memory nodes apply (one
  executable graph at a time; a relaunch needs
  ``CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`` -- PyTorch sets it,
  cuda.core's ``GraphCompleteOptions(auto_free_on_launch=True)`` -- or a free
  in between).  Until that graph's first launch nothing backs it: any use
  outside a capture is refused (``_graph.check_graph_memory``, before the
  driver sees it).  When such an array goes after the capture, gpuarray frees the
  allocation a launch left (``cuMemFree``, relaxed mode); if the driver says no
  launch mapped one, the address goes with the graph.
"""

from __future__ import annotations

import threading
from typing import Any

from ._driver import get_backend
from .errors import CudaError

#: Live ``allocation_stream`` blocks on external streams (all threads): while
#: there are none, an allocation without ``stream=`` asks nothing.
_external_blocks = 0
_blocks_lock = threading.Lock()


def enter_external_block() -> None:
    global _external_blocks
    with _blocks_lock:
        _external_blocks += 1


def exit_external_block() -> None:
    global _external_blocks
    with _blocks_lock:
        _external_blocks -= 1


def maybe_external(stream: Any) -> bool:
    """Whether an allocation on ``stream`` (None: the published one) may need asking about."""
    return _external_blocks > 0 if stream is None else getattr(stream, "kind", None) == "external"


def capture_info(s: Any) -> tuple[str, int]:
    """``(status, capture id)`` of external stream ``s`` ("none" for any other stream)."""
    if s.kind != "external":
        return "none", 0
    with s.device.activate():
        return get_backend().stream_capture_info(s.handle)


def capturing(s: Any) -> bool:
    """Whether ``s`` is an external stream that another library is capturing now."""
    return capture_info(s)[0] != "none"


class ForeignUnlaunched:
    """Memory of another library's graph that no launch mapped when gpuarray met it: imported
    (``interop/_cai.py``), or allocated by gpuarray in its capture on ``stream``
    (:class:`ForeignGraphMemory`).  ``_graph.check_graph_memory`` asks the driver again
    (``PointerInfo.mapped``) before each use until a launch has mapped it."""

    __slots__ = ("ptr", "device", "backend", "stream")
    foreign = True

    def __init__(self, ptr: int, device: Any, backend: Any, stream: Any = None) -> None:
        self.ptr, self.device, self.backend = ptr, device, backend
        self.stream = stream  # the stream object keeps its owner alive

    @property
    def what(self) -> str:
        if self.stream is None:
            return "memory of another library's graph"
        return f"an array allocated while another library captured on {self.stream!r}"

    def mapped_now(self) -> bool:
        with self.device.activate():
            return bool(self.backend.pointer_info(self.ptr).mapped)


class ForeignGraphMemory(ForeignUnlaunched):
    """Graph memory allocated on another library's capturing stream (see the module docstring)."""

    __slots__ = ("capture_id",)

    def __init__(self, ptr: int, device: Any, backend: Any, stream: Any, capture_id: int) -> None:
        super().__init__(ptr, device, backend, stream)
        self.capture_id = capture_id

    def release(self) -> None:
        b = self.backend
        if get_backend() is not b:
            return  # the backend was replaced (tests): its memory went with it
        with self.device.activate():
            try:
                in_capture = b.stream_capture_info(self.stream.handle) == ("active", self.capture_id)
            except CudaError:  # the stream is gone: so is its capture
                in_capture = False
            if in_capture:
                try:
                    b.mem_free_async(self.ptr, self.stream.handle)  # a free node of the graph
                except CudaError:  # invalidated meanwhile: the other library's end reports it
                    pass
                return
            info = b.pointer_info(self.ptr)
            if info.memory_type and info.mapped:  # a launch left it: else it went with the graph
                b.mem_free(self.ptr)  # relaxed, or deferred while gpuarray captures (checkpoint)


def alloc(nbytes: int, device: Any, stream: Any) -> ForeignGraphMemory | None:
    """Graph memory when ``stream`` is an external stream another library captures, else None."""
    status, cid = capture_info(stream)
    if status != "active":
        return None  # not capturing (an invalidated capture fails the work itself)
    b = get_backend()
    with device.activate():
        ptr = b.mem_alloc_async(nbytes, stream.handle)
    return ForeignGraphMemory(ptr, device, b, stream, cid)
