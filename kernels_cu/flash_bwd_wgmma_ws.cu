// cuflash: the backward on Hopper, warp-specialized (sm_90a), float16 / bfloat16.
// The algorithm is flash_bwd_wgmma.cu's DkdvWgmma (and cuflash/twin.py's); what changes is who
// does what, as flash_fwd_wgmma_ws.cu does for the forward:
//   warpgroup 0, the producer, copies the block's K and V tiles once and streams the query tiles
//     (Q, dO, lse·log2 e, D: stage_q) of every query head of the block's chunk into a ring of
//     STAGES buffers, signalled through mbarriers (barrier.cuh), with few registers: thread 0
//     asks the copy engine for the tiles (tma.cuh) while every producer thread stores lse·log2 e
//     and D (a packed batch: cp.async copies of every producer thread);
//   warpgroups 1..NC, the consumers, each own 64 keys of the tile and run the wgmma dK/dV step
//     (wgmma_backward.cuh, WgmmaDkdvStep) with the registers the producer gave up.
// No __syncthreads in the loop: a consumer waits for the query tile it needs (full barriers) and
// hands the buffer back once its products have read it (empty barriers), so the consumers drift
// apart and one's exponentials run while the other's products hold the tensor cores. With the
// block-barrier ring of DkdvWgmma the dK/dV kernel kept the tensor pipe 52% busy with two warps
// per scheduler, most cycles without an eligible warp (ncu, NOTES v18).
//
// Versions (predictions and results in NOTES.md):
//   v18  first warp-specialized dK/dV and dQ kernels: cp.async producer, 2 consumer warpgroups.
//   v20  atomic dQ in the dK/dV kernel (deterministic=False, explicit tiles): dS to shared
//        memory, dQ = dS·K on the consumers in turns, red.global into dq_accum.
//   v30  the tiles by the copy engine (TMA): the dK/dV kernel's always where unpacked (the host
//        copies arrays it cannot map), the dQ kernel's where the host made maps.
//
// Grid: (key tiles, chunks·sequences·kv heads) (block.cuh, KeyBlock). Block: NT = 128·(NC + 1)
// threads, BLOCK_N = 64·NC keys. DqWgmmaWs below: the dQ pass, warp-specialized the same way.
#pragma once
#include "barrier.cuh"
#include "tma.cuh"
#include "wgmma_backward.cuh"

namespace cuflash {

// Whether a backward kernel's tiles come by the copy engine: tensor maps describe whole
// (sequences, heads, rows, d) arrays (not a packed batch's rows), in boxes of 64 rows
template <class V, int BLOCK_M, int BLOCK_N>
constexpr bool kBwdTma = V::PACKED == kUnpacked && BLOCK_M % 64 == 0 && BLOCK_N % 64 == 0;

// The atomic-dQ kernel's dS tiles: for two query tiles in turn, BLOCK_M queries × the block's
// N·64 keys as N panels of 64 keys (128-byte swizzle: each panel 1024-byte aligned), panel c
// written by consumer warpgroup c; nothing without atomic dQ
template <typename T, int BLOCK_M, int N, bool ON>
struct DsTiles {
    alignas(1024) T ds[2][N * BLOCK_M * 64];
};
template <typename T, int BLOCK_M, int N>
struct DsTiles<T, BLOCK_M, N, false> {};

// The atomic-dQ kernel's float dQ on its way to dq_accum by the copy engine (unpacked runs):
// per consumer warpgroup one panel of 64 query rows × 64 columns, as the two boxes of 32 columns
// that the map of dq_accum reads, 128-byte swizzled (tma.cuh sw128_f32); nothing otherwise
template <int N, bool ON>
struct DqPanels {
    alignas(1024) float dq[N][2][64 * 32];
};
template <int N>
struct DqPanels<N, false> {};

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, bool ATOMIC_DQ, class V,
          typename G = T>
struct DkdvWgmmaWs {
    // Every tile of an unpacked run by the copy engine (the host copies arrays it cannot map,
    // ops._backward_maps); a packed batch's tiles by cp.async
    static constexpr bool kTma = kBwdTma<V, BLOCK_M, BLOCK_N>;
    // atomic dQ's reductions: by the copy engine (one per box of dq_accum) where the tiles come by
    // it, else red.global from the consumers' registers (a packed batch)
    // (the two float panels, 32 KB, do not fit beside a third stage at d = 128: the reductions
    // of those tiles stay red.global)
    static constexpr bool kTmaDq = ATOMIC_DQ && kTma && (DP <= 64 || STAGES == 2);
    // Keys 64·c .. of the tile on consumer warpgroup c, query tiles through a ring (barrier.cuh).
    // Registers per thread after the hand-over (RegisterSplit): the consumers hold dK and dV
    // (DP / 2 floats each per thread) beside Sᵀ and dPᵀ. d > 64: the cp.async producer at 40
    // spilled 8-12 bytes at d = 128 (232 / 40), 56 does not; the copy-engine producer needs
    // few, and at 224 its window + ALiBi consumer spilled 8 bytes, at 232 none (NOTES v30).
    using Ws = WarpSpecialized<DP, BLOCK_N, NT, STAGES, (DP > 64 ? (kTma ? 232 : 224) : 208)>;
    // dQ's product: where each consumer warpgroup has a 64-column panel of its own (d = 128 with
    // two), both take part in every tile, warpgroup c its panel c over the block's keys
    // (FlashAttention-3's split; the warpgroups meet at each tile's dS): 1.045-1.078× the turns
    // with the same reductions (v32); else tile n's whole product on warpgroup n % 2, the other
    // going on (v20)
    static constexpr bool kSplitDq = kTmaDq && DP / 64 == Ws::NC;
    using Params = BwdParams<T, float, G>;   // G: the gradients' type (params.cuh)
    using Block = KeyBlock<BLOCK_N, V, Params>;
    using Head = GroupHead<BLOCK_M, BLOCK_N, V, Params, float>;
    using Step = WgmmaDkdvStep<T, DP, BLOCK_M, BLOCK_N>;
    using Tiles = typename Ws::Tiles;   // the producer warpgroup's copies

    static_assert(!ATOMIC_DQ || BLOCK_M == 64, "atomic dQ: one m64 product per query tile");

    struct Smem : DkdvTiles<T, DP, BLOCK_M, BLOCK_N, STAGES>,
                  DsTiles<T, BLOCK_M, Ws::NC, ATOMIC_DQ>, DqPanels<Ws::NC, kTmaDq> {
        Mbarrier kv_full;                  // the resident K and V landed
        StageBarriers<STAGES> q_bar;       // full: a query tile's copies landed and its lse2, D
                                           // stored; empty: every consumer warp is done with it
        // K and V: the copy engine's bytes announced by one thread, or each producer thread's
        // copies; a query tile: with the copy engine one arrival announcing Q and dO beside each
        // producer thread's after its lse2 and D stores, else each thread's copies and stores.
        // One arrival per consumer warp empties a stage.
        __device__ __forceinline__ void init_barriers() {
            kv_full.init(kTma ? 1 : 128);
            q_bar.init(kTma ? 128 + 1 : 2 * 128, 4 * Ws::NC);
        }
    };
    static constexpr int kSmemBytes = smem_budget<Smem, 1024>();   // + alignment of the first panel

    static __device__ __forceinline__ void run(const Params& p) {
        const Block kb(p);
        if (!kb.active) return;
        Smem& sm = ws_smem<Smem>(kSmemBytes);
        specialize<Ws>(
            [&] {
                if constexpr (kTma) produce_tma(p, kb, sm);
                else produce(p, kb, sm);
                // a group sum over ranks (ranks > 1) meets at block barriers: the producer takes
                // part with nothing to add
                store_dkdv(p, kb, [] {}, NoTile{}, NoTile{});
            },
            [&] { consume(p, kb, sm); });
    }

    // Each query tile t of each query head of the block's chunk, in the order the producer
    // streams them: body(head, t, r), r the ring slot of the n-th tile (n counts over the heads)
    template <class Body>
    static __device__ __forceinline__ void for_each_tile(const Params& p, const Block& kb,
                                                         Body&& body) {
        for_each_group_tile<Head>(p, kb, [&](const Head& head, int t, int n) {
            body(head, t, StageRing<STAGES>(n));
        });
    }

    // Warpgroup 0: K and V, then each query tile of each query head of the chunk into its stage
    // once the consumers gave it back
    static __device__ __forceinline__ void produce(const Params& p, const Block& kb, Smem& sm) {
        load_key_rows<BLOCK_N, Tiles>(sm.k, kb, p.k, p.k_stride, p.d);
        load_key_rows<BLOCK_N, Tiles>(sm.v, kb, p.v, p.v_stride, p.d);
        sm.kv_full.arrive_on_copies();
        for_each_tile(p, kb, [&](const Head& head, int t, const StageRing<STAGES>& r) {
            sm.q_bar.empty[r.stage].wait(r.empty_parity());
            stage_q<BLOCK_M, 128, Tiles>(sm.q[r.stage], sm.dout[r.stage], sm.lse2[r.stage],
                                         sm.D[r.stage], p, head.seq, head.tiles.start(t, BLOCK_M));
            sm.q_bar.full[r.stage].arrive_on_copies();
            sm.q_bar.full[r.stage].arrive();   // after this thread's lse2 and D stores (release)
        });
        cp_async_wait<0>();   // nothing in flight when the producer's threads end
    }

    // The same by the copy engine: thread 0 asks for K and V, then for each query tile's Q and
    // dO, while every producer thread stores its rows' lse·log2 e and D and then arrives
    static __device__ __forceinline__ void produce_tma(const Params& p, const Block& kb, Smem& sm) {
        const bool issuer = threadIdx.x == 0;
        if (issuer) {
            tma_load_pair<BLOCK_N, DP, 64>(sm.k, p.tma[1], sm.v, p.tma[2], kb.j0, kb.seq.hk,
                                           kb.seq.b, sm.kv_full);
        }
        for_each_tile(p, kb, [&](const Head& head, int t, const StageRing<STAGES>& r) {
            const int i0 = head.tiles.start(t, BLOCK_M);
            Mbarrier& full = sm.q_bar.full[r.stage];
            sm.q_bar.empty[r.stage].wait(r.empty_parity());
            if (issuer)
                tma_load_pair<BLOCK_M, DP, 64>(sm.q[r.stage], p.tma[0], sm.dout[r.stage], p.tma[3],
                                               i0, head.seq.h, head.seq.b, full);
            stage_q_stats<BLOCK_M, 128>(sm.lse2[r.stage], sm.D[r.stage], p, head.seq, i0);
            full.arrive();   // after this thread's lse2 and D stores (release)
        });
    }

    // Warpgroup 1 + c: keys 64·c .. 64·c + 63 of the tile
    static __device__ __forceinline__ void consume(const Params& p, const Block& kb, Smem& sm) {
        const int warp = threadIdx.x / 32 - 4, lane = threadIdx.x % 32;   // among the consumers
        const int wkey = warp * 16;                                       // its first key
        float dK[Step::NO][4], dV[Step::NO][4];   // keys wkey + g and wkey + g + 8
        zero_fragments(dK);
        zero_fragments(dV);
        const T* sKw = sm.k + (warp / 4) * 64 * 64;   // this warpgroup's 64 keys of panel 0
        const T* sVw = sm.v + (warp / 4) * 64 * 64;
        sm.kv_full.wait(0);
        int n = 0;   // tiles so far: the dS buffer (atomic dQ) alternates
        for_each_tile(p, kb, [&](const Head& head, int t, const StageRing<STAGES>& r) {
            sm.q_bar.full[r.stage].wait(r.full_parity());
            fence_proxy_async();
            const int i0 = head.tiles.start(t, BLOCK_M);
            const StagedQuery<T, float> staged{sm.q[r.stage], sm.dout[r.stage], sm.lse2[r.stage],
                                               sm.D[r.stage]};
            const int parity = n++ & 1;   // atomic dQ: this tile's dS buffer
            Step::run(dK, dV, sKw, sVw, head, t, i0, kb.j0 + wkey, lane, staged,
                      [&](const unsigned (&sa)[BLOCK_M / 16][4]) {
                          if constexpr (ATOMIC_DQ)
                              store_ds(sm.ds[parity] + (warp / 4) * BLOCK_M * 64, sa, warp % 4,
                                       lane);
                      });
            sm.q_bar.empty[r.stage].arrive_per_warp();
            if constexpr (ATOMIC_DQ) add_dq(p, head.seq, i0, sm, parity, warp, lane);
        });
        if constexpr (kTmaDq)   // the reductions done before the block's shared memory goes
            if (threadIdx.x % 128 == 0) bulk_wait<0>();
        store_dkdv_fragments(p, kb, dK, dV, wkey, lane);   // dK_j, dV_j summed over the group
    }

    // -- atomic dQ (deterministic=False; FlashAttention-2's order of work, on wgmma): after each
    //    query tile the consumers add dQ_i += scale · dS_i,j K_j over the block's BLOCK_N keys j
    //    to the float accumulator dq_accum (rows of d, lse's index), which the host casts. Each
    //    element of dQ_i gets one reduction per key block, as in FlashAttention-3 (per warpgroup's
    //    64 keys it took twice as many, and the backward ran at 0.66-0.76× the deterministic one:
    //    v20, call 61). Measured in turns as below: 0.95-1.03× the deterministic pair at d = 64,
    //    0.80-0.91× at d = 128 (call 63), so deterministic=False's default does not take it.
    // The warp's dSᵀ A fragments (keys wq·16 + 0..15 × the tile's queries) stored transposed,
    // as dS rows (queries) of the warpgroup's buffer: stmatrix .trans writes each 8 × 8 block's
    // columns as rows
    static __device__ __forceinline__ void store_ds(T* ds, const unsigned (&sa)[BLOCK_M / 16][4],
                                                    int wq, int lane) {
        const int key = wq * 16 + ((lane >> 3) & 1) * 8;   // blocks 1 and 3: keys + 8
#pragma unroll
        for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
            const int q = kk * 16 + ((lane >> 4) & 1) * 8 + (lane & 7);   // blocks 2, 3: + 8
            stmatrix_x4_trans(ds + sw128<BLOCK_M>(q, key), sa[kk]);
        }
    }

    // dQ rows i0 + wq·16 + g (+ 8) of this warp, on the consumer warpgroups in turns (tile n
    // on warpgroup n % 2, Ws::NC = 2): dS (A: queries × BLOCK_N keys, K-major panels, one per
    // warpgroup) times the resident K (B, MN-major), both read from shared memory, one product of
    // N = 64 per 64-column panel of dQ, added to dq_accum: by the copy engine (kTmaDq: the panel
    // stored to the warpgroup's DqPanels, two reductions of a box each by its first thread; the
    // panel's next products run while the engine reads it) or by vector reductions. The other
    // warpgroup only signals that its dS panel is stored (bar.arrive) and goes on to the next
    // tile: the two drift half a tile apart, one's products beside the other's exponentials (a
    // barrier of both, with dQ's panels split between them, held them in step: 0.82-0.88× the
    // deterministic backward at d = 128, call 62). The named barrier and the dS buffer alternate
    // with the tile: warpgroup c stores tile n + 2's dS after tile n + 1's barrier, which the other
    // reaches after its tile-n products completed. kSplitDq (d = 128 on the copy engine) takes
    // the split again, with the copy engine's reductions (1.045-1.078× the turns, v32).
    static __device__ __forceinline__ void add_dq(const Params& p, const Seq& seq, int i0,
                                                  Smem& sm, int parity, int warp, int lane) {
        using MMA_Q = Wgmma<64, T>;
        const T* ds = sm.ds[parity];
        const T* sK = sm.k;
        // dQ's 64-column panel pn over the block's keys, added to dq_accum
        auto panel = [&](int pn) {
            float acc[8][4];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BLOCK_N / 16; ++kk)
                MMA_Q::template ss<1>(acc, kmajor_desc<BLOCK_M>(ds, kk),
                                      mnmajor_desc<BLOCK_N>(sK + pn * BLOCK_N * 64, kk), kk > 0);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_regs(acc);
            if constexpr (kTmaDq) {
                store_dq_panel(p, seq, i0, sm, pn, acc, warp, lane);
                return;
            }
            const int wq = warp % 4, g = lane >> 2, t4 = lane & 3;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int i = i0 + wq * 16 + g + h * 8;
                if (i >= seq.T_len) continue;
                float* row = p.dq_accum + seq.row(i) * p.d + pn * 64 + 2 * t4;
#pragma unroll
                for (int jn = 0; jn < 8; ++jn)
                    if (pn * 64 + jn * 8 + 2 * t4 < p.d)
                        red_add_v2(row + jn * 8, acc[jn][2 * h] * p.dq_scale,
                                   acc[jn][2 * h + 1] * p.dq_scale);
            }
        };
        fence_proxy_async();   // the stmatrix stores, before wgmma reads them
        const NamedBarrier ready{1 + parity, 128 * Ws::NC};
        if constexpr (kSplitDq) {   // both dS panels stored: each warpgroup its panel of dQ
            ready.sync();
            panel(warp / 4);   // ptxas spills 64 bytes here at d = 128 (the turns: none)
            return;
        }
        if (warp / 4 != parity) {   // the other warpgroup's turn: hand it this one's dS
            ready.arrive();
            return;
        }
        ready.sync();
#pragma unroll 1   // one panel's accumulators live at a time (unrolled, ptxas spilled at d = 128)
        for (int pn = 0; pn < DP / 64; ++pn) panel(pn);
    }

    // One 64 × 64 panel of scale · dQ (this warpgroup's accumulators, the wgmma m64n64 layout:
    // rows wq·16 + g (+ 8), columns jn·8 + 2·t4 (+ 1)) into dq_accum by the copy engine: once the
    // panel's previous reductions have read the warpgroup's buffer, every thread stores its
    // values swizzled, and after a barrier the first thread asks for the two boxes' reductions
    // (columns past d: none; rows past T: skipped by the engine)
    static __device__ __forceinline__ void store_dq_panel(const Params& p, const Seq& seq, int i0,
                                                          Smem& sm, int pn,
                                                          const float (&acc)[8][4], int warp,
                                                          int lane) {
        const int wg = warp / 4, wq = warp % 4, g = lane >> 2, t4 = lane & 3;
        const bool lead = threadIdx.x % 128 == 0;
        const NamedBarrier mine{3 + wg, 128};
        if (lead) bulk_wait_read<0>();
        mine.sync();
        char* box = reinterpret_cast<char*>(sm.dq[wg][0]);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = wq * 16 + g + h * 8;
#pragma unroll
            for (int jn = 0; jn < 8; ++jn) {
                const int col = jn * 8 + 2 * t4;   // 0..63: box col / 32
                *reinterpret_cast<float2*>(box + (col >> 5) * 64 * 32 * 4 +
                                           sw128_f32(row, col & 31)) =
                    make_float2(acc[jn][2 * h] * p.dq_scale, acc[jn][2 * h + 1] * p.dq_scale);
            }
        }
        fence_proxy_async();   // the stores, before the engine reads them
        mine.sync();
        if (lead) {
#pragma unroll
            for (int b = 0; b < 2; ++b)
                if (pn * 64 + b * 32 < p.d)
                    tma_reduce_add(p.tma[4], sm.dq[wg][b], pn * 64 + b * 32, i0, seq.h, seq.b);
            bulk_commit();
        }
    }
};

// The dQ pass the same way: the producer copies the block's Q and dO tiles once and streams
// the K/V tiles it sees into a ring (kv_stream, as the warp-specialized forward's producer;
// with tensor maps, p.tma_loads, its thread 0 asks the copy engine for them instead);
// warpgroups 1..NC each own 64 queries and run the wgmma dQ step (WgmmaDqStep) against each
// K/V tile, handing the buffer back after their dQ product. Grid: (query tiles, sequences·heads)
// (block.cuh, QueryBlock). Block: NT = 128·(NC + 1) threads, BLOCK_M = 64·NC queries.
template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V,
          typename G = T>
struct DqWgmmaWs {
    // Queries 64·c .. of the tile on consumer warpgroup c, K/V tiles through a ring (barrier.cuh);
    // the consumers' registers hold dQ (DP / 2 floats per thread), S and dP
    using Ws = WarpSpecialized<DP, BLOCK_M, NT, STAGES, 216>;
    using Params = BwdParams<T, float, G>;   // G: the gradients' type (params.cuh)
    using Block = QueryBlock<BLOCK_M, V, Params, float>;
    using Step = WgmmaDqStep<T, DP, BLOCK_M, BLOCK_N>;
    using Tiles = typename Ws::Tiles;   // the producer warpgroup's copies
    static constexpr bool kTma = kBwdTma<V, BLOCK_M, BLOCK_N>;   // where the host made maps

    struct Smem : DqTiles<T, DP, BLOCK_M, BLOCK_N, STAGES> {
        Mbarrier q_full;                   // the resident Q and dO landed
        StageBarriers<STAGES> kv_bar;      // full: a K/V tile's copies landed; empty: every
                                           // consumer warp is done reading it
        // producers: the threads whose copies fill a buffer (128, or one asking the copy engine)
        __device__ __forceinline__ void init_barriers(unsigned producers) {
            q_full.init(producers);
            kv_bar.init(producers, 4 * Ws::NC);   // one arrival per consumer warp
        }
    };
    static constexpr int kSmemBytes = smem_budget<Smem, 1024>();   // + alignment of the first panel

    static __device__ __forceinline__ void run(const Params& p) {
        const Block blk(p);
        if (!blk.active) return;
        Smem& sm = ws_smem<Smem>(kSmemBytes, kTma && p.tma_loads ? 1u : 128u);
        const TileIter kv = blk.template key_tiles<BLOCK_N>();
        specialize<Ws>(
            [&] {
                if (!(kTma && p.tma_loads)) produce(p, blk, kv, sm);
                else if (threadIdx.x == 0) produce_tma(p, blk, kv, sm);
            },
            [&] { consume(p, blk, kv, sm); });
    }

    // Thread 0 of warpgroup 0: the same loads by the copy engine
    static __device__ __forceinline__ void produce_tma(const Params& p, const Block& blk,
                                                       const TileIter& kv, Smem& sm) {
        const Seq& s = blk.seq;
#pragma unroll
        for (int m = 0; m < 4; ++m) tma_prefetch(p.tma[m]);
        tma_load_pair<BLOCK_M, DP, 64>(sm.q, p.tma[0], sm.dout, p.tma[3], blk.i0, s.h, s.b,
                                       sm.q_full);
#pragma unroll 1
        for (int t = 0; t < kv.n; ++t) {
            const StageRing<STAGES> r(t);
            const int j0 = kv.start(t, BLOCK_N);
            sm.kv_bar.empty[r.stage].wait(r.empty_parity());
            tma_load_pair<BLOCK_N, DP, 64>(sm.kv.k[r.stage], p.tma[1], sm.kv.v[r.stage], p.tma[2],
                                           j0, s.hk, s.b, sm.kv_bar.full[r.stage]);
        }
    }

    // Warpgroup 0: Q and dO, then K_t and V_t into stage t % STAGES once the consumers gave it back
    static __device__ __forceinline__ void produce(const Params& p, const Block& blk,
                                                   const TileIter& kv, Smem& sm) {
        load_query_rows<BLOCK_M, Tiles>(sm.q, blk, p.q, p.q_stride, p.d);
        load_query_rows<BLOCK_M, Tiles>(sm.dout, blk, p.dout, p.dout_stride, p.d);
        sm.q_full.arrive_on_copies();
        auto kvs = kv_stream<BLOCK_N, Tiles>(blk, p, kv);
        for (int t = 0; t < kv.n; ++t) {
            const StageRing<STAGES> r(t);
            sm.kv_bar.empty[r.stage].wait(r.empty_parity());
            kvs.load(sm.kv.k[r.stage], sm.kv.v[r.stage], t);
            sm.kv_bar.full[r.stage].arrive_on_copies();
        }
        cp_async_wait<0>();   // nothing in flight when the producer's threads end
    }

    // Warpgroup 1 + c: queries 64·c .. 64·c + 63 of the tile
    static __device__ __forceinline__ void consume(const Params& p, const Block& blk,
                                                   const TileIter& kv, Smem& sm) {
        const int warp = threadIdx.x / 32 - 4, lane = threadIdx.x % 32;   // among the consumers
        const int wrow = warp * 16;                                       // its first query row
        float lse2[2], Dr[2], dQ[1][Step::NO][4];
        dq_row_stats(lse2, Dr, p, blk, blk.i0, wrow, lane >> 2);   // rows wrow + g, wrow + g + 8
        zero_fragments(dQ[0]);
        const T* sQw = sm.q + (warp / 4) * 64 * 64;   // this warpgroup's 64 queries of panel 0
        const T* sdOw = sm.dout + (warp / 4) * 64 * 64;
        sm.q_full.wait(0);
        fence_proxy_async();
        for (int t = 0; t < kv.n; ++t) {
            const StageRing<STAGES> r(t);
            const int j0 = kv.start(t, BLOCK_N);
            sm.kv_bar.full[r.stage].wait(r.full_parity());
            fence_proxy_async();
            Step::run(dQ[0], sQw, sdOw, sm.kv.k[r.stage], sm.kv.v[r.stage], blk.i0, wrow, j0, lane,
                      lse2, Dr, blk.mask, blk.score, blk.template needs_mask<BLOCK_N>(kv, t, j0));
            sm.kv_bar.empty[r.stage].arrive_per_warp();
        }
        // -- dQ_i = dq_scale · Σ_j dS_ij K_j: in T staged in this warp's own Q rows (its products
        //    are done with them) for 16-byte stores; in float (G) the same way, half the columns
        //    a pass
        G* dq = blk.seq.q_row(p.dq, p.dq_stride, blk.i0);
        if constexpr (sizeof(G) == sizeof(T)) {
            float f[1][2] = {{p.dq_scale, p.dq_scale}};
            store_rows_staged<T, 1, Step::NO, DP>(dq, p.d, p.dq_stride[2], blk.rows, dQ, f, sm.q,
                                                  [](int r, int c) { return sw128<BLOCK_M>(r, c); },
                                                  wrow, lane);
        } else {
            store_rows_staged_wide<G, T, Step::NO, DP>(
                dq, p.d, int(p.dq_stride[2]), blk.rows, dQ[0], p.dq_scale, sm.q,
                [](int r, int c) { return sw128<BLOCK_M>(r, c); }, wrow, lane);
        }
    }
};

}  // namespace cuflash
