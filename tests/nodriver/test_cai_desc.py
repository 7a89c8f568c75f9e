"""Tests for gpuarray.interop._cai_desc: the CUDA Array Interface v3 dictionary."""

import dataclasses
import re
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuarray.interop._cai_desc import CAIDesc, is_c_contiguous, make_cai, parse_cai

FOREIGN = ">" if sys.byteorder == "little" else "<"
NATIVE = "<" if sys.byteorder == "little" else ">"


def good(**changes):
    desc = {"shape": (2, 3), "typestr": NATIVE + "f4", "data": (0x7000_0000, False),
            "version": 3, "strides": None, "stream": 1}
    desc.update(changes)
    return {k: v for k, v in desc.items() if v is not ...}  # `...` deletes a key


def test_valid_v3_dict():
    d = parse_cai(good())
    assert d == CAIDesc(ptr=0x7000_0000, shape=(2, 3), strides=(12, 4),
                        dtype=np.dtype("f4"), readonly=False, stream=1, version=3,
                        typestr=NATIVE + "f4", descr=None)
    assert d.size == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.ptr = 0


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_older_versions_without_stream_or_strides(version):
    d = parse_cai(good(version=version, stream=..., strides=...))
    assert d.version == version and d.stream is None and d.strides == (12, 4)


def test_accepted_variants():
    d = parse_cai(good(shape=[np.int64(4), 5], data=[np.uint64(64), np.bool_(True)],
                       strides=[-4, 16], typestr="|u1", stream=2, mask=None))
    assert (d.shape, d.strides, d.ptr, d.readonly, d.stream) == ((4, 5), (-4, 16), 64, True, 2)
    # byte strides that are not multiples of the item size are kept as they are
    assert parse_cai(good(strides=(13, 3))).strides == (13, 3)
    assert parse_cai(good(strides=(0, 0))).strides == (0, 0)
    assert parse_cai(good(stream=0xDEAD_BEEF)).stream == 0xDEAD_BEEF
    assert parse_cai(good(typestr=FOREIGN + "i1")).dtype == np.int8  # 1 byte: no order
    assert parse_cai(good(typestr="|b1")).dtype == np.bool_
    assert parse_cai(good(typestr=NATIVE + "M8[ns]")).dtype == np.dtype("M8[ns]")
    size0 = parse_cai(good(shape=(3, 0, 2), data=(0, False)))
    assert size0.ptr == 0 and size0.size == 0 and size0.strides == (8, 8, 4)
    scalar = parse_cai(good(shape=(), strides=()))
    assert scalar.shape == () and scalar.strides == () and scalar.size == 1


def test_descr_for_void_types():
    fields = [("a", NATIVE + "i4"), ("", "|V4"), ("b", NATIVE + "f8")]
    d = parse_cai(good(typestr="|V16", descr=fields))
    assert d.dtype == np.dtype({"names": ["a", "b"], "formats": ["i4", "f8"],
                                "offsets": [0, 8], "itemsize": 16})
    assert d.descr == fields
    assert parse_cai(good(typestr="|V3", descr=[("", "|V3")])).dtype == np.dtype("V3")
    assert parse_cai(good(typestr="|V3")).dtype == np.dtype("V3")
    # descr only refines void types
    assert parse_cai(good(descr=[("x", "u1")])).dtype == np.float32


def test_export_gives_descr_only_where_it_says_more_than_typestr():
    """An opaque void type (bfloat16 travels as '<V2') goes out without descr.

    ``[("", "<V2")]`` is CAI's default; CuPy 14 reads its padding-named field as no
    field, an itemsize-0 ``dtype([])`` (seen on an H200 run, 2026-11-28).
    """
    def export(dtype):
        return make_cai(ptr=4096, shape=(3,), byte_strides=(np.dtype(dtype).itemsize,),
                        dtype=dtype, readonly=False, stream_value=1, c_contiguous=True)

    opaque = export(np.dtype("V2"))
    assert opaque["typestr"] == "|V2" and "descr" not in opaque
    assert parse_cai(opaque).dtype == np.dtype("V2")
    rec = np.dtype([("a", "<i4"), ("b", "<f8")])
    assert export(rec)["descr"] == rec.descr and parse_cai(export(rec)).dtype == rec
    assert "descr" not in export(np.float32)


BAD = [
    # (changes, exception, key named in the message)
    ({"version": ...}, ValueError, "version"),
    ({"shape": ...}, ValueError, "shape"),
    ({"typestr": ...}, ValueError, "typestr"),
    ({"data": ...}, ValueError, "data"),
    ({"version": "3"}, TypeError, "version"),
    ({"version": 3.0}, TypeError, "version"),
    ({"version": True}, TypeError, "version"),
    ({"version": 4}, ValueError, "version"),
    ({"version": -1}, ValueError, "version"),
    ({"shape": None}, TypeError, "shape"),
    ({"shape": "23"}, TypeError, "shape"),
    ({"shape": 6}, TypeError, "shape"),
    ({"shape": (2, -3)}, ValueError, "shape"),
    ({"shape": (2.0, 3)}, TypeError, "shape"),
    ({"shape": (True, 3)}, TypeError, "shape"),
    ({"shape": (2**63, 1)}, ValueError, "shape"),
    ({"shape": (2**40, 2**40)}, ValueError, "shape"),
    ({"shape": (1,) * 65, "strides": None}, ValueError, "shape"),
    ({"typestr": 4}, TypeError, "typestr"),
    ({"typestr": b"<f4"}, TypeError, "typestr"),
    ({"typestr": "float32"}, ValueError, "typestr"),
    ({"typestr": ""}, ValueError, "typestr"),
    ({"typestr": "<f3"}, ValueError, "typestr"),
    ({"typestr": FOREIGN + "f4"}, ValueError, "typestr"),
    ({"typestr": "|O8"}, ValueError, "typestr"),
    ({"typestr": "|V0"}, ValueError, "typestr"),
    ({"typestr": "<f4 "}, ValueError, "typestr"),
    ({"data": None}, TypeError, "data"),
    ({"data": 4096}, TypeError, "data"),
    ({"data": (4096,)}, TypeError, "data"),
    ({"data": (4096, False, 0)}, TypeError, "data"),
    ({"data": (4096.0, False)}, TypeError, "data"),
    ({"data": ("4096", False)}, TypeError, "data"),
    ({"data": (4096, 0)}, TypeError, "data"),
    ({"data": (4096, None)}, TypeError, "data"),
    ({"data": (True, False)}, TypeError, "data"),
    ({"data": (-1, False)}, ValueError, "data"),
    ({"data": (2**64, False)}, ValueError, "data"),
    ({"data": (0, False)}, ValueError, "data"),  # NULL for a non-empty array
    ({"strides": (4,)}, ValueError, "strides"),
    ({"strides": (4, 4, 4)}, ValueError, "strides"),
    ({"strides": 4}, TypeError, "strides"),
    ({"strides": ("12", 4)}, TypeError, "strides"),
    ({"strides": (12.0, 4)}, TypeError, "strides"),
    ({"strides": (2**63, 4)}, ValueError, "strides"),
    ({"mask": object()}, NotImplementedError, "mask"),
    ({"mask": False}, NotImplementedError, "mask"),
    ({"stream": 0}, ValueError, "stream"),
    ({"stream": True}, TypeError, "stream"),
    ({"stream": 1.0}, TypeError, "stream"),
    ({"stream": "1"}, TypeError, "stream"),
    ({"stream": -2}, ValueError, "stream"),
    ({"stream": 2**64}, ValueError, "stream"),
    ({"typestr": "|V8", "descr": [("a", "<i4")]}, ValueError, "descr"),
    ({"typestr": "|V8", "descr": 5}, ValueError, "descr"),
    ({"typestr": "|V8", "descr": [("a", FOREIGN + "i4"), ("b", "|V4")]}, ValueError, "descr"),
]


@pytest.mark.parametrize("changes, exc, key", BAD, ids=[str(b[0])[:40] if "object at" not in str(b[0]) else f"{next(iter(b[0]))}-object" for b in BAD])
def test_invalid_values_name_the_key(changes, exc, key):
    with pytest.raises(exc, match=re.escape(repr(key))) as info:
        parse_cai(good(**changes))
    if ... not in changes.values():  # the bad value is named too
        assert f"[{key!r}]" in str(info.value)
        shown = changes.get(key, changes.get("typestr"))
        assert repr(shown)[:20] in str(info.value) or key in ("mask", "shape", "descr")


def test_stream_0_message_cites_v3():
    with pytest.raises(ValueError, match="v3 disallows"):
        parse_cai(good(stream=0))


def test_big_endian_message():
    with pytest.raises(ValueError, match="native byte order"):
        parse_cai(good(typestr=FOREIGN + "c8"))


@pytest.mark.parametrize("desc", [None, [], (("shape", (1,)),), "dict", 3, object()])
def test_not_a_dict(desc):
    with pytest.raises(TypeError, match="must be a dict"):
        parse_cai(desc)


KEYS = st.sampled_from(["shape", "typestr", "data", "version", "strides", "descr",
                        "mask", "stream"]) | st.text(max_size=8)
ATOMS = (st.none() | st.booleans() | st.integers() | st.integers(-2, 70)
         | st.integers(2**62, 2**70) | st.floats(allow_nan=True) | st.text(max_size=12)
         | st.sampled_from(["<f4", "|b1", ">f8", "|V8", "<M8[ns]", "|O8", "<U3", "<V0",
                            "<f4x", "|S0"])
         | st.binary(max_size=6))
JUNK = st.recursive(ATOMS, lambda inner: st.lists(inner, max_size=4)
                    | st.lists(inner, max_size=4).map(tuple)
                    | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=12)
ALLOWED = (TypeError, ValueError, NotImplementedError)


@settings(max_examples=600, deadline=None)
@given(st.dictionaries(KEYS, JUNK, max_size=8))
def test_junk_dicts_raise_only_allowed_errors(desc):
    try:
        parse_cai(desc)
    except ALLOWED:
        pass


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(["shape", "typestr", "data", "version", "strides", "descr",
                        "mask", "stream"]), JUNK)
def test_one_junk_value_in_a_good_dict(key, value):
    try:
        d = parse_cai(good(**{key: value}))
    except ALLOWED as exc:
        assert key in str(exc) or key == "descr"
    else:
        assert d.stream != 0 and all(n >= 0 for n in d.shape)


@given(JUNK)
def test_junk_non_dicts(value):
    if isinstance(value, dict):
        return
    with pytest.raises(TypeError):
        parse_cai(value)


# ---- make_cai against NumPy's __array_interface__ conventions ----

def _arrays():
    base = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    yield "contiguous", base
    yield "transposed", base.T
    yield "fortran", np.asfortranarray(base)
    yield "sliced", base[:, ::2, 1:]
    yield "negative", base[::-1]
    yield "broadcast", np.broadcast_to(np.arange(5.0), (4, 5))
    yield "broadcast-extent1", np.broadcast_to(np.arange(5.0), (1, 5))
    yield "extent1-odd-stride", base[1:2, :, :]
    yield "size0", np.empty((3, 0, 2))
    yield "zero-d", np.array(1.5)
    yield "readonly", np.broadcast_to(np.arange(4), (2, 4))
    for dt in ["?", "i1", "u8", "f2", "f4", "c8", "c16", "V3", "M8[ns]", "S5", "U2"]:
        yield dt, np.zeros((2, 3), dtype=dt)[:, ::-1]
    yield "structured", np.zeros(4, np.dtype([("a", "i4"), ("b", "f8")], align=True))
    yield "packed", np.zeros(4, np.dtype([("a", "u1"), ("b", "<f4")]))
    try:
        import ml_dtypes
    except ImportError:
        return
    yield "bfloat16", np.zeros((2, 2), ml_dtypes.bfloat16).T


@pytest.mark.parametrize("name, arr", list(_arrays()), ids=[n for n, _ in _arrays()])
def test_make_cai_matches_numpy(name, arr):
    ai = arr.__array_interface__
    cai = make_cai(ptr=ai["data"][0], shape=arr.shape, byte_strides=arr.strides,
                   dtype=arr.dtype, readonly=not arr.flags.writeable, stream_value=2,
                   c_contiguous=is_c_contiguous(arr.shape, arr.strides, arr.itemsize))
    assert is_c_contiguous(arr.shape, arr.strides, arr.itemsize) == arr.flags.c_contiguous
    assert cai["typestr"] == ai["typestr"]
    assert cai["shape"] == ai["shape"] and cai["version"] == 3 and cai["stream"] == 2
    assert cai["strides"] == ai["strides"]  # None exactly when C-contiguous
    assert cai["data"] == ((ai["data"][0] if arr.size else 0), ai["data"][1])
    if arr.dtype.kind == "V":  # NumPy's descr, unless it is the default [("", typestr)]
        assert cai.get("descr", [("", ai["typestr"])]) == ai["descr"]
    else:
        assert "descr" not in cai
    assert set(cai) <= {"shape", "typestr", "data", "version", "strides", "stream", "descr"}
    back = parse_cai(cai)
    # CAI has no bfloat16 type code: NumPy's '<V2' convention reads back as void
    want = np.dtype("V2") if name == "bfloat16" else arr.dtype
    assert back.shape == arr.shape and back.dtype == want
    for n, got, expected in zip(arr.shape, back.strides, arr.strides, strict=True):
        assert got == expected or n <= 1 or arr.size == 0


def test_make_cai_exact_dict_and_stream_rules():
    assert make_cai(ptr=4096, shape=(2, 2), byte_strides=(8, 4), dtype=np.float32,
                    readonly=True, stream_value=None, c_contiguous=True) == {
        "shape": (2, 2), "typestr": NATIVE + "f4", "data": (4096, True), "version": 3,
        "strides": None, "stream": None}
    cai = make_cai(ptr=4096, shape=[2, 0], byte_strides=[4, 8], dtype="i4", readonly=False,
                   stream_value=0xBEEF, c_contiguous=False)
    assert cai["data"] == (0, False) and cai["strides"] == (4, 8) and cai["shape"] == (2, 0)
    with pytest.raises(ValueError, match="stream 0"):
        make_cai(ptr=1, shape=(1,), byte_strides=(4,), dtype="f4", readonly=False,
                 stream_value=0, c_contiguous=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=4), st.data())
def test_is_c_contiguous_matches_numpy(shape, data):
    arr = np.zeros([n + 2 for n in shape], dtype=np.int16)
    index = tuple(slice(data.draw(st.integers(0, 1)), data.draw(st.integers(1, n + 2)),
                        data.draw(st.sampled_from([1, 2, -1])))
                  for n in shape)
    view = arr[index]
    if data.draw(st.booleans()):
        view = view.T
    assert is_c_contiguous(view.shape, view.strides, view.itemsize) == view.flags.c_contiguous
    cai = make_cai(ptr=view.__array_interface__["data"][0], shape=view.shape,
                   byte_strides=view.strides, dtype=view.dtype, readonly=False,
                   stream_value=1,
                   c_contiguous=is_c_contiguous(view.shape, view.strides, view.itemsize))
    # NumPy 2.5 gives a 0-d array's strides as () where 2.4 gave None (both say C order)
    numpy_strides = view.__array_interface__["strides"]
    assert cai["strides"] == (None if numpy_strides == () else numpy_strides)
