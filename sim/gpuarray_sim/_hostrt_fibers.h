// The fiber runtime's fibers (_hostrt.cpp): one mapping each -- a PROT_NONE
// guard, the stack, and the Fiber record at its top --, the ones each OS
// thread keeps between launches (ThreadFibers) and the process-wide free
// list the rest go to (see _hostrt.cpp's header comment).
#pragma once
#include <pthread.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <new>

#include "ga_hostrt.h"

namespace ga_fiber {

typedef void (*ga_entry)(ga_host_rt*, const void*);

enum State { RUNNING, WAITING, DONE, ABORTED };

struct Fiber {
    ucontext_t ctx;  // first entry only
    jmp_buf jb;      // where the fiber continues
    char* stack;     // lowest usable byte
    size_t size;
    char* map;       // the mapping: guard, stack, this record
    size_t map_size;
    ga_uint3 tid;
    State state;
    bool fresh;      // not started (or abandoned, or moved threads): enter through ctx
    bool yielded;    // waits through rt.yield (PTX): may wait again when resumed
    bool spun;       // that yield was in a loop (kSpinBit), not at a barrier
    unsigned int line;  // the PTX line it yielded at
    struct Slot* slot;  // the resident block whose threads it runs (ga_fiber::Slot)
    Fiber* next;     // in a thread's list or the free list
    Fiber* wnext;    // in a waiting list or the launch's idle list
};

// A resident block: its own launch record (block_idx, thread_idx, progress,
// slot), the next of its threads to start and its waiting fibers.
struct Slot {
    ga_host_rt rt;
    ga_entry entry;  // what its threads run (the launch's, or the upgrade's from admission on)
    unsigned int next;
    Fiber* waiting;
    Fiber** tail;
};

const size_t kStack = 128 << 10;
const size_t kGuard = 64 << 10;   // beyond any probe interval of -fstack-clash-protection
const size_t kKeepPerThread = 64; // fibers a thread keeps between launches
const size_t kMaxFree = 256;      // fibers kept process-wide for other threads

inline size_t page_size() {
    static const size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}

// ------------------------------------------------------------ fiber stacks
inline pthread_mutex_t free_lock = PTHREAD_MUTEX_INITIALIZER;
inline Fiber* free_head = nullptr;
inline size_t free_count = 0;

inline void unmap(Fiber* f) { munmap(f->map, f->map_size); }

inline Fiber* map_fiber() {
    const size_t rec = (sizeof(Fiber) + 63) & ~(size_t)63;
    const size_t total = (kGuard + kStack + rec + page_size() - 1) & ~(page_size() - 1);
    void* m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) return nullptr;
    if (mprotect(m, kGuard, PROT_NONE) != 0) {  // stacks grow down: overflow hits the guard
        munmap(m, total);
        return nullptr;
    }
    char* base = static_cast<char*>(m);
    Fiber* f = new (base + total - rec) Fiber();
    f->map = base;
    f->map_size = total;
    f->stack = base + kGuard;
    f->size = total - rec - kGuard;
    return f;
}

// Gives the fibers of the list `head` to the free list (entered afresh by
// whoever takes them), unmapping those beyond kMaxFree.
inline void release(Fiber* head) {
    Fiber* drop = nullptr;
    pthread_mutex_lock(&free_lock);
    while (head != nullptr) {
        Fiber* f = head;
        head = f->next;
        if (free_count < kMaxFree) {
            f->fresh = true;
            f->next = free_head;
            free_head = f;
            ++free_count;
        } else {
            f->next = drop;
            drop = f;
        }
    }
    pthread_mutex_unlock(&free_lock);
    while (drop != nullptr) {
        Fiber* f = drop;
        drop = f->next;
        unmap(f);
    }
}

inline Fiber* acquire() {
    pthread_mutex_lock(&free_lock);
    Fiber* f = free_head;
    if (f != nullptr) {
        free_head = f->next;
        --free_count;
    }
    pthread_mutex_unlock(&free_lock);
    if (f == nullptr) f = map_fiber();
    if (f != nullptr) {
        f->fresh = true;
        f->next = nullptr;
    }
    return f;
}

// The fibers of one OS thread, in the order launches use them; given back
// when the thread exits.
struct ThreadFibers {
    Fiber* head = nullptr;
    size_t count = 0;
    stack_t alt = {};    // the alternate signal stack we installed, if any
    ~ThreadFibers() {
        release(head);
        head = nullptr;
        count = 0;
        if (alt.ss_sp != nullptr) {
            stack_t cur;
            if (sigaltstack(nullptr, &cur) == 0 && cur.ss_sp == alt.ss_sp) {
                stack_t off = {};
                off.ss_flags = SS_DISABLE;
                sigaltstack(&off, nullptr);
            }
            munmap(alt.ss_sp, alt.ss_size);
        }
    }
    // Keeps the first kKeepPerThread fibers, gives back the rest.
    void trim() {
        if (count <= kKeepPerThread) return;
        Fiber* f = head;
        for (size_t i = 1; i < kKeepPerThread; ++i) f = f->next;
        Fiber* rest = f->next;
        f->next = nullptr;
        count = kKeepPerThread;
        release(rest);
    }
};

}  // namespace ga_fiber
