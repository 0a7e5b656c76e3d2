// cuflash: FlashAttention forward on tensor cores through mma.sync: float16 / bfloat16 (m16n8k16,
// HalfProducts in mma.cuh) and float32 on TF32 tensor cores (m16n8k8, Tf32Products in tf32.cuh:
// precision 'tf32', one product, or 'highest', three). Products is the only part that differs.
// The algorithm is flash_fwd.cu's (and cuflash/twin.py's); this file keeps S, P and O in
// registers: each warp owns 16·MT query rows, so row max and row sum need only the 4 lanes of a
// quad, and P goes from the S accumulators straight into the A operand of P·V. The mask, score
// modifiers, online softmax, staging ring and epilogue are the shared parts (mask.cuh,
// score.cuh, softmax.cuh, pipeline.cuh, epilogue.cuh).
//
// Versions (measured on the H200; predictions and results in NOTES.md):
//   v1  cp.async K/V ring (STAGES 1 or 2), Q fragments re-read from shared memory per K/V tile
//       with ldmatrix, V through ldmatrix.trans, exp2 with scale·log2(e) folded into one FFMA,
//       1/l deferred to the end, causal tiles above the diagonal skipped, heavy tiles first.
//   v2  P packed to 16-bit A fragments right after the softmax (the float S registers die
//       before P·V), which lets 128-row tiles (MT = 2) fit at d = 128 without spills.
//   v6  written on the shared mainloop parts; any mask band, softcap, ALiBi.
//   v10 warps that split the keys (decode): with BLOCK_M = 16·MT < 16·warps, every warp takes all
//       BLOCK_M rows and its own BLOCK_N / warps keys of each tile, with its own running max,
//       sum and O; the warps' results merge once at the end (merge_key_warps). A decode step's
//       few query rows then keep warps·(one tile's work / warps) in flight instead of one warp
//       working through each whole tile.
//   v11 with the keys split, each warp stages its own keys of each K/V tile (KVTiles,
//       KeySliceTiles) and waits for its own copies alone: no block barrier between tiles; a
//       paged cache then needs only each warp's 16 keys in one page, so pages of 16 and 32
//       keep the 64-key decode tile (NOTES v98, v101).
//
// Grid: (ceil(T / BLOCK_M), sequences·heads) (block.cuh, QueryBlock). Block: NT = 32·warps
// threads. Rows split (BLOCK_M = 16·MT·warps): warp w owns rows 16·MT·w .. and every key of a
// tile. Keys split (BLOCK_M = 16·MT, warps > 1): warp w owns every row and keys
// w·BLOCK_N / warps .. of each tile.
#pragma once
#include "mainloop.cuh"
#include "tf32.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V,
          class Products = HalfProducts<T>>
struct FwdMma : TileKernel<FwdMma<T, DP, BLOCK_M, BLOCK_N, NT, STAGES, V, Products>> {
    using Params = FwdParams<T, float>;
    using Block = QueryBlock<BLOCK_M, V, Params, float>;
    // warps split the keys where the rows are too few (KW); a KV cache's steps, memory-bound,
    // take the swizzled rows (mma.cuh tile_at: 1.07-1.08x on large decode steps, NOTES v28), the
    // others the padded ones (fewer address registers: the swizzle made the sm_80 128-row causal
    // tile spill)
    using Shape = MmaShape<T, DP, BLOCK_M, BLOCK_N, NT, Products, true, V::CACHE != kNoCache>;
    static constexpr int NW = Shape::NW, KW = Shape::KW, MT = Shape::MT, WN = Shape::WN;
    static constexpr int NS = Shape::NS, NO = Shape::NO, LDS = Shape::LDS;
    static_assert(MT == 1 || MT == 2, "16 or 32 rows a warp");
    static_assert(STAGES >= 1 && STAGES <= 4, "1 to 4 stages");

    using Tiles = typename Shape::Tiles;
    using Merge = KeyWarpMerge<KW, MT>;
    static constexpr int kRingBytes = 2 * STAGES * BLOCK_N * LDS * int(sizeof(T));
    static constexpr int kMergeBytes = 4 * Merge::template kMergeFloats<DP>;
    struct Base : FwdTiles<T, LDS, BLOCK_M, BLOCK_N, STAGES> {    // Q; K and V (pipeline.cuh)
        // after K and V: the key warps' merge
        char merge_room[kMergeBytes > kRingBytes ? kMergeBytes - kRingBytes : 16];
    };
    // split-KV in clusters (V::CLUSTER > 1): the block's partials, after all of the above
    using Part = ClusterPartials<BLOCK_M, DP>;
    struct Clustered : Base { Part part; };
    using Smem = Pick<(V::CLUSTER > 1), Clustered, Base>;

    static __device__ __forceinline__ void body(const Params& p, const Block& blk, Smem& sm) {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t4 = lane & 3;
        const int i0 = blk.i0, d = p.d;
        const int wrow = KW > 1 ? 0 : warp * 16 * MT;   // this warp's first row in the tile
        const int wkey = KW > 1 ? warp * WN : 0;        // and its first key

        // -- the key tiles this query tile visits; the Q tile resident
        // (each warp waits for its own copies alone where it stages its own keys: SlicedTiles)
        using KVTiles = typename Shape::KVTiles;
        using KVPipe = CpAsyncPipeline<STAGES, STAGES - 1, false, SlicedTiles<KVTiles>::value>;
        auto keys = key_tiles<BLOCK_N, KVTiles, KVPipe>(blk, p, sm.kv);
        load_query_rows<BLOCK_M, Tiles>(sm.q, blk, p.q, p.q_stride, d);
        keys.prologue();

        float o[MT][NO][4];      // unnormalized O rows (g, g+8) of each m-tile
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            zero_fragments(o[mt]);
        OnlineSoftmax<float, 2 * MT, 4> softmax;   // rows r = 2·mt + h

        for (int t = 0; t < keys.n(); ++t) {
            const int j0 = keys.start(t);
            const int stage = keys.acquire(t);
            const T* Ks = sm.kv.k[stage];
            const T* Vs = sm.kv.v[stage];

            // -- S = Q_i K_jᵀ (raw scores)
            float s[MT][NS][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                zero_fragments(s[mt]);
            Products::template scores<MT, WN, DP, LDS>(s, sm.q, wrow, Ks, wkey, lane);

            // -- u = score_mod(S), -inf where hidden; online softmax; O rescaled by alpha
            auto frag = [&](int r, int e) -> float& { return s[r >> 1][e >> 1][2 * (r & 1) + (e & 1)]; };
            auto at = [&](int r, int e, int& i, int& j) {
                i = i0 + wrow + (r >> 1) * 16 + g + (r & 1) * 8;
                j = j0 + wkey + (e >> 1) * 8 + 2 * t4 + (e & 1);
            };
            modify_and_mask<float, 2 * MT, 2 * NS>(frag, at, blk.mask, blk.score,
                                                  keys.needs_mask(t, j0));
            float alpha[2 * MT];
            softmax.template update<2 * NS>(frag, blk.score.mul, alpha, Exp2Exact());
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int n = 0; n < NO; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) o[mt][n][e] *= alpha[2 * mt + (e >> 1)];

            // -- O += P V_j (16-bit: P rounded to T and packed as A fragments first, so the float S
            //    registers die here)
            Products::template add_pv<MT, WN, DP, LDS>(o, s, Vs + wkey * LDS, lane);
            keys.release();
        }
        keys.drain();
        // the key warps' results into warp 0's, which alone writes them
        const bool owner = KW == 1 ||
            Merge::run(o, softmax, reinterpret_cast<float*>(sm.kv.k), warp, lane);
        if (owner) epilogue(p, blk, o, softmax, sm, wrow, lane);
        if constexpr (V::CLUSTER > 1)
            finish_cluster_split<NT>(p, blk, sm.part);
        else if constexpr (V::SPLIT)
            finish_split<NT, BLOCK_M>(p, blk, sm);
    }

    // O = O / l and lse; this warp's own Q rows stage O for 16-byte stores
    template <class QB, class Softmax>
    static __device__ __forceinline__ void epilogue(const Params& p, const QB& blk,
                                                    const float (&o)[MT][NO][4],
                                                    const Softmax& softmax, Smem& sm, int wrow,
                                                    int lane) {
        const int t4 = lane & 3, i0 = blk.i0;

        float inv[MT][2];
        for_each_frag_row<MT>(wrow, lane, [&](int mt, int h, int r) {
            float lse;
            inv[mt][h] = softmax.finalize(2 * mt + h, lse);
            if constexpr (V::CLUSTER > 1) {
                if (t4 == 0) sm.part.lse[r] = lse;
            } else if (t4 == 0 && r < blk.rows) {
                blk.lse_dst(p)[blk.seq.row(i0 + r)] = lse;
            }
        });
        if constexpr (V::CLUSTER > 1)
            store_float_rows<MT, NO>([&](int r) { return sm.part.o[r]; }, BLOCK_M, DP, o, inv,
                                     wrow, lane);
        else
            store_out<T, MT, NO, DP>(p, blk, o, inv, sm.q,
                                     [](int r, int c) { return tile_at<LDS>(r, c); }, wrow, lane);
    }
};

}  // namespace cuflash
