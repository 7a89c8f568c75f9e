"""Stream-ordered device memory: frees that never overtake work.

NBEP 7's ``memalloc(size)`` takes no stream, yet ``cuMemFreeAsync`` (and every
caching pool: CuPy's, RMM's, PyTorch's) frees *in stream order*: the memory
becomes reusable as soon as the freeing stream reaches the free, whatever
other streams still have queued on it.  This module makes such frees safe.

The model
---------
Every stream-ordered allocation is a :class:`StreamOrderedPointer` with a
:class:`StreamUses` record:

- ``home``: the stream the allocation was made on and will be freed on.  It is
  the stream published with :func:`allocation_stream` by the code that
  allocates (an operation's stream, for its temporaries), else the device's
  *legacy* default stream -- the one stream every blocking stream (owned
  blocking streams, per-thread default streams) is implicitly ordered with,
  in both directions.
- ``others``: every other stream that uses the memory.  Recording a stream
  (:func:`record_stream`) first makes it wait for ``home``'s queued work (so it
  is ordered after the allocation), then remembers it.

When the last reference dies, the free runs on ``home`` after ``home`` waited
on an event recorded *at that moment* on each recorded stream.  No reference
remains, so no new work can be queued on the memory: the events cover every
use, and the free cannot overtake any of them.  No host blocking is involved.

Who records: the array layer records each array's default stream when the
array is made over the memory (views included) and when ``bind()`` /
``split()`` give a view another stream.  Every array operation runs on a
stream ``s`` and then makes the default streams of the arrays involved wait
for ``s`` (``_transfer.on_stream``), so an array's default stream is always
ordered after all work on it: recording default streams is enough.  Work that
other libraries queue on their own streams after importing the memory (CAI,
DLPack) is invisible to gpuarray: declare such streams with
:func:`record_stream` (PyTorch's ``Tensor.record_stream`` plays the same role).

Who publishes: temporaries (staging buffers, overlap copies) belong to one
operation and never get an array; they are safe when the operation's stream
is published around it with :func:`allocation_stream` -- one line in
``_transfer.on_stream``.  Without it they are allocated and freed on the
legacy stream: still ordered for operations on blocking streams (legacy,
per-thread, ordinary owned streams), but not for non-blocking ones, which the
race detector reports (``tests/memory/test_memory_pool.py`` keeps a strict xfail
for the day the line lands).

Recording a stream orders it after everything queued on ``home`` so far, and
a free makes ``home`` wait for everything queued on the recorded streams:
safe over-approximations of "the allocation" and "the work on the memory",
paid once per (allocation, stream) pair and once per free.

A stream closed before the free (``Stream.close()``) runs nothing more: it is
not recorded, and work is ordered after its last work (the event ``close()``
recorded); memory whose home it was is freed on the legacy stream.

The simulator's race detector checks all of this: ``cuMemAllocAsync`` and
``cuMemFreeAsync`` count as writes of the whole allocation on their stream, so
a free that overtakes work is reported as a :class:`~gpuarray.StreamOrderError`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .. import _capture_foreign
from .._device import Device
from .._driver import checkpoint, get_backend
from .._stream import Event, Stream, as_stream, legacy_default_stream, order_after
from .._stream import event as new_event
from ..errors import CudaError, CudaOutOfMemoryError, StreamCaptureError
from . import _pool_held
from ._default import SUPPORTED_INTERFACE_VERSION, HostOnlyCUDAMemoryManager, _fmt_size
from ._pointer import MemoryPointer

__all__ = [
    "StreamOrderedMemoryManager", "StreamOrderedPointer", "StreamUses",
    "allocation_stream", "current_allocation_stream", "record_stream",
]



# ------------------------------------------------------- allocation stream
class _AllocationState(threading.local):
    """The thread's allocation stream; ``None`` until a block sets one (a class
    default: ``getattr(local, name, None)`` of a missing one costs ~0.4 us)."""

    stream: Stream | None = None


_tls = _AllocationState()


@contextlib.contextmanager
def allocation_stream(stream: Any) -> Iterator[Stream | None]:
    """Tell stream-ordered managers which stream the allocations of the block are used on.

    Allocations made by the calling thread inside the block are made, and
    later freed, on ``stream`` (when the manager is stream-ordered and the
    allocation is on ``stream``'s device).  Blocks nest; ``None`` clears the
    setting for the block.

    Parameters
    ----------
    stream : Stream, int or None
        Anything :func:`gpuarray.external_stream` or a ``stream=`` argument
        accepts; ``None`` for "not known".

    Yields
    ------
    Stream or None

    Examples
    --------
    >>> s = gpuarray.stream(non_blocking=True)             # doctest: +SKIP
    >>> with gpuarray.memory.allocation_stream(s):           # doctest: +SKIP
    ...     tmp = gpuarray.memory.allocate(1024)            # allocated and freed on s
    """
    s = None if stream is None else as_stream(stream)
    prev = _tls.stream
    _tls.stream = s
    external = s is not None and s.kind == "external"
    if external:  # allocations may be another library's graph memory (_capture_foreign.py)
        _capture_foreign.enter_external_block()
    try:
        yield s
    finally:
        _tls.stream = prev
        if external:
            _capture_foreign.exit_external_block()


def current_allocation_stream(device: Device | None = None) -> Stream | None:
    """The stream published by :func:`allocation_stream` on this thread, if any.

    Parameters
    ----------
    device : Device, optional
        Only a stream of this device is returned.

    Returns
    -------
    Stream or None
    """
    s = _tls.stream
    if s is None or (device is not None and s.device != device):
        return None
    return s


# ------------------------------------------------------------ stream uses
_uses_lock = threading.Lock()


class StreamUses:
    """The streams that use one allocation: where it lives, and who else touched it.

    Parameters
    ----------
    home : Stream
        The stream the allocation was made on; it is freed there.

    Attributes
    ----------
    home : Stream
    others : list of Stream
        Other streams recorded with :meth:`add`, in order.
    """

    __slots__ = ("home", "others")

    def __init__(self, home: Stream) -> None:
        self.home = home
        self.others: list[Stream] = []

    def add(self, stream: Stream) -> None:
        """Record that ``stream`` uses the allocation, ordering it after the allocation.

        Parameters
        ----------
        stream : Stream
        """
        if stream == self.home or stream.closed:
            return
        with _uses_lock:  # rare: a stream other than home
            if stream in self.others:
                return
            self.others.append(stream)
        order_after(stream, self.home)  # the allocation happens before stream's later work

    def order_home(self, ev: Event | None = None) -> Stream:
        """Make ``home`` wait for the work queued so far on every recorded stream.

        Parameters
        ----------
        ev : Event, optional
            The event to record and wait on (reusable at once: a wait takes
            the event's state when it is made).  Default: the scratch event
            of :func:`gpuarray._stream.order_after`.

        Returns
        -------
        Stream
            ``home``, now ordered after every use; when ``home`` was closed,
            the legacy default stream of its device, ordered after it too.
        """
        home = self.home
        if home.closed:
            home = legacy_default_stream(home.device)
            order_after(home, self.home)
        for s in list(self.others):
            if ev is None or s.device != ev.device or s.closed:
                order_after(home, s)
            else:
                ev.record(s)
                home.wait_event(ev)
        return home


class StreamOrderedPointer(MemoryPointer):
    """Device memory freed in stream order (see the module docstring).

    Parameters
    ----------
    context : Device
    pointer : int
    size : int
    stream_uses : StreamUses
        The allocation's streams.
    finalizer : callable, optional
        Runs once, when the last reference dies.

    Attributes
    ----------
    stream_uses : StreamUses
    """

    __slots__ = ("stream_uses",)

    def __init__(self, context: Any, pointer: Any, size: int, stream_uses: StreamUses,
                 finalizer: Callable[[], None] | None = None) -> None:
        super().__init__(context, pointer, size, finalizer=finalizer)
        self.stream_uses = stream_uses


def record_stream(memory: MemoryPointer, stream: Any) -> None:
    """Declare that work on ``stream`` uses ``memory``.

    The stream is ordered after the allocation, and the memory's free will
    wait for the work queued on ``stream`` up to the moment of the free.  The
    array layer calls this for arrays' default streams; call it yourself for
    a stream of another library that works on gpuarray memory after gpuarray
    has dropped its last reference (PyTorch's ``Tensor.record_stream``).
    Memory that is not stream-ordered (the default manager's, imported
    memory) is left alone: nothing can overtake its frees.

    Parameters
    ----------
    memory : MemoryPointer
        An allocation, or a view of one (e.g. ``array.gpu_data``).
    stream : Stream or int
        The stream (or its handle) that uses the memory.

    Examples
    --------
    >>> a = gpuarray.zeros(10)                                    # doctest: +SKIP
    >>> gpuarray.memory.record_stream(a.gpu_data, torch_stream)   # doctest: +SKIP
    """
    p: Any = memory
    while not isinstance(p, StreamOrderedPointer):
        p = getattr(p, "owner", None)
        if not isinstance(p, MemoryPointer):
            return
    uses = p.stream_uses
    if not isinstance(stream, Stream):
        stream = as_stream(stream, uses.home.device)
    uses.add(stream)


# --------------------------------------------------------------- managers
class StreamOrderedMemoryManager(HostOnlyCUDAMemoryManager):
    """Base of managers whose device frees are stream-ordered (NBEP 7, host-only subclass).

    Subclasses implement ``memalloc`` by allocating on
    :meth:`allocation_stream_for` and wrapping the result with
    :meth:`stream_ordered_pointer`, giving a ``release(stream)`` callback
    that returns the memory *in the order of* ``stream``.  This class makes
    every free wait for the allocation's recorded streams first, and holds
    frees back inside :func:`gpuarray.defer_cleanup` (released when the
    outermost block exits).

    Parameters
    ----------
    context : Device, optional
        The device this instance manages (keyword argument).
    """

    def __init__(self, *args: Any, context: Device | None = None, **kwargs: Any) -> None:
        super().__init__(*args, context=context, **kwargs)
        self._free_events = threading.local()

    def allocation_stream_for(self, device: Device) -> Stream:
        """The stream to allocate on: the published one, else the legacy default stream.

        Parameters
        ----------
        device : Device

        Returns
        -------
        Stream
        """
        s = current_allocation_stream(device)
        return s if s is not None else legacy_default_stream(device)

    def stream_ordered_pointer(self, device: Device, ptr: int, size: int, home: Stream,
                               release: Callable[[Stream], None]) -> StreamOrderedPointer:
        """Wrap an allocation made on ``home``; ``release(stream)`` frees it in ``stream``'s order.

        Parameters
        ----------
        device : Device
        ptr : int
        size : int
        home : Stream
        release : callable
            Called once, with the stream to free on (``home``, or the legacy
            stream after a device synchronisation when a recorded stream was
            destroyed).

        Returns
        -------
        StreamOrderedPointer
        """
        uses = StreamUses(home)
        finalizer = functools.partial(self._finalize, get_backend(), uses, ptr, size, release)
        self.allocations[ptr] = size
        return StreamOrderedPointer(device, ptr, size, uses, finalizer)

    def owned_pointer(self, device: Device, owner: Any, ptr: int, size: int,
                      home: Stream) -> StreamOrderedPointer:
        """Wrap memory that a library object ``owner`` holds (allocated on ``home``).

        The free drops the last reference to ``owner`` once ``home`` waits for
        every recorded stream, so a library that returns blocks to the pool of
        their allocation stream (CuPy, RMM) frees in stream order.

        Parameters
        ----------
        device : Device
        owner : object
            The library's handle to the memory (a CuPy block, an RMM buffer).
        ptr, size : int
        home : Stream

        Returns
        -------
        StreamOrderedPointer
        """
        holder = [owner]
        return self.stream_ordered_pointer(device, ptr, size, home,
                                           lambda stream: holder.clear())

    @property
    def interface_version(self) -> int:
        """1."""
        return SUPPORTED_INTERFACE_VERSION

    # The finalizer: runs once when the last reference to the pointer dies.
    def _finalize(self, backend, uses: StreamUses, ptr: int, size: int,
                  release: Callable[[Stream], None]) -> None:
        if self.deallocations.is_disabled:
            self.deallocations.add_item(
                lambda _ptr: self._release_queued(backend, uses, ptr, size, release), ptr, size)
        else:
            self._release(backend, uses, ptr, release)

    def _release_queued(self, backend, uses: StreamUses, ptr: int, size: int,
                        release: Callable[[Stream], None]) -> None:
        # An out-of-memory retry flushes during gpuarray's capture: a free whose
        # streams include a capturing one would join it, so it waits again.
        if checkpoint().capturing and any(not t.closed and checkpoint().capture_of(t.handle)
                                          is not None for t in (uses.home, *uses.others)):
            return self._finalize(backend, uses, ptr, size, release)
        self._release(backend, uses, ptr, release)
        if checkpoint().capturing:  # the retry may not wait for the device: wait for this free
            with contextlib.suppress(StreamCaptureError, CudaError):
                uses.home.synchronize()

    def _release(self, backend, uses: StreamUses, ptr: int,
                 release: Callable[[Stream], None]) -> None:
        if get_backend() is not backend:
            self.allocations.pop(ptr, None)
            return  # the backend was replaced (tests): its memory went with it
        if _pool_held._held:
            _pool_held.retry()
        if _pool_held.blocked(uses):  # another library captures a stream of it (_pool_held.py)
            _pool_held.hold(self, backend, uses, ptr, release)
            return
        size = self.allocations.pop(ptr, None)
        dev = uses.home.device
        with dev.activate():
            try:
                stream = uses.order_home(self._free_event(dev) if uses.others else None)
            except StreamCaptureError:  # home closed: the legacy stream is unusable now
                self.allocations[ptr] = size
                return _pool_held.hold(self, backend, uses, ptr, release, recheck=False)
            release(stream)

    def _free_event(self, device: Device) -> Event:
        # Frees run in finalizers, which the garbage collector may start between
        # the record and the wait of an order_after() in progress on this
        # thread: they use their own event (one per thread and device), never
        # that scratch event.
        events = getattr(self._free_events, "events", None)
        if events is None:
            events = self._free_events.events = {}
        ev = events.get(device.id)
        if ev is None:
            with device.activate():
                ev = events[device.id] = new_event(timing=False)
        return ev

    def allocate_with_retry(self, device: Device, size: int, attempt: Callable[[], Any],
                            oom: tuple[type[BaseException], ...], call: str) -> Any:
        """``attempt()``; on out-of-memory release held frees, wait for the device, retry once.

        Waiting for the device lets pending stream-ordered frees complete, so
        their memory can be reused.

        Parameters
        ----------
        device : Device
        size : int
            Bytes asked for (for the message).
        attempt : callable
            Makes the allocation.
        oom : tuple of exception types
            What ``attempt`` raises when memory runs out.
        call : str
            The allocator's name, for the error.

        Returns
        -------
        object
            What ``attempt`` returned.

        Raises
        ------
        CudaOutOfMemoryError
            When the retry fails too, stating the size and the device.
        """
        try:
            return attempt()
        except oom:
            pass
        self.deallocations.clear(during_capture=True)  # what no capture uses (_release_queued)
        with contextlib.suppress(StreamCaptureError):  # refused while a capture runs
            device.synchronize()  # pending stream-ordered frees complete
        try:
            return attempt()
        except oom as e:
            code, name = getattr(e, "code", 2), getattr(e, "name", "CUDA_ERROR_OUT_OF_MEMORY")
            raise CudaOutOfMemoryError(
                code if isinstance(code, int) else 2, getattr(e, "call", call),
                f"while allocating {_fmt_size(size)} ({size} bytes) on device {device.id} "
                f"from {self.pool_description}",
                name if isinstance(name, str) else "CUDA_ERROR_OUT_OF_MEMORY") from e

    #: How errors name where the memory comes from.
    pool_description = "a stream-ordered pool"

    def reset(self) -> None:
        """Release held frees and wait for the device, so every pending free completes."""
        super().reset()
        _pool_held.retry()
        if self.context is not None:
            self.context.synchronize()

    def defer_cleanup(self) -> contextlib.AbstractContextManager:
        """Hold frees back while the block runs; release them when the outermost block exits.

        Returns
        -------
        contextlib.AbstractContextManager
        """
        return self._defer()

    @contextlib.contextmanager
    def _defer(self) -> Iterator[None]:
        try:
            with super().defer_cleanup():
                yield
        finally:
            if not self.deallocations.is_disabled:
                self.deallocations.clear()
