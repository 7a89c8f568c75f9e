"""Numba's context and device-list API as a thin facade over gpuarray's layers.

One concern: the names ``numba.cuda`` code uses to reach its context and
devices -- ``current_context()``, ``gpus``, ``list_devices()``, ``detect()``,
``close()``, ``open_ipc_array()`` -- answered by what gpuarray already has
(devices and their primary contexts, the active memory manager, streams and
events).  Nothing here allocates or synchronises on its own: each member
forwards to the function a gpuarray user would call.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from . import _layout
from ._device import Device, device_count, get_device
from ._driver import get_backend
from ._stream import (
    Event,
    Stream,
    default_stream,
    event,
    external_stream,
    legacy_default_stream,
    per_thread_default_stream,
    stream,
)
from .memory import (
    IpcHandle,
    MemoryInfo,
    MemoryPointer,
    PinnedMemory,
    allocate,
    get_memory_info,
    get_memory_manager,
)
from .memory import host_alloc as _host_alloc
from .memory import host_pin as _host_pin
from .memory._managed import managed_alloc
from .memory._pointer import ManagedMemory

__all__ = ["Context", "current_context", "gpus", "list_devices", "detect", "close",
           "open_ipc_array"]


class Context:
    """The context of one device, with Numba's ``Context`` members.

    Made by :func:`current_context`; the constructor is not public.  It
    stands for the device's primary context (the one CuPy, PyTorch and the
    CUDA runtime share) and forwards every member to gpuarray: memory to the
    active memory manager, streams and events to their factories.

    Attributes
    ----------
    device : Device
    handle : int
        The primary context's handle.

    Examples
    --------
    >>> ctx = gpuarray.current_context()
    >>> ctx.device == gpuarray.get_device()
    True
    >>> ctx.get_memory_info().free <= ctx.get_memory_info().total
    True
    """

    __slots__ = ("device",)
    device: Device

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Context objects are made by gpuarray.current_context()")

    @classmethod
    def _make(cls, device: Device) -> Context:
        self = object.__new__(cls)
        self.device = device
        return self

    @property
    def handle(self) -> int:
        """The primary context's handle."""
        return self.device.context_handle

    @property
    def id(self) -> int:
        """The device ordinal (as Numba's ``context.device.id``)."""
        return self.device.id

    @property
    def memory_manager(self) -> Any:
        """The active memory manager instance of this device."""
        return get_memory_manager(self.device)

    @property
    def deallocations(self) -> Any:
        """The manager's deferred-deallocation queue (``len()``, ``clear()``).

        Raises
        ------
        AttributeError
            When the active manager keeps no queue (a plugin that frees at once).
        """
        q = getattr(self.memory_manager, "deallocations", None)
        if q is None:
            raise AttributeError(f"memory manager {type(self.memory_manager).__name__} has no "
                                 "deferred-deallocation queue")
        return q

    # ------------------------------------------------------------ memory
    def get_memory_info(self) -> MemoryInfo:
        """Free and total device memory (bytes), from the memory manager.

        Returns
        -------
        MemoryInfo
        """
        return get_memory_info(self.device)

    def memalloc(self, size: int) -> MemoryPointer:
        """Allocate device memory through the memory manager.

        Parameters
        ----------
        size : int

        Returns
        -------
        MemoryPointer
        """
        return allocate(_size(size), self.device)

    def memhostalloc(self, size: int, mapped: bool = False, portable: bool = False,
                     wc: bool = False) -> PinnedMemory:
        """Allocate page-locked host memory through the memory manager.

        Parameters
        ----------
        size : int
        mapped, portable, wc : bool
            As ``cuMemHostAlloc``'s flags.

        Returns
        -------
        PinnedMemory or MappedMemory
        """
        return _host_alloc(_size(size), mapped, portable, wc, device=self.device)

    def mempin(self, owner: Any, pointer: Any, size: int, mapped: bool = False) -> PinnedMemory:
        """Page-lock existing host memory through the memory manager.

        Parameters
        ----------
        owner : object
            Kept alive while the memory is pinned.
        pointer : int
            Host address.
        size : int
        mapped : bool

        Returns
        -------
        PinnedMemory or MappedMemory
        """
        return _host_pin(owner, int(getattr(pointer, "value", pointer)), _size(size), mapped,
                         device=self.device)

    def memallocmanaged(self, size: int, attach_global: bool = True) -> ManagedMemory:
        """Allocate managed (unified) memory (``cuMemAllocManaged``).

        Parameters
        ----------
        size : int
        attach_global : bool, default True

        Returns
        -------
        ManagedMemory
        """
        return managed_alloc(_size(size), attach_global, self.device)

    def memfree(self, pointer: MemoryPointer) -> None:
        """Release memory now: its free is queued on the deferred-deallocation queue.

        Parameters
        ----------
        pointer : MemoryPointer
        """
        pointer.free()

    def get_ipc_handle(self, memory: MemoryPointer) -> IpcHandle:
        """An IPC handle of device memory, from the memory manager.

        Parameters
        ----------
        memory : MemoryPointer

        Returns
        -------
        IpcHandle
        """
        with self.device.activate():
            return self.memory_manager.get_ipc_handle(memory)

    def reset(self) -> None:
        """Wait for the device, then run deferred frees and reset the memory manager.

        The primary context itself stays (other libraries share it).
        """
        self.device.synchronize()
        with self.device.activate():
            self.memory_manager.reset()

    # ---------------------------------------------------- streams, events
    def create_stream(self) -> Stream:
        """A new stream on this device.

        Returns
        -------
        Stream
        """
        return stream(device=self.device)

    def create_external_stream(self, ptr: int) -> Stream:
        """Wrap a stream handle created elsewhere.

        Parameters
        ----------
        ptr : int

        Returns
        -------
        Stream
        """
        return external_stream(int(ptr), device=self.device)

    def get_default_stream(self) -> Stream:
        """The library default stream of this device.

        Returns
        -------
        Stream
        """
        return default_stream(self.device)

    def get_legacy_default_stream(self) -> Stream:
        """The legacy default stream of this device.

        Returns
        -------
        Stream
        """
        return legacy_default_stream(self.device)

    def get_per_thread_default_stream(self) -> Stream:
        """The per-thread default stream of this device.

        Returns
        -------
        Stream
        """
        return per_thread_default_stream(self.device)

    def create_event(self, timing: bool = True) -> Event:
        """A new event on this device.

        Parameters
        ----------
        timing : bool, default True

        Returns
        -------
        Event
        """
        with self.device.activate():
            return event(timing)

    # -------------------------------------------------------------- misc
    def synchronize(self) -> None:
        """Wait for all work on this device."""
        self.device.synchronize()

    def can_access_peer(self, peer_device: Any) -> bool:
        """Whether this device can access ``peer_device``'s memory.

        Parameters
        ----------
        peer_device : int or Device

        Returns
        -------
        bool
        """
        peer = getattr(peer_device, "id", peer_device)
        return get_backend().device_can_access_peer(self.device.id, int(peer))

    def push(self) -> None:
        """Make this context current on the calling thread (pair with :meth:`pop`)."""
        self.device._push()

    def pop(self) -> None:
        """Restore the context that was current before :meth:`push`."""
        self.device.__exit__(None, None, None)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Context) and other.device == self.device

    def __hash__(self) -> int:
        return hash(("gpuarray.Context", self.device.id))

    def __repr__(self) -> str:
        return f"<gpuarray.Context of device {self.device.id}>"


def _size(size: Any) -> int:
    if isinstance(size, bool) or not hasattr(size, "__index__"):
        raise TypeError(f"size must be an int, got {type(size).__name__} {size!r}")
    n = size.__index__()
    if n < 0:
        raise ValueError(f"size must be non-negative, got {n}")
    return n


#: The Context of each device, with the Device it was made for: a replaced
#: backend (tests) makes new Device objects, and their contexts are made anew.
_contexts: dict[int, tuple[Device, Context]] = {}


def current_context(devnum: int | None = None) -> Context:
    """The context of the current device (Numba's ``cuda.current_context()``).

    Parameters
    ----------
    devnum : int, optional
        Select this device first (as ``gpuarray.select_device(devnum)``).

    Returns
    -------
    Context

    Raises
    ------
    ValueError
        If ``devnum`` is not a device of this machine.

    Examples
    --------
    >>> gpuarray.current_context().deallocations.clear()
    """
    if devnum is not None:
        dev = get_device(devnum)
        dev.make_current()
    else:
        dev = get_device()
    entry = _contexts.get(dev.id)
    if entry is None or entry[0] is not dev:
        entry = _contexts[dev.id] = (dev, Context._make(dev))
    return entry[1]


class _DeviceList:
    """The devices of this machine, indexable (Numba's ``cuda.gpus``).

    ``len(gpuarray.gpus)``, ``gpuarray.gpus[i]`` (a :class:`Device`, usable
    as ``with gpuarray.gpus[i]:``), iteration, and ``gpuarray.gpus.current``.
    """

    def __len__(self) -> int:
        return device_count()

    def __getitem__(self, index: int) -> Device:
        n = device_count()
        i = index.__index__() if hasattr(index, "__index__") and not isinstance(index, bool) else None
        if i is None:
            raise TypeError(f"gpus[...] takes an int, got {type(index).__name__} {index!r}")
        if not -n <= i < n:
            raise IndexError(f"device index {index} out of range: there {'is' if n == 1 else 'are'} "
                             f"{n} device{'s' * (n != 1)}")
        return get_device(i % n)

    def __iter__(self) -> Iterator[Device]:
        return iter([get_device(i) for i in range(device_count())])

    @property
    def lst(self) -> list[Device]:
        """The devices as a list (Numba's attribute)."""
        return list(self)

    @property
    def current(self) -> Device:
        """The calling thread's current device."""
        return get_device()

    def __repr__(self) -> str:
        return f"<gpuarray.gpus: {len(self)} device(s)>"


#: The devices of this machine (Numba's ``cuda.gpus``): ``len(gpus)``,
#: ``gpus[i]``, ``with gpus[i]:``, ``gpus.current``.
gpus = _DeviceList()


def list_devices() -> list[Device]:
    """All devices of this machine (Numba's ``cuda.list_devices()``).

    Returns
    -------
    list of Device

    Examples
    --------
    >>> [d.id for d in gpuarray.list_devices()]
    [0]
    """
    return list(gpus)


def detect(file: Any = None) -> bool:
    """Print the devices found and whether gpuarray supports them (Numba's ``detect()``).

    Parameters
    ----------
    file : file-like, optional
        Where to print (default: standard output).

    Returns
    -------
    bool
        Whether at least one supported device was found.

    Examples
    --------
    >>> gpuarray.detect()   # doctest: +ELLIPSIS
    Found 1 CUDA devices
    id 0    gpuarray simulated device 0 (sm_90)    [SUPPORTED]
    ...
    True
    """
    out = file if file is not None else sys.stdout
    try:
        n = device_count()
    except Exception as e:  # no driver: say why, as Numba does
        print(f"CUDA is not available: {e}", file=out)
        return False
    print(f"Found {n} CUDA devices", file=out)  # Numba's wording, whatever n
    supported = 0
    for i in range(n):
        dev = get_device(i)
        major, minor = dev.compute_capability
        ok = (major, minor) >= (5, 0)
        supported += ok
        print(f"id {i}    {dev.name}    [{'SUPPORTED' if ok else 'NOT SUPPORTED (CC < 5.0)'}]",
              file=out)
        print(f"          Compute Capability: {major}.{minor}", file=out)
        print(f"          Total memory: {dev.total_memory} bytes", file=out)
    print(f"Summary:\n\t{supported}/{n} devices are supported", file=out)
    return supported > 0


def close() -> None:
    """Finish gpuarray's work on every device (Numba's ``cuda.close()``).

    Waits for every device gpuarray has used, runs deferred frees, resets
    their memory managers and leaves no context current on the calling
    thread.  Devices never used are not touched (no context is made for them).  Unlike Numba, the
    primary contexts are not destroyed (CuPy, PyTorch and the CUDA runtime
    share them); the next call uses them again.

    Examples
    --------
    >>> gpuarray.close()
    >>> gpuarray.current_context().device.id
    0
    """
    from . import _device

    for dev in list(_device._devices.values()):  # only devices already in use: no new contexts
        Context._make(dev).reset()
    get_backend().ctx_set_current(0)


@contextlib.contextmanager
def open_ipc_array(handle: Any, shape: Any, dtype: Any, strides: Any = None,
                   offset: int = 0) -> Iterator[Any]:
    """Open a raw IPC memory handle as a device array for a ``with`` block (Numba's function).

    Parameters
    ----------
    handle : bytes, sequence of int, or IpcHandle
        The 64-byte ``CUipcMemHandle`` of an allocation made in another
        process (``bytes``, or the integers of Numba's ``handle.reserved``).
    shape : int or tuple of int
    dtype : data-type
    strides : tuple of int, optional
        Byte strides; C-contiguous when omitted.
    offset : int, default 0
        Byte offset of the array inside the allocation.

    Yields
    ------
    DeviceNDArray

    Raises
    ------
    ValueError
        If the handle is not 64 bytes.
    CudaError
        From ``cuIpcOpenMemHandle`` (in the process that made the handle).

    Examples
    --------
    >>> with gpuarray.open_ipc_array(raw, (4,), np.float32) as arr:   # doctest: +SKIP
    ...     host = arr.copy_to_host()
    """
    import numpy as np

    if isinstance(handle, IpcHandle):
        raw = handle.handle
    else:
        raw = bytes(bytearray(handle))
    if len(raw) != 64:
        raise ValueError(f"an IPC memory handle is 64 bytes, got {len(raw)}")
    dt = np.dtype(dtype)
    shp = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
    if strides is None:
        st = _layout.c_strides(shp, dt.itemsize)
    else:
        st = tuple(int(x) for x in strides)
        if len(st) != len(shp):
            raise ValueError(f"strides {st} do not match shape {shp}")
    lo, hi = _layout.extent(shp, st, dt.itemsize)
    h = IpcHandle(raw, hi - lo, b"", int(offset))
    arr = h.open_array(get_device(), shp, dt, strides)
    try:
        yield arr
    finally:
        h.close()
