"""Memory pools and managed-memory advice as cuda.h has them, through cuda.bindings (issue 45).

Each scenario runs through the real cuda.bindings over the stand-in (a child
process, as ``test_standin.py``'s do).  Before issue 45 every call here but
the default pool's release threshold answered ``CUDA_ERROR_NOT_SUPPORTED``
(``cuMemPoolCreate``, ``cuMemGetMemPool``, ``cuMemAdvise``...) and the device
reported no pool handle type, so cuda.core's memory resources with options,
its managed and pinned resources and its IPC tests could not run.

- a created pool: attributes (reuse flags, release threshold, reserved and
  used memory with their watermarks), trim, access descriptors, maximum
  size, ``cuDeviceSetMemPool`` choosing what ``cuMemAllocAsync`` uses,
  destroy with live allocations;
- host and managed pools of ``cuMemGetDefaultMemPool`` / ``cuMemGetMemPool``;
- a pool exported to a child process through a POSIX file descriptor (sent
  over a Unix socket), its allocation imported there, written by each side
  and read by the other;
- ``cuMemAdvise``, ``cuMemPrefetchAsync`` (both forms) and
  ``cuMemRangeGetAttribute(s)`` on managed memory.
"""

from __future__ import annotations

import textwrap

import pytest

from sim.tests.standin.test_standin import folder, ok, run  # noqa: F401  (the module-scoped fixture)

pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")

_PRELUDE = """
from cuda.bindings import driver as d
import ctypes
A = d.CUmemPool_attribute
def chk(r):
    r = r if isinstance(r, tuple) else (r,)
    assert r[0] == d.CUresult.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else r[1:]
def code(r):
    return (r[0] if isinstance(r, tuple) else r).name
def attr(pool, a):
    return int(chk(d.cuMemPoolGetAttribute(pool, a)))
def props(loc_type, loc_id=0, handles=0, max_size=0, alloc=d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED):
    p = d.CUmemPoolProps()
    p.allocType = alloc
    p.handleTypes = handles
    p.location.type = loc_type
    p.location.id = loc_id
    p.maxSize = max_size
    return p
DEV = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
HOST = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST
FD = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
chk(d.cuInit(0)); dev = chk(d.cuDeviceGet(0)); ctx = chk(d.cuDevicePrimaryCtxRetain(dev))
chk(d.cuCtxSetCurrent(ctx))
"""


#: The importing process of the file-descriptor test: it takes the pool's descriptor and the
#: pointer's export data from a Unix socket (SCM_RIGHTS), as multiprocessing does.
_CHILD = r'''
import socket, array, sys
from cuda.bindings import driver as d
def chk(r):
    r = r if isinstance(r, tuple) else (r,)
    assert r[0] == d.CUresult.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else r[1:]
sock = socket.socket(fileno=int(sys.argv[1]))
msg, anc, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(4))
fd = array.array("i", anc[0][2][:4])[0]
chk(d.cuInit(0))
# no context is needed to import a pool (cuda.core does it while unpickling)
FD = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
pool = chk(d.cuMemPoolImportFromShareableHandle(fd, FD, 0))
ctx = chk(d.cuDevicePrimaryCtxRetain(chk(d.cuDeviceGet(0)))); chk(d.cuCtxSetCurrent(ctx))
import ctypes
data = d.CUmemPoolPtrExportData(); ctypes.memmove(data.getPtr(), msg, 64)
ptr = chk(d.cuMemPoolImportPointer(pool, data))
host = bytearray(4096)
chk(d.cuMemcpyDtoH(host, ptr, 4096))
assert bytes(host) == b"\x11" * 4096, host[:8]
# an imported pool allocates nothing and exports nothing (cuda.h)
A = d.CUmemPool_attribute
assert int(chk(d.cuMemPoolGetAttribute(pool, A.CU_MEMPOOL_ATTR_EXPORT_HANDLE_TYPES))) == 0
r = d.cuMemAllocFromPoolAsync(64, pool, 0)
assert r[0] == d.CUresult.CUDA_ERROR_INVALID_VALUE, r
chk(d.cuMemsetD8(ptr, 0x22, 4096)); chk(d.cuCtxSynchronize())
chk(d.cuMemFree(ptr))
sock.send(b"done")
'''


def _go(folder, body: str) -> None:  # noqa: F811
    ok(run(folder, _PRELUDE + textwrap.dedent(body)))


def test_a_created_pool_counts_allocations_trims_and_chooses_the_current_pool(folder):  # noqa: F811
    _go(folder, """
        pool = chk(d.cuMemPoolCreate(props(DEV, max_size=1 << 20)))
        assert attr(pool, A.CU_MEMPOOL_ATTR_MAX_POOL_SIZE) == 2 << 20      # rounded up, as cuda.h allows
        assert attr(pool, A.CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC) == 1  # default enabled
        chk(d.cuMemPoolSetAttribute(pool, A.CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, 0))
        assert attr(pool, A.CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC) == 0
        s = chk(d.cuStreamCreate(1))
        p1 = chk(d.cuMemAllocFromPoolAsync(1000, pool, s))
        assert attr(pool, A.CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 1024       # a 512-byte grain
        assert attr(pool, A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 << 20
        assert int(chk(d.cuPointerGetAttribute(
            d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p1))) == int(pool)
        # past the maximum size: out of memory
        assert code(d.cuMemAllocFromPoolAsync(3 << 20, pool, s)) == "CUDA_ERROR_OUT_OF_MEMORY"
        chk(d.cuMemFreeAsync(p1, s)); chk(d.cuStreamSynchronize(s))
        # threshold 0: the synchronisation gave the reserved memory back; the watermarks stay
        assert attr(pool, A.CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0
        assert attr(pool, A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0
        assert attr(pool, A.CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 1024
        chk(d.cuMemPoolSetAttribute(pool, A.CU_MEMPOOL_ATTR_USED_MEM_HIGH, d.cuuint64_t(0)))
        assert attr(pool, A.CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 0
        assert code(d.cuMemPoolSetAttribute(pool, A.CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                                            d.cuuint64_t(5))) == "CUDA_ERROR_INVALID_VALUE"
        # a raised threshold keeps memory until trimmed
        chk(d.cuMemPoolSetAttribute(pool, A.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, d.cuuint64_t(2**64 - 1)))
        p2 = chk(d.cuMemAllocFromPoolAsync(64, pool, s))
        chk(d.cuMemFreeAsync(p2, s)); chk(d.cuStreamSynchronize(s))
        assert attr(pool, A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 << 20
        chk(d.cuMemPoolTrimTo(pool, 0))
        assert attr(pool, A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0
        # cuDeviceSetMemPool: cuMemAllocAsync allocates from the chosen pool
        default = chk(d.cuDeviceGetDefaultMemPool(dev))
        assert int(chk(d.cuDeviceGetMemPool(dev))) == int(default)
        chk(d.cuDeviceSetMemPool(dev, pool))
        p3 = chk(d.cuMemAllocAsync(64, s))
        assert int(chk(d.cuPointerGetAttribute(
            d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p3))) == int(pool)
        # destroyed with a live allocation: the allocation stays valid, the default is current again
        chk(d.cuMemPoolDestroy(pool))
        assert int(chk(d.cuDeviceGetMemPool(dev))) == int(default)
        chk(d.cuMemsetD8Async(p3, 7, 64, s)); chk(d.cuMemFreeAsync(p3, s)); chk(d.cuStreamSynchronize(s))
        assert code(d.cuMemPoolGetAttribute(pool, A.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)) == \\
            "CUDA_ERROR_INVALID_VALUE"
        assert code(d.cuMemPoolDestroy(default)) == "CUDA_ERROR_INVALID_VALUE"  # a default pool
        # access: the owning device always reads and writes; READ-only is refused
        loc = d.CUmemLocation(); loc.type = DEV; loc.id = 0
        other = chk(d.cuMemPoolCreate(props(DEV)))
        assert chk(d.cuMemPoolGetAccess(other, loc)) == \\
            d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        desc = d.CUmemAccessDesc(); desc.location = loc
        desc.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_NONE
        assert code(d.cuMemPoolSetAccess(other, [desc], 1)) == "CUDA_ERROR_INVALID_VALUE"
        # a HOST pool cannot be IPC-capable (cuda.h)
        assert code(d.cuMemPoolCreate(props(HOST, handles=FD))) == "CUDA_ERROR_INVALID_VALUE"
        print("OK")
    """)


def test_host_and_managed_pools_allocate_host_reachable_memory(folder):  # noqa: F811
    _go(folder, """
        loc = d.CUmemLocation(); loc.type = HOST; loc.id = 0
        PINNED = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        MANAGED = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_MANAGED
        assert chk(d.cuDeviceGetAttribute(
            d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, dev)) == 1
        s = chk(d.cuStreamCreate(1))
        for alloc in (PINNED, MANAGED):
            pool = chk(d.cuMemGetMemPool(loc, alloc))
            assert int(pool) == int(chk(d.cuMemGetDefaultMemPool(loc, alloc)))
            p = chk(d.cuMemAllocFromPoolAsync(256, pool, s))
            chk(d.cuMemsetD8Async(p, 0x5A, 256, s)); chk(d.cuStreamSynchronize(s))
            assert ctypes.string_at(int(p), 256) == b"\\x5a" * 256   # host-reachable memory
            assert attr(pool, A.CU_MEMPOOL_ATTR_ALLOCATION_TYPE) == int(alloc)
            chk(d.cuMemFreeAsync(p, s)); chk(d.cuStreamSynchronize(s))
        # managed pools take no maximum size and no handle types (cuda.h)
        assert code(d.cuMemPoolCreate(props(HOST, max_size=1 << 20, alloc=MANAGED))) == \\
            "CUDA_ERROR_INVALID_VALUE"
        print("OK")
    """)


def test_a_pool_shared_with_a_child_process_through_a_file_descriptor(folder):  # noqa: F811
    _go(folder, f"CHILD = {_CHILD!r}\n" + textwrap.dedent("""
        import socket, array, os, sys, subprocess
        assert chk(d.cuDeviceGetAttribute(
            d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, dev)) == int(FD)
        pool = chk(d.cuMemPoolCreate(props(DEV, handles=FD, max_size=2 << 20)))
        s = chk(d.cuStreamCreate(1))
        ptr = chk(d.cuMemAllocFromPoolAsync(4096, pool, s))
        chk(d.cuMemsetD8Async(ptr, 0x11, 4096, s)); chk(d.cuStreamSynchronize(s))
        fd = chk(d.cuMemPoolExportToShareableHandle(pool, FD, 0))
        exported = chk(d.cuMemPoolExportPointer(ptr))  # 64 opaque bytes (cuda-bindings 13.5
        share = ctypes.string_at(exported.getPtr(), 64)  # does not expose .reserved)
        # the child: a fresh interpreter over the stand-in; the descriptor goes over a socket
        parent, kid = socket.socketpair()
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(kid.fileno())],
                                pass_fds=[kid.fileno()])
        kid.close()
        parent.sendmsg([share], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        os.close(fd)
        assert parent.recv(4) == b"done"
        assert proc.wait(timeout=120) == 0
        host = bytearray(4096)
        chk(d.cuMemcpyDtoH(host, ptr, 4096))
        assert bytes(host) == b"\\x22" * 4096, host[:8]          # the child's write
        chk(d.cuMemFreeAsync(ptr, s)); chk(d.cuStreamSynchronize(s)); chk(d.cuMemPoolDestroy(pool))
        print("OK")
    """))


def test_managed_memory_advice_prefetches_and_range_attributes(folder):  # noqa: F811
    _go(folder, """
        R = d.CUmem_range_attribute
        ptr = int(chk(d.cuMemAllocManaged(3 * 4096, 1)))
        loc = d.CUmemLocation(); loc.type = DEV; loc.id = 0
        host = d.CUmemLocation(); host.type = HOST
        chk(d.cuMemAdvise(ptr, 4096, d.CUmem_advise.CU_MEM_ADVISE_SET_READ_MOSTLY, loc))
        assert chk(d.cuMemRangeGetAttribute(4, R.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, ptr, 4096)) == 1
        # not every page of the range: 0
        assert chk(d.cuMemRangeGetAttribute(4, R.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, ptr, 8192)) == 0
        chk(d.cuMemAdvise(ptr, 3 * 4096, d.CUmem_advise.CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host))
        assert chk(d.cuMemRangeGetAttribute(4, R.CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, ptr,
                                            3 * 4096)) == -1                 # CU_DEVICE_CPU
        chk(d.cuMemAdvise(ptr, 3 * 4096, d.CUmem_advise.CU_MEM_ADVISE_SET_ACCESSED_BY, loc))
        assert list(chk(d.cuMemRangeGetAttribute(12, R.CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, ptr,
                                                 3 * 4096))) == [0, -2, -2]  # then CU_DEVICE_INVALID
        s = chk(d.cuStreamCreate(1))
        assert chk(d.cuMemRangeGetAttribute(4, R.CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                                            ptr, 4096)) == -2                # never prefetched
        chk(d.cuMemPrefetchAsync(ptr, 4096, loc, 0, s))
        chk(d.cuMemPrefetchAsync(ptr + 4096, 4096, host, 0, s))
        assert chk(d.cuMemRangeGetAttribute(4, R.CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                                            ptr, 4096)) == 0
        assert chk(d.cuMemRangeGetAttribute(4, R.CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                                            ptr, 8192)) == -2                # two locations
        vals = chk(d.cuMemRangeGetAttributes([4, 4], [R.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY,
                                                     R.CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION],
                                             2, ptr, 4096))
        assert [int(v) for v in vals] == [1, -1], vals
        # device memory is not managed memory
        buf = chk(d.cuMemAlloc(4096))
        assert code(d.cuMemAdvise(buf, 4096, d.CUmem_advise.CU_MEM_ADVISE_SET_READ_MOSTLY, loc)) == \\
            "CUDA_ERROR_INVALID_VALUE"
        assert code(d.cuMemRangeGetAttribute(4, R.CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, buf, 64)) == \\
            "CUDA_ERROR_INVALID_VALUE"
        chk(d.cuStreamSynchronize(s))
        print("OK")
    """)
