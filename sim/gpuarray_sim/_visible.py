"""``CUDA_VISIBLE_DEVICES`` for the simulator: which machine devices a process sees.

Dask-CUDA and MPI launchers pin each worker process to a GPU by setting
``CUDA_VISIBLE_DEVICES``; the real driver then shows that GPU as device 0
with its own name and UUID.  The simulator does the same: a
``SimBackend`` models a machine of ``GPUARRAY_SIM_DEVICES`` devices, and a
process sees those the variable selects, renumbered from 0, each keeping
its machine identity (name, UUID, PCI bus id, compute capability).  Memory
is per process, as everything in the simulator: two processes that see the
same device do not share its memory (only IPC does, see ``_ipc.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["machine_uuid", "uuid_text", "parse_visible_devices", "visible_list"]


def machine_uuid(machine_device: int) -> bytes:
    """The 16-byte UUID of a simulated machine's device."""
    return b"gpuarray-sim" + machine_device.to_bytes(4, "little")


def uuid_text(uuid: bytes) -> str:
    """A 16-byte UUID as nvidia-smi and ``CUDA_VISIBLE_DEVICES`` write it: ``GPU-xxxxxxxx-...``."""
    h = uuid.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def parse_visible_devices(text: str | None, uuids: Sequence[bytes]) -> list[int]:
    """The machine devices ``CUDA_VISIBLE_DEVICES=text`` makes visible, in order.

    CUDA's rules: unset, all devices; otherwise a comma-separated list of
    device indices or UUIDs (``GPU-`` and enough leading hex digits to name
    one device), enumerated in that order.  Enumeration stops at the first
    entry that names no device (out of range, ``-1``, an ambiguous or
    unknown UUID, a device already listed), so ``"0,2,-1,1"`` shows devices
    0 and 2, and ``""`` or ``"-1"`` none.

    Parameters
    ----------
    text : str or None
        The value of ``CUDA_VISIBLE_DEVICES`` (None: not set).
    uuids : sequence of bytes
        The 16-byte UUID of each machine device.

    Returns
    -------
    list of int
    """
    if text is None:
        return list(range(len(uuids)))
    names = [uuid_text(u).lower() for u in uuids]
    out: list[int] = []
    for entry in text.split(","):
        entry = entry.strip()
        if entry.startswith("GPU-"):
            hits = [i for i, n in enumerate(names) if n.startswith(entry.lower())]
            index = hits[0] if len(hits) == 1 else -1
        else:
            try:
                index = int(entry)
            except ValueError:
                index = -1
        if not 0 <= index < len(uuids) or index in out:
            break
        out.append(index)
    return out


def visible_list(devices: int, visible: Sequence[int] | None) -> list[int]:
    if visible is None:
        return list(range(devices))
    out = [int(v) for v in visible]
    for v in out:
        if not 0 <= v < devices:
            raise ValueError(f"visible device {v} is not one of the simulator's {devices} devices")
    if len(set(out)) != len(out):
        raise ValueError(f"visible devices {out} list a device twice")
    return out
