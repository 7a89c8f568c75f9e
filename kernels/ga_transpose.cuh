// gpuarray kernels: tiled (batched) 2-D transpose copy, with conversion.
//
// The host uses it when, after collapsing dimensions, the copy is
// [batch,] rows x cols where the SOURCE is contiguous along rows and the
// DESTINATION is contiguous along cols (a 2-D permutation: a.T to C order,
// F <-> C, NCHW -> NHWC as batch=N, rows=H*W, cols=C).  Element (b, r, c):
//   src + b * src_bstride + r * sizeof(S) + c * src_pitch
//   dst + b * dst_bstride + r * dst_pitch + c * sizeof(D)
// Both kernels below run blocks of 32 x 8 threads over tiles distributed by
// a grid-stride loop (any grid size is correct; the host sizes the grid by
// the tile count of the kernel it picks, see gpuarray/_kernels/_launch.py),
// and move each tile through shared memory: loads coalesced along rows
// (the source's contiguous axis), stores along cols.
//
// ga_transpose (symbol ga_transpose__D__S__I): one element per thread per
// access, 32 x 32 tile, row padding of one element (no bank conflicts for
// 4, 8 and 16-byte elements).  Any element sizes, any conversion, pointers
// and pitches aligned to the element size only.  The host uses it for 8 and
// 16-byte elements, for conversions between different sizes, and as the
// fallback whenever the word kernel's alignment does not hold.
//
// ga_transpose_w (symbol ga_transpose__D__S__I__w): sizeof(D) == sizeof(S)
// = E in {1, 2, 4}, moved as W-byte words (W = 4 for E = 1 and 2, W = 8 for
// E = 4), P = W / E elements per word; the tile is 32P x 32P elements.
//   load:  lane x of warp y reads, for 4 groups g = y + 8k of P consecutive
//          columns, the word holding rows r0 + P*x .. + P-1 of each column:
//          4P independent word loads in flight per thread, each warp load
//          one contiguous 32 W-byte run (128 B for W = 4, 256 B for W = 8).
//          All are issued before the first is used only because the host
//          builds these kernels with __launch_bounds__(256, 4) (64 registers;
//          see WORD_TRANSPOSE_MIN_BLOCKS in gpuarray/_kernels/_specs.py).
//   regs:  each group's P x P block of elements is transposed in registers
//          (E = 1: 8 PRMT / __byte_perm for a 4 x 4 byte block; E = 2: 2 PRMT;
//          E = 4 in 8-byte words: a swap of 32-bit halves), giving P words
//          that each hold P consecutive columns of one row.
//   smem:  tile[row][word column] of W-byte words, 32 words per row, with an
//          XOR swizzle (word column wc of row rr lives at wc ^ (rr / P)), so
//          the load phase (32 lanes writing rows P*x + i, one column) and the
//          store phase (32 lanes reading one row) are both conflict-free;
//          padding cannot do that for P > 1: lane x writes row P*x, and with
//          any row pitch the bank is a multiple of P apart between lanes, so
//          lanes 32/P apart collide.
//   store: warp y writes rows y + 8m of the tile, lane x the word of columns
//          c0 + P*x .. + P-1: a contiguous 32-word run per warp store; all 4P
//          shared-memory reads of a thread come before its first global store.
//   conversion: same-size conversions (bool <-> int8, float16 <-> int16, ...)
//          are applied element by element to each word before the store.
//   edges: full tiles take the word path above, unconditionally; a tile
//          that crosses the last row or column (block-uniform test) moves
//          element by element through the same shared tile, like
//          ga_transpose, touching only elements inside the matrix.  rows and
//          cols are arbitrary.  The host guarantees that both pointers, both
//          pitches and (for batch > 1) both batch strides are multiples of W,
//          so every word access is aligned; otherwise it uses ga_transpose.
//
// Why (unmeasured: no GPU was available when this was written; bench/
// test_copies.py::test_transpose and ::test_permute_nchw_nhwc decide):
//   * 1 and 2-byte elements: with one element per thread a warp access moves
//     32 (64) bytes, so reaching memcpy bandwidth would take 4x (2x) the
//     load/store instructions of the 4-byte kernel per byte, and the LSU and
//     shared-memory wavefronts become the limit (PyTorch's and CuPy's
//     element-wise transposes stay well below memcpy for uint8).  Words make
//     every global and shared access 4 bytes per lane (128 B per warp
//     instruction, the same per-byte instruction cost as the 4-byte kernel),
//     at 0.5 PRMT per byte.  The uint8 tile (128 x 128, 16 KB) keeps 64 B
//     per thread in flight (16 loads), the float16 tile (64 x 64, 8 KB) 32 B;
//     at 4 (float16: 5) resident blocks per SM, register-limited, that is
//     64 KB (40 KB) per SM, several times the ~10-20 KB of reads an H100
//     SM must keep in flight for its share of HBM bandwidth (~25 GB/s at
//     ~0.5-1 us latency under load).
//   * 4-byte elements: the 32 x 32 element kernel keeps only 4 loads (16 B)
//     per thread in flight per tile and touches each source column and each
//     destination row in 128-byte pieces.  The 8-byte-word version has 8
//     loads (64 B) per thread in flight, half the memory instructions per
//     byte, and 256-byte contiguous pieces on both sides (fewer DRAM pages
//     opened per byte), as HOPPER-style advice suggests (wide accesses,
//     several independent loads per thread, 32 x 64+ tiles).  Shared memory
//     16 KB per block (64 KB for the 4 resident blocks; the driver sizes the
//     carveout).  _plan.WORD_TRANSPOSE_SIZES switches it off for an A/B run.
//   * 8 and 16-byte elements stay on ga_transpose: their accesses are
//     already 8/16 bytes per lane (256/512 B per warp instruction) and the
//     tile pieces 256/512 B.  ptxas fits that kernel in 32 registers and
//     issues the 4 loads of a thread in 2 (8-byte) or more (16-byte) rounds;
//     __launch_bounds__(256, 4) would batch them but halve the resident
//     blocks, the same bytes in flight per SM: not changed unmeasured.
//   * 16-byte words for 1/2-byte elements would need 16 x 16 byte blocks
//     per thread (tiles of 512+ rows, 64 KB+ shared memory, dynamic shared
//     memory): not worth it before measuring the 4-byte-word version.
#pragma once
#include "ga_common.cuh"

#define GA_TILE 32
#define GA_TILE_ROWS 8

template <class I> struct ga_tr_args {
    char* dst;
    const char* src;
    I rows;
    I cols;
    I batch;
    I dst_pitch;    // bytes between consecutive rows of dst
    I src_pitch;    // bytes between consecutive cols of src
    I dst_bstride;  // bytes between batches of dst
    I src_bstride;  // bytes between batches of src
};

template <class D, class S, class I>
GA_DEV void ga_transpose(const ga_tr_args<I>& a) {
    __shared__ S tile[GA_TILE][GA_TILE + 1];
    const I tiles_r = (a.rows + GA_TILE - 1) / GA_TILE;
    const I tiles_c = (a.cols + GA_TILE - 1) / GA_TILE;
    const I per_batch = tiles_r * tiles_c;
    const I total = per_batch * a.batch;
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    for (I t = (I)blockIdx.x; t < total; t += (I)gridDim.x) {
        const I b = t / per_batch;
        const I rem = t - b * per_batch;
        const I tc = rem / tiles_r;
        const I r0 = (rem - tc * tiles_r) * GA_TILE;
        const I c0 = tc * GA_TILE;
        const char* src = a.src + b * a.src_bstride;
        char* dst = a.dst + b * a.dst_bstride;
        {
            const I r = r0 + tx;
#pragma unroll
            for (int j = ty; j < GA_TILE; j += GA_TILE_ROWS) {
                const I c = c0 + j;
                if (r < a.rows && c < a.cols)
                    ga_sst(tile, j, tx, ga_load<S, true>(src + r * (I)sizeof(S) + c * a.src_pitch));
            }
        }
        __syncthreads();
        {
            const I c = c0 + tx;
#pragma unroll
            for (int j = ty; j < GA_TILE; j += GA_TILE_ROWS) {
                const I r = r0 + j;
                if (r < a.rows && c < a.cols)
                    ga_store<D, true>(dst + r * a.dst_pitch + c * (I)sizeof(D),
                                      ga_cvt<D, S>(ga_sld(tile, tx, j)));
            }
        }
        __syncthreads();
    }
}

// ------------------------------------------------------------ word kernel
template <int W> struct ga_word;
template <> struct ga_word<4> { typedef unsigned int type; };
template <> struct ga_word<8> { typedef unsigned long long type; };

// P x P transpose of E-byte elements held in P W-byte words:
// element j of out[i] = element i of in[j].
template <int E, int W> struct ga_tw_perm;
template <> struct ga_tw_perm<1, 4> {
    GA_DEV static void f(const unsigned int* in, unsigned int* out) {
        const unsigned int t0 = ga_prmt(in[0], in[1], 0x5140u);  // in0.b0 in1.b0 in0.b1 in1.b1
        const unsigned int t1 = ga_prmt(in[2], in[3], 0x5140u);  // in2.b0 in3.b0 in2.b1 in3.b1
        const unsigned int t2 = ga_prmt(in[0], in[1], 0x7362u);  // in0.b2 in1.b2 in0.b3 in1.b3
        const unsigned int t3 = ga_prmt(in[2], in[3], 0x7362u);  // in2.b2 in3.b2 in2.b3 in3.b3
        out[0] = ga_prmt(t0, t1, 0x5410u);  // in0.b0 in1.b0 in2.b0 in3.b0
        out[1] = ga_prmt(t0, t1, 0x7632u);  // in0.b1 in1.b1 in2.b1 in3.b1
        out[2] = ga_prmt(t2, t3, 0x5410u);
        out[3] = ga_prmt(t2, t3, 0x7632u);
    }
};
template <> struct ga_tw_perm<2, 4> {
    GA_DEV static void f(const unsigned int* in, unsigned int* out) {
        out[0] = ga_prmt(in[0], in[1], 0x5410u);  // in0.h0 in1.h0
        out[1] = ga_prmt(in[0], in[1], 0x7632u);  // in0.h1 in1.h1
    }
};
template <> struct ga_tw_perm<4, 8> {
    GA_DEV static void f(const unsigned long long* in, unsigned long long* out) {
        out[0] = (in[0] & 0xffffffffull) | (in[1] << 32);
        out[1] = (in[0] >> 32) | (in[1] & 0xffffffff00000000ull);
    }
};

// A word of S elements to a word of D elements (same element size).
template <class D, class S, class Wd> struct ga_tw_cvt {
    GA_DEV static Wd f(Wd w) {
        constexpr int P = (int)(sizeof(Wd) / sizeof(S));
        union { Wd w; S e[P]; } s;
        union { Wd w; D e[P]; } d;
        s.w = w;
#pragma unroll
        for (int k = 0; k < P; ++k) d.e[k] = ga_cvt<D, S>(s.e[k]);
        return d.w;
    }
};
template <class T, class Wd> struct ga_tw_cvt<T, T, Wd> {
    GA_DEV static Wd f(Wd w) { return w; }
};

// Full tiles: global words -> registers -> P x P transposes -> shared tile.
template <class S, class I, int W, int R>
GA_DEV void ga_tw_load(typename ga_word<W>::type (&tile)[R][GA_TILE], const ga_tr_args<I>& a,
                       const char* src, I r0, I c0) {
    typedef typename ga_word<W>::type Wd;
    constexpr int E = (int)sizeof(S);
    constexpr int P = W / E;
    constexpr int G = GA_TILE / GA_TILE_ROWS;  // column groups per thread
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    const char* s = src + (r0 + (I)(P * tx)) * (I)E;
    Wd w[G][P];
#pragma unroll
    for (int k = 0; k < G; ++k) {
#pragma unroll
        for (int j = 0; j < P; ++j) {
            const I c = c0 + (I)(P * (ty + GA_TILE_ROWS * k) + j);
            w[k][j] = ga_load<Wd, true>(s + c * a.src_pitch);
        }
    }
#pragma unroll
    for (int k = 0; k < G; ++k) {
        Wd o[P];
        ga_tw_perm<E, W>::f(w[k], o);
        const int g = ty + GA_TILE_ROWS * k;
#pragma unroll
        for (int i = 0; i < P; ++i) ga_sst(tile, P * tx + i, g ^ tx, o[i]);
    }
}

// Full tiles: shared tile rows -> (conversion) -> global words.
template <class D, class S, class I, int W, int R>
GA_DEV void ga_tw_store(const typename ga_word<W>::type (&tile)[R][GA_TILE],
                        const ga_tr_args<I>& a, char* dst, I r0, I c0) {
    typedef typename ga_word<W>::type Wd;
    constexpr int E = (int)sizeof(S);
    constexpr int P = W / E;
    constexpr int M = GA_TILE * P / GA_TILE_ROWS;  // tile rows per thread
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    char* d = dst + (c0 + (I)(P * tx)) * (I)E;
    Wd v[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const int rr = ty + GA_TILE_ROWS * m;
        v[m] = ga_sld(tile, rr, tx ^ (rr / P));
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const I r = r0 + (I)(ty + GA_TILE_ROWS * m);
        ga_store<Wd, true>(d + r * a.dst_pitch, ga_tw_cvt<D, S, Wd>::f(v[m]));
    }
}

// Byte offset of element (row rr, column cc) of the tile, in the swizzled
// word layout of the full-tile path.
template <int E, int W> GA_DEV int ga_tw_offset(int rr, int cc) {
    constexpr int P = W / E;
    return (rr * GA_TILE + ((cc / P) ^ (rr / P))) * W + (cc % P) * E;
}

// Edge tiles (crossing the last row or column): element by element through
// the same shared tile, as ga_transpose does; only elements inside the
// matrix are read or written.  Loops, not unrolled: small code for a path
// that only edge tiles take.
template <class S, class I, int W, int R>
GA_DEV void ga_tw_edge_load(typename ga_word<W>::type (&tile)[R][GA_TILE], const ga_tr_args<I>& a,
                            const char* src, I r0, I c0) {
    constexpr int E = (int)sizeof(S);
    constexpr int T = GA_TILE * (W / E);
    const I nr = a.rows - r0 < (I)T ? a.rows - r0 : (I)T;
    const I nc = a.cols - c0 < (I)T ? a.cols - c0 : (I)T;
#pragma unroll 1
    for (int i = (int)(threadIdx.x + GA_TILE * threadIdx.y); i < T * T;
         i += GA_TILE * GA_TILE_ROWS) {
        const int rr = i % T, cc = i / T;  // consecutive threads: consecutive source rows
        if (rr < nr && cc < nc)
            ga_sstore<S>(tile, ga_tw_offset<E, W>(rr, cc), ga_load<S, true>(
                src + (r0 + (I)rr) * (I)E + (c0 + (I)cc) * a.src_pitch));
    }
}

template <class D, class S, class I, int W, int R>
GA_DEV void ga_tw_edge_store(const typename ga_word<W>::type (&tile)[R][GA_TILE],
                             const ga_tr_args<I>& a, char* dst, I r0, I c0) {
    constexpr int E = (int)sizeof(S);
    constexpr int T = GA_TILE * (W / E);
    const I nr = a.rows - r0 < (I)T ? a.rows - r0 : (I)T;
    const I nc = a.cols - c0 < (I)T ? a.cols - c0 : (I)T;
#pragma unroll 1
    for (int i = (int)(threadIdx.x + GA_TILE * threadIdx.y); i < T * T;
         i += GA_TILE * GA_TILE_ROWS) {
        const int cc = i % T, rr = i / T;  // consecutive threads: consecutive destination cols
        if (rr < nr && cc < nc)
            ga_store<D, true>(dst + (r0 + (I)rr) * a.dst_pitch + (c0 + (I)cc) * (I)E,
                              ga_cvt<D, S>(ga_sload<S>(tile, ga_tw_offset<E, W>(rr, cc))));
    }
}

template <class D, class S, class I, int W>
GA_DEV void ga_transpose_w(const ga_tr_args<I>& a) {
    static_assert(sizeof(D) == sizeof(S), "the word transpose does not change element sizes");
    static_assert((W == 4 && sizeof(S) <= 2) || (W == 8 && sizeof(S) == 4),
                  "word sizes: 4 for 1 and 2-byte elements, 8 for 4-byte elements");
    typedef typename ga_word<W>::type Wd;
    constexpr int T = GA_TILE * (W / (int)sizeof(S));  // tile edge in elements
    __shared__ Wd tile[T][GA_TILE];
    const I tiles_r = (a.rows + T - 1) / T;
    const I tiles_c = (a.cols + T - 1) / T;
    const I per_batch = tiles_r * tiles_c;
    const I total = per_batch * a.batch;
    for (I t = (I)blockIdx.x; t < total; t += (I)gridDim.x) {
        const I b = t / per_batch;
        const I rem = t - b * per_batch;
        const I tc = rem / tiles_r;
        const I r0 = (rem - tc * tiles_r) * T;
        const I c0 = tc * T;
        const char* src = a.src + b * a.src_bstride;
        char* dst = a.dst + b * a.dst_bstride;
        if (r0 + T <= a.rows && c0 + T <= a.cols) {  // uniform over the block
            ga_tw_load<S, I, W>(tile, a, src, r0, c0);
            __syncthreads();
            ga_tw_store<D, S, I, W>(tile, a, dst, r0, c0);
        } else {
            ga_tw_edge_load<S, I, W>(tile, a, src, r0, c0);
            __syncthreads();
            ga_tw_edge_store<D, S, I, W>(tile, a, dst, r0, c0);
        }
        __syncthreads();
    }
}
