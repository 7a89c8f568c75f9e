"""The PTX executor's tiers: the interpreter starts a module without compiling it; hot modules are built.

(Every other test of the executor runs in both tiers: ``conftest.py``.)
"""

from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest
from gpuarray_sim.ptx import _build, _interp

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from sim.tests.ptx.support import backend, download, fixture, launch, u64, upload


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUARRAY_KERNEL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GPUARRAY_KERNEL_CACHE", raising=False)
    monkeypatch.setenv("GPUARRAY_SIM_PTX_TIER", "auto")
    _new_process()
    yield tmp_path
    _new_process()


def _new_process():
    """Forget what this process loaded, as a new process would: only the disk remains."""
    _build.settle()  # no background build writes into the next test's cache
    _build._programs.clear()
    _interp._addresses.clear()
    _interp._libs.clear()
    _interp._core.clear()


def _saxpy(text: str, name: str = "saxpy") -> np.ndarray:
    b = backend()
    x, y = np.arange(64, dtype=np.float32), np.ones(64, np.float32)
    dx, dy = upload(b, x), upload(b, y)
    launch(b, text, name, [ctypes.c_float(2.0), u64(dx), u64(dy), ctypes.c_int32(64)],
           block=(64, 1, 1))
    return download(b, dy, 64, np.float32)


def _count_builds(monkeypatch) -> list[str]:
    """The ``what`` of every compiler run from now on."""
    from gpuarray_sim import _hostrt

    tc = _hostrt.toolchain()
    seen: list[str] = []
    real = type(tc).build

    def build(self, source, what, prefix=None, **kw):
        seen.append(what)
        return real(self, source, what, prefix, **kw)

    monkeypatch.setattr(type(tc), "build", build)
    return seen


def test_a_module_runs_interpreted_and_another_of_the_same_forms_compiles_nothing(cache,
                                                                                   monkeypatch):
    builds = _count_builds(monkeypatch)
    want = 2 * np.arange(64, dtype=np.float32) + 1
    assert np.array_equal(_saxpy(fixture("saxpy")), want)
    prog = _build.load(fixture("saxpy"))
    assert prog.tier == "interp" and not prog.built_now
    assert not any("translated" in w for w in builds), builds  # no build of the module itself
    # the interpreter and the module's forms were compiled once (an empty cache) ...
    assert any("interpreter" in w for w in builds) and any("forms" in w for w in builds)
    # ... and a new process, another kernel of the same forms (other names and constants,
    # as numba-cuda makes them): nothing compiled at all
    _new_process()
    builds.clear()
    other = fixture("saxpy").replace("saxpy", "saxpyB2v3_0x7f00").replace("%r3, %r4, %r5",
                                                                          "%r3, %r4, %r5")
    other = other.replace("ld.param.u32 \t%r2, [saxpyB2v3_0x7f00_param_3];",
                          "ld.param.u32 \t%r2, [saxpyB2v3_0x7f00_param_3+0];")
    assert np.array_equal(_saxpy(other, "saxpyB2v3_0x7f00"), want)
    assert builds == []
    assert _build.load(other).tier == "interp"


def test_a_module_that_runs_long_is_built_in_the_background_and_then_runs_built(cache,
                                                                              monkeypatch):
    monkeypatch.setattr(_build, "TIER_UP_SECONDS", 0.0)  # every module "runs long"
    want = 2 * np.arange(64, dtype=np.float32) + 1
    text = fixture("saxpy")
    assert np.array_equal(_saxpy(text), want)  # interpreted; starts the build
    prog = _build.load(text)
    deadline = time.monotonic() + 120
    while prog.tier != "compiled" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert prog.tier == "compiled" and prog.built_now
    assert np.array_equal(_saxpy(text), want)  # the built translation, same result
    # a new process finds the build on disk and runs it at once
    _new_process()
    prog = _build.load(text)
    prog.prepare()
    assert prog.tier == "compiled" and not prog.built_now


def test_forced_tiers(cache, monkeypatch):
    want = 2 * np.arange(64, dtype=np.float32) + 1
    for tier in ("interp", "compiled"):
        monkeypatch.setenv("GPUARRAY_SIM_PTX_TIER", tier)
        _build._programs.clear()
        assert np.array_equal(_saxpy(fixture("saxpy")), want)
        assert _build.load(fixture("saxpy")).tier == tier
    monkeypatch.setenv("GPUARRAY_SIM_PTX_TIER", "fast")
    _build._programs.clear()
    with pytest.raises(ValueError, match="GPUARRAY_SIM_PTX_TIER"):
        _build.load(fixture("saxpy")).prepare()


# Each thread sums 0..n-1 in a loop and stores the sum at its global index.
LOOP_SUM = """.version 8.0
.target sm_90
.address_size 64
.visible .entry loop_sum(.param .u64 out, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.u32 %r1, [n];
    mov.u32 %r2, 0;
    mov.u32 %r3, 0;
$L:
    add.s32 %r3, %r3, %r2;
    add.s32 %r2, %r2, 1;
    setp.lt.u32 %p1, %r2, %r1;
    @%p1 bra $L;
    mov.u32 %r4, %ctaid.x;
    mov.u32 %r5, %ntid.x;
    mov.u32 %r6, %tid.x;
    mad.lo.s32 %r7, %r4, %r5, %r6;
    mul.wide.u32 %rd3, %r7, 4;
    add.s64 %rd3, %rd2, %rd3;
    st.global.u32 [%rd3], %r3;
    ret;
}
"""


def test_an_interpreted_launch_runs_its_later_blocks_built_once_the_build_is_published(
        cache, monkeypatch):
    b = backend()
    blocks, n = 40, 100
    want = np.full(blocks * 32, n * (n - 1) // 2, np.uint32)
    prog = _build.load(LOOP_SUM)
    prog.prepare()
    assert prog.tier == "interp"
    # a launch running interpreted registers a cell; the background build publishes
    # the translated entry into it (what the watch thread starts for a long launch)
    cell = prog.upgrade_cell("loop_sum")
    assert cell is not None and cell[0] == 0
    prog.build()
    prog._publish()
    assert cell[0] == prog.entry("loop_sum")
    prog.launch_ended(cell)
    # the runtime: a launch whose cell holds the translation runs every block it
    # admits from then on with it (here: all of them), with the same result
    core = prog._interp
    monkeypatch.setattr(prog, "launch_target",
                        lambda name: (core[0], core[1].entry(name)))  # still interpreted
    out = upload(b, np.zeros(blocks * 32, np.uint32))
    launch(b, LOOP_SUM, "loop_sum", [u64(out), ctypes.c_uint32(n)], grid=(blocks, 1, 1),
           block=(32, 1, 1))
    assert prog.upgraded_blocks == blocks
    assert np.array_equal(download(b, out, blocks * 32, np.uint32), want)


def test_settle_waits_for_a_build_whose_thread_is_still_starting(cache, monkeypatch):
    # a build seen started (_upgrading) is one settle() waits for, even while its
    # thread is still starting (it was listed before it started: join() raised)
    import threading

    class SlowStart(threading.Thread):
        def start(self):
            time.sleep(0.2)
            super().start()

    prog = _build.load(LOOP_SUM)
    prog.prepare()
    asker = threading.Thread(target=prog._tier_up)  # the watch thread's part, started normally
    monkeypatch.setattr(_build.threading, "Thread", SlowStart)
    asker.start()
    deadline = time.monotonic() + 10
    while not prog._upgrading and time.monotonic() < deadline:
        time.sleep(0.001)
    assert prog._upgrading
    _build.settle()
    asker.join()
    assert prog.tier == "compiled"


def test_the_watch_thread_builds_for_a_launch_still_running(cache, monkeypatch):
    monkeypatch.setattr(_build, "TIER_UP_SECONDS", 0.0)
    prog = _build.load(LOOP_SUM)
    prog.prepare()
    cell = prog.upgrade_cell("loop_sum")  # a launch that started and has not ended
    assert cell is not None
    deadline = time.monotonic() + 10
    while not prog._upgrading and time.monotonic() < deadline:
        time.sleep(0.01)
    assert prog._upgrading  # no launch ended: the watch thread started the build
    _build.settle()
    assert prog.tier == "compiled" and cell[0] == prog.entry("loop_sum")  # published
    prog.launch_ended(cell)
