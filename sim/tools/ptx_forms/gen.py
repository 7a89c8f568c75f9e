"""The table of PTX instruction forms and the CUDA toolkit's ptxas verdict on each.

Usage: ``python sim/tools/ptx_forms/gen.py [--out sim/tests/ptx/data/ptx_forms.tsv.gz]``
(needs ``ptxas``; CUDA 13.0's reads PTX ISA up to 9.0, so the forms are
written for ``.version 9.0`` / ``sm_90``).

Each form is one instruction over registers of a fixed preamble
(:data:`PREAMBLE`: one register of every type, named ``%<type>_<i>``):
opcodes x instruction types x rounding/ftz/sat modifiers x operand register
types x immediates, for the instructions the simulator's PTX executor
runs.  ptxas is asked in batches (it reports every refused line of a file;
a file it cannot parse at all is retried form by form).  The table
(``verdict<TAB>instruction``, verdict ``ok`` or ``refused: <ptxas's
reason>``) is what ``sim/tests/ptx/test_ptx_check.py`` checks the executor's load
against: every form ptxas refuses must be refused at load (218).
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import subprocess
import sys
import tempfile

HEAD = ".version 9.0\n.target sm_90\n.address_size 64\n"
REGTYPES = ("pred", "b16", "u16", "s16", "f16", "b32", "u32", "s32", "f32", "b64", "u64",
            "s64", "f64", "u8", "s8", "b8", "f16x2", "b128")
PREAMBLE = "".join(f"  .reg .{t} %{t}_<4>;\n" for t in REGTYPES) + "  .local .u32 l_var;\n"
#: A variable of each state space for the address probes (``l_var`` is in the preamble, the
#: kernel parameter ``k_p`` in the entry's list).
VARS = ".global .u32 g_var;\n.shared .u32 s_var;\n.const .u32 c_var;\n"
SYMBOLS = ("g_var", "s_var", "c_var", "l_var", "k_p")
#: The register an operand of instruction type ``t`` naturally lives in.
NATURAL = {"s8": "s16", "u8": "u16", "b8": "b16", "bf16": "b16", "bf16x2": "b32",
           "f16x2": "b32"}
FLOAT = ("f32", "f64", "f16", "f16x2", "bf16", "bf16x2")
INT = ("s16", "u16", "s32", "u32", "s64", "u64")
BITS = ("b16", "b32", "b64")
ROUNDS = ("", ".rn", ".rz", ".rm", ".rp")
CMPS = ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu",
        "gtu", "geu", "num", "nan")


def reg(t: str, i: int = 0) -> str:
    return f"%{NATURAL.get(t, t)}_{i}"


def _wide(t: str) -> str:
    return t[0] + str(2 * int(t[1:]))


def _forms() -> list[str]:
    out: list[str] = []
    add = out.append
    # float arithmetic: rounding x ftz x sat over every float type
    for op in ("add", "sub", "mul", "fma", "mad", "div"):
        n = 3 if op in ("fma", "mad") else 2
        for t in FLOAT:
            for r in ROUNDS + ((".approx", ".full") if op == "div" else ()):
                for ftz in ("", ".ftz"):
                    for sat in ("", ".sat"):
                        srcs = ", ".join(reg(t, i + 1) for i in range(n))
                        add(f"{op}{r}{ftz}{sat}.{t} {reg(t)}, {srcs};")
    for op in ("fma",):
        for t in ("f16", "f16x2", "bf16", "bf16x2"):
            add(f"{op}.rn.relu.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)}, {reg(t, 3)};")
    # unary float functions
    for op in ("sqrt", "rcp", "rsqrt", "ex2", "lg2", "sin", "cos", "tanh"):
        for t in FLOAT:
            for r in ROUNDS + (".approx", ".full"):
                for ftz in ("", ".ftz"):
                    add(f"{op}{r}{ftz}.{t} {reg(t)}, {reg(t, 1)};")
    for op in ("min", "max"):
        for t in FLOAT + INT:
            for m in ("", ".ftz", ".NaN", ".relu", ".ftz.NaN", ".xorsign.abs", ".ftz.NaN.xorsign.abs"):
                add(f"{op}{m}.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)};")
    for op in ("abs", "neg"):
        for t in FLOAT + INT:
            for m in ("", ".ftz"):
                add(f"{op}{m}.{t} {reg(t)}, {reg(t, 1)};")
    # integer arithmetic
    for op in ("add", "sub"):
        for t in INT + ("s8", "u8", "b32"):
            for m in ("", ".sat", ".rn", ".cc"):
                add(f"{op}{m}.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)};")
    for op in ("addc", "subc"):
        for t in INT:
            for m in ("", ".cc"):
                add(f"{op}{m}.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)};")
    for t in INT:
        for mode in ("", ".lo", ".hi", ".wide"):
            d = reg(_wide(t)) if mode == ".wide" and t[1:] != "64" else reg(t)
            add(f"mul{mode}.{t} {d}, {reg(t, 1)}, {reg(t, 2)};")
            c = reg(_wide(t), 3) if mode == ".wide" and t[1:] != "64" else reg(t, 3)
            add(f"mad{mode}.{t} {d}, {reg(t, 1)}, {reg(t, 2)}, {c};")
        add(f"mad.hi.sat.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)}, {reg(t, 3)};")
        for mode in (".lo", ".hi"):
            for cc in ("", ".cc"):
                for op in ("mad", "madc"):
                    add(f"{op}{mode}{cc}.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)}, {reg(t, 3)};")
        for op in ("div", "rem"):
            add(f"{op}.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)};")
    # bits and logic
    for t in BITS + INT + ("pred", "f32"):
        for op in ("and", "or", "xor"):
            add(f"{op}.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)};")
        for op in ("not", "cnot"):
            add(f"{op}.{t} {reg(t)}, {reg(t, 1)};")
    for t in BITS + INT + ("f32",):
        for op in ("shl", "shr"):
            add(f"{op}.{t} {reg(t)}, {reg(t, 1)}, %u32_1;")
        for op in ("popc", "clz", "bfind", "brev"):
            d = reg(t) if op == "brev" else "%u32_0"
            add(f"{op}.{t} {d}, {reg(t, 1)};")
        add(f"bfind.shiftamt.{t} %u32_0, {reg(t, 1)};")
        add(f"bfe.{t} {reg(t)}, {reg(t, 1)}, %u32_1, %u32_2;")
        add(f"bfi.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)}, %u32_1, %u32_2;")
        for m in ("", ".f4e", ".b4e", ".rc8", ".ecl", ".ecr", ".rc16"):
            add(f"prmt{m}.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)}, %u32_1;")
        add(f"lop3.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)}, {reg(t, 3)}, 0x96;")
        for bop in (".and", ".or", ".xor"):
            add(f"lop3{bop}.{t} {reg(t)}|%pred_0, {reg(t, 1)}, {reg(t, 2)}, {reg(t, 3)}, 0x96,"
                " %pred_1;")
        for m in (".l.wrap", ".r.clamp", ".l.clamp", ".r.wrap", ".l", ""):
            add(f"shf{m}.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)}, %u32_1;")
    # compare and select
    for t in FLOAT + INT + BITS + ("pred", "s8", "u8", "b8"):
        for c in CMPS:
            for ftz in ("", ".ftz"):
                add(f"setp.{c}{ftz}.{t} %pred_0, {reg(t, 1)}, {reg(t, 2)};")
            for bop in (".and", ".or", ".xor"):
                for ftz in ("", ".ftz"):
                    add(f"setp.{c}{bop}{ftz}.{t} %pred_0, {reg(t, 1)}, {reg(t, 2)}, %pred_1;")
        add(f"setp.eq.{t} %pred_0|%pred_1, {reg(t, 1)}, {reg(t, 2)};")
        for c in ("finite", "infinite", "number", "notanumber", "normal", "subnormal"):
            add(f"testp.{c}.{t} %pred_0, {reg(t, 1)};")
        add(f"selp.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)}, %pred_1;")
        add(f"copysign.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)};")
        add(f"mov.{t} {reg(t)}, {reg(t, 1)};")
    # set: a value (1.0 or all ones) where setp gives a predicate
    for d in ("u32", "s32", "f32", "f16", "bf16", "f16x2", "bf16x2"):
        for t in FLOAT + INT + BITS:
            for c in CMPS:
                add(f"set.{c}.{d}.{t} {reg(d)}, {reg(t, 1)}, {reg(t, 2)};")
                add(f"set.{c}.and.{d}.{t} {reg(d)}, {reg(t, 1)}, {reg(t, 2)}, !%pred_1;")
            add(f"set.lt.ftz.{d}.{t} {reg(d)}, {reg(t, 1)}, {reg(t, 2)};")
            add(f"set.lt.or.ftz.{d}.{t} {reg(d)}, {reg(t, 1)}, {reg(t, 2)}, %pred_1;")
    # conversions
    scalars = ("s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64", "f16", "bf16", "f32", "f64")
    for d in scalars:
        for s in scalars:
            for r in ("", ".rn", ".rz", ".rm", ".rp", ".rni", ".rzi", ".rmi", ".rpi"):
                for m in ("", ".sat", ".ftz", ".ftz.sat"):
                    add(f"cvt{r}{m}.{d}.{s} {reg(d)}, {reg(s, 1)};")
    for d in ("f16", "bf16", "f32"):
        for s in ("f32", "f64"):
            for r in ("", ".rn", ".rz", ".rm", ".rp", ".rna"):
                for m in (".relu", ".satfinite", ".relu.satfinite"):
                    add(f"cvt{r}{m}.{d}.{s} {reg(d)}, {reg(s, 1)};")
    for d in ("f16x2", "bf16x2"):
        for r in ("", ".rn", ".rz"):
            for m in ("", ".relu", ".satfinite"):
                add(f"cvt{r}{m}.{d}.f32 {reg(d)}, %f32_1, %f32_2;")
    # operand register types: every register type in each operand of typical forms
    for tmpl, n in (("add.f32 {}, {}, {};", 3), ("add.rn.f16 {}, {}, {};", 3),
                    ("add.rn.f16x2 {}, {}, {};", 3), ("add.rn.bf16 {}, {}, {};", 3),
                    ("add.rn.bf16x2 {}, {}, {};", 3), ("add.f64 {}, {}, {};", 3),
                    ("add.s32 {}, {}, {};", 3), ("add.u64 {}, {}, {};", 3),
                    ("and.b32 {}, {}, {};", 3), ("mul.wide.s32 {}, {}, {};", 3),
                    ("shl.b32 {}, {}, {};", 3), ("setp.lt.f32 {}, {}, {};", 3),
                    ("selp.b32 {}, {}, {}, {};", 4), ("fma.rn.f32 {}, {}, {}, {};", 4),
                    ("cvt.rn.f32.s32 {}, {};", 2), ("cvt.f32.f16 {}, {};", 2),
                    ("cvt.rn.f16.f32 {}, {};", 2), ("cvt.u32.u16 {}, {};", 2),
                    ("cvt.rn.f16x2.f32 {}, {}, {};", 3), ("cvt.rn.bf16x2.f32 {}, {}, {};", 3),
                    ("mov.b32 {}, {};", 2), ("mov.f32 {}, {};", 2), ("popc.b32 {}, {};", 2),
                    ("neg.f16 {}, {};", 2), ("abs.bf16 {}, {};", 2), ("ex2.approx.f32 {}, {};", 2),
                    ("min.f16x2 {}, {}, {};", 3), ("bfe.u32 {}, {}, {}, {};", 4)):
        base = _natural_args(tmpl, n)
        for k in range(n):
            for rt in REGTYPES:
                args = list(base)
                args[k] = f"%{rt}_{k}"
                add(tmpl.format(*args))
    # immediates
    imms = ("1", "-1", "0x3F800000", "0f3F800000", "0d3FF0000000000000", "1.5")
    for tmpl in ("add.f32 %f32_0, %f32_1, {};", "add.f64 %f64_0, %f64_1, {};",
                 "add.rn.f16 %f16_0, %f16_1, {};", "add.rn.f16x2 %b32_0, %b32_1, {};",
                 "add.s32 %s32_0, %s32_1, {};", "add.u64 %u64_0, %u64_1, {};",
                 "mov.f32 %f32_0, {};", "mov.b32 %b32_0, {};", "mov.f64 %f64_0, {};",
                 "setp.lt.f32 %pred_0, %f32_1, {};", "selp.f32 %f32_0, {}, %f32_1, %pred_1;",
                 "fma.rn.f32 %f32_0, %f32_1, {}, %f32_2;", "and.b32 %b32_0, %b32_1, {};",
                 "cvt.rn.f32.s32 %f32_0, {};", "min.s32 %s32_0, %s32_1, {};",
                 "mul.lo.u32 %u32_0, %u32_1, {};", "shl.b32 %b32_0, %b32_1, {};",
                 "max.f32 %f32_0, %f32_1, {};", "mov.b16 %b16_0, {};"):
        for v in imms:
            add(tmpl.format(v))
    out += _new_forms()
    out += _b128_forms()
    out += _collective_forms()
    out += _mbarrier_forms()
    return list(dict.fromkeys(out))


def _collective_forms() -> list[str]:
    """Spellings of the warp collectives and of cvta, and their neighbours ptxas refuses
    (a shuffle without its mode, a collective without .sync, a modifier it does not take)."""
    out: list[str] = []
    add = out.append
    extra = ("", ".gpu", ".aligned", ".uni", ".sat", ".volatile")
    for mode in ("", ".up", ".down", ".bfly", ".idx"):
        for t in ("b32", "u32", "f32", "b64"):
            for m in extra:
                add(f"shfl.sync{mode}{m}.{t} %b32_0, %b32_1, %b32_2, %b32_3, %b32_0;")
            add(f"shfl{mode}.{t} %b32_0, %b32_1, %b32_2, %b32_3;")
    for mode in (".all", ".any", ".uni", ".ballot"):
        for t in ("pred", "b32"):
            d = "%pred_0" if t == "pred" else "%b32_0"
            for m in extra:
                add(f"vote.sync{mode}{m}.{t} {d}, %pred_1, %b32_2;")
            add(f"vote{mode}.{t} {d}, %pred_1;")
    for mode in (".any", ".all", ""):
        for t in ("b32", "b64", "u32"):
            for m in extra:
                add(f"match{mode}.sync{m}.{t} %b32_0, %{t}_1, %b32_2;")
    for op in (".add", ".min", ".max", ".and", ".or", ".xor", ""):
        for t in ("u32", "s32", "b32", "u64"):
            for m in extra:
                add(f"redux.sync{op}{m}.{t} %{t}_0, %{t}_1, %b32_2;")
    for rt in REGTYPES:  # each operand of each collective a register of every kind
        r = f"%{rt}_3"
        for k in range(5):
            ops = ["%b32_0", "%b32_1", "%b32_2", "%b32_3", "%b32_0"]
            ops[k] = r
            add(f"shfl.sync.idx.b32 {', '.join(ops)};")
        for k in range(3):
            for head, ops in (("vote.sync.all.pred", ["%pred_0", "%pred_1", "%b32_2"]),
                              ("vote.sync.ballot.b32", ["%b32_0", "%pred_1", "%b32_2"]),
                              ("match.any.sync.b32", ["%b32_0", "%b32_1", "%b32_2"]),
                              ("match.any.sync.b64", ["%b32_0", "%b64_1", "%b32_2"]),
                              ("redux.sync.add.u32", ["%u32_0", "%u32_1", "%b32_2"]),
                              ("redux.sync.and.b32", ["%b32_0", "%b32_1", "%b32_2"])):
                ops = list(ops)
                ops[k] = r
                add(f"{head} {', '.join(ops)};")
    for rt in REGTYPES:  # sad's operands: registers of its type's size and kind
        add(f"sad.u32 %u32_0, %u32_1, %{rt}_2, %u32_3;")
        add(f"sad.s64 %{rt}_0, %s64_1, %s64_2, %s64_3;")
    for m in ("", ".rn", ".rz", ".sat", ".hi", ".lo", ".ftz"):  # sad takes no modifier
        for t in INT + ("b32", "f32"):
            add(f"sad{m}.{t} {reg(t)}, {reg(t, 1)}, {reg(t, 2)}, {reg(t, 3)};")
    for to in ("", ".to"):
        for sp in ("", ".global", ".shared", ".local", ".const", ".param"):
            for t in ("u32", "u64", "s64", "b64", "s32", "b32", "f64"):
                for m in ("", ".volatile", ".sat"):
                    add(f"cvta{to}{sp}{m}.{t} %{t}_0, %{t}_1;")
    return out


#: mbarrier operations and their operands in natural registers: the form with the most
#: operands first (the arity probes drop and add one from the first accepted spelling).
MBARRIER_OPS = (
    ("init", ("[%b64_1], %u32_2",)),
    ("inval", ("[%b64_1]",)),
    ("arrive", ("%b64_0, [%b64_1], %u32_2", "%b64_0, [%b64_1]", "_, [%b64_1], %u32_2",
                "_, [%b64_1]")),
    ("arrive_drop", ("%b64_0, [%b64_1], %u32_2", "%b64_0, [%b64_1]", "_, [%b64_1]")),
    ("test_wait", ("%pred_0, [%b64_1], %b64_2",)),
    ("try_wait", ("%pred_0, [%b64_1], %b64_2, %u32_3", "%pred_0, [%b64_1], %b64_2")),
    ("expect_tx", ("[%b64_1], %u32_2",)),
    ("complete_tx", ("[%b64_1], %u32_2",)),
    ("pending_count", ("%u32_0, %b64_1",)),
)


def _mbarrier_forms() -> list[str]:
    """mbarrier's spellings: each operation with the modifiers one may give it (state space,
    ordering, scope, .noComplete/.expect_tx, .parity) and their neighbours ptxas refuses,
    then each operand a register of every kind."""
    out: list[str] = []
    add = out.append
    extras = {"arrive": ("", ".noComplete", ".expect_tx"),
              "arrive_drop": ("", ".noComplete", ".expect_tx"),
              "test_wait": ("", ".parity"), "try_wait": ("", ".parity")}
    for op, shapes in MBARRIER_OPS:
        for x in extras.get(op, ("",)):
            for sem in ("", ".release", ".acquire", ".relaxed"):
                for scope in ("", ".cta", ".cluster", ".gpu"):
                    for sp in ("", ".shared", ".shared::cta", ".shared::cluster", ".global"):
                        for ops in shapes:
                            if x == ".parity":
                                ops = ops.replace("%b64_2", "%u32_2")
                            add(f"mbarrier.{op}{x}{sem}{scope}{sp}.b64 {ops};")
        add(f"mbarrier.{op}.shared.b32 {shapes[0]};")
        add(f"mbarrier.{op}.shared.u64 {shapes[0]};")
        add(f"mbarrier.{op}.shared {shapes[0]};")
    add("mbarrier.try_wait.parity.shared.b64 %pred_0, [%b64_1], %u32_2, %u32_3;")
    for v in ("0", "1", "-1", "2", "1048575", "1048576"):  # literal counts and parities
        add(f"mbarrier.arrive.shared.b64 %b64_0, [%b64_1], {v};")
        add(f"mbarrier.arrive_drop.noComplete.shared.b64 %b64_0, [%b64_1], {v};")
        add(f"mbarrier.arrive.expect_tx.shared.b64 %b64_0, [%b64_1], {v};")
        add(f"mbarrier.init.shared.b64 [%b64_1], {v};")
        add(f"mbarrier.expect_tx.shared.b64 [%b64_1], {v};")
        add(f"mbarrier.test_wait.parity.shared.b64 %pred_0, [%b64_1], {v};")
        add(f"mbarrier.try_wait.parity.shared.b64 %pred_0, [%b64_1], {v}, 100;")
        add(f"mbarrier.try_wait.shared.b64 %pred_0, [%b64_1], %b64_2, {v};")
    add("mbarrier.arrive.shared.b64 %b64_0, [s_var];")
    add("mbarrier.init.shared.b64 [s_var], 1;")
    add("mbarrier.init.shared.b64 [%b32_1], 1;")
    add("mbarrier.test_wait.parity.shared.b64 %pred_0, [%b32_1], 1;")
    for rt in REGTYPES:  # each operand a register of every kind
        r = f"%{rt}_3"
        for op, shapes in MBARRIER_OPS:
            args = _split_args(shapes[0])
            for k, a in enumerate(args):
                if a.startswith("%"):
                    bad = list(args)
                    bad[k] = r
                    sp = "" if op == "pending_count" else ".shared"
                    add(f"mbarrier.{op}{sp}.b64 {', '.join(bad)};")
        add(f"mbarrier.test_wait.parity.shared.b64 %pred_0, [%b64_1], {r};")
        add(f"mbarrier.try_wait.parity.shared.b64 %pred_0, [%b64_1], %u32_2, {r};")
    return out


#: Modifiers probed one at a time with ld, st and ldu (``_memory_forms``): those ptxas never
#: accepts with the opcode are refused by the checker (``@mods`` rows); others pass to the
#: translator.
MEM_MODS = (".sat", ".ftz", ".rn", ".rz", ".approx", ".full", ".uni", ".aligned", ".sync",
            ".wide", ".hi", ".lo", ".cc", ".relu", ".noftz", ".NaN", ".abs", ".volatile",
            ".relaxed", ".acquire", ".release", ".weak", ".cta", ".gpu", ".sys", ".cluster",
            ".nc", ".ca", ".cg", ".cs", ".lu", ".cv", ".wb", ".wt",
            ".to", ".trap", ".clamp", ".shiftamt")


def _memory_forms() -> list[str]:
    """ld/st/ldu with each modifier of :data:`MEM_MODS` in the places one can stand (after
    the opcode, after the state space, with and without a scope or an ordering), and with
    one operand fewer and one more than they take."""
    out: list[str] = []
    add = out.append
    for m in MEM_MODS:
        for pre, post in (("", ""), (".relaxed", ".gpu"), ("", ".gpu"), (".relaxed", "")):
            for sp in (".global", ".shared"):
                add(f"ld{pre}{m}{post}{sp}.u32 %u32_0, [%b64_1];")
                add(f"ld{pre}{post}{sp}{m}.u32 %u32_0, [%b64_1];")
                add(f"st{pre}{m}{post}{sp}.u32 [%b64_1], %u32_0;")
                add(f"st{pre}{post}{sp}{m}.u32 [%b64_1], %u32_0;")
        add(f"ldu{m}.global.u32 %u32_0, [%b64_1];")
        add(f"ldu.global{m}.u32 %u32_0, [%b64_1];")
    for sp in ("", ".global", ".shared", ".local", ".param", ".const"):
        for t, r in (("u32", "%u32_0"), ("u64", "%u64_0"), ("f32", "%f32_0")):
            add(f"ld{sp}.{t} {r}, [%b64_1];")
            add(f"ld{sp}.{t} {r};")
            add(f"ld{sp}.{t} [%b64_1];")
            add(f"ld{sp}.{t} {r}, [%b64_1], %b64_2;")
            add(f"st{sp}.{t} [%b64_1], {r};")
            add(f"st{sp}.{t} [%b64_1];")
            add(f"st{sp}.{t} [%b64_1], {r}, {r};")
    return out


def _new_forms() -> list[str]:
    """Spellings of the packed-integer, dot-product, video, fns, fp8 and half-function
    instructions NVRTC and numba emit, and their neighbours ptxas refuses.  (Atomics are
    not spellings of the table: their many legal modifier combinations are checked by the
    translator.)"""
    out: list[str] = []
    add = out.append
    for op in ("add", "sub", "min", "max"):
        for t in ("s16x2", "u16x2"):
            for m in ("", ".relu", ".sat"):
                add(f"{op}{m}.{t} %b32_0, %b32_1, %b32_2;")
    for a in ("u32", "s32", "b32"):
        for b in ("u32", "s32", "b32"):
            add(f"dp4a.{a}.{b} %b32_0, %b32_1, %b32_2, %b32_3;")
            for m in (".lo", ".hi", ""):
                add(f"dp2a{m}.{a}.{b} %b32_0, %b32_1, %b32_2, %b32_3;")
    add("fns.b32 %b32_0, %b32_1, %b32_2, %s32_3;")
    add("fns.u32 %b32_0, %b32_1, %b32_2, %s32_3;")
    for v in ("vadd", "vsub", "vavrg", "vabsdiff", "vmin", "vmax"):
        for n in ("2", "4"):
            for ts in [f"{d}.{a}.{b}" for d in ("u32", "s32") for a in ("u32", "s32")
                       for b in ("u32", "s32")] + ["b32.b32.b32"]:
                for m in ("", ".sat", ".add"):
                    add(f"{v}{n}.{ts}{m} %b32_0, %b32_1, %b32_2, %b32_3;")
    for fp8 in ("e4m3x2", "e5m2x2", "e2m1x2", "e3m2x2", "e2m3x2"):
        for m in (".rn.satfinite", ".rn.satfinite.relu", ".rn", ".rz.satfinite", ""):
            add(f"cvt{m}.{fp8}.f32 %b16_0, %f32_1, %f32_2;")
            add(f"cvt{m}.{fp8}.f16x2 %b16_0, %b32_1;")
            add(f"cvt{m}.{fp8}.bf16x2 %b16_0, %b32_1;")
        for m in (".rn", ".rn.relu", ""):
            add(f"cvt{m}.f16x2.{fp8} %b32_0, %b16_1;")
            add(f"cvt{m}.bf16x2.{fp8} %b32_0, %b16_1;")
    for t in ("f16", "f16x2", "bf16", "bf16x2"):
        r = "%b16_0, %b16_1" if "x2" not in t else "%b32_0, %b32_1"
        for op in ("tanh", "ex2"):
            for m in (".approx", ".approx.ftz", ".approx.ftz.noftz", ""):
                add(f"{op}{m}.{t} {r};")
    for t in ("f16x2", "bf16x2"):
        for c in ("lt", "eq", "geu", "nan"):
            add(f"set.{c}.u32.{t} %b32_0, %b32_1, %b32_2;")
            add(f"set.{c}.s32.{t} %b32_0, %b32_1, %b32_2;")
            add(f"set.{c}.{t}.{t} %b32_0, %b32_1, %b32_2;")
            add(f"setp.{c}.{t} %pred_0|%pred_1, %b32_1, %b32_2;")
    return out


def _b128_forms() -> list[str]:
    """Spellings of .b128 (PTX ISA 8.3): mov's copy, literal, pack and unpack (two .b64 or
    .f64, four .b32 registers), and the arithmetic, logic, compare, select and convert
    instructions ptxas refuses the type in."""
    out: list[str] = []
    add = out.append
    add("mov.b128 %b128_0, %b128_1;")
    for v in ("0", "-1", "5", "0x7fffffffffffffff", "0f3F800000"):
        add(f"mov.b128 %b128_0, {v};")
    for parts in (("%b64_1", "%b64_2"), ("%f64_1", "%f64_2"), ("%b32_1", "%b32_2", "%b32_3", "%b32_0"),
                  ("%b32_1", "%b32_2"), ("%b64_1", "%b32_2"), ("%b64_1",),
                  ("%b64_1", "%b64_2", "%b64_3"), ("%b16_1", "%b16_2", "%b16_3", "%b16_0")):
        add(f"mov.b128 %b128_0, {{{', '.join(parts)}}};")
        add(f"mov.b128 {{{', '.join(parts)}}}, %b128_1;")
    add("mov.b64 %b64_0, {%b128_1};")
    add("mov.b64 {%b32_0, %b32_1}, %b128_1;")
    for op, n in (("add", 3), ("sub", 3), ("mul.lo", 3), ("and", 3), ("or", 3), ("xor", 3),
                  ("not", 2), ("cnot", 2), ("popc", 2), ("brev", 2), ("min", 3), ("max", 3)):
        add(f"{op}.b128 {', '.join(f'%b128_{i}' for i in range(n))};")
    add("shl.b128 %b128_0, %b128_1, %u32_1;")
    add("shr.b128 %b128_0, %b128_1, %u32_1;")
    add("setp.eq.b128 %pred_0, %b128_1, %b128_2;")
    add("selp.b128 %b128_0, %b128_1, %b128_2, %pred_1;")
    for t in ("u64", "b64", "u32", "f64"):
        add(f"cvt.{t}.b128 %{t}_0, %b128_1;")
        add(f"cvt.b128.{t} %b128_0, %{t}_1;")
    return out


def _b128_access_forms() -> list[str]:
    """.b128 accesses (PTX ISA 8.3): ld/st with each memory order, scope and cache operator,
    a register narrower or wider than the type, and the atomics -- atom.cas and atom.exch
    (sm_90) in each state space with each order and scope, and the operations, state spaces,
    vectors and operands ptxas refuses them."""
    out: list[str] = []
    add = out.append
    for sp in ("", ".global", ".shared"):
        for sem in ("", ".weak", ".volatile", ".relaxed.cta", ".relaxed.gpu", ".relaxed.sys",
                    ".relaxed.cluster", ".acquire.gpu", ".release.gpu", ".acquire.sys",
                    ".release.sys"):
            add(f"ld{sem}{sp}.b128 %b128_0, [%b64_1];")
            add(f"st{sem}{sp}.b128 [%b64_1], %b128_0;")
        for c in (".ca", ".cg", ".cs", ".lu", ".cv", ".wb", ".wt", ".nc"):
            add(f"ld{sp}{c}.b128 %b128_0, [%b64_1];")
            add(f"st{sp}{c}.b128 [%b64_1], %b128_0;")
    for rt in REGTYPES:  # a .b128 ld/st with a register of every kind, and the reverse
        add(f"ld.global.b128 %{rt}_0, [%b64_1];")
        add(f"st.global.b128 [%b64_1], %{rt}_0;")
    for t in ("b8", "u16", "b32", "u32", "s32", "f32", "b64", "u64", "f64"):
        add(f"ld.global.{t} %b128_0, [%b64_1];")
        add(f"st.global.{t} [%b64_1], %b128_0;")
    add("ld.global.v2.b64 {%b128_0, %b128_1}, [%b64_1];")
    add("ld.global.b128 {%b64_0, %b64_1}, [%b64_1];")
    add("st.global.b128 [%b64_1], {%b64_0, %b64_1};")
    add("st.global.b128 [%b64_1], 5;")
    for op in ("cas", "exch", "add", "and", "or", "xor", "min", "max", "inc", "dec"):
        ops = "%b128_0, [%b64_1], %b128_1, %b128_2" if op == "cas" else "%b128_0, [%b64_1], %b128_1"
        for sp in ("", ".global", ".shared", ".shared::cta", ".shared::cluster", ".local",
                   ".const", ".param"):
            add(f"atom{sp}.{op}.b128 {ops};")
        for sem in (".relaxed", ".acquire", ".release", ".acq_rel", ""):
            for scope in ("", ".cta", ".cluster", ".gpu", ".sys"):
                add(f"atom{sem}{scope}.global.{op}.b128 {ops};")
        add(f"atom.global.v2.{op}.b128 {ops};")
        add(f"red.global.{op}.b128 [%b64_1], %b128_1;")
    for rt in REGTYPES:  # each operand of the atomics a register of every kind
        add(f"atom.global.cas.b128 %{rt}_0, [%b64_1], %b128_1, %b128_2;")
        add(f"atom.global.cas.b128 %b128_0, [%b64_1], %{rt}_1, %b128_2;")
        add(f"atom.global.cas.b128 %b128_0, [%b64_1], %b128_1, %{rt}_2;")
        add(f"atom.global.exch.b128 %b128_0, [%b64_1], %{rt}_1;")
    for v in ("5", "-1"):
        add(f"atom.global.exch.b128 %b128_0, [%b64_1], {v};")
        add(f"atom.global.cas.b128 %b128_0, [%b64_1], {v}, %b128_2;")
        add(f"atom.global.cas.b128 %b128_0, [%b64_1], %b128_1, {v};")
    for t in ("b64", "u64", "b32"):  # a .b128 register in an atomic of another type
        add(f"atom.global.cas.{t} %{t}_0, [%b64_1], %b128_1, %{t}_2;")
        add(f"atom.global.exch.{t} %{t}_0, [%b64_1], %b128_1;")
        add(f"atom.global.exch.{t} %b128_0, [%b64_1], %{t}_1;")
    return out


#: The state spaces, vector widths and types of the ld/st probes.
LDST_SPACES = ("", ".global", ".shared", ".local", ".const", ".param")
LDST_TYPES = ("b8", "u8", "s8", "b16", "u16", "s16", "f16", "b32", "u32", "s32", "f32", "b64",
              "u64", "s64", "f64", "pred", "b128", "f16x2", "bf16")


def _operand_forms() -> list[str]:
    """Probes of the operands themselves: guard predicates, ld/st/ldu state spaces, vector
    widths, types and register widths, address operands, cvta widths, immediates in range
    and out, barrier numbers, control-flow modifiers."""
    out: list[str] = []
    add = out.append
    for rt in REGTYPES:  # a guard is a predicate register (negated too)
        add(f"@%{rt}_1 add.s32 %s32_0, %s32_1, %s32_2;")
        add(f"@!%{rt}_1 add.s32 %s32_0, %s32_1, %s32_2;")
    for op in ("ld", "st", "ldu"):
        for sp in LDST_SPACES:
            for v in ("", ".v2", ".v4"):
                for t in LDST_TYPES:
                    r = f"%{NATURAL.get(t, t)}_0" if t != "bf16" else "%b16_0"
                    val = r if not v else "{" + ", ".join([r] * int(v[2:])) + "}"
                    addr = "[%b64_1]" if sp != ".param" else "[%b64_1]"
                    add(f"{op}{sp}{v}.{t} {val}, {addr};" if op != "st" else
                        f"{op}{sp}{v}.{t} {addr}, {val};")
    for t in ("u8", "u16", "u32", "u64", "f32", "f64", "s32", "b8", "b16", "b32", "b64"):
        for rt in REGTYPES:  # register widths: a register narrower or of another kind
            add(f"ld.global.{t} %{rt}_0, [%b64_1];")
            add(f"st.global.{t} [%b64_1], %{rt}_0;")
    for sym in SYMBOLS:  # a variable's state space against the instruction's
        for sp in LDST_SPACES:
            for off in ("", "+4"):
                add(f"ld{sp}.u32 %u32_0, [{sym}{off}];")
                add(f"st{sp}.u32 [{sym}{off}], %u32_0;")
                add(f"ldu{sp}.u32 %u32_0, [{sym}{off}];")
    for form in ("bra $k_end;", "bra.uni $k_end;", "bra $k_end, $k_end;", "bra.uni $k_end, $k_end;",
                 "bra;", "bra %b64_1;", "@%pred_0 bra $k_end;", "@%pred_0 bra $k_end, $k_end;"):
        add(form)  # bra's operand: one label
    for rt in REGTYPES:  # the address operand's register
        add(f"ld.global.u32 %u32_0, [%{rt}_1];")
        add(f"ld.global.u32 %u32_0, [%{rt}_1+8];")
    for sp in (".global", ".shared", ".local", ".const", ".param"):
        for d in ("u32", "u64"):
            for a in ("u32", "u64", "b64", "s64", "f64"):
                add(f"cvta{sp}.{d} %{d}_0, %{a}_1;")
                add(f"cvta.to{sp}.{d} %{d}_0, %{a}_1;")
    for v in ("0", "15", "16", "-1", "255", "256"):  # immediates: ranges
        add(f"bar.sync {v};")
        add(f"barrier.sync {v};")
        add(f"bfe.u32 %u32_0, %u32_1, {v}, 4;")
        add(f"bfe.u32 %u32_0, %u32_1, 4, {v};")
        add(f"bfi.b32 %b32_0, %b32_1, %b32_2, {v}, 4;")
        add(f"lop3.b32 %b32_0, %b32_1, %b32_2, %b32_3, {v};")
        add(f"shl.b32 %b32_0, %b32_1, {v};")
    for c in ("32", "33", "0", "64", "1024", "1056"):
        add(f"bar.sync 1, {c};")
    for m in ("", ".uni", ".volatile", ".sync", ".aligned"):
        add(f"bra{m} $k_end;")
        add(f"ret{m};")
        add(f"exit{m};")
    return out


def _arity_forms(forms: list[str]) -> list[str]:
    """Each form with its last operand dropped, and with one more operand."""
    out: list[str] = []
    for f in forms:
        head, _, ops = f.rstrip(";").partition(" ")
        args = _split_args(ops)
        if len(args) > 1:
            out.append(f"{head} {', '.join(args[:-1])};")
        out.append(f"{head} {', '.join(args + [args[-1]])};")
    return out


def _split_args(ops: str) -> list[str]:
    """Operands split at top-level commas."""
    args, depth, cur = [], 0, ""
    for ch in ops:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        args.append(cur.strip())
    return args


#: Module headers probed (.version x .target) and entry directives.
TARGETS = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
VERSIONS = tuple(f"{m}.{n}" for m, top in ((6, 5), (7, 8), (8, 8), (9, 0)) for n in range(top + 1))
TARGETS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a")
DIRECTIVES = (".maxntid 0", ".maxntid 1", ".maxntid 1024", ".maxntid 1025", ".maxntid 32, 32, 2",
              ".reqntid 0", ".reqntid 64", ".reqntid 2048", ".maxntid 32, 0", ".minnctapersm 0",
              ".maxnreg 0", ".maxnreg 16")


def header_verdicts(ptxas: str = "ptxas") -> list[str]:
    """ptxas's verdict on each ``.version``/``.target`` pair and entry directive, as
    table rows (``@head V T`` / ``@entry DIRECTIVE``)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "h.ptx")
        for t in TARGETS:
            for v in VERSIONS:
                text = f".version {v}\n.target {t}\n.address_size 64\n.visible .entry k()\n{{\n ret;\n}}\n"
                rows.append(f"{_verdict_of(ptxas, path, text, t)}\t@head {v} {t}")
        for d in DIRECTIVES:
            text = HEAD + f".visible .entry k() {d}\n{{\n ret;\n}}\n"
            rows.append(f"{_verdict_of(ptxas, path, text, 'sm_90')}\t@entry {d}")
    return rows


def minimum_versions(rows: list[str]) -> str:
    """``@minver TARGET MAJOR.MINOR`` lines: the oldest ``.version`` ptxas accepted with
    each ``.target`` of the header rows."""
    best: dict[str, tuple[int, int]] = {}
    for r in rows:
        verdict, _, what = r.partition("\t")
        if verdict == "ok" and what.startswith("@head "):
            _, v, t = what.split()
            ver = tuple(int(x) for x in v.split("."))
            best[t] = min(best.get(t, ver), ver)  # type: ignore[arg-type]
    return "".join(f"@minver {t} {v[0]}.{v[1]}\n" for t, v in sorted(best.items()))


def _verdict_of(ptxas: str, path: str, text: str, target: str) -> str:
    with open(path, "w") as f:
        f.write(text)
    p = subprocess.run([ptxas, f"-arch={target}", path, "-o", os.devnull], capture_output=True,
                       text=True, timeout=120)
    if p.returncode == 0:
        return "ok"
    m = re.search(r"(error|fatal)\s*: (.*)", p.stdout + p.stderr)
    return "refused: " + (m.group(2).strip() if m else "error")


def _natural_args(tmpl: str, n: int) -> list[str]:
    """The operands of a template instruction, each in its natural register."""
    op = tmpl.split()[0].split(".")
    ty = [t for t in op if t in REGTYPES or t in NATURAL]
    t = ty[-1]
    if op[0] == "cvt":
        d, s = ty[0], ty[1]
        return [reg(d)] + [reg(s, i) for i in range(1, n)]
    if op[0] == "setp":
        return ["%pred_0", reg(t, 1), reg(t, 2)]
    if op[0] == "selp":
        return [reg(t), reg(t, 1), reg(t, 2), "%pred_3"]
    if op[0] == "popc":
        return ["%u32_0", reg(t, 1)]
    if op[0] == "shl":
        return [reg(t), reg(t, 1), "%u32_2"]
    if op[0] == "bfe":
        return [reg(t), reg(t, 1), "%u32_2", "%u32_3"]
    if "wide" in op:
        return [reg(_wide(t)), reg(t, 1), reg(t, 2)]
    return [reg(t, i) for i in range(n)]


def module(forms: list[str]) -> str:
    """One kernel holding ``forms``, the first on line ``FIRST`` and one a line."""
    body = "".join(f"  {f}\n" for f in forms)
    return (HEAD + VARS + ".visible .entry k(.param .u32 k_p)\n{\n" + PREAMBLE + body
            + "$k_end:\n  ret;\n}\n")


#: The PTX line of the first form in :func:`module`.
FIRST = HEAD.count("\n") + VARS.count("\n") + 3 + PREAMBLE.count("\n")
_ERR = re.compile(r", line (\d+); (error|fatal)\s*: (.*)")


def ptxas_verdicts(forms: list[str], ptxas: str = "ptxas") -> list[str]:
    """ptxas's verdict on each form: ``ok`` or ``refused: <its message>``."""
    out: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f.ptx")
        for i in range(0, len(forms), 200):
            chunk = forms[i:i + 200]
            errs = _run(ptxas, path, chunk)
            if errs is None:  # a parse error aborts the whole file: one by one
                for f in chunk:
                    e1 = _run(ptxas, path, [f])
                    out.append("refused: parse error" if e1 is None else
                               ("refused: " + e1[FIRST]) if FIRST in e1 else "ok")
                continue
            out.extend(("refused: " + errs[FIRST + k]) if FIRST + k in errs else "ok"
                       for k in range(len(chunk)))
    return out


def _run(ptxas: str, path: str, forms: list[str]) -> dict[int, str] | None:
    with open(path, "w") as f:
        f.write(module(forms))
    p = subprocess.run([ptxas, "-arch=sm_90", path, "-o", os.devnull], capture_output=True,
                       text=True, timeout=120)
    errs: dict[int, str] = {}
    for m in _ERR.finditer(p.stdout + p.stderr):
        if m.group(2) == "fatal":
            return None
        errs.setdefault(int(m.group(1)), m.group(3).strip())
    if p.returncode != 0 and not errs:
        return None
    return errs


def parse_forms(forms: list[str]) -> list:
    """The executor's parse of each form (its ``Instr``), None where it cannot parse it."""
    from gpuarray_sim.ptx import PtxError, parse
    from gpuarray_sim.ptx._ast import Instr

    try:
        m = parse(module(forms))
    except PtxError:
        if len(forms) == 1:
            return [None]
        h = len(forms) // 2  # one form the parser refuses: halve until it is found
        return parse_forms(forms[:h]) + parse_forms(forms[h:])
    return [x for x in m.functions["k"].body if isinstance(x, Instr)][:len(forms)]


#: Opcodes whose spellings the table lists (the instruction-form rows), and control-flow
#: opcodes whose few spellings the operand probes cover completely.
CONTROL = ("bra", "ret", "exit")
def _firsts(forms: list[str], verdicts: list[str]) -> list[str]:
    """The first accepted spelling row of each opcode text (the arity probes' bases)."""
    spell = set(_forms())
    seen: set[str] = set()
    out = []
    for f, v in zip(forms, verdicts, strict=True):
        head = f.split()[0]
        if v == "ok" and f in spell and head not in seen:
            seen.add(head)
            out.append(f)
    return out


def legal_text(forms: list[str], verdicts: list[str], heads: list[str]) -> str:
    """legal_forms.txt from the verdicts: the spellings ptxas accepts (the instruction-form
    rows and the control-flow probes), the operand counts it accepts of each (the arity
    rows), the ld/st/ldu state space, vector and type combinations it accepts, and the
    oldest ``.version`` of each ``.target``."""
    from gpuarray_sim.ptx._check import form_key, ldst_key

    spelling = set(_forms())
    firsts = _firsts(forms, verdicts)
    arity = set(firsts) | set(_arity_forms(firsts))
    memory = set(_memory_forms())
    mods: dict[str, set[str]] = {}
    mem_counts: dict[str, set[int]] = {}

    legal: dict[str, set[str]] = {}
    counts: dict[str, set[int]] = {}
    ldst: dict[str, bool] = {}
    for f, it, v in zip(forms, parse_forms(forms), verdicts, strict=True):
        if it is None or it.pred is not None:
            continue
        if f in spelling or it.base in CONTROL:
            keys = legal.setdefault(it.base, set())
            if v == "ok":
                keys.add(form_key(it))
        if (f in arity or it.base in CONTROL) and v == "ok":
            counts.setdefault(form_key(it), set()).add(len(it.args))
        k = ldst_key(it)
        if k is not None:  # accepted with some register of the probes
            ldst[k] = ldst.get(k, False) or v == "ok"
        if f in memory:
            accepted = mods.setdefault(it.base, set())
            if v == "ok":
                accepted.update("." + m for m in it.mods)
                mem_counts.setdefault(it.base, set()).add(len(it.args))
    lines = ["# What a driver's PTX JIT accepts (ptxas -arch=sm_90, PTX ISA 9.0).\n"
                "# Generated by sim/tools/ptx_forms/gen.py from ptxas's verdicts; do not edit.\n"
                "# One line an opcode the table covers: the opcode, then its accepted spellings\n"
                "# (_check.form_key: opcode and sorted modifiers, '|', the types in order), "
                "space-separated;\n# '@arity KEY N[,N]': the operand counts ptxas accepts of "
                "that spelling;\n# '@ldst BASE.SPACE.VEC.TYPE ok|refused': ld/st/ldu's state "
                "space, vector and type;\n# '@modset MOD...': the modifiers probed one at a "
                "time with ld/st/ldu, and '@mods BASE MOD...' those ptxas accepts with BASE;\n"
                "# '@basearity BASE N[,N]': ld/st/ldu's operand counts (no cache-hint or level "
                "qualifier);\n# '@minver TARGET VERSION': the oldest .version "
                "of the .target.\n"]
    lines += [" ".join([base, *sorted(legal[base])]) + "\n" for base in sorted(legal)]
    lines += [f"@arity {key} {','.join(str(n) for n in sorted(counts[key]))}\n"
              for key in sorted(counts)]
    lines += [f"@ldst {key} {'ok' if ldst[key] else 'refused'}\n" for key in sorted(ldst)]
    lines.append("@modset " + " ".join(MEM_MODS) + "\n")
    lines += [f"@mods {base} {' '.join(sorted(m for m in mods[base] if m in MEM_MODS))}\n"
              for base in sorted(mods)]
    lines += [f"@basearity {base} {','.join(str(n) for n in sorted(mem_counts[base]))}\n"
              for base in sorted(mem_counts)]
    return "".join(lines) + minimum_versions(heads)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="sim/tests/ptx/data/ptx_forms.tsv.gz")
    ap.add_argument("--ptxas", default="ptxas")
    ap.add_argument("--legal", default="sim/gpuarray_sim/ptx/legal_forms.txt")
    a = ap.parse_args(argv)
    spell = _forms()
    forms = list(dict.fromkeys(spell + _operand_forms() + _memory_forms() + _b128_access_forms()))
    verdicts = ptxas_verdicts(forms, a.ptxas)
    extra = [f for f in _arity_forms(_firsts(forms, verdicts)) if f not in set(forms)]
    verdicts += ptxas_verdicts(extra, a.ptxas)
    forms += extra
    heads = header_verdicts(a.ptxas)
    text = ("# ptxas -arch=sm_90 (PTX ISA 9.0) on each form; sim/tools/ptx_forms/gen.py writes this\n"
            + "".join(f"{v}\t{form}\n" for form, v in zip(forms, verdicts, strict=True))
            + "".join(r + "\n" for r in heads))
    with open(a.out, "wb") as f:  # gzip without a time stamp: the same verdicts, the same bytes
        f.write(gzip.compress(text.encode(), mtime=0))
    with open(a.legal, "w") as f:
        f.write(legal_text(forms, verdicts, heads))
    print(f"{len(forms)} forms, {sum(v != 'ok' for v in verdicts)} refused -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
