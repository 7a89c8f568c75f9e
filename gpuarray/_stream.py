"""Streams and events, and the helpers that order one stream after another.

A :class:`Stream` is bound to a device.  Kinds: ``legacy`` (the legacy
default stream, CAI value 1), ``per_thread`` (the calling thread's per-thread
default stream, CAI value 2), ``owned`` (created here, destroyed when the last
reference goes) and ``external`` (a handle created elsewhere, kept alive by an
optional owner object).  Streams are made by factories; the class constructor
refuses.

Ordering without blocking the host: :func:`order_after` records a scratch
event on one stream and makes another wait on it (``cuStreamWaitEvent``
snapshots the event at the call, so one scratch event per device and thread
can be reused at once).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from . import _config, _graph
from ._device import Device, get_device
from ._driver import checkpoint, get_backend
from ._driver._base import STREAM_LEGACY, STREAM_PER_THREAD
from ._driver._finalize import call_now, run_finalizer
from ._stream_capture import CaptureMethods
from ._stream_host import HostCallbacks

__all__ = [
    "Stream", "Event", "stream", "default_stream", "legacy_default_stream",
    "per_thread_default_stream", "external_stream", "event", "synchronize",
]

_FACTORIES = ("gpuarray.stream(), gpuarray.default_stream(), gpuarray.legacy_default_stream(), "
              "gpuarray.per_thread_default_stream() or gpuarray.external_stream(handle)")


# Finalizers run on whatever thread the garbage collector is on, with
# whatever context (or none) current there: they make the resource's own
# context current first (Device.activate, as the deferred-free queue does).
# A backend replaced since (tests) took its resources with it.
def _destroy_stream(device: Device, backend, handle: int) -> None:
    if get_backend() is not backend:
        return
    with device.activate():
        backend.stream_destroy(handle)


class Stream(CaptureMethods, HostCallbacks):
    """A CUDA stream on one device.

    Make streams with :func:`stream`, :func:`default_stream`,
    :func:`legacy_default_stream`, :func:`per_thread_default_stream` or
    :func:`external_stream`; the constructor refuses.

    Attributes
    ----------
    handle : int
        The ``CUstream`` value (1 for the legacy, 2 for the per-thread
        default stream).  Reading it from a closed stream raises ValueError.
    device : Device
        The device the stream belongs to.
    kind : str
        ``"legacy"``, ``"per_thread"``, ``"owned"`` or ``"external"``.
    closed : bool
        Whether :meth:`close` destroyed it.

    Examples
    --------
    >>> s = gpuarray.stream()            # doctest: +SKIP
    >>> a = gpuarray.zeros(4, stream=s)  # doctest: +SKIP
    >>> s.synchronize()                  # doctest: +SKIP
    """

    __slots__ = ("handle", "device", "kind", "_owner", "_finalizer", "_last", "__weakref__")
    handle: int
    device: Device
    kind: str
    _owner: Any
    _finalizer: weakref.finalize | None
    _last: Event  # recorded by close(): the stream's last work
    closed = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"Stream objects are made by {_FACTORIES}")

    @classmethod
    def _make(cls, handle: int, device: Device, kind: str, owner: Any = None) -> Stream:
        self = object.__new__(cls)
        self.handle = int(handle)
        self.device = device
        self.kind = kind
        self._owner = owner
        self._finalizer = None
        if kind == "owned":
            self._finalizer = weakref.finalize(self, run_finalizer, _destroy_stream, device,
                                               get_backend(), self.handle)
            self._finalizer.atexit = False
        elif kind == "external":  # another library may capture on it: the checkpoint asks
            checkpoint().foreign_stream(self.handle, self)
        return self

    @property
    def cai_value(self) -> int:
        """This stream as the CUDA Array Interface encodes it (1, 2 or the handle; never 0)."""
        return self.handle

    def __int__(self) -> int:
        return self.handle

    def __cuda_stream__(self) -> tuple[int, int]:
        """The cuda.core stream protocol: ``(version, handle)``."""
        return (0, self.handle)

    def synchronize(self) -> None:
        """Block the host until all work queued on this stream has completed."""
        with self.device.activate():
            get_backend().stream_synchronize(self.handle)

    def query(self) -> bool:
        """Return True when all work queued on this stream has completed."""
        with self.device.activate():
            return get_backend().stream_query(self.handle)

    def wait_event(self, ev: Event) -> None:
        """Make later work on this stream wait for ``ev`` (no host blocking).

        Parameters
        ----------
        ev : Event
        """
        with self.device.activate():
            get_backend().stream_wait_event(self.handle, ev.handle)

    def record(self, ev: Event | None = None) -> Event:
        """Record an event on this stream.

        Parameters
        ----------
        ev : Event, optional
            The event to record; a new timing event when omitted.

        Returns
        -------
        Event
        """
        if ev is None:
            with self.device.activate():
                ev = event()
        ev.record(self)
        return ev

    def wait_stream(self, other: Stream) -> None:
        """Make later work on this stream wait for the work queued on ``other`` so far.

        Parameters
        ----------
        other : Stream
        """
        order_after(self, other)

    @contextlib.contextmanager
    def auto_synchronize(self) -> Iterator[Stream]:
        """Context manager that synchronises the stream when the block ends (Numba's name).

        Returns
        -------
        contextlib.AbstractContextManager
            Whose ``with`` target is this stream.

        Examples
        --------
        >>> with gpuarray.stream().auto_synchronize() as s:
        ...     d = gpuarray.zeros(4, stream=s)
        """
        try:
            yield self
        finally:
            self.synchronize()

    @property
    def external(self) -> bool:
        """Whether the stream was created elsewhere (:func:`external_stream`), as Numba's flag."""
        return self.kind == "external"

    def close(self) -> None:
        """Destroy an owned stream now (queued work still completes); others: nothing.

        Its handle never reaches the driver again: work that must follow its
        work waits for an event recorded before the destruction; what would
        run *on* it raises ValueError (rebind the arrays: ``t.wait_stream(s)``,
        ``arr.stream = t``).  See "Closing a stream" in the streams guide.

        Raises
        ------
        StreamCaptureError
            While gpuarray captures on it.
        """
        fin = self._finalizer
        if fin is None or not fin.alive:
            return
        with self.device.activate():  # the checkpoint refuses it before the finalizer is spent
            checkpoint().refuse_destroy(self.handle, "close()")
            self._last = Event._make(self.device, False).record(self)
        call_now(fin)
        self.__class__ = _ClosedStream

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Stream) and other.handle == self.handle
                and other.device.id == self.device.id)

    def __hash__(self) -> int:
        return hash((self.handle, self.device.id))

    def __repr__(self) -> str:
        return f"<gpuarray.Stream {self.kind} 0x{self.handle:x} on device {self.device.id}>"


_HANDLE: Any = Stream.__dict__["handle"]  # the slot, read past _ClosedStream's refusal


class _ClosedStream(Stream):
    """A stream :meth:`Stream.close` destroyed: its handle never reaches the driver again."""

    __slots__ = ()
    closed = True

    @property
    def handle(self) -> int:  # type: ignore[override]
        raise ValueError(
            f"{self!r} was closed (Stream.close()): nothing can run on it any more. Give the "
            "arrays whose default stream it was a live stream t: t.wait_stream(closed) orders "
            "t after its last work, then arr.stream = t; or pass stream=t to the call, which "
            "waits for it itself")

    def synchronize(self) -> None:
        self._last.synchronize()

    def query(self) -> bool:
        return self._last.query()

    def __eq__(self, other: object) -> bool:
        return other is self  # its handle may be a new stream's now

    def __hash__(self) -> int:
        return hash((_HANDLE.__get__(self), self.device.id))

    def __repr__(self) -> str:
        return f"<gpuarray.Stream owned 0x{_HANDLE.__get__(self):x} on device {self.device.id}, closed>"


def _destroy_event(device: Device, backend, handle: int) -> None:
    if get_backend() is not backend:
        return
    with device.activate():
        backend.event_destroy(handle)


class Event:
    """A CUDA event.  Make events with :func:`event`.

    Attributes
    ----------
    handle : int
    device : Device
    timing : bool

    Examples
    --------
    >>> start, end = gpuarray.event(), gpuarray.event()   # doctest: +SKIP
    >>> start.record(); end.record(); end.synchronize()   # doctest: +SKIP
    >>> start.elapsed_time(end) >= 0                       # doctest: +SKIP
    True
    """

    __slots__ = ("handle", "device", "timing", "_finalizer", "__weakref__")
    handle: int
    device: Device
    timing: bool
    _finalizer: weakref.finalize

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Event objects are made by gpuarray.event(timing=True)")

    @classmethod
    def _make(cls, device: Device, timing: bool) -> Event:
        self = object.__new__(cls)
        self.device = device
        self.timing = bool(timing)
        with device.activate():
            self.handle = get_backend().event_create(timing=self.timing)
        self._finalizer = weakref.finalize(self, run_finalizer, _destroy_event, device,
                                           get_backend(), self.handle)
        self._finalizer.atexit = False
        return self

    def record(self, stream: Stream | None = None) -> Event:
        """Record the event on ``stream`` (the library default stream when omitted).

        Parameters
        ----------
        stream : Stream, optional

        Returns
        -------
        Event
            ``self``.
        """
        s = stream if stream is not None else default_stream(self.device)
        with s.device.activate():
            get_backend().event_record(self.handle, s.handle)
        return self

    def synchronize(self) -> None:
        """Block the host until the recorded work has completed."""
        with self.device.activate():
            get_backend().event_synchronize(self.handle)

    def query(self) -> bool:
        """Return True when the recorded work has completed."""
        with self.device.activate():
            return get_backend().event_query(self.handle)

    def wait(self, stream: Stream | None = None) -> None:
        """Make ``stream`` wait for this event (no host blocking).

        Parameters
        ----------
        stream : Stream, optional
            Default: the library default stream of the event's device.
        """
        s = stream if stream is not None else default_stream(self.device)
        s.wait_event(self)

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (both recorded and completed, timing on).

        Parameters
        ----------
        end : Event

        Returns
        -------
        float
        """
        with self.device.activate():
            return get_backend().event_elapsed_time(self.handle, end.handle)

    def __repr__(self) -> str:
        return f"<gpuarray.Event 0x{self.handle:x} on device {self.device.id}>"


# ------------------------------------------------------------------ factories
_defaults: dict[tuple[int, str], Stream] = {}


def _default(device: Device | None, kind: str, handle: int) -> Stream:
    dev = device if device is not None else get_device()
    s = _defaults.get((dev.id, kind))
    if s is None:
        s = _defaults[(dev.id, kind)] = Stream._make(handle, dev, kind)
    return s


def legacy_default_stream(device: Device | None = None) -> Stream:
    """Return the legacy default stream (CAI value 1) of ``device``.

    Parameters
    ----------
    device : Device, optional
        Default: the current device.

    Returns
    -------
    Stream

    Examples
    --------
    >>> gpuarray.legacy_default_stream().cai_value   # doctest: +SKIP
    1
    """
    return _default(device, "legacy", STREAM_LEGACY)


def per_thread_default_stream(device: Device | None = None) -> Stream:
    """Return the per-thread default stream (CAI value 2) of ``device``.

    Parameters
    ----------
    device : Device, optional
        Default: the current device.

    Returns
    -------
    Stream

    Examples
    --------
    >>> gpuarray.per_thread_default_stream().cai_value   # doctest: +SKIP
    2
    """
    return _default(device, "per_thread", STREAM_PER_THREAD)


def default_stream(device: Device | None = None) -> Stream:
    """Return the library default stream.

    The legacy default stream, or the per-thread default stream when
    ``GPUARRAY_PER_THREAD_DEFAULT_STREAM=1``.

    Parameters
    ----------
    device : Device, optional
        Default: the current device.

    Returns
    -------
    Stream

    Examples
    --------
    >>> gpuarray.default_stream() == gpuarray.legacy_default_stream()   # doctest: +SKIP
    True
    """
    global _last_default
    cfg, dev, s = _last_default
    if device is dev and cfg is _config._config and device is not None:
        return s  # type: ignore[return-value]
    if _config.get().per_thread_default_stream:
        s = per_thread_default_stream(device)
    else:
        s = legacy_default_stream(device)
    if device is not None:
        _last_default = (_config._config, device, s)
    return s


#: ``(configuration, device, stream)`` of the last default_stream(device):
#: hot paths ask for the same device's again and again (one tuple, so a
#: thread reads a consistent entry).
_last_default: tuple[Any, Any, Stream | None] = (None, None, None)


def stream(non_blocking: bool = False, priority: int = 0, device: Device | None = None) -> Stream:
    """Create a new stream, destroyed when the last reference to it goes.

    Parameters
    ----------
    non_blocking : bool, default False
        A non-blocking stream does not synchronise with the legacy default
        stream.
    priority : int, default 0
    device : Device, optional
        Default: the current device.

    Returns
    -------
    Stream

    Examples
    --------
    >>> s = gpuarray.stream(non_blocking=True)   # doctest: +SKIP
    """
    dev = device if device is not None else get_device()
    with dev.activate():
        h = get_backend().stream_create(non_blocking=bool(non_blocking), priority=int(priority))
    return Stream._make(h, dev, "owned")


def external_stream(handle: int, device: Device | None = None, owner: Any = None) -> Stream:
    """Wrap a stream created elsewhere (CuPy, PyTorch, cuda.core ...).

    Parameters
    ----------
    handle : int
        The ``CUstream`` value; 1 and 2 give the legacy and per-thread
        default streams.
    device : Device, optional
        The stream's device.  Default: the current device.
    owner : object, optional
        Kept alive as long as the returned :class:`Stream`, so the foreign
        stream is not destroyed under it.

    Returns
    -------
    Stream

    Raises
    ------
    TypeError
        If ``handle`` is not an integer.
    ValueError
        If ``handle`` is 0 (ambiguous: use :func:`legacy_default_stream`).

    Examples
    --------
    >>> s = gpuarray.external_stream(torch.cuda.current_stream().cuda_stream)   # doctest: +SKIP
    """
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError(f"stream handle must be an int, got {type(handle).__name__} {handle!r}")
    if handle == 0:
        raise ValueError("stream handle 0 is ambiguous: use legacy_default_stream() or "
                         "per_thread_default_stream()")
    if handle < 0:
        raise ValueError(f"stream handle {handle} is negative")
    if handle == STREAM_LEGACY:
        return legacy_default_stream(device)
    if handle == STREAM_PER_THREAD:
        return per_thread_default_stream(device)
    dev = device if device is not None else get_device()
    return Stream._make(handle, dev, "external", owner)


def event(timing: bool = True) -> Event:
    """Create an event on the current device.

    Parameters
    ----------
    timing : bool, default True
        Whether the event records time (needed for :meth:`Event.elapsed_time`).

    Returns
    -------
    Event

    Examples
    --------
    >>> ev = gpuarray.event(timing=False)   # doctest: +SKIP
    """
    return Event._make(get_device(), timing)


def synchronize() -> None:
    """Block until all work on the current device has completed.

    Examples
    --------
    >>> gpuarray.synchronize()   # doctest: +SKIP
    """
    get_device().synchronize()


# ----------------------------------------------------------- stream ordering
_scratch = threading.local()


def _scratch_event(device: Device) -> Event:
    events = getattr(_scratch, "events", None)
    if events is None:
        events = _scratch.events = {}
    ev = events.get(device.id)
    if ev is None:
        with device.activate():
            ev = events[device.id] = Event._make(device, False)
    return ev


def order_after(waiter: Stream, producer: Stream) -> None:
    """Make ``waiter``'s later work wait for the work queued on ``producer`` so far.

    No host blocking.  Nothing happens when they are the same stream.
    """
    if waiter == producer:
        return
    if producer.closed:  # its last work is what close() recorded
        waiter.wait_event(producer._last)
        return
    ev = _scratch_event(producer.device)
    b = get_backend()
    with producer.device.activate():
        b.event_record(ev.handle, producer.handle)
    with waiter.device.activate():  # across a capture's boundary: the checkpoint decides
        b.stream_wait_event(waiter.handle, ev.handle)


def device_default_stream(ordinal: int | None = None) -> tuple[Device, Stream]:
    """Device ``ordinal`` (None: the current device) and its library default stream.

    What an import needs of a producer's device, in one call (the interop layer).
    """
    dev = get_device(ordinal)
    return dev, default_stream(dev)


def order_after_producer(ordinal: int | None, handle: int | None) -> None:
    """Make device ``ordinal``'s default stream (None: the current device's) wait for the work
    queued so far on a producer's stream ``handle`` (0: the legacy stream; None: nothing to
    order after), as ``__dlpack__(stream=ours)`` does for an import through a DLPack table.
    """
    dev, ours = device_default_stream(ordinal)
    if handle is not None and (handle or 1) != ours.handle:
        order_after(ours, external_stream(handle or 1, dev))


_graph.use_stream_helpers(as_stream=lambda obj, device: as_stream(obj, device),
                          order_after=order_after)


def _reset_for_tests() -> None:
    global _last_default
    _graph._reset_for_tests()
    _defaults.clear()
    _last_default = (None, None, None)
    _scratch.__dict__.clear()


def _device_for(stream: Any) -> Device:
    """Where a new array for ``stream=`` lives: a :class:`Stream`'s device, else the current one.

    The stream says where the work runs: an array on another device than its
    stream's could not run kernels there (CUDA refuses a launch into a stream
    of a device other than the current one).
    """
    return stream.device if isinstance(stream, Stream) else get_device()


def as_stream(obj: Any, device: Device | None = None) -> Stream:
    """Coerce a ``stream=`` argument to a :class:`Stream`.

    Accepts None or 0 (the library default stream of ``device``), a
    :class:`Stream`, a positive int handle, or a foreign stream object:
    anything with ``__cuda_stream__`` (cuda.core, CuPy, PyTorch), ``.ptr``
    (CuPy), ``.cuda_stream`` (PyTorch) or ``.handle.value`` (Numba).  Foreign
    objects are kept alive by the returned stream.
    """
    if obj is None or (obj == 0 and isinstance(obj, int) and not isinstance(obj, bool)):
        return default_stream(device)
    if isinstance(obj, Stream):
        return obj
    if isinstance(obj, int) and not isinstance(obj, bool):
        return external_stream(obj, device)
    proto = getattr(obj, "__cuda_stream__", None)
    if proto is not None:
        handle = proto()[1] if callable(proto) else proto[1]
    elif hasattr(obj, "cuda_stream"):
        handle = obj.cuda_stream
    elif hasattr(obj, "ptr") and isinstance(obj.ptr, int):
        handle = obj.ptr
    elif hasattr(getattr(obj, "handle", None), "value"):
        handle = obj.handle.value or 0
    else:
        raise TypeError(f"stream must be a gpuarray.Stream, an int handle or a CUDA stream object, "
                        f"got {type(obj).__name__} {obj!r}")
    if handle == 0:
        return default_stream(device)
    return external_stream(int(handle), device, owner=obj)
