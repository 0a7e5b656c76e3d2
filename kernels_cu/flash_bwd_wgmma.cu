// cuflash: FlashAttention backward on Hopper's warpgroup tensor cores (sm_90a), float16 /
// bfloat16, deterministic dQ (a separate pass, as flash_bwd_mma.cu's DqMma). The algorithm is
// flash_bwd_mma.cu's (and cuflash/twin.py's); the tiles are wgmma_tiles.cuh's 128-byte-swizzled
// panels and the accumulators the mma.m16n8k16 C fragment layout, so the mask, score modifiers,
// P/dS recomputation, staging ring and epilogues are the shared parts.
//
//   DkdvWgmma  one K/V tile resident, warpgroup g owns keys 64g..64g+63; Q/dO tiles of
//              BLOCK_M queries streamed through a cp.async ring. Sᵀ = K Qᵀ and dPᵀ = V dOᵀ
//              from shared memory (both K-major), Pᵀ = 2^(u·mul - lse·log2 e),
//              dSᵀ = Pᵀ ∘ (dPᵀ - D) · g in registers, then dV += Pᵀ dO and dK += dSᵀ Q with Pᵀ,
//              dSᵀ as register A operands and dO, Q read MN-major (like V in the forward).
//   DqWgmma    one Q/dO tile resident, warpgroup g owns queries 64g..; K/V streamed:
//              S = Q Kᵀ, dP = dO Vᵀ, dS = P ∘ (dP - D) · g, dQ += dS K (K read MN-major).
// D = rowsum(dO ∘ O) comes from BwdPreprocess (bwd_preprocess.cuh).
//
// Versions (predictions and results in NOTES.md):
//   v5  first wgmma backward: both products of a phase issued as one group, no overlap of the
//       exponentials with the products inside a warpgroup.
//   v6  written on the shared mainloop parts; any mask band, softcap, ALiBi.
#pragma once
#include "wgmma_backward.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V>
struct DkdvWgmma : TileKernel<DkdvWgmma<T, DP, BLOCK_M, BLOCK_N, NT, STAGES, V>, 1024> {
    using Params = BwdParams<T, float>;
    using Block = KeyBlock<BLOCK_N, V, Params>;
    using Tiles = typename WgmmaShape<DP, BLOCK_N, NT>::Tiles;   // 64 keys per warpgroup
    static_assert(STAGES == 1 || STAGES == 2, "1 or 2 stages");
    using Step = WgmmaDkdvStep<T, DP, BLOCK_M, BLOCK_N>;   // wgmma_backward.cuh

    using Smem = DkdvTiles<T, DP, BLOCK_M, BLOCK_N, STAGES>;

    static __device__ __forceinline__ void body(const Params& p, const Block& kb, Smem& sm) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const int wg = warp / 4;
        const int j0 = kb.j0, d = p.d;                // first blocks see the most queries
        const int wkey = warp * 16;                   // this warp's first key in the tile
        load_key_rows<BLOCK_N, Tiles>(sm.k, kb, p.k, p.k_stride, d);
        load_key_rows<BLOCK_N, Tiles>(sm.v, kb, p.v, p.v_stride, d);

        float dK[Step::NO][4], dV[Step::NO][4];   // keys wkey + g and wkey + g + 8
        zero_fragments(dK);
        zero_fragments(dV);
        const T* sKw = sm.k + wg * 64 * 64;           // this warpgroup's 64 keys of panel 0
        const T* sVw = sm.v + wg * 64 * 64;

        using Head = GroupHead<BLOCK_M, BLOCK_N, V, Params, float>;
        for_each_query_tile<BLOCK_M, NT, Tiles, Head, CpAsyncPipeline<STAGES, STAGES - 1, true>>(
            p, kb,
            [&](int s) { return StagedQuery<T, float>{sm.q[s], sm.dout[s], sm.lse2[s], sm.D[s]}; },
            [&](const Head& head, int t, int i0, const StagedQuery<T, float>& staged) {
                Step::run(dK, dV, sKw, sVw, head, t, i0, j0 + wkey, lane, staged);
            });

        store_dkdv_fragments(p, kb, dK, dV, wkey, lane);   // dK_j, dV_j summed over the group
    }
};

// Deterministic dQ: one Q/dO tile resident (warpgroup g owns queries 64g..), K/V streamed.
template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V>
struct DqWgmma : TileKernel<DqWgmma<T, DP, BLOCK_M, BLOCK_N, NT, STAGES, V>, 1024> {
    using Params = BwdParams<T, float>;
    using Block = QueryBlock<BLOCK_M, V, Params, float>;
    using Tiles = typename WgmmaShape<DP, BLOCK_M, NT>::Tiles;   // 64 queries per warpgroup
    static constexpr int NO = DP / 8;
    static_assert(STAGES == 1 || STAGES == 2, "1 or 2 stages");
    using Step = WgmmaDqStep<T, DP, BLOCK_M, BLOCK_N>;   // wgmma_backward.cuh

    using Smem = DqTiles<T, DP, BLOCK_M, BLOCK_N, STAGES>;

    static __device__ __forceinline__ void body(const Params& p, const Block& blk, Smem& sm) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const int wg = warp / 4;
        const int i0 = blk.i0, d = p.d;
        const int wrow = warp * 16;

        auto keys = start_dq_tile<BLOCK_M, BLOCK_N, Tiles,
                                  CpAsyncPipeline<STAGES, STAGES - 1, true>>(blk, p, sm);

        float lse2[2], Dr[2], dQ[1][NO][4];
        dq_row_stats(lse2, Dr, p, blk, i0, wrow, lane >> 2);   // rows wrow + g, wrow + g + 8
        zero_fragments(dQ[0]);
        const T* sQw = sm.q + wg * 64 * 64;
        const T* sdOw = sm.dout + wg * 64 * 64;

        for (int t = 0; t < keys.n(); ++t) {
            const int j0 = keys.start(t);
            const int stage = keys.acquire(t);
            Step::run(dQ[0], sQw, sdOw, sm.kv.k[stage], sm.kv.v[stage], i0, wrow, j0, lane, lse2,
                      Dr, blk.mask, blk.score, keys.needs_mask(t, j0));
            keys.release();
        }
        keys.drain();

        // -- dQ_i = scale · Σ_j dS_ij K_j, staged in this warp's own Q rows for 16-byte stores
        float f[1][2] = {{p.dq_scale, p.dq_scale}};
        store_rows_staged<T, 1, NO, DP>(blk.seq.q_row(p.dq, p.dq_stride, i0), d, p.dq_stride[2], blk.rows,
                                        dQ, f, sm.q,
                                        [](int r, int c) { return sw128<BLOCK_M>(r, c); }, wrow, lane);
    }
};

}  // namespace cuflash
