"""The suite's own guard: a fault first seen by a finalizer and never raised fails its test.

``tests/conftest.py`` fails a test that ends with a finalizer error nobody
raised; repeats of a sticky fault the test already saw (every release in a
poisoned context fails too) are expected and pass.  Checked on generated test
files run in a subprocess with this project's configuration and conftest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

COMMON = '''
import ctypes
import numpy as np
import gpuarray
from gpuarray_sim import kernels as sim_kernels


class Touch:
    def accesses(self, params):
        return [(params[0].value, params[1].value, True)]

    def run(self, mem, grid, block, shared, params):
        ptr, n = params[0].value, params[1].value
        mem.write(ptr, mem.read(ptr, n) + 1)


def fault(sim, monkeypatch):
    monkeypatch.setenv("GPUARRAY_MAX_PENDING_DEALLOCS_COUNT", "0")   # free at once
    gpuarray._config.reload()
    dst = gpuarray.zeros(4, np.uint8)
    dst.stream.synchronize()
    sim_kernels.register("lost_fault_touch", Touch())
    f = sim.module_get_function(sim.module_load_data(b"gpuarray-sim-placeholder" + bytes(1) + b"lost_fault_touch"), "lost_fault_touch")
    sim.launch_kernel(f, (1, 1, 1), (32, 1, 1), 0, 1,
                      [ctypes.c_uint64(dst.gpu_data.device_pointer), ctypes.c_int64(4096)])
    return dst
'''

LOST = COMMON + '''
def test_fault_seen_only_by_a_finalizer(sim, monkeypatch):
    dst = fault(sim, monkeypatch)
    del dst          # its cuMemFree is the first sync: the fault goes to a finalizer
'''

SEEN = COMMON + '''
import pytest

def test_fault_seen_then_arrays_dropped(sim, monkeypatch):
    dst = fault(sim, monkeypatch)
    with pytest.raises(gpuarray.CudaError):
        gpuarray.synchronize()     # the test sees the fault
    del dst                        # its release repeats the sticky error: expected
'''


def _run(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
         str(ROOT), "-p", "tests.conftest", "-q", "-p", "no:cacheprovider",
         str(tmp_path / "test_sample.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, GPUARRAY_BACKEND="sim"))


def test_a_fault_only_a_finalizer_saw_fails_the_test(tmp_path):
    proc = _run(tmp_path, LOST)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "never reported" in proc.stdout and "ILLEGAL_ADDRESS" in proc.stdout, proc.stdout


def test_repeats_of_a_fault_the_test_saw_pass(tmp_path):
    proc = _run(tmp_path, SEEN)
    assert proc.returncode == 0, proc.stdout + proc.stderr
