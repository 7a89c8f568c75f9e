// gpuarray kernels: strided N-d copy with dtype conversion.
//
// One thread moves GA_UNROLL elements per step of a grid-stride loop (all
// loads of a step are issued before its stores, for memory-level
// parallelism); consecutive threads take consecutive C-order linear indices,
// so a contiguous innermost dimension gives coalesced accesses.
//
// Variants (template flags, encoded in the symbol name by the host):
//   g  general: both operands strided (byte strides, any sign, 0 in src);
//   d  destination C-contiguous: its offset is i * sizeof(D) (no stride math);
//   u  like g, for operands not aligned to their element size (byte access);
//   c  both operands contiguous (ND == 1): four elements per thread as one
//      vector access when both pointers allow it, scalar loop otherwise.
// The host collapses dimensions first, so ND is the number of dimensions
// that remain (1..8); n is the product of the shape.  Index type I is int
// when every offset and n + grid size fit in 31 bits, else long long.
// Source and destination must not overlap (the host stages overlaps).
#pragma once
#include "ga_common.cuh"

template <class D, class S, int ND, class I, bool DC, bool AL>
GA_DEV void ga_copy_nd(const ga_nd_args<ND, I>& a) {
    const I n = a.n;
    const I step = (I)blockDim.x * GA_UNROLL;
    const I grid_step = (I)gridDim.x * step;
    for (I base = (I)blockIdx.x * step + (I)threadIdx.x; base < n; base += grid_step) {
        S v[GA_UNROLL];
        I doff[GA_UNROLL];
#pragma unroll
        for (int k = 0; k < GA_UNROLL; ++k) {
            const I i = base + (I)k * (I)blockDim.x;
            if (i < n) {
                I dd, so;
                ga_offsets<ND, I>(a, i, dd, so);
                v[k] = ga_load<S, AL>(a.src + so);
                doff[k] = DC ? i * (I)sizeof(D) : dd;
            }
        }
#pragma unroll
        for (int k = 0; k < GA_UNROLL; ++k) {
            const I i = base + (I)k * (I)blockDim.x;
            if (i < n) ga_store<D, AL>(a.dst + doff[k], ga_cvt<D, S>(v[k]));
        }
    }
}

template <class D, class S, class I>
GA_DEV void ga_copy_contig(const ga_nd_args<1, I>& a) {
    const I n = a.n;
    const I tid = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
    const I nthreads = (I)gridDim.x * (I)blockDim.x;
    I done = 0;
    const bool vec_ok =
        ((unsigned long long)a.src % alignof(ga_vec4<S>)) == 0 &&
        ((unsigned long long)a.dst % alignof(ga_vec4<D>)) == 0;
    if (vec_ok) {
        const I nv = n / 4;
        for (I j = tid; j < nv; j += nthreads) {
            const ga_vec4<S> s = ga_load<ga_vec4<S>, true>(ga_elem<ga_vec4<S>>(a.src, j));
            ga_vec4<D> d;
#pragma unroll
            for (int k = 0; k < 4; ++k) d.v[k] = ga_cvt<D, S>(s.v[k]);
            ga_store<ga_vec4<D>, true>(ga_elem<ga_vec4<D>>(a.dst, j), d);
        }
        done = nv * 4;
    }
    for (I i = done + tid; i < n; i += nthreads)
        ga_store<D, true>(ga_elem<D>(a.dst, i), ga_cvt<D, S>(ga_load<S, true>(ga_elem<S>(a.src, i))));
}
