// cuflash: FlashAttention forward on CUDA cores (every dtype, every head_dim multiple of 8).
// Read beside cuflash/twin.py (forward) and kernels_cu/flash_bwd.cu: same names, same loops.
// The mask, score modifiers and online softmax are the shared parts (mask.cuh, score.cuh,
// softmax.cuh); the tiles are simt_tiles.cuh's register blocks.
//
// Versions (measured on the H200; details and predictions in NOTES.md):
//   v1  one Q tile per block, K/V tiles loaded (converted to Acc) into shared memory, S in
//       registers (DotTile), P through shared memory, O in registers (OuterAcc).
//   v6  written on the shared mainloop parts; any mask band, softcap, ALiBi.
//   v25 each key tile's P V summed from zero, then O = alpha O + it (OuterAcc::add_tile).
//
// Grid: (ceil(T / BLOCK_M), sequences·heads) (block.cuh, QueryBlock). Block: NT threads.
#pragma once
#include "mainloop.cuh"
#include "simt_tiles.cuh"

namespace cuflash {

// T: storage type of q, k, v, out; Acc: float (double for float64). DP: head dim rounded up to
// a multiple of 32 (columns d..DP are zero).
template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, class V>
struct FwdSimt : TileKernel<FwdSimt<T, DP, BLOCK_M, BLOCK_N, NT, V>> {
    using Acc = typename Accum<T>::type;
    using Params = FwdParams<T, Acc>;
    static constexpr int VEC = 16 / sizeof(Acc);
    static constexpr int LD = DP + VEC;          // row stride of the Q, K, V tiles
    static constexpr int LDP = BLOCK_N + VEC;    // row stride of the P tile
    using STile = DotTile<Acc, BLOCK_M, BLOCK_N, DP, NT>;   // S = Q Kᵀ of one tile pair
    using OTile = OuterAcc<Acc, BLOCK_M, DP, NT>;           // unnormalized output

    using Tiles = SimtTiles<Acc, LD, NT>;   // how a tile is staged (pipeline.cuh)
    struct Smem {
        Acc q[BLOCK_M * LD];
        KVRing<Acc, 1, BLOCK_N * LD> kv;
        Acc p[BLOCK_M * LDP];        // P of one tile pair
        Acc alpha[BLOCK_M];          // rescale of each row this step
        Acc l[BLOCK_M];              // 1 / l of each row at the end
    };
    using Block = QueryBlock<BLOCK_M, V, Params, Acc>;

    static __device__ __forceinline__ void body(const Params& p, const Block& blk, Smem& sm) {
        const int i0 = blk.i0, d = p.d;

        zero_smem<NT>(&sm, sizeof(Smem));   // columns d..DP of every tile stay 0
        __syncthreads();
        load_query_rows<BLOCK_M, Tiles>(sm.q, blk, p.q, p.q_stride, d);

        auto keys = key_tiles<BLOCK_N, Tiles, SyncPipeline>(blk, p, sm.kv);

        STile S;
        OTile O;
        O.zero();
        OnlineSoftmax<Acc, STile::TR, STile::CT> softmax;
        for (int t = 0; t < keys.n(); ++t) {
            const int j0 = keys.start(t);
            keys.acquire(t);

            // -- S_ij = Q_i K_jᵀ; u = score_mod(S), -inf where hidden; online softmax
            S.template compute<LD, LD>(sm.q, sm.kv.k[0]);
            auto frag = [&](int r, int e) -> Acc& { return S.c[r][e]; };
            auto at = [&](int r, int e, int& i, int& j) { i = i0 + S.row(r); j = j0 + S.col(e); };
            modify_and_mask<Acc, STile::TR, STile::TN>(frag, at, blk.mask, blk.score,
                                                      keys.needs_mask(t, j0));
            Acc alpha[STile::TR];
            softmax.template update<STile::TN>(frag, blk.score.mul, alpha, Exp2Exact());
#pragma unroll
            for (int r = 0; r < STile::TR; ++r) {
#pragma unroll
                for (int e = 0; e < STile::TN; ++e) sm.p[S.row(r) * LDP + S.col(e)] = round_to<T>(S.c[r][e]);
                if (S.tx == 0) sm.alpha[S.row(r)] = alpha[r];
            }
            __syncthreads();

            // -- O_i = diag(alpha) O_i + P_ij V_j
            O.template add_tile<false, LDP, LD, BLOCK_N>(sm.p, sm.kv.v[0], sm.alpha);
            keys.release();
        }

        // -- O_i = O_i / l, lse_i; rows that saw no key: O = 0, lse = -inf
#pragma unroll
        for (int r = 0; r < STile::TR; ++r) {
            Acc lse;
            const Acc inv = softmax.finalize(r, lse);
            if (S.tx == 0) {
                sm.l[S.row(r)] = inv;
                if (S.row(r) < blk.rows) blk.lse_dst(p)[blk.seq.row(i0 + S.row(r))] = lse;
            }
        }
        __syncthreads();
        if constexpr (V::SPLIT) {   // split-KV (params.cuh): this split's O_s to out_accum
            O.store(blk.out_accum_row(p, 0), blk.rows, d, d, [&](int r) { return sm.l[r]; });
            finish_split<NT, BLOCK_M>(p, blk, sm);
        } else {
            O.store(blk.seq.q_row(p.out, p.out_stride, i0), blk.rows, d, p.out_stride[2],
                    [&](int r) { return sm.l[r]; });
        }
    }
};

}  // namespace cuflash
