// The fiber runtime's launch record (_hostrt.cpp; see its header comment):
// a resident block's slot, the fault a launch ends with, what the workers of
// one launch share, each worker's Launch, and the two calls every part of the
// runtime makes on them -- record() (the first fault claimed ends the launch)
// and stopped().  Included once, by _hostrt.cpp, after _hostrt_fibers.h;
// it shares their anonymous namespace.
#pragma once
#include <pthread.h>
#include <string.h>

#include "_hostrt_fibers.h"
#include "ga_hostrt.h"

namespace {

typedef void (*ga_entry)(ga_host_rt*, const void*);

enum Space { GLOBAL = 0, SHARED = 1, STACK = 2, EXCEPTION = 3, DEADLOCK = 4, SPIN = 5 };

// rt.line's top bit at a yield: the thread spins in a loop (ptx::spin), it
// waits for no barrier.
const unsigned int kSpinBit = 0x80000000u;

struct Launch;

// A resident block: its own launch record (block_idx, thread_idx, progress,
// slot), the next of its threads to start and its waiting fibers.  `rt`
// comes first: a kernel's yield(&slot->rt) finds its slot, and the slot its
// worker's launch, without a thread-local lookup.
struct Slot {
    ga_host_rt rt;
    Launch* owner;   // the worker's launch record
    ga_entry entry;  // what its threads run (the launch's, or the upgrade's from admission on)
    unsigned int next;
    ga_uint3 next_tid;  // threadIdx of thread `next` (kept in step: no divisions per thread)
    Fiber* waiting;
    Fiber** tail;
};

struct Fault {
    int code;
    int write;
    unsigned long long addr, size;
    unsigned int block[3], thread[3];
    int space;                // Space
    unsigned long long extent;  // bytes of the __shared__ array; fiber stack size
    char what[128];           // a C++ exception's what()
    unsigned int line;        // the PTX line (kernels translated from PTX), else 0
};

// What the workers of one launch share (one worker: the calling thread alone).
struct Shared {
    Slot* all;                     // every slot of the launch; a worker's are a range of them
    unsigned long long nblocks;
    // the counters workers write on lines of their own, apart from what each reads per thread
    alignas(64) unsigned long long next;  // the next block to admit (atomic)
    alignas(64) unsigned long long moves; // rounds that moved, over all workers (atomic)
    alignas(64) int claimed;       // a fault is being recorded (atomic: the first one wins)
    int aborted;                   // the launch ended (atomic): every worker stops
    unsigned int running;          // workers not finished (under lock)
    pthread_mutex_t lock;
    pthread_cond_t done;
    Fault fault;
    // The spinning thread a launch timeout names (under lock): of the
    // workers' spinners since `moves` last changed, the lowest block's, so
    // several workers name the one that one worker would (its first).
    unsigned long long spin_epoch, spin_key;  // spin_key 0: none; else 1 + block, thread
    unsigned int spin_block[3], spin_thread[3], spin_line;
};

// Aligned to a cache line: the workers' records lie side by side, each written per fiber switch.
struct alignas(64) Launch {
    Shared* sh;
    ga_host_rt rt;  // what every block's record starts from
    ga_entry entry;
    // upgrade[0] is set (once, by another thread) to an entry that runs the
    // same kernel faster (the PTX executor's translated build of an
    // interpreted kernel): blocks admitted after that run it, and count
    // themselves in upgrade[1].  Null: none will come.
    unsigned long long* upgrade;
    const void* params;
    unsigned int nthreads;
    Slot* slots;
    unsigned int nslots, used;  // slots, and how many were ever used (their progress counts)
    Slot* cur_slot;  // the block of the running fiber (or the one a fault names)
    Fiber* scan;     // the last fiber taken from the thread's list
    Fiber* idle;     // parked fibers of this launch, free for any block
    Ctx sched;
    Fiber* cur;
    // The rest of the running block's round (see pass_on), null outside a
    // round; `moved`: something in this round moved (a thread passed a
    // barrier or finished, a block started).
    Fiber* round_next;
    bool moved;
    bool in_fiber;  // a fiber runs (the signal handler's test)
    bool aborted;
    double spin_limit;  // seconds of spinning without progress (GPUARRAY_SIM_LAUNCH_TIMEOUT)
    unsigned int workers;  // of the launch
};

thread_local Launch* cur_launch = nullptr;
thread_local ThreadFibers fibers;

// Ends the launch with this fault unless it already ended: true when this
// one is the launch's (the first claimed; with several workers, which of two
// faults of different blocks at the same time is first may vary).
bool record(Launch* l, int code, Space space, unsigned long long addr, unsigned long long size,
            int write, unsigned long long extent) {
    if (l->aborted) return false;
    l->aborted = true;
    int unclaimed = 0;
    if (!__atomic_compare_exchange_n(&l->sh->claimed, &unclaimed, 1, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return false;  // another worker's fault ended the launch first
    const ga_host_rt& rt = l->cur_slot != nullptr ? l->cur_slot->rt : l->rt;
    Fault& ft = l->sh->fault;
    ft.code = code;
    ft.space = space;
    ft.write = write;
    ft.addr = addr;
    ft.size = size;
    ft.extent = extent;
    ft.block[0] = rt.block_idx.x;
    ft.block[1] = rt.block_idx.y;
    ft.block[2] = rt.block_idx.z;
    ft.thread[0] = rt.thread_idx.x;
    ft.thread[1] = rt.thread_idx.y;
    ft.thread[2] = rt.thread_idx.z;
    ft.line = rt.line;
    __atomic_store_n(&l->sh->aborted, 1, __ATOMIC_RELEASE);
    return true;
}

// The launch ended: by a fault of this worker, or of another (seen here).
bool stopped(Launch* l) {
    if (!l->aborted && __atomic_load_n(&l->sh->aborted, __ATOMIC_ACQUIRE)) l->aborted = true;
    return l->aborted;
}

}  // namespace
