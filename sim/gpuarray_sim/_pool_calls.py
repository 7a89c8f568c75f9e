"""The simulator's memory-pool calls: pools, their attributes and access, allocation from them, sharing.

One concern: the ``cuMemPool*`` family and the calls that choose a pool
(``cuDeviceGetDefaultMemPool``, ``cuDevice{Get,Set}MemPool``,
``cuMem{Get,Set,GetDefault}MemPool``, ``cuMemAllocFromPoolAsync``) on the
model of ``_pools.py``.  Pools are kept by handle: the default pools
(one per device for device memory, which ``cuMemAllocAsync`` uses unless
``cuDeviceSetMemPool`` chose another; one per host location and per
location of managed memory, made when first asked for) and the pools of
``cuMemPoolCreate`` and ``cuMemPoolImportFromShareableHandle``.

Where a pool allocates:

- device memory (``CU_MEM_ALLOCATION_TYPE_PINNED`` at a device): device
  allocations of the pool's device, backed by the pool's shared file when
  the pool is IPC-capable;
- page-locked host memory (``PINNED`` at ``HOST`` or ``HOST_NUMA`` node 0,
  the only node the simulated machine has): mapped host memory, which
  kernels of every device reach (unified addressing);
- managed memory (``CU_MEM_ALLOCATION_TYPE_MANAGED``): managed allocations,
  charged to the allocating stream's device.

Rules taken from cuda.h, each with the code it lists: size 0 gives NULL
(``cuMemAllocAsync``'s 0-byte allocation); an imported pool allocates
nothing (``CUDA_ERROR_INVALID_VALUE``) and a pool past its maximum size is
``CUDA_ERROR_OUT_OF_MEMORY``; a default pool cannot be destroyed; destroying
a pool with live allocations returns at once and the allocations stay
valid; destroying a device's current pool makes its default pool current
again; host pools are not IPC-capable (``HOST``; cuda.core shares
``HOST_NUMA`` pools), managed pools take no handle types and no maximum;
handle types other than a POSIX file descriptor (Win32, fabric) and
hardware decompression are not simulated (``CUDA_ERROR_NOT_SUPPORTED``).
During a capture an allocation from a pool is an allocation node of the
graph, as ``cuMemAllocAsync``'s (device memory only).
"""

from __future__ import annotations

import os

from gpuarray.errors import CudaError

from . import _capture, _pools
from ._core import INVALID_VALUE, SimCore, _locked
from ._memory import ALIGN, Allocation
from ._pools import (
    HANDLE_NONE,
    HANDLE_POSIX_FD,
    LOC_DEVICE,
    LOC_HOST,
    LOC_HOST_NUMA,
    LOC_INVISIBLE,
    LOC_NONE,
    MANAGED,
    PINNED,
    POOL_BASE,
    SimPool,
)
from ._sched import SimStream

NOT_SUPPORTED = 801


class SimPoolCalls(SimCore):
    """Memory-pool calls of the simulator."""

    # ------------------------------------------------------------- lookups
    def _default_pool(self, alloc_type: int, loc_type: int, loc_id: int) -> SimPool:
        key = (alloc_type, loc_type, loc_id)
        pool = self._default_pools.get(key)
        if pool is None:
            if key[:2] == (PINNED, LOC_DEVICE):
                handle = POOL_BASE + 0x10 * (loc_id + 1)
            else:
                handle = POOL_BASE + _pools.OTHER_DEFAULTS + 0x10 * len(self._default_pools)
            device = loc_id if loc_type == LOC_DEVICE and alloc_type == PINNED else -1
            pool = SimPool(handle, alloc_type, loc_type, loc_id, device, default=True)
            self._default_pools[key] = pool
            self._pools[handle] = pool
        return pool

    def _pool(self, handle: int, call: str) -> SimPool:
        pool = self._pools.get(int(handle))
        if pool is None or pool.destroyed:
            raise CudaError(INVALID_VALUE, call, f"0x{int(handle):x} is not a memory pool (destroyed?)")
        return pool

    def _location(self, loc_type: int, loc_id: int, alloc_type: int, call: str) -> tuple[int, int, int]:
        """The key of a (location, allocation type) a pool can serve, checked as cuda.h says."""
        if alloc_type not in (PINNED, MANAGED):
            raise CudaError(INVALID_VALUE, call, f"allocation type {alloc_type} (cuda.h: PINNED or MANAGED)")
        if loc_type == LOC_DEVICE:
            if not 0 <= loc_id < self.devices:
                raise CudaError(INVALID_VALUE, call, f"device {loc_id} (the simulator has {self.devices})")
            return alloc_type, LOC_DEVICE, loc_id
        if loc_type == LOC_HOST:
            return alloc_type, LOC_HOST, 0  # cuda.h: the id is ignored
        if loc_type == LOC_HOST_NUMA:
            if loc_id != 0:
                raise CudaError(INVALID_VALUE, call, f"host NUMA node {loc_id} (the simulated host "
                                                     "has node 0 only)")
            return alloc_type, LOC_HOST_NUMA, 0
        if loc_type == LOC_NONE and alloc_type == MANAGED:
            return MANAGED, LOC_NONE, 0
        if loc_type == _pools.LOC_LOCALITY_DOMAIN and alloc_type == PINNED:
            raise CudaError(NOT_SUPPORTED, call, "locality domains are not simulated")
        raise CudaError(INVALID_VALUE, call, f"location type {loc_type} with allocation type "
                                             f"{alloc_type}")

    # ------------------------------------------------------- current pools
    @_locked
    def mempool_default(self, ordinal: int) -> int:
        """``cuDeviceGetDefaultMemPool``."""
        return self._default_pool(PINNED, LOC_DEVICE, self._dev(ordinal, "cuDeviceGetDefaultMemPool")).handle

    @_locked
    def mem_get_default_pool(self, loc_type: int, loc_id: int, alloc_type: int) -> int:
        """``cuMemGetDefaultMemPool``."""
        return self._default_pool(*self._location(loc_type, loc_id, alloc_type,
                                                  "cuMemGetDefaultMemPool")).handle

    @_locked
    def mem_get_pool(self, loc_type: int, loc_id: int, alloc_type: int) -> int:
        """``cuMemGetMemPool`` (``cuDeviceGetMemPool`` for device memory)."""
        key = self._location(loc_type, loc_id, alloc_type, "cuMemGetMemPool")
        pool = self._current_pools.get(key)
        return (pool if pool is not None else self._default_pool(*key)).handle

    @_locked
    def mem_set_pool(self, loc_type: int, loc_id: int, alloc_type: int, handle: int,
                     call: str = "cuMemSetMemPool") -> None:
        """``cuMemSetMemPool`` (``cuDeviceSetMemPool`` for device memory)."""
        key = self._location(loc_type, loc_id, alloc_type, call)
        pool = self._pool(handle, call)
        if pool.imported:
            raise CudaError(INVALID_VALUE, call, f"{pool.describe()} is imported: it cannot allocate")
        mine = (pool.alloc_type, pool.loc_type, 0 if pool.loc_type == LOC_HOST else pool.loc_id)
        if mine != key:
            raise CudaError(INVALID_VALUE, call, f"{pool.describe()} is not a pool of that location "
                                                 "and allocation type")
        self._current_pools[key] = pool

    def _current_device_pool(self, device: int) -> SimPool:
        key = (PINNED, LOC_DEVICE, device)
        return self._current_pools.get(key) or self._default_pool(*key)

    # ------------------------------------------------------ create, destroy
    @_locked
    def mempool_create(self, alloc_type: int, handle_types: int, loc_type: int, loc_id: int,
                       max_size: int, usage: int = 0, other_fields_zero: bool = True) -> int:
        """``cuMemPoolCreate`` from ``CUmemPoolProps`` (``other_fields_zero``: the Win32
        attributes, the RDMA hint and the reserved bytes are all 0)."""
        call = "cuMemPoolCreate"
        key = self._location(loc_type, loc_id, alloc_type, call)
        if handle_types & (_pools.HANDLE_WIN32 | _pools.HANDLE_WIN32_KMT | _pools.HANDLE_FABRIC):
            raise CudaError(NOT_SUPPORTED, call, f"handle types {handle_types:#x}: the simulator "
                                                 "shares pools through POSIX file descriptors only")
        if handle_types & ~HANDLE_POSIX_FD:
            raise CudaError(INVALID_VALUE, call, f"handle types {handle_types:#x}")
        if usage & ~0x2:
            raise CudaError(INVALID_VALUE, call, f"usage {usage:#x}")
        if usage:
            raise CudaError(NOT_SUPPORTED, call, "hardware decompression is not simulated")
        if not other_fields_zero:
            raise CudaError(INVALID_VALUE, call, "win32SecurityAttributes, gpuDirectRDMACapable and "
                                                 "reserved must be 0 here")
        if loc_type == LOC_HOST and handle_types:  # cuda.h: HOST pools are not IPC capable
            raise CudaError(INVALID_VALUE, call, "a pool of CU_MEM_LOCATION_TYPE_HOST cannot have "
                                                 "handle types (use HOST_NUMA)")
        if alloc_type == MANAGED and (handle_types or max_size):
            raise CudaError(INVALID_VALUE, call, "a managed memory pool takes no handle types and "
                                                 "no maximum size")
        _, ltype, lid = key
        device = lid if ltype == LOC_DEVICE and alloc_type == PINNED else -1
        if max_size:
            max_size = -(-max_size // _pools.RESERVE) * _pools.RESERVE  # cuda.h: may be higher
        pool = SimPool(self._handle(), alloc_type, ltype, lid, device, handle_types, max_size)
        if handle_types & HANDLE_POSIX_FD:
            machine = self.physical[device] if device >= 0 else -1
            pool.file = _pools.PoolFile.create(pool, machine)
        self._pools[pool.handle] = pool
        return pool.handle

    @_locked
    def mempool_destroy(self, handle: int) -> None:
        call = "cuMemPoolDestroy"
        pool = self._pool(handle, call)
        if pool.default:
            raise CudaError(INVALID_VALUE, call, f"{pool.describe()}: a default pool cannot be destroyed")
        pool.destroyed = True
        for key, cur in list(self._current_pools.items()):
            if cur is pool:  # cuda.h: the default pool is current again
                del self._current_pools[key]
        if pool.live == 0:
            self._retire(pool)

    def _retire(self, pool: SimPool) -> None:
        """A destroyed pool with no allocation left: its handle and file go."""
        self._pools.pop(pool.handle, None)
        if pool.file is not None:
            pool.file.close()

    # ---------------------------------------------------------- attributes
    @_locked
    def mempool_get_attribute(self, handle: int, attr: int) -> int:
        return self._pool(handle, "cuMemPoolGetAttribute").attribute(attr)

    @_locked
    def mempool_set_attribute(self, handle: int, attr: int, value: int) -> None:
        call = "cuMemPoolSetAttribute"
        pool = self._pool(handle, call)
        if self.sched.capturing:  # potentially unsafe during a capture (see _capture.py)
            _capture.check_unsafe(self, call)
        pool.set_attribute(attr, value)

    @_locked
    def mempool_trim_to(self, handle: int, keep: int) -> None:
        _pools.trim(self._pool(handle, "cuMemPoolTrimTo"), int(keep))

    def _release_pools(self) -> None:
        """After a host synchronisation: pools give back what exceeds their release threshold."""
        for pool in self._pools.values():
            _pools.release(pool)

    # -------------------------------------------------------------- access
    @_locked
    def mempool_set_access(self, handle: int, descriptors: list[tuple[int, int, int]]) -> None:
        """``cuMemPoolSetAccess``: ``descriptors`` of ``(location type, id, CUmemAccess_flags)``."""
        call = "cuMemPoolSetAccess"
        pool = self._pool(handle, call)
        changes = {}
        for loc_type, loc_id, flags in descriptors:
            if flags not in (_pools.ACCESS_NONE, _pools.ACCESS_READ, _pools.ACCESS_READWRITE):
                raise CudaError(INVALID_VALUE, call, f"access flags {flags}")
            if loc_type == LOC_DEVICE:
                if not 0 <= loc_id < self.devices:
                    raise CudaError(INVALID_VALUE, call, f"device {loc_id} (the simulator has "
                                                         f"{self.devices})")
                key = (LOC_DEVICE, loc_id)
            elif loc_type in (LOC_HOST, LOC_HOST_NUMA):
                key = (LOC_HOST, 0)
            else:
                raise CudaError(INVALID_VALUE, call, f"location type {loc_type}")
            if key == pool.owner_location():
                if flags != _pools.ACCESS_READWRITE:
                    raise CudaError(INVALID_VALUE, call, f"the access of {pool.describe()}'s own "
                                                         "location cannot be removed")
                continue
            if flags == _pools.ACCESS_READ:  # only read-write or none, as for peer device memory
                raise CudaError(NOT_SUPPORTED, call, "read-only access to a pool is not supported")
            if key[0] == LOC_DEVICE and pool.device >= 0 and flags and \
                    not self.device_can_access_peer(loc_id, pool.device):
                raise CudaError(INVALID_VALUE, call, f"device {loc_id} cannot access device "
                                                     f"{pool.device}'s memory (cuDeviceCanAccessPeer)")
            changes[key] = flags
        pool.access.update(changes)

    @_locked
    def mempool_get_access(self, handle: int, loc_type: int, loc_id: int) -> int:
        call = "cuMemPoolGetAccess"
        pool = self._pool(handle, call)
        if loc_type == LOC_DEVICE and not 0 <= loc_id < self.devices:
            raise CudaError(INVALID_VALUE, call, f"device {loc_id} (the simulator has {self.devices})")
        if loc_type not in (LOC_DEVICE, LOC_HOST, LOC_HOST_NUMA):
            raise CudaError(INVALID_VALUE, call, f"location type {loc_type}")
        return pool.access_of(loc_type, loc_id)

    # ---------------------------------------------------------- allocation
    @_locked
    def mem_alloc_from_pool_async(self, nbytes: int, handle: int, stream: int) -> int:
        call = "cuMemAllocFromPoolAsync"
        s = self._stream(stream, call)
        pool = self._pool(handle, call)
        return self._pool_alloc(pool, int(nbytes), s, call)

    def _pool_alloc(self, pool: SimPool, nbytes: int, s: SimStream, call: str) -> int:
        """An allocation of ``nbytes`` from ``pool``, ordered on stream ``s``."""
        self._fault("alloc", call)
        if pool.imported:
            raise CudaError(INVALID_VALUE, call, f"{pool.describe()} is imported: it cannot allocate")
        if nbytes == 0:
            # cuda.h states INVALID_VALUE for size 0 of cuMemAlloc and cuMemAllocManaged only;
            # the stream-ordered calls give a 0-byte allocation: NULL, which frees as nothing
            return 0
        if s.capture is not None:  # an allocation node (_graph.py): the graph owns the memory
            if pool.device < 0:
                raise CudaError(NOT_SUPPORTED, call, f"{pool.describe()}: graph allocation nodes of "
                                                     "host or managed memory are not simulated")
            return self._capture_alloc(s, nbytes, call)
        if self.sched.capturing:  # outside the capture: potentially unsafe (see _capture.py)
            _capture.check_unsafe(self, call)
        counted = _pools.take(pool, nbytes, call)
        try:
            a = self._pool_memory(pool, nbytes, s, call)
        except BaseException:
            _pools.give_back(pool, counted)
            raise
        a.pool, a.pool_bytes = pool, counted
        self.sched.enqueue(s, None, f"{call} of 0x{a.base:x}", [(a.base, a.size, True)])
        return a.base

    def _pool_memory(self, pool: SimPool, nbytes: int, s: SimStream, call: str) -> Allocation:
        mem = self.memory
        if pool.alloc_type == MANAGED:
            return mem.alloc_managed(s.ctx.device, nbytes, owner=s.ctx)
        if pool.device < 0:  # page-locked host memory
            if pool.file is None:
                return mem.alloc_host(nbytes, True, owner=s.ctx)
            off = pool.file.place(nbytes)
            m, view = pool.file.map(off, nbytes)
            a = mem.adopt_host(m, view.ctypes.data, nbytes, owner=s.ctx)
        elif pool.file is None:
            return mem.alloc_device(pool.device, nbytes, kind="pool", call=call, owner=s.ctx)
        else:
            off = pool.file.place(nbytes)
            m, view = pool.file.map(off, nbytes)
            a = mem.alloc_device(pool.device, nbytes, kind="pool", call=call, owner=s.ctx, store=view)
        a.mapping, a.file_offset = m, off
        return a

    def _pool_freed(self, a: Allocation) -> None:
        """The free of pool memory ``a`` ran: the pool counts it back, a shared region goes."""
        pool: SimPool = a.pool
        if pool.imported:  # an imported pointer: this process's mapping goes
            pool.imports.pop(a.file_offset, None)
        else:
            _pools.give_back(pool, a.pool_bytes)
            if pool.file is not None and a.file_offset >= 0:
                pool.file.discard(a.file_offset, a.size)
        a.mapping = None
        if pool.destroyed and pool.live == 0 and not pool.imports:
            self._retire(pool)

    def _free_pool_host(self, a: Allocation, call: str) -> None:
        """Free page-locked host memory of a pool (or imported from one)."""
        self.memory.free_host(a.base, call)
        self._pool_freed(a)

    # ------------------------------------------------------------- sharing
    @_locked
    def mempool_export(self, handle: int, handle_type: int, flags: int) -> int:
        """``cuMemPoolExportToShareableHandle``: a new file descriptor of the pool."""
        call = "cuMemPoolExportToShareableHandle"
        pool = self._pool(handle, call)
        if flags:
            raise CudaError(INVALID_VALUE, call, f"flags {flags} (must be 0)")
        if handle_type != HANDLE_POSIX_FD or not pool.handle_types & HANDLE_POSIX_FD or pool.imported:
            raise CudaError(INVALID_VALUE, call, f"{pool.describe()} cannot be exported as handle "
                                                 f"type {handle_type} (created with handle types "
                                                 f"{pool.handle_types:#x})")
        assert pool.file is not None
        return os.dup(pool.file.fd)

    @_locked
    def mempool_import(self, fd: int, handle_type: int, flags: int) -> int:
        """``cuMemPoolImportFromShareableHandle`` of file descriptor ``fd``."""
        call = "cuMemPoolImportFromShareableHandle"
        self._check_current(call)  # no context needed (cuda.h lists no INVALID_CONTEXT)
        if flags:
            raise CudaError(INVALID_VALUE, call, f"flags {flags} (must be 0)")
        if handle_type != HANDLE_POSIX_FD:
            raise CudaError(INVALID_VALUE if handle_type in (HANDLE_NONE, 3) or handle_type > 8
                            else NOT_SUPPORTED, call, f"handle type {handle_type}")
        f = _pools.PoolFile.open(fd, call)
        device, loc_type, loc_id = -1, f.loc_type, f.loc_id
        if f.loc_type == LOC_DEVICE:  # the same machine device, if this process sees it
            if f.machine_device in self.physical:
                device = loc_id = self.physical.index(f.machine_device)
            else:
                loc_type, loc_id = LOC_INVISIBLE, _pools.DEVICE_INVALID
        pool = SimPool(self._handle(), f.alloc_type, loc_type, loc_id, device,
                       HANDLE_POSIX_FD, f.max_size, imported=True, file=f)
        self._pools[pool.handle] = pool
        return pool.handle

    @_locked
    def mempool_export_pointer(self, ptr: int) -> bytes:
        call = "cuMemPoolExportPointer"
        self._check_current(call)
        a = self.memory.find(int(ptr))
        if a is None or not a.alive or a.pool is None or a.pool.imported:
            raise CudaError(INVALID_VALUE, call, f"0x{int(ptr):x} is not memory of a memory pool")
        if a.pool.file is None:
            raise CudaError(INVALID_VALUE, call, f"0x{int(ptr):x} comes from {a.pool.describe()}, "
                                                 "which was created without a handle type")
        return a.pool.file.export(a.file_offset, a.size)

    @_locked
    def mempool_import_pointer(self, handle: int, data: bytes) -> int:
        call = "cuMemPoolImportPointer"
        self._check_current(call)  # no context needed (cuda.h lists no INVALID_CONTEXT)
        ctx = getattr(self._tls, "ctx", None)
        pool = self._pool(handle, call)
        if not pool.imported or pool.file is None:
            raise CudaError(INVALID_VALUE, call, f"{pool.describe()} was not imported from another "
                                                 "process")
        off, nbytes = pool.file.parse_export(data, call)
        known = pool.imports.get(off)
        if known is not None and known.alive:
            return known.base  # as a driver does: the same mapping again
        m, view = pool.file.map(off, nbytes)
        mem = self.memory
        if pool.alloc_type == PINNED and pool.loc_type in (LOC_HOST, LOC_HOST_NUMA):
            a = mem.adopt_host(m, view.ctypes.data, nbytes, owner=ctx)
        else:
            dev = pool.device if pool.device >= 0 else ctx.device if ctx is not None else 0
            base = mem._next[dev]
            mem._next[dev] += -(-nbytes // ALIGN) * ALIGN
            a = Allocation(base, nbytes, dev, "ipc", view, owner=ctx)
            mem._insert(a)
        a.pool, a.mapping, a.file_offset = pool, m, off
        pool.imports[off] = a
        return a.base

    def pool_handle_of(self, a: Allocation) -> int:
        """Simulator only: ``CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE`` of allocation ``a`` (0: none)."""
        return a.pool.handle if a.pool is not None else 0
