// cuflash: one warpgroup's step of a wgmma dK/dV kernel (flash_bwd_wgmma.cu's DkdvWgmma, and
// flash_bwd_wgmma_ws.cu's warp-specialized one): for 64 keys of the block's resident K/V tile,
// add one staged query tile to their dK and dV (C fragments):
//   Sᵀ = K_j Q_iᵀ and dPᵀ = V_j dO_iᵀ (one group of products, K/V and Q/dO K-major),
//   Pᵀ = 2^(u·mul - lse·log2 e), dSᵀ = Pᵀ ∘ (dPᵀ - D) · g in registers (key_tile_probs),
//   dV += Pᵀ dO and dK += dSᵀ Q (Pᵀ, dSᵀ as register A operands, dO and Q read MN-major).
// The kernels differ in who stages the query tiles and how the warpgroups wait for them.
#pragma once
#include "mainloop.cuh"
#include "wgmma_tiles.cuh"

namespace cuflash {

// No use of dSᵀ beyond dK (WgmmaDkdvStep's ds argument)
struct NoDs {
    template <class A>
    __device__ __forceinline__ void operator()(const A&) const {}
};

template <typename T, int DP, int BLOCK_M, int BLOCK_N>
struct WgmmaDkdvStep {
    static constexpr int MS = BLOCK_M / 8;     // 8-query n-tiles of Sᵀ
    static constexpr int NO = DP / 8;          // 8-column n-tiles of dK, dV
    static_assert(BLOCK_M % 16 == 0 && BLOCK_M <= 256 && DP % 64 == 0 && DP <= 256, "tile sizes");
    using MMA_S = Wgmma<BLOCK_M, T>;    // Sᵀ, dPᵀ: 64 keys × BLOCK_M queries per warpgroup
    using MMA_O = Wgmma<DP, T>;         // dK, dV: 64 keys × DP

    // One staged query tile (tile t of head's list, first query i0) into dK, dV (C fragments of
    // keys wkey + g and wkey + g + 8); sKw, sVw: this warpgroup's 64 keys of panel 0 of the
    // resident K and V tiles, j: the warp's first key (the block's j0 + wkey); ds(sa) is handed
    // dSᵀ's A fragments while the dV/dK products read them (NoDs: nothing; the atomic-dQ kernel
    // stores them); the tile's Q and dO are read by the time it returns.
    template <class Head, class Ds = NoDs>
    static __device__ __forceinline__ void run(float (&dK)[NO][4], float (&dV)[NO][4],
                                               const T* sKw, const T* sVw, const Head& head, int t,
                                               int i0, int j, int lane,
                                               const StagedQuery<T, float>& staged,
                                               const Ds& ds = Ds{}) {
        float st[MS][4], dpt[MS][4];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            MMA_S::ss(st, kmajor_desc<BLOCK_N>(sKw, kk), kmajor_desc<BLOCK_M>(staged.q, kk), kk > 0);
            MMA_S::ss(dpt, kmajor_desc<BLOCK_N>(sVw, kk), kmajor_desc<BLOCK_M>(staged.dout, kk), kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_regs(st);
        wgmma_fence_regs(dpt);

        // -- Pᵀ and dSᵀ, and both as A fragments (k = queries)
        unsigned pa[BLOCK_M / 16][4], sa[BLOCK_M / 16][4];
        key_tile_probs<T, BLOCK_M>(st, dpt, pa, sa, head, t, i0, j, lane, staged.lse2, staged.D,
                                   Exp2Approx());
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
            MMA_O::template rs<1>(dV, pa[kk], mnmajor_desc<BLOCK_M>(staged.dout, kk), 1);
            MMA_O::template rs<1>(dK, sa[kk], mnmajor_desc<BLOCK_M>(staged.q, kk), 1);
        }
        wgmma_commit();
        ds(sa);
        wgmma_wait<0>();
        wgmma_fence_regs(dV);
        wgmma_fence_regs(dK);
        wgmma_keep_regs(pa);
        wgmma_keep_regs(sa);
    }
};

// One warpgroup's step of a wgmma dQ kernel (DqWgmma, DqWgmmaWs): its 64 resident queries
// (sQw, sdOw: panel 0 of its rows of the Q and dO tiles) against one staged K/V tile (Ks, Vs,
// first key j0, the tile needing the per-element rule or not):
//   S = Q_i K_jᵀ, dP = dO_i V_jᵀ (one group), dS = P ∘ (dP - D) · g in place of dP,
//   dQ_i += dS_ij K_j (dS as register A operands, K read MN-major).
// The warp's rows are wrow + g and wrow + g + 8 (lse2, Dr: their lse·log2 e and D from
// dq_row_stats); the K/V tile is read by the time it returns.
template <typename T, int DP, int BLOCK_M, int BLOCK_N>
struct WgmmaDqStep {
    static constexpr int NS = BLOCK_N / 8;
    static constexpr int NO = DP / 8;
    static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 256 && DP % 64 == 0 && DP <= 256, "tile sizes");
    using MMA_S = Wgmma<BLOCK_N, T>;
    using MMA_O = Wgmma<DP, T>;

    template <class Mask, class Score>
    static __device__ __forceinline__ void run(float (&dQ)[NO][4], const T* sQw, const T* sdOw,
                                               const T* Ks, const T* Vs, int i0, int wrow, int j0,
                                               int lane, const float (&lse2)[2],
                                               const float (&Dr)[2], const Mask& mask,
                                               const Score& score, bool needs_mask) {
        // -- S = Q_i K_jᵀ, dP = dO_i V_jᵀ (one group)
        float s[NS][4], dp[NS][4];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            MMA_S::ss(s, kmajor_desc<BLOCK_M>(sQw, kk), kmajor_desc<BLOCK_N>(Ks, kk), kk > 0);
            MMA_S::ss(dp, kmajor_desc<BLOCK_M>(sdOw, kk), kmajor_desc<BLOCK_N>(Vs, kk), kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_regs(s);
        wgmma_fence_regs(dp);

        // -- dS = P ∘ (dP - D) · g in place of dP (mainloop.cuh: the warp's 16 rows, MT = 1)
        query_tile_probs<1, NS>(reinterpret_cast<float(&)[1][NS][4]>(s),
                                reinterpret_cast<float(&)[1][NS][4]>(dp), mask, score, needs_mask,
                                i0, wrow, j0, lane, lse2, Dr, Exp2Approx());

        // -- dS as A fragments (k = keys); dQ_i += dS_ij K_j with K read MN-major
        unsigned sa[BLOCK_N / 16][4];
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) c_to_a<T>(sa[kk], dp[2 * kk], dp[2 * kk + 1]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk)
            MMA_O::template rs<1>(dQ, sa[kk], mnmajor_desc<BLOCK_N>(Ks, kk), 1);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_regs(dQ);
        wgmma_keep_regs(sa);
    }
};

}  // namespace cuflash
