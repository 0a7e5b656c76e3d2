// cuflash: FlashAttention forward on float64 tensor cores, mma.sync m8n8k4 .f64 (sm_80+).
// The algorithm is flash_fwd.cu's (and cuflash/twin.py's), computed in float64 throughout; the
// structure is flash_fwd_mma.cu's: each warp owns 8·MT query rows, so row max and row sum need
// only the 4 lanes of a quad, and P goes from the S accumulators straight into the A operand of
// P·V (dmma.cuh says how the f64 fragments line up). The mask, score modifiers, online softmax,
// staging ring and block set-up are the shared parts (mask.cuh, score.cuh, softmax.cuh,
// pipeline.cuh, block.cuh); the epilogue stores O from the registers (dmma.cuh, store_drows).
//
// Versions (measured on the H200; predictions and results in NOTES.md, v11):
//   v1  cp.async K/V ring (STAGES 1 or 2), Q and K fragments read from shared memory with
//       16-byte loads per K/V tile, V likewise, exact exp2 (double), 1/l deferred, every mask,
//       score modifier, packed batches, GQA, split-KV and the KV cache as the other families.
//   v76 sm_90 at 64 < d <= 128: 128 x 16 tiles of 8 warps (16 rows a warp: m16n8k16).
//   v78 the m16n8k16 fragments read straight into place by 8-byte loads (dmma.cuh).
//   v79 the softmax's reference moves only by more than 2^8: O's rescaling skipped by the warp.
//
// Grid: (ceil(T / BLOCK_M), sequences·heads) (block.cuh, QueryBlock). Block: NT = 32·warps
// threads, BLOCK_M = 8·MT·warps.
#pragma once
#include "mainloop.cuh"
#include "dmma.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V>
struct FwdDmma : TileKernel<FwdDmma<T, DP, BLOCK_M, BLOCK_N, NT, STAGES, V>> {
    using Params = FwdParams<T, double>;
    using Block = QueryBlock<BLOCK_M, V, Params, double>;
    using Shape = DmmaShape<T, BLOCK_M, BLOCK_N, DP, NT, STAGES>;   // dmma.cuh
    // m-tiles per warp, n-tiles of S and O, the tiles' row stride and loader
    static constexpr int MT = Shape::MT, NS = Shape::NS, NO = Shape::NO, LDS = Shape::LDS;
    using Tiles = typename Shape::Tiles;

    using Smem = FwdTiles<T, LDS, BLOCK_M, BLOCK_N, STAGES>;   // pipeline.cuh

    static __device__ __forceinline__ void body(const Params& p, const Block& blk, Smem& sm) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
        const int i0 = blk.i0, d = p.d, wrow = warp * 8 * MT;   // this warp's first row in the tile

        // -- the key tiles this query tile visits
        auto keys = key_tiles<BLOCK_N, Tiles, CpAsyncPipeline<STAGES>>(blk, p, sm.kv);
        load_query_rows<BLOCK_M, Tiles>(sm.q, blk, p.q, p.q_stride, d);
        keys.prologue();

        double o[MT][NO][2];   // unnormalized O rows g of each m-tile (dmma_cx's layout)
        zero_dfragments(o);
        // row r = m-tile r; the reference moves only by more than 2^8 (softmax.cuh: most key
        // tiles skip alpha and O's rescaling, 64 products a thread at d = 128)
        OnlineSoftmax<double, MT, 4, kLazySlack> softmax;

        for (int t = 0; t < keys.n(); ++t) {
            const int j0 = keys.start(t);
            const int stage = keys.acquire(t);

            // -- S = Q_i K_jᵀ (raw scores)
            double s[MT][NS][2];
            zero_dfragments(s);
            dmma_abt<MT, NS, DP, LDS>(s, sm.q + wrow * LDS, sm.kv.k[stage], lane);

            // -- u = score_mod(S), -inf where hidden; online softmax; O rescaled by alpha
            auto frag = [&](int r, int e) -> double& { return s[r][e >> 1][e & 1]; };
            auto at = [&](int r, int e, int& i, int& j) {
                i = i0 + wrow + 8 * r + g;
                j = j0 + 8 * (e >> 1) + 2 * t4 + (e & 1);
            };
            modify_and_mask<double, MT, 2 * NS>(frag, at, blk.mask, blk.score,
                                                keys.needs_mask(t, j0));
            double alpha[MT];
            if (softmax.template update<2 * NS>(frag, blk.score.mul, alpha, Exp2Exact()))
#pragma unroll
                for (int m = 0; m < MT; ++m)
#pragma unroll
                    for (int n = 0; n < NO; ++n) {
                        o[m][n][0] *= alpha[m];
                        o[m][n][1] *= alpha[m];
                    }

            // -- O += P V_j, P straight from the S fragments
            dmma_cx<MT, NS, DP, LDS>(o, s, sm.kv.v[stage], lane);
            keys.release();
        }
        keys.drain();

        // -- O = O / l and lse; split-KV: this split's O_s to its rows of out_accum
        double inv[MT];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            double lse;
            inv[m] = softmax.finalize(m, lse);
            const int r = wrow + 8 * m + g;
            if (t4 == 0 && r < blk.rows) blk.lse_dst(p)[blk.seq.row(i0 + r)] = lse;
        }
        if constexpr (V::SPLIT) {
            store_drows<MT, NO>(blk.out_accum_row(p, 0), d, d, blk.rows, o, inv, wrow, lane);
            finish_split<NT, BLOCK_M>(p, blk, sm);
        } else {
            store_drows<MT, NO>(blk.seq.q_row(p.out, p.out_stride, i0), d, p.out_stride[2],
                                blk.rows, o, inv, wrow, lane);
        }
    }
};

}  // namespace cuflash
