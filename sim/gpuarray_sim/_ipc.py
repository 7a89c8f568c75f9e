"""IPC for the simulator: device allocations shared across processes through shared memory.

Each process has its own simulator, so an exported allocation must live
somewhere both can reach.  When a handle is first taken
(``cuIpcGetMemHandle``) the allocation's backing store moves into a POSIX
shared-memory segment (``multiprocessing.shared_memory``): its bytes are
copied and the allocation keeps working, now over the segment.  The 64-byte
handle names the segment; another process's simulator maps it
(``cuIpcOpenMemHandle``) as an allocation of kind ``"ipc"`` on its current
device, whose reads and writes are the exporter's bytes.

Handle layout (little-endian, 64 bytes)::

    0   4s   magic b"GSIM"
    4   B    layout version (1)
    5   B    exporting device ordinal
    6   H    reserved (0)
    8   I    exporting process id
    12  I    reserved (0)
    16  Q    allocation base address in the exporting process
    24  Q    allocation size in bytes
    32  32s  shared-memory segment name (ASCII, NUL-padded)

Lifetimes, as in CUDA: the same allocation always gives the same handle;
opening a handle in the process that made it fails with
``CUDA_ERROR_INVALID_CONTEXT``; opening it again in a process where it is open
returns the same address and counts a reference, each
``cuIpcCloseMemHandle`` drops one, and the last unmaps (after the queued work,
like ``cuMemFree``).  The exporter unlinks the segment when the exported
allocation is freed (when its store is dropped), so nothing is left in
``/dev/shm``; mappings already open in other processes stay readable, as the
memory of a freed CUDA allocation would be -- a use after free the simulator
cannot see across processes.  Only cuMemAlloc memory can be exported: pool
memory (``cuMemAllocAsync``) and IPC mappings are refused with
``CUDA_ERROR_INVALID_VALUE``, as CUDA does.  Races between processes are not
detected.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import struct
import sys
import threading
import weakref
from collections.abc import Callable, Sized
from multiprocessing import resource_tracker, shared_memory
from typing import Protocol

import numpy as np

from gpuarray.errors import CudaError

from ._codes import INVALID_CONTEXT, MAP_FAILED
from ._memory import ALIGN, AddressSpace, Allocation
from ._sched import Scheduler, SimContext


class _Driver(Protocol):
    """What the IPC calls use of the simulator: its memory, scheduler and context checks."""

    memory: AddressSpace
    sched: Scheduler
    _contexts: list[SimContext]

    def _current(self, call: str, work: bool = True) -> SimContext: ...

    def _sync(self, call: str, fn: Callable[[], None]) -> None: ...

MAGIC = b"GSIM"
VERSION = 1
HANDLE = struct.Struct("<4sBBHIIQQ32s")
assert HANDLE.size == 64
#: Prefix of the simulator's shared-memory segment names.
SHM_PREFIX = "gpuarray_sim_"

INVALID_VALUE = 1

_names = itertools.count()
# Segments whose close() met a live buffer export: closed later.
_to_close: list[shared_memory.SharedMemory] = []


def _close_later() -> None:
    for shm in list(_to_close):
        try:
            shm.close()
        except BufferError:
            continue
        _to_close.remove(shm)


def _close(shm: shared_memory.SharedMemory) -> None:
    try:
        shm.close()
    except BufferError:  # a view of the store is still alive somewhere
        _to_close.append(shm)


def _unlink_export(shm: shared_memory.SharedMemory) -> None:
    """The exported allocation's store died (freed, or the simulator went away)."""
    try:
        shm.unlink()
    except FileNotFoundError:
        pass
    _close(shm)


_attach_lock = threading.Lock()


def _attach(name: str) -> shared_memory.SharedMemory:
    """Attach to a segment without registering it with a resource tracker.

    The exporter owns the segment.  Before Python 3.13, attaching registers
    it too (bpo-39959): a tracker of this process would unlink the exporter's
    segment when this process ends, and unregistering afterwards would remove
    the *exporter's* registration from a tracker shared with a spawned child.
    So registration is skipped for the duration of the attach.
    """
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    with _attach_lock:
        register = resource_tracker.register

        # register's own signature (parameter names included), so it type-checks
        def skip_shared_memory(name: Sized, rtype: str) -> None:
            if rtype != "shared_memory":
                register(name, rtype)

        resource_tracker.register = skip_shared_memory
        try:
            return shared_memory.SharedMemory(name=name)
        finally:
            resource_tracker.register = register


def parse_handle(raw: bytes) -> tuple[int, int, int, int, str]:
    """``(device, pid, base, size, segment name)`` of a simulator handle, or ValueError."""
    raw = bytes(raw)
    if len(raw) != HANDLE.size:
        raise ValueError(f"an IPC memory handle is {HANDLE.size} bytes, got {len(raw)}")
    magic, version, device, _, pid, _, base, size, name = HANDLE.unpack(raw)
    if magic != MAGIC or version != VERSION:
        raise ValueError("not a handle made by the simulator's cuIpcGetMemHandle")
    return device, pid, base, size, name.rstrip(b"\0").decode("ascii")


@dataclasses.dataclass(eq=False)
class _Import:
    key: bytes
    alloc: Allocation
    shm: shared_memory.SharedMemory
    refs: int = 1


class SimIpc:
    """The IPC state of one simulated driver (exports and open mappings)."""

    def __init__(self, backend: _Driver) -> None:
        self._b = backend
        self._exports: dict[int, bytes] = {}  # allocation base -> handle
        self._imports: dict[tuple[int, bytes], _Import] = {}  # (device, handle) -> mapping
        self._by_ptr: dict[int, _Import] = {}

    # ------------------------------------------------------------ export
    def get_handle(self, ptr: int) -> bytes:
        call = "cuIpcGetMemHandle"
        self._b._current(call)
        _close_later()
        mem = self._b.memory
        a = mem.find(int(ptr))
        if a is None or not a.alive or a.is_host:
            raise CudaError(INVALID_VALUE, call, f"0x{int(ptr):x} is not live device memory")
        if a.base != ptr:
            raise CudaError(INVALID_VALUE, call, f"0x{int(ptr):x} is inside {a.describe()}, not its "
                                                 "start: IPC handles name whole allocations")
        if a.kind == "pool":
            raise CudaError(INVALID_VALUE, call, f"{a.describe()} comes from cuMemAllocAsync: pool "
                                                 "memory is not shareable with cuIpcGetMemHandle")
        if a.kind != "device":
            raise CudaError(INVALID_VALUE, call, f"{a.describe()} is not from cuMemAlloc")
        handle = self._exports.get(a.base)
        if handle is not None:
            return handle
        pid = os.getpid()
        name = f"{SHM_PREFIX}{pid}_{next(_names)}"
        # the segment holds the allocation's mapped slack too (its importers' as well)
        shm = shared_memory.SharedMemory(name=name, create=True, size=a.size + a.slack)
        store = np.ndarray((a.size,), dtype=np.uint8, buffer=shm.buf)
        store[:] = a.store  # queued work still to run will use the new store
        a.store = store
        # When the allocation is freed its store is dropped: unlink the segment then.
        weakref.finalize(store, _unlink_export, shm)
        handle = HANDLE.pack(MAGIC, VERSION, a.device, 0, pid, 0, a.base, a.size,
                             name.encode("ascii"))
        self._exports[a.base] = handle
        return handle

    # -------------------------------------------------------------- open
    def open(self, handle: bytes) -> int:
        call = "cuIpcOpenMemHandle"
        ctx = self._b._current(call)
        _close_later()
        try:
            _, pid, _, size, name = parse_handle(handle)
        except ValueError as e:
            raise CudaError(INVALID_VALUE, call, f"({e})") from None
        if pid == os.getpid():
            raise CudaError(INVALID_CONTEXT, call, "(the handle was made by this process: CUDA "
                                                   "opens IPC handles only in other processes)")
        key = (ctx.device, bytes(handle))
        imp = self._imports.get(key)
        if imp is not None:  # already open in this context: count a reference
            imp.refs += 1
            return imp.alloc.base
        try:
            shm = _attach(name)
        except FileNotFoundError:
            raise CudaError(MAP_FAILED, call, f"(segment {name} is gone: the exporting allocation "
                                              "was freed or its process ended)",
                            name="CUDA_ERROR_MAP_FAILED") from None
        mem = self._b.memory
        dev = ctx.device
        base = mem._next[dev]
        mem._next[dev] += -(-size // ALIGN) * ALIGN
        store = np.ndarray((size,), dtype=np.uint8, buffer=shm.buf)
        a = Allocation(base, size, dev, "ipc", store,
                       slack=max(0, min(shm.size, -(-size // ALIGN) * ALIGN) - size))
        mem._insert(a)
        imp = _Import(bytes(handle), a, shm)
        self._imports[key] = imp
        self._by_ptr[base] = imp
        return base

    # ------------------------------------------------------------- close
    def close(self, ptr: int) -> None:
        call = "cuIpcCloseMemHandle"
        self._b._current(call)
        imp = self._by_ptr.get(int(ptr))
        if imp is None:
            raise CudaError(INVALID_VALUE, call, f"0x{int(ptr):x} was not mapped by cuIpcOpenMemHandle")
        imp.refs -= 1
        if imp.refs:
            return
        del self._by_ptr[int(ptr)]
        del self._imports[(imp.alloc.device, imp.key)]
        b = self._b
        b._sync(call, lambda: b.sched.complete_all())
        for ctx in b._contexts:
            for s in b.sched.streams_by_ctx.get(id(ctx), ()):
                b.sched.host_observes(s.vc)
        b.memory.free_device(imp.alloc.base, call)  # later accesses: use after close
        _close(imp.shm)
        _close_later()
