"""The simulator honours ``CUDA_VISIBLE_DEVICES`` as the CUDA driver does (issue 16).

Dask-CUDA and MPI launchers pin a worker process to one GPU with this
variable; the worker then sees that GPU as device 0, with its own identity.
CUDA's rules: indices or ``GPU-`` UUID prefixes, enumerated in the listed
order; enumeration stops at the first entry that names no device; unset
shows every device, an empty list none (``cuInit`` fails with
``CUDA_ERROR_NO_DEVICE``).
"""

from __future__ import annotations

import pytest
from gpuarray_sim import SimBackend
from gpuarray_sim._visible import machine_uuid, parse_visible_devices, uuid_text

import gpuarray
from tests.support import fresh_sim

UUIDS = [machine_uuid(d) for d in range(3)]


@pytest.mark.parametrize(("text", "visible"), [
    (None, [0, 1, 2]),
    ("1", [1]),
    ("2,0", [2, 0]),
    (" 1 , 2 ", [1, 2]),
    ("0,2,-1,1", [0, 2]),          # CUDA's own example: 1 stays hidden
    ("1,7,0", [1]),                # out of range stops enumeration
    ("1,1,0", [1]),                # a repeat names no new device
    ("x,0", []),
    ("", []),
    ("-1", []),
])
def test_indices_follow_cuda_rules(text, visible):
    assert parse_visible_devices(text, UUIDS) == visible


def test_uuid_entries_and_unique_prefixes():
    full = uuid_text(UUIDS[2])
    assert full.startswith("GPU-") and len(full) == 40
    assert parse_visible_devices(f"{full},0", UUIDS) == [2, 0]
    # A prefix long enough to name one device is accepted, lower case too...
    assert parse_visible_devices(full[:-2], UUIDS) == [2]
    assert parse_visible_devices(full.lower()[:-2].replace("gpu-", "GPU-"), UUIDS) == [2]
    # ...an ambiguous prefix or an unknown UUID names none and stops the list.
    assert parse_visible_devices("GPU-6770,1", UUIDS) == []
    assert parse_visible_devices("GPU-ffffffff,1", UUIDS) == []


def test_worker_sees_its_device_as_ordinal_0_with_its_own_identity(monkeypatch):
    monkeypatch.setenv("GPUARRAY_SIM_DEVICES", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    fresh_sim()
    assert gpuarray.device_count() == 1
    dev = gpuarray.get_device(0)
    assert dev.uuid == machine_uuid(1)
    assert "device 1" in dev.name
    assert dev.attribute("pci_bus_id") == 0x11
    a = gpuarray.to_device([1.0, 2.0])
    assert a.device == dev and a.copy_to_host().tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="out of range"):
        gpuarray.get_device(1)

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    fresh_sim()
    assert [gpuarray.get_device(i).uuid for i in range(2)] == [machine_uuid(1), machine_uuid(0)]

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    fresh_sim()
    assert [gpuarray.get_device(i).uuid for i in range(2)] == [machine_uuid(0), machine_uuid(1)]


def test_compute_capability_follows_the_machine_device(monkeypatch):
    monkeypatch.setenv("GPUARRAY_SIM_DEVICES", "2")
    monkeypatch.setenv("GPUARRAY_SIM_CC", "9.0,8.6")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    fresh_sim()
    assert gpuarray.get_device(0).compute_capability == (8, 6)


@pytest.mark.parametrize("text", ["", "-1", "5", "GPU-nope"])
def test_no_visible_device_fails_like_cuinit(monkeypatch, text):
    monkeypatch.setenv("GPUARRAY_SIM_DEVICES", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", text)
    fresh_sim()
    with pytest.raises(gpuarray.CudaUnavailableError, match="no CUDA-capable device.*hides all 2"):
        gpuarray.device_count()


def test_visible_argument_is_checked():
    assert SimBackend(devices=3, visible=[2]).device_uuid(0) == machine_uuid(2)
    with pytest.raises(ValueError, match="not one of the simulator's 2 devices"):
        SimBackend(devices=2, visible=[2])
    with pytest.raises(ValueError, match="twice"):
        SimBackend(devices=2, visible=[1, 1])


def test_ipc_handle_opens_on_the_same_machine_device_in_a_renumbered_process(make_sim):
    # The exporter sees machine devices 0,1; the consumer "1,0": its ordinal 0
    # is the exporter's device 1, found by UUID as the real driver's would be.
    import os
    import pickle
    import subprocess
    import sys

    import numpy as np

    make_sim(devices=2)
    with gpuarray.get_device(1):
        d = gpuarray.to_device(np.arange(6.0))
    d.stream.synchronize()
    consumer = (
        "import pickle, sys\n"
        "h = pickle.load(sys.stdin.buffer)\n"
        "with h as arr:\n"
        "    print(arr.device.id, arr.device.uuid.hex(), arr.copy_to_host().sum())\n")
    env = dict(os.environ, GPUARRAY_BACKEND="sim", GPUARRAY_SIM_DEVICES="2",
               CUDA_VISIBLE_DEVICES="1,0")
    run = subprocess.run([sys.executable, "-c", consumer], input=pickle.dumps(d.get_ipc_handle()),
                         capture_output=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout.decode().split() == ["0", machine_uuid(1).hex(), "15.0"]
