// Faults the kernel cannot report itself (_hostrt.cpp's header comment: stack
// overflow into a fiber's guard, any other memory fault while a fiber runs
// kernel code): the SIGSEGV/SIGBUS handler, installed over (and chaining to)
// the one before it, and the alternate stack it runs on.  Included once, by
// _hostrt.cpp, after _hostrt_launch.h; it shares their anonymous namespace.
#pragma once
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#include "_hostrt_launch.h"

namespace {

// ----------------------------------------------------------------- signals
struct sigaction prev_segv, prev_bus;
pthread_mutex_t sig_lock = PTHREAD_MUTEX_INITIALIZER;
volatile sig_atomic_t chaining = 0;

void on_fault(int sig, siginfo_t* info, void* uctx);

bool ours(const struct sigaction& a) {
    return (a.sa_flags & SA_SIGINFO) && a.sa_sigaction == on_fault;
}

// Installs on_fault for `sig` unless it is already there; the one it
// replaces is chained to.
void install(int sig, struct sigaction* prev) {
    struct sigaction cur;
    if (sigaction(sig, nullptr, &cur) != 0 || ours(cur)) return;
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_sigaction = on_fault;
    a.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&a.sa_mask);
    if (sigaction(sig, &a, &cur) == 0) *prev = cur;
}

void install_handlers() {
    pthread_mutex_lock(&sig_lock);
    install(SIGSEGV, &prev_segv);
    install(SIGBUS, &prev_bus);
    pthread_mutex_unlock(&sig_lock);
}

// The handler runs on an alternate stack: a fiber's own has no room left.
bool ensure_altstack() {
    stack_t cur;
    if (sigaltstack(nullptr, &cur) != 0) return false;
    if (!(cur.ss_flags & SS_DISABLE)) return true;  // the thread has one (faulthandler's)
    const size_t size = 64 << 10;
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;
    stack_t s = {};
    s.ss_sp = m;
    s.ss_size = size;
    if (sigaltstack(&s, nullptr) != 0) {
        munmap(m, size);
        return false;
    }
    fibers.alt = s;
    return true;
}

void on_fault(int sig, siginfo_t* info, void* uctx) {
    Launch* l = cur_launch;
    if (info->si_code > 0 && l != nullptr && l->in_fiber && !chaining) {
        Fiber* f = l->cur;
        char* a = static_cast<char*>(info->si_addr);
        const bool guard = a >= f->map && a < f->stack;
        record(l, guard ? 714 : 700, guard ? STACK : GLOBAL, (unsigned long long)a, 0, 0,
               guard ? f->size : 0);
        f->state = ABORTED;
        l->in_fiber = false;
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, sig);
        pthread_sigmask(SIG_UNBLOCK, &s, nullptr);  // jump_to keeps the handler's mask
        jump_to(&l->sched);                          // never resumed
    }
    // Not a kernel's: the handler we replaced takes it.  A signal that comes
    // back to us while we chain (a handler that re-raises after restoring its
    // predecessor, as faulthandler does) gets the default action: no loop.
    const struct sigaction& prev = sig == SIGBUS ? prev_bus : prev_segv;
    if (chaining || ours(prev)) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    chaining = 1;
    if (prev.sa_flags & SA_SIGINFO) {
        prev.sa_sigaction(sig, info, uctx);
    } else if (prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN) {
        signal(sig, SIG_DFL);  // the fault recurs on return and kills, as without us
        if (info->si_code <= 0) raise(sig);
    } else {
        prev.sa_handler(sig);
    }
    if (info->si_code > 0) chaining = 0;  // a fault its handler dealt with
}

}  // namespace
