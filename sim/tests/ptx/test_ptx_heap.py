"""CUDA's device-side ``malloc``/``free`` (numba-cuda's runtime allocates arrays with them).

The executor provides both on a heap per module (8 MiB, CUDA's default
limit): blocks 16-byte aligned, distinct per thread, NULL when the heap is
exhausted; ``free`` of NULL is nothing, of a pointer ``malloc`` did not
return a trap naming the line.  Both tiers (conftest.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from gpuarray.errors import CudaError
from sim.tests.ptx.support import HEAD, backend, download, launch, u64, upload

pytestmark = pytest.mark.usefixtures("ptx_tier")


@pytest.fixture
def b():
    return backend()

HEAP = HEAD + """
.extern .func (.param .b64 func_retval0) malloc(.param .b64 malloc_param_0);
.extern .func free(.param .b64 free_param_0);
.visible .entry k(.param .u64 out, .param .u64 size, .param .u64 bad)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<12>;
  mov.u32 %r1, %tid.x;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [size];
  ld.param.u64 %rd9, [bad];
  {
  .param .b64 p0;
  st.param.b64 [p0], %rd2;
  .param .b64 r0;
  call.uni (r0), malloc, (p0);
  ld.param.b64 %rd3, [r0];
  }
  mul.wide.u32 %rd4, %r1, 8;
  add.s64 %rd5, %rd1, %rd4;
  st.global.u64 [%rd5], %rd3;
  setp.eq.s64 %p1, %rd3, 0;
  @%p1 bra $skip;
  st.global.u32 [%rd3], %r1;
  ld.global.u32 %r2, [%rd3];
  st.global.u32 [%rd5+4], %r2;
  {
  .param .b64 q0;
  st.param.b64 [q0], %rd3;
  call.uni free, (q0);
  }
$skip:
  {
  .param .b64 q1;
  st.param.b64 [q1], %rd9;
  call.uni free, (q1);
  }
  ret;
}
""".replace(".reg .b32 %r<3>;", ".reg .b32 %r<3>;\n  .reg .pred %p1;")


def test_malloc_gives_distinct_aligned_blocks_and_free_takes_them_back(b):
    out = upload(b, np.zeros(32, np.uint64))
    launch(b, HEAP, "k", [u64(out), u64(24), u64(0)], block=(32, 1, 1))
    raw = download(b, out, 64, np.uint32)  # per thread: the block's low word, then the value
    assert raw[1::2].tolist() == list(range(32))  # each thread's block held what it stored
    low = raw[0::2].tolist()
    assert len(set(low)) == 32 and all(x % 16 == 0 for x in low)


def test_malloc_beyond_the_heap_is_null(b):
    out = upload(b, np.full(1, 7, np.uint64))
    launch(b, HEAP, "k", [u64(out), u64(9 << 20), u64(0)])
    assert download(b, out, 1, np.uint64)[0] == 0


def test_free_of_a_pointer_malloc_did_not_return_traps(b):
    out = upload(b, np.zeros(1, np.uint64))
    with pytest.raises(CudaError) as e:
        launch(b, HEAP, "k", [u64(out), u64(8), u64(out)])
    assert "free of a pointer malloc did not return" in str(e.value)
