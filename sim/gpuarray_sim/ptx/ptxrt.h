// Runtime support of kernels translated from PTX (sim/gpuarray_sim/ptx/):
// this file holds the launch and thread records and the checked memory
// windows; ptx_sync.h barriers, warp collectives and the thread
// lifecycle; ptx_num.h atomics, integer and float helpers, conversions;
// ptx_printf.h vprintf.
//
// The translator (_context.py) turns each PTX function into a C++ function
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
//
// Mapped slack (the memcheck model, sim/gpuarray_sim/_memcheck.py): the
// bytes from an allocation's end to its next granule boundary
// (Launch::slack, per grant) are mapped on a GPU, so an access there does
// not fault; it is recorded (Launch::oob: address, size, PTX line, block,
// thread; every one counted, the first oob_cap kept) for a report as
// compute-sanitizer's memcheck gives one, and is a fault only when
// Launch::strict is set.
//
// Ranges touched, for the race detector: each global access also widens,
// for the grant it hit, the interval of bytes read or written (offsets
// [lo, hi) from the grant's base; Launch::touched holds rlo, rhi, wlo, whi
// per grant, in the grants' order).  Two compares and at most two stores
// on the fast path; after the launch ptx/_run.py reports the intervals to
// the scheduler (_sched.py), which judges them on the launch's clock.
// Atomics count as writes.  An interval is the hull of what was touched
// (as a host kernel's declared extent is the hull of its operand view).
#pragma once
// No fused multiply-add unless the PTX asks for one (fma, mad.f32): a GPU
// rounds a*b+c twice for mul then add (x86-64's baseline has no FMA anyway;
// other hosts' compilers would contract without these).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <fenv.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <exception>
#include <limits>
#include <type_traits>

#include "ga_hostrt.h"


namespace ptx {

// PTX's .b128 (ISA 8.3): a register, ld/st/atom of 16 bytes; 16-byte aligned in memory (the
// access checks below fault 716 otherwise).  u128s is its type in an interpreter's register
// file (ptx_interp.cpp), whose slots are 8-byte aligned: the same value, read as 8-aligned.
typedef unsigned __int128 u128;
typedef unsigned __int128 u128s __attribute__((aligned(8)));

const uint64_t kShared = 0x0001000000000000ull;
const uint64_t kLocal = 0x0002000000000000ull;
const uint64_t kParam = 0x0003000000000000ull;
// Function addresses (mov.u64 %rd, f): kFunc + 16 * (i + 1) for the module's i-th function
// (ptx/_info.py, FUNC_BASE); no access window holds them.
const uint64_t kFunc = 0x0004000000000000ull;

// One access into a grant's mapped slack (ptx/_run.py mirrors it).
struct OobAccess {
    uint64_t addr, size;
    uint32_t grant, write, line;
    uint32_t block[3], thread[3];
};

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
    char* local_pool;           // threads per block x local bytes, for large local arenas
    uint64_t* touched;          // rlo, rhi, wlo, whi of each grant (see above)
    uint64_t* last_touched;     // touched's entry of `last`
    const void* code;           // the interpreter's decoded entry (ptx_interp.cpp), else null
    // Per resident block (the runtime's rt->slot): `shared` holds one window
    // of shared_size bytes (rounded up to 16) per slot, `block` kBlockBytes,
    // `local_pool` threads per block x local bytes.
    uint32_t cooperative;       // a cooperative launch: grid.sync may be used
    uint32_t grid_gen;          // grid barrier: completed generations
    uint64_t grid_arrived;      // threads at the grid barrier now
    const uint64_t* slack;      // mapped bytes past each grant's end (see above)
    OobAccess* oob;             // the first oob_cap accesses into slack
    uint64_t oob_cap;
    uint64_t oob_count;         // every access into slack (atomic)
    uint64_t strict;            // an access into slack is a fault (700)
    // Several workers run a launch's blocks at once (_hostrt.cpp), each with
    // a copy of this record (its own last, touched, oob, clock); the printf
    // length they share is the first copy's printf_len, reached through this.
    uint64_t* printf_at;
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
    char* shared;  // the block's shared window
    uint32_t tid, lane, warp;
    char* local;
    uint64_t local_size, sp;
};

// One Block record per residency slot (in the launch record's buffer): the
// blocks resident at once run on one OS thread, each with its own.
const size_t kBlockBytes = 65536;
static_assert(sizeof(Block) <= kBlockBytes, "the simulator's block state buffer is too small");

[[noreturn]] inline void trap(Thread* t, uint32_t line, const char* m) {
    t->rt->line = line;
    throw Trap(m);
}

// ------------------------------------------------------------------ memory
// The fault paths are cold and out of line, and never return: the checks of
// an access inlined into a kernel's loop cost a compare and a branch, and
// what they read stays in registers across them.
#define GA_PTX_COLD __attribute__((cold, noinline))
#define GA_PTX_INLINE inline __attribute__((always_inline))

[[noreturn]] GA_PTX_COLD inline void fault(Thread* t, int code, uint64_t a, uint64_t size, int write,
                               uint32_t line) {
    t->rt->line = line;
    t->rt->fault(t->rt, code, a, size, write);
    throw Trap("unreachable");
}

// An indirect call of an address that is no function of the call's prototype: the GPU
// would jump to a program counter holding no such code, CUDA_ERROR_INVALID_PC (718).
[[noreturn]] inline void bad_call(Thread* t, uint64_t a, uint32_t line) {
    fault(t, 718, a, 0, 0, line);
}

// The heap's header (its first 8 bytes): found among the launch's grants but not widened
// into the race detector's intervals -- the allocator's own bookkeeping is atomic, and
// kernels of two streams that both malloc do not race (as on a GPU).
inline uint64_t* heap_top(Thread* t, uint64_t heap, uint32_t line) {
    const ga_host_rt* rt = t->rt;
    for (int i = 0; i < rt->ngrants; ++i) {
        const ga_host_grant& g = rt->grants[i];
        if (g.base == heap && g.size >= 8 && g.writable && !(heap & 7))
            return reinterpret_cast<uint64_t*>(g.host);
    }
    fault(t, 700, heap, 8, 1, line);
}

// CUDA's device-side malloc/free on the module's heap (ptx/_ast.py HEAP_VAR, HEAP_BYTES):
// its first 8 bytes are the offset of the next free byte (0: empty; blocks start at 64),
// advanced atomically; blocks are 16-byte aligned; an exhausted heap returns NULL, as
// CUDA's does.  Freed blocks are not reused.
const uint64_t kHeapBytes = 8ull << 20;
inline uint64_t dev_malloc(Thread* t, uint64_t heap, uint64_t size, uint32_t line) {
    if (size == 0) return 0;
    uint64_t* top = heap_top(t, heap, line);
    const uint64_t n = (size + 15) & ~15ull;
    if (n < size) return 0;
    uint64_t cur = __atomic_load_n(top, __ATOMIC_RELAXED);
    for (;;) {
        const uint64_t start = cur ? cur : 64;
        if (start > kHeapBytes || n > kHeapBytes - start) return 0;
        if (__atomic_compare_exchange_n(top, &cur, start + n, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED))
            return heap + start;
    }
}
inline void dev_free(Thread* t, uint64_t heap, uint64_t p, uint32_t line) {
    if (p == 0) return;
    if (p < heap + 64 || p >= heap + kHeapBytes || (p & 15))
        trap(t, line, "free of a pointer malloc did not return");
}

// Widen the read (write = 0) or written interval r of a grant by [off, off + size).
inline void touch(uint64_t* r, uint64_t off, uint64_t size, int write) {
    r += write ? 2 : 0;
    if (off < r[0]) r[0] = off;
    if (off + size > r[1]) r[1] = off + size;
}

// Records an access past a grant's end that stays in its mapped slack.
inline void out_of_bounds(Thread* t, uint32_t grant, uint64_t a, uint64_t size, int write,
                          uint32_t line) {
    Launch* L = t->L;
    const uint64_t n = __atomic_fetch_add(&L->oob_count, 1, __ATOMIC_RELAXED);
    if (n >= L->oob_cap) return;
    OobAccess& r = L->oob[n];
    const ga_host_rt* rt = t->rt;
    r.addr = a;
    r.size = size;
    r.grant = grant;
    r.write = (uint32_t)write;
    r.line = line;
    r.block[0] = rt->block_idx.x, r.block[1] = rt->block_idx.y, r.block[2] = rt->block_idx.z;
    r.thread[0] = rt->thread_idx.x, r.thread[1] = rt->thread_idx.y, r.thread[2] = rt->thread_idx.z;
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
            t->L->last_touched = t->L->touched + 4 * found;
            touch(t->L->last_touched, off, size, write);
            return g.host + off;
        }
        const uint64_t mapped = g.size + t->L->slack[found];
        if (off < mapped && size <= mapped - off && (!write || g.writable)) {
            out_of_bounds(t, (uint32_t)found, a, size, write, line);  // strict: what the fault was
            if (!t->L->strict) {
                touch(t->L->touched + 4 * found, off, size, write);
                return g.host + off;
            }
        }
    }
    fault(t, 700, a, size, write, line);
}

GA_PTX_INLINE char* gptr(Thread* t, uint64_t a, uint64_t size, int write, uint32_t line) {
    if (a & (size - 1)) fault(t, 716, a, size, write, line);
    const ga_host_grant* g = t->L->last;
    const uint64_t off = a - g->base;
    if (off < g->size && size <= g->size - off && (!write || g->writable)) {
        touch(t->L->last_touched, off, size, write);
        return g->host + off;
    }
    return global_slow(t, a, size, write, line);
}

[[noreturn]] GA_PTX_COLD inline void shared_fault(Thread* t, int code, uint64_t off, uint64_t size,
                                                int write, uint32_t line) {
    t->rt->line = line;
    t->rt->shared_fault(t->rt, code, (long long)off, size, write, t->L->shared_size);
    throw Trap("unreachable");
}

GA_PTX_INLINE char* sptr(Thread* t, uint64_t a, uint64_t size, int write, uint32_t line) {
    const uint64_t off = (uint32_t)a == a ? a : a - kShared;
    const uint64_t n = t->L->shared_size;
    if (__builtin_expect(off > n || size > n - off, 0)) shared_fault(t, 700, off, size, write, line);
    if (__builtin_expect(off & (size - 1), 0)) shared_fault(t, 716, off, size, write, line);
    return t->shared + off;
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

}  // namespace ptx
