"""Test fixtures: every test starts from fresh global state.

On the simulator (``GPUARRAY_BACKEND=sim``, what ``make test`` sets) each test
gets a fresh :class:`SimBackend` built from the ``GPUARRAY_SIM_*`` environment,
so memory accounting, streams and race records never leak between tests.
On the real backend the process-wide backend is kept (a GPU context is
expensive) and only library state is reset.
"""

from __future__ import annotations

import collections
import os
import threading

import numpy as np
import pytest

import gpuarray
from gpuarray import _config, _device, _driver, _staging, _stream
from gpuarray._driver import _finalize
from gpuarray._driver.sim._sticky import STICKY_CODES
from gpuarray.memory import _manager

# numba-cuda 0.30.4 registers ``np.row_stack`` when it compiles its first kernel;
# NumPy 2.5 removed that alias of ``np.vstack`` (seen on the first GPU run, whose image
# pairs them), so every ``@cuda.jit`` kernel failed with AttributeError there. Put the
# alias back for the peer, only where NumPy lacks it.
#: Whether NumPy lacked the alias (a child process that compiles numba kernels fails then).
NUMPY_WITHOUT_ROW_STACK = not hasattr(np, "row_stack")
if NUMPY_WITHOUT_ROW_STACK:
    np.row_stack = np.vstack  # type: ignore[attr-defined]


def backend_is_sim() -> bool:
    return os.environ.get("GPUARRAY_BACKEND", "cuda").strip().lower() == "sim"


def allocated(ptr: int) -> bool:
    """Whether the driver knows ``ptr`` as allocated memory (after ``cuMemFree`` it does not).

    Tests ask this rather than count free bytes: a GPU's free memory moves in whole
    pages and with every other process on the device (the GPU run's 8 pytest workers).
    """
    return _driver.get_backend().pointer_info(int(ptr)).memory_type != 0


def exact_free_memory() -> bool:
    """Whether ``cuMemGetInfo`` counts bytes exactly: the simulator's does, alone per test."""
    return backend_is_sim()


# The simulator honours CUDA_VISIBLE_DEVICES as CUDA does, so a value left in
# the shell ("", "-1" to hide GPUs from other tools) would hide every
# simulated device. The suite's simulated machine is GPUARRAY_SIM_* alone;
# tests that pin devices (test_visible_devices, test_dask) set it themselves.
if backend_is_sim():
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)


def _repeat_of_a_sticky_fault(exc: BaseException) -> bool:
    """Whether ``exc`` only repeats a sticky fault that some call reported first.

    After a sticky fault every release in the context fails with the same
    code, saying "sticky: ..." (``sim/_sticky.py``); those are expected. The
    fault itself, first seen by a finalizer (the first remembered error is
    then the original, without that mark), is a lost fault and fails the test.
    """
    return getattr(exc, "code", None) in STICKY_CODES and "(sticky: " in str(exc)


def _reset_library_state() -> None:
    _config.reload()
    _manager._reset_for_tests()
    _stream._reset_for_tests()
    _staging._reset_for_tests()
    try:
        from gpuarray import _kernels
    except ImportError:  # pragma: no cover - the kernels layer always exists
        return
    reset = getattr(_kernels, "_reset_for_tests", None)
    if reset is not None:
        reset()


def fresh_sim(**kwargs):
    """Install a fresh simulator (keyword arguments as SimBackend's) and return it."""
    from gpuarray._driver.sim import SimBackend

    _reset_library_state()
    b = SimBackend(**kwargs) if kwargs else SimBackend.from_environment()
    _driver.set_backend(b)
    _device._reset_for_tests()
    # A release of the previous test's resources that ran (garbage collection)
    # after its teardown and failed only because that test's context was left
    # poisoned: the fault belonged to that test, which saw it.
    lost = _finalize.take_pending()
    if lost is not None and not _repeat_of_a_sticky_fault(lost):
        _finalize.remember(lost)
    return b


def _end_left_captures() -> list[int]:
    """On the real backend: end every capture a test left open on a stream gpuarray knows
    (its own, and other libraries' streams it was given); the handles of those it ended.

    A capture left open by a failed test refuses every later unsafe call of the process
    (900): on the first GPU run one such test failed about 20 others in its worker.
    """
    cp = _driver._backend
    if cp is None or not hasattr(cp, "_foreign"):
        return []
    b = cp.backend
    left = []
    for handle in sorted({*cp._foreign, *(c.stream for c in cp._captures.values())}):
        try:
            if b.stream_is_capturing(handle) == "none":
                continue
        except Exception:
            continue
        left.append(handle)
        try:
            b.graph_destroy(b.stream_end_capture(handle))
        except Exception:
            pass
    if left:
        cp._captures.clear()
    return left


@pytest.fixture(autouse=True)
def _fresh_state():
    process_backend = _driver._backend
    if backend_is_sim():
        fresh_sim()
    else:
        _reset_library_state()
    yield
    if not backend_is_sim():
        left = _end_left_captures()
        if left:
            _finalize.take_pending()
            pytest.fail(f"the test left a capture open on stream(s) {[hex(h) for h in left]} "
                        "(ended now, so later tests do not inherit it)", pytrace=False)
    if not backend_is_sim() and _driver._backend is not process_backend:
        # A simulator test over the stand-in (fresh_sim, make_sim) replaced the
        # process's cuda backend: the next test in this process (pytest-xdist
        # runs files in any order) gets it back, with its devices.
        _driver.set_backend(process_backend)
        _device._reset_for_tests()
    # The simulator's host-callback threads may still hold the test's streams:
    # let them finish, so their releases run against this test's backend and
    # are judged here, not raised by the next test.
    for t in threading.enumerate():
        if t.name == "gpuarray-sim-callback":
            t.join(30)
    # An error of a finalizer that no later call raised: the test lost a fault.
    lost = _finalize.take_pending()
    _reset_library_state()
    _finalize.take_pending()  # what the reset's own releases raised
    if lost is not None and not _repeat_of_a_sticky_fault(lost):
        pytest.fail(f"an error raised in a finalizer was never reported: {lost!r}", pytrace=False)


@pytest.fixture
def sim():
    """The simulator backend of this test (skips on the real backend)."""
    if not backend_is_sim():
        pytest.skip("needs the simulator backend (GPUARRAY_BACKEND=sim)")
    return _driver.get_backend().backend  # behind gpuarray's capture checkpoint


@pytest.fixture
def make_sim():
    """Install a simulator with custom settings: ``make_sim(devices=2, memory=1 << 20)``."""
    if not backend_is_sim():
        pytest.skip("needs the simulator backend (GPUARRAY_BACKEND=sim)")
    return fresh_sim


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def skip_summary(reports) -> list[str]:
    """One line per skip reason, most frequent first: ``"  105  needs the real CUDA backend"``."""
    counts = collections.Counter(_skip_reason(r) for r in reports)
    width = len(str(max(counts.values(), default=0)))
    return [f"{n:>{width}}  {reason}" for reason, n in
            sorted(counts.items(), key=lambda item: (-item[1], item[0]))]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Summarise skipped tests by reason instead of one line per test location."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if r.skipped]
    if not skipped:
        return
    lines = skip_summary(skipped)
    terminalreporter.write_sep("=", f"{len(skipped)} skipped, {len(lines)} reasons")
    for line in lines:
        terminalreporter.write_line(line)


__all__ = ["backend_is_sim", "fresh_sim", "gpuarray", "skip_summary"]


@pytest.fixture
def core():
    """cuda.core and its device 0, made current (the driver-API peer tests; .venv-peers)."""
    core = pytest.importorskip("cuda.core", reason="cuda.core is not installed "
                                                   "(pip install -r tests/requirements-peers.txt)")
    dev = core.Device(0)
    dev.set_current()
    return core, dev
