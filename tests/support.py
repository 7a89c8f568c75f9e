"""Helpers of both distributions' tests (gpuarray's ``tests/``, gpuarray-sim's ``sim/tests/``).

The fixtures are in ``tests/conftest.py`` (``sim/tests/conftest.py`` takes
the same ones); what a test module imports is here: which backend runs (:func:`backend_is_sim`,
:func:`simulated`), a fresh simulator (:func:`fresh_sim`, :func:`own_sim`),
the simulator behind the backend (:func:`the_simulator`), and the race
detector's refusal as either backend reports it
(:func:`raises_stream_order_error`).

Over the stand-in (``python -m gpuarray standin -- pytest``) the simulator
is behind the real backend, so what the simulator shows -- its lazy queues,
its race detector -- is there too, reported the way a driver reports it: a
race is the failing call's ``CUDA_ERROR_UNKNOWN``, the simulator's
:class:`~gpuarray.errors.StreamOrderError` kept by the stand-in
(``_standin_serve.last_error``).

gpuarray_sim is imported where a helper needs it, never at import: gpuarray's
tests that need no driver run where gpuarray-sim is not installed
(``tests/package/test_packaging.py``).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gpuarray import _config, _device, _driver, _staging, _stream
from gpuarray._driver import _finalize
from gpuarray.errors import CudaError, StreamOrderError
from gpuarray.memory import _manager

#: The repository's root.
ROOT = Path(__file__).resolve().parents[1]

# numba-cuda 0.30.4 registers ``np.row_stack`` when it compiles its first kernel;
# NumPy 2.5 removed that alias of ``np.vstack`` (seen on the first GPU run, whose image
# pairs them), so every ``@cuda.jit`` kernel failed with AttributeError there. Put the
# alias back for the peer, only where NumPy lacks it (the conftests import this module).
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


def standin_active() -> bool:
    """Whether this process runs over the stand-in driver (``GPUARRAY_STANDIN`` set)."""
    return bool(os.environ.get("GPUARRAY_STANDIN", "").strip())


def simulated() -> bool:
    """Whether the simulator is behind the backend: ``sim``, or ``cuda`` over the stand-in."""
    return backend_is_sim() or (standin_active() and _driver.backend_name() == "cuda")


def repeat_of_a_sticky_fault(exc: BaseException) -> bool:
    """Whether ``exc`` only repeats a sticky fault that some call reported first.

    After a sticky fault every release in the context fails with the same
    code, saying "sticky: ..." (``sim/gpuarray_sim/_sticky.py``); those are
    expected. The fault itself, first seen by a finalizer (the first
    remembered error is then the original, without that mark), is a lost
    fault and fails the test.
    """
    if "(sticky: " not in str(exc):
        return False
    from gpuarray_sim._sticky import STICKY_CODES

    return getattr(exc, "code", None) in STICKY_CODES


def reset_library_state() -> None:
    _config.reload()
    _manager._reset_for_tests()
    _stream._reset_for_tests()
    _staging._reset_for_tests()
    from gpuarray import _kernels

    _kernels._reset_for_tests()


def fresh_sim(**kwargs):
    """Install a fresh simulator (keyword arguments as SimBackend's) and return it."""
    from gpuarray_sim import SimBackend

    reset_library_state()
    b = SimBackend(**kwargs) if kwargs else SimBackend.from_environment()
    _driver.set_backend(b)
    _device._reset_for_tests()
    # A release of the previous test's resources that ran (garbage collection)
    # after its teardown and failed only because that test's context was left
    # poisoned: the fault belonged to that test, which saw it.
    lost = _finalize.take_pending()
    if lost is not None and not repeat_of_a_sticky_fault(lost):
        _finalize.remember(lost)
    return b


def own_sim():
    """A simulator of the test's own (not installed), device 0's primary context current."""
    from gpuarray_sim import SimBackend

    b = SimBackend()
    b.init()
    b.ctx_set_current(b.primary_ctx_retain(0))
    return b


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


class RaceInfo:
    """What :func:`raises_stream_order_error` caught: ``value`` is the StreamOrderError."""

    value: StreamOrderError


@contextlib.contextmanager
def raises_stream_order_error(match: str | None = None) -> Iterator[RaceInfo]:
    """Expect the race detector to refuse a call (as ``pytest.raises`` does)."""
    info = RaceInfo()
    if backend_is_sim():
        with pytest.raises(StreamOrderError, match=match) as e:
            yield info
        info.value = e.value
        return
    from gpuarray_sim.standin import _serve as _standin_serve

    with pytest.raises(CudaError) as c:
        yield info
    assert c.value.name == "CUDA_ERROR_UNKNOWN", c.value
    err = _standin_serve.last_error()
    assert isinstance(err, StreamOrderError), repr(err)
    if match is not None:
        assert re.search(match, str(err)), str(err)
    info.value = err


def the_simulator():
    """The simulator behind the backend: the ``sim`` backend itself, or the stand-in's."""
    if backend_is_sim():
        return _driver.get_backend().backend  # past gpuarray's capture checkpoint
    from gpuarray_sim.standin import _serve as _standin_serve

    return _standin_serve.backend()
