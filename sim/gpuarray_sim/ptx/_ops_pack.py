"""PTX packed and narrow formats to C++: 16-bit lane pairs, byte dot products, SIMD video, fp8.

One concern: the instructions that compute on lanes packed in a 32-bit
register or on 8-bit floats -- ``add/sub/min/max`` of ``.s16x2``/``.u16x2``
(``.relu``), ``dp4a``/``dp2a``, the SIMD video instructions
(``vadd4``... ``vabsdiff2``, without lane selectors or masks), ``fns``,
``set``/``setp`` of ``.f16x2``/``.bf16x2`` pairs and the fp8 conversions
(``cvt`` to and from ``.e4m3x2``/``.e5m2x2``) -- through the helpers of
``ptx_num.h``.  What the executor does not run is refused naming it.
"""

from __future__ import annotations

from ._ast import Instr, Vec
from ._context import FuncCtx
from ._opbase import check_mods, types_of

__all__ = ["PACKED_INT", "packed_int", "dp", "video", "fns", "half2_compare", "cvt_fp8"]

PACKED_INT = ("s16x2", "u16x2")
_P2 = {"add": "P2_ADD", "sub": "P2_SUB", "min": "P2_MIN", "max": "P2_MAX"}


def packed_int(ctx: FuncCtx, it: Instr, t: str) -> str:
    """``add/sub/min/max{.relu}.{s16x2,u16x2} d, a, b``: per 16-bit lane."""
    check_mods(ctx, it, {"relu"})
    op = _P2.get(it.base)
    if op is None or len(it.args) != 3:
        raise ctx.error(f"{it.opcode} is not supported")
    d, a, b = it.args
    sgn = "true" if t == "s16x2" else "false"
    relu = "true" if "relu" in it.mods else "false"
    return ctx.assign(d, f"ptx::simd2(ptx::{op}, {ctx.value(a, 'b32')}, {ctx.value(b, 'b32')}, "
                         f"{sgn}, {relu})", "uint32_t")


def dp(ctx: FuncCtx, it: Instr) -> str:
    """``dp4a.atype.btype d, a, b, c`` and ``dp2a.{lo,hi}.atype.btype d, a, b, c``."""
    check_mods(ctx, it, {"lo", "hi"})
    ts = types_of(it)
    if len(ts) != 2 or any(t not in ("u32", "s32") for t in ts) or len(it.args) != 4:
        raise ctx.error(f"{it.opcode} is not supported")
    d, a, b, c = (ctx.value(x, "b32") if i else x for i, x in enumerate(it.args))
    sa, sb = (str(t == "s32").lower() for t in ts)
    if it.base == "dp4a":
        return ctx.assign(d, f"ptx::dp4a({a}, {b}, {c}, {sa}, {sb})", "uint32_t")
    hi = "true" if "hi" in it.mods else "false"
    return ctx.assign(d, f"ptx::dp2a({a}, {b}, {c}, {sa}, {sb}, {hi})", "uint32_t")


_VIDEO = {"vadd": "V_ADD", "vsub": "V_SUB", "vavrg": "V_AVRG", "vabsdiff": "V_ABSDIFF",
          "vmin": "V_MIN", "vmax": "V_MAX"}


def video(ctx: FuncCtx, it: Instr) -> str:
    """``vop4``/``vop2.dtype.atype.btype{.sat}{.add} d, a, b, c`` (no selectors or masks)."""
    lanes = int(it.base[-1])
    op = _VIDEO.get(it.base[:-1])
    check_mods(ctx, it, {"sat", "add"})
    ts = types_of(it)
    if (op is None or len(ts) != 3 or any(t not in ("u32", "s32") for t in ts)
            or len(it.args) != 4 or any(isinstance(x, Vec) for x in it.args)):
        raise ctx.error(f"{it.opcode}: a form of the video instruction the simulator's PTX "
                        "executor does not support (lane selectors and masks are not)")
    d, a, b, c = it.args
    sd, sa, sb = (str(t == "s32").lower() for t in ts)
    sat = str("sat" in it.mods).lower()
    add = str("add" in it.mods).lower()
    return ctx.assign(d, f"ptx::video(ptx::{op}, {lanes}, {ctx.value(a, 'b32')}, "
                         f"{ctx.value(b, 'b32')}, {ctx.value(c, 'b32')}, {sa}, {sb}, {sd}, "
                         f"{sat}, {add})", "uint32_t")


def fns(ctx: FuncCtx, it: Instr) -> str:
    """``fns.b32 d, mask, base, offset``."""
    check_mods(ctx, it, set())
    d, mask, base, off = it.args
    return ctx.assign(d, f"ptx::fns({ctx.value(mask, 'b32')}, {ctx.value(base, 'b32')}, "
                         f"{ctx.value(off, 's32')})", "uint32_t")


_HCMP = {"eq": 0, "ne": 1, "lt": 2, "le": 3, "gt": 4, "ge": 5, "equ": 6, "neu": 7, "ltu": 8,
         "leu": 9, "gtu": 10, "geu": 11, "num": 12, "nan": 13}


def half2_compare(ctx: FuncCtx, it: Instr, st: str) -> tuple[str, str]:
    """C++ of the comparison of the low and the high halves of an f16x2/bf16x2 pair."""
    cmp = next((m for m in it.mods if m in _HCMP), None)
    if cmp is None:
        raise ctx.error(f"{it.opcode}: no comparison")
    a, b = (ctx.value(x, "b32") for x in it.args[1:3])
    bf = str(st == "bf16x2").lower()
    ftz = str("ftz" in it.mods).lower()
    return tuple(f"ptx::half_cmp({_HCMP[cmp]}, (uint16_t)({a} >> {s}), (uint16_t)({b} >> {s}), "
                 f"{bf}, {ftz})" for s in (0, 16))  # type: ignore[return-value]


_FP8 = ("e4m3x2", "e5m2x2")


def cvt_fp8(ctx: FuncCtx, it: Instr, dt: str, st: str) -> str:
    """``cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.{f32,f16x2} d, a{, b}`` and
    ``cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2} d, a``."""
    relu = "true" if "relu" in it.mods else "false"
    if dt in _FP8:
        e5 = str(dt == "e5m2x2").lower()
        if st == "f32" and len(it.args) == 3:  # d = {a -> upper byte, b -> lower byte}
            hi, lo = (f"(uint32_t)ptx::to_fp8((double){ctx.value(x, 'f32')}, {e5}, {relu})"
                      for x in it.args[1:])
        elif st == "f16x2" and len(it.args) == 2:
            v = ctx.value(it.args[1], "b32")
            hi, lo = (f"(uint32_t)ptx::to_fp8((double)ptx::h2f((uint16_t)({v} >> {s})), {e5}, "
                      f"{relu})" for s in (16, 0))
        else:
            raise ctx.error(f"{it.opcode} is not supported")
        return ctx.assign(it.args[0], f"(uint16_t)(({hi} << 8) | {lo})", "uint16_t")
    if dt == "f16x2" and st in _FP8 and len(it.args) == 2:
        e5 = str(st == "e5m2x2").lower()
        v = ctx.value(it.args[1], "b16")
        lo, hi = (f"(uint32_t)ptx::fp8_to_h((uint8_t)({v} >> {s}), {e5})" for s in (0, 8))
        if relu == "true":
            lo, hi = (f"(uint32_t)ptx::half_relu((uint16_t){x}, false)" for x in (lo, hi))
        return ctx.assign(it.args[0], f"(({hi} << 16) | {lo})", "uint32_t")
    raise ctx.error(f"{it.opcode} is not supported")
