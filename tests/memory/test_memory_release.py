"""Releases of MemoryPointer (``__del__``, and the queued release) and the small to_device path.

Pins the semantics the release must keep from ``weakref.finalize``:
exactly once (last reference, reference cycles, explicit ``free()``), errors
remembered and raised by the next call, nothing after interpreter exit; and
that the small ``to_device`` without activations finds the right device.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpuarray
from gpuarray._driver import _finalize, get_backend
from gpuarray.memory import MemoryPointer


def test_release_runs_once_in_a_reference_cycle():
    calls = []
    p = MemoryPointer(None, 0x1000, 64, finalizer=lambda: calls.append(1))
    holder = [p]
    holder.append(holder)  # a cycle that only the collector frees
    p.owner = holder
    # (no reference to p._finalizer here: the release must survive being
    # reachable only from the garbage itself)
    del p, holder
    assert calls == []
    gc.collect()
    assert calls == [1]
    gc.collect()
    assert calls == [1]


def test_free_runs_once_and_the_collector_does_not_again():
    calls = []
    p = MemoryPointer(None, 0x1000, 64, finalizer=lambda: calls.append(1))
    assert p.alive
    p.free()
    assert calls == [1] and not p.alive
    p.free()
    del p
    gc.collect()
    assert calls == [1]


def test_a_pointer_whose_init_failed_has_nothing_to_release(monkeypatch):
    import sys

    reported: list = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    try:
        MemoryPointer(None, 0x1000, -1, finalizer=lambda: None)
    except ValueError as e:
        assert "size" in str(e)
    else:
        raise AssertionError("a negative size was accepted")
    gc.collect()  # the half-made pointer is gone: its __del__ ran
    assert reported == []  # no "Exception ignored in MemoryPointer.__del__"


def test_copying_a_pointer_is_refused_rather_than_freeing_twice():
    import copy
    import pickle

    calls = []
    p = MemoryPointer(None, 0x1000, 64, finalizer=lambda: calls.append(1))
    for dup in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match="own\\(\\)"):
            dup(p)
    del p
    gc.collect()
    assert calls == [1]


def test_default_manager_pointers_queue_their_own_address_and_size():
    from gpuarray.memory import get_memory_manager

    mgr = get_memory_manager()
    q = mgr.deallocations
    a, b = gpuarray.memory.allocate(24), gpuarray.memory.allocate(40)
    assert a._finalizer is b._finalizer  # one release object per manager, not per allocation
    with gpuarray.defer_cleanup():
        before = q.pending_count, q.pending_size
        ptr_a = a.device_pointer
        del a
        assert (q.pending_count, q.pending_size) == (before[0] + 1, before[1] + 24)
        assert ptr_a in mgr.allocations
        b.free()  # explicit free: queued the same way, once
        b.free()
        assert (q.pending_count, q.pending_size) == (before[0] + 2, before[1] + 64)
        del b
        gc.collect()
        assert q.pending_count == before[0] + 2
    q.clear()
    assert ptr_a not in mgr.allocations and q.pending_count == 0 and q.pending_size == 0


def test_items_queued_while_a_flush_runs_are_not_lost():
    from gpuarray.memory._deallocs import _PendingDeallocs

    q = _PendingDeallocs(None)
    freed: list[int] = []

    def free(h: int) -> None:
        freed.append(h)
        if h == 1:  # a release that happens during the flush (GC, another thread)
            q.add_item(free, 100, 8)

    for h in range(1, 4):
        q._items.append((free, h, 8))
        q._size += 8
    q.clear()
    assert freed == [1, 2, 3] and q.pending_count == 1 and q.pending_size == 8
    q.clear()
    assert freed == [1, 2, 3, 100] and q.pending_count == 0 and q.pending_size == 0


def test_many_pointers_release_each_exactly_once():
    calls: list[int] = []
    ptrs = [MemoryPointer(None, 0x1000 + i, 8, finalizer=lambda i=i: calls.append(i)) for i in range(100)]
    for p in ptrs[::2]:
        p.free()
    del ptrs, p
    gc.collect()
    assert sorted(calls) == list(range(100))


def test_an_error_of_a_release_is_raised_by_the_next_call():
    def boom():
        raise RuntimeError("release failed")

    p = MemoryPointer(None, 0x1000, 64, finalizer=boom)
    del p  # the release runs here and must not raise
    gc.collect()
    with pytest.raises(RuntimeError, match="release failed"):
        gpuarray.to_device(np.ones(8, np.uint8))  # the activation-free small path raises it too
    assert _finalize.take_pending() is None
    assert gpuarray.to_device(np.ones(8, np.uint8)).copy_to_host().tolist() == [1] * 8


def test_an_error_of_an_explicit_free_propagates_from_free():
    def boom():
        raise RuntimeError("free failed")

    p = MemoryPointer(None, 0x1000, 64, finalizer=boom)
    with pytest.raises(RuntimeError, match="free failed"):
        p.free()
    assert _finalize.take_pending() is None
    p.free()  # once only


def test_releases_do_not_run_after_interpreter_exit():
    code = textwrap.dedent("""
        import os
        from gpuarray.memory import MemoryPointer

        def say(word, write=os.write):
            return lambda: write(1, word)

        class Cycle:
            pass

        keep = MemoryPointer(None, 0x1000, 8, finalizer=say(b"released "))
        cyc = Cycle()
        cyc.me = cyc
        cyc.p = MemoryPointer(None, 0x3000, 8, finalizer=say(b"collected "))
        p = MemoryPointer(None, 0x2000, 8, finalizer=say(b"freed "))
        del p
        os.write(1, b"end ")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["freed", "end"]


def test_small_to_device_with_no_context_current_uses_device_0():
    b = get_backend()
    b.ctx_set_current(0)
    d = gpuarray.to_device(np.arange(4, dtype=np.int32))
    assert d.device.id == 0 and b.ctx_get_current() == gpuarray.get_device(0).context_handle
    assert d.copy_to_host().tolist() == [0, 1, 2, 3]


def test_small_to_device_on_the_current_device(make_sim):
    make_sim(devices=2)
    gpuarray.get_device(1).make_current()
    d = gpuarray.to_device(np.arange(4, dtype=np.int32))
    assert d.device.id == 1 and get_backend().pointer_info(d._ptr).device_ordinal == 1
    assert d.copy_to_host().tolist() == [0, 1, 2, 3]


def test_allocate_on_the_current_or_another_device(make_sim):
    from gpuarray.memory import allocate

    b = make_sim(devices=2)
    d0, d1 = gpuarray.get_device(0), gpuarray.get_device(1)
    d0.make_current()
    here, there, default = allocate(8, d0), allocate(8, d1), allocate(8)
    assert b.pointer_info(here.device_pointer).device_ordinal == 0
    assert b.pointer_info(there.device_pointer).device_ordinal == 1
    assert b.pointer_info(default.device_pointer).device_ordinal == 0
    assert b.ctx_get_current() == d0.context_handle  # the activation for d1 was undone
    b.ctx_set_current(0)
    p = allocate(8)  # no context current: device 0, made current
    assert b.pointer_info(p.device_pointer).device_ordinal == 0 and p.context is d0


@pytest.mark.parametrize("nbytes", [16, 1 << 20], ids=["small", "large"])
@pytest.mark.parametrize("kind", ["to_device", "empty", "asarray", "DeviceNDArray"])
def test_an_explicit_stream_of_another_device_puts_the_array_on_that_device(make_sim, kind, nbytes):
    # The stream says where the work runs: an array made for a stream of
    # device 1 while device 0 is current lives on device 1, so kernels can
    # run on its stream (CUDA refuses a launch into another device's stream).
    b = make_sim(devices=2)
    d0, d1 = gpuarray.get_device(0), gpuarray.get_device(1)
    d0.make_current()
    s1 = gpuarray.stream(device=d1)
    host = np.arange(nbytes // 4, dtype=np.int32)
    if kind == "to_device":
        d = gpuarray.to_device(host, stream=s1)
    elif kind == "asarray":
        d = gpuarray.asarray(host, stream=s1)
    elif kind == "DeviceNDArray":
        d = gpuarray.DeviceNDArray(host.shape, None, host.dtype, stream=s1)
        d.copy_to_device(host)
    else:
        d = gpuarray.empty(host.shape, host.dtype, stream=s1)
        d.copy_to_device(host)
    assert d.device is d1 and d.stream is s1
    assert b.pointer_info(d._ptr).device_ordinal == 1
    assert b.ctx_get_current() == d0.context_handle  # device 0 stays current
    d.fill(7)  # a kernel on the array's stream
    assert (d.copy_to_host() == 7).all()
