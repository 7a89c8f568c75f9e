"""Blocks resident together: inter-block flags, cooperative launches and ``grid.sync``.

A GPU runs the blocks of a grid that fits its residency limits at the same
time: a block may wait for a flag a later block sets, and a cooperative
launch (``cuLaunchCooperativeKernel``, the ``COOPERATIVE`` launch attribute)
guarantees it, so ``grid.sync`` (numba-cuda's ``cg.this_grid().sync()``:
libcudadevrt's ``cudaCGSynchronize``) works.  The simulator's fiber runtime
makes blocks resident together (``_hostrt.cpp``): all of a cooperative
grid, and more than one of another grid when the resident ones only spin.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from gpuarray.errors import CudaError
from sim.tests.ptx.support import HEAD, LEGACY, backend, download, launch, u64, upload

# every test once per tier: translated and built, and interpreted (conftest.py)
pytestmark = pytest.mark.usefixtures("ptx_tier")


@pytest.fixture
def b():
    return backend()


# Block 0's thread 0 waits for a flag the grid's last block sets, then copies
# the value that block published; every other thread of every block writes 1
# to its element of `seen`.
FLAG_FROM_LAST_BLOCK = HEAD + """
.visible .entry wait_last(.param .u64 flag, .param .u64 out, .param .u64 seen)
{
    .reg .pred %p<4>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [flag];
    ld.param.u64 %rd2, [out];
    ld.param.u64 %rd3, [seen];
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %nctaid.x;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.s32 %r5, %r1, %r4, %r3;
    mul.wide.s32 %rd7, %r5, 4;
    add.s64 %rd8, %rd6, %rd7;
    mov.u32 %r6, 1;
    st.global.u32 [%rd8], %r6;
    add.s32 %r7, %r2, -1;
    setp.eq.s32 %p1, %r1, %r7;
    setp.eq.s32 %p2, %r3, 0;
    and.pred %p3, %p1, %p2;
    @%p3 bra $SET;
    setp.ne.s32 %p1, %r1, 0;
    @%p1 bra $DONE;
    @!%p2 bra $DONE;
$WAIT:
    ld.volatile.global.u32 %r8, [%rd4];
    setp.eq.s32 %p1, %r8, 0;
    @%p1 bra $WAIT;
    ld.volatile.global.u32 %r9, [%rd5+4];
    st.global.u32 [%rd5], %r9;
    bra $DONE;
$SET:
    st.volatile.global.u32 [%rd5+4], %r2;
    membar.gl;
    st.volatile.global.u32 [%rd4], %r6;
$DONE:
    ret;
}
"""


# The same, but thread 0 of every block but the last waits.
FLAG_ALL_WAIT = FLAG_FROM_LAST_BLOCK.replace("    setp.ne.s32 %p1, %r1, 0;\n    @%p1 bra $DONE;\n",
                                             "")


@pytest.mark.parametrize("blocks, threads", [(2, 32), (5, 64), (40, 128)])
@pytest.mark.parametrize("src", [FLAG_FROM_LAST_BLOCK, FLAG_ALL_WAIT], ids=["block0", "all"])
def test_blocks_wait_for_a_flag_the_last_block_sets(b, blocks, threads, src):
    flag, out = upload(b, np.zeros(1, np.uint32)), upload(b, np.zeros(2, np.uint32))
    seen = upload(b, np.zeros(blocks * threads, np.uint32))
    launch(b, src, "wait_last", [u64(flag), u64(out), u64(seen)],
           grid=(blocks, 1, 1), block=(threads, 1, 1))
    assert download(b, out, 2, np.uint32).tolist() == [blocks, blocks]
    assert download(b, seen, blocks * threads, np.uint32).sum() == blocks * threads


def test_a_flag_from_a_block_that_cannot_be_resident_is_a_launch_timeout(b, monkeypatch):
    # 1024-thread blocks: 16 of them are resident at most in a non-cooperative
    # launch (16384 threads); blocks 0-15 wait for block 16, which never starts
    monkeypatch.setenv("GPUARRAY_SIM_LAUNCH_TIMEOUT", "0.2")
    flag, out = upload(b, np.zeros(1, np.uint32)), upload(b, np.zeros(2, np.uint32))
    seen = upload(b, np.zeros(17 * 1024, np.uint32))
    with pytest.raises(CudaError) as e:
        launch(b, FLAG_ALL_WAIT, "wait_last", [u64(flag), u64(out), u64(seen)],
               grid=(17, 1, 1), block=(1024, 1, 1))
    assert e.value.code == 702 and "launch timeout" in str(e.value)
    assert "block (0, 0, 0) thread (0, 0, 0)" in str(e.value)
    with pytest.raises(CudaError):
        b.ctx_synchronize()


# numba-cuda's grid.sync(): cg.this_grid() is cudaCGGetIntrinsicHandle(1),
# GridGroup.sync() cudaCGSynchronize(handle, 0).  Each thread writes its
# index to a[i], syncs the grid, reads a[n-1-i] (another block's) into out[i]
# and, after a second sync, a[i] again after every thread has added 1 to it.
GRID_SYNC = HEAD + """
.extern .func  (.param .b64 func_retval0) cudaCGGetIntrinsicHandle
(
    .param .b32 cudaCGGetIntrinsicHandle_param_0
)
;
.extern .func  (.param .b32 func_retval0) cudaCGSynchronize
(
    .param .b64 cudaCGSynchronize_param_0,
    .param .b32 cudaCGSynchronize_param_1
)
;
.visible .entry grid_sync(.param .u64 a, .param .u64 out, .param .u32 n)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [out];
    ld.param.u32 %r1, [n];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    mul.wide.s32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    st.global.u32 [%rd6], %r5;
    {
    .reg .b32 temp_param_reg;
    .param .b32 param0;
    st.param.b32 [param0], 1;
    .param .b64 retval0;
    call.uni (retval0), cudaCGGetIntrinsicHandle, (param0);
    ld.param.b64 %rd7, [retval0];
    }
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd7;
    .param .b32 param1;
    st.param.b32 [param1], 0;
    .param .b32 retval0;
    call.uni (retval0), cudaCGSynchronize, (param0, param1);
    ld.param.b32 %r6, [retval0];
    }
    sub.s32 %r7, %r1, %r5;
    add.s32 %r7, %r7, -1;
    mul.wide.s32 %rd8, %r7, 4;
    add.s64 %rd9, %rd3, %rd8;
    ld.global.u32 %r8, [%rd9];
    add.s64 %rd10, %rd4, %rd5;
    st.global.u32 [%rd10], %r8;
    atom.global.add.u32 %r9, [%rd9], 1;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd7;
    .param .b32 param1;
    st.param.b32 [param1], 0;
    .param .b32 retval0;
    call.uni (retval0), cudaCGSynchronize, (param0, param1);
    ld.param.b32 %r6, [retval0];
    }
    ld.global.u32 %r10, [%rd6];
    add.s64 %rd11, %rd4, %rd5;
    st.global.u32 [%rd11+4096], %r10;
    ret;
}
"""


def _cooperative(b, blocks: int, threads: int, cooperative: bool = True) -> tuple[int, int]:
    n = blocks * threads
    a = upload(b, np.zeros(n, np.uint32))
    out = upload(b, np.zeros(n + 1024, np.uint32))
    module = b.module_load_data(GRID_SYNC.encode() + b"\0")
    f = b.module_get_function(module, "grid_sync")
    b.launch_kernel(f, (blocks, 1, 1), (threads, 1, 1), 0, LEGACY,
                    [u64(a), u64(out), ctypes.c_uint32(n)], cooperative=cooperative)
    b.ctx_synchronize()
    return a, out


@pytest.mark.parametrize("blocks, threads", [(2, 32), (8, 128)])
def test_grid_sync_in_a_cooperative_launch(b, blocks, threads):
    n = blocks * threads
    _a, out = _cooperative(b, blocks, threads)
    got = download(b, out, n + 1024, np.uint32)
    assert got[:n].tolist() == list(range(n - 1, -1, -1))  # another block's, after the sync
    assert got[1024:1024 + n].tolist() == list(range(1, n + 1))  # everyone's add, after the second


def test_grid_sync_outside_a_cooperative_launch_traps(b):
    with pytest.raises(CudaError) as e:
        _cooperative(b, 2, 32, cooperative=False)
    assert e.value.code == 719 and "not cooperative" in str(e.value)


def test_a_cooperative_grid_larger_than_the_device_holds_is_refused(b):
    # 1024-thread blocks: 2 per SM, 132 SMs on the simulated device
    a = upload(b, np.zeros(4, np.uint32))
    module = b.module_load_data(GRID_SYNC.encode() + b"\0")
    f = b.module_get_function(module, "grid_sync")
    assert b.resident_blocks(f, 1024, 0) == 264
    with pytest.raises(CudaError) as e:
        b.launch_kernel(f, (265, 1, 1), (1024, 1, 1), 0, LEGACY, [u64(a), u64(a),
                        ctypes.c_uint32(0)], cooperative=True)
    assert e.value.code == 720 and "265 blocks" in str(e.value) and "264" in str(e.value)
