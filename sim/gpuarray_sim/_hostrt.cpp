// The simulator's runtime for host-built kernels: runs one launch of a kernel
// of kernels/ compiled for the CPU (see sim/gpuarray_sim/kernels/ga_host.cuh for the contract).
//
// One concern: execution.  Every thread of every block runs, on the calling
// OS thread (the simulator's stream worker) and, for a launch given several
// `workers`, on helper threads too (see Workers below).  Blocks are resident
// in slots (the launch's `slots`, at most as many as the simulated device
// holds at once; a worker's are its share of them): one block at a time per
// worker while its threads make progress -- each block
// runs to its end before the next starts, as before -- and more at once when
// they are needed.  A cooperative launch (`cooperative`) has every block of
// the grid resident: its blocks, too, start one at a time, and the first
// round with no progress (threads at grid.sync, or spinning) admits all the
// rest at once -- a grid of blocks that each complete alone (a block-scope
// barrier) so never holds the fibers of all its threads together (4224
// blocks of 32 threads, numba-cuda's max_cooperative_grid_blocks, are more
// fibers than the process may map); otherwise, when a round
// of the resident blocks' waiting threads made no progress and some thread
// spun in a loop (a flag or lock another block may set), one more block is
// admitted, up to the slots, and the resident blocks' rounds interleave: a
// block that waits for a flag a later block sets completes as it does on a
// GPU when the blocks fit.  Rounds visit the resident blocks in admission
// order and admission happens only at the end of a round with no progress,
// so a launch on one worker runs the same way every time (deterministic
// replay: nothing depends on time but the spin timeout).
//
// Workers: a launch's blocks go, in order, to whichever worker asks next
// (one atomic counter); each runs them as above with fibers, slots and a
// launch record (params + w * stride) of its own, so what a PTX launch
// widens per access (touched intervals, the last grant) is never shared.
// Shared per launch (Shared): the block counter, the fault -- the first one
// claimed is the launch's, every worker stops at its next check (stopped()),
// with several workers which of two simultaneous faults wins may vary --,
// and `moves`, rounds that made progress anywhere: a worker whose blocks
// only spin times out (702) only when no worker moved for the limit, naming
// the lowest block's spinner as one worker would; a deadlock at a barrier is
// a block's own (cooperative launches, whose blocks wait for each other at
// grid.sync, get one worker).  Helper threads are made on first use and
// kept; a launch takes the idle ones and runs its share itself.
// The threads of a block are cooperative fibers switched only at
// __syncthreads: a fiber runs threads one after the other until one waits at
// a barrier, then the next fiber starts the next thread; once every thread
// of the block has started and each is waiting or finished, the waiting ones
// are resumed in thread order, each up to its next barrier: a fiber that
// waits switches straight to the next waiting fiber of its block's round
// (pass_on), and only the round's last one, a thread that spun, or the end
// of the launch goes back to the scheduler.  A kernel without barriers
// therefore runs a whole block on one fiber.
//
// Fibers (_hostrt_fibers.h): one mapping each -- a PROT_NONE guard, the stack, and the Fiber
// record at its top (less a per-fiber colour: see map_fiber) -- laid out for
// its first entry by start().  An OS thread
// keeps the fibers it used (a parked fiber takes the next block's threads
// when resumed), at most kKeepPerThread after a launch; the rest, and all of
// them when the thread exits, go to one process-wide free list of at most
// kMaxFree, beyond which they are unmapped.  So a burst of short-lived
// threads (each stream-callback burst starts a simulator thread) reuses the
// same few stacks instead of leaking two mappings per fiber per thread.  A
// fiber that changes threads is entered afresh (its saved context belongs
// to the old thread).  Switches (switch_to, jump_to) save the callee-saved
// registers on the stack being left and swap stack pointers: on x86-64 a
// dozen instructions of our own (glibc's _longjmp runs its cancellation
// unwind each time: a barrier passage of a 1024-thread block costs two
// switches per thread), and a fiber's first entry is a switch onto a stack
// laid out to "return" into fiber_main.  Elsewhere, or when the process
// runs with a shadow stack (CET: such a return would be refused), they are
// _setjmp/_longjmp (no signal-mask system call, unlike swapcontext) and the
// first entry setcontext.
//
// Memory: the kernel reaches global memory only through the extents granted
// here (ga_host_translate), shared memory only through the checked helpers;
// the first access outside them (or misaligned) calls fault(), which records
// it and switches back to the scheduler: the launch ends there, as a GPU's
// does, and the caller reports the fault.  The abandoned fibers are made
// afresh by the next launch.
//
// Faults the kernel cannot report itself (_hostrt_signals.h; the launch
// records and the first-fault claim are _hostrt_launch.h's):
// * stack overflow: the guard below each stack is kGuard bytes, and every
//   host build uses -fstack-clash-protection, which touches each page of a
//   large frame in order, so no frame can step over the guard into another
//   mapping.  A SIGSEGV/SIGBUS handler, run on an alternate signal stack,
//   turns a fault inside the running fiber's guard into
//   CUDA_ERROR_HARDWARE_STACK_ERROR (714, "exceeding the stack size limit")
//   and any other memory fault while a fiber runs kernel code into
//   CUDA_ERROR_ILLEGAL_ADDRESS (700); it ends the launch like fault().  A
//   signal that is not ours goes to the handler installed before (Python's
//   faulthandler, or the default: the process dies as it would have).  The
//   handler is (re)installed at each launch if another one replaced it.
// * C++ exceptions: one thrown by the kernel is caught on its fiber and is
//   CUDA_ERROR_LAUNCH_FAILED (719, "an exception occurred on the device");
//   none crosses the extern "C" boundary (the runtime itself allocates
//   nothing with new).
//
// Built by sim/gpuarray_sim/kernels/_host.py with the system C++ compiler
// (-I kernels/), loaded with ctypes by _hostrt.py.
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <exception>
#include <new>

#include "_hostrt_fibers.h"
#include "_hostrt_launch.h"
#include "_hostrt_pool.h"
#include "_hostrt_signals.h"
#include "ga_hostrt.h"


namespace {

// ------------------------------------------------------------------ launch
void start(Ctx* from, Fiber* f) {
#ifdef GA_OWN_SWITCH
    if (own_switch) {
        // What ga_hostrt_swap pops: six callee-saved registers (rbp 0: the
        // end of frame-pointer chains), then the address it returns to; above
        // it fiber_main's own return address, null (the end of the stack for
        // an unwinder).  fiber_main starts with rsp = 8 mod 16, as after a call.
        const uintptr_t top = reinterpret_cast<uintptr_t>(f->stack + f->size) & ~(uintptr_t)15;
        void** sp = reinterpret_cast<void**>(top - 8 * sizeof(void*));
        for (int i = 0; i < 6; ++i) sp[i] = nullptr;
        sp[6] = reinterpret_cast<void*>(&fiber_main);
        sp[7] = nullptr;
        ga_hostrt_swap(&from->sp, sp);
        return;
    }
#endif
    if (_setjmp(from->jb)) return;
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = f->size;
    f->uc.uc_link = nullptr;  // fiber_main never returns
    makecontext(&f->uc, fiber_main, 0);
    setcontext(&f->uc);
}

Fiber* fiber_after(Fiber* prev) {
    Fiber** slot = prev == nullptr ? &fibers.head : &prev->next;
    if (*slot == nullptr) {
        Fiber* f = acquire();
        if (f == nullptr) return nullptr;
        *slot = f;
        ++fibers.count;
    }
    return *slot;
}

// Takes the slot's next thread to start: its threadIdx into *out.
void take_thread(Launch* l, Slot* s, ga_uint3* out) {
    const ga_uint3& b = l->rt.block_dim;
    *out = s->next_tid;
    ++s->next;
    ga_uint3& n = s->next_tid;
    if (++n.x == b.x) {
        n.x = 0;
        if (++n.y == b.y) {
            n.y = 0;
            ++n.z;
        }
    }
}

[[noreturn]] void end_thread(Launch* l);
void pass_on(Launch* l, Fiber* f);

[[noreturn]] void fiber_main() {
    Fiber* f = cur_launch->cur;
    for (;;) {
        Launch* l = cur_launch;  // a parked fiber may serve a later launch or block
        Slot* s = f->slot;
        while (s->next < l->nthreads) {
            take_thread(l, s, &f->tid);
            s->rt.thread_idx = f->tid;
            f->state = RUNNING;
            bool thrown = false;
            char* what = l->sh->fault.what;
            try {
                s->entry(&s->rt, l->params);
            } catch (const std::exception& e) {  // left normally: the exception is freed
                if (record(l, 719, EXCEPTION, 0, 0, 0, 0)) strncpy(what, e.what(), 127);
                thrown = true;
            } catch (...) {
                if (record(l, 719, EXCEPTION, 0, 0, 0, 0))
                    strncpy(what, "(not a std::exception)", 127);
                thrown = true;
            }
            if (thrown) end_thread(l);
        }
        f->state = DONE;
        pass_on(l, f);  // park until the next block
    }
}

// Scheduler -> fiber f, until f waits at a barrier, parks or faults.
void enter(Launch* l, Fiber* f) {
    l->cur = f;
    l->cur_slot = f->slot;
    l->in_fiber = true;
    if (f->fresh) {
        f->fresh = false;
        start(&l->sched, f);
    } else {
        switch_to(&l->sched, &f->ctx);
    }
    l->in_fiber = false;
}

// The launch of the worker running the kernel that passed `rt` (its slot's).
Launch* owner_of(ga_host_rt* rt) {
    static_assert(offsetof(Slot, rt) == 0, "a slot starts with its record");
    return reinterpret_cast<Slot*>(rt)->owner;
}

void rt_yield(ga_host_rt* rt) {
    Launch* l = owner_of(rt);
    Fiber* f = l->cur;
    f->state = WAITING;
    f->yielded = true;
    f->spun = (rt->line & kSpinBit) != 0;
    rt->line &= ~kSpinBit;
    f->line = rt->line;
    pass_on(l, f);
}

void rt_sync(ga_host_rt* rt) {
    Launch* l = owner_of(rt);
    Fiber* f = l->cur;
    f->state = WAITING;
    pass_on(l, f);
}

[[noreturn]] void end_thread(Launch* l) {
    l->cur->state = ABORTED;
    jump_to(&l->sched);  // never resumed
}

void rt_fault(ga_host_rt*, int code, unsigned long long addr, unsigned long long size, int write) {
    Launch* l = cur_launch;
    record(l, code, GLOBAL, addr, size, write, 0);
    end_thread(l);
}

void rt_shared_fault(ga_host_rt*, int code, long long off, unsigned long long size, int write,
                     unsigned long long extent) {
    Launch* l = cur_launch;
    record(l, code, SHARED, (unsigned long long)off, size, write, extent);
    end_thread(l);
}

// Every fiber that is not parked at the end of a launch (waiting at a
// barrier when another faulted) is abandoned: made afresh next time.
void abandon_unparked() {
    for (Fiber* f = fibers.head; f != nullptr; f = f->next)
        if (f->state != DONE) f->fresh = true;
}

// A fiber for the next thread to start: a parked one of this launch, else
// the next of the thread's list (made when the list ends); null: no memory.
Fiber* take_fiber(Launch* l) {
    if (l->idle != nullptr) {
        Fiber* f = l->idle;
        l->idle = f->wnext;
        return f;
    }
    Fiber* f = fiber_after(l->scan);
    if (f != nullptr) l->scan = f;
    return f;
}

// After enter(f): f waits (onto its block's waiting list) or parked (idle).
void settle(Launch* l, Fiber* f) {
    if (f->state == WAITING) {
        Slot* s = f->slot;
        f->wnext = nullptr;
        *s->tail = f;
        s->tail = &f->wnext;
    } else if (f->state == DONE) {
        f->wnext = l->idle;
        l->idle = f;
    }
}

// The running fiber f waits or parked: the next fiber of its block's round
// continues, switched to from f directly, with the scheduler's bookkeeping
// for both done here (settle f; what enter and the round do for the next),
// so a barrier passage costs one switch, not two through the scheduler.
// The scheduler takes over when the round's list ends, when f spun (the
// round's spin and timeout logic is the scheduler's) and when the launch
// ended; faults never come here (they jump to the scheduler).
void pass_on(Launch* l, Fiber* f) {
    Fiber* nx = l->round_next;
    if (nx == nullptr || f->spun || stopped(l)) {
        switch_to(&f->ctx, &l->sched);
        return;
    }
    l->moved = l->moved || f->state == DONE;
    settle(l, f);
    l->round_next = nx->wnext;
    Slot* s = nx->slot;
    s->rt.thread_idx = nx->tid;
    l->moved = l->moved || !nx->yielded;
    nx->yielded = false;
    l->cur = nx;
    l->cur_slot = s;
    switch_to(&f->ctx, &nx->ctx);
}

// Makes block `b` (linear index) resident in slot `s` and starts every one of
// its threads, each up to its first wait.  False when the launch ended.
bool admit(Launch* l, Slot* s, unsigned long long b) {
    const ga_uint3& g = l->rt.grid_dim;
    const unsigned int slot = (unsigned int)(s - l->sh->all);  // unique over the workers
    const unsigned long long progress = s->rt.progress;
    s->rt = l->rt;
    s->rt.slot = slot;
    s->rt.progress = progress;  // the sum over slots only grows
    s->owner = l;
    s->rt.block_idx = {(unsigned int)(b % g.x), (unsigned int)(b / g.x % g.y),
                       (unsigned int)(b / g.x / g.y)};
    if (l->upgrade != nullptr) {
        const unsigned long long e = __atomic_load_n(l->upgrade, __ATOMIC_ACQUIRE);
        if (e != 0) {
            l->entry = reinterpret_cast<ga_entry>(e);
            __atomic_fetch_add(&l->upgrade[1], 1, __ATOMIC_RELAXED);  // workers count together
        }
    }
    s->entry = l->entry;
    s->next = 0;
    s->next_tid = {0, 0, 0};
    s->waiting = nullptr;
    s->tail = &s->waiting;
    const unsigned int mine = (unsigned int)(s - l->slots);
    if (mine + 1 > l->used) l->used = mine + 1;
    while (s->next < l->nthreads) {
        Fiber* f = take_fiber(l);
        if (f == nullptr) {
            l->cur_slot = s;
            record(l, 2, GLOBAL, 0, 0, 0, 0);  // out of memory for fiber stacks
            return false;
        }
        f->slot = s;
        enter(l, f);
        if (stopped(l)) return false;
        settle(l, f);
    }
    return true;
}

unsigned long long progress_of(const Launch* l) {
    unsigned long long p = 0;
    for (unsigned int i = 0; i < l->used; ++i) p += l->slots[i].rt.progress;
    return p;
}

double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Several workers: `f` (of this worker's round that only spun, in the
// `moves` epoch `epoch`) for the thread a launch timeout names.
void offer_spinner(Launch* l, const Fiber* f, unsigned long long epoch) {
    Shared* sh = l->sh;
    const ga_host_rt& rt = f->slot->rt;
    const ga_uint3& g = l->rt.grid_dim;
    const unsigned long long block = rt.block_idx.x + (unsigned long long)g.x *
                                     (rt.block_idx.y + (unsigned long long)g.y * rt.block_idx.z);
    const ga_uint3& d = l->rt.block_dim;
    const unsigned long long key = ((1 + block) << 11) + f->tid.x + d.x * (f->tid.y + d.y * f->tid.z);
    pthread_mutex_lock(&sh->lock);
    if (sh->spin_epoch != epoch || sh->spin_key == 0 || key < sh->spin_key) {
        sh->spin_epoch = epoch;
        sh->spin_key = key;
        sh->spin_block[0] = rt.block_idx.x, sh->spin_block[1] = rt.block_idx.y;
        sh->spin_block[2] = rt.block_idx.z;
        sh->spin_thread[0] = f->tid.x, sh->spin_thread[1] = f->tid.y, sh->spin_thread[2] = f->tid.z;
        sh->spin_line = f->line;
    }
    pthread_mutex_unlock(&sh->lock);
}

// The launch timeout this worker recorded names the lowest spinner offered.
void name_spinner(Launch* l, unsigned long long epoch) {
    Shared* sh = l->sh;
    pthread_mutex_lock(&sh->lock);
    if (sh->spin_key != 0 && sh->spin_epoch == epoch) {
        memcpy(sh->fault.block, sh->spin_block, sizeof sh->fault.block);
        memcpy(sh->fault.thread, sh->spin_thread, sizeof sh->fault.thread);
        sh->fault.line = sh->spin_line;
    }
    pthread_mutex_unlock(&sh->lock);
}

// Runs every block of the grid.  `live` holds the resident blocks' slots in
// admission order, `free_slots` the others.  Returns false when the launch
// ended (fault) or a fiber could not be made.
bool run_grid(Launch* l, bool cooperative) {
    const ga_uint3& g = l->rt.grid_dim;
    const unsigned long long nblocks = (unsigned long long)g.x * g.y * g.z;
    Slot** live = static_cast<Slot**>(calloc(l->nslots, sizeof(Slot*)));
    Slot** free_slots = static_cast<Slot**>(calloc(l->nslots, sizeof(Slot*)));
    if (live == nullptr || free_slots == nullptr) {
        free(live);
        free(free_slots);
        record(l, 2, GLOBAL, 0, 0, 0, 0);
        return false;
    }
    unsigned int nlive = 0, nfree = l->nslots;
    for (unsigned int i = 0; i < l->nslots; ++i) free_slots[i] = &l->slots[l->nslots - 1 - i];
    unsigned int width = 1;  // blocks resident at once (a cooperative grid's: see above)
    Shared* sh = l->sh;
    bool ok = true, more = true;  // more: blocks may be left to admit
    double spin_since = -1;  // when rounds of spinning without progress began
    while (ok) {
        l->moved = false;
        const unsigned long long seen = __atomic_load_n(&sh->moves, __ATOMIC_RELAXED);
        while (ok && nlive < width && more) {
            // the next block of the grid: in order with one worker; several take turns
            const unsigned long long b = __atomic_fetch_add(&sh->next, 1, __ATOMIC_RELAXED);
            if (b >= nblocks) {
                more = false;
                break;
            }
            Slot* s = free_slots[--nfree];
            ok = admit(l, s, b);
            if (s->waiting == nullptr) {
                free_slots[nfree++] = s;  // every thread ran to its end
            } else {
                live[nlive++] = s;
            }
            l->moved = true;
        }
        if (!ok || nlive == 0) break;
        bool spun = false;  // a thread yielded in a loop: it may end the loop by itself
        Fiber* spinner = nullptr;
        const unsigned long long before = progress_of(l);
        unsigned int kept = 0;
        for (unsigned int k = 0; k < nlive && ok; ++k) {
            Slot* s = live[k];
            Fiber* w = s->waiting;
            s->waiting = nullptr;
            s->tail = &s->waiting;
            while (w != nullptr) {
                l->round_next = w->wnext;  // pass_on takes them from there
                s->rt.thread_idx = w->tid;
                l->moved = l->moved || !w->yielded;
                w->yielded = false;
                enter(l, w);
                Fiber* back = l->cur;  // w, or the fiber the round passed on to last
                l->moved = l->moved || back->state == DONE;
                if (stopped(l)) {
                    ok = false;
                    break;
                }
                if (back->state == WAITING && back->spun && !spun) {
                    spun = true;
                    spinner = back;
                }
                back->spun = false;
                settle(l, back);
                w = l->round_next;
            }
            l->round_next = nullptr;
            if (!ok) break;
            if (s->waiting != nullptr) {
                live[kept++] = s;
            } else {
                free_slots[nfree++] = s;  // the block ended
                l->moved = true;
            }
        }
        if (!ok || stopped(l)) {
            ok = false;
            break;
        }
        nlive = kept;
        if (nlive == 0 || l->moved || progress_of(l) != before) {
            if (l->workers > 1) __atomic_fetch_add(&sh->moves, 1, __ATOMIC_RELAXED);
            spin_since = -1;
            continue;
        }
        more = more && __atomic_load_n(&sh->next, __ATOMIC_RELAXED) < nblocks;
        if (cooperative && width < l->nslots && more) {
            width = l->nslots;  // waits nothing resident ends: the whole grid is resident
            spin_since = -1;
        } else if (spun && width < l->nslots && more) {
            ++width;  // the resident blocks only spin: another block may end the wait
            spin_since = -1;
        } else if (spun && __atomic_load_n(&sh->moves, __ATOMIC_RELAXED) != seen) {
            // another worker's blocks moved: one of them may end the wait
            spin_since = -1;
            sched_yield();
        } else if (spun) {
            // threads only spun: no deadlock yet, a timeout once it lasts
            if (l->workers > 1) {
                sched_yield();  // the core to the workers that may end the wait
                offer_spinner(l, spinner, seen);
            }
            const double t = now_s();
            if (spin_since < 0) {
                spin_since = t;
            } else if (t - spin_since > l->spin_limit) {
                l->cur_slot = spinner->slot;
                spinner->slot->rt.thread_idx = spinner->tid;
                spinner->slot->rt.line = spinner->line;
                if (record(l, 702, SPIN, 0, 0, 0, (unsigned long long)(t - spin_since)) &&
                    l->workers > 1)
                    name_spinner(l, seen);
                ok = false;
            }
        } else {
            // every waiting thread waits for one that never comes: a GPU hangs
            Fiber* w = live[0]->waiting;
            l->cur_slot = live[0];
            live[0]->rt.thread_idx = w->tid;
            live[0]->rt.line = w->line;
            record(l, 719, DEADLOCK, 0, 0, 0, 0);
            ok = false;
        }
    }
    free(live);
    free(free_slots);
    if (!ok) abandon_unparked();
    return ok;
}

// ------------------------------------------------------------------ workers
// Fibers a helper thread keeps between launches: a helper serves launch
// after launch, and giving its fibers back each time (beyond the free
// list's kMaxFree: unmapped) made every launch of a 256-thread block map
// and fault in stacks afresh.
const size_t kKeepPerHelper = 4096;

// A worker's share of the launch, on the calling thread.
void run_share(Launch* l, bool cooperative, size_t keep) {
    Launch* prior = cur_launch;
    cur_launch = l;
    if (!ensure_altstack()) record(l, 2, GLOBAL, 0, 0, 0, 0);  // no memory for the signal stack
    else run_grid(l, cooperative);
    cur_launch = prior;
    fibers.trim(keep);
}

// This worker is done: the last one lets the launch end.
void finish(Shared* sh) {
    pthread_mutex_lock(&sh->lock);
    if (--sh->running == 0) pthread_cond_signal(&sh->done);
    pthread_mutex_unlock(&sh->lock);  // the launch may end now: nothing of it is touched after
}

void helper_share(void* l) { run_share(static_cast<Launch*>(l), false, kKeepPerHelper); }
void helper_done(void* l) { finish(static_cast<Launch*>(l)->sh); }

// The launch's fault into *out; its code.
int result(const Shared& sh, Fault* out) {
    *out = sh.fault;
    out->code = sh.fault.code ? sh.fault.code : 700;
    return out->code;
}

// One launch: `workers` share the grid (the calling thread is the first),
// each with slots of its own (the launch's split among them) and its launch
// record params + w * stride.
int launch(ga_entry entry, const char* params, unsigned long long stride, const unsigned int* grid,
           const unsigned int* block, const ga_host_grant* grants, int ngrants,
           unsigned int nslots, int cooperative, unsigned long long* upgrade, unsigned int workers,
           unsigned int* used, Fault* out) {
    Shared sh;
    memset(&sh, 0, sizeof sh);
    Launch l;
    memset(&l, 0, sizeof l);
    l.sh = &sh;
    l.entry = entry;
    l.upgrade = upgrade;
    l.params = params;
    l.rt.block_dim = {block[0], block[1], block[2]};
    l.rt.grid_dim = {grid[0], grid[1], grid[2]};
    l.rt.grants = grants;
    l.rt.ngrants = ngrants;
    l.rt.sync = rt_sync;
    l.rt.fault = rt_fault;
    l.rt.shared_fault = rt_shared_fault;
    l.rt.yield = rt_yield;
    l.nthreads = block[0] * block[1] * block[2];
    const char* limit = getenv("GPUARRAY_SIM_LAUNCH_TIMEOUT");
    l.spin_limit = limit != nullptr && atof(limit) > 0 ? atof(limit) : 30.0;
    l.rt.nthreads = l.nthreads;
    const unsigned long long nblocks = (unsigned long long)grid[0] * grid[1] * grid[2];
    sh.nblocks = nblocks;
    unsigned int total = nslots == 0 ? 1 : nslots;
    if (total > nblocks) total = (unsigned int)nblocks;
    if (cooperative && nblocks > nslots) {  // the caller refuses such a launch first
        out->code = 720;
        return 720;
    }
    // a cooperative grid's blocks wait for each other at grid.sync: one worker holds them all
    if (cooperative || workers == 0) workers = 1;
    if (workers > total) workers = total;  // each worker needs a slot of its own
    if (workers > ga_pool::kMaxHelpers + 1) workers = ga_pool::kMaxHelpers + 1;
    if (!ensure_altstack()) {
        out->code = 2;  // no memory for the signal stack
        return 2;
    }
    sh.all = static_cast<Slot*>(calloc(total, sizeof(Slot)));
    if (sh.all == nullptr) {
        out->code = 2;
        return 2;
    }
    install_handlers();
    ga_pool::Helper* taken[ga_pool::kMaxHelpers];
    const unsigned int nhelp = workers > 1 ? ga_pool::take(workers - 1, taken) : 0;
    workers = nhelp + 1;
    *used = workers;
    if (workers == 1) {  // the calling thread alone: no hand-off, nothing to wait for
        l.workers = 1;
        l.slots = sh.all;
        l.nslots = total;
        run_share(&l, cooperative != 0, kKeepPerThread);
        free(sh.all);
        return sh.aborted ? result(sh, out) : 0;
    }
    Launch* ls = static_cast<Launch*>(aligned_alloc(alignof(Launch), workers * sizeof(Launch)));
    if (ls == nullptr) {
        for (unsigned int i = 0; i < nhelp; ++i) ga_pool::untake(taken[i]);
        free(sh.all);
        out->code = 2;
        return 2;
    }
    pthread_mutex_init(&sh.lock, nullptr);
    pthread_cond_init(&sh.done, nullptr);
    sh.running = workers;
    unsigned int first = 0;
    for (unsigned int w = 0; w < workers; ++w) {
        ls[w] = l;
        ls[w].workers = workers;
        ls[w].params = params + w * stride;
        ls[w].slots = sh.all + first;
        ls[w].nslots = total / workers + (w < total % workers ? 1 : 0);
        first += ls[w].nslots;
    }
    for (unsigned int i = 0; i < nhelp; ++i)
        ga_pool::give(taken[i], helper_share, helper_done, &ls[i + 1]);
    run_share(&ls[0], cooperative != 0, kKeepPerThread);
    finish(&sh);
    pthread_mutex_lock(&sh.lock);
    while (sh.running != 0) pthread_cond_wait(&sh.done, &sh.lock);
    pthread_mutex_unlock(&sh.lock);
    pthread_cond_destroy(&sh.done);
    pthread_mutex_destroy(&sh.lock);
    free(ls);
    free(sh.all);
    return sh.aborted ? result(sh, out) : 0;
}

}  // namespace

// The layout version of ga_host_rt this runtime was built with.
GA_HOST_EXPORT int ga_hostrt_abi() { return GA_HOST_ABI; }

// Runs entry(rt, params) for every thread of every block of grid x block,
// with at most `slots` blocks resident at once (all of them from the start
// when `cooperative`: the grid must fit); `upgrade` (or null): two words,
// where another thread may publish a faster entry of the same kernel for
// the blocks not yet started, and the count of blocks that ran it.
// `workers` host threads run the blocks (the caller and helpers: see
// launch()), worker w with the record params + w * stride (stride 0: one
// record, read only); *used says how many did.
// Returns 0, or the fault's CUDA error code (700, 716, 714: stack overflow,
// 719: a C++ exception; 2: no memory for fiber stacks) with its details in
// *out.  Nothing is thrown across this boundary.
GA_HOST_EXPORT int ga_hostrt_launch(ga_entry entry, const void* params,
                                    unsigned long long stride, const unsigned int* grid,
                                    const unsigned int* block, const ga_host_grant* grants,
                                    int ngrants, unsigned int slots, int cooperative,
                                    unsigned long long* upgrade, unsigned int workers,
                                    unsigned int* used, Fault* out) {
    *used = 1;
    try {
        return launch(entry, static_cast<const char*>(params), stride, grid, block, grants,
                      ngrants, slots, cooperative, upgrade, workers, used, out);
    } catch (const std::bad_alloc&) {
        memset(out, 0, sizeof *out);
        out->code = 2;
        return 2;
    } catch (...) {
        memset(out, 0, sizeof *out);
        out->code = 719;
        out->space = EXCEPTION;
        strncpy(out->what, "the host kernel runtime failed", sizeof out->what - 1);
        return 719;
    }
}

// Fibers held: by the calling thread, and on the process-wide free list.
GA_HOST_EXPORT void ga_hostrt_fibers(unsigned long long* thread_held,
                                     unsigned long long* free_held) {
    *thread_held = fibers.count;
    pthread_mutex_lock(&free_lock);
    *free_held = free_count;
    pthread_mutex_unlock(&free_lock);
}
