"""The PTX executor refuses at load what a driver's JIT (ptxas) refuses: a differential test.

``sim/tests/ptx/data/ptx_forms.tsv.gz`` holds instruction forms (opcodes x types x
rounding/ftz/sat modifiers x operand register types x immediates) and the
verdict of CUDA 13.0's ``ptxas -arch=sm_90`` on each, written by
``sim/tools/ptx_forms/gen.py``.  The executor must refuse every form ptxas
refuses (218 at load, naming the line) and accept every form it accepts;
where ``ptxas`` is installed a sample is re-asked of it.
"""

from __future__ import annotations

import gzip
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
from gpuarray_sim.ptx import PtxError, load, parse
from gpuarray_sim.ptx._check import problems

from gpuarray.errors import CudaError
from sim.tests.ptx.support import HEAD, backend

ROOT = Path(__file__).resolve().parents[3]
TABLE = ROOT / "sim" / "tests" / "ptx" / "data" / "ptx_forms.tsv.gz"


def _tool():
    spec = importlib.util.spec_from_file_location("ptx_forms_gen", ROOT / "sim" / "tools" / "ptx_forms" / "gen.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


gen = _tool()
_ALL = [tuple(line.split("\t", 1)) for line in gzip.decompress(TABLE.read_bytes()).decode().splitlines()
        if not line.startswith("#")]
#: instruction rows (one instruction in the probe kernel) and module rows (a .version/.target
#: pair: ``@head V T``; an entry directive: ``@entry D``)
ROWS = [r for r in _ALL if not r[1].startswith(("@head ", "@entry "))]
HEADS = [r for r in _ALL if r[1].startswith(("@head ", "@entry "))]


def _executor(forms: list[str]) -> list[str]:
    """The executor's verdict on each form: ``ok``, ``refused`` (checker) or ``parse``."""
    try:
        m = parse(gen.module(forms))
    except PtxError:
        if len(forms) == 1:
            return ["parse"]
        h = len(forms) // 2
        return _executor(forms[:h]) + _executor(forms[h:])
    bad = {line for line, _ in problems(m)}
    return ["refused" if gen.FIRST + k in bad else "ok" for k in range(len(forms))]


def test_table_is_large_and_mixed():
    assert len(ROWS) > 5000
    assert sum(v == "ok" for v, _ in ROWS) > 1000
    assert sum(v != "ok" for v, _ in ROWS) > 1000


def test_executor_agrees_with_ptxas_on_every_form():
    got = _executor([f for _, f in ROWS])
    lenient = [f for (v, f), e in zip(ROWS, got, strict=True) if v != "ok" and e == "ok"]
    stricter = [f for (v, f), e in zip(ROWS, got, strict=True) if v == "ok" and e != "ok"]
    assert not lenient, f"{len(lenient)} forms ptxas refuses run here, e.g. {lenient[:10]}"
    assert not stricter, f"{len(stricter)} forms ptxas accepts are refused here, e.g. {stricter[:10]}"


def test_legal_table_is_the_tsv_s():
    """``legal_forms.txt`` (spellings, operand counts, ld/st spaces, oldest versions) is what
    the tool derives from the committed verdicts (not hand-edited)."""
    want = gen.legal_text([f for _, f in ROWS], [v for v, _ in ROWS], ["\t".join(r) for r in HEADS])
    assert want == (ROOT / "sim" / "gpuarray_sim" / "ptx" / "legal_forms.txt").read_text()


def _module_row(what: str) -> str:
    if what.startswith("@head "):
        _, v, t = what.split()
        return f".version {v}\n.target {t}\n.address_size 64\n.visible .entry k()\n{{\n ret;\n}}\n"
    return HEAD + f".visible .entry k() {what[len('@entry '):]}\n{{\n ret;\n}}\n"


def test_executor_agrees_with_ptxas_on_versions_targets_and_directives():
    differ = []
    for v, what in HEADS:
        if "is not defined for option" in v:
            continue  # a target this ptxas does not know
        try:
            m = parse(_module_row(what))
            got = "refused" if problems(m) else "ok"
        except PtxError:
            got = "refused"
        if (v == "ok") != (got == "ok"):
            differ.append((what, v, got))
    assert not differ, differ


# the leniencies the ptxas rehearsal found (test_ptx_ops used to run them), and kin
REFUSED = [
    ("sub.rz.f16 %h0, %h1, %h2;", "sub.rz.f16"),
    ("mul.rm.f16 %h0, %h1, %h2;", "mul.rm.f16"),
    ("add.rp.bf16 %h0, %h1, %h2;", "add.rp.bf16"),
    ("add.ftz.f64 %d0, %d1, %d2;", "add.ftz.f64"),
    ("mul.u32 %r0, %r1, %r2;", "mul.u32"),
    ("cvt.f32.s32 %f0, %s0;", "cvt.f32.s32"),
    ("add.rn.f16x2 %r0, %b1, %b2;", "register %r0 of type .u32"),
    ("cvt.rn.f16x2.f32 %r0, %f0, %f1;", "register %r0 of type .u32"),
    ("add.f32 %f0, %r1, %f1;", "register %r1 of type .u32"),
    ("add.f32 %f0, %f1, 1;", "integer literal"),
    ("add.s32 %s0, %s0, 0f3F800000;", "floating-point literal"),
    ("shl.b32 %b1, %b1, %f0;", "register %f0 of type .f32"),
    # operands as ptxas checks them (issue 44): each was loaded, some failed only at run time
    ("@%b1 add.f32 %f0, %f1, %f2;", "not a predicate"),
    ("ld.global.u64 %r0, [%a0];", "register %r0 of type .u32"),
    ("add.f32 %f0, %f1;", "2 operands"),
    ("add.f32 %f0, %f1, %f2, %f2;", "4 operands"),
    ("bfe.u32 %r0, %r1, 300, 4;", "out of the range"),
    ("cvta.to.global.u64 %a0, %r1;", "register %r1 of type .u32"),
    ("bra.volatile $end;", "does not take"),
    ("ldu.param.u32 %r0, [%a0];", "state space"),
    ("ld.global.pred %p0, [%a0];", "state space"),
    ("ld.global.u32 %r0, [%p0];", "as an address"),
    ("bar.sync 16;", "out of the range"),
    ("bar.sync 1, 33;", "multiple of the warp size"),
    # ld/st's modifiers as ptxas combines them, warp collectives without .sync (part 2)
    ("st.global.sat.u32 [%a0], %r0;", "modifier .sat, which st does not take"),
    ("ld.relaxed.global.u32 %r0, [%a0];", "needs one scope"),
    ("ld.gpu.global.u32 %r0, [%a0];", "a scope without"),
    ("ld.shared.nc.u32 %r0, [%a0];", ".nc needs the .global state space"),
    ("ld.volatile.relaxed.gpu.global.u32 %r0, [%a0];", "more than one of"),
    ("ld.global.ca.cg.u32 %r0, [%a0];", "more than one cache operator"),
    ("ld.relaxed.gpu.global.ca.u32 %r0, [%a0];", "cannot be combined with a cache operator"),
    ("st.global.u32 [%a0], %r0, %r1;", "3 operands"),
    ("shfl.idx.b32 %r0, %r1, %r2, %r1;", "shfl does not take"),
    # what the ptxas-judged mutants of the fuzzer found loading (part 2)
    (".local .u32 lv; ld.global.u32 %r0, [lv];", "state space mismatch"),
    (".shared .u32 sv; ld.u32 %r0, [sv+4]; ld.local.u32 %r0, [sv];", "state space mismatch"),
    ("bra $end, $end;", "2 operands"),
    ("bra %a0;", "a label expected"),
    ("match.any.sync.b32 %r0, %p0, %r1;", "register %p0 of type .pred"),
    ("match.any.sync.b32 %r0, %r1, %d0;", "register %d0 of type .f64"),
    ("redux.sync.min.u32 %d0, %r1, %r2;", "register %d0 of type .f64"),
    ("redux.sync.and.b32 %f0, %r1, %r2;", "register %f0 of type .f32"),
    ("vote.sync.ballot.b32 %r0, %p0, %f0;", "register %f0 of type .f32"),
    ("shfl.sync.idx.b32 %r0, %r1, 0, 31, %f0;", "register %f0 of type .f32"),
    ("sad.rz.u32 %r0, %r1, %r2, %r0;", "sad does not take"),
    ("@%q7 add.f32 %f0, %f1, %f2;", "not a declared register"),
    ("add.f32 %f0, %f3, %f1;", "register %f3 is not declared"),
    ("cvt.u64.u32 %a0, %p2;", "register %p2 is not declared"),
    ("cvt.u64.u32 %zz1, %r0;", "register %zz1 is not declared"),
    ("sad.u32 %r0, %r1, %a0, %r2;", "register %a0 of type .b64"),
]
REGS = (".reg .b16 %h<3>; .reg .f64 %d<3>; .reg .u32 %r<3>; .reg .b32 %b<3>; .reg .f32 %f<3>;"
        " .reg .s32 %s<3>; .reg .pred %p<2>; .reg .b64 %a<2>;")


def _kernel(body: str) -> str:
    return HEAD + f".visible .entry k()\n{{\n  {REGS}\n  {body}\n$end:\n  ret;\n}}\n"


@pytest.mark.parametrize(("body", "what"), REFUSED, ids=[b.split()[0] for b, _ in REFUSED])
def test_refused_at_load_naming_line_and_reason(body, what):
    with pytest.raises(PtxError) as e:
        load(_kernel(body))
    assert e.value.code == 218 and e.value.line == 7
    assert "PTX line 7" in e.value.message and what in e.value.message


def test_refused_through_the_driver_interface():
    b = backend()
    with pytest.raises(CudaError) as e:
        b.module_load_data(_kernel("sub.rz.f16 %h0, %h1, %h2;").encode() + b"\0")
    assert e.value.name == "CUDA_ERROR_INVALID_PTX" and "PTX line 7" in str(e.value)


@pytest.mark.parametrize("body", ["sub.rn.f16 %h0, %h1, %h2;", "add.rn.f16x2 %b0, %b1, %b2;",
                                  "cvt.rn.f16x2.f32 %b0, %f0, %f1;", "add.f32 %f0, %b1, %f1;",
                                  "mul.lo.u32 %r0, %b1, %s2;", "cvt.u16.u32 %h0, %r0;",
                                  "cvt.u32.u16 %r0, %b0;", "add.f32 %f0, %f1, 0f3F800000;",
                                  "ld.global.b16 %f0, [%a0];", "st.global.b8 [%a0], %d0;",
                                  ".shared .u32 sv; ld.u32 %r0, [sv+4];"])
def test_legal_forms_load(body):
    assert not problems(parse(_kernel(body)))
    load(_kernel(body))


@pytest.mark.parametrize(("text", "what"), [
    (".version 7.4\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n ret;\n}\n",
     "does not support .target sm_90"),
    (HEAD + ".visible .entry k() .maxntid 0\n{\n ret;\n}\n", ".maxntid 0"),
    (HEAD + ".visible .entry k() .reqntid 32, 0\n{\n ret;\n}\n", ".reqntid 32, 0"),
])
def test_module_rules_refused_at_load(text, what):
    with pytest.raises(PtxError) as e:
        load(text)
    assert e.value.code == 218 and what in e.value.message


def test_reg_bf16_is_refused():
    with pytest.raises(PtxError) as e:
        load(HEAD + ".visible .entry k()\n{\n  .reg .bf16 %z;\n  ret;\n}\n")
    assert e.value.code == 218 and "register %z of type .bf16" in e.value.message


def test_ptxas_agrees_with_the_table_on_a_sample():
    """The committed verdicts are ptxas's (a sample re-asked of the installed ptxas)."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas (the CUDA toolkit) is not installed: the table cannot be re-asked")
    sample = ROWS[::25]
    got = gen.ptxas_verdicts([f for _, f in sample], ptxas)
    differ = [(f, v, g) for (v, f), g in zip(sample, got, strict=True)
              if (v == "ok") != (g == "ok")]
    assert not differ, differ[:10]


def test_a_bit_size_ld_st_of_a_wider_float_register_runs():
    """ptxas takes ``ld.b16`` into an ``.f32`` register (and ``st.b16`` from one): the PTX ISA's
    relaxed rules for bit-size types, the value zero-extended on load, its low bits stored
    (the translator refused the launch, 200, before)."""
    import numpy as np

    from sim.tests.ptx.support import download, launch, u64, upload

    b = backend()
    text = HEAD + """.visible .entry k(.param .u64 p)
{
  .reg .b64 %a<2>; .reg .f32 %f<2>; .reg .f64 %d<1>; .reg .f16x2 %h<1>;
  ld.param.u64 %a0, [p];
  ld.global.b16 %f0, [%a0];
  st.global.b32 [%a0+8], %f0;
  ld.global.b32 %f1, [%a0+16];
  st.global.b16 [%a0+24], %f1;
  ld.global.b8 %d0, [%a0];
  st.global.b64 [%a0+32], %d0;
  ld.global.b16 %h0, [%a0];
  st.global.b32 [%a0+40], %h0;
  ret;
}
"""
    a = np.array([0xFFFFFFFFFFFFABCD, 0, 0x12345678, 2**64 - 1, 0, 0], np.uint64)
    d = upload(b, a)
    launch(b, text, "k", [u64(d)])
    got = download(b, d, 6, np.uint64)
    assert [hex(x) for x in got[1:]] == ["0xabcd", "0x12345678", "0xffffffffffff5678", "0xcd", "0xabcd"]
