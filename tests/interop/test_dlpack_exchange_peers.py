"""Real peers of the DLPack C exchange table: PyTorch, tvm-ffi, cuda.core.

PyTorch 2.13 (the CPU build) is a producer: its tensors reach ``to_device``,
``asarray``, ``from_dlpack`` and ``__setitem__`` through its table, even a
subclass whose ``__dlpack__`` raises. tvm-ffi is a C consumer of gpuarray's
table (``testing.echo`` returns a ``DeviceNDArray`` over the same memory).
cuda.core's ``StridedMemoryView`` goes both ways. Each skips, saying so,
where its library is not installed; the table's own functions are tested in
``test_dlpack_exchange.py``.
"""

import gc
import sys
import weakref

import numpy as np
import pytest

import gpuarray
from gpuarray.interop import _dlpack_capsule as dl
from tests.interop.test_dlpack_exchange import _table

if dl.CORE != "c":
    pytest.skip(f"the exchange table needs the C core; this process uses {dl.CORE_DESCRIPTION}",
                allow_module_level=True)


# --- PyTorch (the CPU build) as a producer through its table ---
def _torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if dl.exchange_api_of(torch.Tensor) is None:
        pytest.skip(f"PyTorch {torch.__version__} publishes no DLPack C exchange table")
    return torch


class _RaisingDLPack:
    def __dlpack__(self, *args, **kwargs):
        raise RuntimeError("__dlpack__ is not to be called: the table is")


def test_torch_table_is_dlpack_1_x_with_a_null_cpu_stream():
    torch = _torch()
    tab = _table(torch.Tensor)
    assert tab.header.version.major == 1 and tab.header.version.minor >= 3
    api = dl.exchange_api_of(torch.Tensor)
    assert dl.exchange_stream(api, 1, 0) == 0  # CPU: NULL, as INTEROP.md item 39 says


@pytest.mark.parametrize("make", ["to_device", "asarray", "from_dlpack", "setitem"])
def test_torch_subclass_whose_dlpack_raises_still_transfers(make):
    torch = _torch()

    class NoDLPack(_RaisingDLPack, torch.Tensor):
        pass

    src = torch.arange(12, dtype=torch.float32).reshape(3, 4).t().as_subclass(NoDLPack)
    assert dl.exchange_api_of(NoDLPack) is dl.exchange_api_of(torch.Tensor)  # inherited
    if make == "setitem":
        d = gpuarray.to_device(np.zeros((4, 3), np.float32))
        d[...] = src
    else:
        d = getattr(gpuarray, make)(src)
    assert isinstance(d, gpuarray.DeviceNDArray)
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(12).reshape(3, 4).T)


def test_torch_tensor_through_the_table_is_released_once():
    torch = _torch()
    t = torch.arange(6, dtype=torch.int64)
    base = sys.getrefcount(t)
    host = gpuarray.interop._dlpack.host_array_from_dlpack(t)  # zero-copy view, via the table
    assert host.ctypes.data == t.data_ptr()
    assert sys.getrefcount(t) > base  # PyTorch's manager holds the tensor for the view
    del host
    gc.collect()
    assert sys.getrefcount(t) == base  # its deleter ran


def test_torch_table_and_dlpack_give_the_same_arrays():
    torch = _torch()
    for t in (torch.arange(24, dtype=torch.int16).reshape(2, 3, 4).permute(2, 0, 1),
              torch.ones((0, 3)), torch.tensor(3.5), torch.arange(10)[::3],
              torch.tensor([True, False])):
        via_table = gpuarray.to_device(t).copy_to_host()
        np.testing.assert_array_equal(via_table, t.numpy())
        assert via_table.dtype == t.numpy().dtype


def test_torch_unsupported_dtype_fails_as_dlpack_would():
    torch = _torch()
    t = torch.zeros(3, dtype=torch.float8_e4m3fn) if hasattr(torch, "float8_e4m3fn") else None
    if t is None:
        pytest.skip("this PyTorch has no float8_e4m3fn")
    with pytest.raises(BufferError):
        gpuarray.from_dlpack(t)


# --- tvm-ffi as a consumer of gpuarray's table ---
def _tvm_ffi():
    return pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed")


def test_tvm_ffi_echo_returns_a_device_array_sharing_memory():
    tvm_ffi = _tvm_ffi()
    echo = tvm_ffi.get_global_func("testing.echo")
    host = np.arange(12.0).reshape(3, 4)
    a = gpuarray.to_device(host)
    calls, live = dl.deleter_calls(), dl.live_exports()
    for v in (a, a.T, a[:, 1:]):
        b = echo(v)
        assert type(b) is gpuarray.DeviceNDArray
        assert (b.ptr, b.shape, b.strides, b.dtype) == (v.ptr, v.shape, v.strides, v.dtype)
        np.testing.assert_array_equal(b.copy_to_host(), v.copy_to_host())
        del b
    gc.collect()
    assert dl.live_exports() == live and dl.deleter_calls() == calls + 3


def test_tvm_ffi_echo_result_keeps_the_memory_alive():
    tvm_ffi = _tvm_ffi()
    echo = tvm_ffi.get_global_func("testing.echo")
    a = gpuarray.to_device(np.arange(4, dtype=np.int32))
    gone = weakref.ref(a)
    b = echo(a)
    del a
    gc.collect()
    assert gone() is not None  # b -> tvm-ffi's tensor -> our managed tensor -> a
    np.testing.assert_array_equal(b.copy_to_host(), np.arange(4))
    del b
    gc.collect()
    assert gone() is None


def test_tvm_ffi_nop_with_arrays_leaves_nothing_behind():
    tvm_ffi = _tvm_ffi()
    nop = tvm_ffi.get_global_func("testing.nop")
    arrs = [gpuarray.to_device(np.arange(n, dtype=np.float32)) for n in (1, 2, 3)]
    calls, live = dl.deleter_calls(), dl.live_exports()
    for _ in range(10):
        nop(*arrs)
    assert dl.live_exports() == live and dl.deleter_calls() == calls + 30


def test_tvm_ffi_refuses_what_the_table_refuses():
    tvm_ffi = _tvm_ffi()
    echo = tvm_ffi.get_global_func("testing.echo")
    bad = gpuarray.to_device(np.zeros(2, dtype=[("x", "<i4")]))
    live = dl.live_exports()
    with pytest.raises(BufferError, match="DLPack cannot export dtype"):
        echo(bad)
    assert dl.live_exports() == live


def test_bench_rows_of_the_table_with_torch_and_tvm_ffi():
    """The benchmark rows run and say what they compare (the numbers are bench/'s)."""
    torch = _torch()
    _tvm_ffi()
    from gpuarray._bench.exchange import exchange_cases, missing
    from gpuarray._bench.host import compare, format_peer_table

    assert missing(torch) == []
    cases = exchange_cases(torch)
    assert [c[0] for c in cases] == [
        "tvm-ffi nop(3 arrays)", "tvm-ffi nop(3 arrays) over nop(1, 2, 3)",
        "import a torch CPU tensor (table vs __dlpack__)",
        "from_dlpack(torch CPU tensor) (table vs __dlpack__)"]
    rows = compare(cases, rounds=1, number=5, meter_rounds=1, null_rounds=1)
    assert all(r.us["gpuarray"] > 0 for r in rows)
    assert set(rows[0].us) == {"gpuarray", "torch", "numpy"} and rows[0].goal == 1.0
    assert "| `tvm-ffi nop(3 arrays) over nop(1, 2, 3)` |" in format_peer_table(rows, "sim")


# --- cuda.core's StridedMemoryView, both ways (host memory and gpuarray's: no GPU needed) ---
def _smv():
    pytest.importorskip("cuda.core", reason="cuda.core is not installed")
    from cuda.core.utils import StridedMemoryView

    if dl.exchange_api_of(StridedMemoryView) is None:
        pytest.skip("this cuda.core's StridedMemoryView publishes no DLPack C exchange table")
    return StridedMemoryView


def test_cuda_core_view_through_its_table_into_gpuarray(monkeypatch):
    smv = _smv()
    from gpuarray.interop import _dlpack

    took = []
    real = _dlpack.consume_exchange
    monkeypatch.setattr(_dlpack, "consume_exchange", lambda api, x: took.append(x) or real(api, x))
    host = np.arange(12.0).reshape(3, 4)[:, ::2]
    v = smv.from_dlpack(host, stream_ptr=-1)
    for make in (gpuarray.to_device, gpuarray.asarray, gpuarray.from_dlpack):
        np.testing.assert_array_equal(make(v).copy_to_host(), host)
    assert took == [v, v, v]


def test_cuda_core_view_of_a_gpuarray_array():
    smv = _smv()
    a = gpuarray.to_device(np.arange(6, dtype=np.int32).reshape(2, 3)).T
    gone = weakref.ref(a)
    v = smv.from_dlpack(a, stream_ptr=-1)
    assert (v.ptr, v.shape, v.device_id, v.is_device_accessible) == (a.ptr, (3, 2), 0, True)
    assert v.strides in ((1, 3), (4, 12))  # elements (or bytes, by cuda.core version)
    del a
    gc.collect()
    assert gone() is not None  # the view holds the array
    del v
    gc.collect()
    assert gone() is None
