"""Random, well-defined CUDA C kernels for the differential fuzzer (seeded).

One concern: write the text.  :func:`program` makes a translation unit of
kernels ``fuzz0``, ``fuzz1``, ...; each thread of a 64-thread block reads
its inputs (random bit patterns, biased to zeros, infinities, NaNs,
subnormals, extremes), computes a random sequence of statements over u32,
u64, f32, f64, f16 and bf16 values and writes every value it made, as bits,
to its row of the output.  Every statement is defined behaviour with one
exact answer in CUDA's documentation: unsigned arithmetic (signed where it
cannot overflow), shifts by less than the width, divisors made nonzero,
float operations through the rounding intrinsics (``__fadd_rz``...: no
contraction, no approximation), conversions with their saturation rules,
f16/bf16 arithmetic and conversions, and warp collectives with random member
masks that only their members execute, reading only members (a mask is a
union of aligned groups of the shuffle's width).  The same text compiles
with NVRTC (``cuda_fp16.h``/``cuda_bf16.h``) and with g++ (``host.h``);
the macros of :data:`PRELUDE` are the only difference.

:func:`program` returns the source and, per kernel, each output slot's kind
(``"i"`` exact bits, ``"f32"``/``"f64"``/``"f16"``/``"bf16"``: any NaN
equals any NaN, as a NaN's payload is not what these kernels test).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["THREADS", "INPUTS", "program", "inputs", "Kernel"]

#: Threads per block (two warps) and input words per thread.
THREADS = 64
INPUTS = 12

PRELUDE = r"""
#ifdef __CUDACC_RTC__
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define FZ_SHFL(s, m, v, b, w) __shfl_sync(m, v, b, w)
#define FZ_SHFL_UP(s, m, v, b, w) __shfl_up_sync(m, v, b, w)
#define FZ_SHFL_DOWN(s, m, v, b, w) __shfl_down_sync(m, v, b, w)
#define FZ_SHFL_XOR(s, m, v, b, w) __shfl_xor_sync(m, v, b, w)
#define FZ_BALLOT(s, m, p) __ballot_sync(m, p)
#define FZ_ANY(s, m, p) (unsigned)__any_sync(m, p)
#define FZ_ALL(s, m, p) (unsigned)__all_sync(m, p)
#define FZ_MATCH(s, m, v) __match_any_sync(m, v)
#define FZ_REDUCE(s, m, v, op) FZ_REDUCE_##op(m, v)
#define FZ_REDUCE_0(m, v) __reduce_add_sync(m, v)
#define FZ_REDUCE_1(m, v) __reduce_min_sync(m, v)
#define FZ_REDUCE_2(m, v) __reduce_max_sync(m, v)
#define FZ_REDUCE_3(m, v) (unsigned)__reduce_min_sync(m, (int)(v))
#define FZ_REDUCE_4(m, v) __reduce_and_sync(m, v)
#define FZ_REDUCE_5(m, v) __reduce_or_sync(m, v)
#define FZ_REDUCE_6(m, v) __reduce_xor_sync(m, v)
#define FZ_REDUCE_7(m, v) (unsigned)__reduce_max_sync(m, (int)(v))
#define FZ_EXPORT extern "C" __global__
#else
#include "host.h"
#define FZ_SHFL(s, m, v, b, w) fz_shfl(s, m, v, 0, b, w)
#define FZ_SHFL_UP(s, m, v, b, w) fz_shfl(s, m, v, 1, b, w)
#define FZ_SHFL_DOWN(s, m, v, b, w) fz_shfl(s, m, v, 2, b, w)
#define FZ_SHFL_XOR(s, m, v, b, w) fz_shfl(s, m, v, 3, b, w)
#define FZ_BALLOT(s, m, p) fz_ballot(s, m, p)
#define FZ_ANY(s, m, p) (unsigned)(fz_ballot(s, m, p) != 0)
#define FZ_ALL(s, m, p) (unsigned)(fz_ballot(s, m, p) == (m))
#define FZ_MATCH(s, m, v) fz_match(s, m, v)
#define FZ_REDUCE(s, m, v, op) fz_reduce(s, m, v, op)
#define FZ_EXPORT extern "C"
#endif
"""

# (result kind, argument kinds, C expression with {0} {1} {2} for the arguments)
_RND = ("rn", "rz", "rd", "ru")
OPS: list[tuple[str, tuple[str, ...], str]] = [
    ("u32", ("u32", "u32"), "{0} + {1}"), ("u32", ("u32", "u32"), "{0} - {1}"),
    ("u32", ("u32", "u32"), "{0} * {1}"), ("u32", ("u32", "u32"), "{0} & {1}"),
    ("u32", ("u32", "u32"), "{0} | {1}"), ("u32", ("u32", "u32"), "{0} ^ ~{1}"),
    ("u32", ("u32", "u32"), "{0} << ({1} & 31u)"), ("u32", ("u32", "u32"), "{0} >> ({1} & 31u)"),
    ("u32", ("u32", "u32"), "(unsigned)((int){0} >> ({1} & 31u))"),
    ("u32", ("u32", "u32"), "{0} / ({1} | 1u)"), ("u32", ("u32", "u32"), "{0} % ({1} | 1u)"),
    ("u32", ("u32", "u32"), "(unsigned)((int){0} / (int)(({1} & 0x7fffu) | 1u))"),
    ("u32", ("u32", "u32"), "(unsigned)((int){0} % (int)(({1} & 0x7fffu) | 1u))"),
    ("u32", ("u32", "u32"), "({0} < {1} ? {0} : {1})"),
    ("u32", ("u32", "u32"), "((int){0} > (int){1} ? {0} : {1})"),
    ("u32", ("u32",), "(unsigned)__popc({0})"), ("u32", ("u32",), "(unsigned)__clz((int){0})"),
    ("u32", ("u32",), "__brev({0})"), ("u32", ("u32",), "(unsigned)__ffs((int){0})"),
    ("u32", ("u32", "u32"), "__umulhi({0}, {1})"),
    ("u32", ("u32", "u32"), "(unsigned)__mulhi((int){0}, (int){1})"),
    ("u32", ("u32", "u32", "u32"), "__byte_perm({0}, {1}, {2} & 0x7777u)"),
    ("u32", ("u32", "u32", "u32"), "__funnelshift_l({0}, {1}, {2})"),
    ("u32", ("u32", "u32", "u32"), "__funnelshift_r({0}, {1}, {2})"),
    ("u32", ("u32", "u32", "u32"), "__usad({0}, {1}, {2})"),
    ("u32", ("u32", "u32", "u32"), "(unsigned)__dp4a((int){0}, (int){1}, (int){2})"),
    ("u32", ("u32", "u32"), "__vadd2({0}, {1})"), ("u32", ("u32", "u32"), "__vsub4({0}, {1})"),
    ("u32", ("u32", "u32"), "__vabsdiffu4({0}, {1})"), ("u32", ("u32", "u32"), "__vmaxs2({0}, {1})"),
    ("u32", ("u32", "u32"), "__vminu4({0}, {1})"),
    ("u64", ("u64", "u64"), "{0} + {1}"), ("u64", ("u64", "u64"), "{0} * {1}"),
    ("u64", ("u64", "u32"), "{0} >> ({1} & 63u)"), ("u64", ("u64", "u64"), "{0} / ({1} | 1ull)"),
    ("u64", ("u32", "u32"), "(unsigned long long){0} * {1}"),
    ("u64", ("u64", "u64"), "__umul64hi({0}, {1})"), ("u64", ("u64",), "__brevll({0})"),
    ("u32", ("u64",), "(unsigned)__popcll({0})"), ("u32", ("u64",), "(unsigned)__clzll((long long){0})"),
    ("u32", ("u64",), "(unsigned)({0} >> 17)"),
    ("f32", ("f32",), "-{0}"), ("f32", ("f32",), "fabsf({0})"), ("f32", ("f32",), "__saturatef({0})"),
    ("f32", ("f32", "f32"), "copysignf({0}, {1})"),
    ("f64", ("f64",), "-{0}"), ("f64", ("f64",), "fabs({0})"),
    ("f64", ("f32",), "(double){0}"), ("f64", ("u32",), "(double){0}"),
    ("f64", ("u32",), "(double)(int){0}"),
    ("f32", ("f16",), "__half2float({0})"), ("f32", ("bf16",), "__bfloat162float({0})"),
    ("u32", ("f16",), "(unsigned)__half2int_rz({0})"), ("f16", ("u32",), "__int2half_rn((int){0} >> 16)"),
]
for r in _RND:
    OPS += [
        ("f32", ("f32", "f32"), f"__fadd_{r}({{0}}, {{1}})"),
        ("f32", ("f32", "f32"), f"__fsub_{r}({{0}}, {{1}})"),
        ("f32", ("f32", "f32"), f"__fmul_{r}({{0}}, {{1}})"),
        ("f32", ("f32", "f32"), f"__fdiv_{r}({{0}}, {{1}})"),
        ("f32", ("f32", "f32", "f32"), f"__fmaf_{r}({{0}}, {{1}}, {{2}})"),
        ("f32", ("f32",), f"__fsqrt_{r}({{0}})"), ("f32", ("f32",), f"__frcp_{r}({{0}})"),
        ("f64", ("f64", "f64"), f"__dadd_{r}({{0}}, {{1}})"),
        ("f64", ("f64", "f64"), f"__dsub_{r}({{0}}, {{1}})"),
        ("f64", ("f64", "f64"), f"__dmul_{r}({{0}}, {{1}})"),
        ("f64", ("f64", "f64"), f"__ddiv_{r}({{0}}, {{1}})"),
        ("f64", ("f64", "f64", "f64"), f"__fma_{r}({{0}}, {{1}}, {{2}})"),
        ("f64", ("f64",), f"__dsqrt_{r}({{0}})"),
        ("u32", ("f32",), f"(unsigned)__float2int_{r}({{0}})"),
        ("u32", ("f32",), f"__float2uint_{r}({{0}})"),
        ("u64", ("f32",), f"(unsigned long long)__float2ll_{r}({{0}})"),
        ("u64", ("f32",), f"__float2ull_{r}({{0}})"),
        ("u32", ("f64",), f"(unsigned)__double2int_{r}({{0}})"),
        ("u32", ("f64",), f"__double2uint_{r}({{0}})"),
        ("u64", ("f64",), f"(unsigned long long)__double2ll_{r}({{0}})"),
        ("u64", ("f64",), f"__double2ull_{r}({{0}})"),
        ("f32", ("u32",), f"__int2float_{r}((int){{0}})"), ("f32", ("u32",), f"__uint2float_{r}({{0}})"),
        ("f32", ("u64",), f"__ll2float_{r}((long long){{0}})"),
        ("f32", ("u64",), f"__ull2float_{r}({{0}})"),
        ("f64", ("u64",), f"__ll2double_{r}((long long){{0}})"),
        ("f64", ("u64",), f"__ull2double_{r}({{0}})"),
        ("f32", ("f64",), f"__double2float_{r}({{0}})"),
        ("f16", ("f32",), f"__float2half_{r}({{0}})"),
        ("bf16", ("f32",), f"__float2bfloat16_{r}({{0}})"),
    ]
OPS.append(("f64", ("f64",), "__drcp_rn({0})"))
for h in ("f16", "bf16"):
    OPS += [
        (h, (h, h), "__hadd({0}, {1})"), (h, (h, h), "__hsub({0}, {1})"),
        (h, (h, h), "__hmul({0}, {1})"), (h, (h, h, h), "__hfma({0}, {1}, {2})"),
        (h, (h,), "__hneg({0})"), (h, (h,), "__habs({0})"),
        (h, (h, h), "__hmin({0}, {1})"), (h, (h, h), "__hmax({0}, {1})"),
        ("u32", (h, h), "(unsigned)__heq({0}, {1})"), ("u32", (h, h), "(unsigned)__hlt({0}, {1})"),
        ("u32", (h, h), "(unsigned)__hgt({0}, {1})"),
    ]

_CTYPE = {"u32": "unsigned", "u64": "unsigned long long", "f32": "float", "f64": "double",
          "f16": "__half", "bf16": "__nv_bfloat16"}
_BITS = {"u32": "(unsigned long long){0}", "u64": "{0}",
         "f32": "(unsigned long long)__float_as_uint({0})",
         "f64": "(unsigned long long)__double_as_longlong({0})",
         "f16": "(unsigned long long)__half_as_ushort({0})",
         "bf16": "(unsigned long long)__bfloat16_as_ushort({0})"}
_KIND = {"u32": "i", "u64": "i", "f32": "f32", "f64": "f64", "f16": "f16", "bf16": "bf16"}


@dataclass
class Kernel:
    name: str
    kinds: list[str]  # per output slot
    statements: list[str]  # per output slot: the statement that made it


def _load(kind: str, i: int) -> str:
    """The expression that makes a value of ``kind`` from input words ``x[i]`` (and ``x[i+1]``)."""
    w, w2 = f"x[{i % INPUTS}]", f"x[{(i + 1) % INPUTS}]"
    return {"u32": w, "u64": f"(((unsigned long long){w2} << 32) | {w})",
            "f32": f"__uint_as_float({w})",
            "f64": f"__longlong_as_double((long long)(((unsigned long long){w2} << 32) | {w}))",
            "f16": f"__ushort_as_half((unsigned short){w})",
            "bf16": f"__ushort_as_bfloat16((unsigned short){w})"}[kind]


def _mask(rng: random.Random, width: int) -> int:
    """A member mask: a nonempty union of aligned groups of ``width`` lanes."""
    groups = 32 // width
    chosen = [g for g in range(groups) if rng.random() < 0.6] or [rng.randrange(groups)]
    return sum(((1 << width) - 1) << (g * width) for g in chosen)


def _collective(rng: random.Random, site: int, var: str, pool: dict[str, list[str]]) -> str:
    """A warp collective on u32 ``var``, executed by its mask's members only."""
    a = rng.choice(pool["u32"])
    kind = rng.randrange(5)
    if kind == 0:  # a shuffle within aligned groups of its width
        width = rng.choice((4, 8, 16, 32))
        mask = _mask(rng, width)
        mode = rng.choice(("FZ_SHFL", "FZ_SHFL_UP", "FZ_SHFL_DOWN", "FZ_SHFL_XOR"))
        b = rng.randrange(width) if mode == "FZ_SHFL" else rng.randrange(1, width)
        call = f"{mode}({site}, 0x{mask:08x}u, {a}, {b}u, {width})"
    else:
        mask = rng.getrandbits(32) or 1
        if kind == 1:
            call = f"{rng.choice(('FZ_BALLOT', 'FZ_ANY', 'FZ_ALL'))}({site}, 0x{mask:08x}u, {a} & 1u)"
        elif kind == 2:
            call = f"FZ_MATCH({site}, 0x{mask:08x}u, {a} & 3u)"
        else:
            call = f"FZ_REDUCE({site}, 0x{mask:08x}u, {a}, {rng.randrange(8)})"
    return f"  if ((0x{mask:08x}u >> lane) & 1u) {var} = {call};\n"


def _kernel(rng: random.Random, name: str, statements: int, site0: int) -> tuple[str, Kernel]:
    pool: dict[str, list[str]] = {k: [] for k in _CTYPE}
    lines, outs = [], []
    n = 0
    for kind in _CTYPE:  # two inputs of each kind
        for _ in range(2):
            v = f"v{n}"
            lines.append(f"  const {_CTYPE[kind]} {v} = {_load(kind, rng.randrange(INPUTS))};\n")
            pool[kind].append(v)
            n += 1
    site = site0
    for _ in range(statements):
        v = f"v{n}"
        n += 1
        if rng.random() < 0.15:
            lines.append(f"  unsigned {v} = {rng.choice(pool['u32'])} ^ lane;\n")
            lines.append(_collective(rng, site, v, pool))
            made = lines[-1].strip()
            site += 1
            kind = "u32"
        else:
            kind, args, expr = rng.choice(OPS)
            lines.append(f"  const {_CTYPE[kind]} {v} = "
                         + expr.format(*(rng.choice(pool[a]) for a in args)) + ";\n")
            made = lines[-1].strip()
        pool[kind].append(v)
        outs.append((v, kind, made))
    body = "".join(lines) + "".join(
        f"  y[{j}] = {_BITS[k].format(v)};\n" for j, (v, k, _m) in enumerate(outs))
    src = (f"FZ_EXPORT void {name}(const unsigned* in, unsigned long long* out) {{\n"
           f"  const unsigned tid = threadIdx.x, lane = tid & 31u;\n"
           f"  const unsigned* x = in + tid * {INPUTS}u;\n"
           f"  unsigned long long* y = out + tid * {len(outs)}u;\n" + body + "}\n")
    return src, Kernel(name, [_KIND[k] for _v, k, _m in outs], [m for _v, _k, m in outs])


def program(seed: int, kernels: int = 4, statements: int = 24) -> tuple[str, list[Kernel]]:
    """The source of ``kernels`` random kernels (``fuzz0``...) drawn from ``seed``."""
    rng = random.Random(seed)
    parts, out = [PRELUDE], []
    for k in range(kernels):
        src, kern = _kernel(rng, f"fuzz{k}", statements, 1000 * k)
        parts.append(src)
        out.append(kern)
    return "".join(parts), out


_SPECIAL = (0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0x00000001, 0x807FFFFF,
            0x3F800000, 0xBF800000, 0x7F7FFFFF, 0x4B000000, 0x4F000000, 0xCF000000, 0x5F000000,
            0x7C00, 0xFC00, 0x7E00, 0x0001, 0x03FF, 0x3C00, 0x7BFF, 0x7F80, 0x0080, 0x3F80,
            0xFFFFFFFF, 0x7FFFFFFF, 1, 2, 31, 32, 0x8000, 0xFFFF, 0x3C003C00, 0x7FF00000,
            0xFFF00000, 0x41DFFFFF, 0xC3E00000, 0x43F00000)


def inputs(seed: int) -> list[int]:
    """``THREADS * INPUTS`` input words drawn from ``seed``: random bits, half of them special."""
    rng = random.Random(seed ^ 0x5EED)
    words = []
    for _ in range(THREADS * INPUTS):
        r = rng.random()
        if r < 0.35:
            words.append(rng.choice(_SPECIAL))
        elif r < 0.5:  # a float near 1, or a small integer
            words.append(rng.choice((0x3F800000 + rng.randrange(-4096, 4096), rng.randrange(-64, 64) & 0xFFFFFFFF)))
        else:
            words.append(rng.getrandbits(32))
    return words
