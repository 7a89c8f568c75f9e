"""Simulated memory: device allocations, page-locked host memory, checked access.

Device addresses are tagged values in a non-canonical x86-64 range, so host
code cannot dereference them (they fault instead of reading host memory), and
they are never reused, so a use after free is always detected.  Every access
goes through :meth:`AddressSpace.resolve`, which checks that the whole byte
range lies inside one live allocation.

Mapped slack: an allocation's addresses are reserved in steps of
:data:`ALIGN`, and the bytes from its end to the next step
(``Allocation.slack``) are backed by memory, as they are mapped on a GPU
(its pages are multiples of 512 bytes and allocations start 512-aligned, so
those bytes always share a page with the allocation's last byte).  A kernel
translated from PTX that reads or writes there does not fault, as on a GPU;
the access is reported as compute-sanitizer's memcheck reports it
(``_memcheck.py``), or is a fault in strict mode.  Copies, memsets and
gpuarray's own kernels are checked against ``size`` alone.

Page-locked host memory (``mem_host_alloc`` or ``mem_host_register``) is real
host memory; it is tracked here so copies know they are asynchronous and so
mapped memory can be read by simulated kernels through its device address
(which equals its host address, as with unified addressing).
"""

from __future__ import annotations

import bisect
import ctypes
import dataclasses
import itertools
from typing import Any

import numpy as np

from gpuarray.errors import CudaError, CudaOutOfMemoryError

from ._codes import ILLEGAL_ADDRESS

#: Start of simulated device addresses (non-canonical: bit 52 set).
DEVICE_BASE = 0x0010_0000_0000_0000
#: Address space reserved per simulated device.
DEVICE_SPAN = 1 << 44
#: Allocation granularity and alignment (cuMemAlloc aligns to at least 256).
ALIGN = 512
#: Fresh allocations up to this size are filled with 0xFF (NaN / -1) so that
#: reading memory nobody wrote shows up as wrong data, as on a GPU.
POISON_LIMIT = 64 << 20

INVALID_VALUE = 1


class DeviceFault(Exception):
    """An error found while simulated device work ran; reported at a sync point."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclasses.dataclass(eq=False)
class Allocation:
    """One simulated allocation (device memory or page-locked host memory)."""

    base: int
    size: int
    device: int  # owning device ordinal (-1: host memory usable by any device)
    kind: str  # "device", "pool", "pinned", "registered", "ipc", "managed", "graph"
    store: np.ndarray | None = None  # device bytes; None for host kinds
    mapped: bool = False
    alive: bool = True
    freed_by: str = ""
    races: list = dataclasses.field(default_factory=list)  # race-detector records
    #: Graph memory (kind "graph") whose address is reserved but not mapped
    #: now: why (accessing it is an illegal address, as on a GPU); "" when mapped.
    unmapped: str = ""
    graph: Any = None  # the graph (``_graph.SimGraph``) whose allocation node reserved it
    #: The context it was allocated in (``_sched.SimContext``): destroying or
    #: resetting that context frees it, and only it.  None: no context owns it.
    owner: Any = None
    #: Unique in the process (``CU_POINTER_ATTRIBUTE_BUFFER_ID``).
    serial: int = dataclasses.field(default_factory=itertools.count(1).__next__)
    #: ``cuMemHostAlloc``'s flags (``CU_MEMHOSTALLOC_*``) of page-locked memory ("pinned").
    flags: int = 0
    #: ``CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`` as ``cuPointerSetAttribute`` set it.
    sync_memops: bool = False
    #: The memory pool it came from (``_pools.SimPool``: stream-ordered allocations, and
    #: pointers imported from another process's pool), and the bytes it counts there.
    pool: Any = None
    pool_bytes: int = 0
    #: Shared memory behind it (the mapping of a pool file region, ``_pools.PoolFile``) and
    #: the region's offset in the file (-1: none).
    mapping: Any = None
    file_offset: int = -1
    #: What cuMemAdvise and prefetches recorded for managed memory (``_managed_calls.py``).
    advice: Any = None
    #: Mapped bytes past ``size`` (to the next :data:`ALIGN` step) whose memory
    #: the store (or host buffer) also holds: see the module docstring.
    slack: int = 0

    @property
    def is_host(self) -> bool:
        return self.kind in ("pinned", "registered")

    @property
    def mapped_now(self) -> bool:
        """``CU_POINTER_ATTRIBUTE_MAPPED``: False for graph memory no launch maps.  A GPU maps a
        graph's memory when the graph is launched (or uploaded), on the host: a launch still
        queued counts, though its accesses fault until its allocation node has run."""
        return not self.unmapped or (self.graph is not None and self.base in self.graph.unfreed)

    def describe(self) -> str:
        where = f"device {self.device}" if not self.is_host else "host"
        return f"{self.kind} allocation 0x{self.base:x}+{self.size} ({where})"


class AddressSpace:
    """All simulated allocations of the process, device and host alike."""

    def __init__(self, capacities: list[int]) -> None:
        self.capacities = list(capacities)
        self.used = [0] * len(capacities)
        self._next = [DEVICE_BASE + d * DEVICE_SPAN for d in range(len(capacities))]
        self._starts: list[int] = []  # sorted bases of every allocation ever made
        self._allocs: list[Allocation] = []  # parallel to _starts
        self._host_buffers: dict[int, np.ndarray] = {}  # base -> numpy buffer (mem_host_alloc)

    # ------------------------------------------------------------ bookkeeping
    def _insert(self, a: Allocation) -> None:
        i = bisect.bisect_left(self._starts, a.base)
        self._starts.insert(i, a.base)
        self._allocs.insert(i, a)

    def _remove(self, a: Allocation) -> None:
        i = bisect.bisect_left(self._starts, a.base)
        while i < len(self._allocs) and self._starts[i] == a.base:
            if self._allocs[i] is a:
                del self._starts[i]
                del self._allocs[i]
                return
            i += 1

    def find(self, address: int) -> Allocation | None:
        """The allocation (live, or freed device memory) containing ``address``.

        Entries never overlap: device addresses are never reused, and host
        ranges leave the table when freed or unregistered.
        """
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0:
            a = self._allocs[i]
            if address < a.base + a.size:
                return a
        return None

    def allocations(self) -> list[Allocation]:
        """Every allocation in the table, in address order (freed device memory included)."""
        return list(self._allocs)

    @staticmethod
    def is_device_address(address: int) -> bool:
        return address >= DEVICE_BASE

    # ----------------------------------------------------------- device side
    def alloc_device(self, device: int, nbytes: int, kind: str = "device",
                     call: str = "cuMemAlloc", owner: Any = None,
                     store: np.ndarray | None = None) -> Allocation:
        """A new device allocation; ``store``: bytes that back it (shared memory), else fresh ones."""
        if nbytes <= 0:
            raise CudaError(INVALID_VALUE, call, f"size {nbytes} is not positive")
        if self.used[device] + nbytes > self.capacities[device]:
            raise CudaOutOfMemoryError(
                2, call,
                f"while allocating {nbytes} bytes on simulated device {device} "
                f"({self.capacities[device] - self.used[device]} of "
                f"{self.capacities[device]} bytes free)")
        base = self._next[device]
        self._next[device] += granules(nbytes)
        slack = 0  # bytes a given store (a pool file's region) holds past nbytes are not ours
        if store is not None:
            if nbytes <= POISON_LIMIT:
                store[:] = 0xFF
        else:
            store = device_store(nbytes)
            slack = granules(nbytes) - nbytes
        a = Allocation(base, nbytes, device, kind, store, owner=owner, slack=slack)
        self.used[device] += nbytes
        self._insert(a)
        return a

    def free_device(self, ptr: int, call: str) -> Allocation:
        a = self.find(ptr)
        if a is None or a.is_host or a.base != ptr:
            raise CudaError(INVALID_VALUE, call, f"0x{ptr:x} is not the start of a device allocation")
        if not a.alive:
            raise CudaError(INVALID_VALUE, call, f"0x{ptr:x} was already freed ({a.freed_by})")
        a.alive = False
        a.freed_by = call
        a.store = None
        a.races.clear()
        if a.kind != "ipc":
            self.used[a.device] -= a.size
        if a.kind == "managed":  # real host memory: its addresses go back to the host allocator
            self._remove(a)
            del self._host_buffers[a.base]
        return a

    # ------------------------------------------------------------- host side
    def alloc_host(self, nbytes: int, mapped: bool, flags: int = 0, owner: Any = None) -> Allocation:
        if nbytes <= 0:
            raise CudaError(INVALID_VALUE, "cuMemHostAlloc", f"size {nbytes} is not positive")
        try:
            buf = np.zeros(nbytes + 4096, dtype=np.uint8)
        except (MemoryError, ValueError, OverflowError) as e:  # the host cannot give that much
            raise CudaOutOfMemoryError(2, "cuMemHostAlloc", f"while allocating {nbytes} bytes of "
                                                            f"page-locked host memory ({e})") from None
        base = (buf.ctypes.data + 4095) & ~4095
        a = Allocation(base, nbytes, -1, "pinned", None, mapped=mapped, owner=owner, flags=flags,
                       slack=granules(nbytes) - nbytes)  # inside buf's extra page
        self._host_buffers[base] = buf
        self._insert(a)
        return a

    def free_host(self, ptr: int, call: str = "cuMemFreeHost") -> Allocation:
        a = self.find(ptr)
        if a is None or a.kind != "pinned" or a.base != ptr or not a.alive:
            raise CudaError(INVALID_VALUE, call, f"0x{ptr:x} is not page-locked host memory from cuMemHostAlloc")
        a.alive = False
        a.freed_by = call
        self._remove(a)
        del self._host_buffers[ptr]
        return a

    def adopt_host(self, buf: Any, base: int, nbytes: int, owner: Any = None,
                   kind: str = "pinned") -> Allocation:
        """Page-locked host memory at ``base`` that ``buf`` (a mapping of shared memory) keeps.

        What a host memory pool allocates and what an imported host pool
        pointer maps: real, mapped host memory, freed by :meth:`free_host`.
        """
        a = Allocation(base, nbytes, -1, kind, None, mapped=True, owner=owner)
        self._host_buffers[base] = buf
        self._insert(a)
        return a

    def register_host(self, ptr: int, nbytes: int, mapped: bool, owner: Any = None) -> Allocation:
        call = "cuMemHostRegister"
        if ptr == 0 or nbytes <= 0 or self.is_device_address(ptr + nbytes - 1):
            raise CudaError(INVALID_VALUE, call, f"cannot register 0x{ptr:x}+{nbytes}")
        # Entries never overlap and are sorted: only the last one starting
        # below the range's end can reach into it.
        i = bisect.bisect_left(self._starts, ptr + nbytes) - 1
        if i >= 0:
            a = self._allocs[i]
            if a.alive and a.base + a.size > ptr:
                if a.is_host:
                    raise CudaError(712, call, f"0x{ptr:x}+{nbytes} overlaps {a.describe()}")
                raise CudaError(INVALID_VALUE, call, f"0x{ptr:x}+{nbytes} overlaps {a.describe()}: "
                                                     "only pageable host memory can be registered")
        why = unmapped(ptr, nbytes)
        if why:
            raise CudaError(INVALID_VALUE, call, f"0x{ptr:x}+{nbytes} is not host memory this "
                                                 f"process may register: {why}")
        a = Allocation(ptr, nbytes, -1, "registered", None, mapped=mapped, owner=owner)
        self._insert(a)
        return a

    def unregister_host(self, ptr: int) -> None:
        a = self.find(ptr)
        if a is None or a.kind != "registered" or a.base != ptr or not a.alive:
            raise CudaError(713, "cuMemHostUnregister", f"0x{ptr:x} is not registered")
        a.alive = False
        self._remove(a)

    def host_kind(self, address: int, nbytes: int) -> Allocation | None:
        """The page-locked allocation holding ``[address, address+nbytes)``, else None (pageable)."""
        a = self.find(address)
        if a is not None and a.alive and a.is_host and address + nbytes <= a.base + a.size:
            return a
        return None

    # --------------------------------------------------------------- access
    def resolve(self, address: int, nbytes: int, what: str, reserved: bool = False) -> tuple[Allocation, int]:
        """Check that ``[address, address+nbytes)`` is inside one live device
        (or mapped host) allocation; return it and the offset.

        Raises :class:`DeviceFault` with ``CUDA_ERROR_ILLEGAL_ADDRESS`` otherwise.
        ``reserved``: graph memory that is not mapped now passes (the checks a
        call makes of its arguments: the address is reserved; the access
        faults when the work runs, if it is still unmapped then).
        """
        a = self.find(address)
        if a is None:
            raise DeviceFault(ILLEGAL_ADDRESS, f"{what}: address 0x{address:x} is not in any allocation")
        if not a.alive:
            raise DeviceFault(ILLEGAL_ADDRESS, f"{what}: address 0x{address:x} is in {a.describe()} "
                                               f"which was freed ({a.freed_by}): use after free")
        if a.unmapped and not reserved:
            raise DeviceFault(ILLEGAL_ADDRESS, f"{what}: address 0x{address:x} is in {a.describe()}, "
                                               f"which is not mapped now: {a.unmapped}")
        if address + nbytes > a.base + a.size:
            raise DeviceFault(ILLEGAL_ADDRESS, f"{what}: bytes 0x{address:x}+{nbytes} run past the end "
                                               f"of {a.describe()} by {address + nbytes - a.base - a.size} bytes")
        return a, address - a.base

    def read(self, a: Allocation, offset: int, nbytes: int) -> np.ndarray:
        if a.store is not None:
            return a.store[offset:offset + nbytes].copy()
        out = np.empty(nbytes, dtype=np.uint8)
        if nbytes:
            ctypes.memmove(out.ctypes.data, a.base + offset, nbytes)
        return out

    def write(self, a: Allocation, offset: int, data) -> None:
        src = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
        if a.store is not None:
            a.store[offset:offset + src.size] = src
        elif src.size:
            ctypes.memmove(a.base + offset, src.ctypes.data, src.size)

    # ---------------------------------------------------------- managed memory
    def alloc_managed(self, device: int, nbytes: int, owner: Any = None) -> Allocation:
        """Managed (unified) memory: real host memory that device work may also access.

        Its address is a host address (host code reads and writes it), it is
        charged to ``device``'s capacity, and :meth:`free_device` releases it.
        """
        call = "cuMemAllocManaged"
        if nbytes <= 0:
            raise CudaError(INVALID_VALUE, call, f"size {nbytes} is not positive")
        if self.used[device] + nbytes > self.capacities[device]:
            raise CudaOutOfMemoryError(
                2, call, f"while allocating {nbytes} bytes of managed memory on simulated device "
                         f"{device} ({self.capacities[device] - self.used[device]} bytes free)")
        buf = np.full(nbytes + 4096, 0xFF, dtype=np.uint8)  # unwritten memory reads as garbage
        base = (buf.ctypes.data + 4095) & ~4095
        a = Allocation(base, nbytes, device, "managed", None, owner=owner,
                       slack=granules(nbytes) - nbytes)  # inside buf's extra page
        self.used[device] += nbytes
        self._host_buffers[base] = buf
        self._insert(a)
        return a


def granules(nbytes: int) -> int:
    """``nbytes`` rounded up to the allocation granularity (:data:`ALIGN`)."""
    return -(-nbytes // ALIGN) * ALIGN


def device_store(nbytes: int) -> np.ndarray:
    """The bytes of a fresh device allocation of ``nbytes``: a view of a buffer of
    :func:`granules` bytes (the allocation's mapped slack follows it there).

    Filled with 0xFF up to :data:`POISON_LIMIT` bytes (memory nobody wrote
    reads as NaN or -1), zeros above (lazily committed pages).
    """
    span = granules(nbytes)
    buf = np.full(span, 0xFF, dtype=np.uint8) if nbytes <= POISON_LIMIT else np.zeros(span, np.uint8)
    return buf[:nbytes]


def read_host(address: int, nbytes: int) -> np.ndarray:
    """Copy ``nbytes`` of real host memory at ``address``."""
    out = np.empty(nbytes, dtype=np.uint8)
    if nbytes:
        ctypes.memmove(out.ctypes.data, address, nbytes)
    return out


def write_host(address: int, data: np.ndarray) -> None:
    """Write bytes to real host memory at ``address``."""
    if data.size:
        ctypes.memmove(address, data.ctypes.data, data.size)


def unmapped(address: int, nbytes: int) -> str:
    """Why ``[address, address+nbytes)`` is not readable and writable memory of this process ("" if it is).

    Read from ``/proc/self/maps`` (Linux): every byte must lie in a mapping
    with read and write permission, so registering an address the process
    has not mapped (``0x1000``) or a range running past the end of its
    mapping is refused when called, not a crash of the first copy that
    touches it.  Where the table cannot be read, nothing is refused here.
    """
    try:
        with open("/proc/self/maps", "rb") as f:
            lines = f.read().split(b"\n")
    except OSError:
        return ""
    spans: list[tuple[int, int, str]] = []
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) >= 2:
            start, _, stop = parts[0].partition(b"-")
            spans.append((int(start, 16), int(stop, 16), parts[1].decode()))
    spans.sort()
    at, end = address, address + nbytes
    for lo, hi, perms in spans:
        if hi <= at:
            continue
        if lo > at:
            break
        if not perms.startswith("rw"):
            return f"0x{at:x} is in a mapping without read and write permission ({perms})"
        at = hi
        if at >= end:
            return ""
    if at == address:
        return f"0x{address:x} is not mapped in this process"
    return f"the range runs past the mapped memory at 0x{at:x}"
