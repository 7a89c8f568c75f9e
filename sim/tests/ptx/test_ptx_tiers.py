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

    def build(self, source, what, prefix=None):
        seen.append(what)
        return real(self, source, what, prefix)

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
