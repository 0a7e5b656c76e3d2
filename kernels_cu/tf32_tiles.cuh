// cuflash: the shared-memory tiles of the TF32 wgmma forwards (sm_90a), written once for both:
// flash_fwd_wgmma_tf32.cu (two warpgroups on a block-wide cp.async ring) and flash_fwd_wgmma_ws.cu
// with float32 (consumers of a producer warpgroup).
//   load_tf32_tile   a float32 tile into 128-byte-swizzled panels by cp.async
//   round_tf32_tile  rows of a landed tile rounded to TF32 in place (the Q tile)
//   Tf32StagedKV     key tile t of the K and Vᵀ the host staged (cuflash/gpu/tf32_stage.py):
//                    K rounded, [key][head dim]; Vᵀ rounded, [head dim][key] in k-slot order,
//                    both zero past the keys up to a whole tile
#pragma once
#include "tf32.cuh"
#include "wgmma_tiles.cuh"

namespace cuflash {

// A ROWS × COLS float32 tile into 128-byte-swizzled panels (sw128<ROWS, 4>) by cp.async, 16 bytes
// a copy (SwizzledTiles of 4-byte elements, the 16-bit kernels' loader: a thread's chunks down
// one stepped pointer), by the NT threads 0..NT-1: row r from g + r·pitch; rows from rows_valid
// on and columns from cols_valid on zero-filled (cols_valid a multiple of 4).
template <int ROWS, int COLS, int NT>
__device__ __forceinline__ void load_tf32_tile(float* s, const float* g, long long pitch,
                                               int rows_valid, int cols_valid) {
    SwizzledTiles<COLS, NT, 4>::template load<ROWS>(s, g, rows_valid, cols_valid, int(pitch));
}

// Rows first .. first + COUNT - 1 of a landed ROWS × COLS tile rounded to TF32 in place by NT
// threads (tid 0..NT-1): chunk c = tid + i·NT of row first + c / (COLS / 4). With the defaults
// (the whole tile, tid = threadIdx.x) each thread rounds the chunks it copied itself
// (load_tf32_tile's map, Chunks in mma.cuh), so its own cp_async_wait covers them.
// Written as its own loop on purpose: the same map through Chunks::each ran 5-11% slower at
// d = 128 on an H200 (NOTES v41, call 155), with fewer instructions in the key loop.
template <int ROWS, int COLS, int NT, int COUNT = ROWS>
__device__ __forceinline__ void round_tf32_tile(float* s, int tid = threadIdx.x, int first = 0) {
    constexpr int CPR = COLS / 4;
#pragma unroll
    for (int c = tid; c < COUNT * CPR; c += NT) {
        float4* at = reinterpret_cast<float4*>(
            s + Swizzle128Of<4>::template at<ROWS>(first + c / CPR, (c % CPR) * 4));
        float4 x = *at;
        x.x = __uint_as_float(to_tf32(x.x));
        x.y = __uint_as_float(to_tf32(x.y));
        x.z = __uint_as_float(to_tf32(x.z));
        x.w = __uint_as_float(to_tf32(x.w));
        *at = x;
    }
}

// Key tile t (first key j0) of the host's staged K and Vᵀ into shared memory by NT threads: K's
// BLOCK_N rows of DP columns (p.k, its [sequence, head, row] strides), Vᵀ's DP rows of BLOCK_N
// keys (p.v read as Vᵀ: row c of the head dim at p.v + b·v_stride[0] + hk·v_stride[1] +
// c·v_stride[2], keys at unit stride). Both are whole tiles: the host zero-padded the keys.
//   load_k, load_vt  tile j0's, its addresses computed (the 8-warp kernel)
//   Stream           the tiles of an in-order TileIter one after another (a warp-specialized
//                    producer): each thread keeps its two sources and steps them by a tile, as
//                    KVStream does (pipeline.cuh), so that the producer's few registers hold no
//                    stride products (recomputed per tile, the 56-register producer spilled)
template <int DP, int BLOCK_N, int NT>
struct Tf32StagedKV {
    using KTiles = SwizzledTiles<DP, NT, 4>;        // K: BLOCK_N rows of DP
    using VtTiles = SwizzledTiles<BLOCK_N, NT, 4>;  // Vᵀ: DP rows of BLOCK_N

    template <class Params, class Block>
    static __device__ __forceinline__ const float* k_src(const Params& p, const Block& blk, int j0) {
        return blk.seq.k_row(p.k, p.k_stride, j0);
    }
    template <class Params, class Block>
    static __device__ __forceinline__ const float* vt_src(const Params& p, const Block& blk,
                                                          int j0) {
        return p.v + (blk.seq.b * p.v_stride[0] + blk.seq.hk * p.v_stride[1] + blk.seq.k0 + j0);
    }
    template <class Params, class Block>
    static __device__ __forceinline__ void load_k(float* s, const Params& p, const Block& blk,
                                                  int j0) {
        load_tf32_tile<BLOCK_N, DP, NT>(s, k_src(p, blk, j0), p.k_stride[2], BLOCK_N, DP);
    }
    template <class Params, class Block>
    static __device__ __forceinline__ void load_vt(float* s, const Params& p, const Block& blk,
                                                   int j0) {
        load_tf32_tile<DP, BLOCK_N, NT>(s, vt_src(p, blk, j0), p.v_stride[2], DP, BLOCK_N);
    }

    struct Stream {
        const float* k_next;    // this thread's K source in the next tile
        const float* vt_next;   // ... and Vᵀ's
        const float* k_any;     // an address of each array (Chunks: the copies that read nothing)
        const float* vt_any;
        int k_ld, vt_ld;

        // From the first key j0 of the first tile on
        template <class Params, class Block>
        __device__ __forceinline__ Stream(const Params& p, const Block& blk, int j0)
            : k_any(k_src(p, blk, j0)), vt_any(vt_src(p, blk, j0)), k_ld(int(p.k_stride[2])),
              vt_ld(int(p.v_stride[2])) {
            k_next = KTiles::template thread_src<BLOCK_N>(k_any, k_ld);
            vt_next = VtTiles::template thread_src<DP>(vt_any, vt_ld);
        }
        __device__ __forceinline__ void load_k(float* s) {
            KTiles::template load_from<BLOCK_N>(s, k_next, k_any, BLOCK_N, DP, k_ld);
            k_next += size_t(BLOCK_N) * k_ld;
        }
        __device__ __forceinline__ void load_vt(float* s) {
            VtTiles::template load_from<DP>(s, vt_next, vt_any, DP, BLOCK_N, vt_ld);
            vt_next += BLOCK_N;
        }
    };
};

}  // namespace cuflash
