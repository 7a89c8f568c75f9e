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

Events (``cuIpcGetEventHandle``/``cuIpcOpenEventHandle``): only an event
created with ``CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING`` is exported
(else ``CUDA_ERROR_INVALID_VALUE``); its handle has the layout above with
magic ``b"GSIE"``, the exporter's event handle for the base and size 0, and
names a small segment, the event's shared record (:class:`SharedEvent`):
the generation of its latest record, the newest generation completed, the
newest one some process waits for.  A record in either process takes the
next generation, and its op marks it completed when the stream reaches it;
``cuEventQuery``, ``cuEventSynchronize`` and ``cuStreamWaitEvent`` on an
event whose latest record another process made read and wait on the record.
Each process runs its queued work only when it synchronizes, so a process
that holds shared events runs a progress thread: when another process waits
for a generation that this one's queued op completes, the thread runs the
work up to it (faults stay with their stream: sticky ones poison the
context, others are reported at the stream's next synchronisation), as a
GPU runs work nobody waits for.  The opened event behaves as a local event
without timing; opening a handle in the process that made it is
``CUDA_ERROR_INVALID_CONTEXT``, as for memory; the exporter's
``cuEventDestroy`` unlinks the segment (importers keep their mapping), an
importer's unmaps it.  A wait for another process's record counts, for the
race detector, as ordered after every completed record here of a shared
event (the only way the other process could have followed this one's work).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sized
from multiprocessing import resource_tracker, shared_memory
from typing import Any, Protocol

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


def _attach_exported(name: str, call: str, gone: str) -> shared_memory.SharedMemory:
    """:func:`_attach` to segment ``name`` another process exported; a segment that no longer
    exists is ``CUDA_ERROR_MAP_FAILED`` of ``call``, saying ``gone`` (or that process ended)."""
    try:
        return _attach(name)
    except FileNotFoundError:
        raise CudaError(MAP_FAILED, call, f"(segment {name} is gone: {gone} or its process "
                                          "ended)", name="CUDA_ERROR_MAP_FAILED") from None


def _unpack(raw: bytes, magic: bytes, kind: str, maker: str) -> tuple:
    """The fields of a simulator handle of ``magic`` (its segment name decoded), or ValueError."""
    raw = bytes(raw)
    if len(raw) != HANDLE.size:
        raise ValueError(f"an IPC {kind} handle is {HANDLE.size} bytes, got {len(raw)}")
    fields = HANDLE.unpack(raw)
    if fields[0] != magic or fields[1] != VERSION:
        raise ValueError(f"not a handle made by the simulator's {maker}")
    return (*fields[:-1], fields[-1].rstrip(b"\0").decode("ascii"))


def parse_handle(raw: bytes) -> tuple[int, int, int, int, str]:
    """``(device, pid, base, size, segment name)`` of a simulator handle, or ValueError."""
    _, _, device, _, pid, _, base, size, name = _unpack(raw, MAGIC, "memory", "cuIpcGetMemHandle")
    return device, pid, base, size, name


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
        shm = _attach_exported(name, call, "the exporting allocation was freed")
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


# ---------------------------------------------------------------- events
#: Magic of an event handle (``cuIpcGetEventHandle``); its layout is the memory handle's,
#: with the exporter's event handle where the allocation base is and a size of 0.
EVENT_MAGIC = b"GSIE"
#: The words of an event's shared record: the generation of its latest record, the newest
#: generation completed, and the newest generation some process waits for.
_RECORDED, _COMPLETED, _WANTED = range(3)
_EVENT_WORDS = 4


def parse_event_handle(raw: bytes) -> tuple[int, int, str]:
    """``(pid, exporter's event handle, segment name)`` of a simulator event handle, or ValueError."""
    _, _, _, _, pid, _, event, _, name = _unpack(raw, EVENT_MAGIC, "event", "cuIpcGetEventHandle")
    return pid, event, name


class SharedEvent:
    """An IPC event's record in shared memory: what every process that holds it sees.

    A record (``cuEventRecord``, in either process) takes the next generation
    and queues an op that marks that generation completed when the stream
    reaches it; the event is complete when the newest completed generation
    reaches the latest recorded one.  A process that waits for a generation
    another process's op completes says so (the ``wanted`` word): that
    process's progress thread then runs its queued work up to the record,
    as a GPU would run it without being asked.
    """

    def __init__(self, shm: shared_memory.SharedMemory, owner: bool) -> None:
        self.shm = shm
        self.owner = owner
        self.words = np.ndarray((_EVENT_WORDS,), dtype=np.uint64, buffer=shm.buf)
        #: The generation of this process's latest record of the event (0: none).
        self.local = 0

    def record(self) -> int:
        g = int(self.words[_RECORDED]) + 1
        self.words[_RECORDED] = g
        self.local = g
        return g

    def latest(self) -> int:
        return int(self.words[_RECORDED])

    def complete(self, g: int) -> None:
        if int(self.words[_COMPLETED]) < g:
            self.words[_COMPLETED] = g

    def done(self, g: int) -> bool:
        return int(self.words[_COMPLETED]) >= g

    def want(self, g: int) -> None:
        if int(self.words[_WANTED]) < g:
            self.words[_WANTED] = g

    def wanted_here(self, done: bool) -> bool:
        """Whether another process waits for this process's latest record (``done``: its op ran)."""
        return (not done and self.local > int(self.words[_COMPLETED])
                and int(self.words[_WANTED]) >= self.local)

    def wait(self, g: int) -> None:
        """Block until generation ``g`` is completed (by whichever process recorded it)."""
        pause = 0.0002
        while not self.done(g):
            self.want(g)
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def release(self) -> None:
        """The event was destroyed here: the exporter unlinks the segment, an importer unmaps it."""
        if self.owner:
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass
        del self.words
        _close(self.shm)


class SimIpcEvents:
    """The IPC events of one simulated driver: export, open, and the progress thread."""

    def __init__(self, backend: Any) -> None:
        # the simulator (its _ipc_events and _ipc_progress), weakly: the thread must not keep it
        self._b = weakref.ref(backend)
        self._exports: dict[int, bytes] = {}  # event handle -> IPC handle
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def export(self, event: int, device: int) -> tuple[bytes, SharedEvent]:
        """A new shared record for ``event`` and its 64-byte handle."""
        pid = os.getpid()
        name = f"{SHM_PREFIX}{pid}_e{next(_names)}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=8 * _EVENT_WORDS)
        shared = SharedEvent(shm, owner=True)
        shared.words[:] = 0
        handle = HANDLE.pack(EVENT_MAGIC, VERSION, device, 0, pid, 0, event, 0, name.encode("ascii"))
        self._exports[event] = handle
        return handle, shared

    def handle_of(self, event: int) -> bytes | None:
        return self._exports.get(event)

    def forget(self, event: int) -> None:
        self._exports.pop(event, None)

    def open(self, handle: bytes, call: str) -> SharedEvent:
        try:
            pid, _, name = parse_event_handle(handle)
        except ValueError as e:
            raise CudaError(INVALID_VALUE, call, f"({e})") from None
        if pid == os.getpid():
            raise CudaError(INVALID_CONTEXT, call, "(the handle was made by this process: the "
                                                   "simulator opens IPC handles only in other processes)")
        return SharedEvent(_attach_exported(name, call, "the exported event was destroyed"),
                           owner=False)

    def start(self) -> None:
        """Run the progress thread (once an event holds its shared record: it stops when none does)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._progress, name="gpuarray-sim-ipc-events",
                                                daemon=True)
                self._thread.start()

    def _progress(self) -> None:
        """Run this process's work up to a record of an IPC event another process waits for."""
        while True:
            b = self._b()
            if b is None:
                return
            events = b._ipc_events()
            if not events:
                with self._lock:  # start() sees either this thread running or none
                    if not b._ipc_events():
                        self._thread = None
                        return
                continue
            for handle, shared, done in events:
                if shared.wanted_here(done):
                    b._ipc_progress(handle)  # runs the queued work the record needs
            del b
            time.sleep(0.002)
