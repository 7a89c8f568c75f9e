// gpuarray kernels: tiled (batched) 2-D transpose copy, with conversion.
//
// The host uses it when, after collapsing dimensions, the copy is
// [batch,] rows x cols where the SOURCE is contiguous along rows and the
// DESTINATION is contiguous along cols (a 2-D permutation: a.T to C order,
// F <-> C, NCHW -> NHWC as batch=N, rows=H*W, cols=C).  Element (b, r, c):
//   src + b * src_bstride + r * sizeof(S) + c * src_pitch
//   dst + b * dst_bstride + r * dst_pitch + c * sizeof(D)
// A block of 32 x 8 threads moves one 32 x 32 tile through shared memory
// (row padding of one element: no bank conflicts for 4, 8 and 16-byte
// elements): reads are coalesced along rows, writes along cols.  Tiles are
// distributed by a grid-stride loop, so any grid size is correct.
//
// Element sizes 1 and 2 (PERF target: uint8 32768 x 8192 at >= 80% of
// memcpy): with this kernel a warp moves only 32 (64) bytes per instruction,
// which leaves it issue-bound well below memcpy bandwidth.  They should be
// vectorised: tile 128 x 32 (bytes: 4 rows per 32-bit word), each thread
// loads 32-bit words along the source-contiguous axis, the block transposes
// 4 x 4 byte blocks (2 x 2 for 16-bit elements) in registers with
// __byte_perm (PRMT) while staging through a padded 32-bit shared tile, and
// stores 32-bit words along the destination-contiguous axis; the host must
// then require rows % 4 == 0 (or peel the ragged edge into the N-d kernel)
// and 4-byte aligned pitches.  Not done yet: unmeasured without a GPU.
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
                    tile[j][tx] = *reinterpret_cast<const S*>(src + r * (I)sizeof(S) + c * a.src_pitch);
            }
        }
        __syncthreads();
        {
            const I c = c0 + tx;
#pragma unroll
            for (int j = ty; j < GA_TILE; j += GA_TILE_ROWS) {
                const I r = r0 + j;
                if (r < a.rows && c < a.cols)
                    *reinterpret_cast<D*>(dst + r * a.dst_pitch + c * (I)sizeof(D)) =
                        ga_cvt<D, S>(tile[tx][j]);
            }
        }
        __syncthreads();
    }
}
