"""DeviceNDArray against NumPy: creation, transfers, views, assignment, casts.

NumPy is the oracle: every operation is done on a NumPy array and on a device
array with the same layout, and the results must be equal, for every dtype
and every layout (C, Fortran, sliced, negative strides, transposed,
broadcast sources, 0-d, size 0).  Runs on whichever backend is selected.
"""

from __future__ import annotations

import gc
import pickle
import weakref

import numpy as np
import pytest

import gpuarray
from gpuarray import DeviceNDArray

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128]


def sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) * 10 + 1j * rng.standard_normal(shape) * 10).astype(dtype)
    return (rng.standard_normal(shape) * 10).astype(dtype)


# layout name -> function from a base (4, 6, 5) host array to a view of it
LAYOUTS = {
    "C": lambda a: a,
    "F": lambda a: np.asfortranarray(a),
    "sliced": lambda a: a[1:, ::2, 1:4],
    "negative": lambda a: a[::-1, :, ::-2],
    "transposed": lambda a: a.transpose(2, 0, 1),
    "0-d": lambda a: a[1, 2, 3, ...],
    "size-0": lambda a: a[:, 3:3],
    "column": lambda a: a[:, 1, :1],
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_round_trip_every_dtype_and_layout(dtype, layout):
    host = LAYOUTS[layout](sample((4, 6, 5), dtype))
    d = gpuarray.to_device(host)
    assert d.shape == host.shape and d.dtype == host.dtype
    back = d.copy_to_host()
    np.testing.assert_array_equal(back, host)
    if host.flags.f_contiguous and not host.flags.c_contiguous:
        assert d.is_f_contiguous() and back.flags.f_contiguous


@pytest.mark.parametrize("layout", [k for k in LAYOUTS if k != "F"])  # F is a copy, not a view
def test_device_views_read_like_numpy(layout):
    base = sample((4, 6, 5), np.float32)
    d = gpuarray.to_device(base)
    view = LAYOUTS[layout](d)
    expect = LAYOUTS[layout](base)
    assert view.shape == expect.shape and view.strides == expect.strides
    np.testing.assert_array_equal(view.copy_to_host(), expect)
    np.testing.assert_array_equal(np.asarray(view), expect)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_copy_to_host_into_any_layout_and_dtype(dtype):
    host = sample((5, 7), dtype)
    d = gpuarray.to_device(host)
    out = np.zeros((7, 5), dtype=np.float64).T  # Fortran-ordered, another dtype
    with np.errstate(all="ignore"), _np_complex_ok():
        d.copy_to_host(out)
        expect = host.astype(np.float64) if np.dtype(dtype).kind != "c" else host.real.astype(np.float64)
    np.testing.assert_array_equal(out, expect)


class _np_complex_ok:
    """NumPy warns when complex is cast to real; our cast drops the imaginary part too."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


SRC_DTYPES = [np.bool_, np.int8, np.uint16, np.int64, np.uint64, np.float16, np.float32,
              np.float64, np.complex64, np.complex128]


@pytest.mark.parametrize("src", SRC_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dst", DTYPES, ids=lambda d: np.dtype(d).name)
def test_astype_matches_numpy(src, dst):
    host = sample((3, 4), src)
    if np.dtype(dst).kind in "iub" and np.dtype(src).kind in "fc":
        host = np.abs(host.real if np.dtype(src).kind == "c" else host).astype(src)  # defined casts only
    if np.dtype(dst).kind == "u":
        host = np.abs(host) if np.dtype(src).kind != "c" else host
    with _np_complex_ok(), np.errstate(all="ignore"):
        expect = host.astype(dst)
    got = gpuarray.to_device(host)[:, ::-1].astype(dst).copy_to_host()
    np.testing.assert_array_equal(got, expect[:, ::-1])


def test_astype_keeps_fortran_order_and_copy_false_returns_self():
    d = gpuarray.to_device(np.asfortranarray(sample((3, 4), np.float32)))
    assert d.astype(np.float64).is_f_contiguous()
    assert d.astype(np.float32, copy=False) is d
    assert d.copy().is_c_contiguous()


# ------------------------------------------------------------- assignment
def test_setitem_scalar_slice_broadcast_and_cast():
    host = sample((4, 6), np.float32)
    d = gpuarray.to_device(host)
    d[1] = 7
    host[1] = 7
    d[:, ::2] = np.arange(3, dtype=np.int64)        # broadcast + cast
    host[:, ::2] = np.arange(3, dtype=np.int64)
    d[2:, 1::2] = gpuarray.to_device(np.float64([[1.5], [2.5]]))  # device source, broadcast + cast
    host[2:, 1::2] = np.float64([[1.5], [2.5]])
    d[..., -1] = 3.9
    host[..., -1] = 3.9
    np.testing.assert_array_equal(d.copy_to_host(), host)


def test_setitem_overlapping_source_gives_numpy_result():
    host = np.arange(10, dtype=np.int32)
    d = gpuarray.to_device(host)
    d[1:] = d[:-1]
    host[1:] = host[:-1].copy()
    np.testing.assert_array_equal(d.copy_to_host(), host)
    d2 = gpuarray.to_device(np.arange(12, dtype=np.int16).reshape(3, 4))
    d2[:] = d2.T.copy().reshape(3, 4)[::-1]
    h2 = np.arange(12, dtype=np.int16).reshape(3, 4)
    h2[:] = h2.T.copy().reshape(3, 4)[::-1]
    np.testing.assert_array_equal(d2.copy_to_host(), h2)
    d3 = gpuarray.to_device(np.arange(8, dtype=np.float64))
    d3[::-1] = d3  # reversing in place
    np.testing.assert_array_equal(d3.copy_to_host(), np.arange(8.0)[::-1])


def test_setitem_errors_like_numpy():
    d = gpuarray.zeros((3, 4))
    with pytest.raises(ValueError, match="broadcast"):
        d[:] = np.ones((2, 4))
    with pytest.raises(IndexError):
        d[3] = 1
    with pytest.raises(IndexError, match="basic indexing"):
        d[[0, 1]] = 1


def test_fill_and_creation_functions():
    assert (gpuarray.zeros((2, 3), np.int8).copy_to_host() == 0).all()
    assert (gpuarray.ones(5, np.complex64).copy_to_host() == 1).all()
    np.testing.assert_array_equal(gpuarray.full((2, 2), 2.5).copy_to_host(), np.full((2, 2), 2.5))
    assert gpuarray.full(3, 7).dtype == np.asarray(7).dtype
    f = gpuarray.empty((3, 4), np.float32, order="F")
    assert f.is_f_contiguous() and not f.is_c_contiguous()
    like = gpuarray.zeros_like(np.asfortranarray(np.ones((2, 3))))
    assert like.is_f_contiguous() and (like.copy_to_host() == 0).all()
    assert gpuarray.full_like(f, 3).copy_to_host().dtype == np.float32
    assert gpuarray.device_array_like(f).shape == (3, 4)
    d = gpuarray.device_array((2, 3), dtype=np.uint16)
    d.fill(65535)
    assert (d.copy_to_host() == 65535).all()
    d[:, 1].fill(3)
    assert d.copy_to_host()[:, 1].tolist() == [3, 3]
    s = gpuarray.empty((4, 4), np.complex128)[::2, ::-1]
    s.fill(1 + 2j)
    assert (s.copy_to_host() == 1 + 2j).all()


@pytest.mark.parametrize("itemsize_dtype", ["V3", [("a", "<i4"), ("b", "<f8")], "<M8[ns]"])
def test_non_numeric_dtypes_move_as_bytes(itemsize_dtype):
    host = np.zeros(6, dtype=itemsize_dtype)
    host.view(np.uint8)[:] = np.arange(host.nbytes, dtype=np.uint8)
    d = gpuarray.to_device(host)
    np.testing.assert_array_equal(d.copy_to_host().view(np.uint8), host.view(np.uint8))
    np.testing.assert_array_equal(d[::-2].copy_to_host().view(np.uint8),
                                  np.ascontiguousarray(host[::-2]).view(np.uint8))


def test_broadcast_host_source_and_to_device_of_strided_host():
    src = np.broadcast_to(np.arange(5, dtype=np.float32), (3, 5))
    d = gpuarray.to_device(src)
    assert d.is_c_contiguous()
    np.testing.assert_array_equal(d.copy_to_host(), src)


# ----------------------------------------------------------------- views
def test_reshape_view_or_copy_like_numpy():
    host = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    d = gpuarray.to_device(host)
    v = d.reshape(6, 4)
    assert v._mem is d._mem  # a view
    np.testing.assert_array_equal(v.copy_to_host(), host.reshape(6, 4))
    t = d.transpose(2, 0, 1)
    r = t.reshape(-1)  # needs a copy
    np.testing.assert_array_equal(r.copy_to_host(), host.transpose(2, 0, 1).reshape(-1))
    with pytest.raises(ValueError, match="without copying"):
        t.reshape(24, copy=False)
    with pytest.raises(ValueError):
        d.reshape(5, 5)
    np.testing.assert_array_equal(d.T.ravel().copy_to_host(), host.T.ravel())
    np.testing.assert_array_equal(d.reshape((4, 6), order="F").copy_to_host(),
                                  host.reshape((4, 6), order="F"))


def test_view_squeeze_split_and_scalars():
    host = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    d = gpuarray.to_device(host)
    np.testing.assert_array_equal(d.view(np.uint16).copy_to_host(), host.view(np.uint16))
    np.testing.assert_array_equal(d.squeeze().copy_to_host(), host.squeeze())
    flat = gpuarray.to_device(np.arange(10))
    parts = flat.split(4)
    assert [p.shape for p in parts] == [(4,), (4,), (2,)]
    np.testing.assert_array_equal(parts[2].copy_to_host(), [8, 9])
    x = d[0, 2, 3]
    assert isinstance(x, np.float32) and x == 11
    assert d[0, 1, None, ::-1].shape == (1, 4)
    assert len(d) == 1
    with pytest.raises(TypeError, match="unsized"):
        len(d[0, 0, 0, ...])


def test_views_keep_memory_alive_and_release_it():
    d = gpuarray.to_device(np.arange(100, dtype=np.float64))
    base = d._mem
    ref = weakref.ref(base)
    v = d[10:20]
    del d, base
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(v.copy_to_host(), np.arange(10, 20))
    del v
    gc.collect()
    assert ref() is None


def test_attributes():
    d = gpuarray.to_device(np.zeros((3, 4), np.int16))
    assert (d.ndim, d.size, d.itemsize, d.nbytes, d.alloc_size) == (2, 12, 2, 24, 24)
    assert d.flags["C_CONTIGUOUS"] and not d.flags["F_CONTIGUOUS"]
    assert d[:, ::2].alloc_size == 2 * 8 + 1 * 4 + 2  # extent of the view: 22 bytes
    assert d.device == gpuarray.get_device()
    assert d.stream == gpuarray.default_stream()
    assert d.device_ctypes_pointer.value == d.gpu_data.device_pointer
    assert gpuarray.zeros(0).device_ctypes_pointer.value is None
    assert "DeviceNDArray" in repr(d)


def test_pickle_round_trip():
    d = gpuarray.to_device(np.arange(6, dtype=np.int8).reshape(2, 3)[:, ::-1])
    e = pickle.loads(pickle.dumps(d))
    assert isinstance(e, DeviceNDArray)
    np.testing.assert_array_equal(e.copy_to_host(), d.copy_to_host())


def test_bad_input_is_refused_with_clear_errors():
    with pytest.raises(TypeError, match="Python objects"):
        gpuarray.to_device(np.array([object()]))
    with pytest.raises(ValueError, match="negative"):
        gpuarray.empty((-1, 2))
    with pytest.raises(TypeError, match="shape"):
        gpuarray.empty("big")
    d = gpuarray.zeros(3)
    with pytest.raises(ValueError, match="shape"):
        d.copy_to_host(np.zeros(4))
    with pytest.raises(TypeError, match="stream"):
        d.copy_to_host(stream="fast")


def test_big_endian_host_data_is_converted():
    host = np.arange(5, dtype=">i4")
    d = gpuarray.to_device(host)
    assert d.dtype == np.dtype("=i4")
    np.testing.assert_array_equal(d.copy_to_host(), host)


def test_asarray_is_zero_copy_for_device_arrays_and_copies_host_data():
    d = gpuarray.zeros(4)
    assert gpuarray.asarray(d) is d
    assert gpuarray.asarray(d, dtype=np.float32).dtype == np.float32
    np.testing.assert_array_equal(gpuarray.asarray([1, 2, 3]).copy_to_host(), [1, 2, 3])


def test_to_device_copy_false_and_to():
    host = np.arange(4.0)
    d = gpuarray.to_device(host, copy=False)
    assert d.shape == (4,)
    out = gpuarray.zeros(4)
    assert gpuarray.to_device(host, to=out) is out
    np.testing.assert_array_equal(out.copy_to_host(), host)
    e = gpuarray.to_device(out)
    assert e._mem is not out._mem
    np.testing.assert_array_equal(e.copy_to_host(), host)


def test_mapped_host_memory_gives_a_zero_copy_device_view():
    h = gpuarray.mapped_array(8, dtype=np.int32)
    h[:] = np.arange(8)
    d = gpuarray.asarray(h)
    d[2:4] = 0
    gpuarray.synchronize()
    assert h.tolist() == [0, 1, 0, 0, 4, 5, 6, 7]


def test_pinned_array_async_copy_to_host_needs_a_sync():
    d = gpuarray.to_device(np.arange(16, dtype=np.float32))
    s = gpuarray.stream()
    out = gpuarray.pinned_array(16, dtype=np.float32)
    out[:] = -1
    d.copy_to_host(out, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(out, np.arange(16))


@pytest.mark.parametrize("nbytes", [4 << 20, (13 << 20) + 12])
def test_large_pageable_transfers_go_through_the_staging_ring(monkeypatch, nbytes):
    monkeypatch.setenv("GPUARRAY_STAGING_CHUNK", str(1 << 20))  # many chunks, slots reused
    gpuarray._config.reload()
    host = np.random.default_rng(1).integers(0, 255, nbytes, dtype=np.uint8)
    calls = []
    real_htod, real_dtoh = gpuarray._staging.htod, gpuarray._staging.dtoh
    monkeypatch.setattr(gpuarray._staging, "htod", lambda *a: (calls.append("htod"), real_htod(*a)))
    monkeypatch.setattr(gpuarray._staging, "dtoh", lambda *a: (calls.append("dtoh"), real_dtoh(*a)))
    d = gpuarray.to_device(host, stream=gpuarray.stream(non_blocking=True))
    host[:] = 0  # the caller may reuse its buffer at once
    back = d.copy_to_host()
    assert calls == ["htod", "dtoh"]
    np.testing.assert_array_equal(back, np.random.default_rng(1).integers(0, 255, nbytes, dtype=np.uint8))
    small = np.arange(10, dtype=np.uint8)
    assert (gpuarray.to_device(small).copy_to_host() == small).all() and calls == ["htod", "dtoh"]
