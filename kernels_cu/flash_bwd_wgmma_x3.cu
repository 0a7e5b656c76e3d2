// cuflash: the float32 backward at float32's accuracy on Hopper's 16-bit tensor cores (sm_90a):
// precision 'highest' as kernel family 'wgmma_f16x3' (f16x3.cuh: operands split in two float16
// parts, three products a pair; NOTES v46; tools/split_study_bwd.py is its arithmetic in NumPy);
// with Prod = F16Products<1>, precision 'tf32' as family 'wgmma_f16x1' (one product a pair, the
// sums over the head dim chained in the accumulator: NOTES v56).
// The algorithm is flash_bwd_wgmma_ws.cu's deterministic pair (and cuflash/twin.py's):
//   DkdvWgmmaX3: a block owns BLOCK_N keys (64 per consumer warpgroup) and streams the query
//     tiles of every query head of its group chunk: Sᵀ = K Qᵀ, dPᵀ = V dOᵀ, Pᵀ and dSᵀ in
//     registers, dV += Pᵀ dO, dK += dSᵀ Q;
//   DqWgmmaX3: a block owns BLOCK_M queries (64 per consumer warpgroup) and streams the key
//     tiles: S = Q Kᵀ, dP = dO Vᵀ, dS, dQ += dS K.
// What the split changes (the study: only these sums keep float32's accuracy at d = 128, and
// chaining dV / dK across the sequence fails):
//   - every sum over the head dim (Sᵀ, dPᵀ, S, dP) is taken one k16 step at a time from zero
//     and added on the FMA pipe (f16x3.cuh, F16Products::step_ss); every sum over queries (dV, dK) or keys
//     (dQ) one tile at a time from zero, added to float32 totals;
//   - scales are powers of two, one per row of q, k, v and dO (made by the producer or the
//     consumers from the float32 rows); where a row-scaled operand is the reduction's side (dO
//     in dV, Q in dK, K in dQ), its row factor goes onto the other operand's columns (Pᵀ, dSᵀ,
//     dS: one multiply each), which is then scaled per row of its own (row_scales_f16) and split
//     in registers (split_c_to_a).
// Registers: at d = 64 the dK/dV consumers hold dK and dV (64 floats), then Sᵀ, dPᵀ and one
// fresh k-step sum of each (128: 64-query tiles) or the tiles' dK and dV (64) with Pᵀ's and dSᵀ's
// hi / lo (64). At d = 128 the totals take 128, so the query tiles are 32 wide (Sᵀ, dPᵀ and
// their fresh sums 64, Pᵀ's and dSᵀ's hi / lo 32) and the tile's dV and dK are summed one
// product and one 64-column panel at a time (32 floats: NOTES v54); the dQ kernel streams
// 32-key tiles (dQ 64 floats and its tile's 64).
//
// Warp-specialized as flash_bwd_wgmma_ws.cu: warpgroup 0, the producer, copies the hi / lo tiles
// (128-byte swizzle) and each row's inverse scale by cp.async from the staged rows the host made
// once per call (f16x3_stage.cuh: q, k, v and dout each split per row; p.q, p.k, p.v and p.dout
// are those staged arrays, padded to whole tiles); warpgroups 1..NC consume.
//
// Versions (predictions and results in NOTES.md):
//   v46  first version; v48 (call 165, H200, d = 64): 74-80 TFLOP/s, 2.12-2.34x torch's efficient
//        float32 backward; the consumers' empty-barrier arrival made per warp (racecheck).
//   v51  q, k, v and dout split once per call (f16x3_stage.cuh); the producers only copy (call
//        172: 102-111 TFLOP/s at d = 64, 1.37-1.44x v48 in the same run).
//   v52  the rows' scales by plain loads and stores (call 175).
#pragma once
#include "barrier.cuh"
#include "f16x3.cuh"
#include "mainloop.cuh"

namespace cuflash {

// Two products' sums over the head dim, a = A1·B1ᵀ, b = A2·B2ᵀ: 'highest' each k16 step from
// zero (Prod::step_ss) and added in float32, one buffer of each: step kk of one product runs
// while the other's step kk - 1 (or kk) is added; 'tf32' (Prod::kChain) both chained in their
// accumulators. desc(which, kk): the X3Descs of product `which` (0: a, 1: b) at step kk.
template <class MMA, int KS, class Prod, int N, class Desc>
__device__ __forceinline__ void fresh_pair(float (&a)[N][4], float (&b)[N][4], Desc&& desc) {
    if constexpr (Prod::kChain) {
        wgmma_fence();
        Prod::template chain_ss<MMA, KS>(a, [&](int kk) { return desc(0, kk); });
        Prod::template chain_ss<MMA, KS>(b, [&](int kk) { return desc(1, kk); });
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_regs(a);
        wgmma_fence_regs(b);
    } else {
        float pa[N][4], pb[N][4];
        zero_fragments(a);
        zero_fragments(b);
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            wgmma_fence();
            Prod::template step_ss<MMA>(pa, desc(0, kk));
            wgmma_commit();
            if (kk > 0) {   // b's step kk - 1 done (groups complete in order)
                wgmma_wait<1>();
                add_fresh(b, pb);
            }
            wgmma_fence();
            Prod::template step_ss<MMA>(pb, desc(1, kk));
            wgmma_commit();
            wgmma_wait<1>();   // a's step kk done
            add_fresh(a, pa);
        }
        wgmma_wait<0>();
        add_fresh(b, pb);
    }
}

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V,
          class Prod = X3>
struct DkdvWgmmaX3 : F16ProductKernel<T, V> {
    // Registers after the hand-over: consumers 216, producer 72 (at 224 / 56 the kernel spilled 4
    // bytes, a value the producer carries across the hand-over); at d = 128 consumers 224,
    // producer 56 (it only copies since v51; at 216 the causal and window kernels with softcap
    // and ALiBi spilled 168 bytes)
    using Ws = WarpSpecialized<DP, BLOCK_N, NT, STAGES, DP == 128 ? 224 : 216>;
    static constexpr int NC = Ws::NC;
    using Params = BwdParams<T, float>;
    using Block = KeyBlock<BLOCK_N, V, Params>;
    using Head = GroupHead<BLOCK_M, BLOCK_N, V, Params, float>;
    static_assert((DP == 64 && BLOCK_M == 64) || (DP == 128 && BLOCK_M == 32),
                  "query tiles of 64 at d <= 64, of 32 at d <= 128 (the registers: above; with "
                  "one product too: 64 spilled 200-328 bytes, NOTES v57)");
    static constexpr int MS = BLOCK_M / 8;    // 8-query n-tiles of Sᵀ, dPᵀ
    static constexpr int NO = DP / 8;         // 8-column n-tiles of dK, dV
    static constexpr int KS = DP / 16;        // k16 steps of Sᵀ, dPᵀ
    static constexpr int NK = BLOCK_M / 16;   // k16 steps of dV, dK
    static constexpr int NP = DP / 64;        // 64-column panels of dK, dV (and of Q, dO)
    // d = 64: a tile's dV and dK products issued together; d = 128: one at a time
    static constexpr bool kOneProduct = NP > 1;
    using MMA_S = Wgmma<BLOCK_M, __half>;
    using MMA_O = Wgmma<64, __half>;          // a panel of dV or dK

    struct Smem {
        __half k_hi[BLOCK_N * DP], k_lo[Prod::lo_halves(BLOCK_N * DP)];
        __half v_hi[BLOCK_N * DP], v_lo[Prod::lo_halves(BLOCK_N * DP)];
        __half q_hi[STAGES][BLOCK_M * DP], q_lo[STAGES][Prod::lo_halves(BLOCK_M * DP)];
        __half do_hi[STAGES][BLOCK_M * DP], do_lo[STAGES][Prod::lo_halves(BLOCK_M * DP)];
        float k_inv[BLOCK_N], v_inv[BLOCK_N];                  // 1 / each key row's scales
        float q_inv[STAGES][BLOCK_M], do_inv[STAGES][BLOCK_M];  // 1 / each query row's
        float lse2[STAGES][BLOCK_M], D[STAGES][BLOCK_M];
        Mbarrier kv_full;   // the resident K and V copied, their scales stored
        // full: a query tile's copies landed and its scales, lse2 and D stored (the 128
        // producers, arrive_after_copies); empty: every consumer warp is done with it
        StageBarriers<STAGES> q_bar;
        __device__ __forceinline__ void init_barriers() {
            kv_full.init(Mbarrier::after_copies(128));
            q_bar.init(Mbarrier::after_copies(128), 4 * NC);
        }
    };
    static constexpr int kSmemBytes = smem_budget<Smem, 1024>();

    static __device__ __forceinline__ void run(const Params& p) {
        const Block kb(p);
        if (!kb.active) return;
        Smem& sm = ws_smem<Smem>(kSmemBytes);
        specialize<Ws>([&] { produce(p, kb, sm); }, [&] { consume(p, kb, sm); });
    }

    // Warpgroup 0: the block's K and V rows, then each query tile of each query head of the
    // block's chunk (for_each_group_tile: tile n in ring slot n) Q's and dO's rows with the
    // queries' lse·log2 e and D into its stage once the consumers gave it back.
    static __device__ __forceinline__ void produce(const Params& p, const Block& kb, Smem& sm) {
        const int tid = threadIdx.x;
        const auto staged = [](const float* row) { return reinterpret_cast<const __half*>(row); };
        const int kld = 2 * int(p.k_stride[2]), vld = 2 * int(p.v_stride[2]);   // halves
        const int qld = 2 * int(p.q_stride[2]), dld = 2 * int(p.dout_stride[2]);
        copy_staged_rows<BLOCK_N, DP, Prod::kLo>(sm.k_hi, sm.k_lo, sm.k_inv,
                                      staged(kb.seq.k_row(p.k, p.k_stride, kb.j0)), kld, tid);
        copy_staged_rows<BLOCK_N, DP, Prod::kLo>(sm.v_hi, sm.v_lo, sm.v_inv,
                                      staged(kb.seq.k_row(p.v, p.v_stride, kb.j0)), vld, tid);
        sm.kv_full.arrive_after_copies();
        for_each_group_tile<Head>(p, kb, [&](const Head& head, int t, int n) {
            const StageRing<STAGES> r(n);
            const int s = r.stage, i0 = head.tiles.start(t, BLOCK_M);
            sm.q_bar.empty[s].wait(r.empty_parity());
            copy_staged_rows<BLOCK_M, DP, Prod::kLo>(sm.q_hi[s], sm.q_lo[s], sm.q_inv[s],
                                          staged(head.seq.q_row(p.q, p.q_stride, i0)), qld, tid);
            copy_staged_rows<BLOCK_M, DP, Prod::kLo>(sm.do_hi[s], sm.do_lo[s], sm.do_inv[s],
                                          staged(head.seq.q_row(p.dout, p.dout_stride, i0)), dld,
                                          tid);
            stage_q_stats<BLOCK_M, 128>(sm.lse2[s], sm.D[s], p, head.seq, i0);
            sm.q_bar.full[s].arrive_after_copies();   // its scale, lse2 and D stores too
        });
        cp_async_wait<0>();   // nothing in flight when the producer's threads end
        store_dkdv(p, kb, [] {}, NoTile{}, NoTile{});   // a group sum's turns: nothing to add
    }

    // Panel h (columns 64·h ..) of this tile's dV (DV) and / or dK (DK) from zero, added to the
    // totals with the rows' inverse scales iv, ik: dV += Pᵀ (dO·2^e), dK += dSᵀ (Q·2^e)
    template <bool DV, bool DK>
    static __device__ __forceinline__ void panel_sums(
        float (&dV)[NO][4], float (&dK)[NO][4], unsigned (&pv_hi)[NK][4],
        unsigned (&pv_lo)[NK][4], unsigned (&ds_hi)[NK][4], unsigned (&ds_lo)[NK][4],
        const float (&iv)[2], const float (&ik)[2], Smem& sm, int s, int h) {
        const int at = h * BLOCK_M * 64;   // panel h of the stage's Q and dO
        float dvt[8][4], dkt[8][4];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < NK; ++kk) {
            if constexpr (DV)
                Prod::template step_rs<MMA_O>(dvt, pv_hi[kk], pv_lo[kk],
                                  mnmajor_desc<BLOCK_M>(sm.do_hi[s] + at, kk),
                                  mnmajor_desc<BLOCK_M>(sm.do_lo[s] + at, kk), kk == 0);
            if constexpr (DK)
                Prod::template step_rs<MMA_O>(dkt, ds_hi[kk], ds_lo[kk],
                                  mnmajor_desc<BLOCK_M>(sm.q_hi[s] + at, kk),
                                  mnmajor_desc<BLOCK_M>(sm.q_lo[s] + at, kk), kk == 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        if constexpr (DV) {
            wgmma_fence_regs(dvt);
            Prod::keep(pv_hi, pv_lo);
        }
        if constexpr (DK) {
            wgmma_fence_regs(dkt);
            Prod::keep(ds_hi, ds_lo);
        }
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                if constexpr (DV) dV[8 * h + n][e] = fmaf(dvt[n][e], iv[e >> 1], dV[8 * h + n][e]);
                if constexpr (DK) dK[8 * h + n][e] = fmaf(dkt[n][e], ik[e >> 1], dK[8 * h + n][e]);
            }
    }

    // Warpgroup 1 + c: keys 64·c .. 64·c + 63 of the block
    static __device__ __forceinline__ void consume(const Params& p, const Block& kb, Smem& sm) {
        const int warp = threadIdx.x / 32 - 4, lane = threadIdx.x % 32;   // among the consumers
        const int wkey = warp * 16, g = lane >> 2, t4 = lane & 3;
        float dK[NO][4], dV[NO][4];   // keys wkey + g and wkey + g + 8
        zero_fragments(dK);
        zero_fragments(dV);
        const int panel = (warp / 4) * 64 * 64;   // this warpgroup's 64 keys of panel 0
        sm.kv_full.wait(0);
        fence_proxy_async();   // the copies (generic proxy), before wgmma reads them
        for_each_group_tile<Head>(p, kb, [&](const Head& head, int t, int n) {
            const StageRing<STAGES> r(n);
            const int s = r.stage;
            sm.q_bar.full[s].wait(r.full_parity());
            fence_proxy_async();
            const int i0 = head.tiles.start(t, BLOCK_M);
            // -- Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, each k16 step from zero
            float st[MS][4], dpt[MS][4];
            fresh_pair<MMA_S, KS, Prod>(st, dpt, [&](int which, int kk) {
                return which ? x3_kmajor<BLOCK_N, BLOCK_M>(sm.v_hi + panel, sm.v_lo + panel,
                                                           sm.do_hi[s], sm.do_lo[s], kk)
                             : x3_kmajor<BLOCK_N, BLOCK_M>(sm.k_hi + panel, sm.k_lo + panel,
                                                           sm.q_hi[s], sm.q_lo[s], kk);
            });
            const float* q_inv = sm.q_inv[s];
            const float* do_inv = sm.do_inv[s];
            // the warp's key rows' factors, read each tile (held across the loop, they spill)
            const float k_inv[2] = {sm.k_inv[wkey + g], sm.k_inv[wkey + g + 8]};
            const float v_inv[2] = {sm.v_inv[wkey + g], sm.v_inv[wkey + g + 8]};
            unscale(st, k_inv, q_inv, t4);   // columns: the tile's queries
            unscale(dpt, v_inv, do_inv, t4);
            // -- Pᵀ and dSᵀ (mainloop.cuh: every mask and score modifier)
            key_tile_probs_f<BLOCK_M>(st, dpt, head, t, i0, kb.j0 + wkey, lane, sm.lse2[s],
                                      sm.D[s], Exp2Exact());
            // -- the reductions' row factors onto the columns: Pᵀ·(1 / dO's), dSᵀ·(1 / Q's);
            //    then each row scaled into float16's range and split
            scale_columns(st, do_inv, t4);
            scale_columns(dpt, q_inv, t4);
            float sv[2], iv[2], sk[2], ik[2];
            row_scales_f16(st, sv, iv);
            row_scales_f16(dpt, sk, ik);
            unsigned pv_hi[NK][4], pv_lo[NK][4], ds_hi[NK][4], ds_lo[NK][4];
            split_c_to_a<NK>(st, sv, pv_hi, pv_lo);
            split_c_to_a<NK>(dpt, sk, ds_hi, ds_lo);
            // -- this tile's dV and dK from zero: Pᵀ (dO·2^e), dSᵀ (Q·2^e), B read MN-major, a
            //    panel of 64 columns at a time; both products together or one at a time
            //    (kOneProduct); each added to its total, the stage released after the last
#pragma unroll
            for (int h = 0; h < NP; ++h) {
                const int last = h == NP - 1;
                if constexpr (kOneProduct) {
                    panel_sums<true, false>(dV, dK, pv_hi, pv_lo, ds_hi, ds_lo, iv, ik, sm, s, h);
                    panel_sums<false, true>(dV, dK, pv_hi, pv_lo, ds_hi, ds_lo, iv, ik, sm, s, h);
                } else {
                    panel_sums<true, true>(dV, dK, pv_hi, pv_lo, ds_hi, ds_lo, iv, ik, sm, s, h);
                }
                if (last) sm.q_bar.empty[s].arrive_per_warp();
            }
        });
        store_dkdv_fragments(p, kb, dK, dV, wkey, lane);   // dK_j, dV_j summed over the group
    }
};

// The dQ pass: a block owns BLOCK_M queries (64 per consumer warpgroup); the producer copies
// their rows of q and dO, then streams the K/V tiles into a ring of STAGES buffers (all from the
// staged rows: hi, lo and each row's inverse scale); per tile each consumer warpgroup runs S, dP (fresh k16 steps), dS,
// and this tile's dQ from zero, added to its float32 total.
template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V,
          class Prod = X3>
struct DqWgmmaX3 : F16ProductKernel<T, V> {
    using Ws = WarpSpecialized<DP, BLOCK_M, NT, STAGES, 224>;
    static constexpr int NC = Ws::NC;
    using Params = BwdParams<T, float>;
    using Block = QueryBlock<BLOCK_M, V, Params, float>;
    static_assert((DP == 64 && BLOCK_N == 64) || (DP == 128 && BLOCK_N == 32) ||
                      (DP == 128 && BLOCK_N == 64 && !Prod::kLo),
                  "key tiles of 64 at d <= 64, of 32 at d <= 128 (shared memory: Q's and dO's "
                  "rows and two stages); one product (no lo tiles) takes 64 at d = 128 too "
                  "(tile.x3_dq_block_n, NOTES v57)");
    static constexpr int NS = BLOCK_N / 8;    // 8-key n-tiles of S, dP
    static constexpr int NO = DP / 8;         // 8-column n-tiles of dQ
    static constexpr int KS = DP / 16;        // k16 steps of S, dP
    static constexpr int NK = BLOCK_N / 16;   // k16 steps of dQ
    using MMA_S = Wgmma<BLOCK_N, __half>;
    using MMA_O = Wgmma<DP, __half>;

    struct Smem {
        __half q_hi[BLOCK_M * DP], q_lo[Prod::lo_halves(BLOCK_M * DP)];
        __half do_hi[BLOCK_M * DP], do_lo[Prod::lo_halves(BLOCK_M * DP)];
        __half k_hi[STAGES][BLOCK_N * DP], k_lo[STAGES][Prod::lo_halves(BLOCK_N * DP)];
        __half v_hi[STAGES][BLOCK_N * DP], v_lo[STAGES][Prod::lo_halves(BLOCK_N * DP)];
        float q_inv[BLOCK_M], do_inv[BLOCK_M];                  // 1 / each query row's scales
        float k_inv[STAGES][BLOCK_N], v_inv[STAGES][BLOCK_N];   // 1 / each key row's
        Mbarrier q_full;   // the block's Q and dO rows copied, their scales stored
        // full: a K/V tile's copies landed and its scales stored (the 128 producers,
        // arrive_after_copies); empty: every consumer warp is done with it
        StageBarriers<STAGES> kv_bar;
        __device__ __forceinline__ void init_barriers() {
            q_full.init(Mbarrier::after_copies(128));
            kv_bar.init(Mbarrier::after_copies(128), 4 * NC);
        }
    };
    static constexpr int kSmemBytes = smem_budget<Smem, 1024>();

    static __device__ __forceinline__ void run(const Params& p) {
        const Block blk(p);
        if (!blk.active) return;
        Smem& sm = ws_smem<Smem>(kSmemBytes);
        const TileIter kv = blk.template key_tiles<BLOCK_N>();
        specialize<Ws>([&] { produce(p, blk, kv, sm); }, [&] { consume(p, blk, kv, sm); });
    }

    // Warpgroup 0: the block's Q and dO rows, then K_t's and V_t's into stage t % STAGES once
    // the consumers gave it back (tiles in order: each thread steps its two sources, as
    // pipeline.cuh's KVStream; a mask_mod's lists: each tile's computed)
    static __device__ __forceinline__ void produce(const Params& p, const Block& blk,
                                                   const TileIter& kv, Smem& sm) {
        const int tid = threadIdx.x;
        const auto staged = [](const float* row) { return reinterpret_cast<const __half*>(row); };
        copy_staged_rows<BLOCK_M, DP, Prod::kLo>(sm.q_hi, sm.q_lo, sm.q_inv,
                                      staged(blk.seq.q_row(p.q, p.q_stride, blk.i0)),
                                      2 * int(p.q_stride[2]), tid);
        copy_staged_rows<BLOCK_M, DP, Prod::kLo>(sm.do_hi, sm.do_lo, sm.do_inv,
                                      staged(blk.seq.q_row(p.dout, p.dout_stride, blk.i0)),
                                      2 * int(p.dout_stride[2]), tid);
        sm.q_full.arrive_after_copies();
        const __half* k0 = staged(blk.seq.k_row(p.k, p.k_stride, 0));
        const __half* v0 = staged(blk.seq.k_row(p.v, p.v_stride, 0));
        const int kld = 2 * int(p.k_stride[2]), vld = 2 * int(p.v_stride[2]);   // halves
        StagedKV<BLOCK_N, DP, Block::kInOrder> kvs(k0, kld, v0, vld,
                                                   kv.n > 0 ? kv.start(0, BLOCK_N) : 0);
#pragma unroll 1
        for (int t = 0; t < kv.n; ++t) {
            const StageRing<STAGES> r(t);
            const int s = r.stage, j0 = kv.start(t, BLOCK_N);
            kvs.seek(j0);
            sm.kv_bar.empty[s].wait(r.empty_parity());
            copy_staged_tiles<BLOCK_N, DP, Prod::kLo>(sm.k_hi[s], sm.k_lo[s], kvs.k_src, k0, kld);
            copy_staged_tiles<BLOCK_N, DP, Prod::kLo>(sm.v_hi[s], sm.v_lo[s], kvs.v_src, v0, vld);
            store_staged_inverses<BLOCK_N, DP, Prod::kLo>(sm.k_inv[s], k0 + size_t(j0) * kld, kld, tid);
            store_staged_inverses<BLOCK_N, DP, Prod::kLo>(sm.v_inv[s], v0 + size_t(j0) * vld, vld, tid);
            sm.kv_bar.full[s].arrive_after_copies();
            kvs.next();
        }
        cp_async_wait<0>();   // nothing in flight when the producer's threads end
    }

    // Warpgroup 1 + c: queries 64·c .. 64·c + 63 of the block
    static __device__ __forceinline__ void consume(const Params& p, const Block& blk,
                                                   const TileIter& kv, Smem& sm) {
        const int warp = threadIdx.x / 32 - 4, lane = threadIdx.x % 32;   // among the consumers
        const int c = warp / 4, wrow = warp * 16, g = lane >> 2, t4 = lane & 3;
        sm.q_full.wait(0);
        fence_proxy_async();   // the copies (generic proxy), before wgmma reads them
        const float q_inv[2] = {sm.q_inv[wrow + g], sm.q_inv[wrow + g + 8]};
        const float do_inv[2] = {sm.do_inv[wrow + g], sm.do_inv[wrow + g + 8]};
        float lse2[2], Dr[2], dQ[NO][4];
        dq_row_stats(lse2, Dr, p, blk, blk.i0, wrow, g);   // rows wrow + g, wrow + g + 8
        zero_fragments(dQ);
        const int panel = c * 64 * 64;   // this warpgroup's 64 queries of panel 0
        for (int t = 0; t < kv.n; ++t) {
            const StageRing<STAGES> r(t);
            const int s = r.stage, j0 = kv.start(t, BLOCK_N);
            sm.kv_bar.full[s].wait(r.full_parity());
            fence_proxy_async();
            // -- S = Q Kᵀ and dP = dO Vᵀ, each k16 step from zero
            float sc[NS][4], dp[NS][4];
            fresh_pair<MMA_S, KS, Prod>(sc, dp, [&](int which, int kk) {
                return which ? x3_kmajor<BLOCK_M, BLOCK_N>(sm.do_hi + panel, sm.do_lo + panel,
                                                           sm.v_hi[s], sm.v_lo[s], kk)
                             : x3_kmajor<BLOCK_M, BLOCK_N>(sm.q_hi + panel, sm.q_lo + panel,
                                                           sm.k_hi[s], sm.k_lo[s], kk);
            });
            const float* k_inv = sm.k_inv[s];
            const float* v_inv = sm.v_inv[s];
            unscale(sc, q_inv, k_inv, t4);   // columns: the tile's keys
            unscale(dp, do_inv, v_inv, t4);
            // -- dS = P ∘ (dP - D) · g in place of dP (mainloop.cuh: the warp's 16 rows)
            query_tile_probs<1, NS>(reinterpret_cast<float(&)[1][NS][4]>(sc),
                                    reinterpret_cast<float(&)[1][NS][4]>(dp), blk.mask, blk.score,
                                    blk.template needs_mask<BLOCK_N>(kv, t, j0), blk.i0, wrow, j0,
                                    lane, lse2, Dr, Exp2Exact());
            // -- K's row factors onto dS's columns, each row scaled and split; this tile's dQ
            //    from zero (K·2^e read MN-major), added to the total
            scale_columns(dp, k_inv, t4);
            float sq[2], iq[2];
            row_scales_f16(dp, sq, iq);
            unsigned ds_hi[NK][4], ds_lo[NK][4];
            split_c_to_a<NK>(dp, sq, ds_hi, ds_lo);
            float dqt[NO][4];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < NK; ++kk)
                Prod::template step_rs<MMA_O>(dqt, ds_hi[kk], ds_lo[kk],
                                              mnmajor_desc<BLOCK_N>(sm.k_hi[s], kk),
                                              mnmajor_desc<BLOCK_N>(sm.k_lo[s], kk), kk == 0);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_regs(dqt);
            Prod::keep(ds_hi, ds_lo);
            sm.kv_bar.empty[s].arrive_per_warp();
#pragma unroll
            for (int n = 0; n < NO; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) dQ[n][e] = fmaf(dqt[n][e], iq[e >> 1], dQ[n][e]);
        }
        // -- dQ_i = scale · Σ_j dS_ij K_j
        store_rows_direct<T, NO>(blk.seq.q_row(p.dq, p.dq_stride, blk.i0), p.d,
                                 int(p.dq_stride[2]), blk.rows, dQ, p.dq_scale, wrow, lane);
    }
};

}  // namespace cuflash
