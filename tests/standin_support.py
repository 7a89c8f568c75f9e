"""Test helpers for the suite run on the cuda backend over the stand-in driver.

Over the stand-in (``python -m gpuarray standin -- pytest``) the simulator
is behind the real backend, so what the simulator shows -- its lazy queues,
its race detector -- is there too, reported the way a driver reports it: a
race is the failing call's ``CUDA_ERROR_UNKNOWN``, the simulator's
:class:`~gpuarray.errors.StreamOrderError` kept by the stand-in
(``_standin_serve.last_error``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import pytest

from gpuarray import _driver
from gpuarray_sim import standin as _standin
from gpuarray.errors import CudaError, StreamOrderError

from .conftest import backend_is_sim


def simulated() -> bool:
    """Whether the simulator is behind the backend: ``sim``, or ``cuda`` over the stand-in."""
    return backend_is_sim() or (_standin.active() and _driver.backend_name() == "cuda")


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
