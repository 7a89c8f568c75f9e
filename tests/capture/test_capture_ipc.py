"""An IPC mapping closed while gpuarray captures a graph (issue 35).

Closing a mapping (``IpcHandle.close()``, or its finalizer when the last
array over it dies) waits for the device's queued work first
(``cuCtxSynchronize``): a device-wide wait, which a capture forbids. Made
during a capture of gpuarray's, it invalidated the capture (the code before
the checkpoint) or, behind the checkpoint, would be refused; the close is held
until the last capture ends, then made. Runs on the simulator and over the
stand-in.

A process cannot open its own IPC handle (CUDA refuses it with
``CUDA_ERROR_INVALID_CONTEXT``), so the mapping here is of a handle of this
process relabelled with another process id: the simulator then maps the
exported segment a second time, as the other process would.
"""

from __future__ import annotations

import dataclasses
import gc
import os

import numpy as np
import pytest

import gpuarray
from gpuarray import memory
from gpuarray._driver import get_backend
from tests.support import simulated, the_simulator


@pytest.fixture(autouse=True)
def _simulated():
    if not simulated():
        pytest.skip("needs the simulator behind the backend: the mapping is of a handle of "
                    "this process relabelled as another process's")


def _as_from_another_process(h: memory.IpcHandle) -> memory.IpcHandle:
    from gpuarray_sim._ipc import HANDLE

    magic, version, device, pad, pid, pad2, base, size, name = HANDLE.unpack(h.handle)
    other = HANDLE.pack(magic, version, device, pad, pid + 1, pad2, base, size, name)
    assert other != h.handle and os.getpid() != pid + 1
    return dataclasses.replace(h, handle=other, base=None)


def _mapped(ptr: int) -> bool:
    a = the_simulator().memory.find(ptr)
    return a is not None and a.alive and a.kind == "ipc"


@pytest.mark.parametrize("how", ["close", "finalizer"])
def test_closing_a_mapping_during_a_capture_is_held_until_the_capture_ends(how):
    src = gpuarray.to_device(np.arange(8.0))
    exported = src.get_ipc_handle()
    handle = _as_from_another_process(exported)
    mapped = handle.open()
    np.testing.assert_array_equal(mapped.copy_to_host(), np.arange(8.0))
    ptr = mapped.gpu_data.device_pointer
    assert _mapped(ptr)

    s = gpuarray.stream(non_blocking=True)
    x = gpuarray.to_device(np.arange(4.0), stream=s)
    s.synchronize()
    s.begin_capture()
    y = x.copy()
    if how == "close":
        handle.close()  # held: no device wait, no error
    else:
        del mapped, handle
        gc.collect()  # the finalizer of the mapping's last reference
    assert _mapped(ptr)  # still mapped: the close waits for the capture's end
    with gpuarray.get_device().activate():
        raw = getattr(get_backend(), "backend", get_backend())
        assert raw.stream_is_capturing(s.handle) == "active"  # never invalidated
    g = s.end_capture()
    assert not _mapped(ptr)  # closed when the last capture ended
    g.launch()
    assert y.copy_to_host().tolist() == [0.0, 1.0, 2.0, 3.0]
    g.close()
    gpuarray.synchronize()  # and no error of the held close is pending
    del exported, src


class _HeldMeanwhile(list):
    """The held closes, where a finalizer holds one more (a capture began on another
    thread meanwhile) at the release's ``at``-th touch of the list: a length, a copy, a
    pop, or the clear after a copy (where one was lost)."""

    def __init__(self, items, late, at):
        super().__init__(items)
        self._late, self._at = late, at
        self.appended = False

    def _touch(self):
        self._at -= 1
        if self._at == 0:
            list.append(self, self._late)
            self.appended = True

    def __len__(self):
        self._touch()
        return super().__len__()

    def __iter__(self):
        self._touch()
        return super().__iter__()

    def pop(self, *args):
        self._touch()
        return super().pop(*args)

    def __setitem__(self, key, value):
        self._touch()
        super().__setitem__(key, value)


@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_close_held_while_the_held_closes_are_released_is_not_lost(monkeypatch, at):
    from gpuarray.memory import _ipc

    made = []
    monkeypatch.setattr(_ipc, "run_finalizer", lambda fn, *args: made.append(args[2]))
    first, late = ("backend", "device", 0x1000), ("backend", "device", 0x2000)
    held = _HeldMeanwhile([first], late, at)
    monkeypatch.setattr(_ipc, "_held", held)
    _ipc._release_held()
    assert 0x1000 in made
    if held.appended:  # (a release that touches the list fewer times has no such moment)
        assert 0x2000 in made or late in held  # made, or still held for the next release
