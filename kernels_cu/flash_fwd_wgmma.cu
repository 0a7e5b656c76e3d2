// cuflash: FlashAttention forward on Hopper's warpgroup tensor cores (sm_90a), float16 / bfloat16.
// The algorithm is flash_fwd_mma.cu's (and cuflash/twin.py's) with the products on wgmma:
// each warpgroup (4 warps) owns 64 query rows; S = Q Kᵀ reads Q and K straight from shared
// memory (wgmma_ss), O += P V takes P from registers and V from shared memory (wgmma_rs), so
// there is no ldmatrix at all. The wgmma accumulator of a warp is the mma.m16n8k16 C fragment
// layout (wgmma.cuh), so the mask, score modifiers, softmax and epilogue are the shared parts
// with MT = 1; the tiles are 128-byte-swizzled panels (wgmma_tiles.cuh).
//
// Versions (predictions and results in NOTES.md):
//   v3  first wgmma version: cp.async K/V ring (STAGES 1 or 2) issued by every thread, one
//       product group in flight per warpgroup, the two warpgroups of a block overlap each
//       other's softmax and products only through the warp schedulers.
//   v4  softmax of tile j overlaps the product P_{j-1} V_{j-1} inside each warpgroup (both
//       products of a step issued together, FlashAttention-3's intra-warpgroup pipelining);
//       a ring of 3 or 4 K/V buffers; exp2 as ex2.approx.
//   v6  written on the shared mainloop parts; any mask band, softcap, ALiBi.
//   v16 the warpgroup's step shared with the warp-specialized forward (wgmma_forward.cuh), its
//       first step peeled: ptxas had serialized every wgmma of this kernel (NOTES v16).
//
// Grid: (ceil(T / BLOCK_M), sequences·heads) (block.cuh, QueryBlock). Block: NT = 32·warps
// threads, BLOCK_M = 16·warps.
#pragma once
#include "wgmma_forward.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V>
struct FwdWgmma : TileKernel<FwdWgmma<T, DP, BLOCK_M, BLOCK_N, NT, STAGES, V>, 1024> {
    using Params = FwdParams<T, float>;
    using Block = QueryBlock<BLOCK_M, V, Params, float>;
    using Tiles = typename WgmmaShape<DP, BLOCK_M, NT>::Tiles;   // 64 query rows per warpgroup
    static_assert(STAGES == 3 || STAGES == 4, "3 or 4 K/V buffers (one being loaded, two read)");
    // Ring of STAGES K/V buffers, tile t in stage t % STAGES. Tile t + AHEAD loads while tile t is
    // computed: its stage last held tile t - 2, whose V the product P_{t-2} V_{t-2} read in step
    // t - 1 (tile t - 1's V is still being read during step t).
    static constexpr int AHEAD = STAGES - 2;

    using Smem = FwdTiles<T, DP, BLOCK_M, BLOCK_N, STAGES>;   // pipeline.cuh

    static __device__ __forceinline__ void body(const Params& p, const Block& blk, Smem& sm) {
        const int warp = threadIdx.x / 32;

        auto keys = key_tiles<BLOCK_N, Tiles, CpAsyncPipeline<STAGES, AHEAD, true>>(blk, p, sm.kv);
        load_query_rows<BLOCK_M, Tiles>(sm.q, blk, p.q, p.q_stride, p.d);
        keys.prologue();

        WgmmaFwdRows<T, DP, BLOCK_M, BLOCK_N, Block> rows(blk, sm.q, warp / 4, warp,
                                                          threadIdx.x % 32);
        const int n = keys.n();
        if (n > 0) {
            const int stage = keys.acquire(0);
            rows.template step<true>(keys.kv, 0, sm.kv.k[stage], nullptr, NoStepHooks{});
            keys.release();
        }
        for (int t = 1; t < n; ++t) {
            const int stage = keys.acquire(t);
            rows.template step<false>(keys.kv, t, sm.kv.k[stage],
                                      sm.kv.v[(t + STAGES - 1) % STAGES], NoStepHooks{});
            keys.release();
        }
        if (n > 0) rows.last_product(sm.kv.v[(n - 1) % STAGES], NoStepHooks{});
        keys.drain();   // every warpgroup is done with sQ (and with no K/V tile, Q copies landed)
        rows.epilogue(p, sm.q);
        if constexpr (V::SPLIT) finish_split<NT, BLOCK_M>(p, blk, sm);
    }
};

}  // namespace cuflash
