"""PTX instructions to C++ statements: the translator's instruction set.

One concern: for each PTX instruction, the C++ that does what the PTX ISA
says (``emit``), using the operand and memory helpers of ``_emit.FuncCtx``
and the runtime support of ``ptxrt.h``.  An opcode, a modifier or a type
this module does not know raises :class:`._emit.UnsupportedPtx` naming the
instruction -- nothing unknown is ever dropped.
"""

from __future__ import annotations

from ._ast import Addr, Imm, Instr, Reg, Sym, Vec
from ._emit import CTYPE, FLOATS, SIZE, STORAGE, FuncCtx, operand_vec

__all__ = ["emit", "BUILTIN_CALLS"]

#: External functions the executor provides itself.
BUILTIN_CALLS = ("vprintf", "__assertfail")

_TYPES = set(CTYPE)
_ROUND = {"rn": "FE_TONEAREST", "rz": "FE_TOWARDZERO", "rm": "FE_DOWNWARD", "rp": "FE_UPWARD"}
_IROUND = {"rni": 1, "rzi": 2, "rmi": 3, "rpi": 4}
# modifiers that change nothing the simulator can observe (caching, scope, hints)
_IGNORED = {"uni", "nc", "volatile", "relaxed", "acquire", "release", "acq_rel", "weak", "sc",
            "cta", "gpu", "sys", "cluster", "ca", "cg", "cs", "lu", "cv", "wb", "wt",
            "aligned", "sync", "L1::evict_normal", "L1::evict_last", "L1::no_allocate",
            "L1::evict_first", "L1::evict_unchanged", "L2::64B", "L2::128B", "L2::256B",
            "noftz", "full", "approx", "mmio", "L2::cache_hint"}


def _types(it: Instr) -> list[str]:
    return [m for m in it.mods if m in _TYPES]


def _type(ctx: FuncCtx, it: Instr) -> str:
    ts = _types(it)
    if not ts:
        raise ctx.error(f"{it.opcode}: no type")
    return ts[-1]


def _check_mods(ctx: FuncCtx, it: Instr, allowed: set[str]) -> None:
    for m in it.mods:
        if m not in allowed and m not in _TYPES and m not in _IGNORED:
            raise ctx.error(f"{it.opcode}: the modifier .{m} is not supported")


def _signed(t: str) -> bool:
    return t[0] == "s"


def emit(ctx: FuncCtx, it: Instr) -> str:
    """The C++ statement(s) of instruction ``it``."""
    fn = _HANDLERS.get(it.base)
    if fn is None:
        raise ctx.error(f"the instruction {it.opcode} is not supported by the simulator's PTX "
                        "executor")
    return fn(ctx, it)


def _nargs(ctx: FuncCtx, it: Instr, *counts: int) -> None:
    if len(it.args) not in counts:
        raise ctx.error(f"{it.opcode}: {len(it.args)} operands")


# ------------------------------------------------------------------ moves
def _mov(ctx: FuncCtx, it: Instr) -> str:
    _nargs(ctx, it, 2)
    t = _type(ctx, it)
    d, a = it.args
    if isinstance(d, Vec):  # unpack: mov.b64 {%r1, %r2}, %rd1
        parts = operand_vec(d)
        w = SIZE[CTYPE[t]] // len(parts)
        u = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t"}[w]
        src = ctx.value(a, {2: "b16", 4: "b32", 8: "b64"}[SIZE[CTYPE[t]]])
        out = [f"{{ const auto v_ = {src};"]
        for i, p in enumerate(parts):
            if p is not None:
                out.append(ctx.assign(p, f"({u})(v_ >> {8 * w * i})", u))
        return " ".join(out) + " }"
    if isinstance(a, Vec):  # pack
        parts = operand_vec(a)
        w = SIZE[CTYPE[t]] // len(parts)
        wt = {1: "b8", 2: "b16", 4: "b32"}[w]
        big = {2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}[SIZE[CTYPE[t]]]
        expr = " | ".join(f"(({big}){ctx.value(p, wt)} << {8 * w * i})"
                          for i, p in enumerate(parts))
        return ctx.assign(d, f"({big})({expr})", big)
    return ctx.assign(d, ctx.value(a, t), CTYPE[t])


def _cvta(ctx: FuncCtx, it: Instr) -> str:
    _nargs(ctx, it, 2)
    d, a = it.args
    to = "to" in it.mods
    space = next((m for m in it.mods if m in ("global", "shared", "local", "const", "param")),
                 None)
    if space is None:
        raise ctx.error(f"{it.opcode}: no state space")
    v = ctx.value(a, "u64")
    base = {"shared": "ptx::kShared", "local": "0", "param": "0"}.get(space)
    if space in ("global", "const", "local", "param") or base is None:
        return ctx.assign(d, v, "uint64_t")  # these windows are generic already
    if to:
        return ctx.assign(d, f"({v} - {base})", "uint64_t")
    return ctx.assign(d, f"({v} + {base})", "uint64_t")


def _isspacep(ctx: FuncCtx, it: Instr) -> str:
    d, a = it.args
    v = ctx.value(a, "u64")
    top = {"shared": 1, "local": 2, "param": 3}.get(it.mods[0])
    if top is None:
        return ctx.assign(d, f"(({v} >> 48) == 0 || ({v} >> 48) >= 16)", "bool")
    return ctx.assign(d, f"(({v} >> 48) == {top})", "bool")


# ----------------------------------------------------------------- memory
def _space(it: Instr) -> str:
    for m in it.mods:
        if m in ("global", "shared", "local", "param", "const", "generic"):
            return m
    return "generic"


def _vec(it: Instr) -> int:
    for m in it.mods:
        if m in ("v2", "v4", "v8"):
            return int(m[1:])
    return 1


_PTR = {"global": "gptr", "const": "gptr", "shared": "sptr", "local": "lptr", "generic": "genptr"}


def _ptr(ctx: FuncCtx, it: Instr, a, size: int, write: bool) -> str:
    if not isinstance(a, Addr):
        raise ctx.error(f"{it.opcode}: the address operand is not [...]")
    space = _space(it)
    if space == "param":
        return ctx.param_ptr(a, size, write, it.line)
    return f"ptx::{_PTR[space]}(T, {ctx.address(a)}, {size}, {int(write)}, {it.line})"


def _ld(ctx: FuncCtx, it: Instr) -> str:
    _check_mods(ctx, it, {"global", "shared", "local", "param", "const", "generic", "v2", "v4",
                          "ldu"})
    _nargs(ctx, it, 2, 3)
    t = _type(ctx, it)
    ct = CTYPE[t]
    n = _vec(it)
    dsts = operand_vec(it.args[0])
    if len(dsts) != n:
        raise ctx.error(f"{it.opcode}: {len(dsts)} destinations for .v{n}")
    size = SIZE[ct] if t != "pred" else 1
    out = [f"{{ const char* p_ = {_ptr(ctx, it, it.args[1], size * n, False)};"]
    for i, dst in enumerate(dsts):
        if dst is not None:
            out.append(ctx.assign(dst, f"ptx::load<{ct}>(p_ + {i * size})", ct))
    return " ".join(out) + " }"


def _st(ctx: FuncCtx, it: Instr) -> str:
    _check_mods(ctx, it, {"global", "shared", "local", "param", "generic", "v2", "v4"})
    _nargs(ctx, it, 2, 3)
    t = _type(ctx, it)
    ct = CTYPE[t]
    n = _vec(it)
    srcs = operand_vec(it.args[1])
    if len(srcs) != n:
        raise ctx.error(f"{it.opcode}: {len(srcs)} sources for .v{n}")
    size = SIZE[ct]
    out = [f"{{ char* p_ = {_ptr(ctx, it, it.args[0], size * n, True)};"]
    for i, s in enumerate(srcs):
        out.append(f"ptx::store<{ct}>(p_ + {i * size}, {ctx.value(s, t)});")
    return " ".join(out) + " }"


_ATOM_OPS = {"add", "and", "or", "xor", "exch", "cas", "inc", "dec", "min", "max"}


def _atom(ctx: FuncCtx, it: Instr) -> str:
    red = it.base == "red"
    _check_mods(ctx, it, _ATOM_OPS | {"global", "shared", "generic"})
    op = next((m for m in it.mods if m in _ATOM_OPS), None)
    if op is None:
        raise ctx.error(f"{it.opcode}: no operation")
    t = _type(ctx, it)
    ct = CTYPE[t]
    if t in ("f16", "bf16", "f16x2", "bf16x2") or _vec(it) != 1:
        raise ctx.error(f"{it.opcode}: atomics on .{t} or vectors are not supported")
    args = it.args if not red else [None] + it.args
    d, a = args[0], args[1]
    b = ctx.value(args[2], t)
    p = _ptr(ctx, it, a, SIZE[ct], True)
    if op == "cas":
        c = ctx.value(args[3], t)
        call = f"ptx::atom_cas<{ct}>(p_, {b}, {c})"
    else:
        body = {
            "add": f"({ct})(o + b_)", "and": f"({ct})(o & b_)", "or": f"({ct})(o | b_)",
            "xor": f"({ct})(o ^ b_)", "exch": "b_",
            "inc": f"({ct})(o >= b_ ? 0 : o + 1)", "dec": f"({ct})((o == 0 || o > b_) ? b_ : o - 1)",
            "min": "(o < b_ ? o : b_)" if ct not in FLOATS else "ptx::fmin_(o, b_)",
            "max": "(o > b_ ? o : b_)" if ct not in FLOATS else "ptx::fmax_(o, b_)",
        }[op]
        if op in ("and", "or", "xor") and ct in FLOATS:
            raise ctx.error(f"{it.opcode}: bit operation on a float")
        call = f"ptx::atom_rmw<{ct}>(p_, [&]({ct} o) {{ return {body}; }})"
    out = f"{{ char* p_ = {p}; const {ct} b_ = {b}; (void)b_; "
    if d is None or red:
        return out + f"(void){call}; }}"
    return out + ctx.assign(d, call, ct) + " }"


# ------------------------------------------------------------- arithmetic
def _fop(ctx: FuncCtx, it: Instr, ct: str, expr: str, rounded: str | None) -> str:
    """A float result: rounding by mode (``rounded`` the directed form), .sat, .ftz."""
    mode = next((m for m in it.mods if m in _ROUND), "rn")
    if mode != "rn":
        if rounded is None:
            raise ctx.error(f"{it.opcode}: rounding .{mode} is not supported here")
        expr = rounded.replace("MODE", _ROUND[mode])
    if "ftz" in it.mods and ct == "float":
        expr = f"ptx::ftz({expr})"
    if "sat" in it.mods:
        expr = f"ptx::sat01({expr})"
    return expr


def _fin(ctx: FuncCtx, it: Instr, op, t: str) -> str:
    v = ctx.value(op, t)
    if "ftz" in it.mods and t == "f32":
        return f"ptx::ftz({v})"
    return v


def _arith(ctx: FuncCtx, it: Instr) -> str:
    t = _type(ctx, it)
    ct = CTYPE[t]
    base = it.base
    if t in ("f16", "bf16", "f16x2", "bf16x2"):
        raise ctx.error(f"{it.opcode}: half-precision arithmetic is not supported")
    d = it.args[0]
    if ct in FLOATS:
        _check_mods(ctx, it, set(_ROUND) | {"ftz", "sat", "NaN", "xorsign", "abs", "lo"})
        a = _fin(ctx, it, it.args[1], t)
        b = _fin(ctx, it, it.args[2], t) if len(it.args) > 2 else None
        c = _fin(ctx, it, it.args[3], t) if len(it.args) > 3 else None
        if base in ("add", "sub"):
            bb = b if base == "add" else f"(-{b})"
            expr = _fop(ctx, it, ct, f"({a} + {bb})", f"ptx::rnd_add({a}, {bb}, MODE)")
        elif base == "mul":
            expr = _fop(ctx, it, ct, f"({a} * {b})", f"ptx::rnd_mul({a}, {b}, MODE)")
        elif base in ("fma", "mad"):
            f = "fmaf" if ct == "float" else "fma"
            expr = _fop(ctx, it, ct, f"{f}({a}, {b}, {c})", f"ptx::rnd_fma({a}, {b}, {c}, MODE)")
        elif base == "div":
            expr = _fop(ctx, it, ct, f"({a} / {b})", f"ptx::rnd_div({a}, {b}, MODE)")
        elif base in ("min", "max"):
            if "NaN" in it.mods:
                expr = f"(({a}) != ({a}) || ({b}) != ({b}) ? ({ct})NAN : ptx::f{base}_({a}, {b}))"
            else:
                expr = f"ptx::f{base}_({a}, {b})"
            expr = _fop(ctx, it, ct, expr, None)
        else:
            raise ctx.error(f"{it.opcode} is not supported")
        return ctx.assign(d, expr, ct)
    # integers
    _check_mods(ctx, it, {"lo", "hi", "wide", "cc", "sat", "relu"})
    a = ctx.value(it.args[1], t)
    b = ctx.value(it.args[2], t) if len(it.args) > 2 else None
    c_op = it.args[3] if len(it.args) > 3 else None
    size = SIZE[ct]
    wide = {1: ("uint16_t", "int16_t"), 2: ("uint32_t", "int32_t"), 4: ("uint64_t", "int64_t"),
            8: ("unsigned __int128", "__int128")}[size]
    wt = wide[1] if _signed(t) else wide[0]
    cc = "cc" in it.mods
    carry_in = base in ("addc", "subc", "madc")
    if base in ("add", "sub", "addc", "subc") and (cc or carry_in):
        u = CTYPE["u" + t[1:]] if t[0] != "u" else ct
        ua, ub = f"(({u}){a})", f"(({u}){b})"
        wu = wide[0]
        cin = "CC" if carry_in else "0"
        if base.startswith("add"):
            s = f"(({wu}){ua} + ({wu}){ub} + ({wu}){cin})"
            out = f"{{ const {wu} s_ = {s}; " + ctx.assign(d, f"({ct})s_", ct)
            if cc:
                out += f" CC = (uint32_t)(s_ >> {8 * size});"
            return out + " }"
        s = f"(({wu}){ua} - ({wu}){ub} - ({wu}){cin})"
        out = f"{{ const {wu} s_ = {s}; " + ctx.assign(d, f"({ct})s_", ct)
        if cc:
            out += f" CC = (uint32_t)((s_ >> {8 * size}) & 1);"
        return out + " }"
    if base == "add":
        expr = f"ptx::sat_add<{ct}>({a}, {b})" if "sat" in it.mods else f"({ct})({a} + {b})"
    elif base == "sub":
        expr = f"ptx::sat_sub<{ct}>({a}, {b})" if "sat" in it.mods else f"({ct})({a} - {b})"
    elif base == "mul":
        if "wide" in it.mods:
            return ctx.assign(d, f"(({wt}){a} * ({wt}){b})", wt)
        if "hi" in it.mods:
            if size == 8:
                f = "ptx::mulhi_s64" if _signed(t) else "ptx::mulhi_u64"
                expr = f"{f}({a}, {b})"
            else:
                expr = f"({ct})((({wt}){a} * ({wt}){b}) >> {8 * size})"
        else:
            expr = f"({ct})({a} * {b})"
    elif base in ("mad", "madc"):
        c = ctx.value(c_op, t if "wide" not in it.mods else
                      {1: "16", 2: "32", 4: "64"}.get(size, "64").join((t[0], "")))
        cin = " + CC" if base == "madc" else ""
        if "wide" in it.mods:
            prod = f"(({wt}){a} * ({wt}){b})"
            rt = wt
        elif "hi" in it.mods:
            if size == 8:
                f = "ptx::mulhi_s64" if _signed(t) else "ptx::mulhi_u64"
                prod = f"({ct}){f}({a}, {b})"
            else:
                prod = f"({ct})((({wt}){a} * ({wt}){b}) >> {8 * size})"
            rt = ct
        else:
            prod = f"({ct})({a} * {b})"
            rt = ct
        if cc:
            ut = {"int32_t": "uint32_t", "int64_t": "uint64_t"}.get(rt, rt)
            big = "uint64_t" if SIZE.get(ut, 16) == 4 else "unsigned __int128"
            out = (f"{{ const {big} s_ = ({big})({ut}){prod} + ({big})({ut}){c}{cin}; "
                   + ctx.assign(d, f"({rt})s_", rt)
                   + f" CC = (uint32_t)(s_ >> {8 * SIZE.get(ut, 8)}); }}")
            return out
        if "sat" in it.mods:
            return ctx.assign(d, f"ptx::sat_add<{rt}>({prod}, {c})", rt)
        return ctx.assign(d, f"({rt})({prod} + {c}{cin})", rt)
    elif base == "div":
        expr = f"ptx::idiv<{ct}>({a}, {b})"
    elif base == "rem":
        expr = f"ptx::irem<{ct}>({a}, {b})"
    elif base == "min":
        expr = f"({a} < {b} ? {a} : {b})"
    elif base == "max":
        expr = f"({a} > {b} ? {a} : {b})"
    else:
        raise ctx.error(f"{it.opcode} is not supported")
    if "relu" in it.mods:
        expr = f"({expr} < 0 ? ({ct})0 : {expr})"
    return ctx.assign(d, expr, ct)


def _unary(ctx: FuncCtx, it: Instr) -> str:
    t = _type(ctx, it)
    ct = CTYPE[t]
    d = it.args[0]
    base = it.base
    if ct in FLOATS:
        _check_mods(ctx, it, set(_ROUND) | {"ftz", "sat", "approx", "full", "NaN"})
        a = _fin(ctx, it, it.args[1], t)
        lib = {"float": "f", "double": ""}[ct]
        one = f"({ct})1"
        simple = {
            "abs": f"fabs{lib}({a})", "neg": f"(-{a})",
            "sqrt": f"sqrt{lib}({a})", "rcp": f"({one} / {a})",
            "rsqrt": f"({ct})(1.0 / sqrt((double){a}))" if ct == "float"
                     else f"({one} / sqrt({a}))",
            "ex2": f"exp2{lib}({a})", "lg2": f"log2{lib}({a})", "sin": f"sin{lib}({a})",
            "cos": f"cos{lib}({a})", "tanh": f"tanh{lib}({a})",
        }
        if base not in simple:
            raise ctx.error(f"{it.opcode} is not supported")
        rounded = {"sqrt": f"ptx::rnd_sqrt({a}, MODE)", "rcp": f"ptx::rnd_div({one}, {a}, MODE)"}
        expr = _fop(ctx, it, ct, simple[base], rounded.get(base))
        return ctx.assign(d, expr, ct)
    _check_mods(ctx, it, {"shiftamt"})
    a = ctx.value(it.args[1], t)
    u = CTYPE["b" + t[1:]] if t != "pred" else "bool"
    if base == "abs":
        expr = f"({ct})({a} < 0 ? ({ct})(0 - ({u}){a}) : {a})"
    elif base == "neg":
        expr = f"({ct})(0 - ({u}){a})"
    elif base == "not":
        expr = f"(!{a})" if t == "pred" else f"({ct})(~{a})"
    elif base == "cnot":
        expr = f"({ct})({a} == 0)"
    elif base == "popc":
        return ctx.assign(d, f"(uint32_t)__builtin_popcountll((uint64_t)({u}){a})", "uint32_t")
    elif base == "clz":
        return ctx.assign(d, f"ptx::clz<{u}>(({u}){a})", "uint32_t")
    elif base == "brev":
        expr = f"ptx::brev<{ct}>({a})"
    elif base == "bfind":
        bits = 8 * SIZE[ct]
        msb = (f"({a} < 0 ? {bits - 1} - (int)ptx::clz<{u}>(~({u}){a}) : "
               f"{bits - 1} - (int)ptx::clz<{u}>(({u}){a}))" if _signed(t)
               else f"({bits - 1} - (int)ptx::clz<{u}>(({u}){a}))")
        nonzero = f"(({a}) != 0 && ({a}) != ({ct})-1)" if _signed(t) else f"(({a}) != 0)"
        val = f"({bits - 1} - ({msb}))" if "shiftamt" in it.mods else f"({msb})"
        return ctx.assign(d, f"({nonzero} ? (uint32_t)({val}) : 0xffffffffu)", "uint32_t")
    else:
        raise ctx.error(f"{it.opcode} is not supported")
    return ctx.assign(d, expr, ct)


def _logic(ctx: FuncCtx, it: Instr) -> str:
    t = _type(ctx, it)
    ct = CTYPE[t]
    d, a, b = it.args[:3]
    va, vb = ctx.value(a, t), ctx.value(b, t)
    sym = {"and": "&", "or": "|", "xor": "^"}[it.base]
    if t == "pred":
        sym = {"and": "&&", "or": "||", "xor": "!="}[it.base]
        return ctx.assign(d, f"({va} {sym} {vb})", "bool")
    return ctx.assign(d, f"({ct})({va} {sym} {vb})", ct)


def _shift(ctx: FuncCtx, it: Instr) -> str:
    t = _type(ctx, it)
    ct = CTYPE[t]
    d, a, b = it.args
    va, vb = ctx.value(a, t), ctx.value(b, "u32")
    if it.base == "shl":
        return ctx.assign(d, f"ptx::shl<{ct}>({va}, {vb})", ct)
    return ctx.assign(d, f"ptx::shr<{ct}>({va}, {vb})", ct)


def _shf(ctx: FuncCtx, it: Instr) -> str:
    d, a, b, c = it.args
    va, vb, vc = ctx.value(a, "u32"), ctx.value(b, "u32"), ctx.value(c, "u32")
    n = f"({vc} & 31u)" if "wrap" in it.mods else f"({vc} > 32u ? 32u : {vc})"
    x = f"(((uint64_t){vb} << 32) | {va})"
    if "l" in it.mods:
        return ctx.assign(d, f"(uint32_t)((({x}) << {n}) >> 32)", "uint32_t")
    return ctx.assign(d, f"(uint32_t)(({x}) >> {n})", "uint32_t")


def _bits(ctx: FuncCtx, it: Instr) -> str:
    t = _type(ctx, it)
    ct = CTYPE[t]
    if it.base == "bfe":
        d, a, b, c = it.args
        return ctx.assign(d, f"ptx::bfe<{ct}>({ctx.value(a, t)}, {ctx.value(b, 'u32')}, "
                             f"{ctx.value(c, 'u32')}, {str(_signed(t)).lower()})", ct)
    if it.base == "bfi":
        d, f, b, c, e = it.args
        return ctx.assign(d, f"ptx::bfi<{ct}>({ctx.value(f, t)}, {ctx.value(b, t)}, "
                             f"{ctx.value(c, 'u32')}, {ctx.value(e, 'u32')})", ct)
    if it.base == "prmt":
        modes = {"f4e": 1, "b4e": 2, "rc8": 3, "ecl": 4, "ecr": 5, "rc16": 6}
        mode = next((modes[m] for m in it.mods if m in modes), 0)
        d, a, b, c = it.args
        return ctx.assign(d, f"ptx::prmt({ctx.value(a, 'b32')}, {ctx.value(b, 'b32')}, "
                             f"{ctx.value(c, 'b32')}, {mode})", "uint32_t")
    if it.base == "lop3":
        d, a, b, c, lut = it.args
        if not isinstance(lut, Imm):
            raise ctx.error("lop3 with a non-constant table")
        va, vb, vc = (ctx.value(x, t) for x in (a, b, c))
        terms = []
        for i in range(8):
            if lut.value >> i & 1:
                terms.append(f"({va if i & 4 else '~' + va} & {vb if i & 2 else '~' + vb} & "
                             f"{vc if i & 1 else '~' + vc})")
        return ctx.assign(d, f"({ct})({' | '.join(terms) or '0'})", ct)
    raise ctx.error(f"{it.opcode} is not supported")


_CMP_INT = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
            "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}


def _compare(ctx: FuncCtx, it: Instr, t: str, a, b) -> str:
    cmp = next((m for m in it.mods if m in _CMP_INT or m in ("equ", "neu", "ltu", "leu", "gtu",
                                                             "geu", "num", "nan")), None)
    if cmp is None:
        raise ctx.error(f"{it.opcode}: no comparison")
    ct = CTYPE[t]
    va, vb = _fin(ctx, it, a, t), _fin(ctx, it, b, t)
    if ct in FLOATS:
        if cmp == "num":
            return f"(({va}) == ({va}) && ({vb}) == ({vb}))"
        if cmp == "nan":
            return f"(({va}) != ({va}) || ({vb}) != ({vb}))"
        if cmp.endswith("u") and cmp[:-1] in _CMP_INT:
            return f"(!(({va}) == ({va}) && ({vb}) == ({vb})) || ({va} {_CMP_INT[cmp[:-1]]} {vb}))"
        if cmp == "ne":  # ordered: false when either is NaN
            return f"(({va}) == ({va}) && ({vb}) == ({vb}) && {va} != {vb})"
        return f"({va} {_CMP_INT[cmp]} {vb})"
    if cmp in ("lo", "ls", "hi", "hs"):
        u = CTYPE["u" + t[1:]]
        va, vb = f"(({u}){va})", f"(({u}){vb})"
    return f"({va} {_CMP_INT[cmp]} {vb})"


def _setp(ctx: FuncCtx, it: Instr) -> str:
    t = _type(ctx, it)
    if t in ("f16", "bf16", "f16x2", "bf16x2"):
        raise ctx.error(f"{it.opcode}: half-precision comparison is not supported")
    d = it.args[0]
    expr = _compare(ctx, it, t, it.args[1], it.args[2])
    boolop = next((m for m in it.mods if m in ("and", "or", "xor")), None)
    if boolop:
        c = ctx.value(it.args[3], "pred")
        sym = {"and": "&&", "or": "||", "xor": "!="}[boolop]
        full = f"({expr} {sym} {c})"
        neg = f"((!{expr}) {sym} {c})"
    else:
        full, neg = expr, f"(!{expr})"
    if isinstance(d, Vec):
        p, q = d.items
        return (f"{{ const bool r_ = {full}; const bool q_ = {neg}; "
                + ctx.assign(p, "r_", "bool") + " " + ctx.assign(q, "q_", "bool") + " }")
    return ctx.assign(d, full, "bool")


def _selp(ctx: FuncCtx, it: Instr) -> str:
    t = _type(ctx, it)
    d, a, b, c = it.args
    return ctx.assign(d, f"({ctx.value(c, 'pred')} ? {ctx.value(a, t)} : {ctx.value(b, t)})",
                      CTYPE[t])


def _testp(ctx: FuncCtx, it: Instr) -> str:
    t = _type(ctx, it)
    d, a = it.args
    v = ctx.value(a, t)
    kind = next(m for m in it.mods if m not in _TYPES)
    expr = {"finite": f"isfinite({v})", "infinite": f"isinf({v})",
            "number": f"!isnan({v})", "notanumber": f"isnan({v})",
            "normal": f"isnormal({v})", "subnormal": f"(fpclassify({v}) == FP_SUBNORMAL)"}.get(kind)
    if expr is None:
        raise ctx.error(f"{it.opcode} is not supported")
    return ctx.assign(d, expr, "bool")


def _copysign(ctx: FuncCtx, it: Instr) -> str:
    t = _type(ctx, it)
    d, a, b = it.args
    f = "copysignf" if t == "f32" else "copysign"
    return ctx.assign(d, f"{f}({ctx.value(b, t)}, {ctx.value(a, t)})", CTYPE[t])


# ------------------------------------------------------------ conversions
def _cvt(ctx: FuncCtx, it: Instr) -> str:
    ts = _types(it)
    if len(ts) != 2:
        raise ctx.error(f"{it.opcode}: expected a destination and a source type")
    dt, st = ts
    _check_mods(ctx, it, set(_ROUND) | set(_IROUND) | {"ftz", "sat", "relu", "satfinite"})
    if "relu" in it.mods or "satfinite" in it.mods or len(it.args) != 2:
        raise ctx.error(f"{it.opcode} is not supported")
    d, a = it.args
    dct, sct = CTYPE[dt], CTYPE[st]
    half = {"f16": ("ptx::h2f", "ptx::f2h"), "bf16": ("ptx::bf2f", "ptx::f2bf")}
    mode = next((m for m in it.mods if m in _ROUND), "rn")
    imode = next((m for m in it.mods if m in _IROUND), None)
    v = ctx.value(a, st)
    # the source as a C++ value
    if st in half:
        src, sval = "double", f"(double){half[st][0]}({v})"
    else:
        src, sval = sct, v
        if st == "f32" and "ftz" in it.mods:
            sval = f"ptx::ftz({sval})"
    if dt in half:
        if imode:
            raise ctx.error(f"{it.opcode} is not supported")
        x = f"{half[dt][1]}((double){sval}, {_ROUND[mode]})"
        if src not in FLOATS:
            x = f"{half[dt][1]}(ptx::i2f<double, {src}>({sval}, FE_TONEAREST), {_ROUND[mode]})"
            if SIZE[src] == 8:
                raise ctx.error(f"{it.opcode}: 64-bit integer to half is not supported")
        if "sat" in it.mods:
            x = f"{half[dt][1]}(ptx::sat01((double){half[dt][0]}({x})), FE_TONEAREST)"
        return ctx.assign(d, x, "uint16_t")
    if dct in FLOATS:
        if src in FLOATS:
            if imode:  # round to an integral value in the same format
                f = {"rni": "nearbyint", "rzi": "trunc", "rmi": "floor", "rpi": "ceil"}[imode]
                x = f"({dct}){f}((double){sval})"
            elif dct == "float" and src == "double":
                x = f"(float){sval}" if mode == "rn" else f"ptx::rnd_f32({sval}, {_ROUND[mode]})"
            else:
                x = f"({dct}){sval}"  # exact
        else:
            x = (f"({dct}){sval}" if mode == "rn" else
                 f"ptx::i2f<{dct}, {src}>({sval}, {_ROUND[mode]})")
        if "ftz" in it.mods and dct == "float":
            x = f"ptx::ftz({x})"
        if "sat" in it.mods:
            x = f"ptx::sat01({x})"
        return ctx.assign(d, x, dct)
    # integer destination
    if src in FLOATS:
        m = _IROUND.get(imode or "rzi")
        return ctx.assign(d, f"ptx::f2i<{dct}>((double){sval}, {m})", dct)
    if "sat" in it.mods:
        lo = f"(({src})std::numeric_limits<{dct}>::min())"
        hi = f"(({src})std::numeric_limits<{dct}>::max())"
        # compare in the wider of the two, keeping signs
        x = (f"ptx::clamp_int<{dct}, {src}>({sval})")
        del lo, hi
        return ctx.assign(d, x, dct)
    return ctx.assign(d, f"({dct}){sval}", dct)


# -------------------------------------------------------- control, sync
def _bra(ctx: FuncCtx, it: Instr) -> str:
    tgt = it.args[0]
    if not isinstance(tgt, Sym):
        raise ctx.error(f"{it.opcode}: indirect branch")
    from ._emit import cname
    return f"goto {cname('L', tgt.name)};"


def _ret(ctx: FuncCtx, it: Instr) -> str:
    return "goto L__ret_;"


def _exit(ctx: FuncCtx, it: Instr) -> str:
    return "goto L__ret_;" if ctx.fn.kind == "entry" else "throw ptx::Exit();"


def _trap(ctx: FuncCtx, it: Instr) -> str:
    return f'ptx::trap(T, {it.line}, "trap instruction");'


def _nop(ctx: FuncCtx, it: Instr) -> str:
    return ";"


def _fence(ctx: FuncCtx, it: Instr) -> str:
    return "__atomic_thread_fence(__ATOMIC_SEQ_CST);"


def _bar(ctx: FuncCtx, it: Instr) -> str:
    mods = [m for m in it.mods if m not in ("cta", "aligned", "sync") or m == "sync"]
    if it.base == "bar" and "warp" in mods:
        mask = ctx.value(it.args[0], "b32")
        return f"ptx::collective(T, ptx::WARP_SYNC, {mask}, 0, 0, 0, {it.line});"
    arrive = "arrive" in mods
    red = next((m for m in ("popc", "and", "or") if m in mods), None)
    args = list(it.args)
    d = args.pop(0) if red else None
    pred = ctx.value(args.pop(), "pred") if red else "false"
    bid = ctx.value(args[0], "u32")
    cnt = ctx.value(args[1], "u32") if len(args) > 1 else "0u"
    if arrive:
        return f"ptx::bar_arrive(T, {bid}, {cnt});"
    op = {"popc": 1, "and": 2, "or": 3}.get(red or "", 0)
    call = f"ptx::bar_sync(T, {bid}, {cnt}, {op}, {pred}, {it.line})"
    if d is None:
        return call + ";"
    return ctx.assign(d, call if red == "popc" else f"({call} != 0)",
                      "uint32_t" if red == "popc" else "bool")


def _shfl(ctx: FuncCtx, it: Instr) -> str:
    if "sync" not in it.mods:
        raise ctx.error(f"{it.opcode}: shfl without .sync (removed after sm_6x) is not supported")
    mode = next((m for m in it.mods if m in ("up", "down", "bfly", "idx")), None)
    if mode is None:
        raise ctx.error(f"{it.opcode}: no shuffle mode")
    kind = {"up": "SHFL_UP", "down": "SHFL_DOWN", "bfly": "SHFL_BFLY", "idx": "SHFL_IDX"}[mode]
    d, a, b, c, mask = it.args
    dp = None
    if isinstance(d, Vec):
        d, dp = d.items
    call = (f"ptx::collective(T, ptx::{kind}, {ctx.value(mask, 'b32')}, {ctx.value(a, 'b32')}, "
            f"{ctx.value(b, 'b32')}, {ctx.value(c, 'b32')}, {it.line}, &p_)")
    out = f"{{ bool p_ = false; const uint32_t r_ = (uint32_t){call}; "
    out += ctx.assign(d, "r_", "uint32_t")
    if dp is not None:
        out += " " + ctx.assign(dp, "p_", "bool")
    return out + " }"


def _vote(ctx: FuncCtx, it: Instr) -> str:
    if "sync" not in it.mods:
        raise ctx.error(f"{it.opcode}: vote without .sync is not supported")
    mode = next(m for m in it.mods if m in ("all", "any", "uni", "ballot"))
    d, a, mask = it.args
    kind = {"all": "VOTE_ALL", "any": "VOTE_ANY", "uni": "VOTE_UNI", "ballot": "VOTE_BALLOT"}[mode]
    call = (f"ptx::collective(T, ptx::{kind}, {ctx.value(mask, 'b32')}, "
            f"(uint64_t){ctx.value(a, 'pred')}, 0, 0, {it.line})")
    if mode == "ballot":
        return ctx.assign(d, f"(uint32_t){call}", "uint32_t")
    return ctx.assign(d, f"({call} != 0)", "bool")


def _match(ctx: FuncCtx, it: Instr) -> str:
    mode = next(m for m in it.mods if m in ("any", "all"))
    t = _type(ctx, it)
    d, a, mask = it.args
    dp = None
    if isinstance(d, Vec):
        d, dp = d.items
    kind = "MATCH_ANY" if mode == "any" else "MATCH_ALL"
    call = (f"ptx::collective(T, ptx::{kind}, {ctx.value(mask, 'b32')}, "
            f"(uint64_t){ctx.value(a, t)}, 0, 0, {it.line}, &p_)")
    out = f"{{ bool p_ = false; const uint32_t r_ = (uint32_t){call}; " + ctx.assign(d, "r_", "uint32_t")
    if dp is not None:
        out += " " + ctx.assign(dp, "p_", "bool")
    return out + " }"


def _redux(ctx: FuncCtx, it: Instr) -> str:
    t = _type(ctx, it)
    op = next(m for m in it.mods if m in ("add", "min", "max", "and", "or", "xor"))
    if t not in ("u32", "s32", "b32"):
        raise ctx.error(f"{it.opcode} is not supported")
    kind = {"add": "REDUX_ADD", "and": "REDUX_AND", "or": "REDUX_OR", "xor": "REDUX_XOR",
            "min": "REDUX_MIN" if t == "s32" else "REDUX_UMIN",
            "max": "REDUX_MAX" if t == "s32" else "REDUX_UMAX"}[op]
    d, a, mask = it.args
    call = (f"ptx::collective(T, ptx::{kind}, {ctx.value(mask, 'b32')}, "
            f"(uint64_t){ctx.value(a, 'u32')}, 0, 0, {it.line})")
    return ctx.assign(d, f"(uint32_t){call}", "uint32_t")


def _activemask(ctx: FuncCtx, it: Instr) -> str:
    return ctx.assign(it.args[0], f"ptx::activemask(T, {it.line})", "uint32_t")


def _call(ctx: FuncCtx, it: Instr) -> str:
    from ._emit import cname
    args = list(it.args)
    rets: list = []
    if args and isinstance(args[0], Vec) and args[0].kind == "list":
        rets = list(args.pop(0).items)
    if not args or not isinstance(args[0], Sym):
        raise ctx.error(f"{it.opcode}: an indirect call is not supported")
    callee = args.pop(0).name
    params = list(args[0].items) if args and isinstance(args[0], Vec) else []
    if len(args) > 1:
        raise ctx.error(f"{it.opcode}: a call with a prototype (indirect) is not supported")
    ptrs = []
    for p in rets + params:
        if not isinstance(p, Sym) or p.name not in ctx.params:
            raise ctx.error(f"call of {callee}: argument {p!r} is not a .param variable")
        ptrs.append(ctx.params[p.name][0])
    if callee == "vprintf":
        if len(params) != 2 or len(rets) != 1:
            raise ctx.error("vprintf called with other than (format, arguments)")
        return (f"ptx::store<uint32_t>({ptrs[0]}, (uint32_t)ptx::vprintf(T, "
                f"ptx::load<uint64_t>({ptrs[1]}), ptx::load<uint64_t>({ptrs[2]}), {it.line}));")
    if callee == "__assertfail":
        return f'ptx::trap(T, {it.line}, "device-side assertion failed (__assertfail)");'
    g = ctx.tr.module.functions.get(callee)
    if g is None or g.body is None:
        raise ctx.error(f"call of {callee}, which the module declares but does not define")
    if len(rets) != len(g.rets) or len(params) != len(g.params):
        raise ctx.error(f"call of {callee} with {len(rets)} results and {len(params)} "
                        f"arguments; it has {len(g.rets)} and {len(g.params)}")
    return (f"{{ char* const av_[] = {{{', '.join(ptrs) or 'nullptr'}}}; "
            f"{cname('F', callee)}(T, av_); }}")


_HANDLERS = {
    "mov": _mov, "cvta": _cvta, "isspacep": _isspacep,
    "ld": _ld, "ldu": _ld, "st": _st, "atom": _atom, "red": _atom,
    "add": _arith, "sub": _arith, "mul": _arith, "mad": _arith, "fma": _arith, "div": _arith,
    "rem": _arith, "min": _arith, "max": _arith, "addc": _arith, "subc": _arith, "madc": _arith,
    "abs": _unary, "neg": _unary, "not": _unary, "cnot": _unary, "popc": _unary, "clz": _unary,
    "brev": _unary, "bfind": _unary, "sqrt": _unary, "rcp": _unary, "rsqrt": _unary,
    "ex2": _unary, "lg2": _unary, "sin": _unary, "cos": _unary, "tanh": _unary,
    "and": _logic, "or": _logic, "xor": _logic, "shl": _shift, "shr": _shift, "shf": _shf,
    "bfe": _bits, "bfi": _bits, "prmt": _bits, "lop3": _bits,
    "setp": _setp, "selp": _selp, "testp": _testp, "copysign": _copysign, "cvt": _cvt,
    "bra": _bra, "ret": _ret, "exit": _exit, "trap": _trap, "brkpt": _trap,
    "nanosleep": _nop, "prefetch": _nop, "prefetchu": _nop, "pmevent": _nop,
    "membar": _fence, "fence": _fence, "bar": _bar, "barrier": _bar,
    "shfl": _shfl, "vote": _vote, "match": _match, "redux": _redux, "activemask": _activemask,
    "call": _call,
}

# keep names referenced for linters: the register storage table is part of the contract
_ = (STORAGE, Reg)
