// cuflash: FlashAttention forward on Hopper, warp-specialized (sm_90a), float16 / bfloat16, and
// float32 read as TF32 (precision 'tf32', kernel family 'wgmma_tf32').
// The algorithm is flash_fwd_wgmma.cu's (and cuflash/twin.py's); what changes is who does what:
//   warpgroup 0, the producer, copies Q once and streams the K/V tiles into a ring of STAGES
//     buffers, signalled through mbarriers (barrier.cuh), with few registers: one thread asks
//     the copy engine for each tile (tma.cuh; tensor maps of q, k and v in the parameters), or,
//     where the host made no maps (packed batches; p.tma_loads = 0), its 128 threads copy with
//     cp.async;
//   warpgroups 1..NC, the consumers, each own 64 query rows and run the wgmma forward's step
//     (wgmma_forward.cuh, WgmmaFwdRows: S_t = Q K_tᵀ and O += P_{t-1} V_{t-1} issued together,
//     the softmax of S_t overlapping the second product), with the registers the producer gave up.
// No __syncthreads in the loop: a consumer waits for the tile it needs (full barriers) and
// hands each buffer back as soon as its product has read it (empty barriers; K after S_t, V
// after P_{t-1} V_{t-1}), so the warpgroups drift apart instead of meeting at every tile. The
// consumers take turns issuing their products (PINGPONG, named barriers: FlashAttention-3's
// warp scheduler barriers), so that one's softmax runs while the other's products hold the
// tensor cores.
//
// float32 (TF32) takes the operands flash_fwd_wgmma_tf32.cu takes (tf32_tiles.cuh): the host's
// staged K and Vᵀ (rounded; Vᵀ because .tf32 has no transposed B), streamed by the producer's
// cp.async copies, and Q rounded in place by each consumer warpgroup, its own 64 rows, once Q
// has landed.
//
// Versions (predictions and results in NOTES.md):
//   v16  first warp-specialized forward: cp.async producer, 2 consumer warpgroups.
//   v30  the producer's loads by the copy engine (one thread, TMA) where the host made maps.
//   v42  float32 as TF32 (the TF32 forward without its block-wide barrier per key tile).
//
// Grid: (ceil(T / BLOCK_M), sequences·heads) (block.cuh, QueryBlock). Block: NT = 128·(NC + 1)
// threads, BLOCK_M = 64·NC.
#pragma once
#include "barrier.cuh"
#include "tf32_tiles.cuh"
#include "tma.cuh"
#include "wgmma_forward.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V>
struct FwdWgmmaWs {
    // Query rows 64·c .. of the tile on consumer warpgroup c, K/V tiles through a ring (barrier.cuh).
    // Registers per thread after the hand-over (RegisterSplit): the consumers' many, the
    // producer's few. d > 64: 224 (216 kept the causal ALiBi consumer from spilling 8 bytes
    // before v30, NOTES v17; with the copy-engine producer beside it, the causal softcap + ALiBi
    // consumer spilled 4 bytes at 216 and none at 224), the producer gets 56; d = 64: the
    // producer spills 16 bytes at 72 (its source pointers and the block's setup that the
    // epilogue reads again), 88/208 spill nowhere. float32 (TF32): 224 at every d (at d = 64 208
    // spilled 44 bytes: P as TF32 A fragments takes 64 registers at 128 keys), the producer's 56
    // enough once it steps its sources (Tf32StagedKV::Stream; NOTES v42).
    // One consumer warpgroup (BLOCK_M = 64, two blocks a multiprocessor: 128 registers a thread
    // at launch): 176, the producer 80 (at 208 / 48 the producer spilled 72-160 bytes; at 168 /
    // 88 the window + softcap consumer 28). Three (BLOCK_M = 192, d <= 64: 128 registers a
    // thread at launch): 160, the producer 32, copy-engine loads only (kTmaOnly); at 152 the
    // consumers spilled 96-164 bytes and had their wgmma serialized (v89).
    using Ws = WarpSpecialized<DP, BLOCK_M, NT, STAGES,
                               (BLOCK_M == 64 ? 176 : BLOCK_M == 192 ? 160
                                : DP > 64 || sizeof(T) == 4 ? 224 : 208)>;
    static constexpr int NC = Ws::NC;
    static constexpr bool PINGPONG = NC > 1;
    using Params = FwdParams<T, float>;
    using Block = QueryBlock<BLOCK_M, V, Params, float>;
    static_assert(!V::SPLIT && V::CACHE == kNoCache, "split-KV and KV caches run on FwdWgmma");
    static constexpr bool kTf32 = sizeof(T) == 4;   // float32 read as TF32 (tf32_tiles.cuh)
    using Tiles = SwizzledTiles<DP, 128, int(sizeof(T))>;   // the producer warpgroup's copies
    // Tensor maps describe whole (sequences, heads, rows, d) arrays: not a packed batch's rows
    // (nor TF32's staged Vᵀ: its copies are cp.async)
    static constexpr bool kTma = V::PACKED == kUnpacked && !kTf32;
    // Three consumer warpgroups (BLOCK_M = 192) leave the producer 32 registers, in which only
    // the copy engine's loads fit (its cp.async copies spilled 176-200 bytes, NVRTC 13.0): the
    // host gives this kernel tensor maps always (ops.ForwardLaunch; plan.without_tensor_maps
    // runs another tile where it cannot)
    static constexpr bool kTmaOnly = NC == 3;
    static_assert(!kTmaOnly || kTma, "three consumer warpgroups: copy-engine loads only");

    struct Smem : FwdTiles<T, DP, BLOCK_M, BLOCK_N, STAGES> {   // pipeline.cuh
        Mbarrier q_full;
        Mbarrier k_full[STAGES], v_full[STAGES];     // the producer's copies landed
        Mbarrier k_empty[STAGES], v_empty[STAGES];   // every consumer warp is done reading
        // producers: the threads whose copies fill a buffer (128, or one asking the copy engine)
        __device__ __forceinline__ void init_barriers(unsigned producers) {
            q_full.init(producers);
            for (int s = 0; s < STAGES; ++s) {
                k_full[s].init(producers);
                v_full[s].init(producers);
                k_empty[s].init(4 * NC);             // one arrival per consumer warp
                v_empty[s].init(4 * NC);
            }
        }
    };
    static constexpr int kSmemBytes = smem_budget<Smem, 1024>();   // + alignment of the first panel

    static __device__ __forceinline__ void run(const Params& p) {
        const Block blk(p);
        if (!blk.active) return;
        const bool tma = kTmaOnly || (kTma && p.tma_loads);
        Smem& sm = ws_smem<Smem>(kSmemBytes, tma ? 1u : 128u);
        specialize<Ws>([&] {
                           const TileIter kv = blk.template key_tiles<BLOCK_N>();
                           if constexpr (!kTmaOnly) {
                               if (!tma) return produce(p, blk, kv, sm);
                           }
                           if (threadIdx.x == 0) produce_tma(p, blk, kv, sm);
                       },
                       [&] {
                           const TileIter kv = blk.template key_tiles<BLOCK_N>();
                           Consumer(sm, threadIdx.x / 128 - 1, kv.n).run(p, blk, kv);
                       });
    }

    // Warpgroup 0: Q, then K_t and V_t into stage t % STAGES once the consumers gave it back
    static __device__ __forceinline__ void produce(const Params& p, const Block& blk,
                                                   const TileIter& kv, Smem& sm) {
        load_query_rows<BLOCK_M, Tiles>(sm.q, blk, p.q, p.q_stride, p.d);
        sm.q_full.arrive_on_copies();
        if constexpr (kTf32) {
            produce_staged(p, blk, kv, sm);
        } else {
            auto kvs = kv_stream<BLOCK_N, Tiles>(blk, p, kv);
            for (int t = 0; t < kv.n; ++t) {
                const StageRing<STAGES> r(t);
                sm.k_empty[r.stage].wait(r.empty_parity());
                kvs.load(sm.kv.k[r.stage], sm.kv.v[r.stage], t, [&] {
                    sm.k_full[r.stage].arrive_on_copies();
                    sm.v_empty[r.stage].wait(r.empty_parity());
                });
                sm.v_full[r.stage].arrive_on_copies();
            }
        }
        cp_async_wait<0>();   // nothing in flight when the producer's threads end
    }

    // float32: the host's staged K and Vᵀ tiles (tf32_tiles.cuh), in the same ring; tiles in
    // order: each thread steps its two sources (Tf32StagedKV::Stream), else (a mask_mod's tile
    // lists) each tile's addresses computed
    static __device__ __forceinline__ void produce_staged(const Params& p, const Block& blk,
                                                          const TileIter& kv, Smem& sm) {
        using KV = Tf32StagedKV<DP, BLOCK_N, 128>;
        typename KV::Stream kvs(p, blk, kv.n > 0 ? kv.start(0, BLOCK_N) : 0);
        for (int t = 0; t < kv.n; ++t) {
            const StageRing<STAGES> r(t);
            const int j0 = kv.start(t, BLOCK_N);
            sm.k_empty[r.stage].wait(r.empty_parity());
            if constexpr (Block::kInOrder) kvs.load_k(sm.kv.k[r.stage]);
            else KV::load_k(sm.kv.k[r.stage], p, blk, j0);
            sm.k_full[r.stage].arrive_on_copies();
            sm.v_empty[r.stage].wait(r.empty_parity());
            if constexpr (Block::kInOrder) kvs.load_vt(sm.kv.v[r.stage]);
            else KV::load_vt(sm.kv.v[r.stage], p, blk, j0);
            sm.v_full[r.stage].arrive_on_copies();
        }
    }

    // Thread 0 of warpgroup 0: the same loads by the copy engine, each tile announced on its
    // full barrier with its bytes (rows and columns outside the arrays land as zeros)
    static __device__ __forceinline__ void produce_tma(const Params& p, const Block& blk,
                                                       const TileIter& kv, Smem& sm) {
        const Seq& s = blk.seq;
#pragma unroll
        for (int m = 0; m < 3; ++m) tma_prefetch(p.tma[m]);
        tma_load_tile<BLOCK_M, DP>(sm.q, p.tma[0], blk.i0, s.h, s.b, sm.q_full);
#pragma unroll 1
        for (int t = 0; t < kv.n; ++t) {
            const StageRing<STAGES> r(t);
            const int j0 = kv.start(t, BLOCK_N);
            sm.k_empty[r.stage].wait(r.empty_parity());
            tma_load_tile<BLOCK_N, DP>(sm.kv.k[r.stage], p.tma[1], j0, s.hk, s.b,
                                       sm.k_full[r.stage]);
            sm.v_empty[r.stage].wait(r.empty_parity());
            tma_load_tile<BLOCK_N, DP>(sm.kv.v[r.stage], p.tma[2], j0, s.hk, s.b,
                                       sm.v_full[r.stage]);
        }
    }

    // Warpgroup 1 + c: query rows 64·c .. 64·c + 63 of the tile (WgmmaFwdRows), and its turns
    // at the tensor cores: consumer c issues after c - 1 (c = 0 after the last one's previous
    // turn); each issues n + 1 groups of products (none when n = 0)
    struct Consumer {
        Smem& sm;
        const int c, lane, turns;
        const NamedBarrier my_turn, next_turn;
        int turn = 0;

        __device__ __forceinline__ Consumer(Smem& s, int c_, int n)
            : sm(s), c(c_), lane(threadIdx.x % 32), turns(n > 0 ? n + 1 : 0), my_turn{1 + c_, 256},
              next_turn{1 + (c_ + 1) % NC, 256} {}

        // The step's hooks (wgmma_forward.cuh) for K in stage k and V in stage v
        struct Hooks {
            Consumer& self;
            int k, v;
            __device__ __forceinline__ void turn() const {
                if constexpr (PINGPONG) self.my_turn.sync();
            }
            // After a group of products: the next consumer's turn (the last consumer's last
            // group has no one after it)
            __device__ __forceinline__ void issued() const {
                if constexpr (PINGPONG) {
                    if (self.c < NC - 1 || ++self.turn < self.turns) self.next_turn.arrive();
                }
            }
            __device__ __forceinline__ void k_read() const { self.release(self.sm.k_empty[k]); }
            __device__ __forceinline__ void v_read() const { self.release(self.sm.v_empty[v]); }
        };
        __device__ __forceinline__ void release(Mbarrier& b) const {
            b.arrive_per_warp();
        }

        __device__ __forceinline__ void run(const Params& p, const Block& blk, const TileIter& kv) {
            WgmmaFwdRows<T, DP, BLOCK_M, BLOCK_N, Block> rows(blk, sm.q, c, threadIdx.x / 32 - 4,
                                                              lane);
            if constexpr (PINGPONG) {
                if (c == NC - 1 && kv.n > 0) next_turn.arrive();   // consumer 0 goes first
            }
            sm.q_full.wait(0);
            if constexpr (kTf32) {   // this warpgroup's 64 rows of Q rounded, seen by its wgmma
                round_tf32_tile<BLOCK_M, DP, 128, 64>(sm.q, threadIdx.x % 128, 64 * c);
                fence_proxy_async();
                NamedBarrier{1 + NC + c, 128}.sync();
            } else {
                fence_proxy_async();
            }
            if (kv.n > 0) {
                const StageRing<STAGES> r(0);
                sm.k_full[r.stage].wait(r.full_parity());
                fence_proxy_async();
                rows.template step<true>(kv, 0, sm.kv.k[r.stage], nullptr, Hooks{*this, r.stage, 0});
            }
            for (int t = 1; t < kv.n; ++t) {
                const StageRing<STAGES> r(t), prev(t - 1);
                sm.k_full[r.stage].wait(r.full_parity());
                sm.v_full[prev.stage].wait(prev.full_parity());
                fence_proxy_async();
                rows.template step<false>(kv, t, sm.kv.k[r.stage], sm.kv.v[prev.stage],
                                          Hooks{*this, r.stage, prev.stage});
            }
            if (kv.n > 0) {
                const StageRing<STAGES> last(kv.n - 1);
                sm.v_full[last.stage].wait(last.full_parity());
                fence_proxy_async();
                rows.last_product(sm.kv.v[last.stage], Hooks{*this, 0, last.stage});
            }
            // this warp's own Q rows (its products are done with them) stage O
            rows.epilogue(p, sm.q);
        }
    };
};

}  // namespace cuflash
