"""NumPy's protocols, printing and scalar conversions of DeviceNDArray (issue 15).

- NumPy functions, ufuncs and Python's arithmetic operators refuse a device
  array with a TypeError whose message says what to do instead; explicit host
  conversion (``np.asarray``) and metadata queries keep working.
- ``repr``/``str`` print the values exactly as NumPy prints the same host
  array, and a large array copies only the corners NumPy prints (bytes
  counted on the simulator).
- ``float``/``int``/``complex``/``bool``/``operator.index`` give NumPy's result
  or NumPy's error, and copy nothing when they fail on size.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest

import gpuarray

ROW = "\n" + " " * len("array(")
DEV_ROW = "\n" + " " * len("DeviceNDArray(")


def _numpy_repr_as_device(host: np.ndarray) -> str:
    """NumPy's repr of ``host`` with the class name changed (wide lines: no wrapping)."""
    return repr(host).replace("array(", "DeviceNDArray(", 1).replace(ROW, DEV_ROW)


def _outcome(fn, x):
    try:
        return ("ok", fn(x))
    except Exception as e:
        return (type(e), str(e))


@pytest.fixture
def copied(sim, monkeypatch):
    """Count the bytes the simulator copies device -> host."""
    count = {"bytes": 0, "calls": 0}
    dtoh, copy2d = sim.memcpy_dtoh_async, sim.memcpy_2d_async

    def counting_dtoh(dst_host, src, nbytes, stream):
        count["bytes"] += nbytes
        count["calls"] += 1
        return dtoh(dst_host, src, nbytes, stream)

    def counting_2d(dst, dst_pitch, dst_is_device, src, src_pitch, src_is_device,
                    width_bytes, height, stream):
        if src_is_device and not dst_is_device:
            count["bytes"] += width_bytes * height
            count["calls"] += 1
        return copy2d(dst, dst_pitch, dst_is_device, src, src_pitch, src_is_device,
                      width_bytes, height, stream)

    monkeypatch.setattr(sim, "memcpy_dtoh_async", counting_dtoh)
    monkeypatch.setattr(sim, "memcpy_2d_async", counting_2d)
    return count


# ------------------------------------------------------ NumPy refuses arithmetic
def _host_and_device():
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    return host, gpuarray.to_device(host)


NUMPY_CALLS = {
    "np.sum": (lambda a: np.sum(a), "numpy.sum()"),
    "np.mean": (lambda a: np.mean(a), "numpy.mean()"),
    "np.concatenate": (lambda a: np.concatenate([a, a]), "numpy.concatenate()"),
    "np.where": (lambda a: np.where(a), "numpy.where()"),
    "np.array_equal": (lambda a: np.array_equal(a, a), "numpy.array_equal()"),
    "np.add": (lambda a: np.add(a, 1), "numpy.add()"),
    "np.sqrt": (lambda a: np.sqrt(a), "numpy.sqrt()"),
    "np.add.reduce": (lambda a: np.add.reduce(a), "numpy.add.reduce()"),
    "ndarray + a": (lambda a: np.ones((2, 3), np.float32) + a, "numpy.add()"),
    "np.float64 * a": (lambda a: np.float64(2) * a, "numpy.multiply()"),
}


@pytest.mark.parametrize("name", list(NUMPY_CALLS))
def test_numpy_functions_and_ufuncs_refuse_with_the_message(name):
    _, d = _host_and_device()
    call, what = NUMPY_CALLS[name]
    with pytest.raises(TypeError) as info:
        call(d)
    msg = str(info.value)
    assert msg.startswith(f"{what} is not supported on a gpuarray.DeviceNDArray"), msg
    for hint in ("no arithmetic", "a.get()", "np.asarray(a)", "cupy.asarray(a)",
                 "torch.from_dlpack(a)", "numba.cuda.as_cuda_array(a)"):
        assert hint in msg, (hint, msg)


OPERATORS = {
    "a + 1": (lambda a: a + 1, "+"), "1 + a": (lambda a: 1 + a, "+"),
    "a - 1": (lambda a: a - 1, "-"), "1 - a": (lambda a: 1 - a, "-"),
    "a * 2": (lambda a: a * 2, "*"), "2 * a": (lambda a: 2 * a, "*"),
    "a / 2": (lambda a: a / 2, "/"), "2 / a": (lambda a: 2 / a, "/"),
    "a // 2": (lambda a: a // 2, "//"), "a % 2": (lambda a: a % 2, "%"),
    "a ** 2": (lambda a: a ** 2, "**"), "2 ** a": (lambda a: 2 ** a, "**"),
    "a @ a": (lambda a: a @ a.T, "@"), "divmod": (lambda a: divmod(a, 2), "divmod()"),
    "a & 1": (lambda a: a & 1, "&"), "a | 1": (lambda a: a | 1, "|"),
    "a ^ 1": (lambda a: a ^ 1, "^"), "a << 1": (lambda a: a << 1, "<<"),
    "a >> 1": (lambda a: a >> 1, ">>"), "-a": (lambda a: -a, "unary -"),
    "+a": (lambda a: +a, "unary +"), "~a": (lambda a: ~a, "unary ~"),
    "abs(a)": (lambda a: abs(a), "abs()"),
}


@pytest.mark.parametrize("name", list(OPERATORS))
def test_operators_refuse_with_the_same_message(name):
    _, d = _host_and_device()
    call, symbol = OPERATORS[name]
    with pytest.raises(TypeError, match="gpuarray moves and copies device arrays but has no "
                                        "arithmetic") as info:
        call(d)
    assert symbol in str(info.value)
    assert "a.get()" in str(info.value)


def test_in_place_operators_refuse_and_leave_the_array_alone():
    host, d = _host_and_device()
    before = d
    with pytest.raises(TypeError, match="the \\+ operator is not supported"):
        d += 1
    assert d is before
    np.testing.assert_array_equal(d.copy_to_host(), host)


def test_explicit_host_conversion_still_works():
    host, d = _host_and_device()
    for back in (np.asarray(d), np.array(d), d.get(), d.copy_to_host(),
                 np.asarray(d, dtype=np.float64)):
        assert isinstance(back, np.ndarray)
        np.testing.assert_array_equal(back, host)
    assert np.asarray(d, dtype=np.float64).dtype == np.float64
    assert float(np.sum(np.asarray(d))) == 15.0


def test_metadata_queries_answer_without_copying(copied):
    d = gpuarray.zeros((4, 5), dtype=np.int16)
    assert (np.shape(d), np.ndim(d), np.size(d), np.size(d, 1)) == ((4, 5), 2, 20, 5)
    assert copied["bytes"] == 0


def test_np_transpose_is_the_device_view(copied):
    # as numba.cuda's device arrays: np.transpose(d) is d.transpose(), on the device
    host = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    d = gpuarray.to_device(host)
    copied["bytes"] = 0
    for axes in (None, (1, 0, 2), (2, 0, 1)):
        t = np.transpose(d) if axes is None else np.transpose(d, axes)
        assert isinstance(t, gpuarray.DeviceNDArray) and t.ptr == d.ptr
        assert copied["bytes"] == 0
        np.testing.assert_array_equal(t.copy_to_host(), np.transpose(host, axes))
        copied["bytes"] = 0
    with pytest.raises(ValueError, match="repeated axis"):
        np.transpose(d, (0, 0, 1))


# ------------------------------------------------------------------- printing
def _printed_cases():
    rng = np.random.default_rng(7)
    f = rng.standard_normal((40, 50))
    return {
        "1-d float64": np.array([1.5, 2.5, 3.5]),
        "2-d float32": np.arange(12, dtype=np.float32).reshape(3, 4),
        "int8": np.array([-3, 0, 7], dtype=np.int8),
        "bool": np.array([True, False]),
        "complex64": np.array([1 + 2j, -0.5j], dtype=np.complex64),
        "float16": np.array([0.1, 65504], dtype=np.float16),
        "0-d": np.array(2.25),
        "0-d int16": np.array(-4, dtype=np.int16),
        "empty": np.zeros(0),
        "empty 2-d": np.zeros((0, 3), dtype=np.int32),
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "negative strides": np.arange(10, dtype=np.int64)[::-2],
        "structured": np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]),
        "summarised 1-d": np.arange(5000, dtype=np.float64),
        "summarised 2-d random": f,
        "summarised 3-d": np.arange(12 * 13 * 14, dtype=np.int32).reshape(12, 13, 14),
        "summarised with a short axis": np.arange(4 * 600, dtype=np.uint8).reshape(4, 600),
        "summarised nan/inf": np.where(np.arange(2000) % 3 == 0, np.nan, np.arange(2000.0)),
    }


@pytest.mark.parametrize("name", list(_printed_cases()))
def test_repr_and_str_print_the_values_as_numpy(name):
    host = _printed_cases()[name]
    d = gpuarray.to_device(host)
    with np.printoptions(linewidth=10_000):
        assert repr(d) == _numpy_repr_as_device(host)
        assert str(d) == str(host)
    # NumPy's default line width: same line breaks as NumPy's for the same prefix.
    assert str(d) == str(host)
    assert repr(d).startswith("DeviceNDArray(")


def test_repr_wraps_as_numpy_does_for_the_longer_prefix():
    host = np.linspace(0, 1, 12)
    d = gpuarray.to_device(host)
    expected = "DeviceNDArray(" + np.array2string(host, separator=", ",
                                                  prefix="DeviceNDArray(", suffix=")") + ")"
    assert repr(d) == expected
    assert all(len(line) <= 75 for line in repr(d).splitlines())
    assert repr(d).count("\n") >= 1


def test_repr_follows_numpy_print_options():
    d = gpuarray.to_device(np.array([1 / 3, 2 / 3]))
    with np.printoptions(precision=3):
        assert repr(d) == "DeviceNDArray([0.333, 0.667])"
    with np.printoptions(threshold=1, edgeitems=1):
        assert repr(d) == _numpy_repr_as_device(np.array([1 / 3, 2 / 3]))
        assert repr(gpuarray.to_device(np.arange(5))).startswith("DeviceNDArray([0, ..., 4]")
        assert str(gpuarray.to_device(np.arange(5))) == "[0 ... 4]"


def test_repr_names_a_device_other_than_0(make_sim):
    make_sim(devices=2)
    with gpuarray.get_device(1).activate():
        d = gpuarray.to_device(np.array([1, 2], dtype=np.int8))
    assert repr(d) == "DeviceNDArray([1, 2], dtype=int8, device=1)"
    assert repr(gpuarray.to_device(np.array([1.0]))) == "DeviceNDArray([1.])"


def test_repr_of_a_view_prints_the_view():
    host = np.arange(24, dtype=np.int32).reshape(4, 6)
    d = gpuarray.to_device(host)[1:, ::-2]
    assert repr(d) == _numpy_repr_as_device(host[1:, ::-2])


@pytest.mark.parametrize("shape", [(1000, 1000), (200, 300, 40), (100_000,), (5, 4000)])
def test_large_repr_copies_only_the_printed_corners(copied, shape):
    n = int(np.prod(shape))
    host = (np.arange(n, dtype=np.float64) % 1000).reshape(shape)
    d = gpuarray.to_device(host)
    edge = np.get_printoptions()["edgeitems"]
    printed = 1
    for length in shape:
        printed *= min(length, 2 * edge)
    for fn in (repr, str):
        copied["bytes"] = 0
        with np.printoptions(linewidth=10_000):
            text = fn(d)
            assert text == (_numpy_repr_as_device(host) if fn is repr else str(host))
        assert copied["bytes"] == printed * host.itemsize, (fn, copied, printed)
    assert copied["bytes"] < d.nbytes / 100


def test_small_repr_copies_the_array_once(copied):
    d = gpuarray.to_device(np.arange(10.0))
    repr(d)
    assert copied["bytes"] == d.nbytes


# --------------------------------------------------------- scalar conversions
CONVERSIONS = {"float": float, "int": int, "complex": complex, "bool": bool,
               "operator.index": operator.index}
SCALAR_CASES = {
    "0-d float": np.array(2.5),
    "0-d int": np.array(-7, dtype=np.int32),
    "0-d bool": np.array(True),
    "0-d complex": np.array(1 + 2j, dtype=np.complex64),
    "0-d uint8": np.array(200, dtype=np.uint8),
    "size-1 1-d": np.array([3.0]),
    "size-1 2-d int": np.array([[4]], dtype=np.int64),
    "size-1 zero": np.array([0.0]),
    "size 3": np.array([1.0, 2.0, 3.0]),
    "size 0": np.zeros(0),
    "size 0 2-d": np.zeros((2, 0), dtype=np.int32),
}


@pytest.mark.parametrize("case", list(SCALAR_CASES))
@pytest.mark.parametrize("conv", list(CONVERSIONS))
def test_scalar_conversions_behave_as_numpy(case, conv):
    host = SCALAR_CASES[case]
    fn = CONVERSIONS[conv]
    d = gpuarray.to_device(host)
    expected, got = _outcome(fn, host), _outcome(fn, d)
    assert got == expected
    if expected[0] == "ok":
        assert type(got[1]) is type(expected[1])


def test_failed_scalar_conversions_copy_nothing(copied):
    d = gpuarray.zeros((1000, 1000))
    for fn in (float, int, complex, bool):
        with pytest.raises((TypeError, ValueError)):
            fn(d)
    with pytest.raises(TypeError):
        operator.index(gpuarray.zeros(1))
    one = gpuarray.zeros(1)  # size 1 but 1-d: NumPy 2.x refuses float/int/complex
    for fn in (float, int, complex):
        with pytest.raises(TypeError):
            fn(one)
    assert copied["bytes"] == 0


def test_index_conversion_works_where_python_wants_an_index():
    z = gpuarray.to_device(np.array(2, dtype=np.int16))
    assert [10, 20, 30][z] == 30
    assert list(range(5))[:z] == [0, 1]
    assert gpuarray.to_device(np.arange(5))[z] == 2
    assert bin(z) == "0b10"


def test_ordering_operators_refuse_with_the_message():
    d = gpuarray.zeros(3)
    for op in (lambda: d < 1, lambda: d <= 1, lambda: d > 1, lambda: d >= 1, lambda: 1 < d):
        with pytest.raises(TypeError, match="no arithmetic"):
            op()
