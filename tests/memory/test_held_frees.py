"""Frees held while gpuarray captures: none stays held after the last capture ends (issue 35).

The release of graph memory that a launch mapped is deferred while a capture
of gpuarray's is in progress (``cuMemFree`` synchronises) and made when the
last capture ends, by the capture checkpoint.  The interleavings of the pool's
held frees are made deterministic here by running the other thread's part at
the point in question.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuarray
from gpuarray import _driver
from tests.support import simulated, the_simulator

pytestmark = pytest.mark.skipif(not simulated(), reason="reads the simulator's memory")


def _launched_graph_memory():
    """A graph whose memory a launch mapped, its array, and the address."""
    s = gpuarray.stream(non_blocking=True)
    s.begin_capture()
    a = gpuarray.zeros(256, np.uint8, stream=s)  # graph memory, a static output
    g = s.end_capture()
    g.launch()
    s.synchronize()
    return g, a, a.gpu_data.device_pointer


def _alive(ptr: int) -> bool:
    found = the_simulator().memory.find(ptr)
    return found is not None and found.alive and not getattr(found, "unmapped", False)


def test_graph_memory_released_during_a_capture_is_freed_when_the_last_capture_ends():
    """The release goes through the capture checkpoint, which defers frees while gpuarray
    captures (under its lock, with the end of the capture): none is held for good, none lost.
    (Before issue 43 graph memory kept a held list of its own, with the two races the
    checkpoint's record cannot have: a free decided as the last capture ended, a free
    appended while the held ones were taken.)"""
    g1, a1, p1 = _launched_graph_memory()
    g2, a2, p2 = _launched_graph_memory()
    other = gpuarray.stream(non_blocking=True)
    other.begin_capture()
    g1.close()
    del a1
    g2.close()
    del a2
    assert _alive(p1) and _alive(p2)  # cuMemFree would synchronise: deferred
    other.end_capture()
    assert not _driver.get_backend().capturing
    assert not _alive(p1) and not _alive(p2)


def test_a_pool_free_held_as_another_librarys_capture_ends_is_made_at_once(monkeypatch):
    # A stream-ordered free of the pool, on a stream another library
    # captures, is held (_pool_held.py); when that capture ends between the
    # test and the hold, the free is made then. Before: it waited for the
    # next pool operation (or the interpreter's exit).
    from gpuarray._driver import get_backend
    from gpuarray.memory import _pool_held

    gpuarray.set_memory_manager("pool")  # the suite resets the manager after each test
    mgr = gpuarray.memory.get_memory_manager()
    b = get_backend().backend  # the other library calls the driver, past gpuarray's checkpoint
    owned = gpuarray.stream(non_blocking=True)
    e = gpuarray.external_stream(owned.handle)
    with gpuarray.memory.allocation_stream(e):
        x = gpuarray.to_device(np.arange(4.0), stream=e)
    ptr = x.__cuda_array_interface__["data"][0]
    e.synchronize()
    b.stream_begin_capture(e.handle, "global")  # the other library's capture
    real = _pool_held.blocked
    ended: list[int] = []

    def blocked_then_the_capture_ends(uses) -> bool:
        answer = real(uses)
        if answer and not ended:
            ended.append(b.stream_end_capture(e.handle))  # on the other library's thread
        return answer

    monkeypatch.setattr(_pool_held, "blocked", blocked_then_the_capture_ends)
    del x  # the free: held, as the capture ends
    monkeypatch.undo()
    assert ended, "the interleaving did not happen"
    b.graph_destroy(ended[0])
    assert ptr not in mgr.allocations  # freed without another pool operation
    assert _pool_held._held == []
