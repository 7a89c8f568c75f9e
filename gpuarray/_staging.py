"""A page-locked staging ring for large transfers from or to pageable memory.

A pageable host buffer cannot be copied asynchronously; the driver stages it
through its own page-locked memory, one chunk at a time, blocking the host.
Here a ring of page-locked slots (from the active memory manager) lets the
host copy chunk *i+1* while the copy engine moves chunk *i*:

- host to device: copy a chunk into a free slot, enqueue its copy to the
  device on the stream, record the slot's event; a slot is reused only after
  its event has completed.  The call returns once every chunk is in a slot,
  so the caller may reuse its buffer, as with CUDA's own pageable copies;
- device to host: enqueue each chunk's copy into a slot, and copy the
  previous chunk out of its slot once its event completes.  The data is in
  the caller's buffer when the call returns.

Used for pageable transfers of at least ``GPUARRAY_STAGING_MIN`` bytes
(default 4 MiB; 0 disables the ring).  Chunk size ``GPUARRAY_STAGING_CHUNK``
(default 4 MiB), 4 slots per device.
"""

from __future__ import annotations

import threading

import numpy as np

from . import _config
from ._device import Device
from ._driver import get_backend
from ._stream import Event, Stream
from .interop import _core as _cap
from .memory import host_alloc
from .memory._host import host_array_over

__all__ = ["staging_threshold", "htod", "dtoh"]

_SLOTS = 4


def staging_threshold() -> int:
    """Smallest pageable transfer that goes through the ring (0: never)."""
    return _config.get().staging_min


class _Ring:
    def __init__(self, device: Device, chunk: int) -> None:
        self.lock = threading.Lock()
        self.chunk = chunk
        with device.activate():
            self.buffers = [host_array_over(host_alloc(chunk, device=device), (chunk,), np.uint8)
                            for _ in range(_SLOTS)]
            self.events = [Event._make(device, False) for _ in range(_SLOTS)]
        self.used = [False] * _SLOTS


_rings: dict[tuple[int, int], _Ring] = {}
_rings_lock = threading.Lock()


def _ring(device: Device) -> _Ring:
    chunk = _config.get().staging_chunk
    key = (device.id, chunk)
    ring = _rings.get(key)
    if ring is None:
        with _rings_lock:
            ring = _rings.get(key)
            if ring is None:
                ring = _rings[key] = _Ring(device, chunk)
    return ring


def _wait(ring: _Ring, slot: int) -> None:
    if ring.used[slot]:
        ring.events[slot].synchronize()


def htod(device: Device, s: Stream, dst: int, src: np.ndarray) -> None:
    """Copy the bytes of contiguous host array ``src`` to device address ``dst`` on ``s``."""
    flat = src.reshape(-1).view(np.uint8)
    ring = _ring(device)
    b = get_backend()
    with ring.lock, device.activate():
        for i, off in enumerate(range(0, flat.size, ring.chunk)):
            slot = i % _SLOTS
            n = min(ring.chunk, flat.size - off)
            _wait(ring, slot)
            buf = ring.buffers[slot]
            np.copyto(buf[:n], flat[off:off + n])
            b.memcpy_htod_async(dst + off, _cap.host_address(buf), n, s.handle)
            b.event_record(ring.events[slot].handle, s.handle)
            ring.used[slot] = True


def dtoh(device: Device, s: Stream, dst: np.ndarray, src: int) -> None:
    """Copy ``dst.nbytes`` bytes from device address ``src`` into contiguous host array ``dst``."""
    flat = dst.reshape(-1).view(np.uint8)
    ring = _ring(device)
    b = get_backend()
    pending: list[tuple[int, int, int]] = []  # (slot, offset, size) in flight

    def drain_one() -> None:
        slot, off, n = pending.pop(0)
        ring.events[slot].synchronize()
        np.copyto(flat[off:off + n], ring.buffers[slot][:n])

    with ring.lock, device.activate():
        for i, off in enumerate(range(0, flat.size, ring.chunk)):
            slot = i % _SLOTS
            if len(pending) == _SLOTS:
                drain_one()
            _wait(ring, slot)
            n = min(ring.chunk, flat.size - off)
            b.memcpy_dtoh_async(_cap.host_address(ring.buffers[slot]), src + off, n, s.handle)
            b.event_record(ring.events[slot].handle, s.handle)
            ring.used[slot] = True
            pending.append((slot, off, n))
        while pending:
            drain_one()


def _reset_for_tests() -> None:
    with _rings_lock:
        _rings.clear()
