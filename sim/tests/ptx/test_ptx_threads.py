"""Which thread is which: every thread of 3-D blocks gets its own ``%tid``, before and after barriers.

The fiber runtime (``_hostrt.cpp``) numbers a block's threads as it starts
them (one fiber may run thread after thread), and a fiber waiting at a
barrier switches straight to the next waiting one of its block's round
(``pass_on``): each thread must still see its own ``%tid`` and ``%ctaid``
and write its own result, with one worker and with two.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from sim.tests.ptx.support import HEAD, backend, download, launch, u64

pytestmark = pytest.mark.usefixtures("ptx_tier")

# out[global linear thread] = ctaid.x << 24 | tid.z << 16 | tid.y << 8 | tid.x, the value
# made before `bar.sync 0` (twice: a fiber resumed in the second round) and checked
# against %tid read again after it; a mismatch writes 0xffffffff.
WHO = HEAD + """
.visible .entry who(.param .u64 out, .param .u32 barriers)
{
  .reg .b32 %x, %y, %z, %nx, %ny, %nz, %c, %v, %w, %i, %n, %k;
  .reg .b64 %a, %o;
  .reg .pred %p, %q;
  ld.param.u64 %o, [out];
  ld.param.u32 %k, [barriers];
  mov.u32 %x, %tid.x;
  mov.u32 %y, %tid.y;
  mov.u32 %z, %tid.z;
  mov.u32 %c, %ctaid.x;
  shl.b32 %v, %c, 24;
  shl.b32 %w, %z, 16;
  or.b32 %v, %v, %w;
  shl.b32 %w, %y, 8;
  or.b32 %v, %v, %w;
  or.b32 %v, %v, %x;
  mov.u32 %i, 0;
LOOP:
  setp.ge.u32 %p, %i, %k;
  @%p bra DONE;
  bar.sync 0;
  add.u32 %i, %i, 1;
  bra LOOP;
DONE:
  mov.u32 %w, %tid.x;
  setp.ne.u32 %q, %w, %x;
  mov.u32 %w, %tid.y;
  setp.ne.or.u32 %q, %w, %y, %q;
  mov.u32 %w, %tid.z;
  setp.ne.or.u32 %q, %w, %z, %q;
  @%q mov.u32 %v, -1;
  mov.u32 %nx, %ntid.x;
  mov.u32 %ny, %ntid.y;
  mov.u32 %nz, %ntid.z;
  mad.lo.u32 %n, %z, %ny, %y;
  mad.lo.u32 %n, %n, %nx, %x;
  mul.lo.u32 %w, %nx, %ny;
  mul.lo.u32 %w, %w, %nz;
  mad.lo.u32 %n, %c, %w, %n;
  mul.wide.u32 %a, %n, 4;
  add.u64 %a, %o, %a;
  st.global.u32 [%a], %v;
  ret;
}
"""


def _expected(grid: int, block: tuple[int, int, int]) -> np.ndarray:
    bx, by, bz = block
    return np.array([c << 24 | z << 16 | y << 8 | x for c in range(grid) for z in range(bz)
                     for y in range(by) for x in range(bx)], np.uint32)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("barriers", [0, 1, 3])
@pytest.mark.parametrize("block", [(3, 5, 2), (32, 2, 3), (7, 1, 9)])
def test_every_thread_sees_its_own_tid_across_barriers(monkeypatch, workers, barriers, block):
    monkeypatch.delenv("GPUARRAY_SIM_SEED", raising=False)
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS", workers)
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS_MIN_THREADS", "0")
    b = backend()
    grid = 6
    n = grid * block[0] * block[1] * block[2]
    out = b.mem_alloc(4 * n)
    launch(b, WHO, "who", [u64(out), ctypes.c_uint32(barriers)], grid=(grid, 1, 1), block=block)
    assert np.array_equal(download(b, out, n, np.uint32), _expected(grid, block))
