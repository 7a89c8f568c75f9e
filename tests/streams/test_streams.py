"""Streams, events and devices; the array stream contract; backend selection."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import gpuarray
from tests.support import raises_stream_order_error, simulated

ROOT = str(Path(__file__).resolve().parents[2])


def test_factories_and_refusing_constructors():
    with pytest.raises(TypeError, match=r"gpuarray\.stream\(\)"):
        gpuarray.Stream()
    with pytest.raises(TypeError, match=r"gpuarray\.event"):
        gpuarray.Event()
    with pytest.raises(TypeError, match="get_device"):
        gpuarray.Device(0)
    assert gpuarray.legacy_default_stream().cai_value == 1
    assert gpuarray.per_thread_default_stream().cai_value == 2
    assert gpuarray.default_stream() == gpuarray.legacy_default_stream()
    s = gpuarray.stream()
    assert s.cai_value not in (0, 1, 2) and s.__cuda_stream__() == (0, s.handle)
    assert gpuarray.external_stream(s.handle) == s
    assert gpuarray.external_stream(1) == gpuarray.legacy_default_stream()


@pytest.mark.parametrize("bad", [0, -5, True, "1", 1.0])
def test_external_stream_refuses_bad_handles(bad):
    with pytest.raises((TypeError, ValueError)):
        gpuarray.external_stream(bad)


def test_per_thread_default_stream_setting(monkeypatch):
    monkeypatch.setenv("GPUARRAY_PER_THREAD_DEFAULT_STREAM", "1")
    gpuarray._config.reload()
    assert gpuarray.default_stream().cai_value == 2
    assert gpuarray.zeros(2).stream.cai_value == 2
    monkeypatch.setenv("GPUARRAY_PER_THREAD_DEFAULT_STREAM", "perhaps")
    with pytest.raises(ValueError, match="GPUARRAY_PER_THREAD_DEFAULT_STREAM"):
        gpuarray._config.reload()


def test_foreign_stream_objects_are_accepted():
    s = gpuarray.stream()

    class CoreLike:
        def __cuda_stream__(self):
            return (0, s.handle)

    class CupyLike:
        ptr = s.handle

    class TorchLike:
        cuda_stream = s.handle

    for obj in (CoreLike(), CupyLike(), TorchLike()):
        a = gpuarray.zeros(3, stream=obj)
        assert a.stream.handle == s.handle
        assert a.stream._owner is obj  # kept alive by the stream
    assert gpuarray.zeros(1, stream=0).stream == gpuarray.default_stream()


def test_operations_on_another_stream_are_funnelled_back():
    s = gpuarray.stream(non_blocking=True)
    t = gpuarray.stream(non_blocking=True)
    a = gpuarray.zeros(1000, np.float32, stream=s)
    a.copy_to_device(np.ones(1000, np.float32), stream=t)   # runs on t
    # Work on a's own stream is ordered after t's copy without any host sync:
    a.fill(2.0)
    assert (a.copy_to_host() == 2).all()
    b = gpuarray.zeros(1000, np.float32, stream=t)
    b[:] = a                                                 # cross-stream read of a
    a.fill(3.0)                                              # ordered after b's read
    assert (b.copy_to_host() == 2).all()


@pytest.mark.skipif(not simulated(), reason="the race detector is a simulator feature")
def test_raw_use_of_an_unsynchronised_stream_is_caught():
    s = gpuarray.stream(non_blocking=True)
    a = gpuarray.zeros(100, np.float32, stream=s)
    b = gpuarray._driver.get_backend()
    out = np.empty(100, np.float32)
    t = gpuarray.stream(non_blocking=True)
    with raises_stream_order_error():       # ignores a.stream: no ordering with t
        b.memcpy_dtoh_async(out.ctypes.data, a.ptr, 400, t.handle)
    t.wait_event(s.record())                 # the right way
    b.memcpy_dtoh_async(out.ctypes.data, a.ptr, 400, t.handle)
    assert (out == 0).all()


@pytest.mark.skipif(not simulated(), reason="staleness is only visible on the simulator's lazy queues")
def test_copy_to_host_with_a_stream_into_pinned_memory_does_not_block():
    a = gpuarray.full(64, 5.0, stream=gpuarray.stream())
    out = gpuarray.pinned_array(64)
    out[:] = 0
    a.copy_to_host(out, stream=a.stream)
    assert np.isnan(out).all()  # undefined until synchronised: the simulator shows NaN bytes
    a.stream.synchronize()
    assert (out == 5).all()


def test_events_and_elapsed_time():
    s = gpuarray.stream()
    start, end = gpuarray.event(), gpuarray.event()
    start.record(s)
    gpuarray.zeros(1 << 16, stream=s)
    end.record(s)
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0
    ev = s.record()
    gpuarray.default_stream().wait_event(ev)
    s.wait_stream(gpuarray.default_stream())
    with s.auto_synchronize():
        gpuarray.ones(4, stream=s)
    assert s.query()
    gpuarray.synchronize()


def test_devices(make_sim):
    make_sim(devices=2)
    assert gpuarray.device_count() == 2
    d0, d1 = gpuarray.get_device(0), gpuarray.get_device(1)
    assert gpuarray.get_device() == d0 and d0 != d1 and len({d0, d1}) == 2
    with pytest.raises(ValueError, match="out of range"):
        gpuarray.get_device(2)
    with pytest.raises(TypeError):
        gpuarray.get_device("0")
    with d1:
        a = gpuarray.to_device(np.arange(5))
        assert gpuarray.get_device() == d1
    assert gpuarray.get_device() == d0
    assert a.device == d1 and a.stream.device == d1
    b = gpuarray.zeros(5, dtype=a.dtype)
    b[:] = a                                      # a device-0 copy reading device-1 memory
    np.testing.assert_array_equal(b.copy_to_host(), np.arange(5))
    assert gpuarray.select_device(1) == d1 and gpuarray.get_device() == d1
    assert d1.attribute("multiprocessor_count") > 0 and len(d1.uuid) == 16
    seen = []
    t = threading.Thread(target=lambda: seen.append(gpuarray.get_device().id))
    t.start()
    t.join()
    assert seen == [0]  # the current device is per thread; a new thread starts on device 0


def test_bad_backend_name_is_refused(monkeypatch):
    monkeypatch.setenv("GPUARRAY_BACKEND", "gpu")
    with pytest.raises(ValueError, match="GPUARRAY_BACKEND='gpu'"):
        gpuarray._driver.backend_name()


def test_import_initialises_nothing_and_cuda_without_a_driver_says_how_to_use_the_simulator():
    code = (
        "import gpuarray, sys\n"
        "print('imported')\n"
        "try:\n"
        "    gpuarray.zeros(1)\n"
        "except gpuarray.CudaUnavailableError as e:\n"
        "    print('UNAVAILABLE', e)\n"
        "else:\n"
        "    print('GPU')\n"
    )
    env = dict(os.environ, GPUARRAY_BACKEND="cuda", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("imported")
    if "UNAVAILABLE" in out.stdout:
        assert "GPUARRAY_BACKEND=sim" in out.stdout
    else:
        assert "GPU" in out.stdout
