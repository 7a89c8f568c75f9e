"""A signal handler that calls the driver while the simulator runs device work (issue 35).

Python runs a signal handler on the main thread, between two bytecodes.  On a
GPU the driver is C: a handler never runs inside a driver call, so one that
downloads an array while the main thread synchronises runs after that
synchronisation, and works.  The simulator runs device work in Python on the
synchronising thread: a handler ran inside it, its download needed the work in
progress and failed (``ReentryError``), and the pageable copy it had queued
kept a raw pointer to the handler's buffer -- freed when the handler failed --
which the next synchronisation wrote into: "double free or corruption",
SIGSEGV.  The simulator now holds asynchronous signals back on the main thread
while it runs device work (``sim/_signals.py``), as a driver call does, so the
handler runs after it; and a re-entered call that still cannot complete (a
handler run because a program's own thread received the signal) leaves
nothing queued behind.

Each case runs in a child process, so a crash fails the test instead of
killing pytest: on the ``sim`` backend and on the cuda backend over the
stand-in driver.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpuarray_sim import standin as _standin

from tests.support import backend_is_sim

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32",
                                reason="POSIX signals")

ROOT = str(Path(__file__).resolve().parents[3])
TIMEOUT = 30

# The kernel raises SIGALRM at its start: the handler runs at the next
# bytecode (inside the kernel, before the fix).  The handler downloads ``x``,
# which the kernel writes on the same stream: the download needs the kernel.
_PRELUDE = r"""
import gc, signal, numpy as np
import gpuarray
from gpuarray_sim import kernels as sim_kernels
from tests.support import the_simulator

b = the_simulator()
x = gpuarray.to_device(np.arange(16, dtype=np.uint8))
x.stream.synchronize()
seen = []

def handler(sig, frame):
    try:
        seen.append(x.copy_to_host().tolist())
    except Exception as e:
        seen.append(f"{type(e).__name__}: {e}")

signal.signal(signal.SIGALRM, handler)

class Kernel:
    def accesses(self, params):
        return [(params[0].value, params[1].value, True)]

    def run(self, mem, grid, block, shared, params):
        signal.raise_signal(signal.SIGALRM)
        total = 0
        for i in range(1000):  # bytecodes, where a handler may run
            total += i
        ptr, n = params[0].value, params[1].value
        mem.write(ptr, mem.read(ptr, n) + 1)

sim_kernels.register("signal_kernel", Kernel())
f = b.module_get_function(b.module_load_data(b"gpuarray-sim-placeholder\0signal_kernel"), "signal_kernel")

def launch():
    import ctypes
    b.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, int(x.stream),
                    [ctypes.c_uint64(x.gpu_data.device_pointer), ctypes.c_int64(16)])
"""

_MAIN_THREAD = _PRELUDE + r"""
for _ in range(3):
    launch()
    x.stream.synchronize()      # runs the kernel: the handler comes after it
    junk = [np.zeros(4096) for _ in range(50)]  # the heap moves on (a freed buffer is reused)
    del junk
    gc.collect()
x.stream.synchronize()
print(repr((seen, x.copy_to_host().tolist())))
"""


def _run(script: str, env: dict[str, str]) -> tuple:
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=180, env=env, cwd=ROOT)
    assert res.returncode == 0, f"the child failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return eval(res.stdout.strip().splitlines()[-1])  # a repr of plain values


def _sim_env() -> dict[str, str]:
    return dict(os.environ, GPUARRAY_BACKEND="sim")


def _standin_env() -> dict[str, str]:
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")
    try:
        folder = _standin.build()
    except _standin.StandinUnavailableError as e:
        pytest.skip(f"the stand-in driver cannot be built here: {e}")
    return _standin.environment(folder)


def _check_main_thread(seen: list, final: list) -> None:
    base = list(range(16))
    # each handler ran after the synchronisation that ran the kernel, as on a GPU
    assert seen == [[v + k for v in base] for k in (1, 2, 3)], seen
    assert final == [v + 3 for v in base]


def test_a_handler_downloading_during_a_synchronisation_runs_after_it_on_the_sim_backend():
    _check_main_thread(*_run(_MAIN_THREAD, _sim_env()))


def test_a_handler_downloading_during_a_synchronisation_runs_after_it_over_the_standin():
    _check_main_thread(*_run(_MAIN_THREAD, _standin_env()))


@pytest.mark.skipif(not backend_is_sim(), reason="checks the simulator's model of CUDA")
def test_a_reentered_download_that_cannot_complete_leaves_nothing_queued_behind():
    # A call made inside device work (here by the kernel itself: what a
    # handler run because a program's own thread took the signal does) needs
    # that work done: it fails, and its copy never runs later. Before: the
    # copy stayed queued and wrote into the caller's buffer at the next
    # synchronisation (freed memory, when the caller had let it go).
    import ctypes

    import numpy as np
    from gpuarray_sim import SimBackend
    from gpuarray_sim import kernels as sim_kernels
    from gpuarray_sim._sched import ReentryError

    b = SimBackend()
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    x = b.mem_alloc(16)
    b.memset_d8_async(x, 7, 16, 1)
    out = np.zeros(16, np.uint8)
    errors: list[BaseException] = []

    class Kernel:
        def accesses(self, params):
            return [(params[0].value, 16, True)]

        def run(self, mem, grid, block, shared, params):
            try:
                b.memcpy_dtoh_async(out.ctypes.data, x, 16, 1)  # pageable: needs this kernel
            except ReentryError as e:
                errors.append(e)
            mem.write(x, mem.read(x, 16) + 1)

    sim_kernels.register("reentered_download", Kernel())
    f = b.module_get_function(b.module_load_data(b"gpuarray-sim-placeholder\0reentered_download"),
                              "reentered_download")
    b.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, 1, [ctypes.c_uint64(x)])
    b.ctx_synchronize()
    b.ctx_synchronize()  # whatever the first one left queued runs now
    assert len(errors) == 1
    assert not out.any()  # the failed copy never wrote
    again = np.zeros(16, np.uint8)
    b.memcpy_dtoh_async(again.ctypes.data, x, 16, 1)
    np.testing.assert_array_equal(again, 8)  # the kernel ran once; the simulator goes on
    assert not out.any()


@pytest.mark.skipif(not backend_is_sim(), reason="checks the simulator's model of CUDA")
def test_a_signal_reaches_a_synchronisation_waiting_for_a_host_function():
    # While the main thread waits (lock released) for a host function, no
    # work runs on it: signals come through, so a wait that would hang stays
    # interruptible (SIGINT, SIGTERM, a test's timeout alarm). Here the host
    # function waits for what the handler does.
    import signal
    import threading

    import numpy as np

    import gpuarray

    s = gpuarray.stream(non_blocking=True)
    x = gpuarray.to_device(np.arange(4), stream=s)
    handled = threading.Event()
    order: list[str] = []
    main = threading.get_ident()

    def handler(sig, frame):
        order.append("handler")
        handled.set()

    def callback(stream, status, arg):
        signal.pthread_kill(main, signal.SIGALRM)  # to the main thread, which waits in the sync
        order.append("callback waits" if handled.wait(30) else "callback timed out")

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        s.add_callback(callback)
        x.copy_to_device(np.ones(4, np.int64))  # queued after the callback
        s.synchronize()
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert order == ["handler", "callback waits"]


def test_a_child_forked_by_a_helper_thread_of_gpuarray_gets_signals():
    # gpuarray's helper threads block asynchronous signals (so the main
    # thread takes them); a child forked by one has that thread as its main
    # thread, which must get them again.
    import signal
    import threading

    from gpuarray_sim import _signals

    result: dict[str, object] = {}

    def helper():
        _signals.block_in_this_thread()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
            os.write(w, repr(sorted(int(s) for s in blocked)).encode())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        with os.fdopen(r) as f:
            result["child"] = f.read()
        result["helper"] = sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))

    t = threading.Thread(target=helper)
    t.start()
    t.join(TIMEOUT)
    assert int(signal.SIGALRM) in result["helper"]  # the helper itself still blocks them
    assert int(signal.SIGALRM) not in eval(result["child"])
    assert int(signal.SIGINT) not in eval(result["child"])

