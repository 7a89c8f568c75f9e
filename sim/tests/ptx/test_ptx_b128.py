"""PTX's 128-bit data (ISA 8.3): ``.b128`` registers, ``mov.b128``, ``ld``/``st.b128``,
``atom.cas.b128``/``atom.exch.b128``, run in both tiers; what ptxas refuses refused at load.

Every accept/refuse claim below is ptxas 13.0's verdict (``ptxas -arch=sm_90``, and
``-arch=sm_80`` for the target rule) on the same lines: ``.b128`` needs ``.version 8.3``
("Feature 'Type .b128' requires PTX ISA .version 8.3 or later"), with ``.sys`` 8.4 ("Feature
'.b128 with .sys' requires PTX ISA .version 8.4 or later"); ``atom.cas.b128``/``.exch.b128``
need sm_90 ("Instruction 'atom.cas.b128.global' requires .target sm_90 or higher"); no other
atomic operation, no red, no vector of .b128, no arithmetic on it.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from gpuarray_sim.ptx import PtxError, parse
from gpuarray_sim.ptx._check import check

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from gpuarray.errors import CudaError
from sim.tests.ptx.support import backend, download, launch, u64, upload

pytestmark = pytest.mark.usefixtures("ptx_tier")

HEAD83 = ".version 8.3\n.target sm_90\n.address_size 64\n"
LO, HI = 0x0123456789ABCDEF, 0xFEDCBA9876543210  # distinct halves: a swap shows


@pytest.fixture
def b():
    return backend()


def _words(x: int) -> list[int]:
    return [x & (2**64 - 1), x >> 64]


MOVES = HEAD83 + """
.visible .entry moves(.param .u64 out, .param .u64 lo, .param .u64 hi)
{
  .reg .b128 %q<4>;
  .reg .b64 %rd<8>;
  .reg .b32 %r<4>;
  .reg .f64 %fd<2>;
  ld.param.u64 %rd0, [out];
  ld.param.u64 %rd1, [lo];
  ld.param.u64 %rd2, [hi];
  mov.b128 %q0, {%rd1, %rd2};
  st.global.b128 [%rd0], %q0;
  mov.b128 %q1, %q0;
  mov.b128 {%rd3, %rd4}, %q1;
  st.global.v2.u64 [%rd0+16], {%rd4, %rd3};
  mov.b128 {%r0, %r1, %r2, %r3}, %q1;
  st.global.v4.u32 [%rd0+32], {%r0, %r1, %r2, %r3};
  mov.b128 %q2, {%r3, %r2, %r1, %r0};
  st.global.b128 [%rd0+48], %q2;
  mov.b128 %q3, -1;
  st.global.b128 [%rd0+64], %q3;
  mov.b128 %q3, 5;
  st.global.b128 [%rd0+80], %q3;
  mov.b128 {%fd0, %fd1}, %q0;
  mov.b128 %q3, {%fd1, %fd0};
  st.global.b128 [%rd0+96], %q3;
  mov.b128 {_, %rd5}, %q0;
  mov.b128 {%rd6, _}, %q0;
  st.global.v2.u64 [%rd0+112], {%rd5, %rd6};
  ret;
}
"""


def test_mov_pack_unpack_copy_and_literals(b):
    out = upload(b, np.zeros(16, np.uint64))
    launch(b, MOVES, "moves", [u64(out), u64(LO), u64(HI)])
    got = [int(x) for x in download(b, out, 16, np.uint64)]
    assert got[0:2] == [LO, HI]  # {lo, hi}: lo the low 64 bits, stored first
    assert got[2:4] == [HI, LO]  # unpacked to (lo, hi), stored swapped
    words = [int(w) for w in np.array([LO, HI], np.uint64).view(np.uint32)]
    assert [int(w) for w in np.array(got[4:6], np.uint64).view(np.uint32)] == words
    assert [int(w) for w in np.array(got[6:8], np.uint64).view(np.uint32)] == words[::-1]
    assert got[8:10] == [2**64 - 1] * 2  # -1 extends to all 128 bits
    assert got[10:12] == [5, 0]
    assert got[12:14] == [HI, LO]  # through two .f64 registers, bit for bit
    assert got[14:16] == [HI, LO]  # an unpack with the sink '_' keeps the other half


LDST = HEAD83 + """
.visible .entry ldst(.param .u64 src, .param .u64 dst)
{
  .reg .b128 %q<3>;
  .reg .b64 %rd<4>;
  .reg .b32 %r<2>;
  .shared .align 16 .b8 sh[64];
  mov.u32 %r0, %tid.x;
  ld.param.u64 %rd0, [src];
  ld.param.u64 %rd1, [dst];
  mul.wide.u32 %rd2, %r0, 16;
  add.s64 %rd0, %rd0, %rd2;
  add.s64 %rd1, %rd1, %rd2;
  ld.global.b128 %q0, [%rd0];
  cvt.u32.u64 %r1, %rd2;
  st.shared.b128 [sh], %q0;
  ld.volatile.global.b128 %q1, [%rd0];
  ld.relaxed.gpu.global.b128 %q1, [%rd0];
  ld.acquire.gpu.global.b128 %q1, [%rd0];
  ld.shared.b128 %q2, [sh];
  st.relaxed.gpu.global.b128 [%rd1], %q2;
  st.volatile.global.b128 [%rd1], %q2;
  st.release.gpu.global.b128 [%rd1], %q1;
  st.b128 [%rd1], %q2;
  ret;
}
"""


def test_ld_st_global_shared_and_ordered(b):
    src = np.array([LO, HI], np.uint64)
    d_src, d_dst = upload(b, src), upload(b, np.zeros(2, np.uint64))
    launch(b, LDST, "ldst", [u64(d_src), u64(d_dst)])
    assert [int(x) for x in download(b, d_dst, 2, np.uint64)] == [LO, HI]


ATOM = HEAD83 + """
.visible .entry atom(.param .u64 p, .param .u64 out)
{
  .reg .b128 %q<6>;
  .reg .b64 %rd<8>;
  .shared .align 16 .b128 s;
  ld.param.u64 %rd0, [p];
  ld.param.u64 %rd1, [out];
  ld.global.b128 %q0, [%rd0];
  mov.b128 %q1, {%rd0, %rd1};
  // a compare that fails: memory stays, the old value returned
  mov.b128 %q2, 7;
  atom.global.cas.b128 %q3, [%rd0], %q2, %q1;
  st.global.b128 [%rd1], %q3;
  // one that succeeds
  atom.acq_rel.gpu.global.cas.b128 %q3, [%rd0], %q0, %q1;
  st.global.b128 [%rd1+16], %q3;
  ld.global.b128 %q4, [%rd0];
  st.global.b128 [%rd1+32], %q4;
  // exchange: the old value back, the new in memory (generic address)
  atom.exch.b128 %q5, [%rd0], %q0;
  st.global.b128 [%rd1+48], %q5;
  // shared: exch, then cas
  st.shared.b128 [s], %q1;
  atom.shared.exch.b128 %q5, [s], %q0;
  st.global.b128 [%rd1+64], %q5;
  atom.relaxed.cta.shared.cas.b128 %q5, [s], %q0, %q1;
  ld.shared.b128 %q4, [s];
  st.global.b128 [%rd1+80], %q4;
  atom.global.exch.b128 %q5, [%rd0+16], -1;
  ret;
}
"""


def test_atom_cas_and_exch(b):
    init = np.array([LO, HI, 0, 0], np.uint64)
    p, out = upload(b, init), upload(b, np.zeros(12, np.uint64))
    launch(b, ATOM, "atom", [u64(p), u64(out)])
    got = [int(x) for x in download(b, out, 12, np.uint64)]
    new = [p, out]
    assert got[0:2] == [LO, HI]  # failed compare: the old value
    assert got[2:4] == [LO, HI]  # succeeded: the old value
    assert got[4:6] == new  # memory after the successful cas
    assert got[6:8] == new  # exch returned what cas stored
    assert got[8:10] == new  # shared exch: the old value
    assert got[10:12] == new  # shared cas of the right compare: the new value
    assert [int(x) for x in download(b, p, 4, np.uint64)] == [LO, HI, 2**64 - 1, 2**64 - 1]


COUNTER = HEAD83 + """
.visible .entry count(.param .u64 p, .param .u32 n)
{
  .reg .b128 %q<3>;
  .reg .b64 %rd<6>;
  .reg .b32 %r<3>;
  .reg .pred %p<2>;
  ld.param.u64 %rd0, [p];
  ld.param.u32 %r0, [n];
  mov.u32 %r1, 0;
LOOP:
  ld.volatile.global.b128 %q0, [%rd0];
RETRY:
  mov.b128 {%rd1, %rd2}, %q0;
  add.s64 %rd3, %rd1, 1;
  add.s64 %rd4, %rd2, 3;
  mov.b128 %q1, {%rd3, %rd4};
  atom.global.cas.b128 %q2, [%rd0], %q0, %q1;
  mov.b128 {%rd3, %rd4}, %q2;
  setp.ne.s64 %p0, %rd3, %rd1;
  setp.ne.or.s64 %p0, %rd4, %rd2, %p0;
  mov.b128 %q0, %q2;
  @%p0 bra RETRY;
  add.u32 %r1, %r1, 1;
  setp.lt.u32 %p1, %r1, %r0;
  @%p1 bra LOOP;
  ret;
}
"""


def test_many_threads_count_with_cas_b128_loops(b, monkeypatch):
    """Blocks on two host workers, every thread incrementing both halves of one 128-bit word
    with a cas loop: no update lost, the halves never torn apart."""
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS", "2")
    monkeypatch.setenv("GPUARRAY_SIM_WORKERS_MIN_THREADS", "0")
    b = backend()
    p = upload(b, np.zeros(2, np.uint64))
    blocks, threads, n = 8, 64, 20
    launch(b, COUNTER, "count", [u64(p), ctypes.c_uint32(n)], grid=(blocks, 1, 1),
           block=(threads, 1, 1))
    total = blocks * threads * n
    assert [int(x) for x in download(b, p, 2, np.uint64)] == [total, 3 * total]


FAULTS = HEAD83 + """
.visible .entry ld8(.param .u64 p)
{
  .reg .b128 %q;
  .reg .b64 %rd;
  ld.param.u64 %rd, [p];
  ld.global.b128 %q, [%rd+8];
  st.global.b128 [%rd], %q;
  ret;
}
.visible .entry oob(.param .u64 p)
{
  .reg .b128 %q;
  .reg .b64 %rd;
  ld.param.u64 %rd, [p];
  ld.global.b128 %q, [%rd+4096];
  st.global.b128 [%rd], %q;
  ret;
}
.visible .entry cas8(.param .u64 p)
{
  .reg .b128 %q;
  .reg .b64 %rd;
  ld.param.u64 %rd, [p];
  mov.b128 %q, 1;
  atom.global.cas.b128 %q, [%rd+8], %q, %q;
  ret;
}
.visible .entry sh8()
{
  .reg .b128 %q;
  .shared .align 16 .b8 s[64];
  mov.b128 %q, 1;
  st.shared.b128 [s+8], %q;
  ret;
}
"""


@pytest.mark.parametrize("entry, code, what", [
    ("ld8", 716, "ld.global.b128"),  # 8-byte aligned is misaligned for 16 bytes
    ("oob", 700, "ld.global.b128"),
    ("cas8", 716, "atom.global.cas.b128"),
    ("sh8", 716, "st.shared.b128"),
])
def test_misaligned_and_out_of_bounds_fault(entry, code, what):
    b = backend()
    p = upload(b, np.zeros(4, np.uint64))
    with pytest.raises(CudaError) as e:
        launch(b, FAULTS, entry, [u64(p)] if entry != "sh8" else [])
    assert e.value.code == code and what in str(e.value)


VARS = HEAD83 + """.global .align 16 .b128 g_q;
.global .b128 g_init = -2;
.func (.param .b128 r) f(.param .b128 a)
{
  .reg .b128 %q;
  .reg .b64 %rd<2>;
  .local .b128 l_q;
  ld.param.b128 %q, [a];
  st.local.b128 [l_q], %q;
  ld.local.b128 %q, [l_q];
  mov.b128 {%rd0, %rd1}, %q;
  add.s64 %rd0, %rd0, 1;
  mov.b128 %q, {%rd0, %rd1};
  st.param.b128 [r], %q;
  ret;
}
.visible .entry k(.param .align 16 .b128 k_q, .param .u64 k_p)
{
  .reg .b128 %q<4>;
  .reg .b64 %rd<2>;
  .shared .b128 s_q;
  ld.param.b128 %q0, [k_q];
  ld.param.u64 %rd0, [k_p];
  st.shared.b128 [s_q], %q0;
  ld.shared.b128 %q1, [s_q];
  st.global.b128 [g_q], %q1;
  {
  .param .b128 pa;
  .param .b128 pr;
  st.param.b128 [pa], %q1;
  call (pr), f, (pa);
  ld.param.b128 %q2, [pr];
  }
  st.global.b128 [%rd0], %q2;
  ld.global.b128 %q3, [g_init];
  st.global.b128 [%rd0+16], %q3;
  ldu.global.b128 %q3, [g_q];
  st.global.b128 [%rd0+32], %q3;
  ret;
}
"""


class _B128(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_uint64), ("hi", ctypes.c_uint64)]


def test_variables_parameters_func_and_local_of_b128(b):
    """.b128 module variables (one initialised: -2 extends to 128 bits), a .shared one, a
    kernel parameter, a .func's parameter and result, a .local variable, and ldu."""
    out = upload(b, np.zeros(6, np.uint64))
    launch(b, VARS, "k", [_B128(5, 7), u64(out)])
    got = [int(x) for x in download(b, out, 6, np.uint64)]
    assert got == [6, 7, 2**64 - 2, 2**64 - 1, 5, 7]


def _refusal(text: str) -> str:
    with pytest.raises(PtxError) as e:
        check(parse(text))
    assert e.value.code == 218
    return str(e.value)


def _kernel(body: str, head: str = HEAD83) -> str:
    return (head + ".visible .entry k(.param .u64 p)\n{\n  .reg .b128 %q<3>;\n"
            "  .reg .b64 %rd<3>;\n  .reg .b32 %r<2>;\n  .reg .pred %p;\n"
            f"  ld.param.u64 %rd0, [p];\n  {body}\n  ret;\n}}\n")


@pytest.mark.parametrize("body, what", [
    # ptxas at .version 8.2: "Feature 'Type .b128' requires PTX ISA .version 8.3 or later"
    ("mov.b128 %q1, %q0;", "needs PTX ISA .version 8.3"),
])
def test_b128_before_version_8_3_is_refused(body, what):
    for v in ("8.0", "8.2"):
        why = _refusal(_kernel(body, f".version {v}\n.target sm_90\n.address_size 64\n"))
        assert what in why and "PTX line 6" in why  # the .reg .b128 declaration


@pytest.mark.parametrize("decl, refused", [
    (".global .b128 g;", True), (".global .align 16 .b128 g;", True),
    (".shared .b128 s;", True), (".global .b128 g[2];", False),
    (".global .align 16 .b128 g[2];", False), (".const .b128 c[1];", False),
])
def test_b128_variables_before_version_8_3(decl, refused):
    """ptxas 13.0 at .version 8.0 refuses a scalar .b128 variable and takes an array."""
    text = (".version 8.0\n.target sm_90\n.address_size 64\n" + decl
            + "\n.visible .entry k()\n{\n  ret;\n}\n")
    if refused:
        assert "needs PTX ISA .version 8.3" in _refusal(text)
    else:
        check(parse(text))


@pytest.mark.parametrize("body, line, refused", [
    ("  .local .b128 l[2];\n", 0, False), ("  .shared .b128 s;\n", 6, True),
])
def test_b128_body_variables_and_parameters_before_version_8_3(body, line, refused):
    head = ".version 8.0\n.target sm_90\n.address_size 64\n"
    text = head + ".visible .entry k()\n{\n" + body + "  ret;\n}\n"
    if refused:
        assert f"PTX line {line}" in _refusal(text)
    else:
        check(parse(text))
    param = head + ".visible .entry k(.param .b128 p)\n{\n  ret;\n}\n"
    assert "parameter p of k" in _refusal(param)


@pytest.mark.parametrize("body, what", [
    ("atom.global.add.b128 %q0, [%rd0], %q1;", "atom.cas and atom.exch only"),
    ("atom.global.min.b128 %q0, [%rd0], %q1;", "atom.cas and atom.exch only"),
    ("red.global.exch.b128 [%rd0], %q1;", "atom.cas and atom.exch only"),
    ("atom.local.cas.b128 %q0, [%rd0], %q1, %q2;", "global, shared or generic"),
    ("atom.global.cas.b128 %q0, [%rd0], %q1, %rd1;", "not .b128"),
    ("atom.global.cas.b128 %rd0, [%rd0], %q1, %q2;", "not .b128"),
    ("atom.global.cas.b64 %rd0, [%rd0], %q1, %rd1;", "is a .b128 one"),
    ("add.b128 %q0, %q1, %q2;", "add.b128"),
    ("and.b128 %q0, %q1, %q2;", "and.b128"),
    ("setp.eq.b128 %p, %q1, %q2;", "setp.eq.b128"),
    ("mov.b64 %rd1, %q0;", "mov.b64"),
    ("mov.b128 %q0, {%r0, %r1};", "mov.b128"),
    ("ld.global.v2.b128 {%q0, %q1}, [%rd0];", "ld.global.v2.b128"),
    ("st.relaxed.sys.global.b128 [%rd0], %q0;", "needs PTX ISA .version 8.4"),
    ("atom.sys.global.cas.b128 %q0, [%rd0], %q1, %q2;", "needs PTX ISA .version 8.4"),
    ("ld.global.b128 %rd1, [%rd0];", "ld.global.b128"),
    # "Sink '_' not allowed as a source operand"
    ("mov.b128 %q0, {%rd0, _};", "the sink '_' as a source"),
])
def test_what_ptxas_refuses_is_refused_at_load(body, what):
    why = _refusal(_kernel(body))
    assert what in why and "PTX line 11" in why


@pytest.mark.parametrize("body", [
    "atom.global.cas.b128 %q0, [%rd0], %q1, %q2;",
    "atom.global.exch.b128 %q0, [%rd0], %q1;",
])
def test_atom_b128_needs_sm_90(body):
    # ptxas -arch=sm_80: "Instruction 'atom.cas.b128.global' requires .target sm_90 or higher"
    why = _refusal(_kernel(body, ".version 8.3\n.target sm_80\n.address_size 64\n"))
    assert "needs .target sm_90" in why and "PTX line 11" in why
    check(parse(_kernel(body, ".version 8.3\n.target sm_90a\n.address_size 64\n")))


@pytest.mark.parametrize("body", [
    "ld.global.b128 %q0, [%rd0];", "st.global.b128 [%rd0], %q0;",
    "mov.b128 %q0, {%rd0, %rd1};", "ld.volatile.shared.b128 %q0, [%rd0];",
    "ld.global.nc.b128 %q0, [%rd0];", "ldu.global.b128 %q0, [%rd0];",
    "ld.global.b64 %q0, [%rd0];", "st.global.b32 [%rd0], %q0;",
])
def test_what_ptxas_accepts_at_8_3_on_sm_80_loads(body):
    check(parse(_kernel(body, ".version 8.3\n.target sm_80\n.address_size 64\n")))


@pytest.mark.parametrize("body", [
    "atom.global.cas.b128 %q0, [%rd0], %q1, 5;", "atom.global.cas.b128 %q0, [%rd0], -1, %q2;",
    "atom.global.exch.b128 %q0, [%rd0], 5;", "mov.b128 %q0, {%rd0, %rd1};",
    "mov.b128 {%r0, %r1, %rd0, %rd1}, %q0;",
])
def test_literal_operands_of_the_atomics_load(body):
    """ptxas takes a literal compare or value (the table's rows; on this kernel ptxas 13.0
    crashes -- a segfault, no verdict -- on the first form); the last form, four registers of
    mixed sizes, it refuses ("Incompatible elements of vector expression") and so does the
    checker."""
    if "{%r0, %r1, %rd0" in body:
        assert "mov.b128 packs or unpacks" in _refusal(_kernel(body))
        return
    check(parse(_kernel(body)))


def test_sys_scope_is_accepted_at_8_4():
    check(parse(_kernel("st.relaxed.sys.global.b128 [%rd0], %q0;",
                        ".version 8.4\n.target sm_90\n.address_size 64\n")))
    check(parse(_kernel("atom.sys.global.cas.b128 %q0, [%rd0], %q1, %q2;",
                        ".version 8.4\n.target sm_90\n.address_size 64\n")))


def test_refused_through_the_driver_interface(b):
    with pytest.raises(CudaError) as e:
        b.module_load_data((_kernel("mov.b128 %q1, %q0;", ".version 8.0\n.target sm_90\n"
                                    ".address_size 64\n")).encode() + b"\0")
    assert e.value.code == 218 and ".b128" in str(e.value)
