"""CUDA graphs from stream capture: :class:`Graph`, graph memory, and the capture checks.

One concern: the graphs gpuarray's captures make and replay -- a
:class:`Graph` with ``launch``, ``upload`` and ``close`` (the capture methods
of ``Stream`` that make one are in ``_stream_capture.py``) -- and their
memory.  What a capture forbids is refused by the capture checkpoint, where
every driver call passes (``_driver/_checkpoint.py``); the record of captures
in progress is the capture checkpoint's (``_driver/_checkpoint.py``).

Memory allocated on a capturing stream is *graph memory* (``cuMemAllocAsync``
captured as an allocation node): its address is fixed for the graph's life,
it is mapped from the first launch on (so using it before is refused), and
it is freed once both the graph and the array are gone.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, TypeAlias

from . import _capture_foreign
from ._device import Device
from ._driver import checkpoint, get_backend
from ._driver._finalize import run_finalizer
from .errors import CudaError, StreamCaptureError

# ``_stream.py`` imports this module (Stream's capture methods): its classes are
# typed as Any here, and it hands over the helpers a launch needs (_use_stream_helpers).
Stream: TypeAlias = Any
Event: TypeAlias = Any
_helpers: dict[str, Any] = {}


def use_stream_helpers(**helpers: Any) -> None:
    """``_stream.py`` at import: ``as_stream`` and ``order_after`` for :meth:`Graph.launch`."""
    _helpers.update(helpers)

__all__ = ["Graph"]

#: Graph memory not mapped yet (no launch so far): base -> (size, graph memory record).
_unlaunched: dict[int, Any] = {}


class Capture:
    """A capture gpuarray began: its stream, mode, thread and the graph memory it allocated."""

    def __init__(self, stream: Stream, mode: str) -> None:
        self.stream = stream
        self.mode = mode
        self.thread = threading.get_ident()
        self.memory: list[_GraphMemory] = []
        #: What the captured operations read and write (device memory, page-locked host
        #: buffers), by identity: the graph keeps it alive (:func:`keep`).
        self.keep: dict[int, Any] = {}
        self.open = True


class _GraphMemory:
    """One allocation of graph memory; freed when both its graph and its array are gone."""

    foreign = False

    __slots__ = ("ptr", "size", "device", "backend", "capture", "state", "array_alive",
                 "graph_alive", "mapped")

    def __init__(self, ptr: int, size: int, device: Device, backend: Any, capture: Capture) -> None:
        self.ptr, self.size, self.device, self.backend = ptr, size, device, backend
        self.capture = capture
        self.state = "capturing"  # then "graph" (owned by a Graph), "freed"
        self.array_alive = self.graph_alive = True
        self.mapped = False

    @property
    def what(self) -> str:
        return f"an array allocated during the capture on {self.capture.stream!r}"

    def array_gone(self) -> None:
        self.array_alive = False
        if self.state == "capturing" and self.capture.open:
            self.state = "freed"  # a temporary: a free node in the graph
            _unlaunched.pop(self.ptr, None)
            if get_backend() is self.backend:
                try:
                    with self.device.activate():
                        self.backend.mem_free_async(self.ptr, self.capture.stream.handle)
                except CudaError:  # the capture was invalidated: end_capture reports it
                    pass
        elif self.state == "graph" and not self.graph_alive:
            self.free()

    def free(self) -> None:
        if self.state == "freed":
            return
        self.state = "freed"
        _unlaunched.pop(self.ptr, None)
        if self.mapped and get_backend() is self.backend:  # else the address went with the graph
            with self.device.activate():  # the checkpoint defers it while gpuarray captures
                self.backend.mem_free(self.ptr)


def note_foreign_unmapped(base: int, size: int, device: Device) -> None:
    """Imported memory ``[base, base + size)`` is another library's graph memory, not mapped yet."""
    _unlaunched.setdefault(base, (size, _capture_foreign.ForeignUnlaunched(base, device,
                                                                           get_backend())))


def _reset_for_tests() -> None:
    _unlaunched.clear()


def capture_alloc(nbytes: int, device: Device, stream: Any) -> Any:
    """Graph memory for an allocation on a capturing stream, else None (an ordinary allocation)."""
    from .memory._pointer import MemoryPointer  # noqa: PLC0415  (memory sits above streams)

    if getattr(getattr(stream, "device", None), "id", None) != device.id:
        return None  # None or a stream of another device: not a capture of this allocation
    cap = checkpoint().capture_of(stream.handle)
    if cap is None:  # another library's capture, on a stream gpuarray knows as external
        foreign = _capture_foreign.alloc(nbytes, device, stream) if stream.kind == "external" else None
        if foreign is None:
            return None
        _unlaunched[foreign.ptr] = (nbytes, foreign)
        return MemoryPointer(device, foreign.ptr, nbytes, finalizer=lambda: _foreign_gone(foreign))
    b = get_backend()
    with device.activate():
        ptr = b.mem_alloc_async(nbytes, stream.handle)
    rec = _GraphMemory(ptr, nbytes, device, b, cap)
    cap.memory.append(rec)
    _unlaunched[ptr] = (nbytes, rec)
    return MemoryPointer(device, ptr, nbytes, finalizer=rec.array_gone)


#: What a buffer that is not a gpuarray array exports (a scalar exports none).
_BUFFER_PROTOCOLS = ("__array_interface__", "__cuda_array_interface__", "__dlpack__")


def keep(s: Stream, *objs: Any) -> None:
    """An operation on ``s`` uses ``objs`` (arrays, host buffers): a capture on ``s`` keeps them.

    The graph then holds the memory its nodes read and write -- static inputs,
    page-locked buffers -- until it is closed or collected, so a replay never
    touches memory Python freed.  The capture's own allocations are left out:
    graph memory has its own lifetime (:class:`_GraphMemory`).
    """
    cap = checkpoint().capture_of(s.handle)
    if cap is None:
        return
    for obj in objs:
        mem = getattr(obj, "_mem", None)
        if mem is None:
            if any(hasattr(obj, a) for a in _BUFFER_PROTOCOLS):
                cap.keep[id(obj)] = obj  # a host buffer or a foreign array: it owns the memory
        elif id(mem) not in cap.keep and not any(m.ptr == mem.device_pointer for m in cap.memory):
            cap.keep[id(mem)] = mem


def _foreign_gone(rec: Any) -> None:
    _unlaunched.pop(rec.ptr, None)  # its address may be handed out again
    rec.release()


def check_graph_memory(stream: Stream, op: str, *ptrs: int) -> bool:
    """Work on ``stream`` using graph memory no launch has mapped yet -- of gpuarray's graphs
    or another library's -- is refused before the driver sees it (the memory holds nothing,
    and touching it faults: CUDA_ERROR_ILLEGAL_ADDRESS, the context lost).  Work a capture
    records (``stream`` captures) runs after the allocation: allowed, and True is returned
    (what it makes of the memory must not outlive the capture: an export is not cached)."""
    found = False
    for p in ptrs:
        for base, (size, rec) in list(_unlaunched.items()):
            if base <= p < base + size and rec.backend is get_backend():
                if rec.foreign and rec.mapped_now():  # its graph was launched since
                    _unlaunched.pop(base, None)
                elif checkpoint().is_capturing(stream.handle):
                    found = True
                else:
                    raise StreamCaptureError(
                        f"{op} uses {rec.what} before its graph was launched: the memory "
                        "belongs to the graph and holds data only from the graph's first launch "
                        "on, and using it now would fault (CUDA_ERROR_ILLEGAL_ADDRESS, the "
                        "context lost); launch the graph first")
    return found


class Graph:
    """An executable CUDA graph made by :meth:`Stream.end_capture <gpuarray.Stream.end_capture>`.

    Launching it replays the captured work on a stream.  Arrays allocated
    during the capture are the graph's *static outputs*: their address stays
    the same at every launch and they hold the results of the latest one.
    Static inputs are arrays made before the capture: write new data into
    them (``copy_to_device``) and launch again.  The graph keeps alive what
    its captured operations read and write (static inputs, the arrays it
    writes, page-locked buffers it re-reads) as long as it exists, so a
    replay never reads memory Python freed.  :meth:`close`, or the graph's
    collection, releases them and the graph's memory (once the arrays that
    use it are gone).

    Examples
    --------
    >>> s = gpuarray.stream(non_blocking=True)
    >>> x = gpuarray.to_device(np.arange(6, dtype=np.int32).reshape(2, 3), stream=s)
    >>> s.begin_capture()
    >>> y = x.astype(np.float64).T.copy()          # recorded, not run
    >>> g = s.end_capture()
    >>> g.launch(); s.synchronize()
    >>> y.copy_to_host()
    array([[0., 3.],
           [1., 4.],
           [2., 5.]])
    """

    stream: Stream
    device: Device
    _handles: tuple[int, int]
    _memory: list[_GraphMemory]
    _finalizer: weakref.finalize

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Graph objects are made by Stream.end_capture()")

    @classmethod
    def _make(cls, stream: Stream, graph: int, graph_exec: int, cap: Capture) -> Graph:
        self = object.__new__(cls)
        self.stream = stream
        self.device = stream.device
        self._handles = (graph, graph_exec)
        self._memory = memory = cap.memory
        for m in memory:
            if m.state == "capturing":
                m.state = "graph"
        self._finalizer = weakref.finalize(self, run_finalizer, _close, stream.device,
                                           get_backend(), graph, graph_exec, memory, cap.keep)
        self._finalizer.atexit = False
        return self

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (or the graph was collected)."""
        return not self._finalizer.alive

    def _stream_for(self, stream: Any, op: str) -> Stream:
        if self.closed:
            raise ValueError(f"Graph.{op}: the graph is closed")
        if stream is None:
            return self.stream
        return _helpers["as_stream"](stream, self.device)

    def launch(self, stream: Any = None) -> None:
        """Replay the captured work on ``stream`` (default: the stream it was captured on).

        On another stream, that stream first waits for the capture stream's
        queued work and the capture stream then waits for the launch, so
        arrays of the capture stream stay ordered (no host blocking).

        Parameters
        ----------
        stream : Stream, optional

        Raises
        ------
        ValueError
            If the graph is closed, or ``stream`` is omitted and the stream
            it was captured on was closed (the graph does not need that
            stream: launch it on another one, which waits for the closed
            stream's last work).
        StreamCaptureError
            Into a capturing stream (gpuarray's graphs hold memory nodes,
            which CUDA does not nest into another graph).
        """
        s = self._stream_for(stream, "launch")
        home, order_after = self.stream, _helpers["order_after"]
        order_after(s, home)
        with s.device.activate():
            get_backend().graph_launch(self._handles[1], s.handle)
        if not home.closed:
            order_after(home, s)
        if _unlaunched:
            for m in self._memory:
                _unlaunched.pop(m.ptr, None)
        for m in self._memory:
            m.mapped = True

    def upload(self, stream: Any = None) -> None:
        """Prepare the graph's launch ahead of time (``cuGraphUpload``; stream work).

        Parameters
        ----------
        stream : Stream, optional
            Default: the stream it was captured on.

        Raises
        ------
        ValueError
            If the graph is closed.
        """
        s = self._stream_for(stream, "upload")
        with s.device.activate():
            get_backend().graph_upload(self._handles[1], s.handle)

    def close(self) -> None:
        """Destroy the graph now and release what it kept alive.

        Its memory goes once the arrays that use it are gone; the inputs it
        kept go when nothing else uses them.

        A launch in flight still completes.  Closing twice does nothing.
        """
        self._finalizer()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"captured on {self.stream!r}"
        return f"<gpuarray.Graph {state}>"


def _close(device: Device, backend: Any, graph: int, graph_exec: int, memory: list,
           kept: dict) -> None:
    try:
        if get_backend() is backend:
            with device.activate():
                backend.graph_exec_destroy(graph_exec)
                backend.graph_destroy(graph)
        for m in memory:
            m.graph_alive = False
            if m.state == "graph" and not m.array_alive:
                m.free()
    finally:
        kept.clear()  # the inputs' memory may go now (its free waits for launches in flight)
