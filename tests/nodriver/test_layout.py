"""Tests for gpuarray._layout against NumPy as the oracle (no GPU needed).

Layouts are real NumPy arrays built over host buffers: random byte strides
(negative, zero, unaligned), slices/transposes/broadcasts of C and F arrays,
and contiguous arrays whose size-1 axes carry arbitrary strides.
"""

import math
import operator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuarray import _layout as L


def cfg(n):
    """Hypothesis settings: n examples, no deadline (CI machines vary)."""
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


SETTINGS = cfg(150)
DTYPES = [np.dtype(t) for t in ("u1", "i2", "f4", "f8", "c16")]
VIEW_DTYPES = DTYPES + [np.dtype(t) for t in ("S3", "S6", "S12", "u2")]


def ptr(a):
    return a.__array_interface__["data"][0]


def make_array(shape, strides, dtype, extra=0):
    """A NumPy array with exactly this layout over a fresh host buffer."""
    lo = sum(s * (n - 1) for n, s in zip(shape, strides, strict=True) if s < 0 and n > 0)
    hi = sum(s * (n - 1) for n, s in zip(shape, strides, strict=True) if s > 0 and n > 0)
    buf = np.zeros(hi - lo + dtype.itemsize + extra, np.uint8)
    return np.ndarray(shape, dtype, buffer=buf, offset=-lo, strides=strides)


class Idx:
    """An object that is an integer only through ``__index__``."""

    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v

    def __repr__(self):
        return f"Idx({self.v})"


# ------------------------------------------------------------ strategies


@st.composite
def shapes(draw, max_dims=6):
    ndim = draw(st.integers(0, max_dims))
    side = 7 if ndim <= 4 else 4  # keeps every array under ~4096 elements
    return tuple(draw(st.lists(st.integers(0, side), min_size=ndim, max_size=ndim)))


@st.composite
def random_layouts(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(shapes())
    stride = st.one_of(st.integers(-6, 6).map(lambda k: k * dtype.itemsize), st.integers(-40, 40))
    strides = tuple(draw(stride) for _ in shape)
    return make_array(shape, strides, dtype)


@st.composite
def near_contiguous_layouts(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(shapes())
    base = np.empty(shape, dtype, order=draw(st.sampled_from("CF")))
    strides = [
        s if n > 1 else draw(st.integers(-64, 64)) for n, s in zip(shape, base.strides, strict=True)
    ]
    return make_array(shape, tuple(strides), dtype)


def slice_items(n):
    bound = st.one_of(st.none(), st.integers(-n - 3, n + 3), st.integers(-n, n).map(np.int64))
    step = st.one_of(st.none(), st.integers(-4, 4).filter(bool))
    return st.builds(slice, bound, bound, step)


def int_items(n):
    return st.integers(-n, n - 1).flatmap(
        lambda i: st.sampled_from([i, np.int64(i), np.intp(i), Idx(i)])
    )


@st.composite
def basic_keys(draw, shape, ints=True):
    per_axis = [
        draw(st.one_of(slice_items(n), int_items(n)) if ints and n else slice_items(n))
        for n in shape
    ]
    mode = draw(st.sampled_from(["full", "truncate", "ellipsis"]))
    if mode == "truncate":
        items = per_axis[: draw(st.integers(0, len(shape)))]
    elif mode == "ellipsis":
        i = draw(st.integers(0, len(shape)))
        j = draw(st.integers(i, len(shape)))
        items = per_axis[:i] + [Ellipsis] + per_axis[j:]
    else:
        items = per_axis
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


@st.composite
def derived_layouts(draw):
    dtype = draw(st.sampled_from(DTYPES))
    arr = np.zeros(draw(shapes()), dtype, order=draw(st.sampled_from("CF")))
    if draw(st.booleans()):
        sub = arr[draw(basic_keys(arr.shape, ints=draw(st.booleans())))]
        arr = sub if isinstance(sub, np.ndarray) else arr  # not a scalar
    if draw(st.booleans()):
        arr = arr.transpose(draw(st.permutations(range(arr.ndim))))
    if draw(st.booleans()) and arr.ndim < 6:
        target = [n if n != 1 else draw(st.integers(1, 3)) for n in arr.shape]
        lead = draw(st.lists(st.integers(1, 3), max_size=6 - arr.ndim))
        arr = np.broadcast_to(arr, tuple(lead) + tuple(target))
    return arr


def layouts():
    return st.one_of(random_layouts(), near_contiguous_layouts(), derived_layouts())


def prime_factors(n):
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@st.composite
def newshapes(draw, shape):
    size = math.prod(shape)
    kind = draw(st.sampled_from(["factors", "merge"]))
    if size == 0:
        dims = draw(st.lists(st.integers(0, 4), min_size=1, max_size=5))
        if 0 not in dims:
            dims[draw(st.integers(0, len(dims) - 1))] = 0
    elif kind == "factors":
        factors = draw(st.permutations(prime_factors(size)))
        cuts = sorted(draw(st.lists(st.integers(0, len(factors)), max_size=4)))
        bounds = [0] + cuts + [len(factors)]
        dims = [math.prod(factors[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    else:  # merge adjacent old axes, drop or keep size-1 axes
        dims, i = [], 0
        while i < len(shape):
            j = draw(st.integers(i + 1, len(shape)))
            dims.append(math.prod(shape[i:j]))
            i = j
        dims = [d for d in dims if d != 1 or draw(st.booleans())]
    for _ in range(draw(st.integers(0, 2))):
        dims.insert(draw(st.integers(0, len(dims))), 1)
    if size and dims and draw(st.booleans()):  # size 0 with -1: error
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    if len(dims) == 1 and draw(st.booleans()):
        return dims[0]
    return tuple(dims)


# ------------------------------------------------------------- contiguity


@SETTINGS
@given(shape=shapes(), dtype=st.sampled_from(DTYPES))
def test_fresh_strides_match_numpy(shape, dtype):
    if math.prod(shape):
        c = np.empty(shape, dtype).strides
        f = np.empty(shape, dtype, order="F").strides
    else:  # np.empty zeroes size-0 strides; reshape uses the fill rule
        src = np.empty((0,) + (1,) * 7, dtype)  # never the same shape
        c = src.reshape(shape).strides
        f = src.reshape(shape, order="F").strides
    assert L.c_strides(shape, dtype.itemsize) == c
    assert L.f_strides(shape, dtype.itemsize) == f


@cfg(400)
@given(arr=layouts())
def test_contiguity_matches_numpy_flags(arr):
    args = (arr.shape, arr.strides, arr.itemsize)
    assert L.is_c_contiguous(*args) == arr.flags.c_contiguous
    assert L.is_f_contiguous(*args) == arr.flags.f_contiguous


def test_contiguity_edge_cases():
    assert L.is_c_contiguous((), (), 8) and L.is_f_contiguous((), (), 8)
    assert L.is_c_contiguous((3, 0), (-5, 99), 8)
    assert L.is_f_contiguous((3, 0), (-5, 99), 8)
    assert L.is_c_contiguous((2, 1, 3), (24, 12345, 8), 8)
    assert not L.is_c_contiguous((2, 3), (8, 16), 8)
    assert L.is_f_contiguous((2, 3), (8, 16), 8)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(8,\)"):
        L.is_c_contiguous((2, 3), (8,), 8)


# --------------------------------------------------------------- indexing


@cfg(400)
@given(arr=layouts(), data=st.data())
def test_index_matches_numpy(arr, data):
    key = data.draw(basic_keys(arr.shape))
    res = L.index(arr.shape, arr.strides, key)
    out = arr[key]
    if res.scalar:
        assert not isinstance(out, np.ndarray)
        tkey = key if isinstance(key, tuple) else (key,)
        view = arr[tkey + (Ellipsis,)]
    else:
        assert isinstance(out, np.ndarray)
        view = out
    assert res.shape == view.shape
    assert res.strides == view.strides
    assert res.offset == ptr(view) - ptr(arr)
    norm = L.normalize_index(key, arr.ndim)
    assert sum(k is not None for k in norm) == arr.ndim
    assert all(k is None or type(k) in (int, slice) for k in norm)


def test_index_examples():
    r = L.index((4, 5), (40, 8), (1, slice(None, None, -2)))
    assert r == L.IndexResult(72, (3,), (-16,), False)
    assert L.index((), (), ()).scalar
    assert not L.index((), (), Ellipsis).scalar
    assert not L.index((3,), (8,), (0, None)).scalar
    assert L.index((3,), (8,), None) == L.IndexResult(0, (1, 3), (0, 8), False)
    assert L.index((3, 4), (32, 8), (2, -1)) == L.IndexResult(88, (), (), True)
    assert L.normalize_index((..., 0), 3) == (slice(None), slice(None), 0)


@pytest.mark.parametrize(
    "key, axis, size",
    [
        (3, 0, 3),
        (-4, 0, 3),
        ((0, 5), 1, 4),
        ((..., 7), 1, 4),
        ((None, 1, np.int64(-9)), 1, 4),
        (Idx(100), 0, 3),
    ],
)
def test_index_out_of_range(key, axis, size):
    shape = (3, 4)
    with pytest.raises(IndexError):
        np.empty(shape)[key]
    with pytest.raises(IndexError) as exc:
        L.index(shape, (32, 8), key)
    bad = [
        k
        for k in (key if isinstance(key, tuple) else (key,))
        if k is not None and k is not Ellipsis
    ][-1]
    msg = str(exc.value)
    assert f"index {operator.index(bad)} " in msg
    assert f"axis {axis} " in msg and f"size {size}" in msg


@pytest.mark.parametrize(
    "key, name",
    [
        ([0, 1], "[0, 1]"),
        (np.array([0]), "array of shape (1,)"),
        (True, "True"),
        (np.bool_(False), "False"),
        (1.0, "1.0"),
        (np.float64(2.5), "2.5"),
        ((0, [1]), "[1]"),
        ("a", "'a'"),
        ((0, (1,)), "(1,)"),
    ],
)
def test_index_advanced_rejected(key, name):
    with pytest.raises(IndexError) as exc:
        L.index((3, 4), (32, 8), key)
    assert "basic indexing only" in str(exc.value)
    assert name in str(exc.value)


def test_index_errors():
    with pytest.raises(IndexError, match="1-dimensional, but 2 were indexed"):
        L.index((3,), (8,), (0, None, 0))
    with pytest.raises(IndexError, match="single ellipsis"):
        L.index((3, 3), (24, 8), (..., 0, ...))
    with pytest.raises(ValueError, match=r"step cannot be zero.*slice\(1, 2, 0\)"):
        L.index((3,), (8,), slice(1, 2, 0))
    with pytest.raises(TypeError, match=r"slice\(1.5, None, None\)"):
        L.index((3,), (8,), slice(1.5, None))
    with pytest.raises(ValueError, match="differ in length"):
        L.index((3, 4), (8,), 0)


# ---------------------------------------------------------------- reshape


def check_reshape(arr, newshape, order):
    got = L.reshape_strides(arr.shape, arr.strides, arr.itemsize, newshape, order)
    try:
        expected = np.reshape(arr, newshape, order=order, copy=False)
    except ValueError:
        assert got is None
    else:
        assert got == expected.strides
        assert L.normalize_shape(newshape, arr.size) == expected.shape
        assert ptr(expected) == ptr(arr)


@cfg(400)
@given(arr=layouts(), data=st.data(), order=st.sampled_from("CFA"))
def test_reshape_view_decision_matches_numpy(arr, data, order):
    check_reshape(arr, data.draw(newshapes(arr.shape)), order)


def test_reshape_examples():
    # transposed (3, 4) C array: merging needs a copy in C order only
    assert L.reshape_strides((4, 3), (8, 32), 8, 12) is None
    assert L.reshape_strides((4, 3), (8, 32), 8, -1, order="F") == (8,)
    assert L.reshape_strides((4, 3), (8, 32), 8, (2, 2, 3)) == (16, 8, 32)
    # same shape keeps odd strides of size-1 axes; with -1 NumPy recomputes
    assert L.reshape_strides((1, 3), (100, 16), 8, (1, 3)) == (100, 16)
    assert L.reshape_strides((1, 3), (100, 16), 8, (1, -1)) == (48, 16)


@st.composite
def sliced_arrays(draw):
    """C or F arrays cut along one axis: not contiguous, often reshapeable."""
    shape = draw(st.lists(st.integers(1, 5), min_size=2, max_size=5))
    arr = np.zeros(shape, np.float32, order=draw(st.sampled_from("CF")))
    axis = draw(st.integers(0, arr.ndim - 1))
    key = [slice(None)] * arr.ndim
    key[axis] = draw(st.sampled_from([slice(None, None, 2), slice(1, None), slice(None, None, -1)]))
    return arr[tuple(key)]


@cfg(200)
@given(arr=sliced_arrays(), data=st.data(), order=st.sampled_from("CF"))
def test_reshape_of_sliced_arrays_matches_numpy(arr, data, order):
    check_reshape(arr, data.draw(newshapes(arr.shape)), order)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize(
    "base_order, cut, newshape",
    [
        ("F", (slice(None), slice(None), slice(None, None, 2)), (12, 3)),
        ("F", (slice(None), slice(None), slice(None, None, 2)), (2, 2, 3, 3)),
        ("C", (slice(None, None, 2), slice(None), slice(None)), (2, 15)),
        ("C", (slice(None, None, 2), slice(None), slice(None)), (2, 3, 5, 1)),
        ("F", (slice(None, None, -1), slice(None), slice(None)), (4, 15)),
    ],
)
def test_reshape_merges_like_numpy(base_order, cut, newshape, order):
    arr = np.zeros((4, 3, 5), np.float64, order=base_order)[cut]
    got = L.reshape_strides(arr.shape, arr.strides, 8, newshape, order)
    try:
        expected = np.reshape(arr, newshape, order=order, copy=False).strides
    except ValueError:
        expected = None
    assert got == expected


@pytest.mark.parametrize(
    "newshape, exc, words",
    [
        ((4,), ValueError, ["(2, 3)", "(4,)"]),
        ((-1, 4), ValueError, ["(2, 3)", "(-1, 4)"]),
        ((-1, -1), ValueError, ["one unknown", "(-1, -1)"]),
        ((0, -1), ValueError, ["(0, -1)"]),
        ((-2, 3), ValueError, ["-2"]),
        ((2.0, 3), TypeError, ["2.0"]),
        ("23", TypeError, ["'23'"]),
        (np.array([3, 2]), None, None),
        (None, TypeError, ["None"]),
    ],
)
def test_reshape_errors(newshape, exc, words):
    if exc is None:  # an integer array is a valid shape
        assert L.reshape_strides((2, 3), (24, 8), 8, newshape) == (16, 8)
        return
    with pytest.raises(exc) as info:
        L.reshape_strides((2, 3), (24, 8), 8, newshape)
    for w in words:
        assert w in str(info.value)
    with pytest.raises(ValueError, match="order"):
        L.reshape_strides((2, 3), (24, 8), 8, 6, order="K")


def test_normalize_shape():
    assert L.normalize_shape(np.int64(6), 6) == (6,)
    assert L.normalize_shape((2, -1, 1), 6) == (2, 3, 1)
    assert L.normalize_shape((), 1) == ()
    assert L.normalize_shape((0, 5), 0) == (0, 5)
    with pytest.raises(ValueError, match=r"size 7.*\(2, -1\)"):
        L.normalize_shape((2, -1), 7)


# ---------------------------------------------------- transpose / squeeze


@SETTINGS
@given(arr=layouts(), data=st.data())
def test_transpose_matches_numpy(arr, data):
    assert L.transpose(arr.shape, arr.strides) == (arr.T.shape, arr.T.strides)
    perm = data.draw(st.permutations(range(arr.ndim)))
    perm = [p - arr.ndim if data.draw(st.booleans()) else p for p in perm]
    t = arr.transpose(perm)
    assert L.transpose(arr.shape, arr.strides, perm) == (t.shape, t.strides)


def test_transpose_errors():
    with pytest.raises(L.AxisError, match="axis 2 is out of bounds"):
        L.transpose((2, 3), (24, 8), (0, 2))
    with pytest.raises(IndexError):  # AxisError is an IndexError as well
        L.transpose((2, 3), (24, 8), (-3, 0))
    with pytest.raises(ValueError, match=r"repeated axis.*\(0, -2\)"):
        L.transpose((2, 3), (24, 8), (0, -2))
    with pytest.raises(ValueError, match=r"\(0,\) don't match"):
        L.transpose((2, 3), (24, 8), (0,))


@SETTINGS
@given(arr=layouts(), data=st.data())
def test_squeeze_matches_numpy(arr, data):
    s = np.squeeze(arr)
    assert L.squeeze(arr.shape, arr.strides) == (s.shape, s.strides)
    ones = [i for i, n in enumerate(arr.shape) if n == 1]
    axes = tuple(data.draw(st.lists(st.sampled_from(ones), unique=True)) if ones else [])
    s = np.squeeze(arr, axis=axes)
    assert L.squeeze(arr.shape, arr.strides, axes) == (s.shape, s.strides)
    if ones:
        s = np.squeeze(arr, axis=ones[0] - arr.ndim)
        got = L.squeeze(arr.shape, arr.strides, ones[0] - arr.ndim)
        assert got == (s.shape, s.strides)


def test_squeeze_errors():
    with pytest.raises(ValueError, match=r"axis 1 .*\(1, 3\).*size 3"):
        L.squeeze((1, 3), (24, 8), 1)
    with pytest.raises(ValueError, match=r"duplicate.*\(0, -2\)"):
        L.squeeze((1, 3), (24, 8), (0, -2))
    with pytest.raises(L.AxisError, match="axis 5"):
        L.squeeze((1, 3), (24, 8), 5)


# ----------------------------------------------------------- broadcasting


@st.composite
def broadcastable(draw):
    target = draw(shapes(max_dims=5))
    out = []
    for _ in range(draw(st.integers(1, 4))):
        s = [1 if draw(st.booleans()) else n for n in target]
        out.append(tuple(s[draw(st.integers(0, len(s))) :]))
    if draw(st.booleans()):  # possibly incompatible
        i = draw(st.integers(0, len(out) - 1))
        s = list(out[i])
        if s:
            s[draw(st.integers(0, len(s) - 1))] = draw(st.integers(0, 4))
        out[i] = tuple(s)
    return out


@SETTINGS
@given(shapes_=broadcastable())
def test_broadcast_shapes_matches_numpy(shapes_):
    try:
        expected = np.broadcast_shapes(*shapes_)
    except ValueError as e:
        with pytest.raises(ValueError) as info:
            L.broadcast_shapes(*shapes_)
        assert str(info.value) == str(e)
    else:
        assert L.broadcast_shapes(*shapes_) == expected


@SETTINGS
@given(arr=layouts(), data=st.data())
def test_broadcast_strides_matches_numpy(arr, data):
    if arr.ndim > 5:
        return
    target = tuple(data.draw(st.lists(st.integers(0, 3), max_size=2)))
    target += tuple(data.draw(st.integers(0, 3)) if n == 1 else n for n in arr.shape)
    b = np.broadcast_to(arr, target)
    assert L.broadcast_strides(arr.shape, arr.strides, target) == b.strides


def test_broadcast_errors():
    with pytest.raises(
        ValueError,
        match=r"arg 0 with shape \(2,\).*arg 2 "
        r"with shape \(3, 3\)",
    ):
        L.broadcast_shapes((2,), (1,), (3, 3))
    assert L.broadcast_shapes() == ()
    with pytest.raises(ValueError, match=r"\(3,\) to shape \(4,\)"):
        L.broadcast_strides((3,), (8,), (4,))
    with pytest.raises(ValueError, match=r"\(2, 3\) to shape \(3,\)"):
        L.broadcast_strides((2, 3), (24, 8), (3,))


# ------------------------------------------------------------ dtype views


@SETTINGS
@given(arr=layouts(), new=st.sampled_from(VIEW_DTYPES))
def test_view_as_dtype_matches_numpy(arr, new):
    args = (arr.shape, arr.strides, arr.itemsize, new.itemsize)
    try:
        v = arr.view(new)
    except ValueError as e:
        with pytest.raises(ValueError) as info:
            L.view_as_dtype(*args)
        assert str(e).split(".")[0] in str(info.value)
    else:
        assert L.view_as_dtype(*args) == (v.shape, v.strides)


def test_view_as_dtype_errors():
    with pytest.raises(ValueError, match=r"0d array.*\(8 -> 4\)"):
        L.view_as_dtype((), (), 8, 4)
    with pytest.raises(ValueError, match=r"contiguous \(stride 16, itemsize 8\)"):
        L.view_as_dtype((2, 3), (48, 16), 8, 4)
    with pytest.raises(ValueError, match=r"smaller.*\(3 does not divide 8\)"):
        L.view_as_dtype((3,), (8,), 8, 3)
    with pytest.raises(ValueError, match=r"larger.*\(8 does not divide 12\)"):
        L.view_as_dtype((3,), (4,), 4, 8)


# ------------------------------------------------------- extent / overlap


def element_offsets(shape, strides, off=0):
    return [
        off + sum(i * s for i, s in zip(idx, strides, strict=True)) for idx in np.ndindex(*shape)
    ]


@SETTINGS
@given(arr=layouts())
def test_extent_matches_brute_force(arr):
    offs = element_offsets(arr.shape, arr.strides)
    expected = (min(offs), max(offs) + arr.itemsize) if offs else (0, 0)
    assert L.extent(arr.shape, arr.strides, arr.itemsize) == expected


@st.composite
def small_layout(draw):
    dtype = draw(st.sampled_from(DTYPES[:4]))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    strides = tuple(
        draw(st.one_of(st.integers(-4, 4).map(lambda k: k * dtype.itemsize), st.integers(-12, 12)))
        for _ in shape
    )
    return dtype, shape, strides


@st.composite
def two_views(draw):
    """Two arrays over one buffer, with their element-0 byte offsets."""
    specs = [draw(small_layout()) for _ in range(2)]
    spans = []
    for dtype, shape, strides in specs:
        lo = sum(s * (n - 1) for n, s in zip(shape, strides, strict=True) if s < 0 and n)
        hi = sum(s * (n - 1) for n, s in zip(shape, strides, strict=True) if s > 0 and n)
        spans.append((lo, hi + dtype.itemsize))
    nbytes = max(h - lo for lo, h in spans) + draw(st.integers(0, 24))
    buf = np.zeros(nbytes, np.uint8)
    out = []
    for (dtype, shape, strides), (lo, hi) in zip(specs, spans, strict=True):
        off = draw(st.integers(-lo, nbytes - hi))
        arr = np.ndarray(shape, dtype, buffer=buf, offset=off, strides=strides)
        out.append((off, arr))
    return out


def _overlap_args(views):
    return [x for off, a in views for x in (off, a.shape, a.strides, a.itemsize)]


@cfg(500)
@given(views=two_views())
def test_overlap_matches_numpy(views):
    (_, a), (_, b) = views
    args = _overlap_args(views)
    exact = L.overlaps_exact(*args)
    assert exact == np.shares_memory(a, b)
    assert L.may_overlap(*args) == np.may_share_memory(a, b)
    assert L.may_overlap(*args) or not exact
    assert L.overlaps_exact(*args, max_elements=0) == L.may_overlap(*args)


def test_overlap_examples():
    # even and odd float64 elements of one buffer: extents meet, bytes don't
    even = (0, (4,), (16,), 8)
    odd = (8, (4,), (16,), 8)
    assert L.may_overlap(*even, *odd)
    assert not L.overlaps_exact(*even, *odd)
    assert L.overlaps_exact(*even, *odd, max_elements=7)  # over budget
    assert L.overlaps_exact(*even, 4, (1,), (8,), 8)  # straddles elements 0, 1
    assert not L.may_overlap(*even, 0, (0,), (8,), 8)


# ----------------------------------------------------------- collapse_dims


@st.composite
def operand_strides(draw, shape):
    kind = draw(st.sampled_from(["C", "F", "padded", "neg", "bcast", "rand"]))
    isz = draw(st.sampled_from([1, 4, 8]))
    if kind == "F":
        return L.f_strides(shape, isz)
    if kind == "padded" and shape:
        return L.c_strides(shape[:-1] + (shape[-1] + 1,), isz)
    strides = list(L.c_strides(shape, isz))
    for i in range(len(strides)):
        if kind == "neg" and draw(st.booleans()):
            strides[i] = -strides[i]
        elif kind == "bcast" and draw(st.booleans()):
            strides[i] = 0
        elif kind == "rand":
            strides[i] = draw(st.integers(-64, 64))
    return tuple(strides)


@cfg(300)
@given(data=st.data())
def test_collapse_dims_preserves_visit_order(data):
    shape = data.draw(shapes())
    ops = [data.draw(operand_strides(shape)) for _ in range(data.draw(st.integers(1, 3)))]
    new_shape, new_ops = L.collapse_dims(shape, *ops)
    assert len(new_ops) == len(ops)
    size = math.prod(shape)
    assert math.prod(new_shape) == size
    if size == 0:
        assert new_shape == (0,)
        return
    assert 1 not in new_shape
    assert (new_shape == ()) == (size == 1)
    for old, new in zip(ops, new_ops, strict=True):
        assert len(new) == len(new_shape)
        assert element_offsets(shape, old) == element_offsets(new_shape, new)
    # maximal: no adjacent pair could still be merged for every operand
    for i in range(len(new_shape) - 1):
        assert not all(s[i] == new_shape[i + 1] * s[i + 1] for s in new_ops)
    if size > 1 and all(s == L.c_strides(shape, s[-1]) for s in ops):
        assert len(new_shape) == 1  # all C-contiguous: one flat axis


def test_collapse_dims_examples():
    assert L.collapse_dims((), ()) == ((), [()])
    assert L.collapse_dims((2, 0, 3), (1, 2, 3)) == ((0,), [(0,)])
    assert L.collapse_dims((1, 1), (8, 8), (0, 5)) == ((), [(), ()])
    # C source to F destination: nothing merges, order is kept
    assert L.collapse_dims((2, 3), (24, 8), (8, 16)) == ((2, 3), [(24, 8), (8, 16)])
    # reversed contiguous + C contiguous: merges to one axis
    assert L.collapse_dims((2, 1, 3), (-24, 7, -8), (12, 99, 4)) == ((6,), [(-8,), (4,)])
    # padded rows: the row axis stays separate
    assert L.collapse_dims((2, 3, 4), (128, 32, 8)) == ((2, 12), [(128, 8)])


def test_public_functions_documented():
    for name in L.__all__:
        obj = getattr(L, name)
        if name == "AxisError":
            continue
        doc = obj.__doc__ or ""
        assert doc.strip(), name
        if callable(obj) and not isinstance(obj, type):
            for section in ("Parameters", "Returns", "Raises"):
                assert section in doc, (name, section)
