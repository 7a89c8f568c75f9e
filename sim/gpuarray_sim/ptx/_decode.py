"""PTX module to the interpreter's decoded form: per function, its instructions as forms and constants.

One concern: walk each function as the translator does (``_emit.py``:
scopes renamed, declarations hoisted) and turn every instruction into one
step of the interpreter (``ptx_interp.cpp``): a *handler* -- the C++ the
translator's own instruction writers produce for it, with its operands in
slots (``_slots.py``) -- and the constants ``K`` it reads; or a step the
interpreter does itself (branch, return, exit, call of a module function,
indirect call: the register's address looked up among the functions of the
call's prototype).
The handlers' C++ is what :mod:`._interp` compiles, once per distinct form,
for every module that uses it.

A function holding something the executor does not run is *broken* with
the translator's own message, so the entries that reach it are
unlaunchable in both tiers alike (``_emit.entry_facts``).  An instruction
the translator writes but whose form cannot be written with slots makes
the module not interpretable (:class:`NotInterpretable`): it runs
translated.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from . import _ops
from ._ast import Decl, Function, Instr, PtxModule, Reg, Sym, Vec
from ._context import FuncCtx, ModuleLayout
from ._emit import _declare, _rescope, entry_facts
from ._errors import UnsupportedPtx
from ._info import indirect_call
from ._ops_ctl import BUILTIN_CALLS, call_target, callee_skip, indirect_target
from ._slots import SlotCtx

__all__ = ["Step", "DecodedFunction", "Decoded", "decode", "NotInterpretable",
           "HANDLER", "BRA", "RET", "EXIT", "CALL", "ICALL"]

#: Step kinds (``ptx::interp::Op`` of ptx_interp.cpp).
HANDLER, BRA, RET, EXIT, CALL, ICALL = 0, 1, 2, 3, 4, 5


class NotInterpretable(Exception):
    """An instruction the translator writes but the slot writer cannot: run the module translated."""


@dataclass
class Step:
    """One step: ``kind``; ``form`` (a handler's C++) and ``k`` its constants; ``guard`` the
    predicate register's slot + 1 (0: none) and ``neg``; ``target`` (a branch's step, a
    call's function index, an indirect call's register slot); ``back`` (a branch to a label above it: a loop); ``line``."""

    kind: int
    line: int
    form: str = ""
    k: list[int] = field(default_factory=list)
    guard: int = 0
    neg: bool = False
    target: int = 0
    back: bool = False


@dataclass
class DecodedFunction:
    """A function's steps, register file size, ``.local`` frames (slot, size, align, line),
    ``.param`` area bytes, and whether it is an entry."""

    name: str
    steps: list[Step]
    nregs: int
    locals: list[tuple[int, int, int, int]]
    param_bytes: int
    entry: bool


@dataclass
class Decoded:
    """A module decoded: its functions (in module order), each entry's function index and
    local arena bytes, and why each unlaunchable entry cannot run (as the translator says)."""

    functions: list[DecodedFunction]
    entry_index: dict[str, int]
    local_bytes: dict[str, int]
    unsupported: dict[str, str]

    def forms(self) -> set[str]:
        return {s.form for f in self.functions for s in f.steps if s.kind == HANDLER}

    def digest(self) -> str:
        """A hash of everything the decoded module does -- forms, constants, control flow,
        frames, entries -- and of no PTX name: two modules with one digest are one program
        (the key of its translated build, shared across processes)."""
        h = hashlib.sha256()
        for f in self.functions:
            h.update(repr((f.nregs, f.locals, f.param_bytes, f.entry)).encode())
            for s in f.steps:
                h.update(repr((s.kind, s.k, s.guard, s.neg, s.target, s.back, s.line)).encode())
                h.update(s.form.encode() + b"\0")
        h.update(repr((list(self.entry_index.values()), list(self.local_bytes.values()),
                       sorted(self.unsupported.values()))).encode())
        return h.hexdigest()


def _callee(it: Instr) -> str | None:
    for a in it.args:
        if isinstance(a, Sym):
            return a.name
    return None


def _function(tr: ModuleLayout, fn: Function, index: dict[str, int]
              ) -> tuple[DecodedFunction, str | None]:
    fn = replace(fn, body=_rescope(fn.body or []))
    ctx = SlotCtx(tr, fn)
    real = FuncCtx(tr, fn)  # the translator's context, for its messages
    try:
        _declare(ctx)
        _declare(real)
    except UnsupportedPtx as e:
        return DecodedFunction(fn.name, [], 1, [], 0, fn.kind == "entry"), e.message
    # .local frames, in declaration order; .param arrays laid out as the translator
    # declares them (each aligned to max(align, 8), zeroed at entry)
    frames: list[tuple[int, int, int, int]] = []
    seen_local: set[str] = set()
    pbytes = 0
    for d in fn.body or []:
        if isinstance(d, Decl) and d.space == "local" and d.name not in seen_local:
            seen_local.add(d.name)
            frames.append((ctx.slot(d.name), max(d.size, 1), max(d.alignment, 1), d.line))
        elif isinstance(d, Decl) and d.space == "param" and d.name not in ctx.param_offsets:
            align = max(d.alignment, 8)
            pbytes = -(-pbytes // align) * align
            ctx.param_offsets[d.name] = (pbytes, max(d.size, 1))
            pbytes += max(d.size, 1)
    labels: dict[str, int] = {}
    n = 0
    for it in fn.body or []:
        if isinstance(it, tuple) and it[0] == "label":
            labels[it[1]] = n
        elif isinstance(it, Instr):
            n += 1
    steps: list[Step] = []
    for it in fn.body or []:
        if isinstance(it, tuple) and it[0] == "label":
            real.labels_seen.add(it[1])
            continue
        if not isinstance(it, Instr):
            continue
        ctx.line = real.line = it.line
        try:
            step = _step(ctx, real, it, labels, index)
            if it.pred is not None:
                p = it.pred
                if not isinstance(p, Reg) or real.regs.get(p.name) != "pred":
                    real.value(p, "pred")  # the translator's refusal, if it refuses
                    raise NotInterpretable(f"PTX line {it.line}: guard {p!r}")
                step.guard, step.neg = ctx.slot(p.name) + 1, p.neg
        except UnsupportedPtx as e:
            return DecodedFunction(fn.name, [], 1, [], 0, fn.kind == "entry"), e.message
        steps.append(step)
    steps.append(Step(RET, fn.line))  # the end of the body: return
    return DecodedFunction(fn.name, steps, ctx.nslots, frames, pbytes,
                           fn.kind == "entry"), None


def _step(ctx: SlotCtx, real: FuncCtx, it: Instr, labels: dict[str, int],
          index: dict[str, int]) -> Step:
    if it.base == "bra":
        _ops.emit(real, it)  # the translator's checks (an indirect branch)
        name = it.args[0].name
        if name not in labels:
            raise NotInterpretable(f"PTX line {it.line}: branch to an unknown label {name}")
        return Step(BRA, it.line, target=labels[name], back=name in real.labels_seen)
    if it.base == "ret":
        return Step(RET, it.line)
    if it.base == "exit":
        return Step(RET if ctx.fn.kind == "entry" else EXIT, it.line)
    if it.base == "call" and indirect_call(it):
        _ops.emit(real, it)  # the translator's checks and messages
        fp, names, callees = indirect_target(ctx, it)
        if real.regs.get(fp.name) not in ("b64", "u64", "s64"):
            raise NotInterpretable(f"PTX line {it.line}: an indirect call through {fp.name}")
        first = it.args[0]
        nrets = len(first.items) if isinstance(first, Vec) and first.kind == "list" else 0
        # (address, function index | arrays skipped << 32): a function without a result
        # called with one gets the arrays after the result's
        cases = [x for n in callees
                 for x in (ctx.tr.fn_addr[n], index[n] | callee_skip(ctx, n, nrets) << 32)]
        return Step(ICALL, it.line, target=ctx.slot(fp.name),
                    k=[len(names), *(ctx.param_offsets[n][0] for n in names), len(callees),
                       *cases])
    if it.base == "call":
        _ops.emit(real, it)  # the translator's checks and messages
        callee, names, _rets = call_target(ctx, it)
        if callee not in BUILTIN_CALLS:
            return Step(CALL, it.line, target=index[callee],
                        k=[len(names), *(ctx.param_offsets[n][0] for n in names)])
    try:
        form, k = ctx.form(_ops.emit, it)
    except UnsupportedPtx:
        _ops.emit(real, it)  # raises the translator's own message
        raise NotInterpretable(f"PTX line {it.line}: {it.opcode}") from None
    return Step(HANDLER, it.line, form=form, k=k)


def decode(m: PtxModule) -> Decoded:
    """The decoded form of module ``m`` (raises :class:`NotInterpretable`)."""
    tr = ModuleLayout(m)
    defined = [f for f in m.functions.values() if f.body is not None]
    index = {f.name: i for i, f in enumerate(defined)}
    functions, broken = [], {}
    for fn in defined:
        df, why = _function(tr, fn, index)
        functions.append(df)
        if why is not None:
            broken[fn.name] = why
    _exports, local, unsupported = entry_facts(m, broken)
    entries = {name: index[name] for name in m.entries}
    return Decoded(functions, entries, local, unsupported)
