"""Indirect calls: function addresses as values and ``call`` through a register.

``mov.u64 %rd, f;`` gives a function's address (a reserved window no data
access reaches); a ``call (r), %rd, (a, b), proto;`` with a
``.callprototype`` (or a ``.calltargets`` list) calls the function at that
address -- numba-cuda's runtime (NRT) calls a MemInfo's destructor so.  An
address that is no function of the prototype's signature (a data pointer,
null, a function of another signature) is a launch fault,
``CUDA_ERROR_INVALID_PC`` (718, sticky) naming the call's PTX line.  Forms
ptxas refuses are refused at load (218).  Every test runs in both tiers
(conftest.py).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from gpuarray_sim.ptx import PtxError, load

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from gpuarray.errors import CudaError
from sim.tests.ptx.support import HEAD, backend, download, fixture, launch, u64, upload

pytestmark = pytest.mark.usefixtures("ptx_tier")


@pytest.fixture
def b():
    return backend()


FUNCS = """
.func (.param .b32 r) twice(.param .b32 a, .param .b32 c)
{
  .reg .b32 %x<4>;
  ld.param.b32 %x1, [a];
  ld.param.b32 %x2, [c];
  shl.b32 %x3, %x1, 1;
  add.s32 %x3, %x3, %x2;
  st.param.b32 [r], %x3;
  ret;
}
.func (.param .b32 r) plus(.param .b32 a, .param .b32 c)
{
  .reg .b32 %x<4>;
  ld.param.b32 %x1, [a];
  ld.param.b32 %x2, [c];
  mul.lo.s32 %x3, %x2, 100;
  add.s32 %x3, %x3, %x1;
  add.s32 %x3, %x3, 1;
  st.param.b32 [r], %x3;
  ret;
}
.func (.param .b64 r) wide(.param .b64 a)
{
  .reg .b64 %y;
  ld.param.b64 %y, [a];
  st.param.b64 [r], %y;
  ret;
}
"""

# Each thread picks twice or plus by its selector, stores the address in global
# memory (as numba's MemInfo holds its destructor), loads it back and calls it
# (the functions are FUNCS; the ptx-vs-gpu step runs it on a GPU too).
PICK = fixture("indirect_call")


def test_call_through_a_register_chosen_by_data_and_stored_in_memory(b):
    n = 8
    sel = upload(b, np.array([0, 1, 1, 0, 0, 1, 0, 1], np.uint32))
    out = upload(b, np.zeros(n, np.uint32))
    mem = upload(b, np.zeros(n, np.uint64))
    launch(b, PICK, "pick", [u64(out), u64(sel), u64(mem)], block=(n, 1, 1))
    want = [2 * t + 7 if s == 0 else t + 700 + 1 for t, s in enumerate([0, 1, 1, 0, 0, 1, 0, 1])]
    assert download(b, out, n, np.uint32).tolist() == want
    addrs = download(b, mem, n, np.uint64)
    assert len(set(addrs.tolist())) == 2 and all(a != 0 for a in addrs.tolist())


# A module variable initialised with function addresses, called through a
# .calltargets list; and the address of a function as a kernel's output.
TABLE = HEAD + FUNCS + """
.global .align 8 .u64 table[2] = {twice, plus};
.visible .entry via_table(.param .u64 out, .param .u32 i)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [i];
  mov.u64 %rd2, table;
  mul.wide.u32 %rd3, %r1, 8;
  add.s64 %rd2, %rd2, %rd3;
  ld.global.u64 %rd4, [%rd2];
  {
  .param .b32 pa;
  .param .b32 pc;
  .param .b32 pr;
  st.param.b32 [pa], 5;
  st.param.b32 [pc], 3;
  targets: .calltargets twice, plus;
  call (pr), %rd4, (pa, pc), targets;
  ld.param.b32 %r2, [pr];
  }
  st.global.u32 [%rd1], %r2;
  mov.u64 %rd5, plus;
  st.global.u64 [%rd1+8], %rd5;
  ret;
}
"""


def test_call_through_a_module_table_of_function_addresses(b):
    out = upload(b, np.zeros(4, np.uint32))
    module = launch(b, TABLE, "via_table", [u64(out), ctypes.c_uint32(0)])
    assert download(b, out, 1, np.uint32)[0] == 13
    launch(b, TABLE, "via_table", [u64(out), ctypes.c_uint32(1)], module=module)
    got = download(b, out, 4, np.uint32)
    assert got[0] == 306
    addr, _ = b.module_get_global(module, "table")
    table = download(b, addr, 2, np.uint64)
    assert int(table[1]) == int(got[2]) | int(got[3]) << 32  # the same address both ways
    assert table[0] != table[1] and 0 not in table.tolist()


# The callee's address from a kernel parameter: what the caller passes.
CALL_PARAM = HEAD + FUNCS + """
.visible .entry call_param(.param .u64 out, .param .u64 fp, .param .u32 which)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  .reg .pred %p;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [fp];
  ld.param.u32 %r1, [which];
  setp.eq.u32 %p, %r1, 1;
  @%p mov.u64 %rd2, wide;
  {
  .param .b32 pa;
  .param .b32 pc;
  .param .b32 pr;
  st.param.b32 [pa], 1;
  st.param.b32 [pc], 2;
  proto: .callprototype (.param .b32 _) _ (.param .b32 _, .param .b32 _);
  call (pr), %rd2, (pa, pc), proto;
  ld.param.b32 %r2, [pr];
  }
  st.global.u32 [%rd1], %r2;
  ret;
}
"""


@pytest.mark.parametrize("what", ["data", "null", "other signature"])
def test_calling_what_is_no_function_of_the_prototype_is_718_naming_the_call(b, what):
    out = upload(b, np.zeros(1, np.uint32))
    fp = {"data": out, "null": 0, "other signature": 0}[what]
    with pytest.raises(CudaError) as e:
        launch(b, CALL_PARAM, "call_param",
               [u64(out), u64(fp), ctypes.c_uint32(what == "other signature")])
    msg = str(e.value)
    assert e.value.code == 718 and "CUDA_ERROR_INVALID_PC" in msg, msg
    line = next(i for i, t in enumerate(CALL_PARAM.split("\n"), 1) if "call (pr)" in t)
    assert "indirect call" in msg and f"PTX line {line}" in msg, msg
    with pytest.raises(CudaError, match="sticky"):  # the context is lost, as on a GPU
        b.mem_alloc(4)


def _one_call(proto: str, call: str) -> str:
    return HEAD + FUNCS + f"""
.visible .entry k(.param .u64 fp)
{{
  .reg .b64 %rd1;
  ld.param.u64 %rd1, [fp];
  {{
  .param .b32 pa;
  .param .b32 pc;
  .param .b32 pr;
  .param .b64 pw;
  {proto}
  {call}
  }}
  ret;
}}
"""


PROTO = "proto: .callprototype (.param .b32 _) _ (.param .b32 _, .param .b32 _);"


@pytest.mark.parametrize(("proto", "call"), [
    (PROTO, "call (pr), %rd1, (pa), proto;"),              # an argument too few
    (PROTO, "call (pr), %rd1, (pa, pc, pc), proto;"),      # one too many
    (PROTO, "call %rd1, (pa, pc), proto;"),                # no result for the prototype's
    (PROTO, "call (pr), %rd1, (pa, pw), proto;"),          # a .b64 argument for a .b32
    (PROTO, "call (pr), %rd1, (pa, pc), nowhere;"),        # no such prototype
    ("t: .calltargets twice, plus;", "call (pr), %rd1, (pa), t;"),      # targets' count
    ("t: .calltargets twice, wide;", "call (pr), %rd1, (pa, pc), t;"),  # mixed signatures
])
def test_a_call_that_does_not_match_its_prototype_is_refused_at_load(proto, call):
    with pytest.raises(PtxError) as e:
        load(_one_call(proto, call))
    assert e.value.code == 218, e.value.message


def test_the_prototype_forms_load():
    load(_one_call(PROTO, "call (pr), %rd1, (pa, pc), proto;"))
    load(_one_call("proto: .callprototype _ (.param .b32 _);", "call %rd1, (pa), proto;"))
    load(_one_call("proto: .callprototype _ (.param .b32 _) .noreturn;", "call %rd1, (pa), proto;"))
    load(_one_call("t: .calltargets twice, plus;", "call.uni (pr), %rd1, (pa, pc), t;"))
    load(_one_call("proto: .callprototype (.param .u32 _) _ (.param .f32 _, .param .s32 _);",
                   "call (pr), %rd1, (pa, pc), proto;"))  # ptxas compares sizes, not types


VOID = HEAD + """
.func mark(.param .b64 p)
{
  .reg .b64 %a;
  .reg .b32 %v;
  ld.param.b64 %a, [p];
  mov.u32 %v, 42;
  st.global.u32 [%a], %v;
  ret;
}
.visible .entry k(.param .u64 out)
{
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [out];
  mov.u64 %rd2, mark;
  {
  .param .b32 pr;
  .param .b64 pp;
  st.param.b64 [pp], %rd1;
  PROTO
  }
  ret;
}
"""


@pytest.mark.parametrize("proto", [
    "proto: .callprototype _ (.param .b64 _);\n  call %rd2, (pp), proto;",
    # numba declares C functions with a result it ignores (a destructor's `void`)
    "proto: .callprototype (.param .b32 _) _ (.param .b64 _);\n  call (pr), %rd2, (pp), proto;",
], ids=["void", "void_called_with_a_result"])
def test_a_function_without_a_result(b, proto):
    out = upload(b, np.zeros(1, np.uint32))
    launch(b, VOID.replace("PROTO", proto), "k", [u64(out)])
    assert download(b, out, 1, np.uint32)[0] == 42
