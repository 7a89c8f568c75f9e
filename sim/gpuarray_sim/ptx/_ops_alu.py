"""PTX arithmetic, logic, comparisons and conversions to C++.

One concern: the value-computing instructions -- integer and float
arithmetic with every rounding mode, ``.sat`` and ``.ftz``, bit
operations, ``setp``/``selp``/``testp`` and ``cvt`` -- as C++ expressions
on typed operands, using the numeric helpers of ``ptxrt.h``.
"""

from __future__ import annotations

from ._ast import Imm, Instr, Vec
from ._context import FuncCtx
from ._opbase import IROUND, ROUND, TYPES, check_mods, signed, type_of, types_of
from ._ops_pack import PACKED_INT, cvt_fp8, half2_compare, packed_int
from ._types import CTYPE, FLOATS, SIZE


# ------------------------------------------------------------- arithmetic
def _fop(ctx: FuncCtx, it: Instr, ct: str, expr: str, rounded: str | None) -> str:
    """A float result: rounding by mode (``rounded`` the directed form), .sat, .ftz."""
    mode = next((m for m in it.mods if m in ROUND), "rn")
    if mode != "rn":
        if rounded is None:
            raise ctx.error(f"{it.opcode}: rounding .{mode} is not supported here")
        expr = rounded.replace("MODE", ROUND[mode])
    if "ftz" in it.mods and ct == "float":
        expr = f"ptx::ftz({expr})"
    if "sat" in it.mods:
        expr = f"ptx::sat01({expr})"
    elif ct == "float":  # a NaN result is the GPU's canonical 0x7fffffff
        expr = f"ptx::canon({expr})"
    return expr


def _fin(ctx: FuncCtx, it: Instr, op, t: str) -> str:
    v = ctx.value(op, t)
    if "ftz" in it.mods and t == "f32":
        return f"ptx::ftz({v})"
    return v


def _arith(ctx: FuncCtx, it: Instr) -> str:
    t = type_of(ctx, it)
    ct = CTYPE[t]
    base = it.base
    if t in HALF:
        return _half(ctx, it, t)
    if t in PACKED_INT:
        return packed_int(ctx, it, t)
    d = it.args[0]
    if ct in FLOATS:
        check_mods(ctx, it, set(ROUND) | {"ftz", "sat", "NaN"})
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
        elif base == "div" and "approx" in it.mods and ct == "float":
            # a * (1/b): for 2^126 < |b| < 2^128 the reciprocal is 0 (the ISA)
            expr = _fop(ctx, it, ct, f"ptx::div_approx({a}, {b})", None)
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
    check_mods(ctx, it, {"lo", "hi", "wide", "cc", "sat", "relu"})
    a = ctx.value(it.args[1], t)
    b = ctx.value(it.args[2], t) if len(it.args) > 2 else None
    c_op = it.args[3] if len(it.args) > 3 else None
    size = SIZE[ct]
    wide = {1: ("uint16_t", "int16_t"), 2: ("uint32_t", "int32_t"), 4: ("uint64_t", "int64_t"),
            8: ("unsigned __int128", "__int128")}[size]
    wt = wide[1] if signed(t) else wide[0]
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
                f = "ptx::mulhi_s64" if signed(t) else "ptx::mulhi_u64"
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
                f = "ptx::mulhi_s64" if signed(t) else "ptx::mulhi_u64"
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


HALF = ("f16", "bf16", "f16x2", "bf16x2")
_HOPS = {"add": "H_ADD", "sub": "H_SUB", "mul": "H_MUL", "fma": "H_FMA", "min": "H_MIN",
         "max": "H_MAX", "neg": "H_NEG", "abs": "H_ABS"}


def _half(ctx: FuncCtx, it: Instr, t: str) -> str:
    """f16/bf16 arithmetic (scalar and packed pairs) through ``ptx::half_op``."""
    check_mods(ctx, it, set(ROUND) | {"ftz", "sat", "NaN", "relu"})
    pair = t.endswith("x2")
    bt = "b32" if pair else "b16"
    ut = "uint32_t" if pair else "uint16_t"
    bf = str(t.startswith("bf")).lower()
    ftz = str("ftz" in it.mods).lower()
    if it.base in ("ex2", "tanh"):  # .approx: in float, rounded once
        fn = "ptx::half2_fn" if pair else "ptx::half_fn"
        kind = "ptx::HF_EX2" if it.base == "ex2" else "ptx::HF_TANH"
        return ctx.assign(it.args[0], f"{fn}({kind}, {ctx.value(it.args[1], bt)}, {bf}, {ftz})",
                          ut)
    op = _HOPS.get(it.base)
    if op is None:
        raise ctx.error(f"{it.opcode}: half-precision {it.base} is not supported")
    vals = [ctx.value(x, bt) for x in it.args[1:]]
    vals += [f"({ut})0"] * (3 - len(vals))
    mode = ROUND[next((m for m in it.mods if m in ROUND), "rn")]
    flags = ", ".join(str(f in it.mods).lower() for f in ("ftz", "sat", "NaN"))
    fn = "ptx::half2_op" if pair else "ptx::half_op"
    expr = f"{fn}(ptx::{op}, {vals[0]}, {vals[1]}, {vals[2]}, {bf}, {mode}, {flags})"
    if "relu" in it.mods:
        expr = f"ptx::half{'2' if pair else ''}_relu({expr}, {bf})"
    return ctx.assign(it.args[0], expr, ut)


def _unary(ctx: FuncCtx, it: Instr) -> str:
    t = type_of(ctx, it)
    if t in HALF and it.base in ("neg", "abs", "ex2", "tanh"):
        return _half(ctx, it, t)
    ct = CTYPE[t]
    d = it.args[0]
    base = it.base
    if ct in FLOATS:
        check_mods(ctx, it, set(ROUND) | {"ftz", "sat", "approx", "full", "NaN"})
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
    check_mods(ctx, it, {"shiftamt"})
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
               f"{bits - 1} - (int)ptx::clz<{u}>(({u}){a}))" if signed(t)
               else f"({bits - 1} - (int)ptx::clz<{u}>(({u}){a}))")
        nonzero = f"(({a}) != 0 && ({a}) != ({ct})-1)" if signed(t) else f"(({a}) != 0)"
        val = f"({bits - 1} - ({msb}))" if "shiftamt" in it.mods else f"({msb})"
        return ctx.assign(d, f"({nonzero} ? (uint32_t)({val}) : 0xffffffffu)", "uint32_t")
    else:
        raise ctx.error(f"{it.opcode} is not supported")
    return ctx.assign(d, expr, ct)


def _logic(ctx: FuncCtx, it: Instr) -> str:
    check_mods(ctx, it, set())
    t = type_of(ctx, it)
    ct = CTYPE[t]
    d, a, b = it.args[:3]
    va, vb = ctx.value(a, t), ctx.value(b, t)
    sym = {"and": "&", "or": "|", "xor": "^"}[it.base]
    if t == "pred":
        sym = {"and": "&&", "or": "||", "xor": "!="}[it.base]
        return ctx.assign(d, f"({va} {sym} {vb})", "bool")
    return ctx.assign(d, f"({ct})({va} {sym} {vb})", ct)


def _shift(ctx: FuncCtx, it: Instr) -> str:
    t = type_of(ctx, it)
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
    t = type_of(ctx, it)
    ct = CTYPE[t]
    if it.base == "sad":  # d = c + |a - b| (the difference exact, the sum wrapping)
        if t[0] not in "us" or t == "s8" or t == "u8":
            raise ctx.error(f"{it.opcode} is not supported")
        d, a, b, c = it.args
        u = CTYPE["u" + t[1:]]
        va, vb = ctx.value(a, t), ctx.value(b, t)
        diff = f"({va} < {vb} ? ({u})(({u}){vb} - ({u}){va}) : ({u})(({u}){va} - ({u}){vb}))"
        return ctx.assign(d, f"({ct})({u})(({u}){ctx.value(c, t)} + {diff})", ct)
    if it.base == "bfe":
        d, a, b, c = it.args
        return ctx.assign(d, f"ptx::bfe<{ct}>({ctx.value(a, t)}, {ctx.value(b, 'u32')}, "
                             f"{ctx.value(c, 'u32')}, {str(signed(t)).lower()})", ct)
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


def _compare(ctx: FuncCtx, it: Instr, t: str, a, b, pre: tuple | None = None) -> str:
    cmp = next((m for m in it.mods if m in _CMP_INT or m in ("equ", "neu", "ltu", "leu", "gtu",
                                                             "geu", "num", "nan")), None)
    if cmp is None:
        raise ctx.error(f"{it.opcode}: no comparison")
    ct = CTYPE[t]
    va, vb = pre if pre is not None else (_fin(ctx, it, a, t), _fin(ctx, it, b, t))
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
    t = type_of(ctx, it)
    check_mods(ctx, it, set(_CMP_INT) | {"equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan",
                                         "and", "or", "xor", "ftz"})
    d = it.args[0]
    if t in ("f16x2", "bf16x2"):  # setp.CmpOp{.BoolOp}.f16x2 p|q, a, b{, c}: low half, high half
        if not isinstance(d, Vec) or len(d.items) != 2:
            raise ctx.error(f"{it.opcode}: a packed comparison sets a predicate pair p|q")
        lo, hi = half2_compare(ctx, it, t)
        bop = next((m for m in it.mods if m in ("and", "or", "xor")), None)
        if bop:
            c = ctx.value(it.args[3], "pred")
            sym = {"and": "&&", "or": "||", "xor": "!="}[bop]
            lo, hi = f"({lo} {sym} {c})", f"({hi} {sym} {c})"
        p, q = d.items
        return (f"{{ const bool r_ = {lo}; const bool q_ = {hi}; "
                + ctx.assign(p, "r_", "bool") + " " + ctx.assign(q, "q_", "bool") + " }")
    if t in ("f16", "bf16"):  # exact in float
        w = "ptx::h2f" if t == "f16" else "ptx::bf2f"
        pre = tuple(f"{w}({ctx.value(x, 'b16')})" for x in it.args[1:3])
        expr = _compare(ctx, it, "f32", it.args[1], it.args[2], pre)
    else:
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


def _set(ctx: FuncCtx, it: Instr) -> str:
    """``set.CmpOp[.BoolOp].dtype.stype d, a, b[, {!}c]``: 1.0 or all ones when true, else 0."""
    ts = types_of(it)
    if len(ts) != 2:
        raise ctx.error(f"{it.opcode}: expected a destination and a source type")
    dt, st = ts
    check_mods(ctx, it, set(_CMP_INT) | {"equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan",
                                         "and", "or", "xor", "ftz"})
    if st in ("f16x2", "bf16x2"):  # per half: 1.0 of dt's half type, or 0xffff (u32/s32)
        lo, hi = half2_compare(ctx, it, st)
        bop = next((m for m in it.mods if m in ("and", "or", "xor")), None)
        if bop:
            c = ctx.value(it.args[3], "pred")
            sym = {"and": "&&", "or": "||", "xor": "!="}[bop]
            lo, hi = f"({lo} {sym} {c})", f"({hi} {sym} {c})"
        one = {"f16x2": "0x3c00u", "bf16x2": "0x3f80u", "u32": "0xffffu", "s32": "0xffffu"}.get(dt)
        if one is None:
            raise ctx.error(f"{it.opcode} is not supported")
        return ctx.assign(it.args[0], f"((({hi}) ? {one} : 0u) << 16 | (({lo}) ? {one} : 0u))",
                          "uint32_t")
    if "x2" in dt or "x2" in st or dt not in ("u16", "s16", "u32", "s32", "f32", "f16", "bf16"):
        raise ctx.error(f"{it.opcode} is not supported")
    if st in ("f16", "bf16"):  # exact in float
        w = "ptx::h2f" if st == "f16" else "ptx::bf2f"
        pre = tuple(f"{w}({ctx.value(x, 'b16')})" for x in it.args[1:3])
        expr = _compare(ctx, it, "f32", it.args[1], it.args[2], pre)
    else:
        expr = _compare(ctx, it, st, it.args[1], it.args[2])
    boolop = next((m for m in it.mods if m in ("and", "or", "xor")), None)
    if boolop:
        sym = {"and": "&&", "or": "||", "xor": "!="}[boolop]
        expr = f"({expr} {sym} {ctx.value(it.args[3], 'pred')})"
    if dt == "f32":
        return ctx.assign(it.args[0], f"({expr} ? 1.0f : 0.0f)", "float")
    if dt in ("f16", "bf16"):
        one = "0x3c00u" if dt == "f16" else "0x3f80u"
        return ctx.assign(it.args[0], f"(uint16_t)({expr} ? {one} : 0u)", "uint16_t")
    ct = CTYPE[dt]
    return ctx.assign(it.args[0], f"({ct})({expr} ? ~({ct})0 : ({ct})0)", ct)


def _selp(ctx: FuncCtx, it: Instr) -> str:
    t = type_of(ctx, it)
    d, a, b, c = it.args
    return ctx.assign(d, f"({ctx.value(c, 'pred')} ? {ctx.value(a, t)} : {ctx.value(b, t)})",
                      CTYPE[t])


def _testp(ctx: FuncCtx, it: Instr) -> str:
    t = type_of(ctx, it)
    d, a = it.args
    v = ctx.value(a, t)
    kind = next(m for m in it.mods if m not in TYPES)
    expr = {"finite": f"isfinite({v})", "infinite": f"isinf({v})",
            "number": f"!isnan({v})", "notanumber": f"isnan({v})",
            # zero counts as normal on a GPU (an H200, 2026-11-28)
            "normal": f"(isnormal({v}) || {v} == 0)", "subnormal": f"(fpclassify({v}) == FP_SUBNORMAL)"}.get(kind)
    if expr is None:
        raise ctx.error(f"{it.opcode} is not supported")
    return ctx.assign(d, expr, "bool")


def _copysign(ctx: FuncCtx, it: Instr) -> str:
    t = type_of(ctx, it)
    d, a, b = it.args
    f = "copysignf" if t == "f32" else "copysign"
    return ctx.assign(d, f"{f}({ctx.value(b, t)}, {ctx.value(a, t)})", CTYPE[t])


# ------------------------------------------------------------ conversions
def _cvt(ctx: FuncCtx, it: Instr) -> str:
    ts = types_of(it)
    if len(ts) != 2:
        raise ctx.error(f"{it.opcode}: expected a destination and a source type")
    dt, st = ts
    check_mods(ctx, it, set(ROUND) | set(IROUND) | {"ftz", "sat", "relu", "satfinite"})
    if "e4m3x2" in ts or "e5m2x2" in ts:
        return cvt_fp8(ctx, it, dt, st)
    if "relu" in it.mods or "satfinite" in it.mods:
        raise ctx.error(f"{it.opcode} is not supported")
    if dt in ("f16x2", "bf16x2") and st == "f32" and len(it.args) == 3:
        # d = {a -> upper half, b -> lower half}
        f = "ptx::f2h" if dt == "f16x2" else "ptx::f2bf"
        mode2 = ROUND[next((m for m in it.mods if m in ROUND), "rn")]
        hi, lo = (f"(uint32_t){f}((double){ctx.value(x, 'f32')}, {mode2})" for x in it.args[1:])
        return ctx.assign(it.args[0], f"(({hi} << 16) | {lo})", "uint32_t")
    if len(it.args) != 2 or dt in ("f16x2", "bf16x2"):
        raise ctx.error(f"{it.opcode} is not supported")
    d, a = it.args
    dct, sct = CTYPE[dt], CTYPE[st]
    half = {"f16": ("ptx::h2f", "ptx::f2h"), "bf16": ("ptx::bf2f", "ptx::f2bf")}
    mode = next((m for m in it.mods if m in ROUND), "rn")
    imode = next((m for m in it.mods if m in IROUND), None)
    v = ctx.value(a, st)
    # the source as a C++ value
    if st in half:
        src, sval = "double", f"(double){half[st][0]}({v})"
    else:
        src, sval = sct, v
        if st == "f32" and "ftz" in it.mods:
            sval = f"ptx::ftz({sval})"
    if dt in half:
        if imode and st == dt:  # round to an integral value in the same format: exact
            f = {"rni": "nearbyint", "rzi": "trunc", "rmi": "floor", "rpi": "ceil"}[imode]
            return ctx.assign(d, f"{half[dt][1]}({f}({sval}), FE_TONEAREST)", "uint16_t")
        if imode:
            raise ctx.error(f"{it.opcode} is not supported")
        x = f"{half[dt][1]}((double){sval}, {ROUND[mode]})"
        if src not in FLOATS:
            x = f"{half[dt][1]}(ptx::i2f<double, {src}>({sval}, FE_TONEAREST), {ROUND[mode]})"
            if SIZE[src] == 8:  # past 2**53 not exact in double: round to odd first
                x = f"{half[dt][1]}(ptx::i2d_odd<{src}>({sval}), {ROUND[mode]})"
        if "sat" in it.mods:
            x = f"{half[dt][1]}(ptx::sat01((double){half[dt][0]}({x})), FE_TONEAREST)"
        return ctx.assign(d, x, "uint16_t")
    if dct in FLOATS:
        if src in FLOATS:
            if imode:  # round to an integral value in the same format
                f = {"rni": "nearbyint", "rzi": "trunc", "rmi": "floor", "rpi": "ceil"}[imode]
                x = f"({dct}){f}((double){sval})"
            elif dct == "float" and src == "double":
                x = f"(float){sval}" if mode == "rn" else f"ptx::rnd_f32({sval}, {ROUND[mode]})"
            else:
                x = f"({dct}){sval}"  # exact
        else:
            x = (f"({dct}){sval}" if mode == "rn" else
                 f"ptx::i2f<{dct}, {src}>({sval}, {ROUND[mode]})")
        if "ftz" in it.mods and dct == "float":
            x = f"ptx::ftz({x})"
        if "sat" in it.mods:
            x = f"ptx::sat01({x})"
        elif dct == "float" and src in FLOATS:  # NaN: the canonical 0x7fffffff
            x = f"ptx::canon({x})"
        return ctx.assign(d, x, dct)
    # integer destination
    if src in FLOATS:
        m = IROUND.get(imode or "rzi")
        from_f64 = "true" if st == "f64" else "false"
        return ctx.assign(d, f"ptx::f2i<{dct}>((double){sval}, {m}, {from_f64})", dct)
    if "sat" in it.mods:
        lo = f"(({src})std::numeric_limits<{dct}>::min())"
        hi = f"(({src})std::numeric_limits<{dct}>::max())"
        # compare in the wider of the two, keeping signs
        x = (f"ptx::clamp_int<{dct}, {src}>({sval})")
        del lo, hi
        return ctx.assign(d, x, dct)
    return ctx.assign(d, f"({dct}){sval}", dct)
