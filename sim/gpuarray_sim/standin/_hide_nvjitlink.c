/* nvJitLink hidden from a command over the stand-in driver, the way an absent library is;
 * or, built with -DGA_SERVE_NVJITLINK, replaced by the stand-in nvJitLink.
 *
 * Serving (the default of `python -m gpuarray_sim standin` where an
 * nvJitLink is installed; see the package's docstring): this library is
 * named in LD_AUDIT only, and its la_objsearch answers every name whose file
 * name starts with "libnvJitLink" -- the path cuda-pathfinder found in a
 * wheel or toolkit, or a bare soname -- with the stand-in
 * nvjitlink/libnvJitLink.so.13 next to this library (_libnvjitlink.c), so
 * cuda-pathfinder finds the installed file, as on a GPU machine, and the
 * loader maps ours.  A name that does not start so (/proc/self/fd/N: how
 * _nvjitlink_lto.py loads the real one, for LTO-IR) is untouched.  The stat
 * hooks below are not built into that variant.
 *
 * Hiding (GPUARRAY_STANDIN_NVJITLINK=hide):
 *
 * One concern: the simulator executes PTX, and a cubin that nvJitLink linked
 * carries none, so `python -m gpuarray_sim standin` hides an installed
 * nvJitLink (see the package's docstring).  Hidden means what a machine
 * without it shows cuda-pathfinder, which decides "not found" in two ways:
 *
 * - it looks for the file (os.path.isfile, that is stat) in the NVIDIA
 *   wheels' folders of site-packages, $CONDA_PREFIX, the CUDA_PATH/CUDA_HOME
 *   toolkit: the stat-family functions below answer ENOENT for any path
 *   whose file name starts with "libnvJitLink" (this library is preloaded,
 *   LD_PRELOAD);
 * - it asks the dynamic loader (already loaded? dlopen by soname through
 *   LD_LIBRARY_PATH and the loader's cache): la_objsearch, the loader's
 *   audit interface (this library is also named in LD_AUDIT), refuses every
 *   candidate path of such a name, so dlopen fails with the loader's own
 *   "cannot open shared object file", and nothing of that name is ever
 *   loaded.  An audit hook, not an interposed dlopen: dlopen searches the
 *   RUNPATH of its caller, which a wrapper would replace with its own.
 *
 * cuda-pathfinder then raises DynamicLibNotFoundError, on which numba-cuda
 * and cuda.core's Linker (1.1 and 1.2) link through the driver instead.  No
 * other path is touched; every other call goes to the C library's own
 * function (dlsym(RTLD_NEXT)).  The old __xstat-family entry points (for
 * programs built against glibc < 2.33) are served by fstatat64, whose
 * struct stat64 is the kernel's layout they ask for on x86_64 and aarch64.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define AT_FDCWD_ (-100)
#define AT_SYMLINK_NOFOLLOW_ 0x100

/* Whether `path` names nvJitLink: its file name starts with "libnvJitLink". */
static int hidden(const char *path) {
    if (path == NULL) {
        return 0;
    }
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    return strncmp(base, "libnvJitLink", 12) == 0;
}

/* ---- the loader's audit interface (LD_AUDIT) ---- */

EXPORT unsigned int la_version(unsigned int version) {
    return version < LAV_CURRENT ? version : LAV_CURRENT;
}

#ifdef GA_SERVE_NVJITLINK
#include <limits.h>
#include <pthread.h>

static char standin[PATH_MAX]; /* <this library's folder>/nvjitlink/libnvJitLink.so.13 */
static pthread_once_t standin_once = PTHREAD_ONCE_INIT;

static void find_standin(void) {
    Dl_info info;
    const char *leaf = "/nvjitlink/libnvJitLink.so.13";
    if (dladdr((void *)find_standin, &info) == 0 || info.dli_fname == NULL)
        return;
    const char *slash = strrchr(info.dli_fname, '/');
    size_t dir = slash != NULL ? (size_t)(slash - info.dli_fname) : 0;
    if (slash != NULL && dir + strlen(leaf) < sizeof(standin)) {
        memcpy(standin, info.dli_fname, dir);
        memcpy(standin + dir, leaf, strlen(leaf) + 1);
    }
}

EXPORT char *la_objsearch(const char *name, uintptr_t *cookie, unsigned int flag) {
    (void)cookie;
    (void)flag;
    if (!hidden(name))
        return (char *)name;
    pthread_once(&standin_once, find_standin);
    return standin[0] != 0 ? standin : NULL; /* NULL: refused, as when hiding */
}
#else
EXPORT char *la_objsearch(const char *name, uintptr_t *cookie, unsigned int flag) {
    (void)cookie;
    (void)flag;
    return hidden(name) ? NULL : (char *)name;
}

/* ---- the stat family (LD_PRELOAD); the buffers are opaque here ---- */

typedef int (*PathStatFn)(const char *, void *);
typedef int (*AtStatFn)(int, const char *, void *, int);
typedef int (*StatxFn)(int, const char *, int, unsigned int, void *);

static void *next_fn(const char *name) {
    return dlsym(RTLD_NEXT, name);
}

#define PATH_STAT(NAME)                                              \
    EXPORT int NAME(const char *path, void *buf) {                   \
        static PathStatFn next;                                      \
        if (hidden(path)) {                                          \
            errno = ENOENT;                                          \
            return -1;                                               \
        }                                                            \
        if (next == NULL && (next = (PathStatFn)next_fn(#NAME)) == NULL) { \
            errno = ENOSYS;                                          \
            return -1;                                               \
        }                                                            \
        return next(path, buf);                                      \
    }

PATH_STAT(stat)
PATH_STAT(stat64)
PATH_STAT(lstat)
PATH_STAT(lstat64)

#define AT_STAT(NAME)                                                \
    EXPORT int NAME(int dirfd, const char *path, void *buf, int flags) { \
        static AtStatFn next;                                        \
        if (hidden(path)) {                                          \
            errno = ENOENT;                                          \
            return -1;                                               \
        }                                                            \
        if (next == NULL && (next = (AtStatFn)next_fn(#NAME)) == NULL) { \
            errno = ENOSYS;                                          \
            return -1;                                               \
        }                                                            \
        return next(dirfd, path, buf, flags);                        \
    }

AT_STAT(fstatat)
AT_STAT(fstatat64)

EXPORT int statx(int dirfd, const char *path, int flags, unsigned int mask, void *buf) {
    static StatxFn next;
    if (hidden(path)) {
        errno = ENOENT;
        return -1;
    }
    if (next == NULL && (next = (StatxFn)next_fn("statx")) == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return next(dirfd, path, flags, mask, buf);
}

static int old_stat(int dirfd, const char *path, void *buf, int flags) {
    static AtStatFn next;
    if (hidden(path)) {
        errno = ENOENT;
        return -1;
    }
    if (next == NULL && (next = (AtStatFn)next_fn("fstatat64")) == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return next(dirfd, path, buf, flags);
}

EXPORT int __xstat(int ver, const char *path, void *buf) {
    (void)ver;
    return old_stat(AT_FDCWD_, path, buf, 0);
}
EXPORT int __xstat64(int ver, const char *path, void *buf) {
    (void)ver;
    return old_stat(AT_FDCWD_, path, buf, 0);
}
EXPORT int __lxstat(int ver, const char *path, void *buf) {
    (void)ver;
    return old_stat(AT_FDCWD_, path, buf, AT_SYMLINK_NOFOLLOW_);
}
EXPORT int __lxstat64(int ver, const char *path, void *buf) {
    (void)ver;
    return old_stat(AT_FDCWD_, path, buf, AT_SYMLINK_NOFOLLOW_);
}
EXPORT int __fxstatat(int ver, int dirfd, const char *path, void *buf, int flags) {
    (void)ver;
    return old_stat(dirfd, path, buf, flags);
}
EXPORT int __fxstatat64(int ver, int dirfd, const char *path, void *buf, int flags) {
    (void)ver;
    return old_stat(dirfd, path, buf, flags);
}
#endif /* GA_SERVE_NVJITLINK */
