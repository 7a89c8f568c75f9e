"""Memory managers: the NBEP 7 plugin interface and the default manager.

One manager *class* serves the whole program; it is instantiated once per
device (``cls(context=device)``) on first use, and ``initialize()`` is called
before its first allocation.  Every allocation of the library goes through
:func:`allocate` (device memory) or :func:`host_alloc` / :func:`host_pin`
(page-locked host memory), and so through the active manager.

The default manager frees device memory through a deferred-deallocation queue:
frees are batched until more than ``GPUARRAY_MAX_PENDING_DEALLOCS_COUNT``
(default 10) are pending or their size passes
``GPUARRAY_MAX_PENDING_DEALLOCS_RATIO`` (default 0.2) of the device memory;
on out-of-memory the queue is flushed and the allocation retried once.
:func:`defer_cleanup` holds all frees back (nestable, exception-safe).

Managers are selected by class, by name or by module:
``set_memory_manager(cls)``, ``set_memory_manager("pool")`` or
``GPUARRAY_MEMORY_MANAGER=pool``; a value that is not a known name is a module
exposing ``_gpuarray_memory_manager`` (``GPUARRAY_MEMORY_MANAGER=my.module``).
The names: ``default`` (this module's :class:`DefaultMemoryManager`), ``pool``
(stream-ordered ``cuMemAllocAsync`` pool, ``gpuarray.memory._pool``), ``cupy``,
``rmm`` and ``torch`` (plugins in ``gpuarray.memory.plugins``, importable when
their library is installed).  While the variable is set,
:func:`set_memory_manager` warns and does nothing.  Nothing initialises CUDA
at import, so import order never matters.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import importlib
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from .. import _config
from .._device import Device, get_device
from .._driver import get_backend
from .._driver._finalize import cleanup
from ..errors import CudaOutOfMemoryError
from ._pointer import MappedMemory, MemoryInfo, MemoryPointer, PinnedMemory

__all__ = [
    "BaseCUDAMemoryManager", "HostOnlyCUDAMemoryManager", "GetIpcHandleMixin",
    "DefaultMemoryManager", "set_memory_manager", "get_memory_manager", "defer_cleanup",
    "get_memory_info", "allocate", "host_alloc", "host_pin", "SUPPORTED_INTERFACE_VERSION",
]

#: The NBEP 7 interface version gpuarray implements.
SUPPORTED_INTERFACE_VERSION = 1


def _fmt_size(n: int) -> str:
    for unit, step in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= step:
            return f"{n / step:.1f} {unit}"
    return f"{n} bytes"


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


class _PendingDeallocs:
    """The deferred-deallocation queue of one device."""

    def __init__(self, device: Device | None) -> None:
        self._device = device
        self._lock = threading.Lock()
        self._items: list[tuple[Callable[[int], None], int, int]] = []
        self._size = 0
        self._disabled = 0

    @property
    def pending_count(self) -> int:
        return len(self._items)

    def __len__(self) -> int:  # Numba's ``len(context.deallocations)``
        return len(self._items)

    @property
    def pending_size(self) -> int:
        return self._size

    def _limits(self) -> tuple[int, int]:
        cfg = _config.get()
        total = self._device.total_memory if self._device is not None else 0
        return cfg.max_pending_deallocs_count, int(cfg.max_pending_deallocs_ratio * total)

    def add_item(self, free: Callable[[int], None], handle: int, size: int) -> None:
        with self._lock:
            self._items.append((free, handle, size))
            self._size += size
            count_max, size_max = self._limits()
            over = len(self._items) > count_max or (size_max and self._size > size_max)
        if over:
            self.clear()

    def take(self, handle: int, free: Callable[..., None]) -> bool:
        """Run now the pending release of ``handle`` whose function is ``free``; whether one was queued."""
        with self._lock:
            for i, (fn, h, size) in enumerate(self._items):
                if h == handle and getattr(fn, "func", fn) == free:
                    del self._items[i]
                    self._size -= size
                    break
            else:
                return False
        fn(h)
        return True

    def clear(self) -> None:
        """Run the pending frees now (unless cleanup is deferred).

        Every item is freed even when some fail (a failure must not leak the
        rest of the batch); then the first error is raised, with the others
        added to it as notes.
        """
        with self._lock:
            if self._disabled:
                return
            items, self._items, self._size = self._items, [], 0
        if not items:
            return
        errors: list[Exception] = []
        ctx = self._device.activate() if self._device is not None else contextlib.nullcontext()
        with cleanup(), ctx:
            for free, handle, _ in items:
                try:
                    free(handle)
                except Exception as e:  # each item must be tried
                    errors.append(e)
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
        return self._disabled > 0


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
            backend.mem_free_host(ptr)

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
        ptr = b.mem_host_alloc(size, mapped=mapped, portable=portable, write_combined=wc)
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
        b = get_backend()
        try:
            ptr = b.mem_alloc(size)
        except CudaOutOfMemoryError:
            self.deallocations.clear()
            try:
                ptr = b.mem_alloc(size)
            except CudaOutOfMemoryError as e:
                dev = self.context.id if self.context is not None else b.ctx_get_device()
                raise CudaOutOfMemoryError(
                    e.code, e.call, f"while allocating {_fmt_size(size)} ({size} bytes) on device {dev}",
                    e.name) from e
        dealloc = self.deallocations

        def finalizer(ptr=ptr, size=size):
            dealloc.add_item(functools.partial(self._free_device, b), ptr, size)

        self.allocations[ptr] = size
        return MemoryPointer(self.context, ptr, size, finalizer=finalizer)

    def _free_device(self, backend, ptr: int) -> None:
        self.allocations.pop(ptr, None)
        if get_backend() is backend:  # else the replaced backend (tests) took it
            backend.mem_free(ptr)

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


# --------------------------------------------------------------- registry
_lock = threading.RLock()
_manager_class: type | None = None
_managers: dict[int, BaseCUDAMemoryManager] = {}


def _check_version(cls: type, source: str) -> None:
    try:
        probe = cls(context=None)
        version = probe.interface_version
    except Exception as e:
        raise TypeError(f"{source}: cannot instantiate memory manager {cls!r} to read its "
                        f"interface_version: {e}") from e
    if version != SUPPORTED_INTERFACE_VERSION:
        raise RuntimeError(
            f"{source}: memory manager {cls.__name__} implements EMM interface version "
            f"{version!r}, but gpuarray supports version {SUPPORTED_INTERFACE_VERSION}")


# Managers selectable by name: name -> module exposing _gpuarray_memory_manager.
_NAMED_MANAGERS = {
    "default": "gpuarray.memory._manager",
    "pool": "gpuarray.memory._pool",
    "cupy": "gpuarray.memory.plugins.cupy",
    "rmm": "gpuarray.memory.plugins.rmm",
    "torch": "gpuarray.memory.plugins.torch",
}


def _resolve(spec: str, source: str) -> type:
    """The manager class named by ``spec``: a name of ``_NAMED_MANAGERS`` or a module name."""
    name = spec.strip()
    modname = _NAMED_MANAGERS.get(name.lower(), name)
    if not modname:
        raise ValueError(f"{source}: empty memory manager name; known names: "
                         f"{', '.join(_NAMED_MANAGERS)}, or a module exposing "
                         "_gpuarray_memory_manager")
    try:
        module = importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name is not None and modname.startswith(e.name) and name.lower() not in _NAMED_MANAGERS:
            raise ImportError(f"{source}: {name!r} is neither a memory manager name "
                              f"({', '.join(_NAMED_MANAGERS)}) nor an importable module") from e
        raise
    try:
        return module._gpuarray_memory_manager
    except AttributeError:
        raise ImportError(f"{source}: module {modname} has no _gpuarray_memory_manager") from None


def _active_class() -> type:
    global _manager_class
    if _manager_class is None:
        name = _config.get().memory_manager
        if name:
            source = f"GPUARRAY_MEMORY_MANAGER={name}"
            cls = _resolve(name, source)
            _check_version(cls, source)
            _manager_class = cls
        else:
            _manager_class = DefaultMemoryManager
    return _manager_class


def set_memory_manager(cls: type | str) -> None:
    """Use ``cls`` for all later allocations on every device.

    Parameters
    ----------
    cls : type or str
        A subclass of :class:`BaseCUDAMemoryManager` (or anything with its
        methods) whose ``interface_version`` is 1; or a name: ``"default"``,
        ``"pool"`` (stream-ordered ``cuMemAllocAsync`` pool), ``"cupy"``,
        ``"rmm"``, ``"torch"`` (plugins, when their library is installed),
        or the name of a module exposing ``_gpuarray_memory_manager``.

    Raises
    ------
    RuntimeError
        If the plugin's interface version is not supported; the message
        names both versions.
    ImportError
        If a name names no manager, or a plugin's library is not installed.

    Warns
    -----
    UserWarning
        When ``GPUARRAY_MEMORY_MANAGER`` is set: the call is ignored.

    Examples
    --------
    >>> gpuarray.set_memory_manager(MyManager)   # doctest: +SKIP
    >>> gpuarray.set_memory_manager("pool")      # doctest: +SKIP
    """
    global _manager_class
    if _config.get().memory_manager:
        warnings.warn(f"GPUARRAY_MEMORY_MANAGER={_config.get().memory_manager} is set; "
                      f"set_memory_manager({getattr(cls, '__name__', cls)}) is ignored",
                      UserWarning, stacklevel=2)
        return
    if isinstance(cls, str):
        cls = _resolve(cls, f"set_memory_manager({cls!r})")
    _check_version(cls, "set_memory_manager")
    with _lock:
        _manager_class = cls
        _managers.clear()  # existing allocations keep their manager through finalizers


def get_memory_manager(device: Device | None = None) -> BaseCUDAMemoryManager:
    """The active manager instance of ``device``, created and initialised on first use.

    Parameters
    ----------
    device : Device, optional
        Default: the current device.

    Returns
    -------
    BaseCUDAMemoryManager
    """
    dev = device if device is not None else get_device()
    mgr = _managers.get(dev.id)
    if mgr is None:
        with _lock:
            mgr = _managers.get(dev.id)
            if mgr is None:
                mgr = _active_class()(context=dev)
                with dev.activate():
                    mgr.initialize()
                _managers[dev.id] = mgr
    return mgr


def allocate(nbytes: int, device: Device | None = None) -> MemoryPointer:
    """Allocate device memory through the active manager.

    Parameters
    ----------
    nbytes : int
        Bytes to allocate; 0 allocates nothing and returns a null pointer.
    device : Device, optional
        Default: the current device.

    Returns
    -------
    MemoryPointer

    Raises
    ------
    CudaOutOfMemoryError
        When the device has no room, after one flush of deferred frees.
    TypeError
        When the active manager's ``memalloc`` returns something that is not
        a :class:`MemoryPointer` (the message names the manager class).
    """
    dev = device if device is not None else get_device()
    if nbytes == 0:
        return MemoryPointer(dev, 0, 0)
    mgr = get_memory_manager(dev)
    with dev.activate():
        return _checked(mgr, "memalloc", nbytes, mgr.memalloc(nbytes), MemoryPointer)


def _checked(mgr: Any, method: str, size: int, result: Any, expected: type) -> Any:
    """``result`` of ``mgr.method(size, ...)`` when it is an ``expected``, else TypeError.

    The boundary between gpuarray and a plugin: a wrong return value is
    reported here, naming the plugin, not as an AttributeError deep inside
    a transfer.
    """
    if isinstance(result, expected):
        return result
    cls = type(mgr)
    raise TypeError(f"memory manager {cls.__module__}.{cls.__qualname__}.{method}({size}, ...) "
                    f"returned {type(result).__name__} {result!r}, not a "
                    f"gpuarray.memory.{expected.__name__}")


def host_alloc(nbytes: int, mapped: bool = False, portable: bool = False, wc: bool = False,
               device: Device | None = None) -> PinnedMemory:
    """Allocate page-locked host memory through the active manager.

    Parameters
    ----------
    nbytes : int
    mapped : bool
        Also map it into the device address space.
    portable : bool
        Page-locked for every context.
    wc : bool
        Write-combined.
    device : Device, optional
        Default: the current device.

    Returns
    -------
    PinnedMemory or MappedMemory

    Raises
    ------
    TypeError
        When the active manager's ``memhostalloc`` returns something that is
        not a :class:`PinnedMemory`.
    """
    dev = device if device is not None else get_device()
    mgr = get_memory_manager(dev)
    with dev.activate():
        return _checked(mgr, "memhostalloc", max(nbytes, 1),
                        mgr.memhostalloc(max(nbytes, 1), mapped, portable, wc), PinnedMemory)


def host_pin(owner: Any, pointer: int, nbytes: int, mapped: bool = False,
             device: Device | None = None) -> PinnedMemory:
    """Page-lock existing host memory through the active manager.

    Parameters
    ----------
    owner : object
        Kept alive while the memory is pinned.
    pointer : int
        Host address of the first byte.
    nbytes : int
    mapped : bool
        Also map it into the device address space.
    device : Device, optional
        Default: the current device.

    Returns
    -------
    PinnedMemory or MappedMemory

    Raises
    ------
    TypeError
        When the active manager's ``mempin`` returns something that is not a
        :class:`PinnedMemory`.
    """
    dev = device if device is not None else get_device()
    mgr = get_memory_manager(dev)
    with dev.activate():
        return _checked(mgr, "mempin", nbytes, mgr.mempin(owner, pointer, nbytes, mapped),
                        PinnedMemory)


@contextlib.contextmanager
def defer_cleanup() -> Iterator[None]:
    """Hold back deallocations on every device while the block runs.

    Nestable; the hold is released even when the block raises.

    Examples
    --------
    >>> with gpuarray.defer_cleanup():   # doctest: +SKIP
    ...     del a                          # freed after the block
    """
    with contextlib.ExitStack() as stack:
        from .._device import device_count

        for i in range(device_count()):
            stack.enter_context(get_memory_manager(get_device(i)).defer_cleanup())
        yield


def get_memory_info(device: Device | None = None) -> MemoryInfo:
    """Free and total memory of ``device`` (the current device by default).

    Parameters
    ----------
    device : Device, optional

    Returns
    -------
    MemoryInfo

    Examples
    --------
    >>> info = gpuarray.get_memory_info()   # doctest: +SKIP
    >>> info.free <= info.total              # doctest: +SKIP
    True
    """
    dev = device if device is not None else get_device()
    with dev.activate():
        return MemoryInfo(*get_memory_manager(dev).get_memory_info())


def _reset_for_tests() -> None:
    global _manager_class
    with _lock:
        for mgr in _managers.values():
            try:
                mgr.reset()
            except Exception:  # a test's broken plugin must not break the next test
                pass
        _managers.clear()
        _manager_class = None


#: ``GPUARRAY_MEMORY_MANAGER=default`` (or this module's name) selects it.
_gpuarray_memory_manager = DefaultMemoryManager
