"""IPC handles: share a device allocation with another process.

An :class:`IpcHandle` is plain, picklable data: the driver's 64-byte handle of
the *allocation* (CUDA IPC names whole allocations), the byte offset and size
of the shared range inside it (views share their base allocation), and the
UUID of the source device.  The receiving process calls :meth:`IpcHandle.open`
once (or uses the handle as a context manager); :meth:`IpcHandle.close`
unmaps.  CUDA refuses to open a handle in the process that made it.

What ``open()`` returns is decided by whoever made the handle, not by this
layer: a handle may carry a ``factory`` -- a module-level callable, pickled
by reference -- and ``factory_args``; ``open()`` then returns
``factory(*factory_args, memory)`` where ``memory`` points ``origin`` bytes
into the shared range.  ``DeviceNDArray.get_ipc_handle()`` puts the array
class and its shape, strides and dtype there, so the other process gets an
array while this layer never imports the array layer nor knows shapes.  A
handle without a factory (``get_memory_manager().get_ipc_handle(ptr)``)
opens as a :class:`MemoryPointer`.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any

from .._device import Device, device_count, get_device
from .._driver import checkpoint, get_backend
from .._driver._checkpoint import on_capture_end
from .._driver._finalize import run_finalizer
from ._pointer import MemoryPointer

__all__ = ["IpcHandle"]

#: Builds an array over opened memory, ``factory(shape, strides, dtype, stream,
#: memory)``: set by the array layer when it is imported (this layer never
#: imports it).
_array_factory: Any = None


#: Mappings whose close waits for the end of gpuarray's captures (``_driver/_checkpoint.py``).
_held: list[tuple[Any, Device, int]] = []


def _close_mapping(backend, device: Device, base: int) -> None:
    # Work queued on the mapping must finish before it goes away: a device-wide
    # wait, which a capture forbids (it would invalidate it): while gpuarray
    # captures, the close is held until the last capture ends.
    if checkpoint().capturing:
        _held.append((backend, device, base))
        return
    if get_backend() is not backend:
        return  # the backend was replaced (tests): the mapping went with it
    with device.activate():
        backend.ctx_synchronize()
        backend.ipc_close_mem_handle(base)


def _release_held() -> None:
    # Popped one at a time: a close that a finalizer holds meanwhile (a capture began
    # on another thread) is appended, never lost between a copy and a clear; as many
    # as were held, so one held again is not retried until that capture ends.
    for _ in range(len(_held)):
        try:
            backend, device, base = _held.pop(0)
        except IndexError:
            return
        run_finalizer(_close_mapping, backend, device, base)


on_capture_end(_release_held)


@dataclasses.dataclass
class IpcHandle:
    """A picklable handle to device memory of another process.

    Attributes
    ----------
    handle : bytes
        The driver's 64-byte IPC handle of the allocation.
    size : int
        Bytes shared, starting at ``offset``.
    source_uuid : bytes
        UUID of the device holding the memory.
    offset : int
        Byte offset of the shared memory inside the allocation.
    factory : callable, optional
        What ``open()`` builds over the memory: ``factory(*factory_args,
        memory)``; a module-level callable (pickled by reference).  None:
        ``open()`` returns the :class:`MemoryPointer`.
    factory_args : tuple
        Leading arguments of ``factory`` (for arrays: shape, strides, dtype,
        stream).
    origin : int
        Byte offset, inside the shared range, of the pointer given to
        ``factory`` (an array's element [0, ..., 0]: non-zero for negative
        strides).
    base : MemoryPointer or None
        In the process that made the handle, the shared memory: the handle
        keeps it allocated while it lives, so the memory cannot be freed
        (and its address reused) under another process that opens the
        handle (Numba's ``IpcHandle.base``).  Not pickled: None in a copy
        unpickled elsewhere.

    Examples
    --------
    >>> h = arr.get_ipc_handle()           # doctest: +SKIP
    >>> with h as other:                    # in another process   # doctest: +SKIP
    ...     other[0] = 1
    """

    handle: bytes
    size: int
    source_uuid: bytes
    offset: int = 0
    factory: Any = None
    factory_args: tuple = ()
    origin: int = 0
    base: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._mapping: MemoryPointer | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "base"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    @classmethod
    def from_memory(cls, memory: MemoryPointer) -> IpcHandle:
        """The handle of the allocation containing ``memory``.

        Parameters
        ----------
        memory : MemoryPointer
            Device memory from ``cuMemAlloc`` (or a view of it).

        Returns
        -------
        IpcHandle

        Raises
        ------
        ValueError
            For empty memory.
        """
        if memory.size == 0 or not memory.device_pointer:
            raise ValueError("cannot share empty memory through IPC")
        b = get_backend()
        dev = memory.context if isinstance(memory.context, Device) else get_device()
        with dev.activate():
            info = b.pointer_info(memory.device_pointer)
            base = info.base or memory.device_pointer
            raw = b.ipc_get_mem_handle(base)
        return cls(raw, memory.size, dev.uuid, memory.device_pointer - base, base=memory)

    @property
    def is_open(self) -> bool:
        """Whether this handle's memory is mapped in this process."""
        return self._mapping is not None

    def _local_device(self) -> Device:
        # The device with the source UUID when this process sees it, else the current one.
        for i in range(device_count()):
            dev = get_device(i)
            if dev.uuid == self.source_uuid:
                return dev
        return get_device()

    def open(self, device: Device | None = None) -> Any:
        """Map the memory into this process (once per handle until :meth:`close`).

        Parameters
        ----------
        device : Device, optional
            Where to map it.  Default: the local device with the source
            device's UUID, else the current device.

        Returns
        -------
        object
            ``factory(*factory_args, memory)`` when the handle has a factory
            (a :class:`~gpuarray.DeviceNDArray` for handles from
            ``DeviceNDArray.get_ipc_handle()``), else the
            :class:`MemoryPointer` of the shared range.  Either keeps the
            mapping alive; :meth:`close` unmaps it at once.

        Raises
        ------
        ValueError
            If this handle is already open.
        CudaError
            From ``cuIpcOpenMemHandle``: ``CUDA_ERROR_INVALID_CONTEXT`` in the
            process that made the handle.
        """
        whole = self._map(device)
        if self.factory is None:
            return whole.view(self.offset, self.offset + self.size)
        start = self.offset + self.origin
        try:
            return self.factory(*self.factory_args, whole.view(start, self.offset + self.size))
        except BaseException:
            self.close()  # nothing was handed out: do not leave the memory mapped
            raise

    def _map(self, device: Device | None) -> MemoryPointer:
        with self._lock:
            if self._mapping is not None:
                raise ValueError("this IpcHandle is already opened in this process; close() it "
                                 "before opening it again (or unpickle another copy)")
            dev = device if device is not None else self._local_device()
            b = get_backend()
            with dev.activate():
                base = b.ipc_open_mem_handle(self.handle)
            whole = MemoryPointer(dev, base, self.offset + self.size,
                                  finalizer=functools.partial(_close_mapping, b, dev, base))
            self._mapping = whole
        return whole

    def open_array(self, context: Any = None, shape: Any = None, dtype: Any = None,
                   strides: Any = None) -> Any:
        """Map the memory and view it as an array of ``shape`` and ``dtype`` (Numba's ``open_array``).

        Unlike :meth:`open`, the layout comes from the arguments, not from
        the handle (for handles of raw allocations, see
        :func:`gpuarray.open_ipc_array`).

        Parameters
        ----------
        context : Device or Context, optional
            Where to map it (Numba passes a context); default as :meth:`open`.
        shape : int or tuple of int
        dtype : data-type
        strides : tuple of int, optional
            Byte strides; C-contiguous when omitted.

        Returns
        -------
        DeviceNDArray
            Over the shared memory (the array keeps the mapping alive;
            :meth:`close` unmaps it at once).

        Raises
        ------
        TypeError
            If ``shape`` or ``dtype`` is missing.
        ValueError
            If the array would extend past the shared range, or the handle
            is already open.
        """
        if shape is None or dtype is None:
            raise TypeError("open_array() needs shape= and dtype=")
        if _array_factory is None:
            raise RuntimeError("gpuarray's array layer is not imported (import gpuarray)")
        device = getattr(context, "device", context)
        if device is not None and not isinstance(device, Device):
            raise TypeError(f"context must be a gpuarray Device or Context, got {type(context).__name__}")
        import numpy as np

        dt = np.dtype(dtype)
        shp = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
        if strides is None:
            need = int(np.prod(shp, dtype=np.int64)) * dt.itemsize
            lo = 0
        else:
            strides = tuple(int(x) for x in strides)
            if len(strides) != len(shp):
                raise ValueError(f"strides {strides} do not match shape {shp}")
            lo = sum((n - 1) * x for n, x in zip(shp, strides, strict=True) if x < 0 and n)
            hi = sum((n - 1) * x for n, x in zip(shp, strides, strict=True) if x > 0 and n)
            need = (hi - lo + dt.itemsize) if all(shp) else 0
        if need > self.size:
            raise ValueError(f"an array of shape {shp} and dtype {dt} needs {need} bytes; the IPC "
                             f"handle shares {self.size}")
        whole = self._map(device)
        try:
            mem = whole.view(self.offset - lo, self.offset + self.size)
            return _array_factory(shp, strides, dt, None, mem)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Unmap the memory now (``cuIpcCloseMemHandle``), after the device's queued work.

        Arrays or pointers still over the memory must not be used afterwards.
        Closing a handle that is not open does nothing; it can be opened again.
        """
        with self._lock:
            whole, self._mapping = self._mapping, None
        if whole is not None:
            whole.free()

    def __enter__(self) -> Any:
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()
