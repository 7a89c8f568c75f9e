// The simulator's runtime for host-built kernels: runs one launch of a kernel
// of kernels/ compiled for the CPU (see kernels/ga_host.cuh for the contract).
//
// One concern: execution.  Every thread of every block runs.  Blocks run one
// after the other on the calling OS thread (the simulator's stream worker).
// The threads of a block are cooperative fibers (ucontext) switched only at
// __syncthreads: a fiber runs threads one after the other until one waits
// at a barrier, then the next fiber starts the next thread; once every
// thread of the block has started and each is waiting or finished, the
// waiting ones are resumed in thread order, each up to its next barrier.  A
// kernel without barriers therefore runs a whole block on one fiber, one
// context switch in and out.  Fiber stacks (with a PROT_NONE guard page) are
// kept per OS thread and reused by later blocks and launches.
//
// Memory: the kernel reaches global memory only through the extents granted
// here (ga_host_translate); the first access outside them (or misaligned)
// calls fault(), which records it and switches back to the scheduler: the
// launch ends there, as a GPU's does, and the caller reports the fault.
//
// Built by gpuarray/_kernels/_host.py with the system C++ compiler
// (-I kernels/), loaded with ctypes by _hostrt.py.
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
    ucontext_t ctx;
    char* stack;
    size_t size;
    ga_uint3 tid;
    State state;
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
    ucontext_t sched;
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

void fiber_main() {
    Launch* l = cur_launch;
    Fiber* f = l->cur;
    while (l->next < l->nthreads) {
        thread_of(l, l->next++, &f->tid);
        l->rt.thread_idx = f->tid;
        f->state = RUNNING;
        l->entry(&l->rt, l->params);
    }
    f->state = DONE;  // returning switches to uc_link, the scheduler
}

void rt_sync(ga_host_rt*) {
    Launch* l = cur_launch;
    Fiber* f = l->cur;
    f->state = WAITING;
    swapcontext(&f->ctx, &l->sched);
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
    swapcontext(&f->ctx, &l->sched);  // never resumed
}

// Returns false when the launch ended (fault) or a fiber could not be made.
bool run_block(Launch* l) {
    l->next = 0;
    waiting.clear();
    size_t used = 0;
    while (l->next < l->nthreads) {
        Fiber* f = fiber(used++);
        if (f == nullptr) {
            l->fault.code = 2;  // out of memory for fiber stacks
            return false;
        }
        getcontext(&f->ctx);
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = f->size;
        f->ctx.uc_link = &l->sched;
        makecontext(&f->ctx, fiber_main, 0);
        l->cur = f;
        swapcontext(&l->sched, &f->ctx);
        if (l->aborted) return false;
        if (f->state == WAITING) waiting.push_back(f);
    }
    while (!waiting.empty()) {  // every thread has started: release the barrier
        still_waiting.clear();
        for (Fiber* f : waiting) {
            l->cur = f;
            l->rt.thread_idx = f->tid;
            swapcontext(&l->sched, &f->ctx);
            if (l->aborted) return false;
            if (f->state == WAITING) still_waiting.push_back(f);
        }
        waiting.swap(still_waiting);
    }
    return true;
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
