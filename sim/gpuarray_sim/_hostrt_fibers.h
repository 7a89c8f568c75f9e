// Fibers of the fiber runtime (_hostrt.cpp; see its header comment): the
// context switch (our own on x86-64 ELF, else _setjmp/_longjmp), the fiber
// record, and the fibers' stacks -- mapped with a guard, kept per OS thread
// (ThreadFibers) and process-wide (the free list).  Included once, by
// _hostrt.cpp, whose anonymous namespace it shares.
#pragma once
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <new>

#include "ga_hostrt.h"

#if defined(__x86_64__) && defined(__ELF__) && !defined(GA_HOSTRT_SETJMP)
#define GA_OWN_SWITCH 1
// ga_hostrt_swap(from, to): pushes the callee-saved registers, stores the
// stack pointer in *from, takes `to` as the stack pointer, pops the
// registers saved there and returns where that stack's switch was called.
// ga_hostrt_resume(to): the second half alone (the stack left is abandoned).
// Only the registers the ABI makes callee-saved, as _setjmp (MXCSR and the
// x87 control word are not switched: no thread holds a rounding mode across
// a wait).
extern "C" void ga_hostrt_swap(void** from, void* to);
extern "C" [[noreturn]] void ga_hostrt_resume(void* to);
__asm__(".pushsection .text\n"
        ".p2align 4\n"
        ".globl ga_hostrt_swap\n"
        ".hidden ga_hostrt_swap\n"
        ".type ga_hostrt_swap, @function\n"
        "ga_hostrt_swap:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rdi\n"
        ".globl ga_hostrt_resume\n"
        ".hidden ga_hostrt_resume\n"
        ".type ga_hostrt_resume, @function\n"
        "ga_hostrt_resume:\n"
        "    movq %rdi, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size ga_hostrt_swap, . - ga_hostrt_swap\n"
        ".size ga_hostrt_resume, . - ga_hostrt_resume\n"
        ".popsection\n");
#endif


namespace {

enum State { RUNNING, WAITING, DONE, ABORTED };

// Where a suspended fiber (or the scheduler) continues: its stack pointer
// (our own switch), else a jmp_buf.
struct Ctx {
    void* sp;
    jmp_buf jb;
};

// What a switch reads and writes comes first (one cache line).
struct Fiber {
    ga_uint3 tid;
    State state;
    bool fresh;      // not started (or abandoned, or moved threads): enter through start
    bool yielded;    // waits through rt.yield (PTX): may wait again when resumed
    bool spun;       // that yield was in a loop (kSpinBit), not at a barrier
    unsigned int line;  // the PTX line it yielded at
    struct Slot* slot;  // the resident block whose threads it runs
    Fiber* wnext;    // in a waiting list or the launch's idle list
    Ctx ctx;         // where the fiber continues
    Fiber* next;     // in a thread's list or the free list
    char* stack;     // lowest usable byte
    size_t size;
    char* map;       // the mapping: guard, stack, this record
    size_t map_size;
    ucontext_t uc;   // first entry, without our own switch
};

const size_t kStack = 128 << 10;
const size_t kGuard = 64 << 10;   // beyond any probe interval of -fstack-clash-protection
const size_t kKeepPerThread = 64; // fibers a thread keeps between launches
const size_t kMaxFree = 256;      // fibers kept process-wide for other threads

size_t page_size() {
    static const size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}

// ---------------------------------------------------------------- switches
[[noreturn]] void fiber_main();

#ifdef GA_OWN_SWITCH
// A process with a shadow stack (CET) refuses a return to an address no
// call pushed: there the setjmp path runs.  rdsspq leaves 0 without one (and
// is a no-op on a CPU without CET).
bool shadow_stack_off() {
    unsigned long long ssp = 0;
    __asm__ volatile("rdsspq %0" : "+r"(ssp));
    return ssp == 0;
}
const bool own_switch = shadow_stack_off();
#endif

// Saves where the caller continues in `from` and continues `to`; returns
// when something switches (or jumps) back to `from`.
inline void switch_to(Ctx* from, Ctx* to) {
#ifdef GA_OWN_SWITCH
    if (own_switch) {
        ga_hostrt_swap(&from->sp, to->sp);
        return;
    }
#endif
    if (!_setjmp(from->jb)) _longjmp(to->jb, 1);
}

// Continues `to`; the caller's context is abandoned.
[[noreturn]] inline void jump_to(Ctx* to) {
#ifdef GA_OWN_SWITCH
    if (own_switch) ga_hostrt_resume(to->sp);
#endif
    _longjmp(to->jb, 1);
}

// Like switch_to, into fiber f's first entry: fiber_main on f's own stack.
void start(Ctx* from, Fiber* f);

// ------------------------------------------------------------ fiber stacks
pthread_mutex_t free_lock = PTHREAD_MUTEX_INITIALIZER;
Fiber* free_head = nullptr;
size_t free_count = 0;

void unmap(Fiber* f) { munmap(f->map, f->map_size); }

// The record and the stack's top sit `colour` bytes below the mapping's
// end, a different multiple of 64 for each fiber: at one page offset, the
// hot lines of a block's 1024 fibers would contend for one set of the
// caches at every barrier.
const size_t kColours = 61;  // a prime: 61 lines, less than a page

Fiber* map_fiber() {
    static unsigned int made = 0;
    const size_t colour = 64 * (__atomic_fetch_add(&made, 1, __ATOMIC_RELAXED) % kColours);
    const size_t rec = (sizeof(Fiber) + 63) & ~(size_t)63;
    const size_t total =
        (kGuard + kStack + rec + 64 * kColours + page_size() - 1) & ~(page_size() - 1);
    void* m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) return nullptr;
    if (mprotect(m, kGuard, PROT_NONE) != 0) {  // stacks grow down: overflow hits the guard
        munmap(m, total);
        return nullptr;
    }
    char* base = static_cast<char*>(m);
    Fiber* f = new (base + total - rec - colour) Fiber();
    f->map = base;
    f->map_size = total;
    f->stack = base + kGuard;
    f->size = total - rec - colour - kGuard;
    return f;
}

// Gives the fibers of the list `head` to the free list (entered afresh by
// whoever takes them), unmapping those beyond kMaxFree.
void release(Fiber* head) {
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

Fiber* acquire() {
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
    void trim(size_t keep = kKeepPerThread) {
        if (count <= keep) return;
        Fiber* f = head;
        for (size_t i = 1; i < keep; ++i) f = f->next;
        Fiber* rest = f->next;
        f->next = nullptr;
        count = keep;
        release(rest);
    }
};

}  // namespace
