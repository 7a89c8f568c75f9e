"""The example of docs/sim/numba_kernels.rst runs over the stand-in (issue 36, item 9).

``examples/numba_kernels.py``: numba-cuda ``@cuda.jit`` kernels -- one on
gpuarray arrays, a warp-shuffle block reduction with shared memory and an
atomic -- give NumPy's answers under ``python -m gpuarray standin``, and a
store past the end of an array is ``CUDA_ERROR_ILLEGAL_ADDRESS`` with the
simulator's account (kernel, PTX instruction, thread) on stderr.  Needs
numba-cuda (``.venv-peers``: ``make test-numba-driver`` runs it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gpuarray_sim import standin as _standin

from tests.support import NUMPY_WITHOUT_ROW_STACK

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "numba_kernels.py"


def _standin_env(**extra: str) -> dict[str, str]:
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (.venv-peers has it)")
    if NUMPY_WITHOUT_ROW_STACK:  # the suite's own alias does not reach the child process
        pytest.skip(f"numba-cuda compiles no kernel under NumPy {np.__version__}: it needs "
                    "np.row_stack, which NumPy 2.5 removed")
    try:
        folder = _standin.build()
    except _standin.StandinUnavailableError as e:
        pytest.skip(f"the stand-in driver cannot be built here: {e}")
    return _standin.environment(folder, {**os.environ, **extra})


def test_the_pages_example_runs_over_the_stand_in():
    # nvJitLink (installed in .venv-peers) is the stand-in's: numba-cuda links through it
    # as a user runs it: the memcheck model's default (this suite's own is strict)
    res = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True,
                         timeout=600, env=_standin_env(GPUARRAY_SIM_MEMCHECK="report"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "axpy and block_sum: right answers" in res.stdout
    # one element past the end: the kernel runs, as on a GPU; memcheck's report on stderr
    assert "off_by_one: ran, as on a GPU" in res.stdout
    err = res.stderr
    assert re.search(r"kernel \S*off_by_one\S* accessed memory past the end of an allocation "
                     r"1 time", err), err
    assert "Invalid __global__ write of size 4 bytes" in err and "st.global" in err
    assert "by thread (100, 0, 0) in block (0, 0, 0)" in err
    assert "is 0 bytes after the end of the allocation at" in err and "of size 400 bytes" in err
    assert "memcheck ERROR SUMMARY: 1 access(es)" in err  # at exit
    # far past the end: the sticky fault, the simulator's account naming the store and thread
    assert "wrong_stride: [<CUresult.CUDA_ERROR_ILLEGAL_ADDRESS: 700>]" in res.stdout
    line = next(ln for ln in err.splitlines() if "CUDA_ERROR_ILLEGAL_ADDRESS" in ln)
    assert "wrong_stride" in line and "st.global" in line and "thread (1, 0, 0)" in line


def test_the_readmes_first_example_runs_over_the_stand_in(tmp_path):
    """The README's first screen: a numba-cuda kernel on gpuarray arrays, run as it says
    (``python -m gpuarray standin -- python axpy.py``), prints what it shows."""

    text = (EXAMPLE.parents[1] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"^```python\n(.*?)^```", text, re.M | re.S)
    assert block and "@cuda.jit" in block.group(1), "the README's first Python block"
    code = block.group(1)
    shown = re.search(r"print\(out\.copy_to_host\(\)\)\s+# (.*)$", code, re.M)
    assert shown, code
    (tmp_path / "axpy.py").write_text(code, encoding="utf-8")
    _standin_env()  # skips without numba-cuda or a C compiler
    res = subprocess.run([sys.executable, "-m", "gpuarray", "standin", "--", sys.executable,
                          "axpy.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1] == shown.group(1).strip(), res.stdout


_KEEP = """
import numpy as np
from numba import cuda
from numba.cuda.cudadrv.driver import _have_nvjitlink
import gpuarray
print("nvjitlink:", _have_nvjitlink())
@cuda.jit
def k(x):
    x[cuda.grid(1)] = 1
x = gpuarray.zeros(32, np.int32)
try:
    k[1, 32](x)
    cuda.synchronize()
    print("ran")
except Exception as e:
    print("refused:", e)
"""


def test_with_nvjitlink_kept_a_cubin_without_ptx_says_how_to_get_ptx():
    env = _standin_env(GPUARRAY_STANDIN_NVJITLINK="keep")
    res = subprocess.run([sys.executable, "-c", _KEEP], capture_output=True, text=True,
                         timeout=600, env=env)
    if "nvjitlink: False" in res.stdout:
        pytest.skip("nvJitLink is not installed here: numba-cuda links PTX through the driver")
    assert "refused:" in res.stdout and "CUDA_ERROR_INVALID_IMAGE" in res.stdout, res.stdout
    assert "no PTX" in res.stderr and "GPUARRAY_STANDIN_NVJITLINK" in res.stderr, res.stderr
