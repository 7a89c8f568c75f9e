/* The stand-in nvJitLink: libnvJitLink.so.13 over gpuarray's simulator.
 *
 * One concern: the C side of the nvJitLink API (nvJitLink.h of CUDA 13) that
 * cuda.bindings.nvjitlink dlsym()s, and so numba-cuda's and cuda.core's
 * Linker.  Each entry point takes the GIL and hands its arguments (integers:
 * pointers as addresses) to the same Python serving function as the
 * stand-in driver (gpuarray_sim.standin._serve.serve, which passes the
 * nvJitLink* names to _nvjitlink_calls.py) through the same bridge
 * (_libcuda_bridge.h), and returns the nvJitLinkResult it answers.  Outputs
 * are written by the Python side (ctypes).  Outside a Python process every
 * call answers NVJITLINK_ERROR_INTERNAL.
 *
 * Exports: the plain names, which cuda.bindings resolves, and the versioned
 * names nvJitLink.h's macros make a C program call (__nvJitLinkCreate_13_5
 * ...) as aliases of them, all under the version node libnvJitLink.so.13 as
 * the real library has them (the builder's version script).
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The bridge's names, mapped to nvJitLink's result codes. */
typedef int CUresult;
#define CUDA_SUCCESS 0               /* NVJITLINK_SUCCESS */
#define CUDA_ERROR_NOT_INITIALIZED 6 /* NVJITLINK_ERROR_INTERNAL: no interpreter in this process */
#define CUDA_ERROR_UNKNOWN 6         /* NVJITLINK_ERROR_INTERNAL */
#define SERVE_INTERRUPTED (-2)       /* _serve.INTERRUPTED */
#define BRIDGE_WHO "gpuarray stand-in nvJitLink"
#define BRIDGE_UNKNOWN "NVJITLINK_ERROR_INTERNAL"

#define EXPORT __attribute__((visibility("default")))

#include "_libcuda_bridge.h" /* call(): serves each entry point in Python */

typedef int nvJitLinkResult;
typedef void *nvJitLinkHandle;

#define U(x) ((unsigned long long)(x))
#define P(x) ((unsigned long long)(uintptr_t)(x))

/* The versioned names of nvJitLink.h 13.0 to 13.5, aliases of the plain one. */
#define VERSIONED(fn)                                                              \
    EXPORT extern __typeof__(fn) __##fn##_13_0 __attribute__((alias(#fn)));        \
    EXPORT extern __typeof__(fn) __##fn##_13_1 __attribute__((alias(#fn)));        \
    EXPORT extern __typeof__(fn) __##fn##_13_2 __attribute__((alias(#fn)));        \
    EXPORT extern __typeof__(fn) __##fn##_13_3 __attribute__((alias(#fn)));        \
    EXPORT extern __typeof__(fn) __##fn##_13_4 __attribute__((alias(#fn)));        \
    EXPORT extern __typeof__(fn) __##fn##_13_5 __attribute__((alias(#fn)));

#define J1(fn, T1, C1)                                                             \
    EXPORT nvJitLinkResult fn(T1 a1)                                               \
    { unsigned long long a[] = {C1(a1)}; return call(#fn, 1, a); }                 \
    VERSIONED(fn)
#define J2(fn, T1, C1, T2, C2)                                                     \
    EXPORT nvJitLinkResult fn(T1 a1, T2 a2)                                        \
    { unsigned long long a[] = {C1(a1), C2(a2)}; return call(#fn, 2, a); }         \
    VERSIONED(fn)
#define J3(fn, T1, C1, T2, C2, T3, C3)                                             \
    EXPORT nvJitLinkResult fn(T1 a1, T2 a2, T3 a3)                                 \
    { unsigned long long a[] = {C1(a1), C2(a2), C3(a3)}; return call(#fn, 3, a); } \
    VERSIONED(fn)

J3(nvJitLinkCreate, nvJitLinkHandle *, P, uint32_t, U, const char **, P)
J1(nvJitLinkDestroy, nvJitLinkHandle *, P)
J3(nvJitLinkAddFile, nvJitLinkHandle, P, int, U, const char *, P)
J1(nvJitLinkComplete, nvJitLinkHandle, P)
J2(nvJitLinkGetLinkedCubinSize, nvJitLinkHandle, P, size_t *, P)
J2(nvJitLinkGetLinkedCubin, nvJitLinkHandle, P, void *, P)
J2(nvJitLinkGetLinkedPtxSize, nvJitLinkHandle, P, size_t *, P)
J2(nvJitLinkGetLinkedPtx, nvJitLinkHandle, P, char *, P)
J2(nvJitLinkGetLinkedLTOIRSize, nvJitLinkHandle, P, size_t *, P)
J2(nvJitLinkGetLinkedLTOIR, nvJitLinkHandle, P, void *, P)
J2(nvJitLinkGetErrorLogSize, nvJitLinkHandle, P, size_t *, P)
J2(nvJitLinkGetErrorLog, nvJitLinkHandle, P, char *, P)
J2(nvJitLinkGetInfoLogSize, nvJitLinkHandle, P, size_t *, P)
J2(nvJitLinkGetInfoLog, nvJitLinkHandle, P, char *, P)

/* Five arguments: written out (the only one). */
EXPORT nvJitLinkResult nvJitLinkAddData(nvJitLinkHandle h, int type, const void *data, size_t size,
                                        const char *name)
{
    unsigned long long a[] = {P(h), U(type), P(data), U(size), P(name)};
    return call("nvJitLinkAddData", 5, a);
}
VERSIONED(nvJitLinkAddData)

/* No versioned forms in the real library: the version is asked by this name only. */
EXPORT nvJitLinkResult nvJitLinkVersion(unsigned int *major, unsigned int *minor)
{
    unsigned long long a[] = {P(major), P(minor)};
    return call("nvJitLinkVersion", 2, a);
}
