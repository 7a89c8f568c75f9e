"""The PTX executor's parser and module facts (no compiler needed)."""

from __future__ import annotations

import pytest
from gpuarray_sim import ptx

from sim.tests.ptx.support import HEAD, fixture


def test_fixtures_parse_with_their_entries():
    m = ptx.parse(fixture("saxpy"))
    assert m.version == (9, 5) and m.target == "sm_90" and m.arch == 90
    assert m.address_size == 64
    info = m.entries["saxpy"]
    # f32, u64, u64, u32: offsets follow each parameter's alignment
    assert [p[1:] for p in info.params] == [(4, 4, 0), (8, 8, 8), (8, 8, 16), (4, 4, 24)]
    assert info.param_size == 28
    assert info.max_threads is None and info.ptx_version == 90
    assert info.static_shared_bytes == info.const_bytes == info.local_bytes == 0
    kernels = ptx.parse(fixture("nvrtc_kernels"))
    tr = [e for n, e in kernels.entries.items() if n.startswith("ga_transpose")]
    assert tr and tr[0].static_shared_bytes == 16384 and tr[0].max_threads == 256


def test_entry_facts_of_numba_kernels():
    dyn = ptx.parse(fixture("numba_dynamic_shared"))
    (info,) = dyn.entries.values()
    assert info.uses_dynamic_shared and info.static_shared_bytes == 0
    assert len(info.params) == 14  # two arrays of seven fields
    (local,) = ptx.parse(fixture("numba_local")).entries.values()
    assert local.local_bytes == 64  # int64[8]
    const = ptx.parse(fixture("numba_const"))
    (cinfo,) = const.entries.values()
    assert cinfo.const_bytes == 32
    g = const.globals["_cudapy_cmem"]
    assert g.space == "const" and g.size == 32
    assert list(g.init[4:8]) == [0, 0, 128, 63]  # 1.0f
    hist = ptx.parse(fixture("numba_shared_hist"))
    (hinfo,) = hist.entries.values()
    assert hinfo.static_shared_bytes == 64  # int32[16]


def test_module_variables_initialisers_and_relocations():
    m = ptx.parse(HEAD + """
.global .align 4 .u32 counter = 7;
.global .align 8 .b8 table[6] = {1, 2, 3};
.global .f32 half = 0f3F000000;
.global .f64 third[2] = {0d3FD5555555555555, -2.5};
.global .align 8 .u64 where = generic(table+2);
.const .align 2 .b16 c[3];
.shared .align 16 .b8 sh[40];
.extern .shared .align 16 .b8 dyn[];
""")
    g = m.globals
    assert g["counter"].init == (7).to_bytes(4, "little")
    assert g["table"].init == bytes([1, 2, 3, 0, 0, 0]) and g["table"].align == 8
    assert g["half"].init == bytes.fromhex("0000003f")
    assert g["third"].size == 16 and g["third"].init[8:] == bytes.fromhex("00000000000004c0")
    assert g["where"].relocs == [(0, "table", 2)] and g["where"].init == bytes(8)
    assert g["c"].size == 6 and g["c"].init == bytes(6) and g["c"].space == "const"
    assert g["sh"].space == "shared" and g["sh"].size == 40
    assert g["dyn"].extern and g["dyn"].size == 0


def test_maxntid_reqntid_and_functions():
    m = ptx.parse(HEAD + """
.func (.param .b32 r) twice(.param .b32 x) { .reg .b32 %a; ld.param.b32 %a, [x];
  add.s32 %a, %a, %a; st.param.b32 [r], %a; ret; }
.visible .entry k(.param .align 8 .b8 s[24], .param .u8 flag) .maxntid 32, 4, 1
{ .local .align 8 .b8 d[16]; ret; }
.visible .entry q() .reqntid 64 { ret; }
""")
    assert set(m.entries) == {"k", "q"} and set(m.functions) == {"twice", "k", "q"}
    k = m.entries["k"]
    assert k.params == [("s", 24, 8, 0), ("flag", 1, 1, 24)] and k.param_size == 25
    assert k.max_threads == 128 and k.local_bytes == 16
    assert m.entries["q"].max_threads == 64
    assert m.functions["twice"].kind == "func" and m.functions["twice"].rets[0].size == 4


@pytest.mark.parametrize("text, line, what", [
    (HEAD + ".visible .entry k() { add.s32 %r1, %r2 }", 4, "lacks its ';'"),
    (HEAD + ".visible .entry k() { ret; }\n.bogus 1;", 5, "unknown statement"),
    (HEAD + ".visible .entry k() {\n ret; ?\n}", 5, "unexpected character"),
    (HEAD + ".visible .entry k(.param .q32 x) { ret; }", 4, "unknown parameter qualifier"),
    (".target sm_90\n.visible .entry k() { ret; }", 1, "without a .version"),
])
def test_syntax_errors_are_218_naming_the_line(text, line, what):
    with pytest.raises(ptx.PtxError) as e:
        ptx.parse(text)
    assert e.value.code == 218 and what in e.value.message
    assert e.value.line == line


def test_newer_version_is_222():
    with pytest.raises(ptx.PtxError) as e:
        ptx.parse(".version 99.0\n.target sm_90\n.address_size 64\n")
    assert e.value.code == 222 and "99.0" in e.value.message


def test_32_bit_ptx_is_refused():
    with pytest.raises(ptx.PtxError) as e:
        ptx.parse(".version 8.0\n.target sm_90\n.address_size 32\n")
    assert e.value.code == 218 and "64-bit" in e.value.message
