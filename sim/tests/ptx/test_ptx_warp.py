"""Warp collectives, block reductions and atomics of hand-written PTX, lane by lane.

Each entry runs one 64-thread block (two warps) and stores one 32-bit
result per thread; the references follow the PTX ISA's pseudo-code.
"""

from __future__ import annotations

import numpy as np
import pytest

import gpuarray  # noqa: F401  (registers the host build's toolchain)
from gpuarray.errors import CudaError
from sim.tests.ptx.support import HEAD, backend, download, u64, upload

# every test once per tier: translated and built, and interpreted (conftest.py)
pytestmark = pytest.mark.usefixtures("ptx_tier")

PRE = """
  .reg .b32 %t, %l, %v, %r, %s; .reg .b64 %o, %i, %k, %w, %x; .reg .pred %p, %q;
  ld.param.u64 %o, [o]; ld.param.u64 %i, [in];
  mov.u32 %t, %tid.x; mov.u32 %l, %laneid;
  mul.wide.u32 %k, %t, 4; add.s64 %o, %o, %k; add.s64 %i, %i, %k;
  ld.global.u32 %v, [%i];
"""
POST = "  st.global.u32 [%o], %r;\n  ret;\n"
BODIES = {
    # width 16: CUDA's c operand is ((32 - width) << 8) | clamp
    "shfl_down_w16": "shfl.sync.down.b32 %r|%p, %v, 3, 0x101f, -1;",
    "shfl_up_w16": "shfl.sync.up.b32 %r, %v, 2, 0x1000, -1;",
    "shfl_up_clamp": "shfl.sync.up.b32 %r, %v, 1, 0x1003, -1;",  # the ISA's maxLane rule
    "shfl_idx_w16": "shfl.sync.idx.b32 %r, %v, 5, 0x101f, -1;",
    "shfl_pred": "shfl.sync.down.b32 %r|%p, %v, 3, 0x101f, -1; selp.u32 %r, 1, 0, %p;",
    "vote_uni": "setp.gt.u32 %p, %v, 100; vote.sync.uni.pred %q, %p, -1; selp.u32 %r, 1, 0, %q;",
    "redux_add": "redux.sync.add.u32 %r, %v, -1;",
    "redux_min_s32": "redux.sync.min.s32 %r, %v, -1;",
    "match_any_b64": "cvt.u64.u32 %x, %v; shr.u64 %x, %x, 2; match.any.sync.b64 %r, %x, -1;",
    "bar_red_and_or": "setp.lt.u32 %p, %v, 1000; bar.red.and.pred %q, 0, %p; selp.u32 %r, 1, 0, %q;"
                      " setp.eq.u32 %p, %v, 7; bar.red.or.pred %q, 0, %p; selp.u32 %s, 2, 0, %q;"
                      " or.b32 %r, %r, %s;",
    "divergent_activemask": "setp.lt.u32 %p, %l, 10; @%p bra LOW;\n activemask.b32 %r;\n"
                            " bra.uni END;\n LOW: activemask.b32 %r;\n END:",
    "divergent_partial_shfl": "setp.lt.u32 %p, %l, 16; @!%p bra HI;"
                              " shfl.sync.bfly.b32 %r, %v, 1, 31, 0xffff; bra.uni END;"
                              " HI: shfl.sync.bfly.b32 %r, %v, 2, 31, 0xffff0000; END:",
    "shared_atomics": "mov.u32 %s, cnt; setp.eq.u32 %p, %t, 0; @%p st.shared.u64 [%s], 0;"
                      " bar.sync 0; cvt.u64.u32 %x, %v; atom.shared.add.u64 %w, [%s], %x;"
                      " bar.sync 0; ld.shared.u64 %w, [%s]; cvt.u32.u64 %r, %w; bar.sync 0;"
                      " atom.shared.cas.b64 %w, [%s], %w, 5; bar.sync 0;"
                      " ld.shared.u64 %w, [%s]; cvt.u32.u64 %s, %w; add.u32 %r, %r, %s;",
}
MODULE = HEAD + ".shared .align 8 .b8 cnt[8];\n" + "".join(
    f".visible .entry {name}(.param .u64 o, .param .u64 in)\n{{\n{PRE}  {body}\n{POST}}}\n"
    for name, body in BODIES.items())


def _shfl(v, mode, b, c):
    out, pred = [], []
    for t in range(64):
        lane, base = t % 32, t - t % 32
        seg, clamp = (c >> 8) & 31, c & 31
        minl = lane & seg
        maxl = minl | (clamp & ~seg)
        j = {"up": lane - b, "down": lane + b, "idx": minl | (b & ~seg)}[mode]
        p = j >= maxl if mode == "up" else j <= maxl
        out.append(int(v[base + (j if p else lane)]))
        pred.append(int(p))
    return out, pred


def _expected(name, v):
    warps = [v[:32], v[32:]]
    lanes = range(64)
    if name == "shfl_down_w16":
        return _shfl(v, "down", 3, 0x101F)[0]
    if name == "shfl_up_w16":
        return _shfl(v, "up", 2, 0x1000)[0]
    if name == "shfl_up_clamp":
        return _shfl(v, "up", 1, 0x1003)[0]
    if name == "shfl_idx_w16":
        return _shfl(v, "idx", 5, 0x101F)[0]
    if name == "shfl_pred":
        return _shfl(v, "down", 3, 0x101F)[1]
    if name == "vote_uni":
        return [int(len({int(x > 100) for x in warps[t // 32]}) == 1) for t in lanes]
    if name == "redux_add":
        return [int(sum(int(x) for x in warps[t // 32]) % 2**32) for t in lanes]
    if name == "redux_min_s32":
        return [int(min(warps[t // 32].view(np.int32))) % 2**32 for t in lanes]
    if name == "match_any_b64":
        return [sum(1 << k for k in range(32) if warps[t // 32][k] >> 2 == v[t] >> 2)
                for t in lanes]
    if name == "bar_red_and_or":
        return [int((v < 1000).all()) | 2 * int((v == 7).any()) for _ in lanes]
    if name == "divergent_activemask":
        return [0x3FF if t % 32 < 10 else 0xFFFFFC00 for t in lanes]
    if name == "divergent_partial_shfl":
        return [int(v[t - t % 32 + ((t % 32) ^ (1 if t % 32 < 16 else 2))]) for t in lanes]
    if name == "shared_atomics":
        total = int(v.astype(np.uint64).sum())
        return [(total + 5) % 2**32 for _ in lanes]  # the sum, then the one CAS that won
    raise KeyError(name)


@pytest.fixture(scope="module")
def loaded():
    b = backend()
    return b, b.module_load_data(MODULE.encode() + b"\0")


@pytest.mark.parametrize("name", list(BODIES))
def test_warp_and_block_collectives(loaded, name):
    b, module = loaded
    rng = np.random.default_rng(11)
    v = rng.integers(0, 200, 64).astype(np.uint32)
    v[40:48] = v[40]  # some equal values for match
    if name == "bar_red_and_or":
        v[13] = 7
    if name == "redux_min_s32":
        v[3] = 0xFFFFFFF0  # negative as s32
    inp, out = upload(b, v), b.mem_alloc(256)
    f = b.module_get_function(module, name)
    b.launch_kernel(f, (1, 1, 1), (64, 1, 1), 0, 1, [u64(out), u64(inp)])
    b.ctx_synchronize()
    assert download(b, out, 64, np.uint32).tolist() == _expected(name, v)


# ------------------------------------------------- collectives of disjoint or partial masks
# A .sync collective waits for the non-exited lanes of its own member mask at a collective
# of the same kind with the same mask (the ISA's "same qualifiers and same membermask"),
# wherever the other lanes of the warp are.  Lane 15 of each warp spins first (3000 loop
# iterations: the fiber runtime lets the others run meanwhile), so lanes of one group
# wait at their collective while the other group is at its own.
SPIN15 = """setp.eq.u32 %p, %l, 15; @!%p bra GO; mov.u32 %s, 3000;
 SPIN: sub.u32 %s, %s, 1; setp.ne.u32 %q, %s, 0; @%q bra SPIN;
 GO: mov.u32 %r, 0;
"""
DISJOINT = {
    # lane 0 meets lanes 1-15 (mask 0xffff), then lanes 16-31 (mask 0xffff0001): the
    # second group waits for lane 0, which is at the first one meanwhile
    "overlapping_masks": SPIN15 + """setp.lt.u32 %p, %l, 16; @!%p bra HI;
   shfl.sync.bfly.b32 %r, %v, 1, 31, 0xffff;
   setp.ne.u32 %q, %l, 0; @%q bra END;
 HI: shfl.sync.idx.b32 %s, %v, 0, 31, 0xffff0001; add.u32 %r, %r, %s;
 END:""",
    # two groups with disjoint masks at different instructions, one doing three
    # shuffles, the other one, then the whole warp at a third instruction
    "disjoint_then_whole_warp": SPIN15 + """setp.lt.u32 %p, %l, 16; @!%p bra HI;
   shfl.sync.bfly.b32 %r, %v, 1, 31, 0xffff; shfl.sync.bfly.b32 %r, %r, 2, 31, 0xffff;
   shfl.sync.bfly.b32 %r, %r, 4, 31, 0xffff; bra.uni END;
 HI: shfl.sync.down.b32 %r, %v, 1, 31, 0xffff0000;
 END: shfl.sync.idx.b32 %s, %r, 0, 31, -1; add.u32 %r, %r, %s;""",
    # bar.warp.sync, vote and match with disjoint masks, in different orders
    "disjoint_vote_match_warpsync": SPIN15 + """setp.lt.u32 %p, %l, 16; @!%p bra HI;
   bar.warp.sync 0xffff; setp.gt.u32 %q, %v, 3; vote.sync.ballot.b32 %r, %q, 0xffff;
   match.any.sync.b32 %s, %l, 0xffff; add.u32 %r, %r, %s; bra.uni END;
 HI: match.any.sync.b32 %r, %v, 0xffff0000; bar.warp.sync 0xffff0000;
   setp.gt.u32 %q, %v, 20; vote.sync.all.pred %q, %q, 0xffff0000; selp.u32 %s, 1, 0, %q;
   add.u32 %r, %r, %s;
 END: bar.warp.sync -1;""",
    # one instruction, two masks (each lane names its own half)
    "two_masks_one_instruction": SPIN15 + """setp.lt.u32 %p, %l, 16;
   selp.u32 %s, 0xffff, 0xffff0000, %p;
   shfl.sync.bfly.b32 %r, %v, 1, 31, %s; vote.sync.ballot.b32 %s, %p, %s; add.u32 %r, %r, %s;""",
    # four groups of eight, four kinds of collective
    "quarters": SPIN15 + """shr.u32 %s, %l, 3; setp.eq.u32 %p, %s, 0; @%p bra G0;
   setp.eq.u32 %p, %s, 1; @%p bra G1; setp.eq.u32 %p, %s, 2; @%p bra G2;
   shfl.sync.bfly.b32 %r, %v, 1, 31, 0xff000000; shfl.sync.bfly.b32 %r, %r, 2, 31, 0xff000000;
   bra.uni END;
 G0: shfl.sync.bfly.b32 %r, %v, 1, 31, 0xff; bra.uni END;
 G1: vote.sync.ballot.b32 %r, %p, 0xff00; bra.uni END;
 G2: redux.sync.add.u32 %r, %v, 0xff0000; redux.sync.add.u32 %r, %r, 0xff0000; bra.uni END;
 END: bar.warp.sync -1;""",
}
DISJOINT_MODULE = HEAD + "".join(
    f".visible .entry {name}(.param .u64 o, .param .u64 in)\n{{\n{PRE}  {body}\n{POST}}}\n"
    for name, body in DISJOINT.items())


def _disjoint_expected(name: str, w: list[int]) -> list[int]:
    """One warp's results (``w``: its 32 inputs), from the ISA's definitions."""
    m32 = 0xFFFFFFFF
    if name == "overlapping_masks":
        return [w[1] + w[0] if lane == 0 else w[lane ^ 1] if lane < 16 else w[0]
                for lane in range(32)]
    if name == "disjoint_then_whole_warp":
        r = [w[lane ^ 7] if lane < 16 else w[min(lane + 1, 31)] for lane in range(32)]
        return [r[lane] + r[0] for lane in range(32)]
    if name == "disjoint_vote_match_warpsync":
        ballot = sum(1 << k for k in range(16) if w[k] > 3)
        out = [ballot + (1 << lane) for lane in range(16)]
        upper = int(all(w[k] > 20 for k in range(16, 32)))
        return out + [sum(1 << k for k in range(16, 32) if w[k] == w[lane]) + upper
                      for lane in range(16, 32)]
    if name == "two_masks_one_instruction":
        return [(w[lane ^ 1] + (0xFFFF if lane < 16 else 0)) & m32 for lane in range(32)]
    if name == "quarters":
        g3 = [w[lane ^ 3] for lane in range(32)]
        s2 = sum(w[16:24])
        return ([w[lane ^ 1] for lane in range(8)] + [0xFF00] * 8 + [(8 * s2) & m32] * 8
                + g3[24:])
    raise KeyError(name)


@pytest.mark.parametrize("name", list(DISJOINT))
def test_collectives_wait_only_for_their_own_mask(name):
    # Before: the lanes of one group checked only that every lane of their mask was at
    # SOME collective, and a lane still at another one (another mask) ended the launch
    # with a false 719 "meet at different warp collectives" (overlapping_masks).
    b = backend()
    v = np.random.default_rng(5).integers(0, 200, 64).astype(np.uint32)
    inp, out = upload(b, v), b.mem_alloc(256)
    f = b.module_get_function(b.module_load_data(DISJOINT_MODULE.encode() + b"\0"), name)
    b.launch_kernel(f, (1, 1, 1), (64, 1, 1), 0, 1, [u64(out), u64(inp)])
    b.ctx_synchronize()
    got = download(b, out, 64, np.uint32).tolist()
    want = [x & 0xFFFFFFFF for half in (v[:32], v[32:])
            for x in _disjoint_expected(name, [int(y) for y in half])]
    assert got == want


MISMATCHED = HEAD + """
.visible .entry mismatched(.param .u64 o)
{
  .reg .b32 %l, %r; .reg .pred %p;
  mov.u32 %l, %laneid;
  setp.eq.u32 %p, %l, 5;
  @%p bra VOTE;
  shfl.sync.idx.b32 %r, %l, 0, 31, -1;
  bra.uni END;
VOTE:
  vote.sync.ballot.b32 %r, %p, -1;
END:
  ret;
}
"""


def test_lanes_of_one_mask_at_different_kinds_of_collective_are_a_deadlock_fault():
    # the ISA leaves it undefined; a lane of the mask never arrives at this one
    b = backend()
    f = b.module_get_function(b.module_load_data(MISMATCHED.encode() + b"\0"), "mismatched")
    b.launch_kernel(f, (1, 1, 1), (32, 1, 1), 0, 1, [u64(0)])
    with pytest.raises(CudaError) as e:
        b.ctx_synchronize()
    assert e.value.code == 719 and "deadlock" in str(e.value)
