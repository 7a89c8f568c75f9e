"""The deferred-deallocation queue of one device (``_PendingDeallocs``).

One concern: batching frees.  The default manager (and every
``HostOnlyCUDAMemoryManager``) frees through this queue: frees are batched
until more than ``GPUARRAY_MAX_PENDING_DEALLOCS_COUNT`` (default 10) are
pending or their size passes ``GPUARRAY_MAX_PENDING_DEALLOCS_RATIO`` (default
0.2) of the device memory; the manager flushes it on out-of-memory before
retrying once.  The frees of a flush are made in relaxed capture mode, and
none is made while gpuarray captures a graph (``_driver/_checkpoint.py``: they never
invalidate a capture).  :func:`~gpuarray.defer_cleanup` holds all frees back
(``disable``: nestable, exception-safe).  A flush frees every item with the
queue's device current, even when some fail (the first error is raised, the
others added to it as notes).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import operator
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .. import _config, _driver
from .._device import Device
from .._driver._finalize import _tls, hand_to_reaper

_size_of = operator.itemgetter(2)


class _PendingDeallocs:
    """The deferred-deallocation queue of one device.

    ``add_item`` -- every release of the default manager's memory -- takes no
    lock: ``deque.append`` is atomic, and a flush pops what it frees, so an
    item added while another thread flushes is freed by that flush or the
    next, never lost.  ``pending_size`` is exact on GIL builds of CPython (an
    int ``+=`` or ``-=`` on an attribute, with no call between the load and
    the store, is not interrupted by another thread there); on free-threaded
    builds concurrent releases may make it approximate, which only moves the
    moment of a size-triggered flush.
    """

    __slots__ = ("_device", "_lock", "_items", "_size", "_disabled", "_limits_of", "_count_max",
                 "_size_max", "__weakref__")

    def __init__(self, device: Device | None) -> None:
        self._device = device
        # Reentrant: a flush's frees may start the garbage collector, whose
        # releases may flush again on the same thread.
        self._lock = threading.RLock()
        self._items: collections.deque[tuple[Callable[[int], None], int, int]] = collections.deque()
        self._size = 0
        self._disabled = 0
        self._limits_of: object = None
        self._count_max = 0
        self._size_max = 0

    @property
    def pending_count(self) -> int:
        return len(self._items)

    def __len__(self) -> int:  # Numba's ``len(context.deallocations)``
        return len(self._items)

    @property
    def pending_size(self) -> int:
        return self._size

    def _refresh_limits(self) -> None:
        cfg = _config.get()
        total = self._device.total_memory if self._device is not None else 0
        self._count_max = cfg.max_pending_deallocs_count
        self._size_max = int(cfg.max_pending_deallocs_ratio * total) or sys.maxsize  # 0: none
        self._limits_of = cfg

    def add_item(self, free: Callable[[int], None], handle: int, size: int) -> None:
        # MemoryPointer.__del__ repeats these four lines for the default
        # manager's releases (one call less each): keep them in step.
        items = self._items
        items.append((free, handle, size))
        self._size += size
        if len(items) > self._count_max or self._size > self._size_max or _config._config is not self._limits_of:
            self._past_limits()

    def _past_limits(self) -> None:
        """After an add that may have passed a limit: refresh the limits (once per
        configuration), then flush if the queue is past one."""
        if _config._config is not self._limits_of:
            self._refresh_limits()
        if len(self._items) > self._count_max or self._size > self._size_max:
            self.clear()

    def take(self, handle: int, free: Callable[..., None]) -> bool:
        """Run now the pending release of ``handle`` whose function is ``free``; whether one was queued."""
        with self._lock:
            # A snapshot: add_item appends without the lock, but only at the
            # end, and only flushes (which take the lock) pop: indices hold.
            for i, (fn, h, size) in enumerate(list(self._items)):
                if h == handle and getattr(fn, "func", fn) == free:
                    del self._items[i]
                    self._size -= size
                    break
            else:
                return False
        fn(h)
        return True

    def clear(self, during_capture: bool = False) -> None:
        """Run the pending frees now (unless cleanup is deferred).

        Every item is freed even when some fail (a failure must not leak the
        rest of the batch); then the first error is raised, with the others
        added to it as notes.  ``during_capture`` (an out-of-memory retry)
        frees while a capture of gpuarray's runs too: in relaxed mode, which
        CUDA documents as "not prohibited from potentially unsafe API calls";
        no capture uses memory queued here (a graph keeps what it uses alive).
        """
        if _tls.callback:  # CUDA refuses every call there: the reaper flushes
            hand_to_reaper(self.clear)
            return
        with self._lock:
            if self._disabled or not self._items or (_driver.checkpoint().capturing and not during_capture):
                return  # held: deferred, or a capture of gpuarray's runs (_driver/_checkpoint.py)
            # What is queued now (popped, not swapped: add_item takes no lock);
            # items added meanwhile wait for the next flush.
            queue = self._items
            items = list(itertools.islice(iter(queue.popleft, None), len(queue)))
            freed = sum(map(_size_of, items))
            self._size -= freed  # no call between its load and store (see the class docstring)
        errors: list[Exception] = []
        # The frees run as releases (cleanup(), inlined: a flush runs every
        # ten releases), with the queue's device current.
        depth = _tls.depth
        _tls.depth = depth + 1
        b: Any = _driver._backend  # the capture checkpoint
        try:
            with self._device.activate() if self._device is not None else contextlib.nullcontext(), \
                    b.relaxed(now=during_capture) if b is not None else contextlib.nullcontext():
                for free, handle, _ in items:
                    try:
                        free(handle)
                    except Exception as e:  # each item must be tried
                        errors.append(e)
        finally:
            _tls.depth = depth
        if errors:
            first = errors[0]
            add_note = getattr(first, "add_note", None)  # Python 3.11+
            for other in errors[1:]:
                if add_note is not None:
                    add_note(f"another deferred free in the same batch failed too: "
                             f"{type(other).__name__}: {other}")
            raise first

    @contextlib.contextmanager
    def disable(self) -> Iterator[None]:
        with self._lock:
            self._disabled += 1
        try:
            yield
        finally:
            with self._lock:
                self._disabled -= 1

    @property
    def is_disabled(self) -> bool:
        """Whether releases are held back now: deferred, or a capture of gpuarray's runs."""
        return self._disabled > 0 or bool(_driver.checkpoint().capturing)

