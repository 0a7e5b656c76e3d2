// cuflash: the softmax steps of every kernel family, written once on an abstract fragment.
//
// A fragment is what one thread holds of a score tile: R rows of E elements each, the rest of
// each row on LANES consecutive lanes of its warp (xor-shuffle reductions). Kernels describe
// theirs with two small functors:
//   s(r, e)        -> Acc&: element e of row r (register arrays indexed by unrolled constants)
//   at(r, e, i, j)    sets the query i and key j of that element
// (mma/wgmma C fragments: r = 2·mt + h, rows g / g + 8 of m-tile mt, e = 2·n + c, columns 2t + c
// of n-tile n, LANES = 4; SIMT DotTile: rows TR, columns TN, LANES = CT; the backward's dK/dV
// kernels hold Sᵀ, so their `at` returns the query from the column).
//
// Steps, in FlashAttention-2's notation (Algorithm 1 lines 8-10, Algorithm 2 lines 11-16):
//   modify_and_mask  u = score_mod(q·k) in u units (score.cuh), -inf where the mask hides it
//   OnlineSoftmax    m, l running max (log2 units) and sum; P = 2^(u·mul - m); alpha rescales O and l
//   bwd_probs        P = 2^(u·mul - lse·log2 e) (0 where hidden), dS = P ∘ (dP - D) · g
#pragma once
#include "common.cuh"
#include "score.cuh"

namespace cuflash {

template <int LANES, typename Acc>
__device__ __forceinline__ Acc lanes_max(Acc x) {
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) x = Num<Acc>::max(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
template <int LANES, typename Acc>
__device__ __forceinline__ Acc lanes_sum(Acc x) {
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// 2^x: exact (exp2f / exp2) or by the special-function unit alone (ex2.approx.ftz, float only)
struct Exp2Exact {
    template <typename Acc> __device__ __forceinline__ Acc operator()(Acc x) const { return Num<Acc>::exp2(x); }
};
struct Exp2Approx {
    __device__ __forceinline__ float operator()(float x) const { return ex2_approx(x); }
};

// -- u = score_mod(s) and the mask, over one tile's fragment. needs_mask: the tile is cut by the
//    mask (Mask::tile_needs_mask); without it and without a score modifier nothing is done. One
//    copy of the element loop for cut tiles and one for the others, as bwd_probs below: with a
//    score modifier and one loop, ptxas predicated the mask's test on every element of every
//    tile (NOTES v17).
template <bool MASKED, typename Acc, int R, int E, class Frag, class At, class M, class Score>
__device__ __forceinline__ void modify_and_mask_tile(Frag&& s, At&& at, const M& mask,
                                                     const Score& score) {
    const Distance<Acc> dist(at, score.diag);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int e = 0; e < E; ++e) {
            int i, j;
            at(r, e, i, j);
            Acc& x = s(r, e);
            if constexpr (Score::kTransforms) x = score.logit(x, dist(i, j));
            if (MASKED && !mask.visible(i, j)) x = -Num<Acc>::inf();
        }
}
template <typename Acc, int R, int E, class Frag, class At, class M, class Score>
__device__ __forceinline__ void modify_and_mask(Frag&& s, At&& at, const M& mask, const Score& score,
                                                bool needs_mask) {
    if (needs_mask)
        modify_and_mask_tile<true, Acc, R, E>(s, at, mask, score);
    else if constexpr (Score::kTransforms)
        modify_and_mask_tile<false, Acc, R, E>(s, at, mask, score);
}

// -- the online softmax: running max m and this thread's part of the running sum l. m is kept in
//    log2 units, max(u)·mul rounded once: the reference every P of the row is taken against, so
//    alpha = 2^(m_old - m_new) is exactly 1 while the max stands and exact where it moves (the
//    difference of two close floats). Kept in u units with alpha = 2^(m_old·mul - m_new·mul),
//    the compiler fused one product into the subtraction and alpha was 2^δ (δ: m·mul's rounding,
//    up to half an ulp) on every key tile: l and lse drifted by n_tiles·δ, 9e-5 at S = 32768 in
//    float32, 100× the naive lse's error (NOTES v24).
//    SLACK > 0 (log2 units): the reference moves only when a row's tile max exceeds it by more than
//    SLACK, so P ≤ 2^SLACK and, on most key tiles, no row of the warp moves: update returns false
//    (a warp vote) and alpha, the old l's and O's rescaling are skipped. P = 2^(u·mul - m) against
//    any m ≥ the row's running max - SLACK gives the same O / l and lse up to the rounding of each
//    product (FlashAttention-4's conditional rescale): exact in float64, where 2^SLACK is far
//    from overflow. SLACK = 0: the running max itself, update always true (every caller but
//    float64's and the 16-bit wgmma forwards').
// The slack of the kernels that skip alpha and O's rescaling (float64's dmma forward, the 16-bit
// wgmma forwards; TF32's keeps 0, wgmma_forward.cuh): P ≤ 2^8, which float16, bfloat16 and
// float64 hold at their full relative precision (float16's largest is 65504) and float
// accumulators sum far from overflow.
constexpr int kLazySlack = 8;

template <typename Acc, int R, int LANES, int SLACK = 0>
struct OnlineSoftmax {
    Acc m[R], l[R];

    __device__ __forceinline__ OnlineSoftmax() {
#pragma unroll
        for (int r = 0; r < R; ++r) { m[r] = -Num<Acc>::inf(); l[r] = Acc(0); }
    }

    // m_new = max(m, rowmax(u)·mul); P = 2^(u·mul - m_new) in place of u; alpha = 2^(m - m_new)
    // rescales the old l (here) and O (by the caller, when update returns true). A row that has
    // seen no key yet keeps m = -inf and takes P against 0, so P = 0, alpha = 0 and nothing
    // becomes NaN. With SLACK, m_new = m unless rowmax(u)·mul > m + SLACK, and alpha is computed
    // only when some row of the warp moved (all 32 lanes must call update together).
    template <int E, class Frag, class Exp2>
    __device__ __forceinline__ bool update(Frag&& s, Acc mul, Acc (&alpha)[R], Exp2 exp2) {
        if constexpr (SLACK == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const Acc m_new = Num<Acc>::max(m[r], top<E>(s, r, mul));
                const Acc ref = m_new == -Num<Acc>::inf() ? Acc(0) : m_new;
                alpha[r] = exp2(m[r] - ref);
                m[r] = m_new;
                l[r] = l[r] * alpha[r] + probs<E>(s, r, mul, ref, exp2);
            }
            return true;
        } else {
            // A row's max passes m + SLACK iff one of its lanes' maxima does: the lanes' own
            // maxima and one warp vote decide, and the shuffles run only when some row moves.
            Acc m_old[R], t[R];
            bool over = false;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                t[r] = Num<Acc>::mul_rn(own_max<E>(s, r), mul);   // max and ·mul commute
                m_old[r] = m[r];
                over |= t[r] > m[r] + Acc(SLACK);   // -inf + SLACK = -inf
            }
            const bool moved = __any_sync(0xffffffffu, over);
            if (moved)
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const Acc row = lanes_max<LANES>(t[r]);
                    if (row > m[r] + Acc(SLACK)) m[r] = row;
                }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const Acc ref = m[r] == -Num<Acc>::inf() ? Acc(0) : m[r];
                alpha[r] = moved ? exp2(m_old[r] - ref) : Acc(1);
                const Acc row_sum = probs<E>(s, r, mul, ref, exp2);
                l[r] = moved ? l[r] * alpha[r] + row_sum : l[r] + row_sum;
            }
            return moved;
        }
    }

    // max(u) of row r over this thread's E elements, in W running maxima folded at the end: a
    // chain E / W + log2 W deep where one running max made it E deep (32 dependent FMNMX a row
    // on the critical path from S_t to P_t, NOTES v83). max is exact: the same value either way.
    template <int E, class Frag>
    static __device__ __forceinline__ Acc own_max(Frag&& s, int r) {
        constexpr int W = E >= 32 ? 8 : E >= 8 ? 4 : E >= 2 ? 2 : 1;
        Acc mx[W];
#pragma unroll
        for (int w = 0; w < W; ++w) mx[w] = -Num<Acc>::inf();
#pragma unroll
        for (int e = 0; e < E; ++e) mx[e % W] = Num<Acc>::max(mx[e % W], s(r, e));
#pragma unroll
        for (int h = W / 2; h > 0; h /= 2)
#pragma unroll
            for (int w = 0; w < h; ++w) mx[w] = Num<Acc>::max(mx[w], mx[w + h]);
        return mx[0];
    }

    // rowmax(u)·mul of row r over its LANES lanes
    template <int E, class Frag>
    static __device__ __forceinline__ Acc top(Frag&& s, int r, Acc mul) {
        return Num<Acc>::mul_rn(lanes_max<LANES>(own_max<E>(s, r)), mul);
    }

    // P = 2^(u·mul - ref) in place of row r's u; this thread's part of their sum
    template <int E, class Frag, class Exp2>
    static __device__ __forceinline__ Acc probs(Frag&& s, int r, Acc mul, Acc ref, Exp2 exp2) {
        Acc row_sum = Acc(0);
#pragma unroll
        for (int e = 0; e < E; ++e) {
            const Acc p = exp2(fma(s(r, e), mul, -ref));
            s(r, e) = p;
            row_sum += p;
        }
        return row_sum;
    }

    // O = O / l and lse = (m + log2 l)·ln 2 of row r; a row that saw no key: 1/l = 0 (O = 0)
    // and lse = -inf. Every lane of the row gets both.
    __device__ __forceinline__ Acc finalize(int r, Acc& lse) const {
        const Acc sum = lanes_sum<LANES>(l[r]);
        lse = sum == Acc(0) ? -Num<Acc>::inf() : (m[r] + Num<Acc>::log2(sum)) * Acc(kLn2);
        return sum == Acc(0) ? Acc(0) : Acc(1) / sum;
    }
};

// lse in log2 units as the backward reads it: +inf for a query that saw no key (lse = -inf), so
// that P = 2^(u·mul - (+inf)) = 0 there, and for rows past the end (`valid` false).
template <typename Acc>
__device__ __forceinline__ Acc lse_log2(Acc lse, bool valid = true) {
    return !valid || lse == -Num<Acc>::inf() ? Num<Acc>::inf() : lse * Acc(kLog2e);
}

// -- the backward's recomputation: P from u and the forward's lse, then dS, in place.
//    lse2(r, e): lse·log2 e of the element's query (+inf for a query that saw no key: P = 0);
//    Dq(r, e): D of that query. s holds u's raw scores on entry and P on exit; dp holds dP on
//    entry and dS = P ∘ (dP - D) · g on exit.
template <bool MASKED, typename Acc, int R, int E, class FragS, class FragDP, class At, class Lse2,
          class Dq, class M, class Score, class Exp2>
__device__ __forceinline__ void bwd_probs_tile(FragS&& s, FragDP&& dp, At&& at, Lse2&& lse2,
                                               Dq&& Dof, const M& mask, const Score& score,
                                               Exp2 exp2) {
    const Distance<Acc> dist(at, score.diag);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int e = 0; e < E; ++e) {
            int i, j;
            at(r, e, i, j);
            Acc& x = s(r, e);
            Acc g = Acc(1);
            const Acc u = Score::kTransforms ? score.logit_grad(x, dist(i, j), g) : x;
            x = exp2(fma(u, score.mul, -lse2(r, e)));
            Acc& y = dp(r, e);
            y = Score::kTransforms ? x * (y - Dof(r, e)) * g : x * (y - Dof(r, e));
            if (MASKED) {   // after P and dS, by selects: masking x before dS spilled the ws
                            // dK/dV kernel's causal softcap + ALiBi variant 700 B (NOTES v19)
                const bool seen = mask.visible(i, j);
                x = seen ? x : Acc(0);
                y = seen ? y : Acc(0);
            }
        }
}

// One copy of the element loop for tiles the mask cuts and one for the others (the branch is
// taken once per tile, not per element: the exponentials stay a straight run).
template <typename Acc, int R, int E, class FragS, class FragDP, class At, class Lse2, class Dq,
          class M, class Score, class Exp2>
__device__ __forceinline__ void bwd_probs(FragS&& s, FragDP&& dp, At&& at, Lse2&& lse2, Dq&& Dof,
                                          const M& mask, const Score& score, bool needs_mask,
                                          Exp2 exp2) {
    if (needs_mask)
        bwd_probs_tile<true, Acc, R, E>(s, dp, at, lse2, Dof, mask, score, exp2);
    else
        bwd_probs_tile<false, Acc, R, E>(s, dp, at, lse2, Dof, mask, score, exp2);
}

}  // namespace cuflash
