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

template <typename T, int DP, int BLOCK_M, int BLOCK_N>
struct WgmmaDkdvStep {
    static constexpr int MS = BLOCK_M / 8;     // 8-query n-tiles of Sᵀ
    static constexpr int NO = DP / 8;          // 8-column n-tiles of dK, dV
    static_assert(BLOCK_M % 16 == 0 && BLOCK_M <= 256 && DP % 64 == 0 && DP <= 256, "tile sizes");
    using MMA_S = Wgmma<BLOCK_M, T>;    // Sᵀ, dPᵀ: 64 keys × BLOCK_M queries per warpgroup
    using MMA_O = Wgmma<DP, T>;         // dK, dV: 64 keys × DP

    // One staged query tile (tile t of head's list, first query i0) into dK, dV (C fragments of
    // keys wkey + g and wkey + g + 8); sKw, sVw: this warpgroup's 64 keys of panel 0 of the
    // resident K and V tiles, j: the warp's first key (the block's j0 + wkey). turns.turn() runs
    // before each group of products is issued and turns.issued() after it (NoTurns: nothing);
    // the tile's Q and dO are read by the time it returns.
    template <class Head, class Turns>
    static __device__ __forceinline__ void run(float (&dK)[NO][4], float (&dV)[NO][4],
                                               const T* sKw, const T* sVw, const Head& head, int t,
                                               int i0, int j, int lane,
                                               const StagedQuery<T, float>& staged,
                                               const Turns& turns) {
        float st[MS][4], dpt[MS][4];
        turns.turn();
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            MMA_S::ss(st, kmajor_desc<BLOCK_N>(sKw, kk), kmajor_desc<BLOCK_M>(staged.q, kk), kk > 0);
            MMA_S::ss(dpt, kmajor_desc<BLOCK_N>(sVw, kk), kmajor_desc<BLOCK_M>(staged.dout, kk), kk > 0);
        }
        wgmma_commit();
        turns.issued();
        wgmma_wait<0>();
        wgmma_fence_regs(st);
        wgmma_fence_regs(dpt);

        // -- Pᵀ and dSᵀ, and both as A fragments (k = queries)
        unsigned pa[BLOCK_M / 16][4], sa[BLOCK_M / 16][4];
        key_tile_probs<T, BLOCK_M>(st, dpt, pa, sa, head, t, i0, j, lane, staged.lse2, staged.D,
                                   Exp2Approx());
        turns.turn();
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
            MMA_O::template rs<1>(dV, pa[kk], mnmajor_desc<BLOCK_M>(staged.dout, kk), 1);
            MMA_O::template rs<1>(dK, sa[kk], mnmajor_desc<BLOCK_M>(staged.q, kk), 1);
        }
        wgmma_commit();
        turns.issued();
        wgmma_wait<0>();
        wgmma_fence_regs(dV);
        wgmma_fence_regs(dK);
        wgmma_keep_regs(pa);
        wgmma_keep_regs(sa);
    }
};

// No turns: the warpgroups issue when they are ready (DkdvWgmma)
struct NoTurns {
    __device__ __forceinline__ void turn() const {}
    __device__ __forceinline__ void issued() const {}
};

}  // namespace cuflash
