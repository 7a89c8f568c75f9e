"""mbarrier objects: init, arrive (count, .noComplete, .expect_tx), arrive_drop, test_wait,
try_wait (state and .parity), pending_count, expect_tx/complete_tx, inval.

An mbarrier is 8 bytes of shared memory holding an expected arrival count,
a pending count, a phase parity and a tx-count (the PTX ISA's "mbarrier"
section); a phase completes when the pending count and the tx-count reach 0.
``try_wait`` lets the other threads of the block run while the phase is
incomplete (``ptx_sync.h``); what the ISA leaves undefined traps.  Every test
runs in both tiers (conftest.py).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from gpuarray.errors import CudaError
from sim.tests.ptx.support import HEAD, backend, download, fixture, launch, u64

pytestmark = pytest.mark.usefixtures("ptx_tier")


@pytest.fixture
def b():
    return backend()


def _zeros(b, n: int, dtype=np.uint32) -> int:
    from sim.tests.ptx.support import upload

    return upload(b, np.zeros(n, dtype))


# The programs (fixtures/mbarrier_rules.ptx, whose comments say what they do) are also
# the ptx-vs-gpu step's rules:mbarrier (sim/tools/ptx_compare/ptx_programs.py).
ROUNDS = SINGLE = fixture("mbarrier_rules")


@pytest.mark.parametrize("threads", [1, 32, 96])
def test_arrive_and_wait_across_a_block_flips_the_phase_each_round(b, threads):
    rounds = 5
    out = _zeros(b, rounds * threads)
    launch(b, ROUNDS, "rounds", [u64(out), ctypes.c_uint32(rounds)], block=(threads, 1, 1))
    got = download(b, out, rounds * threads, np.uint32).reshape(rounds, threads)
    tid = np.arange(threads)
    want = np.array([r * 1000 + (tid + 1) % threads for r in range(rounds)])
    np.testing.assert_array_equal(got, want)


def test_counts_phases_parity_drop_no_complete_and_tx(b):
    out = _zeros(b, 12)
    launch(b, SINGLE, "single", [u64(out)])
    got = download(b, out, 12, np.uint32).tolist()
    # phase 0 incomplete (by token, by parity); complete after the drop; parity 1
    # (phase 1) not; pending count 2 before the .noComplete arrival; try_wait false;
    # the tx-count holds the phase until complete_tx has taken all 16 bytes; the
    # generic address reaches the same object
    assert got == [0, 0, 1, 1, 0, 2, 0, 0, 0, 1, 0, 1]


def test_nvcc_cuda_barrier_and_cuda_ptx_parity_waits(b):
    text = fixture("nvcc_cuda_barrier")
    threads, rounds = 64, 4
    out = _zeros(b, 2 * rounds * threads, np.int32)
    module = launch(b, text, "barrier_rounds", [u64(out), ctypes.c_int32(rounds)],
                    grid=(2, 1, 1), block=(threads, 1, 1))
    got = download(b, out, 2 * rounds * threads, np.int32).reshape(2, rounds, threads)
    tid = np.arange(threads)
    want = np.array([r * 1000 + (tid + 1) % threads for r in range(rounds)])
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_array_equal(got[1], want)
    out2 = _zeros(b, threads, np.int32)
    launch(b, text, "ptx_parity", [u64(out2)], block=(threads, 1, 1), module=module)
    got2 = download(b, out2, threads, np.int32)
    # sum = tid ^ 1; data[t] = (t ^ 1) + 1; out = data[(t + 2) % n] + sum
    t2 = (tid + 2) % threads
    np.testing.assert_array_equal(got2, ((t2 ^ 1) + 1) + (tid ^ 1))


FAULTS = HEAD + """
.visible .entry fault(.param .u64 g, .param .u32 what)
{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    .shared .align 8 .b64 bars[2];
    ld.param.u64 %rd1, [g];
    ld.param.u32 %r1, [what];
    mov.u32 %r2, bars;
    setp.eq.u32 %p1, %r1, 1;
    @%p1 bra $MISALIGNED;
    setp.eq.u32 %p1, %r1, 2;
    @%p1 bra $GLOBAL;
    setp.eq.u32 %p1, %r1, 3;
    @%p1 bra $UNINIT;
    setp.eq.u32 %p1, %r1, 4;
    @%p1 bra $TOO_MANY;
    setp.eq.u32 %p1, %r1, 5;
    @%p1 bra $NEVER;
    setp.eq.u32 %p1, %r1, 6;
    @%p1 bra $OUTSIDE;
    setp.eq.u32 %p1, %r1, 7;
    @%p1 bra $ZERO;
    mbarrier.init.shared.b64 [%r2], 0;
    ret;
$MISALIGNED:
    mbarrier.init.shared.b64 [%r2+4], 1;
    ret;
$GLOBAL:
    mbarrier.init.b64 [%rd1], 1;
    ret;
$UNINIT:
    mbarrier.arrive.shared.b64 %rd2, [%r2+8];
    ret;
$TOO_MANY:
    mbarrier.init.shared.b64 [%r2], 2;
    mbarrier.arrive.shared.b64 %rd2, [%r2], 3;
    ret;
$NEVER:
    mbarrier.init.shared.b64 [%r2], 2;
    mbarrier.arrive.shared.b64 %rd2, [%r2];
$LOOP:
    mbarrier.try_wait.shared.b64 %p2, [%r2], %rd2;
    @!%p2 bra $LOOP;
    ret;
$OUTSIDE:
    mbarrier.init.shared.b64 [%r2+16], 1;
    ret;
$ZERO:
    mbarrier.init.shared.b64 [%r2], 2;
    mov.u32 %r3, 0;
    mbarrier.arrive.shared.b64 %rd2, [%r2], %r3;
    ret;
}
"""


@pytest.mark.parametrize("what, code, text", [
    (0, 719, "the expected count 0 is out of the range"),
    (1, 716, ""),
    (2, 700, ""),
    (3, 719, "not an initialised mbarrier object"),
    (4, 719, "an arrival count of 3 with 2 arrivals pending"),
    # the waiting thread yields at the try_wait each time round its loop, and at the loop's
    # branch every 1024th time (ptx::spin): the timeout names the yield that ended its last
    # round -- the try_wait, or (about one run in a thousand) the branch of the same loop
    (5, 702, "mbarrier.try_wait.shared.b64 %p2|@!%p2 bra $LOOP"),
    (6, 700, ""),
    (7, 719, "mbarrier.arrive: the count 0 is out of the range [1, 2^20 - 1]"),
])
def test_faults_as_a_gpu_or_undefined_behaviour_traps(b, monkeypatch, what, code, text):
    monkeypatch.setenv("GPUARRAY_SIM_LAUNCH_TIMEOUT", "1")
    g = _zeros(b, 4)
    with pytest.raises(CudaError) as e:
        launch(b, FAULTS, "fault", [u64(g), ctypes.c_uint32(what)])
    assert e.value.code == code, str(e.value)
    assert any(x in str(e.value) for x in text.split("|")), str(e.value)
    assert "mbarrier" in str(e.value) or "line" in str(e.value)


# Forms ptxas -arch=sm_90 refuses (its words after the form), refused at load with 218
# naming the line; the table's probes (sim/tools/ptx_forms/gen.py) hold the rest.
@pytest.mark.parametrize("version, body, what", [
    ("8.0", "mbarrier.arrive.shared::cluster.b64 %rd2, [%r1];", "Sink '_'"),
    ("8.0", "mbarrier.init.shared::cluster.b64 [%r1], 1;", "does not take"),
    ("8.0", "mbarrier.try_wait.release.cta.shared.b64 %p1, [%r1], %rd2;", "does not take"),
    ("8.0", "mbarrier.pending_count.shared.b64 %r2, %rd2;", "does not take"),
    ("8.0", "mbarrier.init.shared.b64 [%r1], %rd2;", "arguments mismatch"),
    ("8.0", "mbarrier.arrive.noComplete.shared.b64 %rd2, [%r1];", "ptxas takes 3"),
    ("8.0", "mbarrier.test_wait.parity.shared.b64 %p1, [%r1], %rd2;", "arguments mismatch"),
    ("8.0", "mbarrier.arrive.shared.b32 %rd2, [%r1];", "does not take"),
    ("8.0", "mbarrier.test_wait.shared.b64 %r2, [%r1], %rd2;", "arguments mismatch"),
    ("8.0", "mbarrier.arrive.shared.b64 %rd2, [%r1], 0;", "a literal count must be positive"),
    ("8.0", "mbarrier.test_wait.parity.shared.b64 %p1, [%r1], 2;", "a literal parity is 0 or 1"),
    ("8.5", "mbarrier.arrive.relaxed.cta.shared.b64 %rd2, [%r1];", ".version 8.6"),
    ("7.8", "mbarrier.expect_tx.shared.b64 [%r1], 16;", ".version 8.0"),
    ("7.8", "mbarrier.try_wait.acquire.cta.shared.b64 %p1, [%r1], %rd2;", ".version 8.0"),
])
def test_forms_ptxas_refuses_are_refused_at_load(b, version, body, what):
    text = (f".version {version}\n.target sm_90\n.address_size 64\n.visible .entry k() {{ "
            ".reg .pred %p<3>; .reg .b32 %r<4>; .reg .b64 %rd<4>;\n" + body + "\nret; }\n")
    with pytest.raises(CudaError) as e:
        b.module_load_data(text.encode() + b"\0")
    assert e.value.code == 218 and "PTX line 5" in str(e.value), str(e.value)
    assert what in str(e.value), str(e.value)


@pytest.mark.parametrize("version, body", [
    ("8.6", "mbarrier.arrive.relaxed.cta.shared.b64 %rd2, [%r1];"),
    ("8.0", "mbarrier.arrive.shared::cluster.b64 _, [%r1];"),
    ("8.0", "mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], 1, 1000;"),
    ("8.0", "mbarrier.expect_tx.relaxed.cta.shared.b64 [%r1], 16;"),
    ("7.8", "mbarrier.arrive.shared.b64 %rd2, [%r1];"),
])
def test_forms_ptxas_accepts_load(b, version, body):
    text = (f".version {version}\n.target sm_90\n.address_size 64\n.visible .entry k() {{ "
            ".reg .pred %p<3>; .reg .b32 %r<4>; .reg .b64 %rd<4>;\n" + body + "\nret; }\n")
    b.module_load_data(text.encode() + b"\0")


def test_a_cooperative_grid_of_block_barriers_as_large_as_the_device_holds(b):
    # numba-cuda's test_external_cooperative_func launches its cuda::barrier over
    # max_cooperative_grid_blocks(32): 4224 blocks of 32 threads, more fibers than a
    # process may map at once; a cooperative grid starts its blocks one at a time too and
    # makes the rest resident when nothing resident progresses (grid.sync: test_ptx_resident)
    from sim.tests.ptx.support import LEGACY

    module = b.module_load_data(fixture("nvcc_cuda_barrier").encode() + b"\0")
    f = b.module_get_function(module, "barrier_rounds")
    blocks, threads, rounds = b.resident_blocks(f, 32, 0), 32, 1
    assert blocks == 4224
    out = _zeros(b, blocks * rounds * threads, np.int32)
    b.launch_kernel(f, (blocks, 1, 1), (threads, 1, 1), 0, LEGACY,
                    [u64(out), ctypes.c_int32(rounds)], cooperative=True)
    b.ctx_synchronize()
    got = download(b, out, blocks * threads, np.int32).reshape(blocks, threads)
    assert (got == (np.arange(threads) + 1) % threads).all()


@pytest.mark.parametrize("threads", [2, 64])
def test_nvcc_mbarrier_primitives_drop_try_wait_and_parity(b, threads):
    out = _zeros(b, threads, np.int32)
    launch(b, fixture("nvcc_mbarrier_primitives"), "primitives", [u64(out)],
           block=(threads, 1, 1))
    got = download(b, out, threads, np.int32)
    t = np.arange(threads)
    # the odd threads dropped out after phase 0; the even ones read next[t + 2], written
    # before phase 1 completed, and test_wait.parity 1 is true after it
    want = np.where(t % 2 == 0, ((t + 2) % threads + 1) * 10 + 1, 0)
    np.testing.assert_array_equal(got, want)
