"""Entries that do nothing run no thread, whatever their grid (numba-cuda's test_issue_9229).

numba-cuda's ``test_issue_9229`` launches ``f[22121216, 256]`` (5.7e9
threads) to check that ``cuda.grid(1)`` and ``cuda.gridsize(1)`` do not
overflow 32 bits; NVVM proves both comparisons equal and compiles the kernel
to a lone ``ret``.  A GPU runs that grid in milliseconds; the simulator ran
every thread as a fiber (about 15-20 ns each on this project's 2-core
machine: 80-120 s), past the per-test time limit.  An entry whose first
instruction is an unguarded ``ret`` or ``exit`` (``EntryInfo.does_nothing``)
now runs no thread at all -- no thread could touch memory, print or fault.
"""

from __future__ import annotations

import numpy as np
import pytest
from gpuarray_sim import _hostrt, ptx

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from sim.tests.ptx.support import HEAD, backend, download, launch, u64, upload

# every test once per tier: translated and built, and interpreted (conftest.py)
pytestmark = pytest.mark.usefixtures("ptx_tier")


def _entry(body: str) -> str:
    return HEAD + f"""
.visible .entry k(.param .u64 out)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
{body}
}}
"""


# writes 7 to out[0] from thread 0 of block 0 (every other thread returns at once)
_STORE = """
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    or.b32 %r3, %r1, %r2;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 ret;
    mov.u32 %r1, 7;
    st.global.u32 [%rd2], %r1;
    ret;
"""


@pytest.mark.parametrize(("body", "nothing"), [
    ("    ret;", True),
    ("    exit;", True),
    ("$L_start:\n    {\n    ret;\n    }", True),  # labels and scopes are not instructions
    ("    ret;\n    trap;", True),  # what follows is never reached
    ("    setp.eq.u32 %p1, 1, 1;\n    @%p1 ret;", False),  # a guarded ret may not return
    ("    trap;\n    ret;", False),
    (_STORE, False),
])
def test_an_entry_does_nothing_when_it_starts_with_an_unguarded_return(body, nothing):
    assert ptx.parse(_entry(body)).entries["k"].does_nothing is nothing


def _no_thread_may_run(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the fiber runtime was asked to run the grid's threads")
    monkeypatch.setattr(_hostrt.HostRuntime, "launch", refuse)


def test_a_grid_of_more_than_2_to_the_32_threads_that_do_nothing_completes(monkeypatch):
    b = backend()
    out = b.mem_alloc(4)
    module = b.module_load_data(_entry("    ret;").encode() + b"\0")
    _no_thread_may_run(monkeypatch)
    # test_issue_9229's grid: 22121216 * 256 = 5663031296 > 2**32 threads
    launch(b, "", "k", [u64(out)], grid=(22121216, 1, 1), block=(256, 1, 1), module=module)
    assert b.ctx_synchronize() is None  # nothing failed, nothing sticky


def test_an_entry_that_does_something_still_runs_its_threads(monkeypatch):
    b = backend()
    out = upload(b, np.zeros(1, np.uint32))
    module = launch(b, _entry(_STORE), "k", [u64(out)], grid=(3, 1, 1), block=(64, 1, 1))
    assert download(b, out, 1, np.uint32).tolist() == [7]
    _no_thread_may_run(monkeypatch)  # the check above would not see a skipped launch
    with pytest.raises(AssertionError, match="fiber runtime was asked"):
        launch(b, "", "k", [u64(out)], grid=(3, 1, 1), block=(64, 1, 1), module=module)
