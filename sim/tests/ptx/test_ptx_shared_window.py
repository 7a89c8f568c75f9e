"""A block's shared window is its size rounded up to 16 bytes.

A GPU allocates a block's shared memory in units far larger than 16 bytes,
so an aligned access of up to 16 bytes that starts inside the block's
shared memory never faults there -- and NVVM relies on it: after link-time
optimisation it widens ``x[4]``, ``x[5]``, ``x[6]`` of a 28-byte dynamic
array (``.align 16``) into one ``ld.shared.v4.u32`` at offset 16 (numba-cuda's
``test_sm`` dynamic-shared slice tests).  The simulator faulted that load
(700) until its windows were rounded up; an access past the rounded window
still faults, naming the instruction.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from gpuarray.errors import CudaError
from sim.tests.ptx.support import HEAD, backend, download, launch, u64, upload

pytestmark = pytest.mark.usefixtures("ptx_tier")

# out[0..3] = the four words of the dynamic array at byte `off` (one v4 load); the first
# 28 bytes are written first
WIDE = HEAD + """
.extern .shared .align 16 .b8 dyn[];
.visible .entry wide(.param .u64 out, .param .u32 off)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [off];
    mov.u32 %r2, dyn;
    st.shared.u32 [%r2+16], 4;
    st.shared.u32 [%r2+20], 5;
    st.shared.u32 [%r2+24], 6;
    add.u32 %r3, %r2, %r1;
    ld.shared.v4.u32 {%r4, %r5, %r6, %r7}, [%r3];
    cvta.to.global.u64 %rd2, %rd1;
    st.global.v4.u32 [%rd2], {%r4, %r5, %r6, %r7};
    ret;
}
"""


def test_a_v4_load_over_the_end_of_a_28_byte_dynamic_array_reads_its_words():
    b = backend()
    out = upload(b, np.zeros(4, np.uint32))
    launch(b, WIDE, "wide", [u64(out), ctypes.c_uint32(16)], shared=28)
    # the words written, then the granule's last: shared memory a block did not write reads
    # 0xff bytes (ptx::begin)
    assert download(b, out, 4, np.uint32).tolist() == [4, 5, 6, 0xFFFFFFFF]


def test_past_the_rounded_window_still_faults():
    b = backend()
    out = upload(b, np.zeros(4, np.uint32))
    with pytest.raises(CudaError) as e:
        launch(b, WIDE, "wide", [u64(out), ctypes.c_uint32(32)], shared=28)
    assert e.value.code == 700 and "ld.shared.v4.u32" in str(e.value)
