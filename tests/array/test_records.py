"""Structured arrays: ``d[i]`` is a write-through record view (Numba's ``DeviceRecord``).

Regression for hardening item 13: indexing one element of a structured array
returned a detached host ``np.void``, so ``d[i]["a"] = 5`` silently wrote
nowhere.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuarray

REC = np.dtype([("a", "i4"), ("b", "f8"), ("c", "f4", (3,))], align=True)
NESTED = np.dtype([("x", "i2"), ("inner", [("p", "u1"), ("q", "i8")])])


def _host():
    h = np.zeros(4, REC)
    h["a"] = np.arange(4)
    h["b"] = np.arange(4) * 0.5
    h["c"] = np.arange(12, dtype="f4").reshape(4, 3)
    return h


def test_element_field_assignment_writes_through():
    d = gpuarray.to_device(_host())
    d[2]["a"] = 5
    d[1]["b"] = -1.5
    got = d.copy_to_host()
    expect = _host()
    expect[2]["a"] = 5
    expect[1]["b"] = -1.5
    np.testing.assert_array_equal(got, expect)


def test_element_is_a_zero_d_device_view():
    d = gpuarray.to_device(_host())
    r = d[3]
    assert isinstance(r, gpuarray.DeviceNDArray)
    assert r.shape == () and r.dtype == REC
    assert r.ptr == d.ptr + 3 * REC.itemsize
    assert r["a"] == 3 and isinstance(r["a"], np.int32)
    assert r["b"] == 1.5
    sub = r["c"]  # a subarray field is a device view too
    assert isinstance(sub, gpuarray.DeviceNDArray) and sub.shape == (3,)
    np.testing.assert_array_equal(sub.copy_to_host(), [9, 10, 11])
    host = r.copy_to_host()
    assert host.shape == () and host[()]["a"] == 3


def test_field_views_of_arrays_follow_numpy():
    h = _host()
    d = gpuarray.to_device(h)
    np.testing.assert_array_equal(d["a"].copy_to_host(), h["a"])
    np.testing.assert_array_equal(d["c"].copy_to_host(), h["c"])
    assert d["c"].shape == (4, 3)
    np.testing.assert_array_equal(d[::-2]["b"].copy_to_host(), h[::-2]["b"])
    d["a"] = 7
    d["c"][1] = [1, 2, 3]
    h["a"] = 7
    h["c"][1] = [1, 2, 3]
    np.testing.assert_array_equal(d.copy_to_host(), h)


def test_record_assignment_of_whole_element_and_fields():
    d = gpuarray.to_device(_host())
    r = d[0]
    r["c"] = 4.0           # broadcast into the subarray field
    r["c"][1] = 8.0        # element of a subarray field of a record
    d[1] = d[0]            # whole record from a record (device to device)
    got = d.copy_to_host()
    np.testing.assert_array_equal(got["c"][0], [4, 8, 4])
    np.testing.assert_array_equal(got[1], got[0])


def test_nested_record_is_a_record_view():
    h = np.zeros(2, NESTED)
    d = gpuarray.to_device(h)
    inner = d[1]["inner"]
    assert isinstance(inner, gpuarray.DeviceNDArray) and inner.shape == ()
    inner["q"] = 2**40
    assert d.copy_to_host()[1]["inner"]["q"] == 2**40


def test_record_write_with_stream_is_ordered():
    s = gpuarray.stream()
    d = gpuarray.to_device(_host(), stream=s)
    d[0]["a"] = 11
    s.synchronize()
    assert d.copy_to_host()[0]["a"] == 11


def test_bad_field_names_are_refused():
    d = gpuarray.to_device(_host())
    with pytest.raises(ValueError, match="'zz'"):
        d[0]["zz"]
    with pytest.raises(ValueError, match="'zz'"):
        d[0]["zz"] = 1
    plain = gpuarray.zeros(3)
    with pytest.raises(IndexError, match="'a'"):
        plain["a"]


def test_read_only_records_refuse_writes():
    d = gpuarray.to_device(_host())
    ro = gpuarray.from_cuda_array_interface({**d.__cuda_array_interface__,
                                             "data": (d.ptr, True)}, owner=d)
    with pytest.raises(ValueError, match="read-only"):
        ro[0]["a"] = 1


def test_plain_element_access_is_unchanged():
    d = gpuarray.to_device(np.arange(4, dtype=np.int64))
    v = d[2]
    assert isinstance(v, np.int64) and v == 2


def test_records_from_host_values():
    dt = np.dtype([("a", "i4"), ("b", "f8")])
    h = np.zeros(3, dt)
    h["a"] = [1, 2, 3]
    d = gpuarray.to_device(h)
    d[0] = h[2]            # an np.void
    d[1] = (9, 1.5)        # a tuple, as NumPy
    d[2]["b"] = np.float32(2.5)
    assert d.copy_to_host().tolist() == [(3, 0.0), (9, 1.5), (3, 2.5)]


def test_a_list_of_records_assigns_to_a_slice_as_numpy():
    dt = np.dtype([("a", "i4"), ("b", "f8")])
    d = gpuarray.zeros(3, dtype=dt)
    d[0:2] = [(1, 2.0), (3, 4.0)]
    d.setitem(slice(2, 3), [(5, 6.0)], stream=gpuarray.stream())
    want = np.array([(1, 2.0), (3, 4.0), (5, 6.0)], dtype=dt)
    assert d.copy_to_host().tolist() == want.tolist()
