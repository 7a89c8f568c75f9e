"""CUDA in a process forked after its parent initialised CUDA (issue 29).

A driver answers every call of such a child -- ``cuInit`` included -- with
``CUDA_ERROR_NOT_INITIALIZED`` (gpuarray/_driver/_fork.py gives the
sources); gpuarray raises :class:`gpuarray.CudaForkError`, naming fork and
the remedy.  A child of a parent that never used CUDA works.  Checked on
the ``sim`` backend and on the cuda backend over the stand-in driver, each
in one child process that forks (fork exists on POSIX only).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from gpuarray_sim import standin as _standin

import gpuarray

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork exists on POSIX only")

_SCRIPT = r"""
import multiprocessing as mp
import numpy as np
import gpuarray

def child(q):
    try:
        q.put(("ok", gpuarray.to_device(np.arange(3)).copy_to_host().tolist()))
    except Exception as e:
        q.put((type(e).__name__, getattr(e, "code", None), str(e)))

def in_fork():
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    r = q.get(timeout=60)
    p.join(60)
    return r

before = in_fork()                 # the parent has not touched CUDA: the child may
a = gpuarray.to_device(np.arange(4))
after = in_fork()                  # the parent initialised CUDA: the child may not
print(repr((before, after, a.copy_to_host().tolist())))
"""


def _run(env: dict[str, str]) -> tuple:
    res = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         timeout=180, env=env)
    assert res.returncode == 0, res.stderr
    return eval(res.stdout.strip().splitlines()[-1])  # a repr of plain values


def _check(before: tuple, after: tuple, rest: list) -> None:
    assert before == ("ok", [0, 1, 2])
    name, code, message = after
    assert (name, code) == ("CudaForkError", 3)
    assert "forked" in message and "spawn" in message and "forkserver" in message
    assert "IPC" in message or "ipc" in message
    assert rest == [0, 1, 2, 3]  # the parent goes on


def test_a_fork_child_after_init_gets_cuda_fork_error_on_the_sim_backend():
    env = dict(os.environ, GPUARRAY_BACKEND="sim")
    _check(*_run(env))


def test_a_fork_child_after_init_gets_cuda_fork_error_over_the_standin():
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")
    try:
        folder = _standin.build()
    except _standin.StandinUnavailableError as e:
        pytest.skip(f"the stand-in driver cannot be built here: {e}")
    _check(*_run(_standin.environment(folder)))


def test_the_driver_answers_not_initialized_to_every_call_of_the_child_cuinit_included():
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")
    try:
        folder = _standin.build()
    except _standin.StandinUnavailableError as e:
        pytest.skip(f"the stand-in driver cannot be built here: {e}")
    code = textwrap.dedent(r'''
        import os
        from cuda.bindings import driver as d
        assert int(d.cuInit(0)[0]) == 0
        err, dev = d.cuDeviceGet(0)
        err, ctx = d.cuDevicePrimaryCtxRetain(dev)
        d.cuCtxSetCurrent(ctx)
        err, ptr = d.cuMemAlloc(16)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            codes = [int(d.cuInit(0)[0]), int(d.cuDeviceGetCount()[0]), int(d.cuMemAlloc(16)[0]),
                     int(d.cuMemFree(ptr)[0]), int(d.cuCtxSynchronize()[0])]
            os.write(w, repr(codes).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(os.read(r, 200).decode())
        assert int(d.cuMemFree(ptr)[0]) == 0   # the parent's pointer is still the parent's
    ''')
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=_standin.environment(folder))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[3, 3, 3, 3, 3]"
    assert "Traceback" not in res.stderr


def test_cuda_fork_error_is_exported_documented_and_picklable():
    import pickle

    e = gpuarray.CudaForkError("cuMemAlloc", 42, "while allocating")
    assert isinstance(e, gpuarray.CudaError) and e.code == 3 and e.parent_pid == 42
    again = pickle.loads(pickle.dumps(e))
    assert (type(again), str(again)) == (type(e), str(e))
    assert "CudaForkError" in gpuarray.errors.__all__ and "CudaForkError" in gpuarray.__all__


_OTHER_LIBRARY_SCRIPT = r"""
import multiprocessing as mp
from cuda.bindings import driver as d
import numpy as np
import gpuarray

def child(q):
    try:
        q.put(("ok", gpuarray.to_device(np.arange(3)).copy_to_host().tolist()))
    except Exception as e:
        q.put((type(e).__name__, getattr(e, "code", None), str(e)))

assert int(d.cuInit(0)[0]) == 0    # another library initialised CUDA; gpuarray did not
ctx = mp.get_context("fork")
q = ctx.Queue()
p = ctx.Process(target=child, args=(q,))
p.start()
after = q.get(timeout=60)
p.join(60)
print(repr((after, gpuarray.to_device(np.arange(4)).copy_to_host().tolist())))
"""


def test_a_fork_child_of_a_parent_that_initialised_cuda_through_another_library_gets_cuda_fork_error():
    # cuda.bindings (as PyTorch, CuPy, numba-cuda would) called cuInit in the
    # parent; gpuarray had not. The child's driver answers NOT_INITIALIZED to
    # cuInit. Before: CudaUnavailableError, "set GPUARRAY_BACKEND=sim".
    pytest.importorskip("cuda.bindings.driver", reason="cuda-python (cuda.bindings) is not installed")
    try:
        folder = _standin.build()
    except _standin.StandinUnavailableError as e:
        pytest.skip(f"the stand-in driver cannot be built here: {e}")
    res = subprocess.run([sys.executable, "-c", _OTHER_LIBRARY_SCRIPT], capture_output=True,
                         text=True, timeout=180, env=_standin.environment(folder))
    assert res.returncode == 0, res.stderr
    after, rest = eval(res.stdout.strip().splitlines()[-1])
    _check(("ok", [0, 1, 2]), after, rest)
