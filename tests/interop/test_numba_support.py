"""Numba's remaining host-side helpers on gpuarray.

``is_supported_version()``, ``require_context``, ``profile_start()``,
``profile_stop()`` and ``profiling()`` (``gpuarray/_numba_compat.py``), and the
driver calls beneath the profiler ones (``Backend.profiler_start`` /
``profiler_stop``) on the simulator.  The real backend's marshalling of
``cuProfilerStart``/``cuProfilerStop`` is tested in ``test_cuda_backend.py``.
"""

from __future__ import annotations

import doctest
import threading

import numpy as np
import pytest

import gpuarray
from gpuarray import _numba_compat as _support
from gpuarray.errors import CudaError, CudaUnavailableError


def _in_thread(fn):
    """Run ``fn`` on a fresh thread (no current context) and return its result or raise."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    if "error" in out:
        raise out["error"]
    return out["value"]


# ------------------------------------------------------ the simulator's calls
@pytest.mark.parametrize(("call", "cuda_name"),
                         [("profiler_start", "cuProfilerStart"), ("profiler_stop", "cuProfilerStop")])
def test_sim_profiler_calls_need_a_current_context(sim, call, cuda_name):
    def no_context():
        assert sim.ctx_get_current() == 0
        getattr(sim, call)()

    with pytest.raises(CudaError, match=f"{cuda_name}.*INVALID_CONTEXT") as info:
        _in_thread(no_context)
    assert info.value.code == 201 and info.value.call == cuda_name


def test_sim_profiler_records_per_context_and_repeats_are_no_ops(make_sim):
    b = make_sim(devices=2)
    assert not b.profiler_active(0) and not b.profiler_active(1)
    b.ctx_set_current(b.primary_ctx_retain(1))
    b.profiler_start()
    b.profiler_start()  # already on: no effect
    assert b.profiler_active(1) and not b.profiler_active(0)
    b.profiler_stop()
    b.profiler_stop()  # already off: no effect
    assert not b.profiler_active(1)
    b.profiler_start()
    b.primary_ctx_reset(1)  # a reset context starts over
    assert not b.profiler_active(1)
    with pytest.raises(CudaError, match="device 5"):
        b.profiler_active(5)


# ------------------------------------------------------- profile_start / stop
def test_profile_start_stop_make_a_context_current(sim):
    def run():
        gpuarray.profile_start()
        on = sim.profiler_active(0)
        current = sim.ctx_get_current()
        gpuarray.profile_stop()
        return on, current, sim.profiler_active(0)

    on, current, after = _in_thread(run)
    assert on and not after
    assert current == gpuarray.get_device(0).context_handle


def test_profile_start_uses_the_current_device(make_sim):
    b = make_sim(devices=2)
    with gpuarray.get_device(1):
        gpuarray.profile_start()
    assert b.profiler_active(1) and not b.profiler_active(0)
    with gpuarray.get_device(1):
        gpuarray.profile_stop()
    assert not b.profiler_active(1)


def test_profiling_block(sim):
    with gpuarray.profiling() as value:
        assert value is None and sim.profiler_active(0)
        d = gpuarray.to_device(np.arange(4))
    assert not sim.profiler_active(0)
    assert d.copy_to_host().tolist() == [0, 1, 2, 3]


def test_profiling_stops_when_the_block_raises(sim):
    with pytest.raises(KeyError, match="inside"):
        with gpuarray.profiling():
            raise KeyError("inside")
    assert not sim.profiler_active(0)


def test_profiling_stops_the_context_it_started_even_after_a_switch(make_sim):
    b = make_sim(devices=2)
    gpuarray.select_device(0)
    with gpuarray.profiling():
        gpuarray.select_device(1)
        assert b.profiler_active(0) and not b.profiler_active(1)
    assert not b.profiler_active(0)
    assert gpuarray.get_device().id == 1  # the block's switch stays, as after any call


def test_profiling_start_failure_leaves_the_block_unrun(sim):
    sim.ctx_set_current(0)
    ran = []

    def failing():
        raise CudaError(999, "cuProfilerStart", "(refused)")

    sim.profiler_start = failing  # type: ignore[method-assign]
    with pytest.raises(CudaError, match="refused"):
        with gpuarray.profiling():
            ran.append(1)
    assert ran == []


# ------------------------------------------------------------ require_context
def test_require_context_makes_the_current_device_current(sim):
    @gpuarray.require_context
    def where(x, *, y):
        """Doc of where."""
        return sim.ctx_get_current(), x + y

    assert where.__name__ == "where" and where.__doc__ == "Doc of where."
    ctx, value = _in_thread(lambda: where(1, y=2))
    assert ctx == gpuarray.get_device(0).context_handle and value == 3


def test_require_context_keeps_another_current_device(make_sim):
    b = make_sim(devices=2)
    seen = gpuarray.require_context(b.ctx_get_device)
    with gpuarray.get_device(1):
        assert seen() == 1
    assert seen() == 0


def test_require_context_passes_exceptions_through(sim):
    @gpuarray.require_context
    def boom():
        raise ValueError("from fn")

    with pytest.raises(ValueError, match="from fn"):
        boom()


@pytest.mark.parametrize("bad", [None, 3, "fn"])
def test_require_context_rejects_a_non_callable(bad):
    with pytest.raises(TypeError, match=repr(bad).replace("(", r"\(")):
        gpuarray.require_context(bad)


# ------------------------------------------------------- is_supported_version
@pytest.mark.parametrize(
    ("driver", "bindings", "nvrtc", "expected"),
    [
        (13000, 13, (13, 0), True),
        (12080, 12, (12, 9), True),  # minor versions do not matter
        (13000, 12, (12, 9), True),  # a newer driver runs older code
        (14000, 13, (13, 5), True),
        (12080, 13, (13, 0), False),  # NVRTC 13 code does not load on a CUDA 12 driver
        (12080, 13, (12, 9), False),  # cuda-bindings 13 needs a CUDA 13 driver
        (13000, 13, (14, 0), False),  # an NVRTC major gpuarray is not built for
        (12080, 11, (11, 8), False),  # too old
        (13000, None, (13, 0), False),  # no cuda-bindings
        (13000, 13, None, False),  # no NVRTC
    ],
)
def test_versions_supported_rule(driver, bindings, nvrtc, expected):
    assert _support._versions_supported(driver, bindings, nvrtc) is expected


def test_is_supported_version_asks_the_driver_bindings_and_nvrtc(sim, monkeypatch):
    monkeypatch.setattr(_support, "_bindings_major", lambda: 13)
    monkeypatch.setattr(_support, "_nvrtc_version", lambda: (13, 0))
    assert sim.driver_version() == 13050
    assert gpuarray.is_supported_version() is True
    monkeypatch.setattr(sim, "driver_version", lambda: 12080)
    assert gpuarray.is_supported_version() is False


def test_is_supported_version_in_this_environment(sim):
    from gpuarray._kernels import _toolchain

    if _support._bindings_major() is None or _toolchain.current() is None:
        pytest.skip("cuda-bindings or NVRTC is not installed here")
    # make test installs one extra (cu12 or cu13): its bindings and NVRTC match
    assert gpuarray.is_supported_version() is True


def test_is_supported_version_without_a_device(make_sim):
    b = make_sim(visible=[])
    with pytest.raises(CudaUnavailableError):
        b.init()
    assert gpuarray.is_supported_version() is False


# ---------------------------------------------------------------- docstrings
@pytest.mark.parametrize("name", _support.__all__)
def test_docstring_examples_run(sim, name):
    obj = getattr(gpuarray, name)
    tests = doctest.DocTestFinder().find(obj, name, globs={"gpuarray": gpuarray, "np": np})
    examples = [t for t in tests if t.examples]
    assert examples, f"{name} has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in examples:
        runner.run(t)
    assert runner.failures == 0


def test_supported_majors_are_the_cuda_extras_of_the_package():
    # is_supported_version's table must follow pyproject's [cuNN] extras.
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    extras = sorted(int(m) for m in re.findall(r"^cu(\d+) = \[", text, flags=re.M))
    assert extras and tuple(extras) == _support.SUPPORTED_CUDA_MAJORS, extras


def test_require_context_forbids_switching_devices_inside(make_sim):
    # Numba's require_context attaches the current context for the call: a
    # switch to another device inside (with gpus[i], select_device) raises
    # RuntimeError("Cannot switch CUDA-context."); the same device is fine.
    make_sim(devices=2)

    @gpuarray.require_context
    def switch(i):
        with gpuarray.gpus[i]:
            return gpuarray.get_device().id

    @gpuarray.require_context
    def select(i):
        return gpuarray.select_device(i).id

    with gpuarray.gpus[0]:
        for fn in (switch, select):
            with pytest.raises(RuntimeError, match="Cannot switch CUDA-context"):
                fn(1)
            assert gpuarray.get_device().id == 0  # nothing switched
            assert fn(0) == 0  # the attached device itself
    # outside a require_context call, switching is allowed as before
    with gpuarray.gpus[1]:
        assert gpuarray.get_device().id == 1
    assert gpuarray.select_device(1).id == 1
    # a nested call keeps the outer attachment (device 1 here); an error detaches it
    outer = gpuarray.require_context(lambda: switch(0))
    with pytest.raises(RuntimeError, match="Cannot switch CUDA-context"):
        outer()
    assert gpuarray.select_device(0).id == 0


def test_import_gpuarray_leaves_package_metadata_unloaded():
    # importlib.metadata costs ~20 ms of `import gpuarray` (issue 13: at most
    # numpy's import + 30 ms); is_supported_version() loads it when asked.
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, gpuarray\n"
            "print('importlib.metadata' in sys.modules)\n"
            "import gpuarray._numba_compat\n"  # loads on first use (gpuarray._LAZY)
            "gpuarray._numba_compat._bindings_major()\n"
            "print('importlib.metadata' in sys.modules)\n")
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, GPUARRAY_BACKEND="sim",
               PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]
