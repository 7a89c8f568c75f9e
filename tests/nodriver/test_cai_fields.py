"""The C twin of the CUDA Array Interface fast parser agrees with the Python one.

``_cai_desc._parse_fields`` (Python) and ``cai_fields`` (``_cai_fields.c``,
in the C DLPack core) take the same dictionaries to the same plain values;
anything either does not take goes to the full validator. Here both see
well-formed dictionaries (which both must take, identically) and each kind of
malformed or unusual one (C may leave to the validator what Python took only
for values past int64; otherwise they agree).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuarray.interop import _cai_desc
from gpuarray.interop import _dlpack_capsule as dl

if dl.CORE != "c":
    pytest.skip(f"no C core to compare with: {dl.CORE_DESCRIPTION}", allow_module_level=True)

C = dl._core.cai_fields
PY = _cai_desc._parse_fields
for _t in ("<f4", "<f8", "|u1", "<i2", "|b1", "<c16"):
    _cai_desc.parse_cai({"shape": (1,), "typestr": _t, "data": (4096, False), "version": 3})


def _both(desc):
    return C(desc), PY(desc)


def test_the_selected_parser_is_the_c_one():
    assert _cai_desc.parse_fields is C


@settings(max_examples=300, deadline=None)
@given(shape=st.lists(st.integers(0, 6), max_size=4),
       typestr=st.sampled_from(["<f4", "<f8", "|u1", "<i2", "|b1", "<c16"]),
       ptr=st.integers(1, 2**64 - 1), readonly=st.booleans(),
       stream=st.one_of(st.none(), st.integers(1, 2**64 - 1)),
       strided=st.booleans(), signs=st.lists(st.sampled_from([1, -1, 0]), min_size=4,
                                             max_size=4),
       version=st.integers(0, 3), data=st.data())
def test_well_formed_dictionaries_give_the_same_values(shape, typestr, ptr, readonly, stream,
                                                       strided, signs, version, data):
    desc = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, readonly),
            "version": version, "stream": stream}
    if strided:
        itemsize = np.dtype(typestr).itemsize
        desc["strides"] = tuple(s * itemsize * data.draw(st.integers(1, 100))
                                for s, _ in zip(signs, shape, strict=False))
    c, p = _both(desc)
    assert c == p
    if ptr < 2**48:  # addresses in range: both must take it
        assert c is not None


BASE = {"shape": (2, 3), "typestr": "<f4", "data": (4096, False), "version": 3,
        "strides": None, "stream": 1}


@pytest.mark.parametrize("change", [
    {}, {"strides": (12, 4)}, {"strides": (-12, 4)}, {"stream": None}, {"mask": None},
    {"shape": (0, 3), "data": (0, False)}, {"shape": ()},
    {"shape": [2, 3]}, {"shape": (2, -3)}, {"shape": (2, True)}, {"shape": (2, 3.0)},
    {"typestr": "<f2"}, {"typestr": b"<f4"}, {"typestr": ">f4"}, {"data": [4096, False]},
    {"data": (4096,)}, {"data": (4096, 0)}, {"data": (True, False)}, {"data": (0, False)},
    {"data": (-1, False)}, {"data": (2**64, False)}, {"version": 4}, {"version": True},
    {"version": -1}, {"mask": object()}, {"strides": [12, 4]}, {"strides": (12,)},
    {"strides": (12, 4.0)}, {"strides": (2**63, 4)}, {"strides": (2**62, 4)},
    {"stream": 0}, {"stream": -1}, {"stream": 2**64}, {"stream": True}, {"shape": (1,) * 65},
    {"shape": (2**62, 2**62)}, {"shape": (0, 2**70), "data": (0, False)},
    {"shape": (2**40, 2**40), "strides": (4, 4)},
])
def test_each_malformed_or_unusual_dictionary(change):
    desc = {**BASE, **change}
    c, p = _both(desc)
    assert c == p or (c is None and p is not None and (
        max(map(abs, p[1] + p[2]), default=0) > 2**63 - 1 or p[8] > 2**63 - 1))


def test_not_a_dict_and_missing_keys():
    for desc in (None, [], BASE.items(), {k: v for k, v in BASE.items() if k != "data"},
                 type("D", (dict,), {})(BASE)):
        assert _both(desc) == (None, None)
