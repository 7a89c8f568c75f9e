"""The simulator's runtime for kernels compiled for the host CPU.

One concern: run one launch of a host-built kernel with checked memory.
The C++ piece (``_hostrt.cpp`` beside this file) runs every thread of every
block as cooperative fibers and translates the kernel's global-memory
accesses through *grants*; this module loads it with ctypes
(:class:`HostRuntime`), turns the extents a launch is entitled to into
grants (:func:`grants_for`) and reports a fault as the simulator's
:class:`~._memory.DeviceFault` (sticky, at the next synchronisation).

Grants are the strict choice: exactly the byte extents the kernel's
``accesses()`` declares (the ones the race detector judges), read-only for
reads and writable for writes.  An access outside them is
``CUDA_ERROR_ILLEGAL_ADDRESS`` (700) even where a GPU would let it through
to another live allocation: a kernel that strays from what it declared is
wrong either way.  A misaligned access (address not a multiple of the
access type's alignment) is ``CUDA_ERROR_MISALIGNED_ADDRESS`` (716), as on
a GPU.

Kernels translated from PTX (``ptx/``) run on the same runtime: they wait
for other threads (barriers, warp collectives) through ``yield``, which
resumes them in the next round; a round in which every waiting thread
waits again and none progressed is a deadlock, reported as
``CUDA_ERROR_LAUNCH_FAILED`` (719) naming the thread and the PTX line
(faults name the instruction through ``launch(source=...)``).  A PTX
thread in a loop yields every 1024 backward branches (``ptx::spin``), so
a spin-wait on a flag or lock another thread sets works (another block's
too: when the resident blocks only spin, the runtime makes one more block
resident, up to the launch's ``slots``); rounds
of such yields are no deadlock, but after ``GPUARRAY_SIM_LAUNCH_TIMEOUT``
seconds (default 30) of them with no thread finishing or passing a barrier
the launch ends with ``CUDA_ERROR_LAUNCH_TIMEOUT`` (702, sticky as on a
GPU) naming the loop's branch.

A launch may run its blocks on several host threads at once (``workers``:
:func:`workers` and :func:`workers_for` are the policy,
``GPUARRAY_SIM_WORKERS``), each with its own fibers, residency slots and
launch record; the first fault ends the launch for all of them.

Building the library (compiler, flags, disk cache) is the kernels layer's
job (``sim/gpuarray_sim/kernels/_host.py``), which knows where ``sim/gpuarray_sim/kernels/ga_host.cuh``
is and registers itself in ``sim/gpuarray_sim/_host_toolchain.py`` for the PTX
executor; this module only knows the source's path and how to load the
result.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._host_toolchain import set_toolchain, toolchain
from ._memory import DeviceFault

__all__ = ["RUNTIME_SOURCE", "HEADERS", "ABI", "HostRuntime", "Grant", "grants_for", "set_toolchain",
           "toolchain", "MIN_PARALLEL_THREADS", "workers", "workers_for", "LaunchFault"]

#: The runtime's C++ source.
RUNTIME_SOURCE = Path(__file__).with_name("_hostrt.cpp")
#: The headers the runtime includes (``-I`` this folder): the launch record it and the code it
#: runs share, its fibers, its own launch record, its helper threads and its fault handler (a
#: build's cache key covers them).
HEADERS = tuple(Path(__file__).with_name(n)
                for n in ("ga_hostrt.h", "_hostrt_fibers.h", "_hostrt_launch.h", "_hostrt_pool.h",
                          "_hostrt_signals.h"))
#: The ``GA_HOST_ABI`` of ``ga_hostrt.h`` (the launch record) this module speaks.
ABI = 4

#: Threads a grid must have in all (blocks x threads per block) before several
#: workers share it: a smaller launch runs in less time than handing blocks to
#: other host threads takes (``GPUARRAY_SIM_WORKERS_MIN_THREADS`` sets another).
MIN_PARALLEL_THREADS = 4096

_cores: int | None = None
_load = [-10.0, 0.0]  # when the load average was read (monotonic seconds), and its value
_runnable = [-10.0, 0]  # when the runnable threads were counted, and how many (0: unknown)


def _idle_cores(cores: int) -> float:
    """Cores the rest of the machine leaves idle: ``cores`` less the 1-minute load (read 1/s)."""
    now = time.monotonic()
    if now - _load[0] > 1.0:
        try:
            _load[1] = os.getloadavg()[0]
        except OSError:  # no load average here: assume the cores are ours
            _load[1] = 0.0
        _load[0] = now
    return cores - _load[1]


def _idle_now(cores: int) -> int | None:
    """Cores idle at this moment: ``cores`` less the threads runnable now, this one included
    (``/proc/loadavg``'s fourth field; read at most every 50 ms).  None: not known here."""
    now = time.monotonic()
    if now - _runnable[0] > 0.05:
        try:
            with open("/proc/loadavg", "rb") as f:
                _runnable[1] = int(f.read().split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            _runnable[1] = 0
        _runnable[0] = now
    n = int(_runnable[1])
    return None if n <= 0 else max(0, cores - n)


def workers() -> int:
    """Host threads that may run one launch's blocks at once (``GPUARRAY_SIM_WORKERS``).

    An integer >= 1: that many.  Unset or ``auto`` (the default): the cores
    this process may run on (``os.sched_getaffinity``) divided by
    ``PYTEST_XDIST_WORKER_COUNT`` (pytest-xdist already runs a process per
    core: more threads would only contend), and no more than one plus the
    cores the machine's other work leaves idle (the 1-minute load average:
    a worker without a core of its own only takes turns with the others --
    numba-cuda's test_matmul and test_laplace took 242 s with two workers
    against 108 s with one at a load of 6 on 2 cores, and 38.2 s against
    67.6 s on the quiet machine).  Under pytest-xdist, also one plus the
    cores idle at the moment of the launch (``/proc/loadavg``'s count of
    runnable threads), when that is more: once the other processes have
    run out of tests, the last long launches take the cores they left
    (the 1-minute average still counts them busy for a minute).  Always 1 under
    ``GPUARRAY_SIM_SEED``: a seeded run replays the same block order (one
    worker admits the blocks in order, deterministically).

    Raises
    ------
    ValueError
        ``GPUARRAY_SIM_WORKERS`` is neither ``auto`` nor an integer >= 1.
    """
    global _cores
    if os.environ.get("GPUARRAY_SIM_SEED", "").strip():
        return 1
    text = os.environ.get("GPUARRAY_SIM_WORKERS", "").strip()
    if text and text.lower() != "auto":
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"GPUARRAY_SIM_WORKERS={text!r}: use auto or an integer >= 1")
        return n
    if _cores is None:
        _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    try:
        procs = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        procs = 1
    share = _cores // procs
    if procs > 1:
        idle = _idle_now(_cores)
        if idle is not None and 1 + idle > max(share, 1):
            return min(_cores, 1 + idle)
    if share <= 1:
        return 1
    return max(1, min(share, 1 + int(_idle_cores(_cores) + 0.5)))


def workers_for(nblocks: int, threads: int, cooperative: bool = False) -> int:
    """Workers for a launch of ``nblocks`` blocks of ``threads`` threads (:func:`workers`).

    One for a cooperative launch (its blocks wait for each other at
    ``grid.sync``), for a single block, and for a grid of fewer than
    :data:`MIN_PARALLEL_THREADS` threads (``GPUARRAY_SIM_WORKERS_MIN_THREADS``,
    an integer >= 0, when set); never more than the blocks.

    Raises
    ------
    ValueError
        ``GPUARRAY_SIM_WORKERS`` or ``GPUARRAY_SIM_WORKERS_MIN_THREADS`` is malformed.
    """
    least = MIN_PARALLEL_THREADS
    text = os.environ.get("GPUARRAY_SIM_WORKERS_MIN_THREADS", "").strip()
    if text:
        try:
            least = int(text)
        except ValueError:
            least = -1
        if least < 0:
            raise ValueError(f"GPUARRAY_SIM_WORKERS_MIN_THREADS={text!r}: use an integer >= 0")
    if cooperative or nblocks < 2 or nblocks * threads < least:
        return 1
    return max(1, min(workers(), nblocks))


_NAMES = {700: "CUDA_ERROR_ILLEGAL_ADDRESS", 710: "CUDA_ERROR_ASSERT", 716: "CUDA_ERROR_MISALIGNED_ADDRESS",
          714: "CUDA_ERROR_HARDWARE_STACK_ERROR", 719: "CUDA_ERROR_LAUNCH_FAILED",
          702: "CUDA_ERROR_LAUNCH_TIMEOUT", 718: "CUDA_ERROR_INVALID_PC",
          2: "CUDA_ERROR_OUT_OF_MEMORY"}
_GLOBAL, _SHARED, _STACK, _EXCEPTION, _DEADLOCK, _SPIN = 0, 1, 2, 3, 4, 5


class Grant(ctypes.Structure):
    """One extent of device memory a launch may touch (``ga_host_grant``)."""

    _fields_ = [("base", ctypes.c_uint64), ("size", ctypes.c_uint64),
                ("host", ctypes.c_void_p), ("writable", ctypes.c_int)]


class _Fault(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("write", ctypes.c_int), ("addr", ctypes.c_uint64),
                ("size", ctypes.c_uint64), ("block", ctypes.c_uint * 3),
                ("thread", ctypes.c_uint * 3), ("space", ctypes.c_int),
                ("extent", ctypes.c_uint64), ("what", ctypes.c_char * 128),
                ("line", ctypes.c_uint)]


_Dim = ctypes.c_uint * 3


class LaunchFault(DeviceFault):
    """A fault that ended a launch (:meth:`HostRuntime.launch`), with the thread that faulted.

    ``block`` and ``thread``: that thread's ``blockIdx`` and ``threadIdx``
    (x, y, z), which the message names too.
    """

    def __init__(self, code: int, detail: str, block: tuple[int, ...],
                 thread: tuple[int, ...]) -> None:
        super().__init__(code, detail)
        self.block = block
        self.thread = thread


class HostRuntime:
    """The loaded runtime library."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        abi = lib.ga_hostrt_abi()
        if abi != ABI:
            raise RuntimeError(f"host kernel runtime {lib._name} speaks ABI {abi}, expected {ABI}")
        fn = lib.ga_hostrt_launch
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, _Dim, _Dim,
                       ctypes.POINTER(Grant), ctypes.c_int, ctypes.c_uint, ctypes.c_int,
                       ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_uint),
                       ctypes.POINTER(_Fault)]
        held = lib.ga_hostrt_fibers
        held.restype = None
        held.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64)]
        self._lib = lib
        self._launch = fn
        self._held = held
        #: Workers that ran the process's last launch (``launch(workers=...)``).
        self.last_workers = 1

    def fibers_held(self) -> tuple[int, int]:
        """Fiber stacks held by the calling thread and on the process-wide free list."""
        mine, free = ctypes.c_uint64(), ctypes.c_uint64()
        self._held(ctypes.byref(mine), ctypes.byref(free))
        return mine.value, free.value

    def launch(self, kernel: str, entry: int, params: ctypes.Structure,
               grid: Sequence[int], block: Sequence[int], grants: Sequence[Grant],
               source: Callable[[int], str] | None = None, slots: int = 1,
               cooperative: bool = False, upgrade: ctypes.Array | None = None,
               workers: int = 1, stride: int = 0) -> None:
        """Run ``entry`` (address of ``ga_host__<kernel>``) over ``grid`` x ``block``.

        ``source(line)`` names the instruction at a PTX line (kernels
        translated from PTX); a fault there names it.  ``slots``: how many
        blocks may be resident at once (each gets ``ga_host_rt.slot``; one
        block at a time while they progress, more when the resident ones
        only spin); ``cooperative``: every block resident from the start
        (the grid must fit in ``slots``); ``upgrade``: two 64-bit words;
        another thread may set the first, while the launch runs, to the
        address of an entry that runs the same kernel (the PTX executor's
        translated build of an interpreted kernel): the blocks started after
        that run it, and the second counts them.  ``workers``: host threads
        that run the grid's blocks at once (at most one per slot; one for a
        cooperative launch; fewer when other launches hold the process's
        helper threads), worker ``w`` with the launch record at
        ``addressof(params) + w * stride`` (``stride`` 0: one record all
        share, which the kernel must then only read).

        Raises
        ------
        LaunchFault
            (a :class:`DeviceFault`) The kernel accessed memory outside ``grants`` or outside a
            ``__shared__`` array, or misaligned (700, 716), overflowed its
            stack (714), threw a C++ exception (719) or a PTX thread spun
            without progress past the launch timeout (702); the message names the
            kernel, what happened, and the block and thread.
        """
        arr = (Grant * max(1, len(grants)))(*grants)
        fault = _Fault()
        used = ctypes.c_uint(1)
        rc = self._launch(entry, ctypes.addressof(params), int(stride), _Dim(*grid), _Dim(*block),
                          arr, len(grants), max(1, int(slots)), int(bool(cooperative)),
                          ctypes.addressof(upgrade) if upgrade is not None else None,
                          max(1, int(workers)), ctypes.byref(used), ctypes.byref(fault))
        self.last_workers = used.value
        if rc == 0:
            return
        try:
            self._raise(kernel, rc, fault, grants, source)
        except DeviceFault as e:  # which thread it was, for the caller's records of the launch
            raise LaunchFault(e.code, e.detail, tuple(fault.block), tuple(fault.thread)) from None

    def _raise(self, kernel: str, rc: int, fault: _Fault, grants: Sequence[Grant],
               source: Callable[[int], str] | None) -> None:
        if rc == 2:
            raise DeviceFault(2, f"kernel {kernel}: no memory for the fibers of a block")
        where = f"block {tuple(fault.block)} thread {tuple(fault.thread)}"
        if fault.line and source is not None:
            where = f"{source(fault.line)}; {where}"
        name = _NAMES.get(rc, rc)
        if fault.space == _DEADLOCK:
            raise DeviceFault(rc, f"kernel {kernel}: deadlock: every waiting thread waits at a "
                                  "barrier or warp collective for threads that never reach it "
                                  f"(they exited or wait elsewhere) ({name}); the first waits at "
                                  f"{where}")
        if fault.space == _SPIN:
            raise DeviceFault(rc, f"kernel {kernel}: launch timeout: threads looped for "
                                  f"{fault.extent} s with no thread finishing or passing a "
                                  "barrier (a spin-wait on memory nothing writes, or that only a "
                                  "block which cannot be resident with the waiting ones would "
                                  "write; GPUARRAY_SIM_LAUNCH_TIMEOUT sets the limit) "
                                  f"({name}); the "
                                  f"first spins at {where}")
        if fault.space == _STACK:
            raise DeviceFault(rc, f"kernel {kernel}: the thread overflowed its {fault.extent >> 10}"
                                  f" KiB stack (fault at 0x{fault.addr:x}, {name}); {where}")
        if fault.space == _EXCEPTION:
            raise DeviceFault(rc, f"kernel {kernel}: the host build threw a C++ exception: "
                                  f"{fault.what.decode('utf-8', 'replace')} ({name}); {where}")
        if rc == 710:
            raise DeviceFault(rc, f"kernel {kernel}: device-side assertion failed ({name}); {where}")
        if rc == 714:  # a PTX thread's local frames outgrew its arena
            raise DeviceFault(rc, f"kernel {kernel}: the thread's local memory overflowed (a frame "
                                  f"of {fault.size} bytes at 0x{fault.addr:x}; deep or runaway "
                                  f"recursion) ({name}); {where}")
        what = "write" if fault.write else "read"
        if fault.space == _SHARED:
            off = ctypes.c_int64(fault.addr).value
            why = "misaligned" if rc == 716 else "outside it"
            raise DeviceFault(rc, f"kernel {kernel}: {what} of {fault.size} bytes at offset {off}"
                                  f" of a {fault.extent}-byte __shared__ array, {why} ({name}); "
                                  f"{where}")
        if rc == 718:  # ptxrt.h's bad_call: an indirect call of what is no such function
            raise DeviceFault(rc, f"kernel {kernel}: indirect call of address 0x{fault.addr:x}, "
                                  "which is no function of the call's prototype (a data "
                                  f"pointer, null, or a function of another signature) ({name}); "
                                  f"{where}")
        if fault.size == 0:  # a memory fault the checks did not see (a raw dereference)
            raise DeviceFault(rc, f"kernel {kernel}: memory fault at host address "
                                  f"0x{fault.addr:x}, outside every checked access ({name}); "
                                  f"{where}")
        why = ("misaligned" if rc == 716 else
               "outside every live allocation the kernel may reach" if source is not None else
               "outside the extents granted to the launch (" + ", ".join(
                   f"0x{g.base:x}+{g.size} {'rw' if g.writable else 'r'}" for g in grants) + ")")
        raise DeviceFault(rc, f"kernel {kernel}: {what} of {fault.size} bytes at address "
                              f"0x{fault.addr:x}, {why} ({name}); {where}")


def grants_for(mem: Any, accesses: Sequence[tuple[int, int, bool]]) -> tuple[list[Grant], list]:
    """Grants for the extents ``accesses`` (``(address, nbytes, is_write)``).

    ``mem`` is the launch's memory access object (``_KernelMemory``): each
    extent is checked there (live allocation, bounds, peer access; a
    :class:`DeviceFault` otherwise) and translated to a host pointer.
    Empty extents grant nothing.  Returns the grants and the buffers that
    must stay alive while the kernel runs.
    """
    grants, keep = [], []
    for address, nbytes, write in accesses:
        if nbytes <= 0:
            continue
        host, owner = mem.host_pointer(int(address), int(nbytes))
        keep.append(owner)
        grants.append(Grant(int(address), int(nbytes), host, 1 if write else 0))
    return grants, keep


# The C++ toolchain (compiler, flags, disk cache) belongs to the kernels layer;
# it registers itself in ``sim/gpuarray_sim/_host_toolchain.py`` (re-exported here).

