"""The NBEP 7 memory-manager classes: the interface and the default manager.

One concern: what a manager is and what the default one does.
:class:`BaseCUDAMemoryManager` is the abstract plugin interface;
:class:`HostOnlyCUDAMemoryManager` implements page-locked host memory and the
deferred-deallocation queue (``_deallocs.py``) for plugins that manage device
memory only; :class:`GetIpcHandleMixin` adds IPC handles for ``cuMemAlloc``
memory; :class:`DefaultMemoryManager` allocates with ``cuMemAlloc``, frees
through the queue and, on out-of-memory, flushes it and retries once.
Releases go to the backend that made the allocation, with the manager's
device current.  Which manager is active, and the functions allocations go
through, are in ``_manager.py`` (which re-exports these names).
"""

from __future__ import annotations

import abc
import contextlib
import functools
from collections.abc import Callable
from typing import Any

from .. import _driver
from .._device import Device
from .._driver import checkpoint, get_backend
from ..errors import CudaOutOfMemoryError
from ._deallocs import _PendingDeallocs
from ._pointer import MappedMemory, MemoryInfo, MemoryPointer, PinnedMemory, _QueuedRelease

_new_pointer = object.__new__

#: The NBEP 7 interface version gpuarray implements.
SUPPORTED_INTERFACE_VERSION = 1


def _fmt_size(n: int) -> str:
    for unit, step in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= step:
            return f"{n / step:.1f} {unit}"
    return f"{n} bytes"


def _retry_after_flush(alloc: Callable[[], int], queue: Any, what: str) -> int:
    """``alloc()`` again after an out-of-memory: flush ``queue`` (deferred frees) first.

    A second out-of-memory is raised with ``what`` ("2.0 MiB (2097152
    bytes) on device 0") in its message.  The first attempt stays inline at
    the caller (every allocation makes it; only a failed one gets here).
    """
    if queue is not None:
        if isinstance(queue, _PendingDeallocs):  # frees held by a capture of gpuarray's too
            queue.clear(during_capture=True)
        else:
            queue.clear()
        checkpoint().run_deferred_frees()
    try:
        return alloc()
    except CudaOutOfMemoryError as e:
        raise CudaOutOfMemoryError(e.code, e.call, f"while allocating {what}", e.name) from e


class BaseCUDAMemoryManager(abc.ABC):
    """Abstract base of memory managers (NBEP 7).

    Parameters
    ----------
    context : Device, optional
        The device this instance manages (keyword argument).

    Notes
    -----
    Subclasses implement ``memalloc``, ``memhostalloc``, ``mempin``,
    ``initialize``, ``get_memory_info``, ``get_ipc_handle``, ``reset``,
    ``defer_cleanup`` and the property ``interface_version`` (return 1).
    """

    def __init__(self, *args: Any, context: Device | None = None, **kwargs: Any) -> None:
        self.context = context

    @abc.abstractmethod
    def memalloc(self, size: int) -> MemoryPointer:
        """Allocate ``size`` bytes of device memory in the current context.

        Parameters
        ----------
        size : int
            Bytes, greater than zero.

        Returns
        -------
        MemoryPointer
            Whose finalizer releases the memory.
        """

    @abc.abstractmethod
    def memhostalloc(self, size: int, mapped: bool = False, portable: bool = False,
                     wc: bool = False) -> PinnedMemory:
        """Allocate page-locked host memory.

        Parameters
        ----------
        size : int
        mapped : bool
            Also map it into the device address space.
        portable : bool
            Page-locked for every context.
        wc : bool
            Write-combined.

        Returns
        -------
        PinnedMemory or MappedMemory
            A ``MappedMemory`` when ``mapped``.
        """

    @abc.abstractmethod
    def mempin(self, owner: Any, pointer: int, size: int, mapped: bool = False) -> PinnedMemory:
        """Page-lock existing host memory owned by ``owner``.

        Parameters
        ----------
        owner : object
            Kept alive while the memory is pinned.
        pointer : int
            Host address of the first byte.
        size : int
        mapped : bool
            Also map it into the device address space.

        Returns
        -------
        PinnedMemory or MappedMemory
        """

    @abc.abstractmethod
    def initialize(self) -> None:
        """Prepare for allocations; may be called more than once."""

    @abc.abstractmethod
    def get_memory_info(self) -> MemoryInfo:
        """``(free, total)`` bytes of the context's device."""

    @abc.abstractmethod
    def get_ipc_handle(self, memory: MemoryPointer) -> Any:
        """An ``IpcHandle`` for an allocation.

        Parameters
        ----------
        memory : MemoryPointer
            The allocation (or a view of one) to share.

        Returns
        -------
        IpcHandle
        """

    @abc.abstractmethod
    def reset(self) -> None:
        """Release everything this manager allocated in its context."""

    @abc.abstractmethod
    def defer_cleanup(self) -> contextlib.AbstractContextManager:
        """A context manager that holds deallocations back while active."""

    @property
    @abc.abstractmethod
    def interface_version(self) -> int:
        """The NBEP 7 interface version implemented (1)."""


class HostOnlyCUDAMemoryManager(BaseCUDAMemoryManager):
    """Base for plugins that manage device memory only (NBEP 7).

    Implements page-locked host memory (``memhostalloc``, ``mempin``) and the
    deferred-deallocation queue.  Subclasses add ``memalloc`` and
    ``get_memory_info``, and call ``super()`` from ``__init__``,
    ``initialize``, ``reset`` and ``defer_cleanup``.

    Parameters
    ----------
    context : Device, optional
        The device this instance manages (keyword argument).
    """

    def __init__(self, *args: Any, context: Device | None = None, **kwargs: Any) -> None:
        super().__init__(*args, context=context, **kwargs)
        self.allocations: dict[int, Any] = {}
        self.deallocations = _PendingDeallocs(context)

    # Releases go to the backend that made the allocation (captured when
    # allocating), never to whatever backend is installed when the GC runs;
    # a backend replaced since (tests) took its memory with it.  They run
    # with this manager's device current: from the deferred-free queue
    # (which activates it) or, for _unpin, through _in_context.
    def _free_host(self, backend, ptr: int) -> None:
        self.allocations.pop(ptr, None)
        if get_backend() is backend:
            backend.mem_free_host(ptr)  # from a flush: in relaxed capture mode

    def _unpin(self, backend, ptr: int) -> None:
        self.allocations.pop(ptr, None)
        if get_backend() is backend:
            backend.mem_host_unregister(ptr)

    def _in_context(self, fn: Callable[..., None], *args: Any) -> None:
        """``fn(*args)`` with this manager's device current (finalizers)."""
        if self.context is None:
            fn(*args)
        else:
            with self.context.activate():
                fn(*args)

    def memhostalloc(self, size: int, mapped: bool = False, portable: bool = False,
                     wc: bool = False) -> PinnedMemory:
        """Allocate page-locked host memory (``cuMemHostAlloc``).

        Parameters
        ----------
        size : int
        mapped, portable, wc : bool

        Returns
        -------
        PinnedMemory or MappedMemory
        """
        b = get_backend()
        ptr = b.mem_host_alloc(size, mapped=mapped, portable=portable,
                           write_combined=wc)
        dealloc = self.deallocations

        def finalizer(ptr=ptr, size=size):
            dealloc.add_item(functools.partial(self._free_host, b), ptr, size)

        if mapped:
            mem: PinnedMemory = MappedMemory(self.context, ptr, size, finalizer=finalizer,
                                             device_pointer=b.mem_host_get_device_pointer(ptr))
        else:
            mem = PinnedMemory(self.context, ptr, size, finalizer=finalizer)
        self.allocations[ptr] = size
        return mem

    def mempin(self, owner: Any, pointer: int, size: int, mapped: bool = False) -> PinnedMemory:
        """Page-lock ``size`` bytes at host address ``pointer`` (``cuMemHostRegister``).

        Parameters
        ----------
        owner : object
            Kept alive while the memory is pinned.
        pointer : int
        size : int
        mapped : bool

        Returns
        -------
        PinnedMemory or MappedMemory
        """
        b = get_backend()
        ptr = int(getattr(pointer, "value", pointer))
        # Memory unpinned inside defer_cleanup() is still registered: pinning
        # it again (Numba's ``with pinned(a)`` twice) unregisters it first.
        self.deallocations.take(ptr, self._unpin)
        b.mem_host_register(ptr, size, mapped=mapped)
        dealloc = self.deallocations

        def finalizer(ptr=ptr, size=size):
            # Unpin at once (so the memory can be pinned again) unless a
            # defer_cleanup() block is holding releases back.
            if dealloc.is_disabled:
                dealloc.add_item(functools.partial(self._unpin, b), ptr, size)
            else:
                self._in_context(self._unpin, b, ptr)

        if mapped:
            mem: PinnedMemory = MappedMemory(self.context, ptr, size, owner, finalizer,
                                             b.mem_host_get_device_pointer(ptr))
        else:
            mem = PinnedMemory(self.context, ptr, size, owner, finalizer)
        self.allocations[ptr] = size
        return mem

    def initialize(self) -> None:
        """Nothing to prepare; safe to call again."""

    def reset(self) -> None:
        """Run all pending deallocations and forget tracked allocations."""
        self.deallocations.clear()
        self.allocations.clear()

    def defer_cleanup(self) -> contextlib.AbstractContextManager:
        """Hold deallocations back while the returned context is active."""
        return self.deallocations.disable()


class GetIpcHandleMixin:
    """Adds ``get_ipc_handle`` for managers whose allocations come from ``cuMemAlloc``."""

    def get_ipc_handle(self, memory: MemoryPointer) -> Any:
        """Return an ``IpcHandle`` for ``memory`` (offset within its allocation kept).

        Parameters
        ----------
        memory : MemoryPointer
        """
        from ._ipc import IpcHandle

        return IpcHandle.from_memory(memory)


class DefaultMemoryManager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
    """The default manager: ``cuMemAlloc`` with deferred frees.

    Parameters
    ----------
    context : Device, optional
        The device this instance manages (keyword argument).
    """

    def memalloc(self, size: int) -> MemoryPointer:
        """Allocate ``size`` bytes on the current device.

        On out-of-memory, pending deallocations are flushed and the
        allocation retried once.

        Parameters
        ----------
        size : int

        Returns
        -------
        MemoryPointer

        Raises
        ------
        CudaOutOfMemoryError
            Stating the size asked for and the device.
        """
        b = _driver._backend or get_backend()
        try:
            ptr = b.mem_alloc_relaxed(size)  # never invalidates a capture (_driver/_checkpoint.py)
        except CudaOutOfMemoryError:
            dev = self.context.id if self.context is not None else b.ctx_get_device()
            ptr = _retry_after_flush(functools.partial(b.mem_alloc_relaxed, size),
                                     self.deallocations,
                                     f"{_fmt_size(size)} ({size} bytes) on device {dev}")
        rel = self._release_of
        if rel is None or rel.backend is not b:
            rel = self._release_of = _QueuedRelease(self.deallocations, self._device_free(b), b)
        self.allocations[ptr] = size
        # MemoryPointer(self.context, ptr, size, None, rel) without the
        # argument checks (ptr and size are exact ints here): every small
        # array pays for this line.
        mem = _new_pointer(MemoryPointer)
        mem.context = self.context
        mem.device_pointer = ptr
        mem.size = size
        mem.owner = None
        mem._finalizer = rel
        return mem

    #: The release of this manager's allocations: its queue and the free
    #: function of the backend of the last allocation (made once, not once
    #: an allocation or a release).
    _release_of: _QueuedRelease | None = None

    def _device_free(self, backend: Any) -> Callable[[int], None]:
        """The queue's free function of ``backend``'s allocations (one frame a free: a flush runs many)."""
        allocations = self.allocations
        b: Any = backend  # looked up at each free: a meter may wrap its methods meanwhile

        def free_device(ptr: int) -> None:
            allocations.pop(ptr, None)
            current: Any = _driver._backend
            if current is b:  # else the replaced backend (tests) took it
                current.mem_free(ptr)

        return free_device

    def get_memory_info(self) -> MemoryInfo:
        """Free and total memory of this manager's device.

        Returns
        -------
        MemoryInfo
        """
        return MemoryInfo(*get_backend().mem_get_info())

    @property
    def interface_version(self) -> int:
        """1."""
        return SUPPORTED_INTERFACE_VERSION
