// cuflash: FlashAttention backward on float64 tensor cores, mma.sync m8n8k4 .f64 (sm_80+).
// The algorithm is flash_bwd.cu's (and cuflash/twin.py's) in float64; the structure is
// flash_bwd_mma.cu's deterministic pair, every product a tensor-core product, the score tiles
// kept in registers (dmma.cuh: the C fragments of Sᵀ and dSᵀ are the A fragments of the next
// products). The mask, score modifiers, P/dS recomputation, staging ring and the GQA group sum
// are the shared parts.
//
//   DkdvDmma  one K/V tile resident (warp w owns keys 8·MK·w ..), Q/dO tiles streamed through a
//             cp.async ring (for_each_query_tile): Sᵀ = K Qᵀ and dPᵀ = V dOᵀ in registers,
//             Pᵀ = 2^(u·mul - lse·log2 e), dSᵀ = Pᵀ ∘ (dPᵀ - D) · g (bwd_probs),
//             dV += Pᵀ dO and dK += dSᵀ Q from the registers.
//   DqDmma    one Q/dO tile resident (warp owns 8·MT queries), K/V tiles streamed:
//             S, dP, dS in registers, dQ += dS K_j in a fixed order.
// No atomic-dQ mode (deterministic=False takes the simt kernels: cuflash/gpu/plan.py).
// D = rowsum(dO ∘ O) comes from BwdPreprocess (bwd_preprocess.cuh).
//
// Versions (predictions and results in NOTES.md, v11):
//   v1  as above.
#pragma once
#include "mainloop.cuh"
#include "dmma.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V>
struct DkdvDmma : TileKernel<DkdvDmma<T, DP, BLOCK_M, BLOCK_N, NT, STAGES, V>> {
    using Params = BwdParams<T, double>;
    using Block = KeyBlock<BLOCK_N, V, Params>;
    using Shape = DmmaShape<T, BLOCK_N, BLOCK_M, DP, NT, STAGES>;   // resident keys (dmma.cuh)
    static constexpr int MK = Shape::MT;   // 8-key m-tiles per warp
    static constexpr int NQ = Shape::NS;   // 8-query n-tiles of Sᵀ
    static constexpr int NO = Shape::NO, LDS = Shape::LDS;   // NO: 8-column n-tiles of dK, dV
    using Tiles = typename Shape::Tiles;

    using Smem = DkdvTiles<T, LDS, BLOCK_M, BLOCK_N, STAGES, double>;   // pipeline.cuh

    static __device__ __forceinline__ void body(const Params& p, const Block& kb, Smem& sm) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
        const int j0 = kb.j0, d = p.d, wkey = warp * 8 * MK;   // this warp's first key in the tile
        load_key_rows<BLOCK_N, Tiles>(sm.k, kb, p.k, p.k_stride, d);
        load_key_rows<BLOCK_N, Tiles>(sm.v, kb, p.v, p.v_stride, d);

        double dK[MK][NO][2], dV[MK][NO][2];   // keys wkey + 8m + g (dmma_cx's layout)
        zero_dfragments(dK);
        zero_dfragments(dV);

        using Head = GroupHead<BLOCK_M, BLOCK_N, V, Params, double>;
        using Staged = StagedQuery<T, double>;
        for_each_query_tile<BLOCK_M, NT, Tiles, Head, CpAsyncPipeline<STAGES>>(
            p, kb, [&](int s) { return Staged{sm.q[s], sm.dout[s], sm.lse2[s], sm.D[s]}; },
            [&](const Head& head, int t, int i0, const Staged& staged) {
                // -- Sᵀ = K_j Q_iᵀ and dPᵀ = V_j dO_iᵀ for this warp's keys
                double st[MK][NQ][2], dpt[MK][NQ][2];
                zero_dfragments(st);
                zero_dfragments(dpt);
                dmma_abt<MK, NQ, DP, LDS>(st, sm.k + wkey * LDS, staged.q, lane);
                dmma_abt<MK, NQ, DP, LDS>(dpt, sm.v + wkey * LDS, staged.dout, lane);

                // -- Pᵀ in place of Sᵀ, dSᵀ in place of dPᵀ (rows r = key m-tiles, elements e =
                //    queries 8·(e / 2) + 2t + e % 2). Above d = 64 one copy of the element
                //    loop, the mask's: the two copies of bwd_probs spilled 164 bytes at d = 128
                //    causal under NVRTC 13.0, and one ran as fast there (H100, call 256); at
                //    d = 64 one copy ran 3-4% slower causal (NOTES v90)
                auto ql = [&](int e) { return 8 * (e >> 1) + 2 * t4 + (e & 1); };
                bwd_probs<double, MK, 2 * NQ>(
                    [&](int r, int e) -> double& { return st[r][e >> 1][e & 1]; },
                    [&](int r, int e) -> double& { return dpt[r][e >> 1][e & 1]; },
                    [&](int r, int e, int& i, int& j) { i = i0 + ql(e); j = j0 + wkey + 8 * r + g; },
                    [&](int, int e) { return staged.lse2[ql(e)]; },
                    [&](int, int e) { return staged.D[ql(e)]; }, head.mask, head.score,
                    DP > 64 || head.needs_mask(t, i0), Exp2Exact());

                // -- dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i (k = queries)
                dmma_cx<MK, NQ, DP, LDS>(dV, st, staged.dout, lane);
                dmma_cx<MK, NQ, DP, LDS>(dK, dpt, staged.q, lane);
            });

        // -- dK_j = scale · Σ_h Σ_i dS_ijᵀ Q_i, dV_j = Σ_h Σ_i P_ijᵀ dO_i over the group's heads
        double fk[MK], fv[MK];
#pragma unroll
        for (int m = 0; m < MK; ++m) { fk[m] = p.dk_scale; fv[m] = p.dv_scale; }
        store_dkdv(
            p, kb,
            [&] {
                store_drows<MK, NO>(kb.seq.k_row(p.dk, p.dk_stride, j0), d, p.dk_stride[2],
                                    kb.rows, dK, fk, wkey, lane);
                store_drows<MK, NO>(kb.seq.k_row(p.dv, p.dv_stride, j0), d, p.dv_stride[2],
                                    kb.rows, dV, fv, wkey, lane);
            },
            DRows<MK, NO>{dK, wkey, lane}, DRows<MK, NO>{dV, wkey, lane});
    }
};

// Deterministic dQ: one Q/dO tile resident (warp owns 8·MT query rows), K/V tiles streamed.
template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V>
struct DqDmma : TileKernel<DqDmma<T, DP, BLOCK_M, BLOCK_N, NT, STAGES, V>> {
    using Params = BwdParams<T, double>;
    using Block = QueryBlock<BLOCK_M, V, Params, double>;
    using Shape = DmmaShape<T, BLOCK_M, BLOCK_N, DP, NT, STAGES>;   // resident queries (dmma.cuh)
    static constexpr int MT = Shape::MT, NS = Shape::NS, NO = Shape::NO, LDS = Shape::LDS;
    using Tiles = typename Shape::Tiles;

    using Smem = DqTiles<T, LDS, BLOCK_M, BLOCK_N, STAGES>;   // pipeline.cuh

    static __device__ __forceinline__ void body(const Params& p, const Block& blk, Smem& sm) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
        const int i0 = blk.i0, d = p.d, wrow = warp * 8 * MT;

        auto keys = start_dq_tile<BLOCK_M, BLOCK_N, Tiles, CpAsyncPipeline<STAGES>>(blk, p, sm);

        double lse2[MT], Dr[MT], dQ[MT][NO][2];
        dq_row_stats(lse2, Dr, p, blk, i0, wrow, g);   // row wrow + 8·m + g at m
        zero_dfragments(dQ);

        for (int t = 0; t < keys.n(); ++t) {
            const int j0 = keys.start(t);
            const int stage = keys.acquire(t);

            // -- S = Q_i K_jᵀ, dP = dO_i V_jᵀ
            double s[MT][NS][2], dp[MT][NS][2];
            zero_dfragments(s);
            zero_dfragments(dp);
            dmma_abt<MT, NS, DP, LDS>(s, sm.q + wrow * LDS, sm.kv.k[stage], lane);
            dmma_abt<MT, NS, DP, LDS>(dp, sm.dout + wrow * LDS, sm.kv.v[stage], lane);

            // -- dS = P ∘ (dP - D) · g in place of dP (rows r = m-tiles)
            bwd_probs<double, MT, 2 * NS>(
                [&](int r, int e) -> double& { return s[r][e >> 1][e & 1]; },
                [&](int r, int e) -> double& { return dp[r][e >> 1][e & 1]; },
                [&](int r, int e, int& i, int& j) {
                    i = i0 + wrow + 8 * r + g;
                    j = j0 + 8 * (e >> 1) + 2 * t4 + (e & 1);
                },
                [&](int r, int) { return lse2[r]; }, [&](int r, int) { return Dr[r]; },
                blk.mask, blk.score, keys.needs_mask(t, j0), Exp2Exact());

            // -- dQ_i += dS_ij K_j
            dmma_cx<MT, NS, DP, LDS>(dQ, dp, sm.kv.k[stage], lane);
            keys.release();
        }
        keys.drain();

        // -- dQ_i = scale · Σ_j dS_ij K_j
        double f[MT];
#pragma unroll
        for (int m = 0; m < MT; ++m) f[m] = p.dq_scale;
        store_drows<MT, NO>(blk.seq.q_row(p.dq, p.dq_stride, i0), d, p.dq_stride[2], blk.rows, dQ,
                            f, wrow, lane);
    }
};

}  // namespace cuflash
