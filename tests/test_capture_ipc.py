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

from .standin_support import simulated, the_simulator


@pytest.fixture(autouse=True)
def _simulated():
    if not simulated():
        pytest.skip("needs the simulator behind the backend: the mapping is of a handle of "
                    "this process relabelled as another process's")


def _as_from_another_process(h: memory.IpcHandle) -> memory.IpcHandle:
    from gpuarray._driver.sim._ipc import HANDLE

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
