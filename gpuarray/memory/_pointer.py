"""Owning references to memory: device pointers and page-locked host memory.

A :class:`MemoryPointer` stands for an allocation (or a view of one).  Its
``finalizer`` runs exactly once, from ``__del__`` when the last reference
goes (reference cycles included: the collector finalizes them, PEP 442) or
from :meth:`MemoryPointer.free`; views hold a reference to their base, so the
base is released only after every view.  Finalizers do not run at
interpreter exit (the driver releases everything then).  ``__del__`` rather
than a weak-reference callback: it costs nothing to set up, and every small
allocation pays for the release machinery (issue 13).

Signatures follow NBEP 7 (Numba's external memory management interface):
``MemoryPointer(context, pointer, size, owner=None, finalizer=None)``; here
``context`` is the :class:`gpuarray.Device` the memory belongs to.
"""

from __future__ import annotations

import atexit
import ctypes
import threading
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from .. import _config
from .._driver._finalize import cleanup, remember, run_finalizer

__all__ = ["MemoryPointer", "PinnedMemory", "MappedMemory", "ManagedMemory", "MemoryInfo"]


def _address(pointer: Any) -> int:
    value = getattr(pointer, "value", pointer)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"pointer must be an int or a ctypes pointer value, got {pointer!r}")
    return value


#: ``[True]`` once the interpreter exits: releases no longer run then.
_shutdown: list[bool] = [False]
#: Serialises explicit ``free()`` calls (the collector's release cannot race
#: them: ``free()``'s caller holds a reference).
_claim_lock = threading.Lock()


@atexit.register
def _at_exit() -> None:
    _shutdown[0] = True


class _Freed:
    """The state of a pointer whose finalizer has run (or was claimed by ``free()``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<released>"


_FREED = _Freed()


class _QueuedRelease:
    """A manager's release through its deferred-free queue, shared by all its pointers.

    Held as a pointer's ``_finalizer`` in place of a callable made for every
    allocation: the release queues ``free`` with the pointer's own address
    and size (``queue.add_item(free, device_pointer, size)``, inlined in
    ``MemoryPointer.__del__``), which is what the callable would have done,
    for one object per manager instead of one per allocation.  ``free`` is
    what :meth:`_PendingDeallocs.take` matches.
    """

    __slots__ = ("queue", "free", "backend")

    def __init__(self, queue: Any, free: Callable[[int], None], backend: Any = None) -> None:
        self.queue = queue
        self.free = free
        self.backend = backend  # whose allocations these are (the manager's check)

    def __repr__(self) -> str:
        return f"<queued release {self.free!r}>"


class MemoryInfo(NamedTuple):
    """Free and total device memory in bytes.

    Attributes
    ----------
    free : int
    total : int
    """

    free: int
    total: int


class MemoryPointer:
    """Device memory: an address, a size, and what keeps it allocated.

    Parameters
    ----------
    context : Device
        The device (context) the memory was allocated in.
    pointer : int or ctypes.c_uint64
        The device address.
    size : int
        Size in bytes.
    owner : object, optional
        An object kept alive as long as this pointer (e.g. the base
        allocation of a view, or a foreign array).
    finalizer : callable, optional
        Called with no arguments exactly once, when the last reference dies
        (or by :meth:`free`).  When the garbage collector runs it, an error
        it raises is raised by the next gpuarray call instead of being lost.

    Examples
    --------
    >>> freed = []
    >>> p = MemoryPointer(None, 0x1000, 64, finalizer=lambda: freed.append(1))
    >>> v = p.view(16, 32)
    >>> del p; freed            # the view keeps the allocation
    []
    >>> del v; freed
    [1]
    """

    __slots__ = ("context", "device_pointer", "size", "owner", "_finalizer", "__weakref__")
    _finalizer: Callable[[], None] | _QueuedRelease | _Freed | None

    def __init__(self, context: Any, pointer: Any, size: int, owner: Any = None,
                 finalizer: Callable[[], None] | None = None) -> None:
        self.context = context
        # exact ints (the common case) skip the conversions' calls
        self.device_pointer = pointer if type(pointer) is int else _address(pointer)
        if type(size) is not int and (isinstance(size, bool) or not isinstance(size, int)) or size < 0:
            raise ValueError(f"size must be a non-negative int, got {size!r}")
        self.size = size
        self.owner = owner
        # None: a view or foreign memory, nothing to release; a callable:
        # the release still to run; _FREED: it ran (or free() claimed it).
        self._finalizer = finalizer

    def __del__(self, _shutdown: list[bool] = _shutdown, _freed: _Freed = _FREED) -> None:
        # Only the collector gets here, so nothing can race the claim: free()
        # and every other method run with a reference held.
        try:
            fn = self._finalizer
        except AttributeError:  # __init__ raised before it was set: nothing to release
            return
        if fn is None or fn is _freed:
            return
        self._finalizer = _freed
        if _shutdown[0]:
            return
        # An error of the release (often the first sync point after a device
        # fault) is raised by the next call: see _driver/_finalize.py.
        if type(fn) is _QueuedRelease:
            # fn.queue.add_item(fn.free, self.device_pointer, self.size),
            # inlined: every release of the default manager runs this (issue
            # 13).  The queue's flush runs its frees inside cleanup() itself.
            q = fn.queue
            items = q._items
            size = self.size
            items.append((fn.free, self.device_pointer, size))
            q._size += size
            if len(items) > q._count_max or q._size > q._size_max or _config._config is not q._limits_of:
                try:
                    q._past_limits()
                except Exception as e:
                    remember(e)
        else:
            run_finalizer(cast(Callable[[], None], fn))

    def __reduce__(self) -> Any:
        # A copy would run the finalizer a second time (a double free).
        raise TypeError(f"{type(self).__name__} cannot be copied or pickled "
                        "(it owns memory); use own() for another reference")

    @property
    def handle(self) -> int:
        """The device address (alias of ``device_pointer``)."""
        return self.device_pointer

    @property
    def device_ctypes_pointer(self) -> ctypes.c_void_p:
        """The address as ``ctypes.c_void_p`` (value None for address 0)."""
        return ctypes.c_void_p(self.device_pointer or None)

    @property
    def base(self) -> MemoryPointer:
        """The allocation this pointer is a view of (itself for an allocation)."""
        p = self
        while p._finalizer is None and isinstance(p.owner, MemoryPointer):
            p = p.owner
        return p

    @property
    def alive(self) -> bool:
        """False once the finalizer has run (memory released)."""
        return self._finalizer is not _FREED

    def view(self, start: int, stop: int | None = None) -> MemoryPointer:
        """A pointer to bytes ``[start, stop)`` that keeps this allocation alive.

        Parameters
        ----------
        start, stop : int
            Byte offsets within this pointer's range.

        Returns
        -------
        MemoryPointer

        Raises
        ------
        IndexError
            If the range is outside ``[0, size]``.
        """
        stop = self.size if stop is None else stop
        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"view [{start}, {stop}) is outside the {self.size}-byte allocation")
        cls = type(self) if type(self) is MemoryPointer else MemoryPointer
        return cls(self.context, self.device_pointer + start, stop - start, owner=self)

    def own(self) -> MemoryPointer:
        """An owning reference to the same memory (Numba's ``own()``).

        The memory stays allocated while the returned pointer (or this one)
        lives; the result is of the same kind (device, pinned, mapped or
        managed memory).

        Returns
        -------
        MemoryPointer

        Examples
        --------
        >>> freed = []
        >>> p = MemoryPointer(None, 0x1000, 64, finalizer=lambda: freed.append(1))
        >>> q = p.own(); del p; freed
        []
        >>> q.device_pointer == 0x1000
        True
        """
        return self._reference()

    def _reference(self) -> MemoryPointer:
        return MemoryPointer(self.context, self.device_pointer, self.size, owner=self)

    def free(self) -> None:
        """Release the memory now (runs the finalizer; later calls do nothing).

        An error of the release propagates from here.
        """
        with _claim_lock:
            fn = self._finalizer
            if fn is None or fn is _FREED:
                return
            self._finalizer = _FREED
        with cleanup():  # the caller is there to see an error: it propagates
            if type(fn) is _QueuedRelease:
                fn.queue.add_item(fn.free, self.device_pointer, self.size)
            else:
                cast(Callable[[], None], fn)()

    def __repr__(self) -> str:
        dev = getattr(self.context, "id", self.context)
        return f"<{type(self).__name__} 0x{self.device_pointer:x} size={self.size} device={dev}>"


class PinnedMemory(MemoryPointer):
    """Page-locked host memory (from ``memhostalloc`` or ``mempin``).

    Parameters
    ----------
    context : Device
    pointer : int or ctypes.c_void_p
        The host address.
    size : int
    owner : object, optional
        The object that owns the memory (for ``mempin``: the pinned array).
    finalizer : callable, optional
        Frees or unpins the memory; runs once, when the last reference dies.

    Examples
    --------
    >>> pm = PinnedMemory(None, 0x2000, 8)
    >>> pm.host_pointer == 0x2000
    True
    """

    __slots__ = ()

    @property
    def host_pointer(self) -> int:
        """The host address."""
        return self.device_pointer

    def _reference(self) -> MemoryPointer:
        return PinnedMemory(self.context, self.device_pointer, self.size, owner=self)


class MappedMemory(PinnedMemory):
    """Page-locked host memory mapped into the device address space.

    Parameters
    ----------
    context : Device
    pointer : int or ctypes.c_void_p
        The host address.
    size : int
    owner : object, optional
    finalizer : callable, optional
    device_pointer : int, optional
        The device address of the mapping (equal to the host address with
        unified addressing, the default).

    Examples
    --------
    >>> mm = MappedMemory(None, 0x3000, 8)
    >>> mm.device_address == 0x3000
    True
    """

    __slots__ = ("device_address",)

    def __init__(self, context: Any, pointer: Any, size: int, owner: Any = None,
                 finalizer: Callable[[], None] | None = None, device_pointer: int | None = None) -> None:
        super().__init__(context, pointer, size, owner, finalizer)
        self.device_address = self.device_pointer if device_pointer is None else int(device_pointer)

    def _reference(self) -> MemoryPointer:
        return MappedMemory(self.context, self.device_pointer, self.size, owner=self,
                            device_pointer=self.device_address)


class ManagedMemory(MemoryPointer):
    """Managed (unified) memory from ``cuMemAllocManaged``: one address for host and device.

    Parameters
    ----------
    context : Device
    pointer : int
        The address (valid on the host and on every device).
    size : int
    owner : object, optional
    finalizer : callable, optional
        Frees the memory; runs once, when the last reference dies.

    Examples
    --------
    >>> mm = ManagedMemory(None, 0x4000, 8)
    >>> mm.host_pointer == mm.device_pointer == 0x4000
    True
    """

    __slots__ = ()

    @property
    def host_pointer(self) -> int:
        """The address, as the host uses it (the same as ``device_pointer``)."""
        return self.device_pointer

    @property
    def device_address(self) -> int:
        """The address, as the device uses it (the same as ``device_pointer``)."""
        return self.device_pointer

    def _reference(self) -> MemoryPointer:
        return ManagedMemory(self.context, self.device_pointer, self.size, owner=self)
