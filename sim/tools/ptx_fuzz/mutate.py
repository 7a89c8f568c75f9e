"""One-change mutants of real PTX, judged by ptxas: what it refuses the executor must refuse at load.

One concern: make a mutant and compare two verdicts.  :func:`mutant` changes
one instruction of a PTX text (its type, state space or a modifier, one
operand for a register of another class or width, an immediate out of
range, an operand dropped or repeated, the guard); ``ptxas -arch=sm_90``
judges it, and so does the simulator's loader (``gpuarray_sim.ptx.load``:
parse and check).  ptxas refusing what the loader accepts, or accepting
what the loader refuses with 218 (``CUDA_ERROR_INVALID_PTX``), is a
disagreement (the loader may still refuse at launch, with 200, an
instruction the executor does not implement: that is a load).  A mutant
ptxas crashes on (it dies of a signal) has no verdict: it is counted apart.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ptxas", "mutant", "judge", "Verdicts"]

_INSTR = re.compile(r"^(\s*)(@!?%\w+\s+)?([a-z][\w.]*)(\s+)(.*);\s*$")
_TYPES = (".u8", ".u16", ".u32", ".u64", ".s8", ".s16", ".s32", ".s64", ".b8", ".b16", ".b32",
          ".b64", ".f16", ".f32", ".f64", ".pred", ".bf16", ".f16x2", ".b128")
_SPACES = (".global", ".shared", ".local", ".param", ".const")
_MODIFIERS = (".volatile", ".sat", ".ftz", ".rn", ".rz", ".approx", ".uni", ".wide", ".hi", ".lo",
              ".relaxed", ".gpu", ".sync", ".aligned", ".full", ".nc", ".cc", ".noftz", ".relu")
_IMMEDIATES = ("4294967296", "-4294967297", "0x1ffffffffffffffff", "0f7FC00000", "0d3FF0000000000000",
               "1.5", "99", "-1", "65536", "0x80000000")


def ptxas() -> str | None:
    return shutil.which("ptxas")


def _registers(text: str) -> list[str]:
    """Register names the text declares (``.reg .b32 %r<12>`` gives %r0..%r11)."""
    out = []
    for m in re.finditer(r"\.reg\s+\.\w+\s+(%\w+)<(\d+)>", text):
        out += [f"{m.group(1)}{i}" for i in range(min(int(m.group(2)), 4))]
    return out or ["%r1", "%rd1", "%f1", "%fd1", "%p1", "%rs1"]


def mutant(text: str, rng: random.Random) -> tuple[str, str] | None:
    """``text`` with one instruction changed, and what changed (None: nothing to change)."""
    lines = text.split("\n")
    body = [i for i, ln in enumerate(lines) if _INSTR.match(ln) and not ln.lstrip().startswith(".")]
    if not body:
        return None
    regs = _registers(text)
    for _ in range(20):
        i = rng.choice(body)
        ind, guard, op, sp, args = _INSTR.match(lines[i]).groups()  # type: ignore[union-attr]
        guard = guard or ""
        parts = [a.strip() for a in re.split(r",(?![^\[{]*[\]}])", args)]
        kind = rng.randrange(8)
        new_op, new_args, new_guard = op, list(parts), guard
        if kind == 0:  # another type suffix
            ts = [t for t in _TYPES if op.endswith(t) or (t + ".") in op + "."]
            if not ts:
                continue
            old = rng.choice(ts)
            new_op = op.replace(old, rng.choice([t for t in _TYPES if t != old]), 1)
        elif kind == 1:  # another state space
            ss = [s for s in _SPACES if s in op]
            if not ss:
                continue
            new_op = op.replace(ss[0], rng.choice([s for s in _SPACES if s != ss[0]]), 1)
        elif kind == 2:  # a modifier added
            pos = op.find(".")
            cut = pos if pos > 0 else len(op)
            new_op = op[:cut] + rng.choice(_MODIFIERS) + op[cut:]
        elif kind == 3:  # a modifier removed
            mods = re.findall(r"\.\w+", op)
            if len(mods) < 2:
                continue
            new_op = op.replace(rng.choice(mods[:-1]), "", 1)
        elif kind == 4:  # a register of another class or width
            rs = [k for k, a in enumerate(parts) if re.fullmatch(r"%\w+", a)]
            if not rs:
                continue
            k = rng.choice(rs)
            new_args[k] = rng.choice([r for r in regs if r != parts[k]] or regs)
        elif kind == 5:  # an immediate out of range or of another kind
            ks = [k for k, a in enumerate(parts) if re.fullmatch(r"-?(0[xXfFdD])?[0-9a-fA-F.]+", a)]
            if not ks:
                continue
            new_args[rng.choice(ks)] = rng.choice(_IMMEDIATES)
        elif kind == 6:  # an operand dropped or repeated
            if rng.random() < 0.5 and len(parts) > 1:
                del new_args[rng.randrange(len(parts))]
            else:
                new_args.append(rng.choice(parts))
        else:  # the guard: a non-predicate register, or one added
            new_guard = f"@{rng.choice(regs)} "
        new = f"{ind}{new_guard}{new_op}{sp}{', '.join(new_args)};"
        if new != lines[i]:
            out = list(lines)
            out[i] = new
            return "\n".join(out), f"line {i + 1}: {lines[i].strip()}  ->  {new.strip()}"
    return None


@dataclass
class Verdicts:
    """Mutants judged, the confusion matrix of the two verdicts and the disagreements."""

    tried: int = 0
    #: mutants ptxas crashed on (no verdict: left out of the matrix), with an example
    crashed: int = 0
    crash_example: str = ""
    #: ``matrix[(ptxas accepts, loader accepts)]``: how many mutants had those verdicts
    matrix: dict[tuple[bool, bool], int] = field(default_factory=dict)
    disagreements: list[str] = field(default_factory=list)

    def add(self, other: Verdicts) -> None:
        self.tried += other.tried
        self.crashed += other.crashed
        self.crash_example = self.crash_example or other.crash_example
        for k, n in other.matrix.items():
            self.matrix[k] = self.matrix.get(k, 0) + n
        self.disagreements += other.disagreements


def _ptxas_accepts(text: str, workdir: Path) -> tuple[bool | None, str]:
    """ptxas's verdict and its first message; None when it crashed (a signal: no verdict)."""
    src = workdir / "mutant.ptx"
    src.write_text(text, encoding="utf-8")
    r = subprocess.run([ptxas() or "ptxas", "-arch=sm_90", str(src), "-o", str(workdir / "mutant.cubin")],
                       capture_output=True, text=True, timeout=120)
    if r.returncode == 0:
        return True, ""
    if r.returncode < 0:
        return None, f"ptxas died of signal {-r.returncode}"
    lines = [ln for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
    return False, (lines[0] if lines else f"exit status {r.returncode}").replace(str(src), "mutant.ptx")


def _loader_accepts(text: str) -> tuple[bool, str]:
    from gpuarray_sim import ptx

    try:
        ptx.load(text)
    except ptx.PtxError as e:
        return False, f"{e.code}: {e.message}"
    return True, ""


def rebase(text: str, workdir: Path) -> str:
    """``text`` at the newest ``.version`` this ptxas reads (NVRTC may be newer than ptxas).

    Raises
    ------
    RuntimeError
        ptxas or the loader refuses the text itself: no mutant of it can be judged.
    """
    ok, why = _ptxas_accepts(text, workdir)
    m = re.search(r"current version is '(\d+\.\d+)'", why)
    if not ok and m:
        text = re.sub(r"^\.version\s+\S+", f".version {m.group(1)}", text, count=1, flags=re.M)
        ok, why = _ptxas_accepts(text, workdir)
    if not ok:
        raise RuntimeError(f"ptxas refuses the unmutated PTX: {why}")
    ok, why = _loader_accepts(text)
    if not ok:
        raise RuntimeError(f"the loader refuses the unmutated PTX: {why}")
    return text


def judge(text: str, n: int, seed: int, workdir: Path) -> Verdicts:
    """``n`` mutants of ``text`` drawn from ``seed``, each judged by ptxas and by the loader."""
    if ptxas() is None:
        raise RuntimeError("ptxas is not on PATH")
    text = rebase(text, workdir)
    rng = random.Random(seed * 7919 + 1)
    v = Verdicts()
    for _ in range(n):
        m = mutant(text, rng)
        if m is None:
            break
        mtext, what = m
        v.tried += 1
        ok_ptxas, why_ptxas = _ptxas_accepts(mtext, workdir)
        if ok_ptxas is None:
            v.crashed += 1
            v.crash_example = v.crash_example or f"seed {seed} {what}"
            continue
        ok_sim, why_sim = _loader_accepts(mtext)
        v.matrix[ok_ptxas, ok_sim] = v.matrix.get((ok_ptxas, ok_sim), 0) + 1
        if ok_ptxas and not ok_sim:
            v.disagreements.append(f"seed {seed} {what}: ptxas accepts, the loader refuses ({why_sim})")
        elif ok_sim and not ok_ptxas:
            v.disagreements.append(f"seed {seed} {what}: ptxas refuses ({why_ptxas}), the loader accepts")
    return v
