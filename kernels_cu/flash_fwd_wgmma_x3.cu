// cuflash: float32 attention at float32's accuracy on Hopper's 16-bit tensor cores (sm_90a):
// precision 'highest' as kernel family 'wgmma_f16x3' (NOTES v44; tools/split_study.py is its
// arithmetic in NumPy). Each operand x is scaled by a power of two 2^e into float16's range
// (its block's largest |x| in [2^13, 2^14)) and split x·2^e = hi + lo, hi = f16(x·2^e),
// lo = f16(x·2^e - hi): 22 significant bits, as CUTLASS's 3xTF32, at twice TF32's rate. A
// product a·b is lo_a·hi_b + hi_a·lo_b + hi_a·hi_b (lo·lo is below float32's rounding). The
// tensor core's accumulator truncates, so no running sum stays in it: each k16 step of S = Q Kᵀ
// is summed from zero and added to S on the FMA pipe, and each key tile's P·V from zero, added
// to O as O·alpha + O_tile (tf32.cuh's 'highest' does the same on mma.sync).
// Scales: Q per row, K per key row (both folded into S once per tile: exact), P by 2^14 and V
// per key tile (folded into the O update). With Prod = F16Products<1> (kernel family
// 'wgmma_f16x1', precision 'tf32', opt-in: NOTES v56) the same kernel issues hi·hi alone and
// chains S's k16 steps in the accumulator.
//
// Warp-specialized (flash_fwd_wgmma_ws.cu's shape): warpgroup 0, the producer, copies K's and
// V's hi / lo tiles (128-byte swizzle, as the 16-bit kernels' tiles) and their inverse scales
// into a ring of STAGES buffers, from the staged rows the host made once per call
// (f16x3_stage.cuh: each key row's hi, lo and inverse; K scaled per row, V per key tile);
// warpgroups 1..NC, the consumers, each make the hi / lo of their 64 rows of Q from global
// memory, then per key tile issue the products, run the online softmax (wgmma_forward.cuh,
// wgmma_tile_probs: every mask and score modifier) and add P·V. Unlike the 16-bit kernel, S_{t+1}
// is not issued beside P_t V_t: the registers go to the fresh sums.
//
// Versions (predictions and results in NOTES.md):
//   v45  first version; v48 (call 165, H200): 69-79 TFLOP/s at d = 64 / 128, 1.66-2.08x torch's
//        efficient float32 forward (v45 predicted 3-5x: the fresh k16 sums wait on every step).
//   v49  no turns between the consumers (call 171: +0.8-3.4%).
//   v50  K and V split once per call (f16x3_stage.cuh); the producer only copies (call 172:
//        132-191 TFLOP/s, 1.92-2.41x v49 in the same run).
//   v52  the rows' scales by plain loads and stores (call 175, racecheck's reports moved, stayed).
//
// Grid: (ceil(T / BLOCK_M), sequences·heads) (block.cuh, QueryBlock). Block: NT = 128·(NC + 1)
// threads, BLOCK_M = 64·NC.
#pragma once
#include "barrier.cuh"
#include "f16x3.cuh"
#include "wgmma_forward.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V,
          class Prod = X3>
struct FwdWgmmaX3 : F16ProductKernel<T, V> {
    // Registers after the hand-over: consumers 224 (S, two fresh k-step sums and O in the S
    // phase; P's hi / lo, O_tile and O in the P·V phase: ~160 at d = 128, block_n = 64)
    using Ws = WarpSpecialized<DP, BLOCK_M, NT, STAGES, 224>;
    static constexpr int NC = Ws::NC;
    // No turns (.ab/x3_no_turns.patch, NOTES v49): each consumer's S phase is a chain of KS
    // dependent k16 steps (each waits on the one before it, for its float32 add), so holding the
    // tensor cores' turn through it leaves them idle between steps; without turns the other
    // warpgroup's products fill those gaps.
    static constexpr bool PINGPONG = false;
    using Params = FwdParams<T, float>;
    using Block = QueryBlock<BLOCK_M, V, Params, float>;
    static_assert(DP % 64 == 0 && BLOCK_N % 16 == 0, "whole 128-byte panels, k16 steps");
    static constexpr int NS = BLOCK_N / 8;          // 8-key n-tiles of S
    static constexpr int NO = DP / 8;               // 8-column n-tiles of O
    static constexpr int KS = DP / 16;              // k16 steps of Q·Kᵀ
    static constexpr int NK = BLOCK_N / 16;         // k16 steps of P·V
    using MMA_S = Wgmma<BLOCK_N, __half>;
    using MMA_O = Wgmma<DP, __half>;

    struct Smem {
        // Q's hi and lo: later each warp's O rows (float32: the bytes of both, so that 'tf32'
        // keeps q_lo unwritten for them)
        __half q_hi[BLOCK_M * DP], q_lo[BLOCK_M * DP];
        __half k_hi[STAGES][BLOCK_N * DP], k_lo[STAGES][Prod::lo_halves(BLOCK_N * DP)];
        __half v_hi[STAGES][BLOCK_N * DP], v_lo[STAGES][Prod::lo_halves(BLOCK_N * DP)];
        float k_inv[STAGES][BLOCK_N];   // 1 / each key row's scale
        float v_inv[STAGES];            // 1 / (V's tile scale · 2^14)
        float q_inv[BLOCK_M];           // 1 / each query row's scale
        Mbarrier k_full[STAGES], v_full[STAGES];   // a tile copied, its scales stored
        Mbarrier k_empty[STAGES], v_empty[STAGES];   // every consumer warp is done reading
        __device__ __forceinline__ void init_barriers(unsigned producers) {
            for (int s = 0; s < STAGES; ++s) {
                k_full[s].init(Mbarrier::after_copies(producers));
                v_full[s].init(Mbarrier::after_copies(producers));
                k_empty[s].init(4 * NC);   // one arrival per consumer warp
                v_empty[s].init(4 * NC);
            }
        }
    };
    static constexpr int kSmemBytes = smem_budget<Smem, 1024>();

    static __device__ __forceinline__ void run(const Params& p) {
        const Block blk(p);
        if (!blk.active) return;
        Smem& sm = ws_smem<Smem>(kSmemBytes, 128u);
        specialize<Ws>([&] { produce(p, blk, blk.template key_tiles<BLOCK_N>(), sm); },
                       [&] {
                           const TileIter kv = blk.template key_tiles<BLOCK_N>();
                           Consumer(sm, blk, threadIdx.x / 128 - 1, kv.n).run(p, kv);
                       });
    }

    // Warpgroup 0: for each key tile, K's staged hi / lo rows and their inverses into stage
    // t % STAGES once the consumers gave it back, then V's (p.k and p.v are the staged arrays:
    // StagedRow<DP, Prod::kLo>, f16x3.cuh; every tile lies within them, S_pad keys). Tiles in
    // order: each thread steps its two sources (as pipeline.cuh's KVStream), else (a mask_mod's
    // tile lists) each tile's addresses computed.
    static __device__ __forceinline__ void produce(const Params& p, const Block& blk,
                                                   const TileIter& kv, Smem& sm) {
        const int tid = threadIdx.x;
        const auto k_rows = blk.seq.k_rows(p.k, p.k_stride), v_rows = blk.seq.k_rows(p.v, p.v_stride);
        const __half* k0 = reinterpret_cast<const __half*>(k_rows.base);
        const __half* v0 = reinterpret_cast<const __half*>(v_rows.base);
        const int kld = 2 * k_rows.ld, vld = 2 * v_rows.ld;   // halves
        StagedKV<BLOCK_N, DP, Block::kInOrder> kvs(k0, kld, v0, vld,
                                                   kv.n > 0 ? kv.start(0, BLOCK_N) : 0);
#pragma unroll 1
        for (int t = 0; t < kv.n; ++t) {
            const StageRing<STAGES> r(t);
            const int j0 = kv.start(t, BLOCK_N);
            kvs.seek(j0);
            sm.k_empty[r.stage].wait(r.empty_parity());
            copy_staged_tiles<BLOCK_N, DP, Prod::kLo>(sm.k_hi[r.stage], sm.k_lo[r.stage], kvs.k_src,
                                                      k0, kld);
            store_staged_inverses<BLOCK_N, DP, Prod::kLo>(sm.k_inv[r.stage], k0 + size_t(j0) * kld, kld, tid);
            sm.k_full[r.stage].arrive_after_copies();
            sm.v_empty[r.stage].wait(r.empty_parity());
            copy_staged_tiles<BLOCK_N, DP, Prod::kLo>(sm.v_hi[r.stage], sm.v_lo[r.stage], kvs.v_src,
                                                      v0, vld);
            if (tid == 0) sm.v_inv[r.stage] = StagedRow<DP, Prod::kLo>::inverse(v0 + size_t(j0) * vld);   // the tile's
            sm.v_full[r.stage].arrive_after_copies();
            kvs.next();
        }
        cp_async_wait<0>();   // nothing in flight when the producer's threads end
    }

    // Warpgroup 1 + c: query rows 64·c .. 64·c + 63 of the tile, and its turns at the tensor
    // cores (two a key tile: S's products, then P·V's): consumer c issues after c - 1 (c = 0
    // after the last one's previous turn).
    struct Consumer {
        Smem& sm;
        const Block& blk;
        const int c, lane, g, t4, wrow, turns;   // wrow: this warp's first row in the tile
        const NamedBarrier my_turn, next_turn;
        int turn = 0;
        float o[1][NO][4];                // unnormalized O rows (g, g + 8) of this warp
        OnlineSoftmax<float, 2, 4> softmax;

        __device__ __forceinline__ Consumer(Smem& s, const Block& b, int c_, int n)
            : sm(s), blk(b), c(c_), lane(threadIdx.x % 32), g(lane >> 2), t4(lane & 3),
              wrow((threadIdx.x / 32 - 4) * 16), turns(2 * n), my_turn{1 + c_, 256},
              next_turn{1 + (c_ + 1) % NC, 256} {
            zero_fragments(o[0]);
        }

        __device__ __forceinline__ void take_turn() const {
            if constexpr (PINGPONG) my_turn.sync();
        }
        // After a turn's products are issued: the next consumer's turn (the last consumer's
        // last turn has no one after it)
        __device__ __forceinline__ void end_turn() {
            if constexpr (PINGPONG) {
                if (c < NC - 1 || ++turn < turns) next_turn.arrive();
            }
        }
        __device__ __forceinline__ void release(Mbarrier& b) const {
            b.arrive_per_warp();
        }

        // This warpgroup's 64 rows of Q, from global memory, as hi / lo with a scale per row
        template <class P>
        __device__ __forceinline__ void make_q(const P& p) {
            split_global_rows<BLOCK_M, DP, Prod::kLo>(sm.q_hi, sm.q_lo, sm.q_inv, 64 * c, threadIdx.x % 128,
                                           blk.seq.q_row(p.q, p.q_stride, blk.i0), p.q_stride[2],
                                           blk.rows, p.d);
        }

        template <class P>
        __device__ __forceinline__ void run(const P& p, const TileIter& kv) {
            if constexpr (PINGPONG) {
                if (c == NC - 1 && kv.n > 0) next_turn.arrive();   // consumer 0 goes first
            }
            make_q(p);
            fence_proxy_async();
            NamedBarrier{1 + NC + c, 128}.sync();   // this warpgroup's Q rows written
            const float q_inv[2] = {sm.q_inv[wrow + g], sm.q_inv[wrow + g + 8]};
            // panel 0 of this warpgroup's rows (64 halves a row in a panel)
            const __half* qh = sm.q_hi + 64 * c * 64;
            const __half* ql = sm.q_lo + 64 * c * 64;
            for (int t = 0; t < kv.n; ++t) step(kv, t, qh, ql, q_inv);
            // this warp's own rows of Q's hi / lo (its products are done with them) stage O, as
            // float32 (the same bytes: a float32 tile of BLOCK_M rows, sw128<BLOCK_M, 4>)
            wgmma_rows_epilogue<BLOCK_M, DP, NO>(p, *this, reinterpret_cast<float*>(sm.q_hi));
        }

        // Key tile t: S from fresh k16 sums (two buffers: one step's products run while the
        // other's sum is added), the softmax, then O_tile = P·V from zero, added to O
        __device__ __forceinline__ void step(const TileIter& kv, int t,
                                             const __half* qh, const __half* ql,
                                             const float (&q_inv)[2]) {
            const StageRing<STAGES> r(t);
            const __half* kh = sm.k_hi[r.stage];
            const __half* kl = sm.k_lo[r.stage];
            float s[NS][4], part[2][NS][4];
            zero_fragments(s);
            sm.k_full[r.stage].wait(r.full_parity());
            fence_proxy_async();   // the copies (generic proxy), before wgmma reads them
            take_turn();
            const auto descs = [&](int kk) { return x3_kmajor<BLOCK_M, BLOCK_N>(qh, ql, kh, kl, kk); };
            if constexpr (Prod::kChain) {   // one product, its k16 steps chained in s
                wgmma_fence();
                Prod::template chain_ss<MMA_S, KS>(s, descs);
                wgmma_commit();
                end_turn();
                wgmma_wait<0>();
                wgmma_fence_regs(s);
            } else {
#pragma unroll
                for (int kk = 0; kk < KS; ++kk) {
                    const int b = kk & 1;
                    wgmma_fence();
                    Prod::template step_ss<MMA_S>(part[b], descs(kk));
                    wgmma_commit();
                    if (kk == KS - 1) end_turn();
                    if (kk > 0) {
                        wgmma_wait<1>();
                        add_fresh(s, part[b ^ 1]);
                    }
                }
                wgmma_wait<0>();
                add_fresh(s, part[(KS - 1) & 1]);
            }
            // each row's and each key's factor (f16x3.cuh's unscale)
            unscale(s, q_inv, sm.k_inv[r.stage], t4);
            release(sm.k_empty[r.stage]);

            float alpha[2];
            wgmma_tile_probs<BLOCK_N>(s, blk, kv, t, wrow, g, t4, softmax, alpha);
            unsigned p_hi[NK][4], p_lo[NK][4];
            split_c_to_a<NK>(s, {kX3PScale, kX3PScale}, p_hi, p_lo);
            const __half* vh = sm.v_hi[r.stage];
            const __half* vl = sm.v_lo[r.stage];
            float ot[NO][4];
            sm.v_full[r.stage].wait(r.full_parity());
            fence_proxy_async();
            take_turn();
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < NK; ++kk)
                Prod::template step_rs<MMA_O>(ot, p_hi[kk], p_lo[kk], mnmajor_desc<BLOCK_N>(vh, kk),
                                              mnmajor_desc<BLOCK_N>(vl, kk), kk == 0);
            wgmma_commit();
            end_turn();
            wgmma_wait<0>();
            wgmma_fence_regs(ot);
            Prod::keep(p_hi, p_lo);
            const float v_inv = sm.v_inv[r.stage];
            release(sm.v_empty[r.stage]);
#pragma unroll
            for (int n = 0; n < NO; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    o[0][n][e] = fmaf(ot[n][e], v_inv, o[0][n][e] * alpha[e >> 1]);
        }
    };
};

}  // namespace cuflash
