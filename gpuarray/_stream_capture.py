"""The capture methods of :class:`~gpuarray.Stream`: begin, end, ask, and the ``with`` form.

One concern: the user-facing side of stream capture on a stream -- CuPy's
names ``Stream.begin_capture(mode)``, ``Stream.is_capturing()``,
``Stream.end_capture()`` and the block form ``Stream.capture(mode)`` -- over
the capture checkpoint, which holds the one record of gpuarray's captures
(``_driver/_checkpoint.py``), and the graphs and rules of ``_graph.py``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, TypeAlias

from ._device import Device
from ._driver import checkpoint
from ._driver._base import CAPTURE_MODES
from ._driver._finalize import cleanup
from ._graph import Capture, Graph, _unlaunched
from .errors import CudaError, StreamCaptureError

# ``_stream.py`` imports this module (Stream's base class): Stream is typed as Any here.
Stream: TypeAlias = Any

__all__ = ["CaptureBlock", "CaptureMethods"]


class CaptureBlock:
    """What ``with stream.capture() as cap`` gives: the graph, once the block has ended.

    Attributes
    ----------
    stream : Stream
        The capturing stream.
    mode : str
        The capture mode.
    """

    __slots__ = ("stream", "mode", "_graph")

    def __init__(self, stream: Stream, mode: str) -> None:
        self.stream, self.mode = stream, mode
        self._graph: Graph | None = None

    @property
    def graph(self) -> Graph:
        """The :class:`Graph` the block captured (available once the block has ended).

        Raises
        ------
        StreamCaptureError
            Inside the block, or when the block raised (no graph was kept).
        """
        if self._graph is None:
            raise StreamCaptureError(f"no graph: the capture on {self.stream!r} has not ended "
                                     "(cap.graph is there after the with block) or it failed")
        return self._graph

    def __repr__(self) -> str:
        state = "ended" if self._graph is not None else "not ended"
        return f"<gpuarray capture on {self.stream!r}, {self.mode}, {state}>"


class CaptureMethods:
    """The capture methods of :class:`~gpuarray.Stream` (CuPy's names)."""

    __slots__ = ()
    device: Device
    handle: int
    kind: str

    def begin_capture(self, mode: str = "global") -> None:
        """Start capturing the work queued on this stream into a CUDA graph.

        Until :meth:`end_capture`, gpuarray operations on this stream are
        recorded, not run; arrays they allocate are static outputs of the
        graph.  Anything that would make the host wait for the captured work
        raises :class:`~gpuarray.errors.StreamCaptureError` before reaching
        the driver, so the capture stays valid.

        Parameters
        ----------
        mode : {"global", "thread_local", "relaxed"}, default "global"
            CUDA's capture mode: which "potentially unsafe" driver calls
            (``cuMemAlloc``, ``cuMemFree``...) other code may make meanwhile;
            gpuarray's own such calls are safe under every mode.  A
            ``"relaxed"`` capture may be ended on another thread.

        Raises
        ------
        ValueError
            If ``mode`` is not one of the three.
        StreamCaptureError
            On the legacy default stream (CUDA cannot capture it), or when
            this stream is capturing already.

        Examples
        --------
        >>> s = gpuarray.stream(non_blocking=True)
        >>> s.begin_capture()
        >>> s.is_capturing()
        True
        >>> g = s.end_capture()
        """
        if mode not in CAPTURE_MODES:
            raise ValueError(f"capture mode must be one of {', '.join(map(repr, CAPTURE_MODES))}, "
                             f"got {mode!r}")
        s: Any = self
        if s.kind == "legacy":
            raise StreamCaptureError(
                f"begin_capture on {s!r}: CUDA cannot capture the legacy default stream; "
                "capture on a stream of gpuarray.stream(non_blocking=True)")
        b = checkpoint()
        with s.device.activate():
            if b.capture_of(s.handle) is not None:
                raise StreamCaptureError(f"begin_capture on {s!r}: it is capturing already")
            b.stream_begin_capture(s.handle, mode)
            b.attach(s.handle, Capture(s, mode))

    @contextlib.contextmanager
    def capture(self, mode: str = "global") -> Iterator[CaptureBlock]:
        """Capture the block's work on this stream; the graph is ``cap.graph`` after it.

        ``with s.capture() as cap:`` is :meth:`begin_capture` before the
        block and :meth:`end_capture` after it, whose graph becomes
        ``cap.graph``.  When the block raises, the capture is ended and its
        graph closed (the stream is usable again) and the block's exception
        propagates.

        Parameters
        ----------
        mode : {"global", "thread_local", "relaxed"}, default "global"
            As for :meth:`begin_capture`.

        Yields
        ------
        CaptureBlock
            Whose ``graph`` attribute is the :class:`Graph`, once the block
            has ended.

        Raises
        ------
        ValueError, StreamCaptureError
            As :meth:`begin_capture` and :meth:`end_capture` raise them.

        Examples
        --------
        >>> s = gpuarray.stream(non_blocking=True)
        >>> x = gpuarray.to_device(np.arange(3.0), stream=s)
        >>> with s.capture() as cap:
        ...     y = x.astype(np.int32)
        >>> cap.graph.launch(); y.copy_to_host()
        array([0, 1, 2], dtype=int32)
        """
        self.begin_capture(mode)
        block = CaptureBlock(self, mode)
        try:
            yield block
        except BaseException:
            try:
                self.end_capture().close()
            except StreamCaptureError:  # invalidated by the failure: the block's error says why
                pass
            raise
        block._graph = self.end_capture()

    def is_capturing(self) -> bool:
        """Whether this stream is capturing (a capture of gpuarray's or another library's).

        Returns
        -------
        bool

        Examples
        --------
        >>> gpuarray.stream().is_capturing()
        False
        """
        s: Any = self
        if s.kind == "legacy":
            return False
        b = checkpoint()
        with s.device.activate():
            return b.capture_of(s.handle) is not None or b.stream_is_capturing(s.handle) != "none"

    def end_capture(self) -> Graph:
        """End the capture begun by :meth:`begin_capture` and return its executable graph.

        Returns
        -------
        Graph

        Raises
        ------
        StreamCaptureError
            When the stream is not capturing, when a non-``"relaxed"``
            capture is ended on another thread than the one that began it
            (it stays active: end it there), or when CUDA invalidated the
            capture (the message gives the driver's reason; the stream is
            usable again).

        Examples
        --------
        >>> s = gpuarray.stream(non_blocking=True)
        >>> s.begin_capture()
        >>> a = gpuarray.zeros(3, stream=s)
        >>> g = s.end_capture()
        >>> g.launch(); s.synchronize(); a.copy_to_host()
        array([0., 0., 0.])
        """
        s: Any = self
        b = checkpoint()
        with cleanup(), s.device.activate():  # a pending finalizer error waits for the end
            cap = b.capture_of(s.handle)
        if cap is None:
            raise StreamCaptureError(f"end_capture on {s!r}: it is not capturing "
                                     "(begin_capture() was not called on it)")
        if cap.mode != "relaxed" and cap.thread != threading.get_ident():
            raise StreamCaptureError(
                f"end_capture on {s!r} from thread {threading.get_ident()}: the {cap.mode!r} "
                f"capture was begun by thread {cap.thread} and must end there (CUDA: "
                "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD); only a 'relaxed' capture may end elsewhere")
        cap.open = False
        # The capture ends on the driver first, whatever else is pending: an error a
        # finalizer left is raised by the next call (cleanup() keeps the activation from
        # raising it here, before cuStreamEndCapture); the checkpoint forgets the capture
        # whatever the driver answers.
        with cleanup(), s.device.activate():
            try:
                graph = b.stream_end_capture(s.handle)
            except CudaError as e:
                for m in cap.memory:
                    m.state = "freed"
                    _unlaunched.pop(m.ptr, None)
                raise StreamCaptureError(f"end_capture on {s!r}: the capture failed: {e}") from e
            try:
                graph_exec = b.graph_instantiate(graph, auto_free_on_launch=True)
            except BaseException:
                b.graph_destroy(graph)
                raise
        return Graph._make(s, graph, graph_exec, cap)
