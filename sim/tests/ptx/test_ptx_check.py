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
from gpuarray_sim.ptx._check import form_key, problems
from gpuarray_sim.ptx._forms import LEGAL

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
ROWS = [tuple(line.split("\t", 1)) for line in gzip.decompress(TABLE.read_bytes()).decode().splitlines()
        if not line.startswith("#")]


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
    """``_forms.LEGAL`` is what the tool derives from the committed table (not hand-edited)."""
    want: dict[str, set[str]] = {}
    for (v, _), it in zip(ROWS, gen.parse_forms([f for _, f in ROWS]), strict=True):
        if it is not None:
            keys = want.setdefault(it.base, set())
            if v == "ok":
                keys.add(form_key(it))
    assert {k: set(v) for k, v in LEGAL.items()} == want


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
]
REGS = (".reg .b16 %h<3>; .reg .f64 %d<3>; .reg .u32 %r<3>; .reg .b32 %b<3>; .reg .f32 %f<3>;"
        " .reg .s32 %s<3>;")


def _kernel(body: str) -> str:
    return HEAD + f".visible .entry k()\n{{\n  {REGS}\n  {body}\n  ret;\n}}\n"


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
                                  "cvt.u32.u16 %r0, %b0;", "add.f32 %f0, %f1, 0f3F800000;"])
def test_legal_forms_load(body):
    assert not problems(parse(_kernel(body)))
    load(_kernel(body))


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
