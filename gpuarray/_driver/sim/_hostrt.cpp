// The simulator's runtime for host-built kernels: runs one launch of a kernel
// of kernels/ compiled for the CPU (see kernels/ga_host.cuh for the contract).
//
// One concern: execution.  Every thread of every block runs.  Blocks run one
// after the other on the calling OS thread (the simulator's stream worker).
// The threads of a block are cooperative fibers switched only at
// __syncthreads: a fiber runs threads one after the other until one waits at
// a barrier, then the next fiber starts the next thread; once every thread
// of the block has started and each is waiting or finished, the waiting ones
// are resumed in thread order, each up to its next barrier.  A kernel
// without barriers therefore runs a whole block on one fiber.
//
// Fibers: a stack each (with a PROT_NONE guard page), made once per OS
// thread with makecontext and kept: a fiber that runs out of threads parks
// and takes the next block's threads when resumed.  Switches are
// _setjmp/_longjmp (no signal-mask system call, unlike swapcontext: 0.3 us
// -> a few ns; the transposes switch twice per thread per tile); only a
// fiber's first entry uses setcontext.
//
// Memory: the kernel reaches global memory only through the extents granted
// here (ga_host_translate); the first access outside them (or misaligned)
// calls fault(), which records it and switches back to the scheduler: the
// launch ends there, as a GPU's does, and the caller reports the fault.  The
// abandoned fibers are made afresh by the next launch.
//
// Built by gpuarray/_kernels/_host.py with the system C++ compiler
// (-I kernels/), loaded with ctypes by _hostrt.py.
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <vector>

#define GA_HOST_BUILD 1
#include "ga_host.cuh"

#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim

namespace {

typedef void (*ga_entry)(ga_host_rt*, const void*);

enum State { RUNNING, WAITING, DONE, ABORTED };

struct Fiber {
    ucontext_t ctx;  // first entry only
    jmp_buf jb;      // where the fiber continues
    char* stack;
    size_t size;
    ga_uint3 tid;
    State state;
    bool fresh;  // not started (or abandoned by a fault): enter through ctx
};

struct Fault {
    int code;
    int write;
    unsigned long long addr, size;
    unsigned int block[3], thread[3];
};

struct Launch {
    ga_host_rt rt;
    ga_entry entry;
    const void* params;
    unsigned int nthreads, next;
    jmp_buf sched;
    Fiber* cur;
    bool aborted;
    Fault fault;
};

const size_t kStack = 128 << 10;
thread_local Launch* cur_launch = nullptr;
thread_local std::vector<Fiber*> pool;
thread_local std::vector<Fiber*> waiting, still_waiting;
size_t page_size() {
    static const size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}

Fiber* fiber(size_t i) {
    while (pool.size() <= i) {
        const size_t guard = page_size();
        void* m = mmap(nullptr, kStack + guard, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) return nullptr;
        mprotect(m, guard, PROT_NONE);  // stacks grow down: overflow hits the guard
        Fiber* f = new Fiber();
        f->stack = static_cast<char*>(m) + guard;
        f->size = kStack;
        f->fresh = true;
        pool.push_back(f);
    }
    return pool[i];
}

void thread_of(Launch* l, unsigned int t, ga_uint3* out) {
    const ga_uint3& b = l->rt.block_dim;
    out->x = t % b.x;
    out->y = (t / b.x) % b.y;
    out->z = t / (b.x * b.y);
}

[[noreturn]] void fiber_main() {
    Fiber* f = cur_launch->cur;
    for (;;) {
        Launch* l = cur_launch;  // a parked fiber may serve a later launch
        while (l->next < l->nthreads) {
            thread_of(l, l->next++, &f->tid);
            l->rt.thread_idx = f->tid;
            f->state = RUNNING;
            l->entry(&l->rt, l->params);
        }
        f->state = DONE;
        if (!_setjmp(f->jb)) _longjmp(l->sched, 1);  // park until the next block
    }
}

// Scheduler -> fiber f, until f waits at a barrier, parks or faults.
void enter(Launch* l, Fiber* f) {
    l->cur = f;
    if (_setjmp(l->sched)) return;
    if (f->fresh) {
        f->fresh = false;
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = f->size;
        f->ctx.uc_link = nullptr;  // fiber_main never returns
        makecontext(&f->ctx, fiber_main, 0);
        setcontext(&f->ctx);
    }
    _longjmp(f->jb, 1);
}

void rt_sync(ga_host_rt*) {
    Launch* l = cur_launch;
    Fiber* f = l->cur;
    f->state = WAITING;
    if (!_setjmp(f->jb)) _longjmp(l->sched, 1);
}

void rt_fault(ga_host_rt* rt, int code, unsigned long long addr, unsigned long long size,
              int write) {
    Launch* l = cur_launch;
    Fiber* f = l->cur;
    if (!l->aborted) {
        l->aborted = true;
        l->fault.code = code;
        l->fault.write = write;
        l->fault.addr = addr;
        l->fault.size = size;
        l->fault.block[0] = rt->block_idx.x;
        l->fault.block[1] = rt->block_idx.y;
        l->fault.block[2] = rt->block_idx.z;
        l->fault.thread[0] = rt->thread_idx.x;
        l->fault.thread[1] = rt->thread_idx.y;
        l->fault.thread[2] = rt->thread_idx.z;
    }
    f->state = ABORTED;
    _longjmp(l->sched, 1);  // never resumed
}

// Every fiber that is not parked at the end of a launch (waiting at a
// barrier when another faulted) is abandoned: made afresh next time.
void abandon_unparked(size_t used) {
    for (size_t i = 0; i < used && i < pool.size(); ++i)
        if (pool[i]->state != DONE) pool[i]->fresh = true;
}

// Returns false when the launch ended (fault) or a fiber could not be made.
bool run_block(Launch* l) {
    l->next = 0;
    waiting.clear();
    size_t used = 0;
    bool ok = true;
    while (ok && l->next < l->nthreads) {
        Fiber* f = fiber(used++);
        if (f == nullptr) {
            l->fault.code = 2;  // out of memory for fiber stacks
            l->aborted = true;
            --used;
            ok = false;
            break;
        }
        enter(l, f);
        if (l->aborted) ok = false;
        else if (f->state == WAITING) waiting.push_back(f);
    }
    while (ok && !waiting.empty()) {  // every thread has started: release the barrier
        still_waiting.clear();
        for (Fiber* f : waiting) {
            l->rt.thread_idx = f->tid;
            enter(l, f);
            if (l->aborted) {
                ok = false;
                break;
            }
            if (f->state == WAITING) still_waiting.push_back(f);
        }
        waiting.swap(still_waiting);
    }
    if (!ok) abandon_unparked(used);
    return ok;
}

}  // namespace

// The layout version of ga_host_rt this runtime was built with.
GA_HOST_EXPORT int ga_hostrt_abi() { return GA_HOST_ABI; }

// Runs entry(rt, params) for every thread of every block of grid x block.
// Returns 0, or the fault's CUDA error code (700, 716; 2: no memory for
// fiber stacks) with its details in *out.
GA_HOST_EXPORT int ga_hostrt_launch(ga_entry entry, const void* params, const unsigned int* grid,
                     const unsigned int* block, const ga_host_grant* grants, int ngrants,
                     Fault* out) {
    Launch l = {};
    l.entry = entry;
    l.params = params;
    l.rt.block_dim = {block[0], block[1], block[2]};
    l.rt.grid_dim = {grid[0], grid[1], grid[2]};
    l.rt.grants = grants;
    l.rt.ngrants = ngrants;
    l.rt.sync = rt_sync;
    l.rt.fault = rt_fault;
    l.nthreads = block[0] * block[1] * block[2];
    Launch* prior = cur_launch;
    cur_launch = &l;
    int rc = 0;
    for (unsigned int z = 0; z < grid[2] && rc == 0; ++z)
        for (unsigned int y = 0; y < grid[1] && rc == 0; ++y)
            for (unsigned int x = 0; x < grid[0] && rc == 0; ++x) {
                l.rt.block_idx = {x, y, z};
                if (!run_block(&l)) rc = l.fault.code ? l.fault.code : 700;
            }
    cur_launch = prior;
    if (rc) *out = l.fault;
    return rc;
}
