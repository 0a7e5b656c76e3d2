// cuflash: FlashAttention backward on CUDA cores (every dtype, every head_dim multiple of 8).
// Read beside cuflash/twin.py (backward) and kernels_cu/flash_fwd.cu: same names, same loops.
// P is never stored: each tile pair recomputes S = Q Kᵀ and P = 2^(u·mul - lse·log2 e).
//
// Three kernels, launched in this order:
//   BwdPreprocess  D_i = rowsum(dO_i ∘ O_i) (bwd_preprocess.cuh)     grid (ceil(batch·T / 8))
//   DkdvSimt       one K/V tile resident, Q/dO tiles streamed:
//                  dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i (and, in atomic mode, dQ_i += dS_ij K_j
//                  with float atomics into dq_accum)             grid (ceil(S / BLOCK_N), batch)
//   DqSimt         (deterministic mode) one Q tile resident, K/V tiles streamed:
//                  dQ_i = Σ_j dS_ij K_j in a fixed order           grid (ceil(T / BLOCK_M), batch)
// with dS_ij = P_ij ∘ (dP_ij - D_i) · g, dP_ij = dO_i V_jᵀ, g = 1 - tanh² with softcap, else 1
// (softmax.cuh, bwd_probs).
//
// Versions (details and predictions in NOTES.md):
//   v1  SIMT tiles as in flash_fwd.cu v1; Pᵀ and dSᵀ pass through shared memory.
//   v6  written on the shared mainloop parts; any mask band, softcap, ALiBi.
//   v25 each tile's products summed from zero, then added to dK, dV, dQ (OuterAcc::add_tile).
#pragma once
#include "mainloop.cuh"
#include "simt_tiles.cuh"

namespace cuflash {

// One K/V tile (BLOCK_N keys) per block; rows of the score tile are keys: Sᵀ = K Qᵀ.
template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, bool ATOMIC_DQ, class V>
struct DkdvSimt : TileKernel<DkdvSimt<T, DP, BLOCK_M, BLOCK_N, NT, ATOMIC_DQ, V>> {
    using Acc = typename Accum<T>::type;
    using Params = BwdParams<T, Acc>;
    static constexpr int VEC = 16 / sizeof(Acc);
    static constexpr int LD = DP + VEC;          // row stride of the Q, K, V, dO tiles
    static constexpr int LDQ = BLOCK_M + VEC;    // row stride of the Pᵀ and dSᵀ tiles
    using STile = DotTile<Acc, BLOCK_N, BLOCK_M, DP, NT>;   // Sᵀ = K Qᵀ, dPᵀ = V dOᵀ
    using KTile = OuterAcc<Acc, BLOCK_N, DP, NT>;           // dK, dV
    using QTile = OuterAcc<Acc, BLOCK_M, DP, NT>;           // dQ of one step (atomic mode)

    using Tiles = SimtTiles<Acc, LD, NT>;   // how a tile is staged (pipeline.cuh)
    struct Smem {
        Acc k[BLOCK_N * LD];
        Acc v[BLOCK_N * LD];
        Acc q[BLOCK_M * LD];
        Acc dout[BLOCK_M * LD];
        Acc pt[BLOCK_N * LDQ];       // Pᵀ of one tile pair
        Acc dst[BLOCK_N * LDQ];      // dSᵀ
        Acc lse2[BLOCK_M];           // lse·log2 e of the streamed queries (+inf: saw no key)
        Acc D[BLOCK_M];
    };
    using Block = KeyBlock<BLOCK_N, V, Params>;

    static __device__ __forceinline__ void body(const Params& p, const Block& kb, Smem& sm) {
        const int j0 = kb.j0, d = p.d;                // first blocks see the most queries

        zero_smem<NT>(&sm, sizeof(Smem));
        __syncthreads();
        load_key_rows<BLOCK_N, Tiles>(sm.k, kb, p.k, p.k_stride, d);
        load_key_rows<BLOCK_N, Tiles>(sm.v, kb, p.v, p.v_stride, d);

        STile St, dPt;
        KTile dK, dV;
        dK.zero();
        dV.zero();
        using Head = GroupHead<BLOCK_M, BLOCK_N, V, Params, Acc>;
        for_each_query_tile<BLOCK_M, NT, Tiles, Head, SyncPipeline>(
            p, kb, [&](int) { return StagedQuery<Acc, Acc>{sm.q, sm.dout, sm.lse2, sm.D}; },
            [&](const Head& head, int t, int i0, const StagedQuery<Acc, Acc>&) {
                // -- recompute Sᵀ = K_j Q_iᵀ and dPᵀ = V_j dO_iᵀ; Pᵀ and dSᵀ (0 where hidden)
                St.template compute<LD, LD>(sm.k, sm.q);
                dPt.template compute<LD, LD>(sm.v, sm.dout);
                bwd_probs<Acc, STile::TR, STile::TN>(
                    [&](int r, int e) -> Acc& { return St.c[r][e]; },
                    [&](int r, int e) -> Acc& { return dPt.c[r][e]; },
                    [&](int r, int e, int& i, int& j) { i = i0 + St.col(e); j = j0 + St.row(r); },
                    [&](int, int e) { return sm.lse2[St.col(e)]; }, [&](int, int e) { return sm.D[St.col(e)]; },
                    head.mask, head.score, head.needs_mask(t, i0), Exp2Exact());
#pragma unroll
                for (int r = 0; r < STile::TR; ++r)
#pragma unroll
                    for (int e = 0; e < STile::TN; ++e) {
                        sm.pt[St.row(r) * LDQ + St.col(e)] = round_to<T>(St.c[r][e]);
                        sm.dst[St.row(r) * LDQ + St.col(e)] = round_to<T>(dPt.c[r][e]);
                    }
                __syncthreads();

                // -- dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i
                dV.template add_tile<false, LDQ, LD, BLOCK_M>(sm.pt, sm.dout);
                dK.template add_tile<false, LDQ, LD, BLOCK_M>(sm.dst, sm.q);
                if constexpr (ATOMIC_DQ) {
                    // -- dQ_i += dS_ij K_j · scale, summed over key tiles by atomics
                    QTile dQ;
                    dQ.template set_tile<true, LDQ, LD, BLOCK_N>(sm.dst, sm.k);
                    dQ.atomic_add(p.dq_accum + head.seq.row(i0) * d, min(BLOCK_M, head.seq.T_len - i0), d, p.dq_scale);
                }
            });
        // -- dK_j = scale · Σ_h Σ_i dS_ijᵀ Q_i; dV_j = Σ_h Σ_i P_ijᵀ dO_i over the group's heads h
        //    (zero if no query sees the tile)
        store_dkdv(
            p, kb,
            [&] {
                dK.store(kb.seq.k_row(p.dk, p.dk_stride, j0), kb.rows, d, p.dk_stride[2],
                         [&](int) { return p.dk_scale; });
                dV.store(kb.seq.k_row(p.dv, p.dv_stride, j0), kb.rows, d, p.dv_stride[2],
                         [&](int) { return p.dv_scale; });
            },
            dK, dV);
    }
};

// Deterministic dQ: one Q tile per block, K/V tiles streamed in order, as the forward.
template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, class V>
struct DqSimt : TileKernel<DqSimt<T, DP, BLOCK_M, BLOCK_N, NT, V>> {
    using Acc = typename Accum<T>::type;
    using Params = BwdParams<T, Acc>;
    static constexpr int VEC = 16 / sizeof(Acc);
    static constexpr int LD = DP + VEC;
    static constexpr int LDP = BLOCK_N + VEC;
    using STile = DotTile<Acc, BLOCK_M, BLOCK_N, DP, NT>;   // S, dP
    using QTile = OuterAcc<Acc, BLOCK_M, DP, NT>;           // dQ

    using Tiles = SimtTiles<Acc, LD, NT>;   // how a tile is staged (pipeline.cuh)
    struct Smem {
        Acc q[BLOCK_M * LD];
        Acc dout[BLOCK_M * LD];
        KVRing<Acc, 1, BLOCK_N * LD> kv;
        Acc ds[BLOCK_M * LDP];       // dS of one tile pair
        Acc lse2[BLOCK_M];
        Acc D[BLOCK_M];
    };
    using Block = QueryBlock<BLOCK_M, V, Params, Acc>;

    static __device__ __forceinline__ void body(const Params& p, const Block& blk, Smem& sm) {
        const int i0 = blk.i0, d = p.d;

        zero_smem<NT>(&sm, sizeof(Smem));
        __syncthreads();
        load_query_rows<BLOCK_M, Tiles>(sm.q, blk, p.q, p.q_stride, d);
        load_query_rows<BLOCK_M, Tiles>(sm.dout, blk, p.dout, p.dout_stride, d);
        load_rows<Acc, BLOCK_M, NT>(sm.lse2, blk.rows, Num<Acc>::inf(),
                                    [&](int r) { return lse_log2(p.lse[blk.seq.row(i0 + r)]); });
        load_rows<Acc, BLOCK_M, NT>(sm.D, blk.rows, Acc(0), [&](int r) { return p.D[blk.seq.row(i0 + r)]; });

        auto keys = key_tiles<BLOCK_N, Tiles, SyncPipeline>(blk, p, sm.kv);

        STile S, dP;
        QTile dQ;
        dQ.zero();
        for (int t = 0; t < keys.n(); ++t) {
            const int j0 = keys.start(t);
            keys.acquire(t);

            // -- recompute S = Q_i K_jᵀ, dP = dO_i V_jᵀ, then dS = P ∘ (dP - D) · g
            S.template compute<LD, LD>(sm.q, sm.kv.k[0]);
            dP.template compute<LD, LD>(sm.dout, sm.kv.v[0]);
            bwd_probs<Acc, STile::TR, STile::TN>(
                [&](int r, int e) -> Acc& { return S.c[r][e]; },
                [&](int r, int e) -> Acc& { return dP.c[r][e]; },
                [&](int r, int e, int& i, int& j) { i = i0 + S.row(r); j = j0 + S.col(e); },
                [&](int r, int) { return sm.lse2[S.row(r)]; }, [&](int r, int) { return sm.D[S.row(r)]; },
                blk.mask, blk.score, keys.needs_mask(t, j0), Exp2Exact());
#pragma unroll
            for (int r = 0; r < STile::TR; ++r)
#pragma unroll
                for (int e = 0; e < STile::TN; ++e) sm.ds[S.row(r) * LDP + S.col(e)] = round_to<T>(dP.c[r][e]);
            __syncthreads();
            // -- dQ_i += dS_ij K_j
            dQ.template add_tile<false, LDP, LD, BLOCK_N>(sm.ds, sm.kv.k[0]);
            keys.release();
        }
        dQ.store(blk.seq.q_row(p.dq, p.dq_stride, i0), blk.rows, d, p.dq_stride[2], [&](int) { return p.dq_scale; });
    }
};

}  // namespace cuflash
