"""Frees held while gpuarray captures: none stays held after the last capture ends (issue 35).

The release of graph memory that a launch mapped is held while a capture of
gpuarray's is in progress (``cuMemFree`` synchronises) and made when the last
capture ends (``_checkpoint.on_capture_end``).  Before: ``_GraphMemory.free`` asked
whether a capture was in progress and appended to the held list after that,
so when the last capture ended in between (its release of the held list run
already), the free stayed held for good; and the release copied the held
list and cleared it in two steps, losing a free appended in between.  The
interleavings are made deterministic here by running the other thread's
part at the point in question.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuarray
from gpuarray import _driver, _graph
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


def test_a_free_decided_while_the_last_capture_ends_is_not_held_for_good(monkeypatch):
    g, a, ptr = _launched_graph_memory()
    other = gpuarray.stream(non_blocking=True)
    other.begin_capture()  # a capture in progress: frees are held
    real = _graph._capturing
    ended: list[object] = []

    def holding_then_the_capture_ends() -> bool:
        answer = real()
        if answer and not ended:  # another thread ends the last capture right here
            ended.append(other.end_capture())
        return answer

    monkeypatch.setattr(_graph, "_capturing", holding_then_the_capture_ends)
    g.close()
    del a  # both gone: the release of the graph memory
    monkeypatch.undo()
    assert ended, "the interleaving did not happen"
    assert not _driver.get_backend().capturing
    assert _graph._held == []  # before: held, with no capture left to release it
    assert not _alive(ptr)


class _ListAppendedWhileTaken(list):
    """The held list, where another thread appends while the release takes the items.

    The append comes at the last step of the take: before the list is
    cleared (a copy, then a clear), or before the pop that finds it empty.
    """

    def __init__(self, items, late):
        super().__init__(items)
        self.late = late

    def _append_late(self):
        if self.late is not None:
            late, self.late = self.late, None
            self.append(late)  # the other thread's free

    def __setitem__(self, index, value):
        if isinstance(index, slice) and value == []:
            self._append_late()
        super().__setitem__(index, value)

    def pop(self, *index):
        if not self:
            self._append_late()
        return super().pop(*index)


def test_a_free_held_while_the_held_frees_are_released_is_not_lost(monkeypatch):
    g1, a1, p1 = _launched_graph_memory()
    g2, a2, p2 = _launched_graph_memory()
    other = gpuarray.stream(non_blocking=True)
    other.begin_capture()
    g1.close()
    del a1
    g2.close()
    del a2
    assert len(_graph._held) == 2 and _alive(p1) and _alive(p2)
    first, second = _graph._held
    monkeypatch.setattr(_graph, "_held", _ListAppendedWhileTaken([first], second))
    other.end_capture()  # releases what is held
    assert not _driver.get_backend().capturing
    assert list(_graph._held) == []
    assert not _alive(p1)
    assert not _alive(p2)  # before: dropped from the list unreleased


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
