// Barriers, warp collectives and the thread lifecycle on the fiber runtime's yield().
// Part of the runtime support of kernels translated from PTX (see ptxrt.h;
// the build inlines ptxrt.h, ptx_sync.h, ptx_num.h and ptx_printf.h in that order).
#pragma once
#include "ptxrt.h"

namespace ptx {

// ------------------------------------------------------------------ sync
// Loops: every kSpinEvery-th backward branch a thread takes, it lets the
// other threads of its block run (a thread spinning on a flag or lock that
// another thread sets, with no barrier between, works as on a GPU).  The
// runtime tells such a yield from a wait at a barrier by kSpinBit in `line`:
// a round of only such yields is no deadlock (the loop may end by itself),
// but after GPUARRAY_SIM_LAUNCH_TIMEOUT seconds of rounds in which no thread
// finished or passed a barrier the launch ends with CUDA_ERROR_LAUNCH_TIMEOUT
// naming the loop's branch (a flag only a later block sets: blocks run one
// after another here).
constexpr uint32_t kSpinEvery = 1024;
constexpr uint32_t kSpinBit = 0x80000000u;

inline void spin(Thread* t, uint32_t line) {
    t->rt->line = line | kSpinBit;
    t->rt->yield(t->rt);
}

inline void wait(Thread* t, uint32_t line) {
    t->rt->line = line;
    t->rt->yield(t->rt);
}

// Releases barrier `id`: its waiters are no longer blocked (for activemask).
// Out of line: once per completed barrier, not per thread.
[[gnu::noinline]] inline void bar_release(Thread* t, uint32_t id) {
    Block& b = *t->blk;
    b.arrived[id] = 0;
    b.pending &= ~(1u << id);
    b.result[id] = b.acc[id];
    b.acc[id] = 0;
    ++b.gen[id];
    ++t->rt->progress;
    const uint32_t nw = (t->rt->nthreads + 31) / 32;
    for (uint32_t k = 0; k < nw; ++k) {
        Warp& w = b.warps[k];
        for (uint32_t m = w.at_bar; m; m &= m - 1) {
            const uint32_t i = __builtin_ctz(m);
            if (w.bar_id[i] == id) {
                w.at_bar &= ~(1u << i);
                w.blocked &= ~(1u << i);
            }
        }
    }
}

inline void bar_arrive(Thread* t, uint32_t id, uint32_t count) {
    Block& b = *t->blk;
    const uint32_t expected = count ? count : t->rt->nthreads;
    if (b.arrived[id] == 0) b.count[id] = count;  // exits release only a barrier of all threads
    b.pending |= 1u << id;
    if (++b.arrived[id] + (count ? 0 : b.exited) >= expected) bar_release(t, id);
}

// bar.sync / barrier.sync / bar.red: `op` 0 none, 1 popc, 2 and, 3 or.
// Inlined at each barrier: its id, count and reduction are mostly constants there.
GA_PTX_INLINE uint32_t bar_sync(Thread* t, uint32_t id, uint32_t count, int op, bool p,
                         uint32_t line) {
    if (id >= 16) trap(t, line, "barrier number >= 16");
    Block& b = *t->blk;
    const uint32_t g = b.gen[id];
    Warp& w = b.warps[t->warp];
    w.blocked |= 1u << t->lane;
    w.at_bar |= 1u << t->lane;
    w.bar_id[t->lane] = (uint8_t)id;
    if (op == 1) b.acc[id] += p;
    if (op == 2) b.acc[id] += !p;  // and: no thread false
    if (op == 3) b.acc[id] += p;   // or: some thread true
    bar_arrive(t, id, count);
    const uint32_t expected = count ? count : t->rt->nthreads;
    while (b.gen[id] == g) {
        if (!count && b.arrived[id] && b.arrived[id] + b.exited >= expected) {
            bar_release(t, id);
            break;
        }
        wait(t, line);
    }
    const uint32_t r = b.result[id];
    return op == 2 ? (r == 0) : op == 3 ? (r != 0) : r;
}

enum Kind { SHFL_UP = 1, SHFL_DOWN, SHFL_BFLY, SHFL_IDX, VOTE_ALL, VOTE_ANY, VOTE_UNI,
            VOTE_BALLOT, MATCH_ANY, MATCH_ALL, WARP_SYNC, REDUX_ADD, REDUX_MIN, REDUX_MAX,
            REDUX_UMIN, REDUX_UMAX, REDUX_AND, REDUX_OR, REDUX_XOR };

inline uint32_t lanes_of(Thread* t) {  // lanes of the thread's warp that exist
    const uint32_t first = t->warp * 32, n = t->rt->nthreads - first;
    return n >= 32 ? 0xffffffffu : (1u << n) - 1;
}

inline void complete(Thread* t, Warp& w, uint32_t mask, uint32_t line) {
    const uint32_t kind = w.kind[t->lane];
    for (uint32_t i = 0; i < 32; ++i) {
        if (!(mask >> i & 1)) continue;
        if (w.kind[i] != kind || (w.mask[i] & ~w.exited) != mask) {  // mask: the live lanes
            char m[160];
            snprintf(m, sizeof m, "lanes %u and %u of warp %u meet at different warp collectives "
                     "or with different member masks (0x%x, 0x%x)", t->lane, i, t->warp, mask,
                     w.mask[i]);
            trap(t, line, m);
        }
    }
    uint64_t ballot = 0;
    bool all_eq = true;
    for (uint32_t i = 0; i < 32; ++i)
        if (mask >> i & 1) {
            ballot |= (uint64_t)(w.val[i] != 0) << i;
            all_eq = all_eq && w.val[i] == w.val[__builtin_ctz(mask)];
        }
    for (uint32_t i = 0; i < 32; ++i) {
        if (!(mask >> i & 1)) continue;
        uint64_t r = 0;
        uint8_t p = 1;
        if (kind <= SHFL_IDX) {
            const uint32_t b = w.b[i] & 31, c = w.c[i];
            const uint32_t seg = (c >> 8) & 31, minl = i & seg;
            const uint32_t maxl = minl | ((c & 31) & ~seg);
            int j;
            if (kind == SHFL_UP) {
                j = (int)i - (int)b;
                p = j >= (int)maxl;  // the PTX ISA's rule (CUDA passes a clamp of 0 here)
            } else if (kind == SHFL_DOWN) {
                j = (int)i + (int)b;
                p = j <= (int)maxl;
            } else if (kind == SHFL_BFLY) {
                j = (int)(i ^ b);
                p = j <= (int)maxl;
            } else {
                j = (int)(minl | (b & ~seg));
                p = j <= (int)maxl;
            }
            if (!p) j = (int)i;
            if (!(mask >> j & 1)) {
                char m[160];
                snprintf(m, sizeof m, "shfl.sync: lane %u of warp %u reads lane %d, which is not "
                         "a non-exited lane of the member mask 0x%x (the ISA: an undefined result)",
                         i, t->warp, j, mask);
                trap(t, line, m);
            }
            r = w.val[j];
        } else if (kind == VOTE_ALL) {
            r = p = (ballot & mask) == mask;
        } else if (kind == VOTE_ANY) {
            r = p = ballot != 0;
        } else if (kind == VOTE_UNI) {
            r = p = ballot == 0 || (ballot & mask) == mask;
        } else if (kind == VOTE_BALLOT) {
            r = ballot;
        } else if (kind == MATCH_ANY) {
            for (uint32_t k = 0; k < 32; ++k)
                if ((mask >> k & 1) && w.val[k] == w.val[i]) r |= 1ull << k;
        } else if (kind == MATCH_ALL) {
            r = all_eq ? mask : 0;
            p = all_eq;
        } else if (kind >= REDUX_ADD) {
            uint32_t acc = kind == REDUX_AND ? 0xffffffffu : kind == REDUX_MIN ? 0x7fffffffu
                         : kind == REDUX_UMIN ? 0xffffffffu : kind == REDUX_MAX ? 0x80000000u : 0;
            for (uint32_t k = 0; k < 32; ++k) {
                if (!(mask >> k & 1)) continue;
                const uint32_t v = (uint32_t)w.val[k];
                switch (kind) {
                    case REDUX_ADD: acc += v; break;
                    case REDUX_MIN: acc = (int32_t)v < (int32_t)acc ? v : acc; break;
                    case REDUX_MAX: acc = (int32_t)v > (int32_t)acc ? v : acc; break;
                    case REDUX_UMIN: acc = v < acc ? v : acc; break;
                    case REDUX_UMAX: acc = v > acc ? v : acc; break;
                    case REDUX_AND: acc &= v; break;
                    case REDUX_OR: acc |= v; break;
                    default: acc ^= v; break;
                }
            }
            r = acc;
        }
        w.res[i] = r;
        w.resp[i] = p;
        ++w.gen[i];
    }
    w.arrived &= ~mask;
    w.blocked &= ~mask;  // released: no longer blocked, though not yet resumed
    ++t->rt->progress;
}

// A warp collective of `kind` among the lanes of `mask`; returns this
// lane's result (and its predicate in *p).
inline uint64_t collective(Thread* t, uint32_t kind, uint32_t mask, uint64_t val, uint32_t b,
                           uint32_t c, uint32_t line, bool* p = nullptr) {
    Warp& w = t->blk->warps[t->warp];
    const uint32_t lane = t->lane;
    if (!(mask >> lane & 1)) {
        char m[128];
        snprintf(m, sizeof m, "lane %u of warp %u executes a warp collective whose member mask "
                 "0x%x leaves it out", lane, t->warp, mask);
        trap(t, line, m);
    }
    // Lanes a partial last warp does not have were never launched: not members
    // (a GPU runs full-mask collectives in blocks of fewer than 32 threads).
    mask &= lanes_of(t);
    w.kind[lane] = kind;
    w.mask[lane] = mask;
    w.val[lane] = val;
    w.b[lane] = b;
    w.c[lane] = c;
    const uint32_t g = w.gen[lane];
    w.arrived |= 1u << lane;
    w.blocked |= 1u << lane;
    while (w.gen[lane] == g) {
        // Exited lanes are not waited for: the PTX ISA's shfl/vote/match.sync wait for the
        // "non-exited threads" of the mask, and GPUs run bar.warp.sync so (numba-cuda's
        // reduction kernel syncs its warp after lanes returned).  A lane of the mask counts
        // once it waits at a collective of this kind with this mask (any instruction, as
        // the ISA's "same qualifiers and same membermask"); one waiting at another
        // collective is not here yet -- it may come once its own completes -- and one that
        // never comes is a deadlock, which the runtime reports.
        const uint32_t live = mask & ~w.exited;
        uint32_t here = 0;
        for (uint32_t m = w.arrived & live; m; m &= m - 1) {
            const uint32_t i = __builtin_ctz(m);
            if (w.kind[i] == kind && (w.mask[i] & ~w.exited) == live) here |= 1u << i;
        }
        if (here == live) {
            complete(t, w, live, line);
            break;
        }
        wait(t, line);
    }
    if (p) *p = w.resp[lane];
    return w.res[lane];
}

// activemask: the lanes converged here.  A lane waits until every lane of
// its warp that has not exited is at an activemask or blocked at a barrier
// or collective; the answer is the lanes at an activemask of the same line.
inline uint32_t activemask(Thread* t, uint32_t line) {
    Warp& w = t->blk->warps[t->warp];
    const uint32_t lane = t->lane, bit = 1u << lane;
    w.am_line[lane] = line;
    w.am_arrived |= bit;
    const uint32_t g = w.am_gen[lane];
    while (w.am_gen[lane] == g) {
        const uint32_t alive = lanes_of(t) & ~w.exited;
        if (((w.am_arrived | w.blocked) & alive) == alive) {
            uint32_t members = 0;
            for (uint32_t i = 0; i < 32; ++i)
                if ((w.am_arrived >> i & 1) && w.am_line[i] == line) members |= 1u << i;
            for (uint32_t i = 0; i < 32; ++i)
                if (members >> i & 1) {
                    w.am_res[i] = members;
                    ++w.am_gen[i];
                }
            w.am_arrived &= ~members;
            ++t->rt->progress;
            break;
        }
        wait(t, line);
    }
    return w.am_res[lane];
}

// ------------------------------------------------------------- mbarrier
// An mbarrier object is 8 bytes of the block's shared memory (8-byte aligned:
// else 716; outside the window, or a generic address outside the shared
// window, 700).  Its state, in the executor's own encoding (the PTX ISA makes
// it opaque): pending arrival count (bits 0-19), expected arrival count (20-39),
// tx-count (40-60, two's complement: the ISA's range is +-(2^20 - 1)), a tag
// (61-62: 01 an initialised object -- shared memory a block did not write
// reads 0xff, so tag 11, and mbarrier.inval writes 0), the phase parity (63).
// A phase completes when the pending count and the tx-count are both 0: the
// parity flips, the pending count is the expected count again, the tx-count 0.
// A state token (mbarrier.arrive's result) is the object as it was before the
// arrive-on (tag 10 from a .noComplete arrive, the only tokens
// mbarrier.pending_count may read).  What the ISA leaves undefined -- any
// operation but init on an object init did not make (or inval unmade), counts
// out of [1, 2^20 - 1], an arrive beyond the pending count, a .noComplete
// arrive that would complete the phase, pending_count of another token --
// traps (719) naming the instruction's line rather than invent a result.
constexpr uint64_t kMbTagMask = 3ull << 61, kMbValid = 1ull << 61, kMbNoComplete = 2ull << 61;
constexpr uint32_t kMbMax = (1u << 20) - 1;

struct Mbar {
    uint32_t pending, expected, phase;
    int32_t tx;
};

inline Mbar mb_unpack(uint64_t w) {
    Mbar m;
    m.pending = (uint32_t)(w & kMbMax);
    m.expected = (uint32_t)(w >> 20 & kMbMax);
    m.tx = (int32_t)((uint32_t)(w >> 40 & 0x1fffff) << 11) >> 11;
    m.phase = (uint32_t)(w >> 63);
    return m;
}

inline uint64_t mb_pack(const Mbar& m) {
    return (uint64_t)m.pending | (uint64_t)m.expected << 20 |
           (uint64_t)((uint32_t)m.tx & 0x1fffff) << 40 | kMbValid | (uint64_t)m.phase << 63;
}

[[noreturn]] inline void mb_trap(Thread* t, uint32_t line, const char* op, const char* why) {
    char m[160];
    snprintf(m, sizeof m, "mbarrier.%s: %s (undefined in the PTX ISA)", op, why);
    trap(t, line, m);
}

// The object's bytes: `generic` -- no state space given, the address must be in
// the shared window (a GPU faults otherwise); else a .shared address.
inline char* mb_ptr(Thread* t, uint64_t a, bool generic, uint32_t line) {
    if (generic && (a >> 48) != 1) fault(t, 700, a, 8, 1, line);
    return sptr(t, a, 8, 1, line);
}

inline uint64_t mb_load(Thread* t, char* p, uint32_t line, const char* op) {
    const uint64_t w = load<uint64_t>(p);
    if ((w & kMbTagMask) != kMbValid)
        mb_trap(t, line, op, "not an initialised mbarrier object (no init, or inval since)");
    return w;
}

inline void mb_count(Thread* t, uint32_t line, const char* op, const char* what, uint32_t n) {
    if (n < 1 || n > kMbMax) {
        char m[96];
        snprintf(m, sizeof m, "%s %u is out of the range [1, 2^20 - 1]", what, n);
        mb_trap(t, line, op, m);
    }
}

// The phase completes once nothing is pending.
inline void mb_settle(Thread* t, Mbar& m) {
    if (m.pending == 0 && m.tx == 0) {
        m.phase ^= 1;
        m.pending = m.expected;
        ++t->rt->progress;
    }
}

inline void mb_init(Thread* t, uint64_t a, bool generic, uint32_t count, uint32_t line) {
    char* p = mb_ptr(t, a, generic, line);
    mb_count(t, line, "init", "the expected count", count);
    Mbar m{count, count, 0, 0};
    store<uint64_t>(p, mb_pack(m));
    ++t->rt->progress;
}

inline void mb_inval(Thread* t, uint64_t a, bool generic, uint32_t line) {
    char* p = mb_ptr(t, a, generic, line);
    mb_load(t, p, line, "inval");
    store<uint64_t>(p, 0);
}

// arrive / arrive_drop (drop), with .expect_tx (tx > 0 before the arrive-on) and
// .noComplete; expect_tx / complete_tx alone do not arrive (`arrives` false).
// Returns the token.
inline uint64_t mb_arrive(Thread* t, uint64_t a, bool generic, bool arrives, uint32_t count,
                          int64_t tx, bool drop, bool no_complete, uint32_t line,
                          const char* op) {
    char* p = mb_ptr(t, a, generic, line);
    const uint64_t w = mb_load(t, p, line, op);
    Mbar m = mb_unpack(w);
    if (tx) {
        const uint64_t n = (uint64_t)(tx < 0 ? -tx : tx);
        if (n > kMbMax) mb_trap(t, line, op, "a tx count out of the range [0, 2^20 - 1]");
        const int64_t sum = (int64_t)m.tx + tx;
        if (sum > (int64_t)kMbMax || sum < -(int64_t)kMbMax)
            mb_trap(t, line, op, "the tx-count leaves the range [-(2^20 - 1), 2^20 - 1]");
        m.tx = (int32_t)sum;
    }
    if (arrives) {
        mb_count(t, line, op, "the count", count);
        if (drop) {
            if (count > m.expected) mb_trap(t, line, op, "the count exceeds the expected count");
            m.expected -= count;
        }
        if (count > m.pending) {
            char b[96];
            snprintf(b, sizeof b, "an arrival count of %u with %u arrivals pending", count,
                     m.pending);
            mb_trap(t, line, op, b);
        }
        m.pending -= count;
        if (no_complete && m.pending == 0 && m.tx == 0)
            mb_trap(t, line, op, ".noComplete, but the arrive-on completes the phase");
    }
    mb_settle(t, m);
    store<uint64_t>(p, mb_pack(m));
    ++t->rt->progress;
    return no_complete ? (w & ~kMbTagMask) | kMbNoComplete : w;
}

// test_wait / try_wait: whether the phase of `token` (parity: the phase of that
// parity, the value's bit 0) has completed.  try_wait, the ISA's potentially
// blocking form, lets the other threads run once when it has not (a yield in a
// loop, as ptx::spin: the thread may go on with other work, so a wait that never
// ends is the launch timeout, 702, naming this line).
inline bool mb_wait(Thread* t, uint64_t a, bool generic, uint64_t v, bool parity, bool block,
                    uint32_t line) {
    const char* op = block ? "try_wait" : "test_wait";
    char* p = mb_ptr(t, a, generic, line);
    if (!parity && (v & kMbTagMask) != kMbValid && (v & kMbTagMask) != kMbNoComplete)
        mb_trap(t, line, op, "the state operand is not a token mbarrier.arrive returned");
    const uint32_t want = parity ? (uint32_t)(v & 1) : (uint32_t)(v >> 63);
    bool done = (uint32_t)(mb_load(t, p, line, op) >> 63) != want;
    if (!done && block) {
        spin(t, line);
        done = (uint32_t)(mb_load(t, p, line, op) >> 63) != want;
    }
    return done;
}

inline uint32_t mb_pending_count(Thread* t, uint64_t token, uint32_t line) {
    if ((token & kMbTagMask) != kMbNoComplete)
        mb_trap(t, line, "pending_count", "the state operand is not a token of "
                                          "mbarrier.arrive.noComplete or arrive_drop.noComplete");
    return (uint32_t)(token & kMbMax);
}

// ------------------------------------------------------------- lifecycle
inline void begin(Thread* t, ga_host_rt* rt, Launch* L, char* local, uint64_t local_size) {
    t->rt = rt;
    t->L = L;
    t->blk = reinterpret_cast<Block*>(L->block + rt->slot * kBlockBytes);
    t->shared = L->shared + rt->slot * ((L->shared_size + 15) & ~(uint64_t)15);
    t->tid = rt->thread_idx.x + rt->block_dim.x * (rt->thread_idx.y + rt->block_dim.y *
                                                   rt->thread_idx.z);
    t->lane = t->tid & 31;
    t->warp = t->tid >> 5;
    t->local = local;
    t->local_size = local_size;
    t->sp = 0;
    if (t->tid == 0) {  // the block's first thread: a fresh block
        // shared memory a block did not write reads 0xff, whichever block had the slot before
        memset(t->shared, 0xff, L->shared_size);
        Block& b = *t->blk;
        memset(b.arrived, 0, sizeof b.arrived);
        memset(b.acc, 0, sizeof b.acc);
        b.exited = 0;
        b.pending = 0;
        const uint32_t nw = (rt->nthreads + 31) / 32;
        for (uint32_t i = 0; i < nw; ++i)
            b.warps[i].arrived = b.warps[i].exited = b.warps[i].blocked = b.warps[i].am_arrived =
                b.warps[i].at_bar = 0;
    }
}

// A thread's slice of the launch's pool of large local arenas.
inline char* pool_slice(Thread* t, uint64_t nbytes) {
    return t->L->local_pool + ((uint64_t)t->rt->slot * t->rt->nthreads + t->tid) * nbytes;
}

// grid.sync (cudaCGSynchronize): every thread of the grid waits until all
// have arrived.  Only a cooperative launch has its blocks resident together
// (a GPU's grid.sync outside one is undefined): elsewhere it traps.
inline void grid_sync(Thread* t, uint32_t line) {
    Launch* L = t->L;
    if (!L->cooperative)
        trap(t, line, "grid.sync (cudaCGSynchronize) in a launch that is not cooperative "
                      "(cuLaunchCooperativeKernel or the COOPERATIVE launch attribute)");
    const ga_uint3& g = t->rt->grid_dim;
    const uint64_t total = (uint64_t)g.x * g.y * g.z * t->rt->nthreads;
    Warp& w = t->blk->warps[t->warp];
    const uint32_t bit = 1u << t->lane, gen = L->grid_gen;
    w.blocked |= bit;  // at a barrier, for activemask
    if (++L->grid_arrived == total) {
        L->grid_arrived = 0;
        ++L->grid_gen;
        ++t->rt->progress;
    }
    while (L->grid_gen == gen) wait(t, line);
    w.blocked &= ~bit;
}

inline void end(Thread* t) {
    Block& b = *t->blk;
    ++b.exited;
    b.warps[t->warp].exited |= 1u << t->lane;
    ++t->rt->progress;
    // a bar.sync without a count no longer waits for this thread
    for (uint32_t m = b.pending; m; m &= m - 1) {
        const uint32_t id = __builtin_ctz(m);
        if (!b.count[id] && b.arrived[id] + b.exited >= t->rt->nthreads) bar_release(t, id);
    }
}

}  // namespace ptx
