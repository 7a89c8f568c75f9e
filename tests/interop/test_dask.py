"""Dask and ``distributed`` (issue 16): sizes, serializers, and a cluster of worker processes.

- In one process: pickling sends the data out of band (protocol 5) after one
  device-to-host copy, for every layout; ``distributed``'s ``"dask"``,
  ``"pickle"`` and ``"cuda"`` families round-trip through
  ``distributed.protocol.serialize`` / ``deserialize``, the ``"cuda"`` one
  keeping the data on the device; ``dask.sizeof`` is ``nbytes`` through the
  ``dask.sizeof`` entry point; ``import gpuarray`` imports neither Dask nor
  ``distributed``.
- A ``distributed.LocalCluster`` of two worker processes on the simulator,
  each pinned by ``CUDA_VISIBLE_DEVICES`` to one device of a 2-device
  simulated machine (as Dask-CUDA pins workers to GPUs); started once for
  the module.  Simulated device memory is per process (only IPC shares it),
  so arrays move between workers through the host frames, as they do over
  TCP without UCX.
"""

from __future__ import annotations

import importlib.metadata
import logging
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from gpuarray_sim._visible import machine_uuid

import gpuarray
import gpuarray.dask
from gpuarray import DeviceNDArray, _wire
from gpuarray._driver import get_backend
from tests.support import backend_is_sim

TIMEOUT = 60  # seconds for any one cluster operation


def _distributed():
    return pytest.importorskip(
        "distributed", reason="distributed is not installed (it comes with the 'test' extra)")


# ------------------------------------------------------------------- layouts
def _readonly(a: DeviceNDArray) -> DeviceNDArray:
    desc = dict(a.__cuda_array_interface__, data=(a.__cuda_array_interface__["data"][0], True))
    return gpuarray.from_cuda_array_interface(desc, owner=a)


def _broadcast(row: DeviceNDArray, rows: int) -> DeviceNDArray:
    desc = dict(row.__cuda_array_interface__, shape=(rows, row.shape[0]), strides=(0, row.strides[0]))
    return gpuarray.from_cuda_array_interface(desc, owner=row)


BASE = np.arange(7 * 9, dtype=np.float32).reshape(7, 9)

LAYOUTS = {
    "c": lambda: gpuarray.to_device(BASE),
    "fortran": lambda: gpuarray.to_device(np.asfortranarray(BASE)),
    "negative-step-strided": lambda: gpuarray.to_device(BASE)[::-2, 1::3],
    "reversed": lambda: gpuarray.to_device(BASE)[::-1],
    "transposed": lambda: gpuarray.to_device(BASE).T[2:, ::-1],
    "broadcast": lambda: _broadcast(gpuarray.to_device(BASE[0]), 5),
    "readonly-strided": lambda: _readonly(gpuarray.to_device(BASE))[1::2, ::-4],
    "0-d": lambda: gpuarray.to_device(np.complex128(1 - 2j)),
    "empty": lambda: gpuarray.to_device(np.zeros((0, 3), np.int16)),
    "bool": lambda: gpuarray.to_device(BASE > 30)[:, ::2],
}


def _kept_layout(src: DeviceNDArray, got: DeviceNDArray) -> None:
    """Values, dtype, read-only flag; C/F order and broadcast axes kept, the rest C-compact."""
    assert got.shape == src.shape and got.dtype == src.dtype
    assert got.readonly == src.readonly
    np.testing.assert_array_equal(got.copy_to_host(), src.copy_to_host())
    for n, s_src, s_got in zip(src.shape, src.strides, got.strides, strict=True):
        if n > 1 and s_src == 0:
            assert s_got == 0, (src.strides, got.strides)
    if src.size and 0 not in src.strides:
        if src.is_c_contiguous():
            assert got.strides == src.strides
        elif src.is_f_contiguous():
            assert got.strides == src.strides and got.is_f_contiguous()
        else:
            assert got.is_c_contiguous()


# ------------------------------------------------------------------ pickling
@pytest.mark.parametrize("layout", LAYOUTS)
def test_pickle_protocol_5_sends_one_out_of_band_copy(layout, monkeypatch):
    x = LAYOUTS[layout]()
    copies: list[int] = []
    real = DeviceNDArray.copy_to_host

    def counting_copy_to_host(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        copies.append(out.ctypes.data)
        return out

    monkeypatch.setattr(DeviceNDArray, "copy_to_host", counting_copy_to_host)
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(x, protocol=5, buffer_callback=buffers.append)
    assert len(copies) == 1, "one device-to-host copy"
    (buf,) = buffers
    raw = buf.raw()
    distinct = x.size if 0 not in x.strides else x.size // max(
        n for n, s in zip(x.shape, x.strides, strict=True) if s == 0)
    assert raw.nbytes == distinct * x.itemsize
    if raw.nbytes:  # the out-of-band buffer is the memory the device copy wrote: no host copy
        assert np.frombuffer(raw, np.uint8).ctypes.data == copies[0]
    assert len(data) < 400, "the data is not in the pickle"
    monkeypatch.undo()
    _kept_layout(x, pickle.loads(data, buffers=buffers))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_pickle_in_band_round_trip(protocol):
    x = LAYOUTS["readonly-strided"]()
    _kept_layout(x, pickle.loads(pickle.dumps(x, protocol=protocol)))


def test_pickle_keeps_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = gpuarray.to_device(np.arange(6, dtype=ml_dtypes.bfloat16))[::-1]
    y = pickle.loads(pickle.dumps(x, protocol=5))
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y.copy_to_host(), x.copy_to_host())


def test_bad_frames_are_refused_with_clear_errors():
    header, frame = _wire.to_host_frame(gpuarray.to_device(np.arange(4.0)))
    with pytest.raises(ValueError, match="holds 32 bytes, got 24"):
        _wire.from_host_frame(header, frame[:24])
    with pytest.raises(ValueError, match="not a gpuarray frame header"):
        _wire.from_host_frame({"shape": (4,)}, frame)
    with pytest.raises(ValueError, match="not a gpuarray frame header"):
        _wire.from_host_frame(dict(header, order="K"), frame)
    with pytest.raises(TypeError, match="must export __cuda_array_interface__ or __dlpack__ of device memory"):
        _wire.from_device_frame(header, frame)
    with pytest.raises(ValueError, match="is 32 contiguous bytes"):
        _wire.from_device_frame(header, gpuarray.zeros(3))


def test_a_header_is_data_never_code():
    # A peer's header with a pickled "dtype" must not run what it carries.
    import pickle

    ran: list[bool] = []

    class Payload:
        def __reduce__(self):
            return (ran.append, (True,))

    header, frame = _wire.to_host_frame(gpuarray.to_device(np.arange(4.0)))
    with pytest.raises(ValueError, match="is not a dtype"):
        _wire.from_host_frame(dict(header, dtype=pickle.dumps(Payload())), frame)
    assert not ran


@pytest.mark.parametrize("dtype", [np.dtype([("a", "i4"), ("b", "f8", (2,))], align=True),
                                   np.dtype([("p", [("x", "u1"), ("y", "f2")]), ("z", "?")]),
                                   np.dtype(">i2"), np.dtype("V3")])
def test_dtypes_travel_as_plain_values(dtype):
    import json

    encoded = _wire.encode_dtype(dtype)
    assert _wire.decode_dtype(json.loads(json.dumps(encoded))) == dtype


def test_a_read_only_device_frame_arrives_read_only():
    x = gpuarray.to_device(np.arange(4.0))
    header, frame = _wire.to_device_frame(x)
    assert not header.get("readonly")
    got = _wire.from_device_frame(header, _readonly(frame))
    assert got.readonly


# ------------------------------------------------- distributed, one process
@pytest.fixture
def protocol():
    _distributed()
    gpuarray.dask.register()
    from distributed import protocol

    return protocol


@pytest.mark.parametrize("family", ["dask", "pickle"])
@pytest.mark.parametrize("layout", ["negative-step-strided", "fortran", "broadcast", "0-d"])
def test_host_families_round_trip(protocol, family, layout):
    x = LAYOUTS[layout]()
    header, frames = protocol.serialize(x, serializers=(family,))
    assert header["serializer"] == family
    assert all(not hasattr(f, "__cuda_array_interface__") for f in frames)
    assert sum(memoryview(f).nbytes for f in frames) < x.nbytes + 400
    _kept_layout(x, protocol.deserialize(header, frames))
    # As messages go: frames split in pieces (here of 16 bytes), merged on arrival.
    from distributed.protocol.serialize import merge_and_deserialize, serialize_and_split

    header, frames = serialize_and_split(x, serializers=(family,), size=16)
    _kept_layout(x, merge_and_deserialize(header, frames))


def test_cuda_family_keeps_the_data_on_the_device(protocol, monkeypatch):
    x = _readonly(gpuarray.to_device(BASE))[::2]
    b = get_backend()
    host_copies: list[str] = []
    for name in ("memcpy_dtoh_async", "memcpy_htod_async"):
        real = getattr(b, name)
        monkeypatch.setattr(b, name, lambda *a, _real=real, _name=name: (host_copies.append(_name),
                                                                           _real(*a))[1])
    header, frames = protocol.serialize(x, serializers=("cuda",))
    assert header["serializer"] == "cuda"
    (frame,) = frames
    cai = frame.__cuda_array_interface__
    assert cai["shape"] == (x.nbytes,) and cai["typestr"] == "|u1"
    got = protocol.deserialize(header, frames)
    from distributed.protocol.serialize import merge_and_deserialize, serialize_and_split

    split_header, split_frames = serialize_and_split(x, serializers=("cuda",), size=16)
    assert len(split_frames) == 1, "device frames are never split"
    merged = merge_and_deserialize(split_header, split_frames)
    assert host_copies == [], "the cuda family copied through the host"
    assert got.device == gpuarray.get_device()
    monkeypatch.undo()
    _kept_layout(x, got)
    _kept_layout(x, merged)


def test_cuda_family_rebuilds_over_a_foreign_receive_buffer(protocol):
    # UCX receives into a buffer another library allocated (RMM, Numba):
    # the array is rebuilt over it through CAI, on the receiver's device.
    x = gpuarray.to_device(np.asfortranarray(BASE))
    header, (frame,) = protocol.serialize(x, serializers=("cuda",))
    received = gpuarray.to_device(frame)  # a fresh device buffer

    class CAIOnly:
        @property
        def __cuda_array_interface__(self):
            return received.__cuda_array_interface__

    got = protocol.deserialize(header, [CAIOnly()])
    assert got.device_ctypes_pointer.value == received.device_ctypes_pointer.value
    _kept_layout(x, got)


def test_register_without_distributed_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed.protocol", None)
    with pytest.raises(ImportError, match="pip install distributed"):
        gpuarray.dask.register()


def test_sizeof_is_nbytes(protocol):
    from dask.sizeof import sizeof

    x = gpuarray.zeros((1024, 512))  # 4 MiB
    assert sizeof(x) == x.nbytes == 4 << 20
    assert sizeof(x[::2]) == x.nbytes // 2


def _run_fresh(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=120, env={**__import__("os").environ,
                                                      "GPUARRAY_BACKEND": "sim"})
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_sizeof_comes_from_the_entry_point_in_a_fresh_process():
    _distributed()
    try:
        importlib.metadata.distribution("gpuarray")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("gpuarray runs from a source tree, not installed: no entry points exist")
    names = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="dask.sizeof")}
    assert names.get("gpuarray") == "gpuarray.dask:_register_sizeof", (
        "the dask.sizeof entry point is not installed: reinstall gpuarray (pip install -e .)")
    assert _run_fresh("""
        from dask.sizeof import sizeof   # loads the entry points; nothing registered by hand
        import gpuarray
        print(sizeof(gpuarray.zeros((256, 1024), dtype="f4")))
    """).split() == [str(1 << 20)]


def test_import_gpuarray_imports_neither_dask_nor_distributed():
    assert _run_fresh("""
        import sys
        import gpuarray, gpuarray.dask
        gpuarray.to_device([1.0]).copy_to_host()
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed")))
    """).strip() == "[]"


def test_dask_module_is_documented():
    from pathlib import Path

    from tests.api.test_docs import docstring_problems

    for name in gpuarray.dask.__all__:
        assert docstring_problems(getattr(gpuarray.dask, name)) == [], name
    assert docstring_problems(gpuarray.dask) == []
    api = (Path(__file__).resolve().parents[2] / "docs" / "api.rst").read_text()
    assert ".. automodule:: gpuarray.dask" in api


# ------------------------------------------------------ a cluster of workers
def _whoami():
    dev = gpuarray.get_device()
    return gpuarray.device_count(), dev.uuid, dev.name


def _allocate(nbytes):
    free_before = gpuarray.get_memory_info().free
    a = gpuarray.empty(nbytes, dtype=np.uint8)
    return a.device.uuid, free_before - gpuarray.get_memory_info().free


def _make(n):
    return gpuarray.to_device(np.arange(n, dtype=np.float64) * 2)[::-1]


def _describe(a):
    return {"shape": a.shape, "strides": a.strides, "dtype": a.dtype.str, "readonly": a.readonly,
            "values": a.copy_to_host(), "device": a.device.uuid, "type": type(a).__name__}


@pytest.fixture(scope="module")
def cluster():
    if not backend_is_sim():
        pytest.skip("the worker processes run a 2-device simulator (GPUARRAY_BACKEND=sim)")
    distributed = _distributed()
    import cloudpickle

    # The task functions below travel by value: workers need not import tests/.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    class PinnedCluster(distributed.LocalCluster):
        """A worker per simulated device, pinned as Dask-CUDA pins workers to GPUs."""

        def new_worker_spec(self):
            ((name, spec),) = super().new_worker_spec().items()
            env = {**spec["options"].get("env", {}),
                   "CUDA_VISIBLE_DEVICES": str(len(self.worker_spec) % 2)}
            return {name: {**spec, "options": {**spec["options"], "env": env}}}

    cl = PinnedCluster(n_workers=0, processes=True, threads_per_worker=1, host="127.0.0.1",
                       dashboard_address="127.0.0.1:0",  # a free port: 8787 may be taken
                       silence_logs=logging.ERROR, preload=["gpuarray.dask"],
                       env={"GPUARRAY_BACKEND": "sim", "GPUARRAY_SIM_DEVICES": "2"})
    client = distributed.Client(cl, timeout=TIMEOUT)
    try:
        cl.scale(2)
        client.wait_for_workers(2, timeout=TIMEOUT)
        gpuarray.dask.register()
        ident = client.run(_whoami)
        yield client, {addr: info[1] for addr, info in ident.items()}, ident
    finally:
        client.close(timeout=TIMEOUT)
        cl.close(timeout=TIMEOUT)
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_two_workers_pinned_to_two_devices_allocate_on_their_own(cluster):
    client, uuids, ident = cluster
    assert sorted(uuids.values()) == [machine_uuid(0), machine_uuid(1)]
    for count, uuid, name in ident.values():
        assert count == 1, "each worker sees its one device, as ordinal 0"
        assert f"device {[machine_uuid(0), machine_uuid(1)].index(uuid)}" in name
    for addr, uuid in uuids.items():
        got_uuid, used = client.submit(_allocate, 3 << 20, workers=[addr], pure=False).result(TIMEOUT)
        assert got_uuid == uuid
        assert used >= 3 << 20


def test_array_made_on_one_worker_is_used_on_the_other(cluster):
    client, uuids, _ = cluster
    a, b = sorted(uuids)
    made = client.submit(_make, 1000, workers=[a], pure=False)
    used = client.submit(_describe, made, workers=[b]).result(TIMEOUT)
    assert used["type"] == "DeviceNDArray"
    assert used["device"] == uuids[b], "rebuilt on the receiving worker's device"
    np.testing.assert_array_equal(used["values"], np.arange(1000.0)[::-1] * 2)
    # On a, the same array lives on a's device (who_has is no witness: the
    # scheduler may drop either replica at any time).
    on_a = client.submit(_describe, made, workers=[a], pure=False).result(TIMEOUT)
    assert on_a["device"] == uuids[a]


@pytest.mark.parametrize("layout", ["negative-step-strided", "readonly-strided", "fortran",
                                    "broadcast", "bool"])
def test_scatter_and_gather_keep_values_dtype_layout_and_readonly(cluster, layout):
    client, uuids, _ = cluster
    x = LAYOUTS[layout]()
    for addr in sorted(uuids):
        (fut,) = client.scatter([x], workers=[addr], hash=False, timeout=TIMEOUT)
        seen = client.submit(_describe, fut, workers=[addr]).result(TIMEOUT)
        assert seen["device"] == uuids[addr]
        assert (seen["shape"], seen["dtype"], seen["readonly"]) == (x.shape, x.dtype.str, x.readonly)
        np.testing.assert_array_equal(seen["values"], x.copy_to_host())
        _kept_layout(x, fut.result(TIMEOUT))  # gathered back to the client


def test_worker_sizeof_is_nbytes(cluster):
    client, uuids, _ = cluster
    fut = client.submit(gpuarray.zeros, (1024, 512), workers=[sorted(uuids)[0]], pure=False)
    fut.result(TIMEOUT)
    assert client.nbytes(summary=False)[fut.key] == 4 << 20
