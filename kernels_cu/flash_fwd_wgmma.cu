// cuflash: FlashAttention forward on Hopper's warpgroup tensor cores (sm_90a), float16 / bfloat16.
// The algorithm is flash_fwd_mma.cu's (and cuflash/twin.py's) with the products on wgmma:
// each warpgroup (4 warps) owns 64 query rows; S = Q Kᵀ reads Q and K straight from shared
// memory (wgmma_ss), O += P V takes P from registers and V from shared memory (wgmma_rs), so
// there is no ldmatrix at all. The wgmma accumulator of a warp is the mma.m16n8k16 C fragment
// layout (wgmma.cuh), so the mask, score modifiers, softmax and epilogue are the shared parts
// with MT = 1; the tiles are 128-byte-swizzled panels (wgmma_tiles.cuh).
//
// Versions (predictions and results in NOTES.md):
//   v3  first wgmma version: cp.async K/V ring (STAGES 1 or 2) issued by every thread, one
//       product group in flight per warpgroup, the two warpgroups of a block overlap each
//       other's softmax and products only through the warp schedulers.
//   v4  softmax of tile j overlaps the product P_{j-1} V_{j-1} inside each warpgroup (both
//       products of a step issued together, FlashAttention-3's intra-warpgroup pipelining);
//       a ring of 3 or 4 K/V buffers; exp2 as ex2.approx.
//   v6  written on the shared mainloop parts; any mask band, softcap, ALiBi.
//
// Grid: (ceil(T / BLOCK_M), sequences·heads) (block.cuh, QueryBlock). Block: NT = 32·warps
// threads, BLOCK_M = 16·warps.
#pragma once
#include "mainloop.cuh"
#include "wgmma_tiles.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V>
struct FwdWgmma {
    using Params = FwdParams<T, float>;
    static constexpr int NW = NT / 32;
    static constexpr int NS = BLOCK_N / 8;          // 8-column n-tiles of S
    static constexpr int NO = DP / 8;               // 8-column n-tiles of O
    static_assert(NW % 4 == 0 && BLOCK_M == 16 * NW, "BLOCK_M must be 64 rows per warpgroup");
    static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 256 && DP % 64 == 0 && DP <= 256, "tile sizes");
    static_assert(STAGES == 3 || STAGES == 4, "3 or 4 K/V buffers (one being loaded, two read)");
    using MMA_S = Wgmma<BLOCK_N, T>;
    using MMA_O = Wgmma<DP, T>;
    // Ring of STAGES K/V buffers, tile t in stage t % STAGES. Tile t + AHEAD loads while tile t is
    // computed: its stage last held tile t - 2, whose V the product P_{t-2} V_{t-2} read in step
    // t - 1 (tile t - 1's V is still being read during step t).
    static constexpr int AHEAD = STAGES - 2;

    using Tiles = SwizzledTiles<DP, NT>;   // how a tile is staged (pipeline.cuh)
    struct Smem {                        // 16-bit panels, each a multiple of 1024 bytes
        T q[BLOCK_M * DP];               // the resident query tile; later each warp's O rows
        KVRing<T, STAGES, BLOCK_N * DP> kv;
    };
    static constexpr int kSmemBytes = sizeof(Smem) + 1024;   // + alignment of the first panel

    static __device__ __forceinline__ void run(const Params& p) {
        const QueryBlock<BLOCK_M, V, Params, float> blk(p);
        if (!blk.active) return;
        Smem& sm = smem_aligned_1024<Smem>(kSmemBytes);
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const int g = lane >> 2, t4 = lane & 3;   // fragment row group and column pair
        const int wg = warp / 4;                  // warpgroup: query rows 64·wg .. 64·wg + 63
        const int i0 = blk.i0, d = p.d;
        const int wrow = warp * 16;               // this warp's first row in the tile

        auto keys = key_tiles<BLOCK_N, Tiles, CpAsyncPipeline<STAGES, AHEAD, true>>(blk, p, sm.kv);
        load_query_rows<BLOCK_M, Tiles>(sm.q, blk, p.q, p.q_stride, d);
        keys.prologue();

        float o[1][NO][4];       // unnormalized O rows (g, g+8) of this warp
        zero_fragments(o[0]);
        OnlineSoftmax<float, 2, 4> softmax;       // rows g (r = 0) and g + 8 (r = 1)
        const T* sQw = sm.q + wg * 64 * 64;       // this warpgroup's 64 rows of panel 0
        unsigned pa[BLOCK_N / 16][4];             // P_{j-1} as A fragments, read by the product in flight

        // Step t: S_t = Q K_tᵀ and O += P_{t-1} V_{t-1} run on the tensor cores together; the
        // softmax of S_t (exp2, the slow part) overlaps the second product; then O is rescaled.
        for (int t = 0; t < keys.n(); ++t) {
            const int j0 = keys.start(t);
            const int stage = keys.acquire(t);
            const T* Ks = sm.kv.k[stage];
            const T* Vp = sm.kv.v[(t + STAGES - 1) % STAGES];   // V_{t-1}

            // -- issue S_t = Q_i K_tᵀ (DP / 16 k-steps), then P_{t-1} V_{t-1}
            float s[NS][4];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < DP / 16; ++kk)
                MMA_S::ss(s, kmajor_desc<BLOCK_M>(sQw, kk), kmajor_desc<BLOCK_N>(Ks, kk), kk > 0);
            wgmma_commit();
            if (t > 0) {
#pragma unroll
                for (int kk = 0; kk < BLOCK_N / 16; ++kk)   // 16 keys (2048 bytes of V) per k-step
                    MMA_O::template rs<1>(o[0], pa[kk], mnmajor_desc<BLOCK_N>(Vp, kk), 1);
                wgmma_commit();
                wgmma_wait<1>();         // S_t is done; P_{t-1} V_{t-1} may still run
            } else {
                wgmma_wait<0>();
            }
            wgmma_fence_regs(s);

            // -- u = score_mod(S), -inf where hidden; new m, P, alpha
            auto frag = [&](int r, int e) -> float& { return s[e >> 1][2 * r + (e & 1)]; };
            auto at = [&](int r, int e, int& i, int& j) {
                i = i0 + wrow + g + r * 8;
                j = j0 + (e >> 1) * 8 + 2 * t4 + (e & 1);
            };
            modify_and_mask<float, 2, 2 * NS>(frag, at, blk.mask, blk.score,
                                             keys.needs_mask(t, j0));
            float alpha[2];
            softmax.template update<2 * NS>(frag, blk.score.mul, alpha, Exp2Approx());
            if (t > 0) {
                wgmma_wait<0>();
                wgmma_fence_regs(o[0]);
                wgmma_keep_regs(pa);     // pa was read by the product that just finished
            }
            // -- P_t rounded to T as A fragments, only now that P_{t-1} V_{t-1} is done with pa
#pragma unroll
            for (int kk = 0; kk < BLOCK_N / 16; ++kk) c_to_a<T>(pa[kk], s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (int n = 0; n < NO; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[0][n][e] *= alpha[e >> 1];
            keys.release();
        }
        if (keys.n() > 0) {              // the last product, O += P_{n-1} V_{n-1}
            const T* Vp = sm.kv.v[(keys.n() - 1) % STAGES];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BLOCK_N / 16; ++kk)
                MMA_O::template rs<1>(o[0], pa[kk], mnmajor_desc<BLOCK_N>(Vp, kk), 1);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_regs(o[0]);
            wgmma_keep_regs(pa);
        }
        keys.drain();   // every warpgroup is done with sQ (and with no K/V tile, Q copies landed)

        // -- O = O / l and lse; this warp's own Q rows stage O for 16-byte stores
        float inv[1][2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float lse;
            inv[0][h] = softmax.finalize(h, blk.score.mul, lse);
            const int r = wrow + g + h * 8;
            if (t4 == 0 && r < blk.rows) blk.lse_dst(p)[blk.seq.row(i0 + r)] = lse;
        }
        store_out<T, 1, NO, DP>(p, blk, o, inv, sm.q,
                                [](int r, int c) { return sw128<BLOCK_M>(r, c); }, wrow, lane);
        if constexpr (V::SPLIT) finish_split<NT, BLOCK_M>(p, blk);
    }
};

}  // namespace cuflash
