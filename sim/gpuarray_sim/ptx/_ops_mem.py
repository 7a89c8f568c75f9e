"""PTX data movement to C++: ``mov``, ``cvta``, ``isspacep``, ``ld``/``st``, atomics.

One concern: instructions that move bytes between registers and the
address windows of ``ptxrt.h`` (every access through a checked helper).
"""

from __future__ import annotations

from ._ast import Addr, Instr, Vec
from ._context import FuncCtx, operand_vec
from ._opbase import check_mods, nargs, type_of
from ._types import CTYPE, FLOATS, SIZE, U128


# ------------------------------------------------------------------ moves
def _mov(ctx: FuncCtx, it: Instr) -> str:
    nargs(ctx, it, 2)
    t = type_of(ctx, it)
    d, a = it.args
    # unpack: mov.b64 {%r1, %r2}, %rd1 (the first the low bits; mov.b128 {%lo, %hi}, %q)
    if isinstance(d, Vec):
        parts = operand_vec(d)
        w = SIZE[CTYPE[t]] // len(parts)
        u = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}[w]
        src = ctx.value(a, {2: "b16", 4: "b32", 8: "b64", 16: "b128"}[SIZE[CTYPE[t]]])
        out = [f"{{ const auto v_ = {src};"]
        for i, p in enumerate(parts):
            if p is not None:
                out.append(ctx.assign(p, f"({u})(v_ >> {8 * w * i})", u))
        return " ".join(out) + " }"
    if isinstance(a, Vec):  # pack
        parts = operand_vec(a)
        w = SIZE[CTYPE[t]] // len(parts)
        wt = {1: "b8", 2: "b16", 4: "b32", 8: "b64"}[w]
        big = {2: "uint16_t", 4: "uint32_t", 8: "uint64_t", 16: U128}[SIZE[CTYPE[t]]]
        expr = " | ".join(f"(({big}){ctx.value(p, wt)} << {8 * w * i})"
                          for i, p in enumerate(parts))
        return ctx.assign(d, f"({big})({expr})", big)
    return ctx.assign(d, ctx.value(a, t), CTYPE[t])


def _cvta(ctx: FuncCtx, it: Instr) -> str:
    nargs(ctx, it, 2)
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


# ld/st of global memory with a memory-model qualifier: an __atomic access of
# the matching order (ptx::load_at/store_at), since another host thread may
# run the block that reads or writes it (_hostrt.cpp's workers): the compiler
# neither keeps such a load in a register across a spin nor moves the stores
# before a release after it.  Other loads and stores stay plain.
_LD_ORDER = {"acquire": "__ATOMIC_ACQUIRE", "volatile": "__ATOMIC_RELAXED",
             "relaxed": "__ATOMIC_RELAXED"}
_ST_ORDER = {"release": "__ATOMIC_RELEASE", "volatile": "__ATOMIC_RELAXED",
             "relaxed": "__ATOMIC_RELAXED"}


def _order(it: Instr, table: dict[str, str]) -> str | None:
    if _space(it) not in ("global", "generic"):
        return None
    return next((table[m] for m in it.mods if m in table), None)


def _ld(ctx: FuncCtx, it: Instr) -> str:
    check_mods(ctx, it, {"global", "shared", "local", "param", "const", "generic", "v2", "v4",
                          "ldu"})
    nargs(ctx, it, 2, 3)
    t = type_of(ctx, it)
    ct = CTYPE[t]
    n = _vec(it)
    dsts = operand_vec(it.args[0])
    if len(dsts) != n:
        raise ctx.error(f"{it.opcode}: {len(dsts)} destinations for .v{n}")
    size = SIZE[ct] if t != "pred" else 1
    out = [f"{{ const char* p_ = {_ptr(ctx, it, it.args[1], size * n, False)};"]
    order = _order(it, _LD_ORDER)
    fn = f"ptx::load_at<{ct}, {order}>" if order else f"ptx::load<{ct}>"
    for i, dst in enumerate(dsts):
        if dst is not None:
            out.append(ctx.assign(dst, f"{fn}(p_ + {i * size})", ct))
    return " ".join(out) + " }"


def _st(ctx: FuncCtx, it: Instr) -> str:
    check_mods(ctx, it, {"global", "shared", "local", "param", "generic", "v2", "v4"})
    nargs(ctx, it, 2, 3)
    t = type_of(ctx, it)
    ct = CTYPE[t]
    n = _vec(it)
    srcs = operand_vec(it.args[1])
    if len(srcs) != n:
        raise ctx.error(f"{it.opcode}: {len(srcs)} sources for .v{n}")
    size = SIZE[ct]
    out = [f"{{ char* p_ = {_ptr(ctx, it, it.args[0], size * n, True)};"]
    order = _order(it, _ST_ORDER)
    fn = f"ptx::store_at<{ct}, {order}>" if order else f"ptx::store<{ct}>"
    for i, s in enumerate(srcs):
        out.append(f"{fn}(p_ + {i * size}, {ctx.value(s, t)});")
    return " ".join(out) + " }"


_ATOM_OPS = {"add", "and", "or", "xor", "exch", "cas", "inc", "dec", "min", "max"}


_HALF_ATOM = {"f16": ("uint16_t", "half_op", "false"), "bf16": ("uint16_t", "half_op", "true"),
              "f16x2": ("uint32_t", "half2_op", "false"), "bf16x2": ("uint32_t", "half2_op", "true")}


def _atom(ctx: FuncCtx, it: Instr) -> str:
    red = it.base == "red"
    check_mods(ctx, it, _ATOM_OPS | {"global", "shared", "generic", "v2", "v4", "v8"})
    op = next((m for m in it.mods if m in _ATOM_OPS), None)
    if op is None:
        raise ctx.error(f"{it.opcode}: no operation")
    t = type_of(ctx, it)
    n = _vec(it)
    args = it.args if not red else [None] + it.args
    if t in _HALF_ATOM or n != 1:
        return _atom_lanes(ctx, it, op, t, n, args, red)
    ct = CTYPE[t]
    d, a = args[0], args[1]
    b = ctx.value(args[2], t)
    if ct == U128 and op not in ("cas", "exch"):
        raise ctx.error(f"{it.opcode}: .b128 atomics are cas and exch only")
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
        rmw = "ptx::atom_rmw_u128" if ct == U128 else f"ptx::atom_rmw<{ct}>"  # (ptx_num.h)
        call = f"{rmw}(p_, [&]({ct} o) {{ return {body}; }})"
    out = f"{{ char* p_ = {p}; const {ct} b_ = {b}; (void)b_; "
    if d is None or red:
        return out + f"(void){call}; }}"
    return out + ctx.assign(d, call, ct) + " }"


def _atom_lanes(ctx: FuncCtx, it: Instr, op: str, t: str, n: int, args: list, red: bool) -> str:
    """f16/bf16 (and pairs) add/min/max, and vector atomics (``.v2``/``.v4``/``.v8``): each
    element an atomic read-modify-write of its own, as the ISA performs vector atomics."""
    if op not in ("add", "min", "max") or (n != 1 and t not in ("f32", "f16x2", "bf16x2")):
        raise ctx.error(f"{it.opcode}: atomics of this operation on .{t} are not supported")
    d, a = args[0], args[1]
    dsts = operand_vec(d) if d is not None else [None] * n
    srcs = operand_vec(args[2])
    if len(srcs) != n or len(dsts) != n:
        raise ctx.error(f"{it.opcode}: {len(srcs)} values for .v{n}")
    if t in _HALF_ATOM:
        ct, fn, bf = _HALF_ATOM[t]
        hop = {"add": "H_ADD", "min": "H_MIN", "max": "H_MAX"}[op]
        body = f"ptx::{fn}(ptx::{hop}, o, b_, 0, {bf}, FE_TONEAREST, false, false, false)"
        rt = "b32" if ct == "uint32_t" else "b16"
    else:
        ct, rt = "float", "f32"
        body = {"add": "o + b_", "min": "ptx::fmin_(o, b_)", "max": "ptx::fmax_(o, b_)"}[op]
    size = SIZE[ct]
    out = [f"{{ char* p_ = {_ptr(ctx, it, a, size * n, True)};"]
    for i, (dst, src) in enumerate(zip(dsts, srcs, strict=True)):
        call = (f"ptx::atom_rmw<{ct}>(p_ + {i * size}, [&]({ct} o) {{ return ({ct})({body}); }})")
        out.append(f"{{ const {ct} b_ = {ctx.value(src, rt)};")
        out.append(f"(void){call}; }}" if dst is None or red
                   else ctx.assign(dst, call, ct) + " }")
    return " ".join(out) + " }"
