"""The memcheck model: an access past an allocation's end inside its mapped granule runs, reported.

``GPUARRAY_SIM_MEMCHECK=report`` (the default) lets a PTX kernel read or
write the bytes from an allocation's end to the next 512-byte step, as a
GPU does (they are mapped there), and reports each access as
compute-sanitizer's memcheck does; ``strict`` (gpuarray's own tests, see
tests/conftest.py) makes it CUDA_ERROR_ILLEGAL_ADDRESS.  Beyond the granule
it is a fault in both modes.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
from gpuarray_sim import SimBackend, _memcheck

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from gpuarray.errors import CudaError
from sim.tests.ptx.support import HEAD, download, launch, u64, upload

# out[i] = in[i] + 1 for i < n, over one block: what numba's
# test_dispatcher_cpointer_arguments does with n = 16 over 10-element arrays.
COPY = HEAD + """
.visible .entry inc(.param .u64 dst, .param .u64 src, .param .u32 n)
{
  .reg .pred %p; .reg .b32 %i, %n, %v; .reg .b64 %d, %s, %o;
  ld.param.u64 %d, [dst];
  ld.param.u64 %s, [src];
  ld.param.u32 %n, [n];
  mov.u32 %i, %tid.x;
  setp.ge.u32 %p, %i, %n;
  @%p bra DONE;
  mul.wide.u32 %o, %i, 4;
  add.s64 %s, %s, %o;
  add.s64 %d, %d, %o;
  ld.global.u32 %v, [%s];
  add.u32 %v, %v, 1;
  st.global.u32 [%d], %v;
DONE:
  ret;
}
"""


@pytest.fixture(autouse=True)
def _no_summary():
    yield
    _memcheck.forget()  # these reports are on purpose: no summary at the end of the suite


def u32(x: int) -> ctypes.c_uint32:
    return ctypes.c_uint32(x)


def _backend(mode: str) -> SimBackend:
    b = SimBackend(memcheck=mode)
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    return b


def test_report_mode_runs_the_access_and_reports_it_as_memcheck_does(capsys):
    b = _backend("report")
    src = upload(b, np.arange(10, dtype=np.uint32))
    dst = b.mem_alloc(40)
    before = _memcheck.totals()
    with pytest.warns(_memcheck.MemcheckWarning, match=r"kernel inc: 12 access\(es\) past the end"):
        launch(b, COPY, "inc", [u64(dst), u64(src), u32(16)], block=(32, 1, 1))
    assert (download(b, dst, 10, np.uint32) == np.arange(1, 11)).all()
    err = capsys.readouterr().err
    assert "kernel inc accessed memory past the end of an allocation 12 time(s)" in err
    assert "Invalid __global__ read of size 4 bytes" in err
    assert "Invalid __global__ write of size 4 bytes" in err
    assert re.search(r"at kernel inc, PTX line 17: ld\.global\.u32", err), err
    assert "by thread (10, 0, 0) in block (0, 0, 0)" in err
    assert f"Address 0x{src + 40:x} is out of bounds" in err
    assert f"is 0 bytes after the end of the allocation at 0x{src:x} of size 40 bytes" in err
    assert "... and 4 more such accesses" in err  # 8 printed of 12
    after = _memcheck.totals()
    assert (after[0] - before[0], after[1] - before[1]) == (12, 1)
    b.mem_alloc(4)  # the context goes on, as on a GPU


def test_strict_mode_makes_it_a_sticky_700_that_says_a_gpu_would_not_fault():
    b = _backend("strict")
    src = upload(b, np.arange(10, dtype=np.uint32))
    dst = b.mem_alloc(40)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no report: a fault
        with pytest.raises(CudaError) as e:
            launch(b, COPY, "inc", [u64(dst), u64(src), u32(16)], block=(32, 1, 1))
    msg = str(e.value)
    assert e.value.code == 700 and "ld.global.u32" in msg
    assert "4 bytes past the end of the 40-byte allocation" in msg
    assert "a GPU does not fault there" in msg and "GPUARRAY_SIM_MEMCHECK=strict" in msg
    with pytest.raises(CudaError, match="sticky"):
        b.mem_alloc(4)


def test_gpuarrays_own_tests_run_strict():
    assert os.environ["GPUARRAY_SIM_MEMCHECK"] == "strict"
    assert SimBackend().memcheck == "strict"


def test_report_is_the_default_and_a_wrong_value_is_refused(monkeypatch):
    monkeypatch.delenv("GPUARRAY_SIM_MEMCHECK")
    assert SimBackend().memcheck == "report"
    monkeypatch.setenv("GPUARRAY_SIM_MEMCHECK", "loud")
    with pytest.raises(ValueError, match="GPUARRAY_SIM_MEMCHECK='loud'"):
        SimBackend()
    with pytest.raises(ValueError, match="'report' or 'strict'"):
        SimBackend(memcheck="off")


def test_beyond_the_granule_is_a_fault_in_report_mode_too():
    # 40 bytes map 512: thread 128 reads the first byte past the granule, where nothing is
    b = _backend("report")
    dst = b.mem_alloc(4 * 129)
    src = upload(b, np.arange(10, dtype=np.uint32))
    with pytest.warns(_memcheck.MemcheckWarning), pytest.raises(CudaError) as e:
        launch(b, COPY, "inc", [u64(dst), u64(src), u32(129)], block=(129, 1, 1))
    assert e.value.code == 700 and f"0x{src + 512:x}" in str(e.value)


def test_an_access_that_lands_in_another_allocation_is_neither_fault_nor_report():
    # as on a GPU, and as memcheck without padding: the address is valid memory
    b = _backend("report")
    src = upload(b, np.arange(128, dtype=np.uint32))
    nxt = upload(b, np.arange(100, 116, dtype=np.uint32))
    assert nxt == src + 512
    dst = b.mem_alloc(4 * 144)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        launch(b, COPY, "inc", [u64(dst), u64(src), u32(144)], block=(144, 1, 1))
    assert (download(b, dst, 144, np.uint32) == np.r_[1:129, 101:117]).all()


def test_a_write_into_the_granule_does_not_reach_the_next_allocation():
    b = _backend("report")
    src = upload(b, np.arange(16, dtype=np.uint32))
    dst = b.mem_alloc(4)  # 4 bytes; the kernel writes 64 into its granule
    nxt = upload(b, np.zeros(16, np.uint32))
    assert nxt == dst + 512
    with pytest.warns(_memcheck.MemcheckWarning, match="15 access"):
        launch(b, COPY, "inc", [u64(dst), u64(src), u32(16)], block=(16, 1, 1))
    assert download(b, dst, 1, np.uint32)[0] == 1
    assert (download(b, nxt, 16, np.uint32) == 0).all()


def test_a_warnings_filter_that_makes_the_report_an_error_makes_it_a_fault():
    b = _backend("report")
    src = upload(b, np.arange(10, dtype=np.uint32))
    dst = b.mem_alloc(40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", _memcheck.MemcheckWarning)
        with pytest.raises(CudaError) as e:
            launch(b, COPY, "inc", [u64(dst), u64(src), u32(11)], block=(32, 1, 1))
    assert e.value.code == 700 and "MemcheckWarning is an error here" in str(e.value)


SCRIPT = r"""
import ctypes, warnings
import numpy as np
import gpuarray
from gpuarray_sim import SimBackend
from sim.tests.ptx.support import download, launch, u64, upload
from sim.tests.ptx.test_ptx_memcheck import COPY
warnings.simplefilter("ignore")
b = SimBackend()
b.init()
b.ctx_set_current(b.primary_ctx_retain(0))
src = upload(b, np.arange(10, dtype=np.uint32))
dst = b.mem_alloc(40)
launch(b, COPY, "inc", [u64(dst), u64(src), ctypes.c_uint32(11)], block=(32, 1, 1))
print("went on:", download(b, dst, 10, np.uint32).tolist())
"""


def test_a_summary_at_exit_names_every_kernel_that_strayed():
    env = dict(os.environ, GPUARRAY_SIM_MEMCHECK="report")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=300, cwd=root)
    assert r.returncode == 0, r.stderr
    assert "went on: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]" in r.stdout
    tail = r.stderr.strip().splitlines()
    assert "memcheck ERROR SUMMARY: 2 access(es) past the end of an allocation in 1 launch(es) " \
           "of 1 kernel(s)" in tail[-2], r.stderr
    assert re.search(r"inc: first at read of 4 bytes at PTX line 17: ld\.global\.u32 .* \(thread "
                     r"\(10, 0, 0\) block \(0, 0, 0\)\), 0 bytes after the end of the 40-byte "
                     r"allocation at 0x", tail[-1]), r.stderr
