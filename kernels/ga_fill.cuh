// gpuarray kernels: strided fill with a 1, 2, 4, 8 or 16-byte pattern.
//
// The pattern is passed by value in the parameter block (pat_lo holds bytes
// 0..7, pat_hi bytes 8..15, little-endian); T is the raw unit type of the
// element size (ga_u1, ga_u2, ga_u4, ga_u8, ga_v16).  The host handles
// contiguous fills whose pattern repeats every 1, 2 or 4 bytes with
// cuMemsetD8/D16/D32 and never launches these for them.
//
// Variants: g  strided N-d (grid-stride loop, C-order linear index);
//           c  contiguous (ND == 1): 16-byte vector stores when the pointer
//              is 16-byte aligned, element stores otherwise.
#pragma once
#include "ga_common.cuh"

template <int ND, class I> struct ga_fill_args {
    char* dst;
    unsigned long long pat_lo;
    unsigned long long pat_hi;
    I n;
    I shape[ND];
    I strides[ND];
    unsigned int magic[ND];
    unsigned int shift[ND];
};

template <class T> GA_DEV T ga_pattern(unsigned long long lo, unsigned long long hi) {
    (void)hi;
    return (T)lo;
}
template <> GA_DEV ga_v16 ga_pattern<ga_v16>(unsigned long long lo, unsigned long long hi) {
    ga_v16 r;
    r.lo = lo;
    r.hi = hi;
    return r;
}

template <class T, int ND, class I>
GA_DEV void ga_fill_nd(const ga_fill_args<ND, I>& a) {
    const T v = ga_pattern<T>(a.pat_lo, a.pat_hi);
    const I n = a.n;
    const I step = (I)blockDim.x * GA_UNROLL;
    const I grid_step = (I)gridDim.x * step;
    for (I base = (I)blockIdx.x * step + (I)threadIdx.x; base < n; base += grid_step) {
#pragma unroll
        for (int k = 0; k < GA_UNROLL; ++k) {
            const I i = base + (I)k * (I)blockDim.x;
            if (i < n) {
                I off = 0, rem = i;
#pragma unroll
                for (int d = ND - 1; d >= 1; --d) {
                    const I q = ga_div(rem, a.shape[d], a.magic[d], a.shift[d]);
                    off += (rem - q * a.shape[d]) * a.strides[d];
                    rem = q;
                }
                off += rem * a.strides[0];
                ga_store<T, true>(a.dst + off, v);
            }
        }
    }
}

template <class T, class I>
GA_DEV void ga_fill_contig(const ga_fill_args<1, I>& a) {
    const T v = ga_pattern<T>(a.pat_lo, a.pat_hi);
    const I n = a.n;
    const I tid = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
    const I nthreads = (I)gridDim.x * (I)blockDim.x;
    I done = 0;
    if (sizeof(T) <= 16 && 16 % sizeof(T) == 0 && ((unsigned long long)a.dst % 16) == 0) {
        // Replicate the element to 16 bytes; one vector store per thread step.
        union { ga_v16 w; T t[16 / sizeof(T)]; } u;
#pragma unroll
        for (int k = 0; k < (int)(16 / sizeof(T)); ++k) u.t[k] = v;
        const I per = (I)(16 / sizeof(T));
        const I nv = n / per;
        for (I j = tid; j < nv; j += nthreads) ga_store<ga_v16, true>(ga_elem<ga_v16>(a.dst, j), u.w);
        done = nv * per;
    }
    for (I i = done + tid; i < n; i += nthreads) ga_store<T, true>(ga_elem<T>(a.dst, i), v);
}
