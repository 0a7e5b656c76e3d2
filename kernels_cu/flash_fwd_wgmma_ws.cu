// cuflash: FlashAttention forward on Hopper, warp-specialized (sm_90a), float16 / bfloat16.
// The algorithm is flash_fwd_wgmma.cu's (and cuflash/twin.py's); what changes is who does what:
//   warpgroup 0, the producer, copies Q once and streams the K/V tiles into a ring of STAGES
//     buffers (cp.async, signalled through mbarriers: barrier.cuh), with few registers;
//   warpgroups 1..NC, the consumers, each own 64 query rows and run flash_fwd_wgmma.cu's step
//     (S_t = Q K_tᵀ and O += P_{t-1} V_{t-1} issued together, the softmax of S_t overlapping the
//     second product), with the registers the producer gave up.
// No __syncthreads in the loop: a consumer waits for the tile it needs (full barriers) and
// hands each buffer back as soon as its product has read it (empty barriers; K after S_t, V
// after P_{t-1} V_{t-1}), so the warpgroups drift apart instead of meeting at every tile. The
// consumers take turns issuing their products (PINGPONG, named barriers: FlashAttention-3's
// warp scheduler barriers), so that one's softmax runs while the other's products hold the
// tensor cores.
//
// Versions (predictions and results in NOTES.md):
//   v16  first warp-specialized forward: cp.async producer, 2 consumer warpgroups.
//
// Grid: (ceil(T / BLOCK_M), sequences·heads) (block.cuh, QueryBlock). Block: NT = 128·(NC + 1)
// threads, BLOCK_M = 64·NC.
#pragma once
#include "barrier.cuh"
#include "mainloop.cuh"
#include "wgmma_tiles.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V>
struct FwdWgmmaWs {
    using Params = FwdParams<T, float>;
    using Block = QueryBlock<BLOCK_M, V, Params, float>;
    static constexpr int NC = BLOCK_M / 64;         // consumer warpgroups
    static constexpr int NS = BLOCK_N / 8;          // 8-column n-tiles of S
    static constexpr int NO = DP / 8;               // 8-column n-tiles of O
    static_assert(BLOCK_M % 64 == 0 && NT == 128 * (NC + 1), "one producer and BLOCK_M / 64 consumer warpgroups");
    static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 256 && DP % 64 == 0 && DP <= 256, "tile sizes");
    static_assert(STAGES >= 2, "two K/V buffers at least: one read, one loading");
    static_assert(!V::SPLIT && V::CACHE == kNoCache, "split-KV and KV caches run on FwdWgmma");
    using MMA_S = Wgmma<BLOCK_N, T>;
    using MMA_O = Wgmma<DP, T>;
    using Tiles = SwizzledTiles<DP, 128>;   // the producer warpgroup's copies (pipeline.cuh)
    using Ring = StageRing<STAGES>;
    // Registers per thread after the hand-over: the producer's few, the consumers' many (the
    // block's 65536 registers: 128·kProducerRegs + 128·NC·kConsumerRegs). A consumer uses up to
    // 184 at d = 128; with fewer than 88 the producer spills (its source pointers and the
    // block's setup that the epilogue reads again), with 40/232 by 28-88 bytes (NOTES v16).
    static_assert(NC == 2, "two consumer warpgroups (the register split below)");
    static constexpr int kProducerRegs = 88;
    static constexpr int kConsumerRegs = 208;
    static_assert(128 * kProducerRegs + 128 * NC * kConsumerRegs <= 65536, "register file");
    static constexpr bool PINGPONG = NC > 1;

    struct Smem {                        // 16-bit panels, each a multiple of 1024 bytes
        T q[BLOCK_M * DP];               // the resident query tile; later each warp's O rows
        KVRing<T, STAGES, BLOCK_N * DP> kv;
        Mbarrier q_full;
        Mbarrier k_full[STAGES], v_full[STAGES];     // the producer's copies landed
        Mbarrier k_empty[STAGES], v_empty[STAGES];   // every consumer warp is done reading
    };
    static constexpr int kSmemBytes = sizeof(Smem) + 1024;   // + alignment of the first panel

    static __device__ __forceinline__ void run(const Params& p) {
        const Block blk(p);
        if (!blk.active) return;
        Smem& sm = smem_aligned_1024<Smem>(kSmemBytes);
        if (threadIdx.x == 0) {
            sm.q_full.init(128);                     // each producer thread's copies
            for (int s = 0; s < STAGES; ++s) {
                sm.k_full[s].init(128);
                sm.v_full[s].init(128);
                sm.k_empty[s].init(4 * NC);          // one arrival per consumer warp
                sm.v_empty[s].init(4 * NC);
            }
        }
        __syncthreads();
        if (threadIdx.x < 128) {
            give_regs<kProducerRegs>();
            produce(p, blk, blk.template key_tiles<BLOCK_N>(), sm);
        } else {
            take_regs<kConsumerRegs>();
            const TileIter kv = blk.template key_tiles<BLOCK_N>();
            Consumer(p, blk, kv, sm, threadIdx.x / 128 - 1).run();
        }
    }

    // Warpgroup 0: Q, then K_t and V_t into stage t % STAGES once the consumers gave it back
    static __device__ __forceinline__ void produce(const Params& p, const Block& blk,
                                                   const TileIter& kv, Smem& sm) {
        load_query_rows<BLOCK_M, Tiles>(sm.q, blk, p.q, p.q_stride, p.d);
        sm.q_full.arrive_on_copies();
        auto kvs = kv_stream<BLOCK_N, Tiles>(blk, p, kv);
        for (int t = 0; t < kv.n; ++t) {
            const Ring r(t);
            sm.k_empty[r.stage].wait(r.empty_parity());
            kvs.load(sm.kv.k[r.stage], sm.kv.v[r.stage], t, [&] {
                sm.k_full[r.stage].arrive_on_copies();
                sm.v_empty[r.stage].wait(r.empty_parity());
            });
            sm.v_full[r.stage].arrive_on_copies();
        }
        cp_async_wait<0>();   // nothing in flight when the producer's threads end
    }

    // Warpgroup 1 + c: query rows 64·c .. 64·c + 63 of the tile, its O, m and l, and its turns
    // at the tensor cores: consumer c issues after c - 1 (c = 0 after the last one's previous
    // turn); each issues n + 1 groups of products (none when n = 0)
    struct Consumer {
        const Params& p;
        const Block& blk;
        const TileIter& kv;
        Smem& sm;
        const int c, warp, lane, g, t4, wrow, turns;
        const NamedBarrier my_turn, next_turn;
        int turn = 0;
        float o[1][NO][4];             // unnormalized O rows (g, g+8) of this warp
        OnlineSoftmax<float, 2, 4> softmax;
        unsigned pa[BLOCK_N / 16][4];  // P_{t-1} as A fragments

        __device__ __forceinline__ Consumer(const Params& p_, const Block& b, const TileIter& k,
                                            Smem& s, int c_)
            : p(p_), blk(b), kv(k), sm(s), c(c_), warp(threadIdx.x / 32 - 4),
              lane(threadIdx.x % 32), g(lane >> 2), t4(lane & 3), wrow(warp * 16),
              turns(k.n > 0 ? k.n + 1 : 0), my_turn{1 + c_, 256},
              next_turn{1 + (c_ + 1) % NC, 256} {
            zero_fragments(o[0]);
        }

        // After a group of products: the next consumer's turn (the last consumer's last
        // group has no one after it)
        __device__ __forceinline__ void issued() {
            if constexpr (PINGPONG) {
                if (c < NC - 1 || ++turn < turns) next_turn.arrive();
            }
        }
        __device__ __forceinline__ void release(Mbarrier& b) const {
            if (lane == 0) b.arrive();
        }

        __device__ __forceinline__ void run() {
            if constexpr (PINGPONG) {
                if (c == NC - 1 && kv.n > 0) next_turn.arrive();   // consumer 0 goes first
            }
            sm.q_full.wait(0);
            fence_proxy_async();
            if (kv.n > 0) step<true>(0);
            for (int t = 1; t < kv.n; ++t) step<false>(t);
            if (kv.n > 0) last_product();
            epilogue();
        }

        // Step t (FIRST: t = 0, which has no P_{t-1} V_{t-1}; peeled so that every product is
        // issued on a path all threads of the warpgroup take: ptxas serializes wgmma otherwise)
        template <bool FIRST>
        __device__ __forceinline__ void step(int t) {
            const int j0 = kv.start(t, BLOCK_N);
            const Ring r(t), prev(t + STAGES - 1);   // prev: tile t - 1's stage (t > 0)
            sm.k_full[r.stage].wait(r.full_parity());
            if (!FIRST) sm.v_full[prev.stage].wait(Ring(t - 1).full_parity());
            fence_proxy_async();
            const T* sQw = sm.q + c * 64 * 64;        // this warpgroup's 64 rows of panel 0
            const T* Ks = sm.kv.k[r.stage];
            const T* Vp = sm.kv.v[prev.stage];

            float s[NS][4];
            if constexpr (PINGPONG) my_turn.sync();
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < DP / 16; ++kk)
                MMA_S::ss(s, kmajor_desc<BLOCK_M>(sQw, kk), kmajor_desc<BLOCK_N>(Ks, kk), kk > 0);
            wgmma_commit();
            if constexpr (!FIRST) {
#pragma unroll
                for (int kk = 0; kk < BLOCK_N / 16; ++kk)
                    MMA_O::template rs<1>(o[0], pa[kk], mnmajor_desc<BLOCK_N>(Vp, kk), 1);
                wgmma_commit();
                issued();
                wgmma_wait<1>();         // S_t is done; P_{t-1} V_{t-1} may still run
            } else {
                issued();
                wgmma_wait<0>();
            }
            wgmma_fence_regs(s);
            release(sm.k_empty[r.stage]);

            const int i0 = blk.i0;
            auto frag = [&](int rr, int e) -> float& { return s[e >> 1][2 * rr + (e & 1)]; };
            auto at = [&](int rr, int e, int& i, int& j) {
                i = i0 + wrow + g + rr * 8;
                j = j0 + (e >> 1) * 8 + 2 * t4 + (e & 1);
            };
            modify_and_mask<float, 2, 2 * NS>(frag, at, blk.mask, blk.score,
                                             blk.template needs_mask<BLOCK_N>(kv, t, j0));
            float alpha[2];
            softmax.template update<2 * NS>(frag, blk.score.mul, alpha, Exp2Approx());
            if constexpr (!FIRST) {
                wgmma_wait<0>();
                wgmma_fence_regs(o[0]);
                wgmma_keep_regs(pa);
                release(sm.v_empty[prev.stage]);
            }
            // P_t rounded to T as A fragments, written only now that P_{t-1} V_{t-1} is done
            // with pa (rounded into a second array and copied after the wait, ptxas moved the
            // copies into the next step's products and serialized every wgmma: NOTES v16)
#pragma unroll
            for (int kk = 0; kk < BLOCK_N / 16; ++kk) c_to_a<T>(pa[kk], s[2 * kk], s[2 * kk + 1]);
#pragma unroll
            for (int nn = 0; nn < NO; ++nn)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[0][nn][e] *= alpha[e >> 1];
        }

        // O += P_{n-1} V_{n-1}
        __device__ __forceinline__ void last_product() {
            const Ring last(kv.n - 1);
            sm.v_full[last.stage].wait(last.full_parity());
            fence_proxy_async();
            const T* Vp = sm.kv.v[last.stage];
            if constexpr (PINGPONG) my_turn.sync();
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BLOCK_N / 16; ++kk)
                MMA_O::template rs<1>(o[0], pa[kk], mnmajor_desc<BLOCK_N>(Vp, kk), 1);
            wgmma_commit();
            issued();
            wgmma_wait<0>();
            wgmma_fence_regs(o[0]);
            wgmma_keep_regs(pa);
        }

        // O = O / l and lse; this warp's own Q rows (its products are done with them) stage O
        __device__ __forceinline__ void epilogue() {
            float inv[1][2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float lse;
                inv[0][h] = softmax.finalize(h, blk.score.mul, lse);
                const int rr = wrow + g + h * 8;
                if (t4 == 0 && rr < blk.rows) blk.lse_dst(p)[blk.seq.row(blk.i0 + rr)] = lse;
            }
            store_out<T, 1, NO, DP>(p, blk, o, inv, sm.q,
                                    [](int rr, int col) { return sw128<BLOCK_M>(rr, col); }, wrow,
                                    lane);
        }
    };
};

}  // namespace cuflash
