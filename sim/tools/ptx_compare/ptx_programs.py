"""The PTX programs of the ``ptx-vs-gpu`` step (sim/tools/ptx_compare/ptx_compare.py), with their inputs.

Five sources, each with fixed, seeded inputs (made once per run and given
to both sides, so both launch exactly the same bytes):

``ops:<case>``    the per-instruction programs of sim/tests/ptx/test_ptx_ops.py (its
                  CASES and its own input generators, seeded there): every
                  rounding mode, ``.approx``, f16/bf16, cvt, NaN and
                  infinity inputs; the selected cases make one module;
``numba:<name>``  numba-cuda's PTX committed under sim/tests/ptx/fixtures
                  (``numba_*.ptx``), launched as sim/tests/ptx/test_ptx_run.py does;
``nvrtc:<case>``  ``kernels/`` as NVRTC compiles it for compute_90 with the
                  options a GPU build uses (fresh from NVRTC when it loads,
                  else the committed sim/tests/ptx/fixtures/nvrtc_kernels.ptx),
                  launched as the kernels layer plans the cases of
                  sim/tests/ptx/fixtures/kernel_cases.py;
``saxpy``         sim/tests/ptx/fixtures/saxpy.ptx (NVRTC's, an ``fma.rn``);
``rules:<case>``  issue 44's rules, written here: disjoint-mask shuffles, a read past
                  an allocation's end inside its granularity, bit-size ld/st of wider
                  float registers, mbarrier objects (sim/tests/ptx/fixtures/
                  mbarrier_rules.ptx), indirect calls through a stored function address
                  (fixtures/indirect_call.ptx), and loads ptxas refuses (both sides must
                  refuse).

A :class:`Program` holds the PTX text, its buffers (initial contents; those
marked ``out`` are compared) and a function from the buffers' device
addresses to the launches.  Only numpy and the tree's own modules are used.
"""

from __future__ import annotations

import ctypes
import dataclasses
import fnmatch
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "sim" / "tests" / "ptx" / "fixtures"

Launch = tuple[str, tuple[int, int, int], tuple[int, int, int], int, list[Any]]


@dataclasses.dataclass
class Buf:
    """A device buffer: its initial contents (their dtype is the element type compared)."""

    data: np.ndarray
    out: bool = False


@dataclasses.dataclass
class Program:
    """One PTX module and the launches that make its outputs."""

    name: str
    ptx: str
    bufs: list[Buf]
    launches: Callable[[list[int]], list[Launch]]
    classify_text: str = ""  # the text the unknown classes are looked for in (default: ptx)
    note: str = ""
    #: the program's entry as a module of its own (``ops:*``): where the device refuses
    #: the shared module, each entry is tried alone and the refused ones run alone
    alone: str | None = None
    head: str = ""  # the module's directives, for a shared module of the entries it keeps


def _u64(x: int) -> ctypes.c_uint64:
    return ctypes.c_uint64(x)


def _on_path() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


# ---------------------------------------------------------------- ops:<case>
def ops_programs(wanted: Callable[[str], bool]) -> list[Program]:
    """The selected cases of sim/tests/ptx/test_ptx_ops.py, as entries of one module."""
    _on_path()
    from sim.tests.ptx import test_ptx_ops as t

    cases = [c for c in t.CASES if wanted("ops:" + c.name)]
    if not cases:
        return []
    entries = {c.name: t._entry(c) for c in cases}
    text = t.HEAD + "\n".join(entries.values())
    out = []
    for c in cases:
        ins = [np.asarray(x, t.NP[ty]) for x, ty in zip(c.inputs(), c.types[:3], strict=True)]
        res = np.zeros(t.N, t.NP[c.types[3]])
        bufs = [Buf(res, out=True)] + [Buf(x) for x in ins]

        def launches(p: list[int], name: str = c.name) -> list[Launch]:
            return [(name, (1, 1, 1), (t.N, 1, 1), 0, [_u64(a) for a in p])]

        out.append(Program("ops:" + c.name, text, bufs, launches,
                           classify_text=entries[c.name], alone=t.HEAD + entries[c.name],
                           head=t.HEAD))
    return out


# -------------------------------------------------------------- numba:<name>
def _numba_params(arrays_at: list[tuple[np.ndarray, int]]) -> list[Any]:
    """numba-cuda's parameters of each array: meminfo, parent, nitems, itemsize, data,
    then its shape and strides."""
    params: list[Any] = []
    for a, d in arrays_at:
        params += [_u64(0), _u64(0), _u64(a.size), _u64(a.itemsize), _u64(d)]
        params += [_u64(s) for s in a.shape] + [_u64(s) for s in a.strides]
    return params


def _numba_inputs() -> dict[str, tuple[list[Buf], tuple, tuple, int]]:
    """fixture -> (buffers, grid, block, dynamic shared bytes), as sim/tests/ptx/test_ptx_run.py
    launches them, with more lanes of data where the kernel allows."""
    rng = np.random.default_rng(34)
    f32 = rng.standard_normal(128).astype(np.float32)
    incdec = np.arange(1, 33, dtype=np.uint32)
    ints = np.array([-100, -7, -1, 0, 1, 5, 99, 2**40] + list(range(24)), np.int64)
    bits = np.array([0, 1, 0x80000000, 0xFFFFFFFF] + list(range(5, 33)), np.uint32)
    return {
        "numba_warp_reduce": ([Buf(np.arange(128, dtype=np.float32) * 0.5),
                               Buf(np.zeros(1, np.float32), True)], (2, 1, 1), (64, 1, 1), 0),
        "numba_shared_hist": ([Buf((np.arange(1000, dtype=np.int32) * 7919) % 1000),
                               Buf(np.zeros(16, np.int32), True)], (4, 1, 1), (256, 1, 1), 0),
        "numba_votes": ([Buf(np.array([1, -1, 2, 2, 0, 5] * 5 + [3, 3], np.int32)),
                         Buf(np.zeros(32, np.uint32), True)], (1, 1, 1), (32, 1, 1), 0),
        "numba_dynamic_shared": ([Buf(np.arange(16, dtype=np.float64)),
                                  Buf(np.zeros(16), True)], (1, 1, 1), (16, 1, 1), 128),
        "numba_local": ([Buf(np.arange(10, dtype=np.int64) - 3),
                         Buf(np.zeros(10, np.int64), True)], (1, 1, 1), (10, 1, 1), 0),
        "numba_const": ([Buf(np.zeros(16, np.float32), True)], (1, 1, 1), (16, 1, 1), 0),
        # which thread's value an exchange returns depends on the order: only the
        # order-free results are compared (min, max, and, or, xor, the sum)
        "numba_atomics": ([Buf(np.array([5, -3, 12, 7], np.int32)),
                           Buf(np.array([-100, 100, 0, 0, 0, -1, 0, 0], np.int32), True)],
                          (1, 1, 1), (4, 1, 1), 0),
        "numba_math": ([Buf(np.abs(f32[:32]) * 4), Buf(np.zeros(32, np.float32), True)],
                       (1, 1, 1), (32, 1, 1), 0),
        "numba_atom_incdec": ([Buf(incdec), Buf(np.array([0, 3, 0], np.uint32), True)],
                              (1, 1, 1), (32, 1, 1), 0),
        "numba_shfl_f64": ([Buf(np.arange(32, dtype=np.float64) * 1.5),
                            Buf(np.zeros(32), True)], (1, 1, 1), (32, 1, 1), 0),
        "numba_int_ops": ([Buf(ints), Buf(np.zeros(32, np.int64), True)],
                          (1, 1, 1), (32, 1, 1), 0),
        "numba_bit_ops": ([Buf(bits), Buf(np.zeros(32, np.uint32), True)],
                          (1, 1, 1), (32, 1, 1), 0),
        "numba_match_all": ([Buf(np.where(np.arange(32) == 7, 5, 4).astype(np.int32)),
                             Buf(np.zeros(32, np.uint32), True)], (1, 1, 1), (32, 1, 1), 0),
        "numba_math_f64_2d": ([Buf(np.random.default_rng(3).random((5, 7))),
                               Buf(np.zeros((5, 7)), True)], (1, 1, 1), (8, 8, 1), 0),
    }


# Output elements whose value depends on the order threads reach an atomic
# (numba_atomics: the exchange and compare-and-swap results; numba_atom_incdec:
# the compare-and-swap winner): not compared.
ORDER_DEPENDENT = {"numba:numba_atomics": [3, 4], "numba:numba_atom_incdec": [2]}


def _entry_name(text: str) -> str:
    m = re.search(r"\.entry\s+([\w$]+)", text)
    if m is None:
        raise ValueError("no .entry in the PTX")
    return m.group(1)


def numba_programs(wanted: Callable[[str], bool]) -> list[Program]:
    out = []
    for name, (bufs, grid, block, shared) in _numba_inputs().items():
        if not wanted("numba:" + name):
            continue
        text = (FIXTURES / f"{name}.ptx").read_text(encoding="utf-8")
        entry = _entry_name(text)

        def launches(p: list[int], bufs=bufs, entry=entry, grid=grid, block=block,
                     shared=shared) -> list[Launch]:
            params = _numba_params([(b.data, a) for b, a in zip(bufs, p, strict=True)])
            return [(entry, grid, block, shared, params)]

        out.append(Program("numba:" + name, text, bufs, launches))
    return out


# ---------------------------------------------------------- nvrtc:<case>, saxpy
def nvrtc_text() -> tuple[str, str]:
    """kernels/ as NVRTC's PTX for compute_90 (fresh when NVRTC loads), and where it came from."""
    _on_path()
    from sim.tests.ptx.fixtures import kernel_cases

    try:
        from gpuarray._kernels import _nvrtc, _source, _specs
        from gpuarray._kernels._nvrtc import Target

        opts = _nvrtc.compile_options(Target("ptx", "compute_90"))
        raw = _nvrtc.compile_program(_specs.program_source(kernel_cases.specs()),
                                     _source.kernel_headers(), opts, "ptx")
        major, minor = _nvrtc.nvrtc_version()
        return bytes(raw).rstrip(b"\0").decode(), f"NVRTC {major}.{minor}, compute_90, now"
    except Exception as e:  # no NVRTC here: the committed output of the same program
        text = (FIXTURES / "nvrtc_kernels.ptx").read_text(encoding="utf-8")
        return text, (f"sim/tests/ptx/fixtures/nvrtc_kernels.ptx (NVRTC did not run: "
                      f"{type(e).__name__}: {str(e)[:120]})")


def _random(dtype, n: int, rng) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    if dt.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
    return (rng.standard_normal(n) * 100).astype(dt)


def _extent(shape, strides, itemsize: int) -> int:
    return sum((s - 1) * abs(st) for s, st in zip(shape, strides, strict=True)) + itemsize


def nvrtc_programs(wanted: Callable[[str], bool]) -> list[Program]:
    _on_path()
    from sim.tests.ptx.fixtures.kernel_cases import CASES

    names = [n for n in CASES if wanted("nvrtc:" + n)]
    if not names:
        return []
    text, origin = nvrtc_text()
    out = []
    for name in names:
        kind, dt, shape, dst_strides, st, src = CASES[name]
        rng = np.random.default_rng(7)
        item = np.dtype(dt).itemsize
        nbytes = _extent(shape, dst_strides, item)  # prefilled 0xAB: untouched bytes show
        dst = np.frombuffer(np.full(nbytes, 0xAB, np.uint8).tobytes(), dt).copy()
        bufs = [Buf(dst, out=True)]
        if kind == "copy":
            sitem = np.dtype(st).itemsize
            bufs.append(Buf(_random(st, _extent(shape, src, sitem) // sitem, rng)))

        def launches(p: list[int], kind=kind, dt=dt, shape=shape, dst_strides=dst_strides,
                     st=st, src=src) -> list[Launch]:
            from gpuarray._kernels import _launch, _plan

            if kind == "fill":
                ops = _plan.plan_fill(p[0], dst_strides, dt, shape, src)
            else:
                ops = _plan.plan_copy(p[0], dst_strides, dt, p[1], src, st, shape)
            got: list[Launch] = []
            for op in ops:
                if not isinstance(op, _plan.Launch):
                    raise TypeError(f"the plan holds a {type(op).__name__}, not a launch")
                block = (32, 8, 1) if op.spec.family == "transpose" else (256, 1, 1)
                got.append((op.spec.symbol, _launch.grid_for(op, 4), block, 0,
                            [_launch.params_for(op)]))
            return got

        out.append(Program("nvrtc:" + name, text, bufs, launches, note=origin))
    return out


def saxpy_programs(wanted: Callable[[str], bool]) -> list[Program]:
    if not wanted("saxpy"):
        return []
    n = 1000
    bufs = [Buf(np.linspace(-3, 3, n, dtype=np.float32)),
            Buf(np.arange(n, dtype=np.float32), out=True)]

    def launches(p: list[int]) -> list[Launch]:
        return [("saxpy", (4, 1, 1), (256, 1, 1), 0,
                 [ctypes.c_float(2.5), _u64(p[0]), _u64(p[1]), ctypes.c_int32(n)])]

    return [Program("saxpy", (FIXTURES / "saxpy.ptx").read_text(encoding="utf-8"), bufs,
                    launches)]


# ------------------------------------------------------------- rules:<case>
_RULES_HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"
#: The rules issue 44 changed, each as a program whose outcome a GPU decides: what it runs
#: (and the values), or the load it refuses (both sides' 218 is "equal").
RULES: dict[str, str] = {
    # two .sync shuffles in different branches with disjoint member masks: each waits only
    # for its own mask's lanes (the simulator answered 719 before)
    "shfl_disjoint_masks": """.visible .entry k(.param .u64 p)
{
  .reg .b64 %a<2>; .reg .b32 %r<6>; .reg .pred %q<2>;
  ld.param.u64 %a0, [p];
  mov.u32 %r0, %tid.x;
  mul.lo.u32 %r1, %r0, 7;
  setp.lt.u32 %q0, %r0, 16;
  @!%q0 bra $hi;
  shfl.sync.idx.b32 %r2, %r1, 3, 0x0f, 0x0000ffff;
  bra $out;
$hi:
  shfl.sync.down.b32 %r2, %r1, 2, 0x1f, 0xffff0000;
$out:
  mul.wide.u32 %a1, %r0, 4;
  add.s64 %a1, %a0, %a1;
  st.global.u32 [%a1], %r2;
  ret;
}
""",
    # a read past a 4-byte allocation's end, inside its mapped granularity: a GPU runs it
    # (memcheck would report it); the value read is not compared, the launch's success is
    "read_past_end": """.visible .entry k(.param .u64 p, .param .u64 q)
{
  .reg .b64 %a<2>; .reg .b32 %r<2>;
  ld.param.u64 %a0, [p];
  ld.param.u64 %a1, [q];
  ld.volatile.global.u32 %r0, [%a1+12];
  mov.u32 %r1, 1;
  st.global.u32 [%a0], %r1;
  ret;
}
""",
    # ld/st of a bit-size type with a wider float register (ptxas takes it; the simulator
    # refused it): zero-extended in, the low bits out
    "bit_size_wide_float": """.visible .entry k(.param .u64 p)
{
  .reg .b64 %a<1>; .reg .f32 %f<2>; .reg .f64 %d<1>;
  ld.param.u64 %a0, [p];
  ld.global.b16 %f0, [%a0];
  st.global.b32 [%a0+8], %f0;
  ld.global.b32 %f1, [%a0+16];
  st.global.b16 [%a0+24], %f1;
  ld.global.b8 %d0, [%a0];
  st.global.b64 [%a0+32], %d0;
  ret;
}
""",
}
#: Bodies ptxas refuses (issue 44's checker rules): the device's load must refuse them too.
REFUSED_RULES: dict[str, str] = {
    "st_sat": "st.global.sat.u32 [%a0], %r0;",
    "relaxed_without_scope": "ld.relaxed.global.u32 %r0, [%a0];",
    "nc_shared": "ld.shared.nc.u32 %r0, [%a0];",
    "two_cache_operators": "ld.global.ca.cg.u32 %r0, [%a0];",
    "space_of_a_local": ".local .u32 lv;\n  ld.global.u32 %r0, [lv];",
    "generic_of_a_param": "ld.u32 %r0, [p];",
    "store_to_a_kernel_param": "st.param.u32 [p], %r0;",
    "bra_two_labels": "bra $end, $end;",
    "shfl_without_sync": "shfl.idx.b32 %r0, %r0, 0, 0x1f;",
    "match_of_a_predicate": ".reg .pred %q<1>;\n  match.any.sync.b32 %r0, %q0, 0xffffffff;",
    "float_member_mask": ".reg .pred %q<1>; .reg .f32 %g<1>;\n  vote.sync.ballot.b32 %r0, %q0, %g0;",
    "sad_of_a_64_bit_register": "sad.u32 %r0, %r0, %a0, %r0;",
    "undeclared_register": "add.u32 %r0, %r1, 1;",
}


def rules_programs(wanted: Callable[[str], bool]) -> list[Program]:
    """Issue 44's rules: the programs of :data:`RULES` and the loads of :data:`REFUSED_RULES`."""
    out: list[Program] = []
    if wanted("rules:shfl_disjoint_masks"):
        out.append(Program("rules:shfl_disjoint_masks", _RULES_HEAD + RULES["shfl_disjoint_masks"],
                           [Buf(np.zeros(32, np.uint32), out=True)],
                           lambda p: [("k", (1, 1, 1), (32, 1, 1), 0, [_u64(p[0])])]))
    if wanted("rules:read_past_end"):
        out.append(Program("rules:read_past_end", _RULES_HEAD + RULES["read_past_end"],
                           [Buf(np.zeros(1, np.uint32), out=True), Buf(np.ones(1, np.uint32))],
                           lambda p: [("k", (1, 1, 1), (1, 1, 1), 0, [_u64(p[0]), _u64(p[1])])]))
    if wanted("rules:bit_size_wide_float"):
        data = np.array([0xFFFFFFFFFFFFABCD, 0, 0x12345678, 2**64 - 1, 0], np.uint64)
        out.append(Program("rules:bit_size_wide_float", _RULES_HEAD + RULES["bit_size_wide_float"],
                           [Buf(data, out=True)],
                           lambda p: [("k", (1, 1, 1), (1, 1, 1), 0, [_u64(p[0])])]))
    if wanted("rules:mbarrier"):
        # mbarrier objects (sim/tests/ptx/fixtures/mbarrier_rules.ptx): a block of 96 threads
        # arriving and waiting (try_wait, test_wait) through 5 rounds, and one thread's
        # test_wait/try_wait answers, pending_count of a .noComplete token, arrive_drop and
        # expect_tx/complete_tx (the simulator's guess the GPU decides: pending_count is
        # the count before that arrive)
        rounds, threads = 5, 96
        out.append(Program(
            "rules:mbarrier", (FIXTURES / "mbarrier_rules.ptx").read_text(encoding="utf-8"),
            [Buf(np.zeros(rounds * threads, np.uint32), out=True),
             Buf(np.zeros(12, np.uint32), out=True)],
            lambda p: [("rounds", (1, 1, 1), (threads, 1, 1), 0,
                        [_u64(p[0]), ctypes.c_uint32(rounds)]),
                       ("single", (1, 1, 1), (1, 1, 1), 0, [_u64(p[1])])]))
    if wanted("rules:indirect_call"):
        # indirect calls (sim/tests/ptx/fixtures/indirect_call.ptx): 64 threads call twice or
        # plus through an address chosen by a selector, stored in and loaded from global
        # memory (the addresses themselves differ between the two sides: not compared)
        sel = (np.arange(64, dtype=np.uint32) * 2654435761 >> 7 & 1).astype(np.uint32)
        out.append(Program(
            "rules:indirect_call", (FIXTURES / "indirect_call.ptx").read_text(encoding="utf-8"),
            [Buf(np.zeros(64, np.uint32), out=True), Buf(sel), Buf(np.zeros(64, np.uint64))],
            lambda p: [("pick", (1, 1, 1), (64, 1, 1), 0,
                        [_u64(p[0]), _u64(p[1]), _u64(p[2])])]))
    for name, body in REFUSED_RULES.items():
        if wanted("rules:" + name):
            text = (_RULES_HEAD + ".visible .entry k(.param .u64 p)\n{\n  .reg .b64 %a<1>; "
                    f".reg .b32 %r<1>;\n  {body}\n$end:\n  ret;\n}}\n")
            out.append(Program("rules:" + name, text, [Buf(np.zeros(1, np.uint32), out=True)],
                               lambda p: [("k", (1, 1, 1), (1, 1, 1), 0, [_u64(p[0])])],
                               note="ptxas refuses it: both loads must refuse (218)"))
    return out


def programs(patterns: list[str] | None = None) -> list[Program]:
    """Every program whose name matches one of ``patterns`` (fnmatch; None: all)."""
    def wanted(name: str) -> bool:
        return patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns)

    return (ops_programs(wanted) + numba_programs(wanted) + nvrtc_programs(wanted)
            + saxpy_programs(wanted) + rules_programs(wanted))
