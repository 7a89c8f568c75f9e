"""Memory pools: what a pool is, its bookkeeping, and the file that shares one with another process.

One concern: the model behind the ``cuMemPool*`` calls (``_pool_calls.py``
serves them).  A pool (:class:`SimPool`) is where stream-ordered
allocations come from: a device's default pool (``cuMemAllocAsync``), the
default pools of the other locations and allocation types
(``cuMemGetDefaultMemPool``: page-locked host memory, managed memory), and
pools made by ``cuMemPoolCreate``.  It keeps what cuda.h lets a program
see of it:

- **used** bytes (the live allocations, each rounded up to the allocation
  granularity, :data:`GRAIN`) and **reserved** bytes (the backing memory:
  used bytes rounded up to :data:`RESERVE` chunks, plus what frees gave back
  and the pool keeps), each with its high watermark, which only a reset to
  0 lowers;
- the **release threshold**: at a synchronisation (``cuStreamSynchronize``,
  ``cuEventSynchronize``, ``cuCtxSynchronize``) a pool holding more reserved
  memory than its threshold gives the rest back (:func:`release`), as cuda.h
  describes; ``cuMemPoolTrimTo`` does the same at once (:func:`trim`);
- the three reuse flags (kept and answered; the simulator never reuses
  addresses, so no policy changes what an allocation gets), the maximum
  size (an allocation past it is ``CUDA_ERROR_OUT_OF_MEMORY``), and the
  access descriptors (``cuMemPoolSetAccess``; the owning location always
  reads and writes).

Sharing (``CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR``): a pool created with
that handle type keeps its memory in an anonymous shared file
(``memfd_create``, :class:`PoolFile`) whose first page describes the pool;
each allocation is a page-aligned region of the file, mapped into the
process.  ``cuMemPoolExportToShareableHandle`` hands out a duplicate of the
file's descriptor, which the program passes to another process (a Unix
socket, ``multiprocessing``); ``cuMemPoolImportFromShareableHandle`` there
reads the description, and ``cuMemPoolImportPointer`` maps the region an
export record (``cuMemPoolExportPointer``: 64 bytes, :data:`EXPORT`) names.
Both processes then read and write the same bytes, as two processes do on
one GPU.  When the exporter frees an allocation its pages are given back to
the system (a hole punched in the file); an importer that still maps them
reads zeros there -- a use after free the simulator cannot see across
processes, as with ``cuIpcGetMemHandle`` (``_ipc.py``).

Layouts (little-endian): the pool file's header (:data:`HEADER`, page 0)::

    0  4s  magic b"GSPL"     4  B  version (1)       5  B  allocation type
    6  B   location type     7  B  (0)               8  i  location id
    12 i   machine device (-1: host)                 16 I  exporting process id
    20 I   (0)               24 Q  maximum size      32 16s pool identity

and the export record of a pointer (:data:`EXPORT`, 64 bytes)::

    0  4s  magic b"GSPP"     4  B  version (1)       5  3x
    8  16s pool identity     24 Q  offset in the file  32 Q  size
    40 24x
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct
import uuid
from typing import Any

import numpy as np

from gpuarray.errors import CudaError, CudaOutOfMemoryError

INVALID_VALUE = 1
OUT_OF_MEMORY = 2

#: The default pool of device ``d`` is ``POOL_BASE + 0x10 * (d + 1)``; the default pools of
#: other locations and allocation types follow from ``POOL_BASE + OTHER_DEFAULTS``.
POOL_BASE = 0x7E00_0000
OTHER_DEFAULTS = 0x8000

#: ``CUmemAllocationType``.
PINNED, MANAGED = 1, 2
#: ``CUmemLocationType``.
LOC_NONE, LOC_DEVICE, LOC_HOST, LOC_HOST_NUMA, LOC_HOST_NUMA_CURRENT = 0, 1, 2, 3, 4
LOC_INVISIBLE, LOC_LOCALITY_DOMAIN = 5, 6
#: ``CUmemAllocationHandleType``.
HANDLE_NONE, HANDLE_POSIX_FD, HANDLE_WIN32, HANDLE_WIN32_KMT, HANDLE_FABRIC = 0, 1, 2, 4, 8
#: ``CUmemAccess_flags``.
ACCESS_NONE, ACCESS_READ, ACCESS_READWRITE = 0, 1, 3
#: ``CU_DEVICE_INVALID``.
DEVICE_INVALID = -2

#: Allocation granularity of a pool (what used-memory counts in).
GRAIN = 512
#: What a pool reserves backing memory in (a driver maps pools in 2 MiB pages).
RESERVE = 2 << 20

#: ``CUmemPool_attribute`` values.
(ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, ATTR_REUSE_ALLOW_OPPORTUNISTIC,
 ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, ATTR_RELEASE_THRESHOLD, ATTR_RESERVED_MEM_CURRENT,
 ATTR_RESERVED_MEM_HIGH, ATTR_USED_MEM_CURRENT, ATTR_USED_MEM_HIGH, ATTR_ALLOCATION_TYPE,
 ATTR_EXPORT_HANDLE_TYPES, ATTR_LOCATION_ID, ATTR_LOCATION_TYPE, ATTR_MAX_POOL_SIZE,
 ATTR_HW_DECOMPRESS_ENABLED, ATTR_LOCALITY_DOMAIN_ID) = range(1, 16)
#: The attributes whose value is a ``cuuint64_t`` (the others are 4-byte ``int`` or enums).
WIDE_ATTRIBUTES = frozenset({ATTR_RELEASE_THRESHOLD, ATTR_RESERVED_MEM_CURRENT,
                             ATTR_RESERVED_MEM_HIGH, ATTR_USED_MEM_CURRENT, ATTR_USED_MEM_HIGH,
                             ATTR_MAX_POOL_SIZE})

HEADER = struct.Struct("<4sBBBxiiIIQ16s")
EXPORT = struct.Struct("<4sB3x16sQQ24x")
assert EXPORT.size == 64
_POOL_MAGIC, _PTR_MAGIC, _VERSION = b"GSPL", b"GSPP", 1
PAGE = mmap.PAGESIZE


def _up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclasses.dataclass(eq=False)
class SimPool:
    """One memory pool: where it allocates, what it allows, and its counters."""

    handle: int
    alloc_type: int  # PINNED or MANAGED
    loc_type: int  # LOC_*
    loc_id: int
    #: The device whose memory a device pool holds (-1: host or managed memory).
    device: int
    handle_types: int = HANDLE_NONE
    max_size: int = 0  # 0: no maximum
    default: bool = False
    #: Made by cuMemPoolImportFromShareableHandle: it maps another process's allocations.
    imported: bool = False
    destroyed: bool = False
    release_threshold: int = 0
    reuse_follow_event_dependencies: bool = True
    reuse_allow_opportunistic: bool = True
    reuse_allow_internal_dependencies: bool = True
    used: int = 0
    used_high: int = 0
    reserved: int = 0
    reserved_high: int = 0
    #: Allocations made from it that are not freed yet (a destroyed pool lives until none).
    live: int = 0
    #: ``(location type, id) -> CUmemAccess_flags`` set by cuMemPoolSetAccess.
    access: dict[tuple[int, int], int] = dataclasses.field(default_factory=dict)
    #: The shared file of an IPC-capable or imported pool.
    file: PoolFile | None = None
    #: Imported pointers by offset in the file: what cuMemPoolImportPointer mapped.
    imports: dict[int, Any] = dataclasses.field(default_factory=dict)

    def describe(self) -> str:
        what = {PINNED: "pinned", MANAGED: "managed"}.get(self.alloc_type, "?")
        where = {LOC_DEVICE: f"device {self.loc_id}", LOC_HOST: "host",
                 LOC_HOST_NUMA: f"host NUMA node {self.loc_id}", LOC_NONE: "no location",
                 LOC_INVISIBLE: "another process's device"}.get(self.loc_type, "?")
        kind = "default" if self.default else "imported" if self.imported else "created"
        return f"{kind} {what} memory pool 0x{self.handle:x} ({where})"

    def owner_location(self) -> tuple[int, int]:
        """The location that always has read-write access to the pool's memory."""
        if self.loc_type == LOC_DEVICE:
            return LOC_DEVICE, self.loc_id
        return LOC_HOST, 0

    def access_of(self, loc_type: int, loc_id: int) -> int:
        if self.alloc_type == MANAGED:  # managed memory is accessible everywhere
            return ACCESS_READWRITE
        key = (LOC_HOST, 0) if loc_type in (LOC_HOST, LOC_HOST_NUMA) else (loc_type, loc_id)
        if key == self.owner_location():
            return ACCESS_READWRITE
        return self.access.get(key, ACCESS_NONE)

    def attribute(self, attr: int) -> int:
        """The value of ``CUmemPool_attribute`` ``attr`` (INVALID_VALUE: not one)."""
        values = {
            ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: int(self.reuse_follow_event_dependencies),
            ATTR_REUSE_ALLOW_OPPORTUNISTIC: int(self.reuse_allow_opportunistic),
            ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: int(self.reuse_allow_internal_dependencies),
            ATTR_RELEASE_THRESHOLD: self.release_threshold,
            ATTR_RESERVED_MEM_CURRENT: self.reserved,
            ATTR_RESERVED_MEM_HIGH: self.reserved_high,
            ATTR_USED_MEM_CURRENT: self.used,
            ATTR_USED_MEM_HIGH: self.used_high,
            ATTR_ALLOCATION_TYPE: self.alloc_type,
            # cuda.h: "For imported pools this value is always CU_MEM_HANDLE_TYPE_NONE"
            ATTR_EXPORT_HANDLE_TYPES: HANDLE_NONE if self.imported else self.handle_types,
            ATTR_LOCATION_ID: self.loc_id,
            ATTR_LOCATION_TYPE: self.loc_type,
            ATTR_MAX_POOL_SIZE: self.max_size,
            ATTR_HW_DECOMPRESS_ENABLED: 0,
            ATTR_LOCALITY_DOMAIN_ID: -1,  # not localised (cuda.h)
        }
        if attr not in values:
            raise CudaError(INVALID_VALUE, "cuMemPoolGetAttribute", f"{attr} is not a CUmemPool_attribute")
        return values[attr]

    def set_attribute(self, attr: int, value: int) -> None:
        call = "cuMemPoolSetAttribute"
        if attr == ATTR_RELEASE_THRESHOLD:
            self.release_threshold = value
        elif attr == ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
            self.reuse_follow_event_dependencies = bool(value)
        elif attr == ATTR_REUSE_ALLOW_OPPORTUNISTIC:
            self.reuse_allow_opportunistic = bool(value)
        elif attr == ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            self.reuse_allow_internal_dependencies = bool(value)
        elif attr in (ATTR_RESERVED_MEM_HIGH, ATTR_USED_MEM_HIGH):
            # cuda.h: a reset of the high watermark; "illegal to set ... to a non-zero value"
            if value:
                raise CudaError(INVALID_VALUE, call, f"attribute {attr} can only be reset to 0, "
                                                     f"not set to {value}")
            if attr == ATTR_RESERVED_MEM_HIGH:
                self.reserved_high = self.reserved
            else:
                self.used_high = self.used
        else:
            raise CudaError(INVALID_VALUE, call, f"attribute {attr} cannot be set (cuda.h lists "
                                                 "the release threshold, the reuse flags and the "
                                                 "two high watermarks)")


# ------------------------------------------------------------------ counters
def take(pool: SimPool, nbytes: int, call: str) -> int:
    """Count an allocation of ``nbytes`` from ``pool``; return its size in the pool."""
    size = _up(max(nbytes, 1), GRAIN)
    if pool.max_size and pool.used + size > pool.max_size:
        raise CudaOutOfMemoryError(OUT_OF_MEMORY, call, f"while allocating {nbytes} bytes from "
                                                        f"{pool.describe()}: {pool.used} of its "
                                                        f"{pool.max_size} bytes are in use")
    pool.used += size
    pool.used_high = max(pool.used_high, pool.used)
    need = _up(pool.used, RESERVE)
    if pool.max_size:
        need = min(need, pool.max_size)
    pool.reserved = max(pool.reserved, need)
    pool.reserved_high = max(pool.reserved_high, pool.reserved)
    pool.live += 1
    return size


def give_back(pool: SimPool, size: int) -> None:
    """An allocation of ``size`` (what :func:`take` returned) was freed: the pool keeps its memory."""
    pool.used -= size
    pool.live -= 1


def trim(pool: SimPool, keep: int) -> None:
    """Give reserved memory back until at most ``keep`` bytes (and never less than used) remain."""
    if pool.reserved <= keep:
        return
    floor = _up(pool.used, RESERVE)  # what backs the live allocations cannot go
    if pool.max_size:
        floor = min(floor, pool.max_size)
    pool.reserved = max(floor, min(pool.reserved, _up(keep, RESERVE)))


def release(pool: SimPool) -> None:
    """A synchronisation: memory above the release threshold goes back to the system."""
    if pool.reserved > pool.release_threshold:
        trim(pool, pool.release_threshold)


# -------------------------------------------------------------- shared file
class PoolFile:
    """The memory of an IPC-capable pool: an anonymous shared file, page 0 its description."""

    def __init__(self, fd: int, identity: bytes, alloc_type: int, loc_type: int, loc_id: int,
                 machine_device: int, pid: int, max_size: int) -> None:
        self.fd = fd
        self.identity = identity
        self.alloc_type, self.loc_type, self.loc_id = alloc_type, loc_type, loc_id
        self.machine_device, self.pid, self.max_size = machine_device, pid, max_size
        self.end = PAGE  # the next free offset (regions are never reused)

    @classmethod
    def create(cls, pool: SimPool, machine_device: int) -> PoolFile:
        fd = os.memfd_create(f"gpuarray-sim-pool-{os.getpid()}-{pool.handle:x}", os.MFD_CLOEXEC)
        f = cls(fd, uuid.uuid4().bytes, pool.alloc_type, pool.loc_type, pool.loc_id,
                machine_device, os.getpid(), pool.max_size)
        os.ftruncate(fd, PAGE)
        os.pwrite(fd, HEADER.pack(_POOL_MAGIC, _VERSION, pool.alloc_type, pool.loc_type,
                                  pool.loc_id, machine_device, os.getpid(), 0, pool.max_size,
                                  f.identity), 0)
        return f

    @classmethod
    def open(cls, fd: int, call: str) -> PoolFile:
        """The pool file behind descriptor ``fd`` (this object keeps a duplicate of it)."""
        try:
            raw = os.pread(fd, HEADER.size, 0)
        except OSError as e:
            raise CudaError(INVALID_VALUE, call, f"file descriptor {fd} cannot be read ({e})") from None
        if len(raw) != HEADER.size:
            raise CudaError(INVALID_VALUE, call, f"file descriptor {fd} is not a memory pool's")
        magic, version, alloc_type, loc_type, loc_id, machine, pid, _, max_size, ident = \
            HEADER.unpack(raw)
        if magic != _POOL_MAGIC or version != _VERSION:
            raise CudaError(INVALID_VALUE, call, f"file descriptor {fd} is not a memory pool "
                                                 "exported by cuMemPoolExportToShareableHandle")
        return cls(os.dup(fd), ident, alloc_type, loc_type, loc_id, machine, pid, max_size)

    def place(self, nbytes: int) -> int:
        """A new page-aligned region of ``nbytes`` at the end of the file: its offset."""
        off = self.end
        self.end += _up(max(nbytes, 1), PAGE)
        os.ftruncate(self.fd, self.end)
        return off

    def map(self, offset: int, nbytes: int) -> tuple[mmap.mmap, np.ndarray]:
        """Map the region at ``offset``: the mapping and a byte view of it."""
        m = mmap.mmap(self.fd, _up(max(nbytes, 1), PAGE), mmap.MAP_SHARED,
                      mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        return m, np.frombuffer(m, dtype=np.uint8, count=nbytes)

    def discard(self, offset: int, nbytes: int) -> None:
        """Give the pages of a freed region back to the system (they read as zeros then)."""
        _punch_hole(self.fd, offset, _up(max(nbytes, 1), PAGE))

    def export(self, offset: int, nbytes: int) -> bytes:
        return EXPORT.pack(_PTR_MAGIC, _VERSION, self.identity, offset, nbytes)

    def parse_export(self, raw: bytes, call: str) -> tuple[int, int]:
        """``(offset, size)`` of an export record of this pool's memory."""
        magic, version, ident, offset, nbytes = EXPORT.unpack(bytes(raw))
        if magic != _PTR_MAGIC or version != _VERSION:
            raise CudaError(INVALID_VALUE, call, "the export data was not made by cuMemPoolExportPointer")
        if ident != self.identity:
            raise CudaError(INVALID_VALUE, call, "the export data names memory of another pool")
        if offset < PAGE or offset % PAGE or nbytes <= 0:
            raise CudaError(INVALID_VALUE, call, f"the export data names no allocation ({offset}+{nbytes})")
        size = os.fstat(self.fd).st_size
        if offset + nbytes > size:
            raise CudaError(INVALID_VALUE, call, f"the export data names bytes {offset}+{nbytes} past "
                                                 f"the pool's {size} (allocated after the import?)")
        return offset, nbytes

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _punch_hole(fd: int, offset: int, length: int) -> None:
    """``fallocate(PUNCH_HOLE | KEEP_SIZE)``; nothing where the call is not available."""
    import ctypes
    import ctypes.util

    global _fallocate
    if _fallocate is None:
        name = ctypes.util.find_library("c")
        try:
            f = ctypes.CDLL(name, use_errno=True).fallocate
        except (OSError, AttributeError, TypeError):
            _fallocate = False
            return
        f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
        f.restype = ctypes.c_int
        _fallocate = f
    if _fallocate:
        _fallocate(fd, 0x02 | 0x01, offset, length)  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


_fallocate: Any = None
