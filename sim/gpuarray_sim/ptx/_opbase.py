"""Shared helpers of the translator's instruction modules (``_ops_*.py``).

One concern: reading an instruction's types and modifiers, refusing the
ones not understood.
"""

from __future__ import annotations

from ._ast import Instr
from ._context import FuncCtx
from ._types import CTYPE

__all__ = ["TYPES", "ROUND", "IROUND", "IGNORED", "types_of", "type_of", "check_mods", "signed",
           "nargs"]

TYPES = set(CTYPE)
ROUND = {"rn": "FE_TONEAREST", "rz": "FE_TOWARDZERO", "rm": "FE_DOWNWARD", "rp": "FE_UPWARD"}
IROUND = {"rni": 1, "rzi": 2, "rmi": 3, "rpi": 4}
# modifiers that change nothing the simulator can observe (caching, scope, hints)
IGNORED = {"uni", "nc", "volatile", "relaxed", "acquire", "release", "acq_rel", "weak", "sc",
            "cta", "gpu", "sys", "cluster", "ca", "cg", "cs", "lu", "cv", "wb", "wt",
            "aligned", "sync", "L1::evict_normal", "L1::evict_last", "L1::no_allocate",
            "L1::evict_first", "L1::evict_unchanged", "L2::64B", "L2::128B", "L2::256B",
            "noftz", "full", "approx", "mmio", "L2::cache_hint"}


def types_of(it: Instr) -> list[str]:
    return [m for m in it.mods if m in TYPES]


def type_of(ctx: FuncCtx, it: Instr) -> str:
    ts = types_of(it)
    if not ts:
        raise ctx.error(f"{it.opcode}: no type")
    return ts[-1]


def check_mods(ctx: FuncCtx, it: Instr, allowed: set[str]) -> None:
    for m in it.mods:
        if m not in allowed and m not in TYPES and m not in IGNORED:
            raise ctx.error(f"{it.opcode}: the modifier .{m} is not supported")


def signed(t: str) -> bool:
    return t[0] == "s"


def nargs(ctx: FuncCtx, it: Instr, *counts: int) -> None:
    if len(it.args) not in counts:
        raise ctx.error(f"{it.opcode}: {len(it.args)} operands")
