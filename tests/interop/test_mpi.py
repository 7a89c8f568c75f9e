"""CUDA-aware MPI through mpi4py (issue 16): ``examples/mpi_sendrecv.py`` runs.

mpi4py reads gpuarray arrays through ``__cuda_array_interface__`` or
DLPack, never the buffer protocol (gpuarray exports none), and a CUDA-aware
MPI moves the device memory.  These tests run only where that can work: the
real CUDA backend with a device, mpi4py, and an MPI that passes a probe
moving device memory allocated with the driver directly (not by gpuarray, so
a gpuarray bug cannot pass for a missing MPI feature).  Elsewhere they skip
and say which of these is missing.  Never on the simulator: its device
addresses are not host memory, and an MPI library would read them as host
addresses.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpuarray
from tests.support import backend_is_sim

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mpi_sendrecv.py"

# One rank sends 64 bytes of cuMemAlloc memory to itself and checks them.
PROBE = """
import ctypes, sys
from cuda.bindings import driver as d
from mpi4py import MPI
def ok(r):
    if int(r[0]):
        sys.exit(f"CUDA call failed: {r[0]}")
    return r[1] if len(r) > 1 else None
ok(d.cuInit(0))
ctx = ok(d.cuDevicePrimaryCtxRetain(ok(d.cuDeviceGet(0))))
ok(d.cuCtxSetCurrent(ctx))
a, b = ok(d.cuMemAlloc(64)), ok(d.cuMemAlloc(64))
ok(d.cuMemsetD8(a, 7, 64))
ok(d.cuMemsetD8(b, 0, 64))
ok(d.cuCtxSynchronize())
mem = getattr(MPI, "buffer", None) or MPI.memory
MPI.COMM_SELF.Sendrecv(mem.fromaddress(int(a), 64), 0, recvbuf=mem.fromaddress(int(b), 64), source=0)
host = (ctypes.c_ubyte * 64)()
ok(d.cuMemcpyDtoH(ctypes.addressof(host), b, 64))
sys.exit(0 if bytes(host) == bytes([7]) * 64 else "device bytes did not arrive")
"""


def _env() -> dict[str, str]:
    env = dict(os.environ, GPUARRAY_BACKEND="cuda")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


@functools.lru_cache(maxsize=1)
def _why_not() -> str | None:
    if backend_is_sim():
        return ("the simulator's device addresses are not host memory: an MPI library would "
                "read them as host addresses, so MPI tests never run on the simulator")
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed"
    try:
        gpuarray.device_count()
    except gpuarray.CudaUnavailableError as e:
        return f"no CUDA device: {e}"
    try:
        run = subprocess.run([sys.executable, "-c", PROBE], env=_env(), capture_output=True,
                             text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "the MPI probe (one rank sending device memory to itself) hung"
    if run.returncode:
        return ("the MPI library is not CUDA-aware: a probe sending cuMemAlloc memory to itself "
                f"failed (exit {run.returncode}): {(run.stderr or run.stdout).strip()[-300:]}")
    return None


@pytest.fixture
def cuda_aware_mpi():
    reason = _why_not()
    if reason:
        pytest.skip(reason)


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["cai", "dlpack"])
def test_one_rank_sends_to_itself(cuda_aware_mpi, path):
    run = subprocess.run([sys.executable, str(EXAMPLE), "--path", path, "-n", "4096"],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert f"rank 0/1 ({path}): ok" in run.stdout


@pytest.mark.gpu
def test_two_ranks_send_and_allreduce(cuda_aware_mpi):
    mpiexec = shutil.which("mpiexec") or shutil.which("mpirun")
    if mpiexec is None:
        pytest.skip("no mpiexec or mpirun on PATH to start two ranks")
    run = subprocess.run([mpiexec, "-n", "2", sys.executable, str(EXAMPLE), "-n", "4096"],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "rank 0/2 (cai): ok" in run.stdout and "rank 1/2 (cai): ok" in run.stdout


def test_arrays_offer_mpi4py_no_host_buffer():
    # mpi4py prefers the buffer protocol: were it exported, MPI would be handed
    # device addresses as host memory.  CAI and DLPack are the only ways in.
    a = gpuarray.zeros(4)
    with pytest.raises(TypeError):
        memoryview(a)  # type: ignore[arg-type]
    assert "__cuda_array_interface__" in dir(a) and "__dlpack__" in dir(a)
