"""Test fixtures: every test starts from fresh global state.

gpuarray's tests (``tests/``) and gpuarray-sim's (``sim/tests/``, whose
conftest takes these) share the fixtures and the skip summary; the helpers
they import are in ``tests/support.py``.

On the simulator (``GPUARRAY_BACKEND=sim``, what ``make test`` sets) each test
gets a fresh :class:`SimBackend` built from the ``GPUARRAY_SIM_*`` environment,
so memory accounting, streams and race records never leak between tests.
On the real backend the process-wide backend is kept (a GPU context is
expensive) and only library state is reset.
"""

from __future__ import annotations

import gc
import os
import threading

import pytest

from gpuarray import _device, _driver
from gpuarray._driver import _finalize
from tests.support import (
    backend_is_sim,
    fresh_sim,
    own_sim,
    repeat_of_a_sticky_fault,
    reset_library_state,
    skip_summary,
)

# The simulator honours CUDA_VISIBLE_DEVICES as CUDA does, so a value left in
# the shell ("", "-1" to hide GPUs from other tools) would hide every
# simulated device. The suite's simulated machine is GPUARRAY_SIM_* alone;
# tests that pin devices (test_visible_devices, test_dask) set it themselves.
if backend_is_sim():
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
# gpuarray's own tests run the simulator's memcheck model strict: a kernel's access
# past an allocation's end is a fault even inside the allocation's mapped granule,
# where a GPU (and the simulator by default) goes on and reports it
# (sim/gpuarray_sim/_memcheck.py). The stand-in runs (make test-standin) inherit it.
os.environ.setdefault("GPUARRAY_SIM_MEMCHECK", "strict")


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
    for handle in sorted({*cp._foreign, *(c.handle for c in cp._captures.values())}):
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
    for key in list(cp._captures):  # the checkpoint's record of them goes too
        cp._forget(key)
    return left


@pytest.fixture(autouse=True)
def _fresh_state():
    process_backend = _driver._backend
    if backend_is_sim():
        fresh_sim()
    else:
        reset_library_state()
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
    reset_library_state()
    _finalize.take_pending()  # what the reset's own releases raised
    if lost is not None and not repeat_of_a_sticky_fault(lost):
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


_SUMMARISED = pytest.StashKey[bool]()


def pytest_collection_finish(session):
    """Freeze what the collection made: every test module is imported by now (NumPy,
    PyTorch, numba, Dask...) and lives for the whole session.  The leak checks collect
    garbage around each test (``gc.collect()``: 1,000-odd calls in the suite); a full
    collection walks every tracked object, about 50 ms once PyTorch is in the process,
    while after the freeze it walks only what the tests made since (CPython's
    ``gc.freeze``).  Garbage is collected first, so none of it is frozen.
    """
    gc.collect()
    gc.freeze()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Summarise skipped tests by reason instead of one line per test location."""
    if config.stash.get(_SUMMARISED, False):  # once, though both products' conftests hold it
        return
    config.stash[_SUMMARISED] = True
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if r.skipped]
    if not skipped:
        return
    lines = skip_summary(skipped)
    terminalreporter.write_sep("=", f"{len(skipped)} skipped, {len(lines)} reasons")
    for line in lines:
        terminalreporter.write_line(line)


@pytest.fixture
def core():
    """cuda.core and its device 0, made current (the driver-API peer tests; .venv-peers)."""
    core = pytest.importorskip("cuda.core", reason="cuda.core is not installed "
                                                   "(pip install -r tests/requirements-peers.txt)")
    dev = core.Device(0)
    dev.set_current()
    return core, dev


@pytest.fixture
def b():
    """A simulator of the test's own (race checks raising), device 0's primary context current."""
    return own_sim()
