"""Blocks of a grid on several host threads (``GPUARRAY_SIM_WORKERS``), as resident blocks run on a GPU.

The fiber runtime (``_hostrt.cpp``) hands a launch's blocks to several
workers: atomics, flags another block sets, printf, faults, the race
detector's touched intervals and memcheck's records must come out as they do
with one worker; ``GPUARRAY_SIM_SEED`` keeps one worker (blocks in order),
so a seeded run replays exactly.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest
from gpuarray_sim import SimBackend, _hostrt, _memcheck
from gpuarray_sim.kernels import _host

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from gpuarray.errors import CudaError
from sim.tests.ptx.support import HEAD, backend, download, launch, u64, upload
from sim.tests.ptx.test_ptx_memcheck import COPY
from sim.tests.ptx.test_ptx_resident import FLAG_ALL_WAIT, FLAG_FROM_LAST_BLOCK, _cooperative

pytestmark = pytest.mark.usefixtures("ptx_tier")


@pytest.fixture
def b():
    return backend()


@pytest.fixture
def two(monkeypatch):
    """Two workers for every launch of more than one block."""
    monkeypatch.delenv("GPUARRAY_SIM_SEED", raising=False)
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS", "2")
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS_MIN_THREADS", "0")


def _workers() -> int:
    return _host.runtime().last_workers


# Every thread takes a ticket from one counter and writes its global index at
# order[ticket]; thread 0 of each block also takes a block ticket and writes
# its block index at first[ticket].
TICKETS = HEAD + """
.visible .entry tickets(.param .u64 counter, .param .u64 order, .param .u64 first)
{
    .reg .pred %p<2>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [counter];
    ld.param.u64 %rd2, [order];
    ld.param.u64 %rd3, [first];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    atom.global.add.u32 %r5, [%rd1], 1;
    mul.wide.u32 %rd4, %r5, 4;
    add.s64 %rd5, %rd2, %rd4;
    st.global.u32 [%rd5], %r4;
    setp.ne.s32 %p1, %r3, 0;
    @%p1 bra $DONE;
    atom.global.add.u32 %r6, [%rd1+4], 1;
    mul.wide.u32 %rd6, %r6, 4;
    add.s64 %rd7, %rd3, %rd6;
    st.global.u32 [%rd7], %r1;
$DONE:
    ret;
}
"""


def _tickets(b, blocks: int, threads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = blocks * threads
    counter = upload(b, np.zeros(2, np.uint32))
    order, first = upload(b, np.zeros(n, np.uint32)), upload(b, np.zeros(blocks, np.uint32))
    launch(b, TICKETS, "tickets", [u64(counter), u64(order), u64(first)], grid=(blocks, 1, 1),
           block=(threads, 1, 1))
    return (download(b, counter, 2, np.uint32), download(b, order, n, np.uint32),
            download(b, first, blocks, np.uint32))


def test_an_atomic_counter_counts_every_thread_of_every_worker(b, two):
    counter, order, first = _tickets(b, 64, 128)
    assert _workers() == 2
    assert counter.tolist() == [64 * 128, 64]
    assert sorted(order.tolist()) == list(range(64 * 128))  # every ticket taken exactly once
    assert sorted(first.tolist()) == list(range(64))


def test_a_seed_keeps_one_worker_and_replays_the_block_order(b, monkeypatch):
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS", "2")
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS_MIN_THREADS", "0")
    monkeypatch.setenv("GPUARRAY_SIM_SEED", "7")
    runs = [_tickets(b, 32, 64) for _ in range(2)]
    assert _workers() == 1
    assert runs[0][1].tolist() == runs[1][1].tolist()  # every thread's ticket, identical
    assert runs[0][2].tolist() == list(range(32))  # blocks admitted in order


def test_a_simulator_made_with_a_seed_keeps_one_worker(two):
    sb = SimBackend(seed=3)
    sb.init()
    sb.ctx_set_current(sb.primary_ctx_retain(0))
    _counter, _order, first = _tickets(sb, 32, 64)
    assert _workers() == 1
    assert first.tolist() == list(range(32))


@pytest.mark.parametrize("blocks, threads", [(2, 32), (40, 128)])
@pytest.mark.parametrize("src", [FLAG_FROM_LAST_BLOCK, FLAG_ALL_WAIT], ids=["block0", "all"])
def test_blocks_wait_for_a_flag_the_last_block_sets_on_another_worker(b, two, blocks, threads,
                                                                      src):
    flag, out = upload(b, np.zeros(1, np.uint32)), upload(b, np.zeros(2, np.uint32))
    seen = upload(b, np.zeros(blocks * threads, np.uint32))
    launch(b, src, "wait_last", [u64(flag), u64(out), u64(seen)], grid=(blocks, 1, 1),
           block=(threads, 1, 1))
    assert _workers() == 2
    assert download(b, out, 2, np.uint32).tolist() == [blocks, blocks]
    assert download(b, seen, blocks * threads, np.uint32).sum() == blocks * threads


def test_a_flag_nothing_sets_is_a_launch_timeout_with_two_workers(b, two, monkeypatch):
    # every block but the last waits, and the last is never resident (16 slots of 1024 threads)
    monkeypatch.setenv("GPUARRAY_SIM_LAUNCH_TIMEOUT", "0.2")
    flag, out = upload(b, np.zeros(1, np.uint32)), upload(b, np.zeros(2, np.uint32))
    seen = upload(b, np.zeros(17 * 1024, np.uint32))
    with pytest.raises(CudaError) as e:
        launch(b, FLAG_ALL_WAIT, "wait_last", [u64(flag), u64(out), u64(seen)],
               grid=(17, 1, 1), block=(1024, 1, 1))
    assert _workers() == 2
    assert e.value.code == 702 and "launch timeout" in str(e.value)
    with pytest.raises(CudaError):
        b.ctx_synchronize()


def test_grid_sync_runs_under_a_two_worker_setting(b, two):
    n = 8 * 128
    _a, out = _cooperative(b, 8, 128)
    assert _workers() == 1  # a cooperative grid's blocks wait for each other: one worker
    got = download(b, out, n + 1024, np.uint32)
    assert got[:n].tolist() == list(range(n - 1, -1, -1))
    assert got[1024:1024 + n].tolist() == list(range(1, n + 1))


# Thread `t` of block `k` writes to address 0x10 (no allocation): 700 there,
# every other thread stores its index.
FAULT_AT = HEAD + """
.visible .entry fault_at(.param .u64 out, .param .u32 k, .param .u32 t)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [k];
    ld.param.u32 %r2, [t];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %ntid.x;
    mad.lo.s32 %r6, %r3, %r5, %r4;
    setp.eq.s32 %p1, %r3, %r1;
    setp.eq.s32 %p2, %r4, %r2;
    and.pred %p1, %p1, %p2;
    @%p1 bra $BAD;
    mul.wide.s32 %rd2, %r6, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r6;
    ret;
$BAD:
    mov.u64 %rd4, 16;
    st.global.u32 [%rd4], %r6;
    ret;
}
"""


@pytest.mark.parametrize("k, t", [(0, 0), (37, 5), (63, 127)])
def test_a_fault_in_one_block_among_many_is_reported_and_ends_the_launch(b, two, k, t):
    out = upload(b, np.zeros(64 * 128, np.uint32))
    with pytest.raises(CudaError) as e:
        launch(b, FAULT_AT, "fault_at", [u64(out), ctypes.c_uint32(k), ctypes.c_uint32(t)],
               grid=(64, 1, 1), block=(128, 1, 1))
    assert _workers() == 2
    msg = str(e.value)
    assert e.value.code == 700, msg
    assert f"block ({k}, 0, 0) thread ({t}, 0, 0)" in msg, msg
    assert "st.global.u32 [%rd4], %r6" in msg and "0x10" in msg, msg
    with pytest.raises(CudaError):  # sticky, as on a GPU
        b.ctx_synchronize()


# Each thread prints one line: "b<block> t<thread>".
PRINTF = HEAD + """
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0,
                                                 .param .b64 vprintf_param_1);
.global .align 1 .b8 $str[9] = {98, 37, 100, 32, 116, 37, 100, 10, 0};
.visible .entry lines()
{
    .local .align 8 .b8 __local_depot0[8];
    .reg .b32 %r<4>;
    .reg .b64 %rd<6>;
    mov.u64 %rd1, __local_depot0;
    cvta.local.u64 %rd2, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %tid.x;
    st.local.v2.u32 [%rd1], {%r1, %r2};
    mov.u64 %rd3, $str;
    cvta.global.u64 %rd4, %rd3;
    {
    .param .b64 param0;
    st.param.b64 [param0], %rd4;
    .param .b64 param1;
    st.param.b64 [param1], %rd2;
    .param .b32 retval0;
    call.uni (retval0), vprintf, (param0, param1);
    ld.param.b32 %r3, [retval0];
    }
    ret;
}
"""


def test_printf_lines_of_two_workers_never_interleave(b, two, capfd):
    launch(b, PRINTF, "lines", [], grid=(32, 1, 1), block=(64, 1, 1))
    assert _workers() == 2
    lines = capfd.readouterr().out.splitlines()
    assert sorted(lines) == sorted(f"b{k} t{t}" for k in range(32) for t in range(64))


def test_workers_setting_is_checked(monkeypatch):
    monkeypatch.delenv("GPUARRAY_SIM_SEED", raising=False)
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS", "0")
    with pytest.raises(ValueError, match="GPUARRAY_SIM_WORKERS='0': use auto or an integer"):
        _hostrt.workers()
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS", "3")
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS_MIN_THREADS", "x")
    with pytest.raises(ValueError, match="GPUARRAY_SIM_WORKERS_MIN_THREADS='x'"):
        _hostrt.workers_for(8, 1024)
    monkeypatch.delenv("GPUARRAY_SIM_WORKERS_MIN_THREADS")
    assert _hostrt.workers_for(8, 1024) == 3
    assert _hostrt.workers_for(2, 1024, cooperative=True) == 1
    assert _hostrt.workers_for(1, 1024) == 1
    assert _hostrt.workers_for(4, 32) == 1  # fewer threads than a hand-off is worth


def test_memory_model_qualifiers_translate_to_atomic_accesses_of_their_order():
    """A flag's ld.volatile / ld.acquire is an atomic load (never kept in a register across a
    spin), a st.release an atomic store; shared, local and plain accesses stay plain."""
    from gpuarray_sim.ptx import _emit, _parse

    src = FLAG_FROM_LAST_BLOCK.replace("ld.volatile.global.u32 %r9", "ld.acquire.gpu.global.u32 %r9"
                                       ).replace("st.volatile.global.u32 [%rd4]",
                                                 "st.release.gpu.global.u32 [%rd4]")
    cpp = _emit.translate(_parse.parse(src)).source
    assert cpp.count("ptx::load_at<uint32_t, __ATOMIC_RELAXED>") == 1  # the spin's ld.volatile
    assert cpp.count("ptx::load_at<uint32_t, __ATOMIC_ACQUIRE>") == 1
    assert cpp.count("ptx::store_at<uint32_t, __ATOMIC_RELEASE>") == 1
    assert cpp.count("ptx::store_at<uint32_t, __ATOMIC_RELAXED>") == 1  # st.volatile [%rd5+4]
    assert cpp.count("ptx::store<uint32_t>") == 2  # the plain st.global of `seen` and of out[0]


def test_default_workers_are_the_cores_left_idle(monkeypatch):
    import time

    for name in ("GPUARRAY_SIM_WORKERS", "GPUARRAY_SIM_SEED", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_hostrt, "_cores", 8)
    monkeypatch.setattr(_hostrt, "_load", [time.monotonic(), 0.0])
    monkeypatch.setattr(_hostrt, "_runnable", [time.monotonic() + 1e6, 8])  # all cores busy now
    assert _hostrt.workers() == 8 and _hostrt.workers_for(64, 1024) == 8
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS", "auto")  # the same, said

    def at_load(load: float) -> int:
        monkeypatch.setattr(_hostrt, "_load", [time.monotonic(), load])
        return _hostrt.workers()

    assert at_load(0.0) == 8 and at_load(1.0) == 8  # (the 1.0 may be this process's own)
    assert at_load(6.8) == 2 and at_load(9.0) == 1  # a busy machine: no core for a second
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    assert at_load(0.0) == 2  # xdist's processes share the cores
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")
    assert at_load(0.0) == 1
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS", "3")
    assert at_load(9.0) == 3  # asked for: no load guard


def test_under_xdist_a_launch_takes_the_cores_idle_now(monkeypatch):
    # xdist's processes share the cores; once the others are out of tests (idle, not
    # runnable), the last long launches take their cores, whatever the 1-minute load says
    import time

    for name in ("GPUARRAY_SIM_WORKERS", "GPUARRAY_SIM_SEED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setattr(_hostrt, "_cores", 2)
    monkeypatch.setattr(_hostrt, "_load", [time.monotonic() + 1e6, 2.0])  # still counts them

    def runnable(n: int) -> int:
        monkeypatch.setattr(_hostrt, "_runnable", [time.monotonic() + 1e6, n])
        return _hostrt.workers()

    assert runnable(2) == 1  # the other process runs: one core each
    assert runnable(3) == 1
    assert runnable(1) == 2  # this thread alone: both cores
    assert runnable(0) == 1  # not known: the static share
    monkeypatch.setattr(_hostrt, "_cores", 8)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    assert runnable(3) == 6 and runnable(9) == 2  # never fewer than the share of the cores
    monkeypatch.setenv("GPUARRAY_SIM_SEED", "1")
    assert runnable(1) == 1  # a seeded run replays: one worker
    monkeypatch.delenv("GPUARRAY_SIM_SEED")
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert runnable(1) == 7  # without xdist the 1-minute load alone, as before (1 + 8 - 2)
    # the reading itself: this thread is running, so at least one runnable thread
    monkeypatch.setattr(_hostrt, "_runnable", [-10.0, 0])
    idle = _hostrt._idle_now(64)
    if os.path.exists("/proc/loadavg"):
        assert idle is not None and 0 <= idle <= 63, idle
    else:
        assert idle is None  # not known here: the static share


def _memcheck_report(mode: str, capsys) -> str:
    """memcheck's report of 64 blocks whose threads 10..15 each read and write past a 40-byte end."""
    sb = SimBackend(memcheck=mode)
    sb.init()
    sb.ctx_set_current(sb.primary_ctx_retain(0))
    src = upload(sb, np.arange(10, dtype=np.uint32))
    dst = sb.mem_alloc(40)
    capsys.readouterr()
    try:
        with pytest.warns(_memcheck.MemcheckWarning, match=r"768 access\(es\) past the end"):
            launch(sb, COPY, "inc", [u64(dst), u64(src), ctypes.c_uint32(16)], grid=(64, 1, 1),
                   block=(32, 1, 1))
    finally:
        _memcheck.forget()
    # the addresses are this simulator's: the same in both runs but for where they were put
    return capsys.readouterr().err.replace(f"0x{src:x}", "SRC").replace(f"0x{src + 40:x}", "END"
                                                                       ).replace(f"0x{dst:x}", "DST")


def test_memcheck_reports_the_same_accesses_with_two_workers(capsys, monkeypatch):
    monkeypatch.delenv("GPUARRAY_SIM_SEED", raising=False)
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS_MIN_THREADS", "0")
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS", "1")
    one = _memcheck_report("report", capsys)
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS", "2")
    two = _memcheck_report("report", capsys)
    assert _workers() == 2
    assert "by thread (10, 0, 0) in block (0, 0, 0)" in one
    assert two == one


def test_strict_memcheck_names_the_access_with_two_workers(two):
    sb = SimBackend(memcheck="strict")
    sb.init()
    sb.ctx_set_current(sb.primary_ctx_retain(0))
    src = upload(sb, np.arange(10, dtype=np.uint32))
    dst = sb.mem_alloc(40)
    with pytest.raises(CudaError) as e:
        launch(sb, COPY, "inc", [u64(dst), u64(src), ctypes.c_uint32(16)], grid=(64, 1, 1),
               block=(32, 1, 1))
    assert _workers() == 2
    msg = str(e.value)
    assert e.value.code == 700 and "ld.global.u32" in msg and "thread (10, 0, 0)" in msg, msg
    assert "4 bytes past the end of the 40-byte allocation" in msg, msg
