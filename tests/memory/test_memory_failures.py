"""Memory managers under failure (issue 12, items 8 and 9).

8. One failing free in a deferred-free batch must not leak the rest of the
   batch: every item is freed, then the first error is raised.
9. A plugin whose ``memalloc`` returns something that is not a
   ``MemoryPointer`` is refused at the manager boundary, with a TypeError
   naming the plugin class and what it returned.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import gpuarray
from gpuarray import memory
from gpuarray.errors import CudaError
from gpuarray.memory import _manager
from tests.support import backend_is_sim


# ------------------------------------------------ 8. a batch frees everything
def test_one_failing_free_does_not_leak_the_rest_of_the_batch():
    q = _manager._PendingDeallocs(None)
    freed: list[int] = []

    def free(handle: int) -> None:
        if handle in (2, 4):
            raise CudaError(1, "cuMemFree", f"handle {handle}")
        freed.append(handle)

    with q.disable():
        for h in range(6):
            q.add_item(free, h, 8)
    with pytest.raises(CudaError, match="handle 2") as e:
        q.clear()
    assert freed == [0, 1, 3, 5], "the frees after the failing one were dropped"
    assert q.pending_count == 0 and q.pending_size == 0
    if sys.version_info >= (3, 11):  # exception notes
        assert "handle 4" in "\n".join(e.value.__notes__)


@pytest.mark.skipif(not backend_is_sim(), reason="counts the simulator's allocations")
def test_a_failing_device_free_still_frees_the_other_allocations(sim):
    arrays = [gpuarray.empty(64, np.uint8) for _ in range(4)]
    mgr = memory.get_memory_manager()
    used = sim.memory.used[0]
    ptrs = [a.gpu_data.device_pointer for a in arrays]
    with gpuarray.defer_cleanup():
        del arrays
        assert mgr.deallocations.pending_count == 4
    # the queue is flushed by the next call: make one free fail on the way
    real_free = sim.mem_free

    def flaky_free(ptr):
        if ptr == ptrs[1]:
            raise CudaError(1, "cuMemFree", "injected")
        real_free(ptr)

    sim.mem_free = flaky_free
    with pytest.raises(CudaError, match="injected"):
        mgr.deallocations.clear()
    assert sim.memory.used[0] == used - 3 * 64


# ------------------------------------------- 9. memalloc must return a pointer
class _ReturnsInt(memory.HostOnlyCUDAMemoryManager):
    def memalloc(self, size):
        return 0x1234

    def get_memory_info(self):
        return memory.MemoryInfo(0, 0)

    def get_ipc_handle(self, memory_pointer):
        raise NotImplementedError

    @property
    def interface_version(self):
        return 1


class _ReturnsNone(_ReturnsInt):
    def memalloc(self, size):
        return None


@pytest.mark.parametrize("plugin, shown", [(_ReturnsInt, "int 4660"), (_ReturnsNone, "NoneType None")])
def test_memalloc_returning_a_non_pointer_is_a_type_error_naming_the_plugin(plugin, shown):
    gpuarray.set_memory_manager(plugin)
    with pytest.raises(TypeError) as e:
        gpuarray.to_device(np.arange(4.0))
    msg = str(e.value)
    assert plugin.__name__ in msg and "memalloc" in msg and "MemoryPointer" in msg
    assert shown in msg, msg


class _HostReturnsInt(_ReturnsInt):
    def memalloc(self, size):
        return memory.DefaultMemoryManager(context=self.context).memalloc(size)

    def memhostalloc(self, size, mapped=False, portable=False, wc=False):
        return 0x5678

    def mempin(self, owner, pointer, size, mapped=False):
        return "pinned"


def test_host_allocations_returning_a_non_pointer_are_type_errors_too():
    gpuarray.set_memory_manager(_HostReturnsInt)
    with pytest.raises(TypeError, match=r"_HostReturnsInt\.memhostalloc\(.*int 22136.*PinnedMemory"):
        gpuarray.pinned_array(4)
    with pytest.raises(TypeError, match=r"_HostReturnsInt\.mempin\(.*str 'pinned'.*PinnedMemory"):
        with gpuarray.pinned(np.zeros(4)):
            pass


def test_queue_accepts_a_release_started_inside_its_own_lock():
    # The garbage collector can run a release (add_item) on a thread that is
    # inside the queue's locked region (a flush): that must not deadlock, and
    # the release must not be lost.
    import threading

    from gpuarray.memory._deallocs import _PendingDeallocs

    dq = _PendingDeallocs(None)
    freed: list[int] = []
    nested: list[int] = []

    class CollectingLock:  # the queue's lock, with a release "collected" right inside it
        def __init__(self) -> None:
            self._lock = threading.RLock()

        def __enter__(self) -> None:
            self._lock.acquire()
            if not nested:
                nested.append(1)
                dq.add_item(freed.append, 2, 8)

        def __exit__(self, *exc: object) -> None:
            self._lock.release()

    dq.add_item(freed.append, 1, 8)
    dq._lock = CollectingLock()  # type: ignore[assignment]
    t = threading.Thread(target=dq.clear, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the queue deadlocked on a nested release"
    assert sorted(freed + [h for _, h, _ in dq._items]) == [1, 2]  # freed or still queued
    dq.clear()
    assert sorted(freed) == [1, 2] and dq.pending_count == 0 and dq.pending_size == 0


def test_queue_under_concurrent_releases_frees_everything_once():
    # add_item takes no lock: releases on many threads, with flushes running
    # on them, must free every item exactly once and leave the size at zero.
    import threading

    from gpuarray.memory._deallocs import _PendingDeallocs

    dq = _PendingDeallocs(None)
    freed: list[int] = []
    lock = threading.Lock()

    def free(h: int) -> None:
        with lock:
            freed.append(h)

    def worker(base: int) -> None:
        for i in range(2000):
            dq.add_item(free, base + i, 3)

    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows
    try:
        threads = [threading.Thread(target=worker, args=(k * 10_000,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(interval)
    dq.clear()
    assert sorted(freed) == sorted(k * 10_000 + i for k in range(4) for i in range(2000))
    assert dq.pending_count == 0 and dq.pending_size == 0
