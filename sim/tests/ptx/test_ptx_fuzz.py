"""The executor's differential fuzzer (``sim/tools/ptx_fuzz``): seeded, repeatable, and a referee
that notices.

A small campaign runs here (one program of three kernels: NVRTC's PTX on the
executor vs the host build, a few ptxas-judged mutants); the campaigns of
docs/sim/referees.rst run the tool itself for minutes.  The referee's own
tests show it would report a wrong answer (a changed output word names its
seed, kernel, thread and statement) and a lenient loader (ptxas refusing a
mutant the loader accepts).
"""

from __future__ import annotations

import importlib.util
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "sim" / "tests" / "ptx" / "fixtures"


def _tool():
    spec = importlib.util.spec_from_file_location("ptx_fuzz_run", ROOT / "sim" / "tools" / "ptx_fuzz" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


run = _tool()
gen, mutate = run.gen, run.mutate


def test_a_program_is_a_function_of_its_seed():
    src, kerns = gen.program(7, 3, 20)
    again, kerns2 = gen.program(7, 3, 20)
    assert src == again and [k.kinds for k in kerns] == [k.kinds for k in kerns2]
    assert gen.program(8, 3, 20)[0] != src
    assert gen.inputs(7) == gen.inputs(7) != gen.inputs(8)
    assert len(gen.inputs(7)) == gen.THREADS * gen.INPUTS
    assert [len(k.kinds) for k in kerns] == [20, 20, 20]


def test_shuffle_masks_are_unions_of_aligned_groups_of_their_width():
    """A shuffle's members read only members: its mask is whole groups of its width."""
    seen = 0
    for seed in range(40):
        for line in gen.program(seed, 2, 30)[0].splitlines():
            if "FZ_SHFL" in line and "if (" in line:
                mask = int(line.split("0x", 1)[1][:8], 16)
                width = int(line.rsplit(",", 1)[1].strip(" );"))
                groups = [(mask >> g) & ((1 << width) - 1) for g in range(0, 32, width)]
                assert mask and all(x in (0, (1 << width) - 1) for x in groups), line
                seen += 1
    assert seen > 20


def test_a_wrong_word_is_reported_with_its_statement():
    _src, kerns = gen.program(3, 1, 8)
    host = [np.arange(gen.THREADS * 8, dtype=np.uint64)]
    dev = [host[0].copy()]
    dev[0][5 * 8 + 2] ^= 1  # thread 5, slot 2
    counts = run.Counts()
    run.compare(3, kerns, host, dev, counts)
    assert counts.kernels == 1 and counts.outputs == gen.THREADS * 8
    (d,) = counts.differences
    assert (d.seed, d.kernel, d.thread, d.statement) == (3, "fuzz0", 5, kerns[0].statements[2])
    assert "seed 3 fuzz0 thread 5" in str(d)


def test_nan_against_nan_is_not_a_difference():
    _src, kerns = gen.program(3, 1, 8)
    slots = [i for i, k in enumerate(kerns[0].kinds) if k == "f32"]
    assert slots  # seed 3's draw has one
    host = [np.zeros(gen.THREADS * 8, np.uint64)]
    dev = [host[0].copy()]
    host[0][slots[0]], dev[0][slots[0]] = 0x7FFFFFFF, 0xFFC00000
    counts = run.Counts()
    run.compare(3, kerns, host, dev, counts)
    assert not counts.differences


def test_a_mutant_changes_one_instruction_and_is_seeded():
    text = (FIXTURES / "saxpy.ptx").read_text()
    a = mutate.mutant(text, random.Random(5))
    assert a == mutate.mutant(text, random.Random(5))
    new, what = a
    changed = [(x, y) for x, y in zip(text.split("\n"), new.split("\n"), strict=True) if x != y]
    assert len(changed) == 1 and what.startswith("line ")


def _needs(*what: str) -> None:
    if "ptxas" in what and mutate.ptxas() is None:
        pytest.skip("ptxas (the CUDA toolkit) is not installed: no judge for the mutants")
    if "host" in what:
        if run.compiler() is None:
            pytest.skip("no C++ compiler for the host build")
        if run.cuda_include() is None:
            pytest.skip("CUDA's cuda_fp16.h/cuda_bf16.h are not installed (CUDA_HOME, /usr/local/cuda)")


def test_the_judge_notices_a_lenient_loader(monkeypatch, tmp_path):
    """ptxas refuses most mutants: a loader that accepted everything would be reported."""
    _needs("ptxas")
    text = (FIXTURES / "saxpy.ptx").read_text()
    monkeypatch.setattr(mutate, "_loader_accepts", lambda t: (True, ""))
    v = mutate.judge(text, 12, 1, tmp_path)
    assert v.tried == 12 and v.matrix.get((False, True), 0) == len(v.disagreements) > 0
    assert "ptxas refuses" in v.disagreements[0] and "the loader accepts" in v.disagreements[0]


def test_ptxas_and_the_loader_agree_on_saxpy_s_mutants(tmp_path):
    _needs("ptxas")
    v = mutate.judge((FIXTURES / "saxpy.ptx").read_text(), 20, 2, tmp_path)
    assert v.tried == 20 and sum(v.matrix.values()) + v.crashed == 20
    assert not v.disagreements, v.disagreements


def test_a_small_campaign_agrees():
    """One program (three kernels of 16 statements, 64 threads) and its mutants: no difference."""
    _needs("host")
    mutants = 6 if shutil.which("ptxas") else 0
    counts = run.campaign(range(1), kernels=3, statements=16, mutants=mutants, log=lambda s: None)
    assert not counts.failures, counts.failures
    assert not counts.differences, [str(d) for d in counts.differences]
    assert (counts.programs, counts.kernels, counts.outputs) == (1, 3, 3 * gen.THREADS * 16)
    assert counts.mutants.tried == mutants and not counts.mutants.disagreements
