// cuflash: FlashAttention backward on tensor cores (float16 / bfloat16), mma.sync m16n8k16.
// The algorithm is flash_bwd.cu's (and cuflash/twin.py's); here every product is a tensor-core
// product and the score tiles never leave registers except dSᵀ for the dQ product. The mask,
// score modifiers, P/dS recomputation, staging ring and epilogues are the shared parts.
//
//   DkdvMma  one K/V tile resident (warp w owns keys 16w..16w+15), Q/dO tiles streamed
//            through a cp.async ring: Sᵀ = K Qᵀ and dPᵀ = V dOᵀ in registers,
//            Pᵀ = 2^(u·mul - lse·log2 e), dSᵀ = Pᵀ ∘ (dPᵀ - D) · g,
//            dV += Pᵀ dO and dK += dSᵀ Q from registers (C fragments reused as A);
//            atomic mode: dSᵀ to shared memory, dQ_i += dS K_j, float atomics to dq_accum.
//   DqMma    (deterministic mode) one Q tile resident (warp owns 16·MT queries), K/V tiles
//            streamed: S, dP, dS in registers, dQ += dS K_j; fixed summation order. Its
//            products are a Products policy (as flash_fwd_mma.cu's): the float32 TF32 backward
//            (flash_bwd_tf32.cu) runs it with Tf32Products.
// D = rowsum(dO ∘ O) comes from BwdPreprocess (bwd_preprocess.cuh).
//
// Versions (predictions and results in NOTES.md):
//   v1  as above; K and V fragments re-read from shared memory for each Q tile.
//   v2  Pᵀ and dSᵀ packed to 16-bit A fragments right after they are computed (float
//       accumulators die early); dSᵀ stored from the packed fragments.
//   v6  written on the shared mainloop parts; any mask band, softcap, ALiBi.
//   v33 DqMma's products through a Products policy (S and dP no longer interleaved in one k
//       loop), so the TF32 backward's dQ kernel is this one.
#pragma once
#include "mainloop.cuh"
#include "tf32.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, bool ATOMIC_DQ, class V>
struct DkdvMma : TileKernel<DkdvMma<T, DP, BLOCK_M, BLOCK_N, NT, STAGES, ATOMIC_DQ, V>> {
    using Params = BwdParams<T, float>;
    using Block = KeyBlock<BLOCK_N, V, Params>;
    static constexpr int NW = NT / 32;
    static constexpr int MS = BLOCK_M / 8;     // 8-query n-tiles of Sᵀ
    static constexpr int NO = DP / 8;          // 8-column n-tiles of dK, dV, dQ
    static constexpr int LDS = DP + 8;         // row stride of Q, K, V, dO tiles
    static constexpr int LDT = BLOCK_M + 8;    // row stride of the dSᵀ tile
    static constexpr int QM = BLOCK_M / 16;    // dQ product: 16-query m-tiles ...
    static constexpr int QC = DP / 32;         // ... times 32-column chunks of d, dealt to the warps
    static_assert(BLOCK_N == 16 * NW, "one warp per 16 keys");
    static_assert(BLOCK_M % 16 == 0 && DP % 16 == 0, "tiles must be multiples of 16");
    static_assert(STAGES == 1 || STAGES == 2, "1 or 2 stages");

    using Tiles = MmaTiles<DP, LDS, NT>;   // how a tile is staged (pipeline.cuh)
    struct Smem {
        T k[BLOCK_N * LDS];                    // resident K tile
        T v[BLOCK_N * LDS];                    // resident V tile
        T q[STAGES][BLOCK_M * LDS];            // ring of Q tiles
        T dout[STAGES][BLOCK_M * LDS];         // ring of dO tiles
        T dst[ATOMIC_DQ ? BLOCK_N * LDT : 1];  // dSᵀ for the dQ product (atomic mode)
        float lse2[STAGES][BLOCK_M];           // lse·log2 e of the streamed queries
        float D[STAGES][BLOCK_M];
    };

    static __device__ __forceinline__ void body(const Params& p, const Block& kb, Smem& sm) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
        const int j0 = kb.j0, d = p.d, wkey = warp * 16;   // this warp's first key in the tile
        load_key_rows<BLOCK_N, Tiles>(sm.k, kb, p.k, p.k_stride, d);
        load_key_rows<BLOCK_N, Tiles>(sm.v, kb, p.v, p.v_stride, d);

        float dK[NO][4], dV[NO][4];   // keys wkey + g and wkey + g + 8
        zero_fragments(dK);
        zero_fragments(dV);

        using Head = GroupHead<BLOCK_M, BLOCK_N, V, Params, float>;
        for_each_query_tile<BLOCK_M, NT, Tiles, Head, CpAsyncPipeline<STAGES>>(
            p, kb,
            [&](int s) { return StagedQuery<T, float>{sm.q[s], sm.dout[s], sm.lse2[s], sm.D[s]}; },
            [&](const Head& head, int t, int i0, const StagedQuery<T, float>& staged) {
                // -- Sᵀ = K_j Q_iᵀ and dPᵀ = V_j dO_iᵀ for this warp's 16 keys
                float st[MS][4], dpt[MS][4];
                zero_fragments(st);
                zero_fragments(dpt);
#pragma unroll
                for (int kk = 0; kk < DP / 16; ++kk) {
                    unsigned ak[4], av[4];
                    ldmatrix_x4(ak, frag_a_addr<LDS>(sm.k, wkey, kk * 16, lane));
                    ldmatrix_x4(av, frag_a_addr<LDS>(sm.v, wkey, kk * 16, lane));
#pragma unroll
                    for (int nn = 0; nn < BLOCK_M / 16; ++nn) {
                        unsigned bq[4], bo[4];
                        ldmatrix_x4(bq, frag_b_addr<LDS>(staged.q, nn * 16, kk * 16, lane));
                        ldmatrix_x4(bo, frag_b_addr<LDS>(staged.dout, nn * 16, kk * 16, lane));
                        mma16816<T>(st[2 * nn], ak, bq[0], bq[1]);
                        mma16816<T>(st[2 * nn + 1], ak, bq[2], bq[3]);
                        mma16816<T>(dpt[2 * nn], av, bo[0], bo[1]);
                        mma16816<T>(dpt[2 * nn + 1], av, bo[2], bo[3]);
                    }
                }

                // -- Pᵀ and dSᵀ, and both as A fragments (k = queries)
                unsigned pa[BLOCK_M / 16][4], sa[BLOCK_M / 16][4];
                key_tile_probs<T, BLOCK_M>(st, dpt, pa, sa, head, t, i0, j0 + wkey, lane,
                                           staged.lse2, staged.D, Exp2Exact());
                if constexpr (ATOMIC_DQ) {
                    // dSᵀ to shared memory for the dQ product (A fragment regs: rows g / g+8, queries
                    // 16kk + 2t and 16kk + 8 + 2t)
#pragma unroll
                    for (int kk = 0; kk < BLOCK_M / 16; ++kk)
#pragma unroll
                        for (int r = 0; r < 4; ++r)
                            *reinterpret_cast<unsigned*>(sm.dst + (wkey + g + (r & 1) * 8) * LDT + kk * 16 +
                                                         (r >> 1) * 8 + 2 * t4) = sa[kk][r];
                }

                // -- dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i (k = queries)
#pragma unroll
                for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
#pragma unroll
                    for (int dd = 0; dd < DP / 16; ++dd) {
                        unsigned bo[4], bq[4];
                        ldmatrix_x4_trans(bo, frag_a_addr<LDS>(staged.dout, kk * 16, dd * 16, lane));
                        ldmatrix_x4_trans(bq, frag_a_addr<LDS>(staged.q, kk * 16, dd * 16, lane));
                        mma16816<T>(dV[2 * dd], pa[kk], bo[0], bo[1]);
                        mma16816<T>(dV[2 * dd + 1], pa[kk], bo[2], bo[3]);
                        mma16816<T>(dK[2 * dd], sa[kk], bq[0], bq[1]);
                        mma16816<T>(dK[2 * dd + 1], sa[kk], bq[2], bq[3]);
                    }
                }

                if constexpr (ATOMIC_DQ) {
                    // -- dQ_i += dS_ij K_j · scale, summed over key tiles with float atomics
                    __syncthreads();
                    float* dq_accum = p.dq_accum + head.seq.row(0) * d;   // rows of d, lse's index
                    // work items: (16-query m-tile, 32-column chunk of d), dealt round-robin to warps
                    for (int item = warp; item < QM * QC; item += NW) {
                        const int q0 = (item / QC) * 16, c0 = (item % QC) * 32;
                        float dq[4][4];
                        zero_fragments(dq);
#pragma unroll
                        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
                            unsigned a[4];   // dS (rows = queries, k = keys) from the stored dSᵀ
                            ldmatrix_x4_trans(a, frag_b_addr<LDT>(sm.dst, kk * 16, q0, lane));
#pragma unroll
                            for (int dd = 0; dd < 2; ++dd) {
                                unsigned bk[4];
                                ldmatrix_x4_trans(bk, frag_a_addr<LDS>(sm.k, kk * 16, c0 + dd * 16, lane));
                                mma16816<T>(dq[2 * dd], a, bk[0], bk[1]);
                                mma16816<T>(dq[2 * dd + 1], a, bk[2], bk[3]);
                            }
                        }
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int r = i0 + q0 + g + h * 8;
                            if (r >= head.seq.T_len) continue;
#pragma unroll
                            for (int n = 0; n < 4; ++n) {
                                const int c = c0 + n * 8 + 2 * t4;
                                if (c < d) {
                                    atomicAdd(dq_accum + size_t(r) * d + c, dq[n][2 * h] * p.dq_scale);
                                    atomicAdd(dq_accum + size_t(r) * d + c + 1, dq[n][2 * h + 1] * p.dq_scale);
                                }
                            }
                        }
                    }
                    __syncthreads();   // every warp is done with dSᵀ before the next step rewrites it
                }
            });

        store_dkdv_fragments(p, kb, dK, dV, wkey, lane);   // dK_j, dV_j summed over the group
    }
};

// Deterministic dQ: one Q tile resident (warp owns 16·MT query rows), K/V tiles streamed.
// Products (mma.cuh, tf32.cuh): HalfProducts<T> for float16 / bfloat16, Tf32Products<N> for
// float32 on TF32 tensor cores (the dQ kernel of flash_bwd_tf32.cu's pair).
template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V,
          class Products = HalfProducts<T>>
struct DqMma : TileKernel<DqMma<T, DP, BLOCK_M, BLOCK_N, NT, STAGES, V, Products>> {
    using Params = BwdParams<T, float>;
    using Block = QueryBlock<BLOCK_M, V, Params, float>;
    using Shape = MmaShape<T, DP, BLOCK_M, BLOCK_N, NT, Products>;   // mma.cuh: rows a warp, LDS
    static constexpr int NW = Shape::NW, MT = Shape::MT, NS = Shape::NS, NO = Shape::NO;
    static constexpr int LDS = Shape::LDS;
    static_assert(STAGES == 1 || STAGES == 2, "1 or 2 stages");

    using Tiles = typename Shape::Tiles;
    using Smem = DqTiles<T, LDS, BLOCK_M, BLOCK_N, STAGES>;              // pipeline.cuh

    static __device__ __forceinline__ void body(const Params& p, const Block& blk, Smem& sm) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2;
        const int i0 = blk.i0, d = p.d, wrow = warp * 16 * MT;

        auto keys = start_dq_tile<BLOCK_M, BLOCK_N, Tiles, CpAsyncPipeline<STAGES>>(blk, p, sm);

        float lse2[2 * MT], Dr[2 * MT], dQ[MT][NO][4];
        dq_row_stats(lse2, Dr, p, blk, i0, wrow, g);   // row wrow + 16·mt + 8·h + g at 2·mt + h
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) zero_fragments(dQ[mt]);

        for (int t = 0; t < keys.n(); ++t) {
            const int j0 = keys.start(t);
            const int stage = keys.acquire(t);
            const T* Ks = sm.kv.k[stage];

            // -- S = Q_i K_jᵀ, dP = dO_i V_jᵀ
            float s[MT][NS][4], dp[MT][NS][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                zero_fragments(s[mt]);
                zero_fragments(dp[mt]);
            }
            Products::template scores<MT, BLOCK_N, DP, LDS>(s, sm.q, wrow, Ks, 0, lane);
            Products::template scores<MT, BLOCK_N, DP, LDS>(dp, sm.dout, wrow, sm.kv.v[stage], 0,
                                                            lane);

            // -- dS = P ∘ (dP - D) · g in place of dP (rows r = 2·mt + h); dQ_i += dS_ij K_j
            //    (16-bit: dS rounded to T and packed as A fragments first)
            query_tile_probs<MT, NS>(s, dp, blk.mask, blk.score, keys.needs_mask(t, j0), i0, wrow,
                                     j0, lane, lse2, Dr, Exp2Exact());
            Products::template add_pv<MT, BLOCK_N, DP, LDS>(dQ, dp, Ks, lane);
            keys.release();
        }
        keys.drain();

        // -- dQ_i = scale · Σ_j dS_ij K_j, staged in this warp's own Q rows for 16-byte stores
        float f[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) f[mt][0] = f[mt][1] = p.dq_scale;
        store_rows_staged<T, MT, NO, DP>(blk.seq.q_row(p.dq, p.dq_stride, i0), d, p.dq_stride[2],
                                         blk.rows, dQ, f, sm.q,
                                         [](int r, int c) { return tile_at<LDS>(r, c); }, wrow,
                                         lane);
    }
};

}  // namespace cuflash
