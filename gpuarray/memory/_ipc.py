"""IPC handles: share a device allocation with another process.

An :class:`IpcHandle` is picklable: it holds the driver's 64-byte handle of
the *allocation*, the byte offset of the shared pointer inside it (views
share their base allocation), the size, and the UUID of the source device.
The receiving process calls :meth:`IpcHandle.open` once.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from .._device import Device, get_device
from .._driver import get_backend
from ._pointer import MemoryPointer

__all__ = ["IpcHandle"]


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

    Examples
    --------
    >>> h = arr.get_ipc_handle()          # doctest: +SKIP
    >>> with h as mem: ...                 # in another process   # doctest: +SKIP
    """

    handle: bytes
    size: int
    source_uuid: bytes
    offset: int = 0

    def __post_init__(self) -> None:
        self._opened: MemoryPointer | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"handle": self.handle, "size": self.size, "source_uuid": self.source_uuid,
                "offset": self.offset}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    @classmethod
    def from_memory(cls, memory: MemoryPointer) -> "IpcHandle":
        """The handle of the allocation containing ``memory``.

        Parameters
        ----------
        memory : MemoryPointer
        """
        b = get_backend()
        dev = memory.context if isinstance(memory.context, Device) else get_device()
        with dev.activate():
            info = b.pointer_info(memory.device_pointer)
            base = info.base or memory.device_pointer
            raw = b.ipc_get_mem_handle(base)
        return cls(raw, memory.size, dev.uuid, memory.device_pointer - base)

    def open(self, device: Device | None = None) -> MemoryPointer:
        """Map the memory into this process (once per handle).

        Parameters
        ----------
        device : Device, optional
            Default: the current device.

        Returns
        -------
        MemoryPointer
            Closes the mapping when its last reference dies.

        Raises
        ------
        ValueError
            If this handle was already opened.
        """
        with self._lock:
            if self._opened is not None:
                raise ValueError("this IpcHandle is already open; close() it first")
            dev = device if device is not None else get_device()
            b = get_backend()
            with dev.activate():
                base = b.ipc_open_mem_handle(self.handle)

            def close(base=base, dev=dev):
                with dev.activate():
                    b.ipc_close_mem_handle(base)

            whole = MemoryPointer(dev, base, self.offset + self.size, finalizer=close)
            self._opened = whole.view(self.offset, self.offset + self.size)
            return self._opened

    def close(self) -> None:
        """Drop this handle's reference to the opened memory."""
        with self._lock:
            self._opened = None

    def __enter__(self) -> MemoryPointer:
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()
