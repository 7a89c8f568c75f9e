/* The PTX of the cubins NVRTC makes, kept for the stand-in driver.
 *
 * One concern: a program that compiles CUDA C with NVRTC for a real
 * architecture (cuda.core's Program.compile("cubin"), -arch=sm_90) gets a
 * cubin that holds machine code only, which the simulator cannot run; NVRTC
 * made PTX on the way there, from the same source and options, and answers
 * it through nvrtcGetPTX for the same program.  This library, preloaded by
 * `python -m gpuarray_sim standin` (LD_PRELOAD), defines nvrtcGetCUBIN: it
 * calls NVRTC's own, and when that succeeds it asks the same program for its
 * PTX and keeps the pair (the cubin's exact bytes, the PTX).  When such a
 * cubin is loaded, the stand-in asks gpuarray_standin_cubin_ptx() for the PTX
 * of exactly those bytes and the simulator runs that PTX: the program's own
 * code, compiled for the same architecture in the same compile.  A cubin
 * whose bytes were not seen here (read from a file, another process's
 * compile) stays a cubin without PTX.
 *
 * It is found because cuda.bindings looks every NVRTC function up in the
 * process's global scope first (dlsym(RTLD_DEFAULT)) and loads NVRTC only for
 * those not found; NVRTC's own nvrtcGetCUBIN is found here with
 * dlsym(RTLD_NEXT), else in the NVRTC library already loaded under its name.
 * No other NVRTC function is defined here, and nothing is loaded or done in
 * a process that never calls nvrtcGetCUBIN.
 *
 * At most KEEP_COUNT pairs and KEEP_BYTES bytes are kept, the oldest dropped
 * first.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
typedef nvrtcResult (*GetBytesFn)(nvrtcProgram, char *);
typedef nvrtcResult (*GetSizeFn)(nvrtcProgram, size_t *);

#define NVRTC_SUCCESS 0
#define NVRTC_ERROR_INTERNAL_ERROR 11
#define KEEP_COUNT 1024
#define KEEP_BYTES ((size_t)64 << 20)

typedef struct Pair {
    struct Pair *next;
    uint64_t hash;
    size_t image_size, ptx_size;
    unsigned char *image;
    char *ptx;
} Pair;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Pair *newest;
static size_t kept_count, kept_bytes;

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* NVRTC's own function `name`: the next definition after this library, else
 * the NVRTC library loaded under one of its names. */
static void *nvrtc_own(const char *name)
{
    static const char *const sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12"};
    void *fn = dlsym(RTLD_NEXT, name);
    for (size_t i = 0; fn == NULL && i < sizeof(sonames) / sizeof(sonames[0]); i++) {
        void *h = dlopen(sonames[i], RTLD_LAZY | RTLD_NOLOAD);
        if (h != NULL) {
            fn = dlsym(h, name);
            dlclose(h); /* only drops the reference RTLD_NOLOAD took */
        }
    }
    return fn;
}

static void drop_oldest_locked(void)
{
    Pair **p = &newest;
    if (*p == NULL)
        return;
    while ((*p)->next != NULL)
        p = &(*p)->next;
    kept_count--;
    kept_bytes -= (*p)->image_size + (*p)->ptx_size;
    free((*p)->image);
    free((*p)->ptx);
    free(*p);
    *p = NULL;
}

static void keep(nvrtcProgram prog, const char *cubin)
{
    GetSizeFn cubin_size = (GetSizeFn)nvrtc_own("nvrtcGetCUBINSize");
    GetSizeFn ptx_size = (GetSizeFn)nvrtc_own("nvrtcGetPTXSize");
    GetBytesFn get_ptx = (GetBytesFn)nvrtc_own("nvrtcGetPTX");
    size_t n = 0, m = 0;
    if (cubin_size == NULL || ptx_size == NULL || get_ptx == NULL
        || cubin_size(prog, &n) != NVRTC_SUCCESS || n == 0
        || ptx_size(prog, &m) != NVRTC_SUCCESS || m == 0)
        return; /* no PTX to keep (LTO-IR compiles have none) */
    Pair *pair = calloc(1, sizeof *pair);
    if (pair == NULL)
        return;
    pair->image = malloc(n);
    pair->ptx = malloc(m);
    if (pair->image == NULL || pair->ptx == NULL || get_ptx(prog, pair->ptx) != NVRTC_SUCCESS) {
        free(pair->image);
        free(pair->ptx);
        free(pair);
        return;
    }
    memcpy(pair->image, cubin, n);
    pair->image_size = n;
    pair->ptx_size = m;
    pair->hash = fnv1a(pair->image, n);
    pthread_mutex_lock(&lock);
    pair->next = newest;
    newest = pair;
    kept_count++;
    kept_bytes += n + m;
    while (kept_count > KEEP_COUNT || (kept_bytes > KEEP_BYTES && kept_count > 1))
        drop_oldest_locked();
    pthread_mutex_unlock(&lock);
}

EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin)
{
    GetBytesFn own = (GetBytesFn)nvrtc_own("nvrtcGetCUBIN");
    if (own == NULL)
        return NVRTC_ERROR_INTERNAL_ERROR; /* no NVRTC loaded: no program can exist */
    nvrtcResult rc = own(prog, cubin);
    if (rc == NVRTC_SUCCESS && cubin != NULL)
        keep(prog, cubin);
    return rc;
}

/* The PTX NVRTC made with the cubin whose bytes are image[0:size]: copied to
 * out (at most cap bytes, NUL included); returns its size (NUL included), or
 * 0 when no compile seen here made exactly these bytes. */
EXPORT size_t gpuarray_standin_cubin_ptx(const void *image, size_t size, char *out, size_t cap)
{
    uint64_t h = fnv1a(image, size);
    size_t found = 0;
    pthread_mutex_lock(&lock);
    for (Pair *p = newest; p != NULL; p = p->next) {
        if (p->hash == h && p->image_size == size && memcmp(p->image, image, size) == 0) {
            found = p->ptx_size;
            if (out != NULL && cap >= found)
                memcpy(out, p->ptx, found);
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}
