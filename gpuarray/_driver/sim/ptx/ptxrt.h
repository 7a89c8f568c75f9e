// Runtime support of kernels translated from PTX (gpuarray/_driver/sim/ptx/).
//
// The translator (_emit.py) turns each PTX function into a C++ function
// that includes this header; the simulator's fiber runtime (_hostrt.cpp)
// runs one call of an entry's wrapper per CUDA thread, exactly as it runs
// the host build of kernels/ (same ga_host_rt record, same fibers, same
// fault path).  This header holds what PTX needs beyond that: memory
// windows and checked accesses, barriers and warp collectives built on the
// runtime's yield(), atomics, rounding, conversions and printf.
//
// Address windows (64-bit values as PTX sees them):
//   global / const : simulated device addresses (and mapped host memory),
//                    reached only through the grants of the launch (every
//                    live allocation the context may touch), sorted by base;
//   shared         : 0-based offsets in the .shared state space; the generic
//                    form (cvta.shared) is kShared + offset;
//   local          : the generic form kLocal + offset into the thread's
//                    local arena; ld.local/st.local take the same value;
//   param          : kParam + offset into the kernel's parameter block.
// A generic access is routed by the top 16 bits.  Every access is checked:
// outside its window (or the live frames of the local arena) is
// CUDA_ERROR_ILLEGAL_ADDRESS (700), an address not a multiple of the access
// size is CUDA_ERROR_MISALIGNED_ADDRESS (716); the fault carries the PTX
// line (rt->line).
#pragma once
#include <fenv.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <exception>
#include <limits>
#include <type_traits>

#include "ga_host.cuh"

#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim

namespace ptx {

const uint64_t kShared = 0x0001000000000000ull;
const uint64_t kLocal = 0x0002000000000000ull;
const uint64_t kParam = 0x0003000000000000ull;

// Filled by the simulator (ptx/_run.py mirrors it with ctypes).
struct Launch {
    const char* params;
    uint64_t param_size;
    const uint64_t* globals;  // device address of each module variable (translator's order)
    char* shared;             // the block's shared window: static, then dynamic
    uint64_t shared_size;
    uint64_t dyn_offset;
    uint64_t dyn_size;
    char* printf_buf;
    uint64_t printf_cap;
    uint64_t printf_len;
    const ga_host_grant* last;  // the grant the last global access hit
    uint64_t clock;
    char* block;                // kBlockBytes for the running block's barrier and warp state
};

// A trap (or an error of the kernel the runtime reports as 719).
struct Trap : std::exception {
    char msg[160];
    explicit Trap(const char* m) { snprintf(msg, sizeof msg, "%s", m); }
    const char* what() const noexcept override { return msg; }
};
struct Exit {};  // `exit` inside a .func: unwinds to the entry

struct Warp {
    uint32_t arrived, exited;
    uint32_t blocked;      // lanes waiting at a barrier or collective now
    uint32_t am_arrived;   // lanes at an activemask
    uint32_t am_line[32], am_gen[32], am_res[32];
    uint32_t at_bar;       // lanes blocked at a block barrier
    uint8_t bar_id[32];
    uint32_t gen[32], kind[32], mask[32], b[32], c[32];
    uint64_t val[32], res[32];
    uint8_t resp[32];
};

struct Block {
    uint32_t arrived[16], gen[16], acc[16], result[16], count[16];
    uint32_t exited;
    uint32_t pending;  // barriers with arrivals
    Warp warps[32];
};

struct Thread {
    ga_host_rt* rt;
    Launch* L;
    Block* blk;
    uint32_t tid, lane, warp;
    char* local;
    uint64_t local_size, sp;
};

// The launch's blocks run one after another on one OS thread: one Block
// record (in the launch record's buffer) serves them all.
const size_t kBlockBytes = 65536;
static_assert(sizeof(Block) <= kBlockBytes, "the simulator's block state buffer is too small");

[[noreturn]] inline void trap(Thread* t, uint32_t line, const char* m) {
    t->rt->line = line;
    throw Trap(m);
}

// ------------------------------------------------------------------ memory
[[noreturn]] inline void fault(Thread* t, int code, uint64_t a, uint64_t size, int write,
                               uint32_t line) {
    t->rt->line = line;
    t->rt->fault(t->rt, code, a, size, write);
    throw Trap("unreachable");
}

inline char* global_slow(Thread* t, uint64_t a, uint64_t size, int write, uint32_t line) {
    ga_host_rt* rt = t->rt;
    int lo = 0, hi = rt->ngrants - 1, found = -1;
    while (lo <= hi) {  // the last grant with base <= a
        int mid = (lo + hi) / 2;
        if (rt->grants[mid].base <= a) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if (found >= 0) {
        const ga_host_grant& g = rt->grants[found];
        const uint64_t off = a - g.base;
        if (off < g.size && size <= g.size - off && (!write || g.writable)) {
            t->L->last = &g;
            return g.host + off;
        }
    }
    fault(t, 700, a, size, write, line);
}

inline char* gptr(Thread* t, uint64_t a, uint64_t size, int write, uint32_t line) {
    if (a & (size - 1)) fault(t, 716, a, size, write, line);
    const ga_host_grant* g = t->L->last;
    const uint64_t off = a - g->base;
    if (off < g->size && size <= g->size - off && (!write || g->writable)) return g->host + off;
    return global_slow(t, a, size, write, line);
}

inline char* sptr(Thread* t, uint64_t a, uint64_t size, int write, uint32_t line) {
    const uint64_t off = (uint32_t)a == a ? a : a - kShared;
    if (off > t->L->shared_size || size > t->L->shared_size - off) {
        t->rt->line = line;
        t->rt->shared_fault(t->rt, 700, (long long)off, size, write, t->L->shared_size);
    }
    if (off & (size - 1)) {
        t->rt->line = line;
        t->rt->shared_fault(t->rt, 716, (long long)off, size, write, t->L->shared_size);
    }
    return t->L->shared + off;
}

inline char* lptr(Thread* t, uint64_t a, uint64_t size, int write, uint32_t line) {
    const uint64_t off = a - kLocal;
    if (off > t->sp || size > t->sp - off) fault(t, 700, a, size, write, line);
    if (off & (size - 1)) fault(t, 716, a, size, write, line);
    return t->local + off;
}

inline char* pptr(Thread* t, uint64_t a, uint64_t size, int write, uint32_t line) {
    const uint64_t off = a - kParam;
    if (write || off > t->L->param_size || size > t->L->param_size - off)
        fault(t, 700, a, size, write, line);
    if (off & (size - 1)) fault(t, 716, a, size, write, line);
    return const_cast<char*>(t->L->params) + off;
}

inline char* genptr(Thread* t, uint64_t a, uint64_t size, int write, uint32_t line) {
    switch (a >> 48) {
        case 1: return sptr(t, a, size, write, line);
        case 2: return lptr(t, a, size, write, line);
        case 3: return pptr(t, a, size, write, line);
        default: return gptr(t, a, size, write, line);
    }
}

template <class V> inline V load(const char* p) {
    V v;
    memcpy(&v, p, sizeof v);
    return v;
}
template <class V> inline void store(char* p, V v) { memcpy(p, &v, sizeof v); }

// Local frames: a function's .local variables live in the thread's arena.
inline uint64_t frame(Thread* t, uint64_t size, uint64_t align, uint32_t line) {
    uint64_t base = (t->sp + align - 1) & ~(align - 1);
    if (base + size > t->local_size) {
        t->rt->line = line;
        t->rt->fault(t->rt, 714, kLocal + base, size, 1);
    }
    t->sp = base + size;
    return base;
}

// ------------------------------------------------------------- bit casts
template <class To, class From> inline To bits(From f) {
    static_assert(sizeof(To) == sizeof(From), "bit cast of unequal sizes");
    To t;
    memcpy(&t, &f, sizeof t);
    return t;
}

// ------------------------------------------------------------------ sync
inline void wait(Thread* t, uint32_t line) {
    t->rt->line = line;
    t->rt->yield(t->rt);
}

// Releases barrier `id`: its waiters are no longer blocked (for activemask).
inline void bar_release(Thread* t, uint32_t id) {
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
inline uint32_t bar_sync(Thread* t, uint32_t id, uint32_t count, int op, bool p,
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
        if (w.kind[i] != kind || w.mask[i] != mask) {
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
                p = j >= (int)minl;
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
                         "in the member mask 0x%x", i, t->warp, j, mask);
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
    w.kind[lane] = kind;
    w.mask[lane] = mask;
    w.val[lane] = val;
    w.b[lane] = b;
    w.c[lane] = c;
    const uint32_t g = w.gen[lane];
    w.arrived |= 1u << lane;
    w.blocked |= 1u << lane;
    while (w.gen[lane] == g) {
        if ((w.arrived & mask) == mask) {
            complete(t, w, mask, line);
            break;
        }
        if (mask & w.exited) {
            char m[160];
            snprintf(m, sizeof m, "lane %u of warp %u waits at a warp collective (member mask "
                     "0x%x) for lanes that exited (0x%x)", lane, t->warp, mask, mask & w.exited);
            trap(t, line, m);
        }
        if (mask & ~lanes_of(t)) {
            char m[160];
            snprintf(m, sizeof m, "the member mask 0x%x of a warp collective names lanes that "
                     "the block does not have (warp %u has lanes 0x%x)", mask, t->warp,
                     lanes_of(t));
            trap(t, line, m);
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

// ------------------------------------------------------------- lifecycle
inline void begin(Thread* t, ga_host_rt* rt, Launch* L, char* local, uint64_t local_size) {
    t->rt = rt;
    t->L = L;
    t->blk = reinterpret_cast<Block*>(L->block);
    t->tid = rt->thread_idx.x + rt->block_dim.x * (rt->thread_idx.y + rt->block_dim.y *
                                                   rt->thread_idx.z);
    t->lane = t->tid & 31;
    t->warp = t->tid >> 5;
    t->local = local;
    t->local_size = local_size;
    t->sp = 0;
    if (t->tid == 0) {  // the block's first thread: a fresh block
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

// ------------------------------------------------------------- atomics
template <class V> inline V atom_cas(char* p, V cmp, V val) {
    V expected = cmp;
    __atomic_compare_exchange(reinterpret_cast<V*>(p), &expected, &val, false, __ATOMIC_SEQ_CST,
                              __ATOMIC_SEQ_CST);
    return expected;  // the old value either way
}

// op: the new value from the old (a CAS loop, so every operation is atomic).
template <class V, class F> inline V atom_rmw(char* p, F op) {
    V old = load<V>(p);
    for (;;) {
        V nv = op(old);
        V seen = old;
        if (__atomic_compare_exchange(reinterpret_cast<V*>(p), &seen, &nv, false,
                                      __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return old;
        old = seen;
    }
}

// ------------------------------------------------------------ integers
template <class V> inline V sat_add(V a, V b) {
    V r;
    if (__builtin_add_overflow(a, b, &r)) return a < 0 ? (V)(-(V)1 << (8 * sizeof(V) - 1))
                                                        : (V)~((V)1 << (8 * sizeof(V) - 1));
    return r;
}
template <class V> inline V sat_sub(V a, V b) {
    V r;
    if (__builtin_sub_overflow(a, b, &r)) return a < 0 ? (V)(-(V)1 << (8 * sizeof(V) - 1))
                                                        : (V)~((V)1 << (8 * sizeof(V) - 1));
    return r;
}
template <class V> inline V idiv(V a, V b) {  // PTX: x/0 is all ones (unsigned), no trap
    if (b == 0) return (V)-1;
    if ((V)-1 < 0 && b == (V)-1) return (V)(0 - (typename std::make_unsigned<V>::type)a);
    return a / b;
}
template <class V> inline V irem(V a, V b) {
    if (b == 0) return a;
    if ((V)-1 < 0 && b == (V)-1) return 0;
    return a % b;
}
// mode: 0 generic, 1 f4e, 2 b4e, 3 rc8, 4 ecl, 5 ecr, 6 rc16.
inline uint32_t prmt(uint32_t a, uint32_t b, uint32_t c, int mode) {
    const uint64_t x = ((uint64_t)b << 32) | a;
    const uint32_t s = c & 3;
    uint32_t r = 0;
    for (uint32_t i = 0; i < 4; ++i) {
        uint32_t sel;
        switch (mode) {
            case 1: sel = (s + i) & 7; break;
            case 2: sel = (s - i) & 7; break;
            case 3: sel = s; break;
            case 4: sel = i > s ? i : s; break;
            case 5: sel = i < s ? i : s; break;
            case 6: sel = (s & 1) * 2 + (i & 1); break;
            default: sel = (c >> (4 * i)) & 15; break;
        }
        uint32_t byte = (x >> (8 * (sel & 7))) & 0xff;
        if (mode == 0 && (sel & 8)) byte = (byte & 0x80) ? 0xff : 0;
        r |= byte << (8 * i);
    }
    return r;
}
template <class V> inline V bfe(V a, uint32_t pos, uint32_t len, bool is_signed) {
    const uint32_t bits = 8 * sizeof(V);
    pos &= 0xff;
    len &= 0xff;
    typedef typename std::make_unsigned<V>::type U;
    const U ua = (U)a;
    bool sbit = false;
    if (is_signed) {
        const uint32_t top = pos + len - 1 >= bits - 1 ? bits - 1 : pos + len - 1;
        sbit = len == 0 ? false : (ua >> top) & 1;
    }
    U r = 0;
    for (uint32_t i = 0; i < bits; ++i) {
        const bool bit = i < len ? (pos + i < bits ? (ua >> (pos + i)) & 1 : sbit) : sbit;
        r |= (U)bit << i;
    }
    return (V)r;
}
template <class V> inline V bfi(V a, V b, uint32_t pos, uint32_t len) {
    const uint32_t bits = 8 * sizeof(V);
    pos &= 0xff;
    len &= 0xff;
    typedef typename std::make_unsigned<V>::type U;
    U r = (U)b;
    for (uint32_t i = 0; i < len && pos + i < bits; ++i) {
        const U bit = (U)1 << (pos + i);
        r = (r & ~bit) | ((((U)a >> i) & 1) ? bit : 0);
    }
    return (V)r;
}
template <class V> inline V shl(V a, uint32_t n) { return n >= 8 * sizeof(V) ? 0 : (V)(a << n); }
template <class V> inline V shr(V a, uint32_t n) {  // arithmetic for signed V
    if (n >= 8 * sizeof(V)) return (V)-1 < 0 && a < 0 ? (V)-1 : 0;
    return (V)(a >> n);
}
template <class V> inline uint32_t clz(V a) {
    return a == 0 ? 8 * sizeof(V) : sizeof(V) == 8 ? __builtin_clzll((uint64_t)a)
                                                   : __builtin_clz((uint32_t)a);
}
template <class V> inline V brev(V a) {
    V r = 0;
    for (uint32_t i = 0; i < 8 * sizeof(V); ++i) r |= (V)((a >> i) & 1) << (8 * sizeof(V) - 1 - i);
    return r;
}
inline uint64_t mulhi_u64(uint64_t a, uint64_t b) {
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
}
inline int64_t mulhi_s64(int64_t a, int64_t b) { return (int64_t)(((__int128)a * b) >> 64); }

// ------------------------------------------------------------- floats
// Directed rounding: the operation runs under fesetround, its operands
// and result volatile so the compiler neither folds nor moves it.
struct Round {
    int saved;
    explicit Round(int mode) : saved(fegetround()) { if (mode != saved) fesetround(mode); }
    ~Round() { if (fegetround() != saved) fesetround(saved); }
};
template <class V> inline V rnd_add(V a, V b, int m) {
    Round r(m);
    volatile V x = a, y = b;
    volatile V z = x + y;
    return z;
}
template <class V> inline V rnd_mul(V a, V b, int m) {
    Round r(m);
    volatile V x = a, y = b;
    volatile V z = x * y;
    return z;
}
template <class V> inline V rnd_div(V a, V b, int m) {
    Round r(m);
    volatile V x = a, y = b;
    volatile V z = x / y;
    return z;
}
inline float rnd_fma(float a, float b, float c, int m) {
    Round r(m);
    volatile float x = a, y = b, z = c;
    volatile float w = fmaf(x, y, z);
    return w;
}
inline double rnd_fma(double a, double b, double c, int m) {
    Round r(m);
    volatile double x = a, y = b, z = c;
    volatile double w = fma(x, y, z);
    return w;
}
template <class V> inline V rnd_sqrt(V a, int m) {
    Round r(m);
    volatile V x = a;
    volatile V z = sizeof(V) == 4 ? (V)sqrtf((float)x) : (V)sqrt((double)x);
    return z;
}
inline float rnd_f32(double a, int m) {
    Round r(m);
    volatile double x = a;
    volatile float z = (float)x;
    return z;
}
template <class V> inline V ftz(V v) {  // flush subnormals to sign-preserving zero
    return fpclassify(v) == FP_SUBNORMAL ? copysign((V)0, v) : v;
}
inline float sat01(float v) { return v != v ? 0.0f : v < 0 ? 0.0f : v > 1 ? 1.0f : v; }
inline double sat01(double v) { return v != v ? 0.0 : v < 0 ? 0.0 : v > 1 ? 1.0 : v; }
// PTX min/max: NaN only when both are NaN; -0 < +0.
template <class V> inline V fmin_(V a, V b) {
    if (a != a) return b;
    if (b != b) return a;
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
}
template <class V> inline V fmax_(V a, V b) {
    if (a != a) return b;
    if (b != b) return a;
    if (a == b) return signbit(a) ? b : a;
    return a > b ? a : b;
}
inline float canon(float v) { return v != v ? bits<float>(0x7fffffffu) : v; }

// Float to integer: PTX saturates (NaN -> 0); `m` rounds first.
template <class V> inline V f2i(double v, int m) {
    if (v != v) return 0;
    switch (m) {
        case 1: v = nearbyint(v); break;  // rni (nearest even: the default mode)
        case 2: v = trunc(v); break;      // rzi
        case 3: v = floor(v); break;      // rmi
        case 4: v = ceil(v); break;       // rpi
        default: v = trunc(v); break;
    }
    const double lo = (V)-1 < 0 ? -ldexp(1.0, 8 * sizeof(V) - 1) : 0.0;
    const double hi = (V)-1 < 0 ? ldexp(1.0, 8 * sizeof(V) - 1) : ldexp(1.0, 8 * sizeof(V));
    if (v <= lo) return (V)-1 < 0 ? (V)((typename std::make_unsigned<V>::type)1 << (8 * sizeof(V) - 1)) : 0;
    if (v >= hi) return (V)-1 < 0 ? (V)~((typename std::make_unsigned<V>::type)1 << (8 * sizeof(V) - 1)) : (V)-1;
    return (V)v;
}
// Integer to float with rounding mode m (FE_* value).
template <class F, class V> inline F i2f(V v, int m) {
    Round r(m);
    volatile V x = v;
    volatile F z = (F)x;
    return z;
}

// Narrow float formats (f16: 5 exponent bits, 11-bit significand; bf16: 8, 8),
// exactly rounded from double with mode m (FE_*), on the bits: one
// rounding, subnormals and overflow by mode, NaN -> the canonical quiet NaN
// (sign kept).  Returns the bits.
inline uint16_t narrow(double d, int ebits, int pbits, int m) {
    const uint64_t db = bits<uint64_t>(d);
    const uint32_t sign = (uint32_t)(db >> 63) << 15;
    const int fb = pbits - 1;  // stored fraction bits
    const int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias;
    const uint32_t inf = (uint32_t)((1 << ebits) - 1) << fb;
    const int dexp = (int)((db >> 52) & 0x7ff);
    const uint64_t dman = db & ((1ull << 52) - 1);
    if (dexp == 0x7ff) return (uint16_t)(sign | inf | (dman ? 1u << (fb - 1) : 0));
    if (dexp == 0 && dman == 0) return (uint16_t)sign;
    const uint64_t sig = dexp ? dman | (1ull << 52) : dman;
    const int e = dexp ? dexp - 1023 : -1022;
    const int shift = 52 - fb + (e < emin ? emin - e : 0);
    uint64_t q, rem, half;
    if (shift >= 64) {
        q = 0;
        rem = sig;
        half = ~0ull;  // rem < half: never a halfway case
    } else {
        q = sig >> shift;
        rem = sig & ((1ull << shift) - 1);
        half = 1ull << (shift - 1);
    }
    const bool neg = sign != 0;
    bool up = false;
    if (rem) {
        if (m == FE_TOWARDZERO) up = false;
        else if (m == FE_DOWNWARD) up = neg;
        else if (m == FE_UPWARD) up = !neg;
        else up = rem > half || (rem == half && (q & 1));
    }
    q += up;
    const uint64_t h = e < emin ? q : ((uint64_t)(e + bias - 1) << fb) + q;
    if (h >= inf) {  // overflow: infinity, or the largest finite, by mode
        const bool to_inf = m == FE_TONEAREST || (m == FE_UPWARD && !neg) ||
                            (m == FE_DOWNWARD && neg);
        return (uint16_t)(sign | (to_inf ? inf : inf - 1));
    }
    return (uint16_t)(sign | h);
}
inline float widen(uint16_t h, int ebits, int pbits) {
    const int fb = pbits - 1, bias = (1 << (ebits - 1)) - 1;
    const uint32_t sign = (uint32_t)(h >> 15) << 31;
    const uint32_t e = (h >> fb) & ((1u << ebits) - 1), f = h & ((1u << fb) - 1);
    if (e == (1u << ebits) - 1) return bits<float>(sign | 0x7f800000u | (f << (23 - fb)));
    if (e == 0) {  // zero or subnormal: f * 2^(1 - bias - fb), exact in float
        const float v = ldexpf((float)f, 1 - bias - fb);
        return sign ? -v : v;
    }
    return bits<float>(sign | ((e - bias + 127) << 23) | (f << (23 - fb)));
}
inline uint16_t f2h(double d, int m) { return narrow(d, 5, 11, m); }
inline uint16_t f2bf(double d, int m) { return narrow(d, 8, 8, m); }
inline float h2f(uint16_t h) { return widen(h, 5, 11); }
inline float bf2f(uint16_t h) { return widen(h, 8, 8); }

// Integer to integer with .sat: clamped to the destination's range.
template <class D, class S> inline D clamp_int(S v) {
    const long double x = (long double)v;
    const long double lo = (long double)std::numeric_limits<D>::min();
    const long double hi = (long double)std::numeric_limits<D>::max();
    return x < lo ? std::numeric_limits<D>::min() : x > hi ? std::numeric_limits<D>::max() : (D)v;
}

inline uint64_t globaltimer() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// ------------------------------------------------------------- printf
// vprintf(format, arguments): formats into the launch's buffer (the
// simulator writes it to stdout when the launch ends, as the device's
// printf buffer is flushed at a synchronisation).  The arguments are
// packed as CUDA packs them: each at its size's alignment, floats as
// doubles.  Returns the number of arguments, as CUDA's vprintf does.
inline int vprintf(Thread* t, uint64_t fmt, uint64_t args, uint32_t line) {
    char f[1024];
    size_t n = 0;
    for (; n < sizeof f - 1; ++n) {
        f[n] = *genptr(t, fmt + n, 1, 0, line);
        if (!f[n]) break;
    }
    f[n] = 0;
    char out[4096];
    size_t o = 0;
    uint64_t off = 0;
    int count = 0;
    for (size_t i = 0; f[i] && o < sizeof out - 1;) {
        if (f[i] != '%') {
            out[o++] = f[i++];
            continue;
        }
        size_t j = i + 1;
        char spec[40];
        size_t k = 0;
        spec[k++] = '%';
        while (f[j] && strchr("-+ #0", f[j]) && k < 20) spec[k++] = f[j++];
        while (f[j] && (strchr("0123456789.", f[j])) && k < 30) spec[k++] = f[j++];
        int longs = 0;
        while (f[j] && strchr("lhzjtL", f[j])) {
            if (strchr("lzjt", f[j])) ++longs;
            ++j;
        }
        const char conv = f[j];
        if (!conv) break;
        i = j + 1;
        if (conv == '%') {
            out[o++] = '%';
            continue;
        }
        int w;
        if (strchr("diuxXoc", conv)) {
            w = longs ? 8 : 4;
        } else if (strchr("feEgGaAFsp", conv)) {
            w = 8;
        } else {
            trap(t, line, "vprintf: a conversion the simulator does not know");
        }
        off = (off + w - 1) & ~(uint64_t)(w - 1);
        const char* src = genptr(t, args + off, w, 0, line);
        off += w;
        ++count;
        const size_t room = sizeof out - o;
        int r = 0;
        if (strchr("diuxXoc", conv)) {
            spec[k++] = 'l';
            spec[k++] = 'l';
            spec[k++] = conv == 'c' ? 'c' : conv;
            spec[k] = 0;
            if (conv == 'c') {
                spec[k - 3] = 'c';
                spec[k - 2] = 0;
                r = snprintf(out + o, room, spec, (int)load<int32_t>(src));
            } else if (strchr("di", conv)) {
                long long v = w == 8 ? load<int64_t>(src) : load<int32_t>(src);
                r = snprintf(out + o, room, spec, v);
            } else {
                unsigned long long v = w == 8 ? load<uint64_t>(src) : load<uint32_t>(src);
                r = snprintf(out + o, room, spec, v);
            }
        } else if (conv == 's') {
            const uint64_t sp = load<uint64_t>(src);
            char sbuf[512];
            size_t m = 0;
            if (sp == 0) {
                strcpy(sbuf, "(null)");
            } else {
                for (; m < sizeof sbuf - 1; ++m) {
                    sbuf[m] = *genptr(t, sp + m, 1, 0, line);
                    if (!sbuf[m]) break;
                }
                sbuf[m] = 0;
            }
            spec[k++] = 's';
            spec[k] = 0;
            r = snprintf(out + o, room, spec, sbuf);
        } else if (conv == 'p') {
            r = snprintf(out + o, room, "0x%llx", (unsigned long long)load<uint64_t>(src));
        } else {
            spec[k++] = conv;
            spec[k] = 0;
            r = snprintf(out + o, room, spec, load<double>(src));
        }
        if (r > 0) o += (size_t)r < room ? (size_t)r : room - 1;
    }
    Launch* L = t->L;
    if (L->printf_buf && L->printf_len < L->printf_cap) {
        const size_t m = o < L->printf_cap - L->printf_len ? o : L->printf_cap - L->printf_len;
        memcpy(L->printf_buf + L->printf_len, out, m);
        L->printf_len += m;
    }
    return count;
}

}  // namespace ptx
