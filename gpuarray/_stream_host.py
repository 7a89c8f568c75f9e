"""Host notifications of a stream: callbacks on a driver thread, and an asyncio future.

One concern: :meth:`Stream.add_callback <gpuarray.Stream.add_callback>`
(``cuStreamAddCallback``; ``cuLaunchHostFunc`` in a capture) and :meth:`Stream.async_done
<gpuarray.Stream.async_done>` built on it, as a mixin of
:class:`~gpuarray.Stream` (``_stream.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from ._device import Device
from ._driver import checkpoint, get_backend
from ._driver._finalize import hand_to_reaper, host_callback

if TYPE_CHECKING:  # asyncio is imported on first use of async_done (import time)
    import asyncio

Stream: TypeAlias = Any  # the class this mixin is part of (``_stream.py`` imports this module)


class HostCallbacks:
    """The host-callback methods of :class:`~gpuarray.Stream`."""

    __slots__ = ()
    device: Device
    handle: int

    def add_callback(self, callback: Callable[[Stream, int, Any], Any], arg: Any = None) -> None:
        """Call ``callback(stream, status, arg)`` once the work queued so far has completed.

        As Numba's ``Stream.add_callback`` (``cuStreamAddCallback``): the
        callback runs on a driver thread, not the caller's; ``status`` is 0,
        or the CUDA error code when earlier work failed.  It blocks later work
        on the stream while it runs, so keep it short, and it must not call
        CUDA (no gpuarray operations).  An exception it raises is reported as
        unraisable (``sys.unraisablehook``).  The stream is kept alive until
        the callback has run.  gpuarray objects that a garbage collection
        frees while the callback runs (on that thread) are released on a
        thread of gpuarray's instead, since CUDA refuses calls there.

        During a capture (:meth:`begin_capture`) the callback becomes a host
        node of the graph (``cuLaunchHostFunc``: CUDA cannot capture a stream
        callback): every launch of the graph calls it, with status 0, and the
        graph keeps it and ``arg`` alive.

        Parameters
        ----------
        callback : callable
            ``callback(stream, status, arg)``.
        arg : object, optional
            Passed to the callback as is.

        Raises
        ------
        TypeError
            If ``callback`` is not callable.
        StreamCaptureError
            On an external stream that another library is capturing.

        Examples
        --------
        >>> import threading
        >>> s = gpuarray.stream(); done = threading.Event()
        >>> s.add_callback(lambda stream, status, arg: done.set())
        >>> done.wait(10)
        True
        """
        if not callable(callback):
            raise TypeError(f"add_callback needs a callable, got {type(callback).__name__} {callback!r}")
        cap = checkpoint().capture_of(self.handle)
        if cap is not None:
            self._capture_callback(cap, callback, arg)
            return
        # On a stream another library captures, the capture checkpoint refuses
        # cuStreamAddCallback before the driver sees it (StreamCaptureError).

        held = [self, callback, arg]  # the stream (and arg) outlive the callback

        def host_fn(status: int) -> None:
            stream, fn, value = held
            try:
                with host_callback():  # releases collected meanwhile go to the reaper
                    fn(stream, status, value)
            finally:
                # The last references may be these: dropped here, their
                # releases (cuStreamDestroy, cuMemFree) would run on the
                # driver's callback thread, where CUDA refuses every call.
                del stream, fn, value
                hand_to_reaper(held)

        with self.device.activate():
            get_backend().stream_add_callback(self.handle, host_fn)

    def _capture_callback(self, cap: Any, callback: Callable[[Stream, int, Any], Any], arg: Any) -> None:
        # In a capture of gpuarray's: a host node (cuLaunchHostFunc; CUDA
        # refuses a stream callback in a capture and invalidates it), called
        # with status 0 at every launch of the graph, which keeps it alive.
        def host_fn() -> None:
            with host_callback():
                callback(self, 0, arg)

        cap.keep[id(host_fn)] = host_fn
        with self.device.activate():
            get_backend().launch_host_func(self.handle, host_fn)

    def async_done(self) -> asyncio.Future:
        """An asyncio future completed when the work queued so far on this stream is done.

        Call it from a coroutine (it needs the running event loop); ``await
        s.async_done()`` returns the stream.  A host callback
        (:meth:`add_callback`) completes the future on the loop's thread.

        Returns
        -------
        asyncio.Future
            Its result is this stream; its exception a :class:`~gpuarray.CudaError`
            when earlier work on the stream failed.

        Raises
        ------
        RuntimeError
            Without a running event loop.

        Examples
        --------
        >>> import asyncio
        >>> async def pipeline():
        ...     s = gpuarray.stream()
        ...     d = gpuarray.to_device(np.arange(3), stream=s)
        ...     return await s.async_done() is s
        >>> asyncio.run(pipeline())
        True
        """
        import asyncio

        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def resolve(status: int) -> None:
            if future.done():
                return
            if status == 0:
                future.set_result(self)
            else:
                from .errors import CudaError

                future.set_exception(CudaError(
                    status, "cuStreamAddCallback",
                    f"work queued on {self!r} before async_done() failed"))

        def callback(stream: Stream, status: int, arg: Any) -> None:
            try:
                loop.call_soon_threadsafe(resolve, status)
            except RuntimeError:  # the loop was closed: nobody awaits the future any more
                pass

        self.add_callback(callback)
        return future
