"""Memory managers: which one is active, and allocating through it.

One concern: the registry of the NBEP 7 manager class and the functions
every allocation goes through.  One manager *class* serves the whole
program; it is instantiated once per device (``cls(context=device)``) on
first use, and ``initialize()`` is called before its first allocation.
Every allocation of the library goes through :func:`allocate` (device
memory) or :func:`host_alloc` / :func:`host_pin` (page-locked host memory),
and so through the active manager.  The manager classes (the interface and
the default manager) are in ``_default.py`` and the deferred-deallocation
queue in ``_deallocs.py``; their names stay importable from here.
:func:`defer_cleanup` holds all frees back (nestable, exception-safe).

Managers are selected by class, by name or by module:
``set_memory_manager(cls)``, ``set_memory_manager("pool")`` or
``GPUARRAY_MEMORY_MANAGER=pool``; a value that is not a known name is a module
exposing ``_gpuarray_memory_manager`` (``GPUARRAY_MEMORY_MANAGER=my.module``).
The names: ``default`` (:class:`DefaultMemoryManager`, selected through this
module), ``pool`` (stream-ordered ``cuMemAllocAsync`` pool,
``gpuarray.memory._pool``), ``cupy``, ``rmm`` and ``torch`` (plugins in
``gpuarray.memory.plugins``, importable when their library is installed).
While the variable is set, :func:`set_memory_manager` warns and does nothing.
Nothing initialises CUDA at import, so import order never matters.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from .. import _capture_foreign, _config
from .._device import Device, current_primary, get_device
from .._driver import checkpoint
from .._driver._checkpoint import on_capture_end
from .._driver._finalize import remember
from ._deallocs import _PendingDeallocs  # noqa: F401  (tests reach it here)
from ._default import (
    SUPPORTED_INTERFACE_VERSION,
    BaseCUDAMemoryManager,
    DefaultMemoryManager,
    GetIpcHandleMixin,
    HostOnlyCUDAMemoryManager,
)
from ._pointer import MemoryInfo, MemoryPointer, PinnedMemory

__all__ = [
    "BaseCUDAMemoryManager", "HostOnlyCUDAMemoryManager", "GetIpcHandleMixin",
    "DefaultMemoryManager", "set_memory_manager", "get_memory_manager", "defer_cleanup",
    "get_memory_info", "allocate", "host_alloc", "host_pin", "SUPPORTED_INTERFACE_VERSION",
]


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


def allocate(nbytes: int, device: Device | None = None, stream: Any = None) -> MemoryPointer:
    """Allocate device memory through the active manager.

    Parameters
    ----------
    nbytes : int
        Bytes to allocate; 0 allocates nothing and returns a null pointer.
    device : Device, optional
        Default: the current device.
    stream : Stream, optional
        The stream the memory is used on (default: the one published by
        :func:`allocation_stream`).  On a stream that is capturing a graph
        (:meth:`Stream.begin_capture <gpuarray.Stream.begin_capture>`) the
        memory is graph memory, owned by the graph and the returned pointer.

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
    if (checkpoint().capturing or _capture_foreign.maybe_external(stream)) and nbytes > 0:
        mem = _capture_alloc(nbytes, device, stream)
        if mem is not None:
            return mem
    if nbytes > 0:  # when that device's primary context is current already, no activation
        current = current_primary()
        if current is not None and (device is None or device is current):
            return allocate_current(nbytes, current)
    dev = device if device is not None else get_device()
    if nbytes == 0:
        return MemoryPointer(dev, 0, 0)
    mgr = get_memory_manager(dev)
    with dev.activate():
        return _checked(mgr, "memalloc", nbytes, mgr.memalloc(nbytes), MemoryPointer)


def _release_held_frees() -> None:
    """The last capture of gpuarray ended: run the frees held meanwhile (``_driver/_checkpoint.py``)."""
    for mgr in list(_managers.values()):
        queue = getattr(mgr, "deallocations", None)
        if queue is not None:
            try:
                queue.clear()
            except Exception as e:  # a CUDA error of a free: the next gpuarray call raises it
                remember(e)


on_capture_end(_release_held_frees)


def _capture_alloc(nbytes: int, device: Device | None, stream: Any) -> MemoryPointer | None:
    """Graph memory when the allocation's stream is capturing (``_graph.py``), else None."""
    from .._graph import capture_alloc
    from ._stream_ordered import current_allocation_stream

    dev = device if device is not None else get_device()
    return capture_alloc(nbytes, dev, stream if stream is not None else current_allocation_stream(dev))


def allocate_current(nbytes: int, device: Device) -> MemoryPointer:
    """:func:`allocate` of ``nbytes > 0`` when ``device``'s primary context is already current.

    The same manager call and check, without entering ``device.activate()``
    (which would change nothing): for small hot paths that made sure of the
    context themselves (see ``_device.current_primary``).
    """
    mgr = _managers.get(device.id)
    if mgr is None:
        mgr = get_memory_manager(device)
    mem = mgr.memalloc(nbytes)
    return mem if type(mem) is MemoryPointer else _checked(mgr, "memalloc", nbytes, mem, MemoryPointer)


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
