// The fiber runtime's helper threads (_hostrt.cpp's workers): made on demand
// and kept for the process.  A launch with several workers takes the idle
// ones (fewer, or none, when other launches hold them), gives each a task
// and runs a share itself.  A helper never runs Python, and takes no signal
// but the faults of the code it runs (SIGSEGV, SIGBUS, SIGFPE, SIGILL): the
// rest go to the process's other threads.  A child of fork() has none of
// its parent's threads: it makes its own.
#pragma once
#include <pthread.h>
#include <signal.h>

namespace ga_pool {

typedef void (*Task)(void*);

struct Helper {
    pthread_mutex_t m;
    pthread_cond_t cv;
    Task run, done;  // run(arg), then done(arg) once the helper is idle again (run null: no task)
    void* arg;
    bool taken;      // given to a launch (under lock)
};

const unsigned int kMaxHelpers = 63;
inline Helper helpers[kMaxHelpers];
inline unsigned int nhelpers = 0;
inline pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

inline void forget() {
    nhelpers = 0;
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    lock = fresh;
}

inline void* main(void* p) {
    Helper* h = static_cast<Helper*>(p);
    for (;;) {
        pthread_mutex_lock(&h->m);
        while (h->run == nullptr) pthread_cond_wait(&h->cv, &h->m);
        const Task run = h->run, done = h->done;
        void* arg = h->arg;
        pthread_mutex_unlock(&h->m);
        run(arg);
        pthread_mutex_lock(&h->m);
        h->run = nullptr;
        pthread_mutex_unlock(&h->m);
        pthread_mutex_lock(&lock);
        h->taken = false;  // idle before done(): the launch's caller's next launch finds it
        pthread_mutex_unlock(&lock);
        done(arg);
    }
    return nullptr;
}

// Up to `want` idle helpers, marked taken, into `out`; how many.
inline unsigned int take(unsigned int want, Helper** out) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, [] { pthread_atfork(nullptr, nullptr, forget); });
    unsigned int n = 0;
    pthread_mutex_lock(&lock);
    for (unsigned int i = 0; i < nhelpers && n < want; ++i) {
        pthread_mutex_lock(&helpers[i].m);
        const bool idle = !helpers[i].taken && helpers[i].run == nullptr;
        pthread_mutex_unlock(&helpers[i].m);
        if (idle) {
            helpers[i].taken = true;
            out[n++] = &helpers[i];
        }
    }
    while (n < want && nhelpers < kMaxHelpers) {
        Helper* h = &helpers[nhelpers];
        pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
        pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
        h->m = m;
        h->cv = cv;
        h->run = nullptr;
        h->taken = true;
        sigset_t mask, old;
        sigfillset(&mask);
        sigdelset(&mask, SIGSEGV);
        sigdelset(&mask, SIGBUS);
        sigdelset(&mask, SIGFPE);
        sigdelset(&mask, SIGILL);
        pthread_sigmask(SIG_SETMASK, &mask, &old);  // the new thread inherits it
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int err = pthread_create(&th, &attr, main, h);
        pthread_attr_destroy(&attr);
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        if (err != 0) break;
        ++nhelpers;
        out[n++] = h;
    }
    pthread_mutex_unlock(&lock);
    return n;
}

// Gives a taken helper's back unused.
inline void untake(Helper* h) {
    pthread_mutex_lock(&lock);
    h->taken = false;
    pthread_mutex_unlock(&lock);
}

// Runs run(arg) on helper h (taken), then done(arg).
inline void give(Helper* h, Task run, Task done, void* arg) {
    pthread_mutex_lock(&h->m);
    h->done = done;
    h->arg = arg;
    h->run = run;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->m);
}

}  // namespace ga_pool
