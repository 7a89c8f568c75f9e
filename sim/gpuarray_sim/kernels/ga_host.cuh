// gpuarray kernels: the host build's portability header (one source, two targets).
//
// Included by ga_common.cuh only when GA_HOST_BUILD is defined, i.e. when
// the simulator compiles kernels/ with the system C++ compiler
// (sim/gpuarray_sim/kernels/_host.py); NVRTC never sees it.  Every difference
// between the GPU and the host build lives here, none in kernel bodies:
//
//   * CUDA's built-ins: threadIdx, blockIdx, blockDim, gridDim read the
//     current thread's values from the launch's runtime record (ga_rt);
//     __syncthreads() hands control back to the simulator's scheduler
//     (sim/gpuarray_sim/_hostrt.cpp), which runs a block's threads as
//     cooperative fibers and resumes them once all have arrived;
//   * __shared__ is a thread_local static: one copy per OS thread, which all
//     fibers of the block running there share, reused (not cleared) by the
//     next block, like shared memory on a GPU.  Kernels reach it through
//     ga_sld / ga_sst / ga_sload / ga_sstore (ga_common.cuh), which check
//     here that the access lies inside the array and is aligned: otherwise
//     the launch faults (700 / 716, naming the offset and the array's size),
//     as a GPU traps an out-of-range shared address -- the host build never
//     writes past a __shared__ array into the library's other thread_locals;
//   * __global__, __device__, __forceinline__, __launch_bounds__ have no host
//     meaning; `#pragma unroll` is ignored (-Wno-unknown-pragmas);
//   * the inline PTX of ga_common.cuh (f16 conversions, umulhi, prmt) has
//     bit-exact host paths there, under #ifdef __CUDA_ARCH__;
//   * global memory: ga_gread<T>(p) / ga_gwrite<T>(p) translate the simulated
//     device address p through the extents the simulator granted the launch
//     (ga_rt->grants: device base, size, host pointer, writable) into a host
//     pointer.  The access must lie inside one grant (and that grant must be
//     writable for a store) and be aligned to alignof(T), as a GPU requires
//     of an access of that type.  Otherwise the runtime records the fault
//     (CUDA_ERROR_MISALIGNED_ADDRESS 716 or CUDA_ERROR_ILLEGAL_ADDRESS 700,
//     with the address and size) and ends the launch, as a GPU does; the
//     simulator reports it at the next synchronisation.  Register (local)
//     accesses are plain host accesses.  Address arithmetic on simulated
//     addresses is done on integers here, and the build's
//     -fno-strict-overflow makes the kernels' own pointer arithmetic wrap
//     (a simulated address is no host object's).
//
// The runtime calls the entry of a kernel once per CUDA thread:
//   extern "C" void ga_host__<symbol>(ga_host_rt* rt, const void* params)
// (GA_HOST_ENTRY below; _host.py generates one per specialisation), which
// runs that thread's body on the fiber the runtime switched to.
#pragma once

#undef __device__
#undef __forceinline__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local

#include "ga_hostrt.h"  // the fiber runtime's launch record (gpuarray_sim/)

inline thread_local ga_host_rt* ga_rt = nullptr;

#define threadIdx (ga_rt->thread_idx)
#define blockIdx (ga_rt->block_idx)
#define blockDim (ga_rt->block_dim)
#define gridDim (ga_rt->grid_dim)

inline void __syncthreads() { ga_rt->sync(ga_rt); }

inline char* ga_host_translate(const char* p, unsigned long long size, unsigned long long align,
                               int write) {
    ga_host_rt* rt = ga_rt;
    const unsigned long long addr = (unsigned long long)p;
    if (addr % align) {
        rt->fault(rt, 716, addr, size, write);
        return rt->scratch;  // not reached: the fault ends the launch
    }
    for (int i = 0; i < rt->ngrants; ++i) {
        const ga_host_grant& g = rt->grants[i];
        const unsigned long long off = addr - g.base;  // wraps when addr < base
        if (off < g.size && size <= g.size - off && (!write || g.writable)) return g.host + off;
    }
    rt->fault(rt, 700, addr, size, write);
    return rt->scratch;
}

template <class T> inline const T* ga_gread(const char* p) {
    return reinterpret_cast<const T*>(ga_host_translate(p, sizeof(T), alignof(T), 0));
}
template <class T> inline T* ga_gwrite(char* p) {
    return reinterpret_cast<T*>(ga_host_translate(p, sizeof(T), alignof(T), 1));
}

// The T at byte offset `off` of __shared__ array `a`, checked.
template <class T, class A> inline T* ga_host_shared(const A& a, long long off, int write) {
    static_assert(sizeof(A) >= sizeof(T), "an access wider than the __shared__ array");
    ga_host_rt* rt = ga_rt;
    if (off < 0 || (unsigned long long)off > sizeof(A) - sizeof(T)) {
        rt->shared_fault(rt, 700, off, sizeof(T), write, sizeof(A));
        return reinterpret_cast<T*>(rt->scratch);  // not reached
    }
    const unsigned long long addr = (unsigned long long)&a + (unsigned long long)off;
    if (addr % alignof(T)) {
        rt->shared_fault(rt, 716, off, sizeof(T), write, sizeof(A));
        return reinterpret_cast<T*>(rt->scratch);
    }
    return reinterpret_cast<T*>(const_cast<char*>(reinterpret_cast<const char*>(&a)) + off);
}
template <class T, class A> inline T ga_sload(const A& a, long long off) {
    return *ga_host_shared<T>(a, off, 0);
}
template <class T, class A> inline void ga_sstore(A& a, long long off, T v) {
    *ga_host_shared<T>(a, off, 1) = v;
}
template <class T, int R, int C> inline T ga_sld(const T (&a)[R][C], int i, int j) {
    return ga_sload<T>(a, ((long long)i * C + j) * (long long)sizeof(T));
}
template <class T, int R, int C> inline void ga_sst(T (&a)[R][C], int i, int j, T v) {
    ga_sstore<T>(a, ((long long)i * C + j) * (long long)sizeof(T), v);
}

// The per-thread entry the runtime calls: the kernel's parameter block is
// the struct the kernel takes by value (deduced from its signature).
template <class A> inline void ga_host_call(void (*kernel)(A), ga_host_rt* rt, const void* p) {
    ga_rt = rt;
    kernel(*static_cast<const A*>(p));
}
#define GA_HOST_ENTRY(sym) \
    GA_HOST_EXPORT void ga_host__##sym(ga_host_rt* rt, const void* p) { ga_host_call(sym, rt, p); }
