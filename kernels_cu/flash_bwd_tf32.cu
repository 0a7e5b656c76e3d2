// cuflash: FlashAttention backward in float32 on TF32 tensor cores, mma.sync m16n8k8 .tf32 (sm_80+).
// The algorithm is flash_bwd.cu's (and cuflash/twin.py's) with every product a tensor-core
// product; the structure is flash_bwd_mma.cu's deterministic pair (and flash_bwd_dmma.cu's), the
// score tiles kept in registers. Products is the only part that says how float32 is multiplied
// (tf32.cuh): Tf32Products<1> precision="tf32" (each operand rounded to TF32, one product),
// Tf32Products<3> precision="highest" (3xTF32: float32's accuracy). Both of its products serve
// all five of the backward's:
//   scores  c[m][n] += A_m · B_nᵀ over d         Sᵀ = K Qᵀ, dPᵀ = V dOᵀ; S = Q Kᵀ, dP = dO Vᵀ
//   add_pv  o[m] += C-fragment tile · rows       dV += Pᵀ dO, dK += dSᵀ Q; dQ += dS K
// (add_pv takes its A operand from the C fragments as they stand: tf32.cuh's header).
//
//   DkdvTf32  one K/V tile resident, Q/dO tiles streamed through a cp.async ring
//             (for_each_query_tile), Sᵀ and dPᵀ of a warp's 16 keys in registers,
//             Pᵀ = 2^(u·mul - lse·log2 e), dSᵀ = Pᵀ ∘ (dPᵀ - D) · g (key_tile_probs_f),
//             dV += Pᵀ dO and dK += dSᵀ Q from the registers. Two ways to deal the keys:
//               solo (block_n = 16·warps): each warp its 16 keys, all four products.
//               pair (block_n = 8·warps): two warps per 16 keys, S-warp and dP-warp. The
//               S-warp computes Sᵀ, hands it over in shared memory, then Pᵀ and dV += Pᵀ dO;
//               the dP-warp computes dPᵀ, takes Sᵀ, then Pᵀ and dSᵀ and dK += dSᵀ Q. Each
//               holds one of dK, dV: d / 2 floats per thread where solo holds d (at d = 128
//               solo left no room for the rest: ptxas spilled 36-820 bytes), and no product
//               is done twice (the exponentials are: both warps need Pᵀ).
//   dQ        flash_bwd_mma.cu's DqMma with Tf32Products: one Q/dO tile resident (warp owns 16·MT
//             queries), K/V tiles streamed, S, dP, dS in registers, dQ += dS K_j in a fixed
//             order.
// No atomic-dQ mode: deterministic=False runs this pair too (cuflash/tile.py,
// default_dq_deterministic). D = rowsum(dO ∘ O) comes from BwdPreprocess (bwd_preprocess.cuh).
//
// Versions (predictions and results in NOTES.md):
//   v33  as above.
#pragma once
#include "barrier.cuh"
#include "mainloop.cuh"
#include "tf32.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V,
          class Products>
struct DkdvTf32 : TileKernel<DkdvTf32<T, DP, BLOCK_M, BLOCK_N, NT, STAGES, V, Products>> {
    static_assert(sizeof(T) == 4, "the TF32 kernels take float32");
    using Params = BwdParams<T, float>;
    using Block = KeyBlock<BLOCK_N, V, Params>;
    static constexpr int NW = NT / 32;
    static constexpr bool PAIR = BLOCK_N == 8 * NW;   // two warps per 16 keys (the header)
    static constexpr int NO = DP / 8;                 // 8-column n-tiles of dK, dV
    static constexpr int NQ = BLOCK_M / 8;            // 8-query n-tiles of Sᵀ
    static constexpr int LDS = Products::template kLds<DP>;
    static_assert(BLOCK_N == 16 * NW || PAIR, "16 keys per warp, or per pair of warps");
    static_assert(!PAIR || NW / 2 <= 15, "a named barrier per pair (ids 1..15)");
    static_assert(BLOCK_M % 16 == 0 && BLOCK_M <= 128 && DP % 16 == 0,
                  "tiles must be multiples of 16");
    static_assert(STAGES == 1 || STAGES == 2, "1 or 2 stages");

    using Tiles = CpAsyncTiles<DP, NT, RowMajor<LDS>, 4>;   // 4 floats per 16-byte copy
    struct Smem : DkdvTiles<T, LDS, BLOCK_M, BLOCK_N, STAGES> {   // pipeline.cuh
        // pair: each pair's Sᵀ as its S-warp's C fragments, lane-major (float4 per n-tile)
        float4 handover[PAIR ? NW / 2 * NQ * 32 : 1];
    };

    static __device__ __forceinline__ void body(const Params& p, const Block& kb, Smem& sm) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const int j0 = kb.j0, d = p.d;
        const int wkey = (PAIR ? warp / 2 : warp) * 16;   // this warp's first key in the tile
        const bool s_warp = !PAIR || warp % 2 == 0;      // computes Sᵀ (pair: and only dV)
        float4* handover = sm.handover + (PAIR ? warp / 2 : 0) * NQ * 32 + lane;
        const NamedBarrier handed{1 + warp / 2, 64};      // pair: the S-warp's Sᵀ is there
        load_key_rows<BLOCK_N, Tiles>(sm.k, kb, p.k, p.k_stride, d);
        load_key_rows<BLOCK_N, Tiles>(sm.v, kb, p.v, p.v_stride, d);

        // keys wkey + g and wkey + g + 8; pair: the S-warp's dV, the dP-warp's dK
        float dK[1][NO][4], dV[1][PAIR ? 1 : NO][4];
        zero_fragments(dK[0]);
        zero_fragments(dV[0]);

        using Head = GroupHead<BLOCK_M, BLOCK_N, V, Params, float>;
        for_each_query_tile<BLOCK_M, NT, Tiles, Head, CpAsyncPipeline<STAGES>>(
            p, kb,
            [&](int s) { return StagedQuery<T, float>{sm.q[s], sm.dout[s], sm.lse2[s], sm.D[s]}; },
            [&](const Head& head, int t, int i0, const StagedQuery<T, float>& staged) {
                float st[1][NQ][4], dpt[1][NQ][4];
                zero_fragments(st[0]);
                zero_fragments(dpt[0]);
                auto probs = [&] {   // Pᵀ in place of Sᵀ, dSᵀ in place of dPᵀ
                    key_tile_probs_f<BLOCK_M>(st[0], dpt[0], head, t, i0, j0 + wkey, lane,
                                              staged.lse2, staged.D, Exp2Exact());
                };
                if constexpr (!PAIR) {
                    // -- Sᵀ = K_j Q_iᵀ and dPᵀ = V_j dO_iᵀ; dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i
                    Products::template scores<1, BLOCK_M, DP, LDS>(st, sm.k, wkey, staged.q, 0,
                                                                   lane);
                    Products::template scores<1, BLOCK_M, DP, LDS>(dpt, sm.v, wkey, staged.dout,
                                                                   0, lane);
                    probs();
                    Products::template add_pv<1, BLOCK_M, DP, LDS>(dV, st, staged.dout, lane);
                    Products::template add_pv<1, BLOCK_M, DP, LDS>(dK, dpt, staged.q, lane);
                } else if (s_warp) {
                    // -- Sᵀ = K_j Q_iᵀ, handed over; Pᵀ (dSᵀ unused); dV_j += P_ijᵀ dO_i. The
                    //    hand-over buffer is free: the dP-warp read it before this step's
                    //    acquire (a block barrier)
                    Products::template scores<1, BLOCK_M, DP, LDS>(st, sm.k, wkey, staged.q, 0,
                                                                   lane);
#pragma unroll
                    for (int n = 0; n < NQ; ++n)
                        handover[n * 32] = make_float4(st[0][n][0], st[0][n][1], st[0][n][2],
                                                       st[0][n][3]);
                    handed.arrive();
                    probs();
                    Products::template add_pv<1, BLOCK_M, DP, LDS>(dK, st, staged.dout, lane);
                } else {
                    // -- dPᵀ = V_j dO_iᵀ; Sᵀ taken over; Pᵀ, dSᵀ; dK_j += dS_ijᵀ Q_i
                    Products::template scores<1, BLOCK_M, DP, LDS>(dpt, sm.v, wkey, staged.dout,
                                                                   0, lane);
                    handed.sync();
#pragma unroll
                    for (int n = 0; n < NQ; ++n) {
                        const float4 x = handover[n * 32];
                        st[0][n][0] = x.x, st[0][n][1] = x.y, st[0][n][2] = x.z, st[0][n][3] = x.w;
                    }
                    probs();
                    Products::template add_pv<1, BLOCK_M, DP, LDS>(dK, dpt, staged.q, lane);
                }
            });

        // dK_j, dV_j summed over the group (pair: the S-warp's dK array holds dV)
        if constexpr (!PAIR) store_dkdv_fragments(p, kb, dK[0], dV[0], wkey, lane);
        else store_dkdv_one(p, kb, dK[0], !s_warp, wkey, lane);
    }
};

}  // namespace cuflash
