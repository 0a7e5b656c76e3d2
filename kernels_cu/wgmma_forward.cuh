// cuflash: one warpgroup's 64 query rows of the wgmma forward, written once for both kernels that
// run it (flash_fwd_wgmma.cu: two warpgroups on a block-wide cp.async ring; flash_fwd_wgmma_ws.cu:
// consumers of a producer warpgroup). Per key tile t (FlashAttention-3's intra-warpgroup
// pipelining):
//   issue S_t = Q K_tᵀ (wgmma_ss: Q and K from swizzled shared memory) and O += P_{t-1} V_{t-1}
//   (wgmma_rs: P from registers), wait for S_t only, apply the score modifier and the mask, run
//   the online softmax (the exponentials overlap the second product), wait for it, round P_t
//   into the A fragments and rescale O.
// The first step has no P_{t-1} V_{t-1}: it is its own instantiation (step<true>), so that every
// product is issued on a path every thread of the warpgroup takes (under `if (t > 0)` ptxas
// serialized every wgmma of the kernel: NOTES v16). P_t is rounded into `pa` only after the wait
// for P_{t-1} V_{t-1} (rounded into a second array and copied after it, ptxas moved the copies
// into the next step's products and serialized them too).
// Hooks tell the kernel where the step stands: turn() before the products are issued, issued()
// after, k_read() once S_t is done with K_t, v_read() once P_{t-1} V_{t-1} is done with V_{t-1}.
#pragma once
#include "mainloop.cuh"
#include "tf32.cuh"
#include "wgmma_tiles.cuh"

namespace cuflash {

// A kernel that hands nothing over mid-step (flash_fwd_wgmma.cu: its ring is block-synchronous)
struct NoStepHooks {
    __device__ __forceinline__ void turn() const {}
    __device__ __forceinline__ void issued() const {}
    __device__ __forceinline__ void k_read() const {}
    __device__ __forceinline__ void v_read() const {}
};

// One warpgroup's scores of key tile t (first key j0 = kv.start(t)) become probabilities: s, the
// wgmma accumulator of this warp's 16 rows from wrow (C fragments, 8 keys an n-tile), gets
// u = score_mod(S) and -inf where hidden (mask.cuh, score.cuh), then the online softmax's P;
// alpha: each row's rescale of O, needed only when this returns true (softmax.cuh's SLACK: some row
// of the warp moved its reference). Written once for the wgmma forwards of every dtype
// (WgmmaFwdRows, flash_fwd_wgmma_tf32.cu).
template <int BLOCK_N, class Block, class Softmax>
__device__ __forceinline__ bool wgmma_tile_probs(float (&s)[BLOCK_N / 8][4], const Block& blk,
                                                 const TileIter& kv, int t, int wrow, int g,
                                                 int t4, Softmax& softmax, float (&alpha)[2]) {
    constexpr int NS = BLOCK_N / 8;
    const int j0 = kv.start(t, BLOCK_N), i0 = blk.i0;
    auto frag = [&](int r, int e) -> float& { return s[e >> 1][2 * r + (e & 1)]; };
    auto at = [&](int r, int e, int& i, int& j) {
        i = i0 + wrow + g + r * 8;
        j = j0 + (e >> 1) * 8 + 2 * t4 + (e & 1);
    };
    modify_and_mask<float, 2, 2 * NS>(frag, at, blk.mask, blk.score,
                                     blk.template needs_mask<BLOCK_N>(kv, t, j0));
    return softmax.template update<2 * NS>(frag, blk.score.mul, alpha, Exp2Approx());
}

// The end of one warp's 16 rows of a wgmma forward (`rows`: its blk, softmax, o[1][NO][4], and
// wrow, g, t4, lane: rows wrow + g and wrow + g + 8): O = O / l and lse (stored), O staged in
// the warp's own rows of `stage`, a tile laid out as sw128<BLOCK_M, sizeof(S)> (the caller makes
// sure every product is done with them), and stored
template <int BLOCK_M, int DP, int NO, class P, class Rows, typename S>
__device__ __forceinline__ void wgmma_rows_epilogue(const P& p, Rows& rows, S* stage) {
    float inv[1][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float lse;
        inv[0][h] = rows.softmax.finalize(h, lse);
        const int r = rows.wrow + rows.g + h * 8;
        if (rows.t4 == 0 && r < rows.blk.rows)
            rows.blk.lse_dst(p)[rows.blk.seq.row(rows.blk.i0 + r)] = lse;
    }
    store_out<S, 1, NO, DP>(p, rows.blk, rows.o, inv, stage,
                            [](int r, int c) { return sw128<BLOCK_M, int(sizeof(S))>(r, c); },
                            rows.wrow, rows.lane);
}

// How the products of a wgmma forward take their operands, by element type (one rule each):
//   K_STEP   the k of one instruction: 16 for 16-bit operands, 8 for TF32
//   TRANS_V  P·V's transpose flag for B: V as it lands (16-bit: MN-major, the instruction
//            transposes it) or Vᵀ staged by the host (TF32: K-major, no transpose for .tf32)
//   v_desc   P·V's B descriptor at k-step kk of the V (or Vᵀ) tile at Vp
//   to_a     P's A fragment of k-step kk from S's accumulators (16-bit: two n-tiles packed;
//            TF32: one n-tile rounded, keys in Vᵀ's slot order, tf32.cuh / tf32_stage.py)
template <typename T>
struct WgmmaOperands {
    static constexpr int K_STEP = 16, TRANS_V = 1;
    template <int BLOCK_N, int DP>
    static __device__ __forceinline__ unsigned long long v_desc(const T* Vp, int kk) {
        return mnmajor_desc<BLOCK_N>(Vp, kk);
    }
    template <int NS>
    static __device__ __forceinline__ void to_a(unsigned (&a)[4], const float (&s)[NS][4], int kk) {
        c_to_a<T>(a, s[2 * kk], s[2 * kk + 1]);
    }
};
template <>
struct WgmmaOperands<float> {
    static constexpr int K_STEP = 8, TRANS_V = 0;
    template <int BLOCK_N, int DP>
    static __device__ __forceinline__ unsigned long long v_desc(const float* Vp, int kk) {
        return kmajor_desc<DP>(Vp, kk);
    }
    template <int NS>
    static __device__ __forceinline__ void to_a(unsigned (&a)[4], const float (&s)[NS][4], int kk) {
        a[0] = to_tf32(s[kk][0]);
        a[1] = to_tf32(s[kk][2]);
        a[2] = to_tf32(s[kk][1]);
        a[3] = to_tf32(s[kk][3]);
    }
};

template <typename T, int DP, int BLOCK_M, int BLOCK_N, class Block>
struct WgmmaFwdRows {
    using Ops = WgmmaOperands<T>;
    static constexpr int NS = BLOCK_N / 8;   // 8-column n-tiles of S
    static constexpr int NO = DP / 8;        // 8-column n-tiles of O
    static constexpr int PANEL = 128 / int(sizeof(T));   // columns of a 128-byte panel
    static constexpr int NK = BLOCK_N / Ops::K_STEP;      // k-steps of P·V
    static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 256 && DP % PANEL == 0 && DP <= 256,
                  "tile sizes");
    using MMA_S = Wgmma<BLOCK_N, T>;
    using MMA_O = Wgmma<DP, T>;

    const Block& blk;
    const T* sQw;                  // this warpgroup's 64 rows of panel 0 of the Q tile
    const int lane, g, t4, wrow;   // wrow: this warp's first row in the tile
    float o[1][NO][4];             // unnormalized O rows (g, g+8) of this warp
    // 16-bit: most key tiles skip alpha and O's rescaling (kLazySlack). TF32 keeps the running
    // max itself, so that its P, rounded to TF32, is the mma.sync 'tf32' kernel's P to the bit
    // (test_wgmma_tf32_matches_the_mma_kernel: P against a stale max rounds elsewhere, 3e-4)
    OnlineSoftmax<float, 2, 4, sizeof(T) == 2 ? kLazySlack : 0> softmax;
    unsigned pa[NK][4];            // P_{t-1} as A fragments, read by the product in flight

    // warpgroup wg of the tile (rows 64·wg ..), warp: its warp among the tile's (rows 16·warp ..)
    __device__ __forceinline__ WgmmaFwdRows(const Block& b, const T* sq, int wg, int warp, int ln)
        : blk(b), sQw(sq + wg * 64 * PANEL), lane(ln), g(ln >> 2), t4(ln & 3), wrow(warp * 16) {
        zero_fragments(o[0]);
    }

    // Step t of the key tiles kv: K_t at Ks, V_{t-1} at Vp (not read when FIRST)
    template <bool FIRST, class Hooks>
    __device__ __forceinline__ void step(const TileIter& kv, int t, const T* Ks, const T* Vp,
                                         Hooks&& hooks) {
        float s[NS][4];
        hooks.turn();
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DP / Ops::K_STEP; ++kk)
            MMA_S::ss(s, kmajor_desc<BLOCK_M>(sQw, kk), kmajor_desc<BLOCK_N>(Ks, kk), kk > 0);
        wgmma_commit();
        if constexpr (!FIRST) {
#pragma unroll
            for (int kk = 0; kk < NK; ++kk)   // K_STEP keys of V per k-step
                MMA_O::template rs<Ops::TRANS_V>(o[0], pa[kk],
                                                 Ops::template v_desc<BLOCK_N, DP>(Vp, kk), 1);
            wgmma_commit();
            hooks.issued();
            wgmma_wait<1>();         // S_t is done; P_{t-1} V_{t-1} may still run
        } else {
            hooks.issued();
            wgmma_wait<0>();
        }
        wgmma_fence_regs(s);
        hooks.k_read();

        // -- u = score_mod(S), -inf where hidden; new m, P, alpha
        float alpha[2];
        const bool moved = wgmma_tile_probs<BLOCK_N>(s, blk, kv, t, wrow, g, t4, softmax, alpha);
        if constexpr (!FIRST) {
            wgmma_wait<0>();
            wgmma_fence_regs(o[0]);
            wgmma_keep_regs(pa);     // pa was read by the product that just finished
            hooks.v_read();
        }
        // -- P_t rounded to T as A fragments, only now that P_{t-1} V_{t-1} is done with pa
#pragma unroll
        for (int kk = 0; kk < NK; ++kk) Ops::to_a(pa[kk], s, kk);
        if (moved)
#pragma unroll
            for (int n = 0; n < NO; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[0][n][e] *= alpha[e >> 1];
    }

    // The last product, O += P_{n-1} V_{n-1} (V_{n-1} at Vp)
    template <class Hooks>
    __device__ __forceinline__ void last_product(const T* Vp, Hooks&& hooks) {
        hooks.turn();
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < NK; ++kk)
            MMA_O::template rs<Ops::TRANS_V>(o[0], pa[kk],
                                             Ops::template v_desc<BLOCK_N, DP>(Vp, kk), 1);
        wgmma_commit();
        hooks.issued();
        wgmma_wait<0>();
        wgmma_fence_regs(o[0]);
        wgmma_keep_regs(pa);
    }

    // O = O / l and lse; O staged in this warp's own rows of the Q tile `stage` (the caller makes
    // sure every product is done with them) and stored
    template <class P>
    __device__ __forceinline__ void epilogue(const P& p, T* stage) {
        wgmma_rows_epilogue<BLOCK_M, DP, NO>(p, *this, stage);
    }
};

}  // namespace cuflash
