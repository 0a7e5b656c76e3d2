// cuflash: float32 forward on Hopper's warpgroup tensor cores, precision 'tf32' (sm_90a): one TF32
// product a step, as flash_fwd_mma.cu with Tf32Products<1> computes it on mma.sync, here on
// wgmma.mma_async m64nNk8 .tf32 (Wgmma<N, float>, wgmma.cuh). The algorithm is flash_fwd_mma.cu's
// (and cuflash/twin.py's): S = Q Kᵀ, the mask and score modifier, the online softmax (m, l,
// alpha), O += P V, O / l and lse at the end; the mask, modifiers, softmax and epilogue are the
// shared parts (mainloop.cuh).
//
// What TF32 on wgmma asks for, and where it is done:
//   * Both operands K-major in shared memory (the PTX ISA has no transpose for .tf32). Q·Kᵀ reads
//     Q and K as they lie (head dim contiguous). P·V needs V with its keys contiguous: the host
//     stages Vᵀ before the launch (cuflash/gpu/tf32_stage.py), and the kernel reads p.v as Vᵀ:
//     row c of head dim at p.v + b·v_stride[0] + hk·v_stride[1] + c·v_stride[2], keys at unit
//     stride, zero past the keys up to a whole tile.
//   * wgmma reads a float32 operand's TF32 bits by truncation, where 'tf32' means rounding to
//     nearest (cvt.rna, cuflash/precision.py): the host stages K and Vᵀ rounded, and the kernel
//     rounds its Q tile in shared memory once, after it lands.
//   * P goes to P·V from registers as the m16n8k8 .tf32 A fragment per warp (tf32.cuh's layout):
//     in each 8 keys, slot t takes key 2t and slot t + 4 key 2t + 1, so that S's accumulator
//     fragment is the A fragment as it stands; the staged Vᵀ holds its keys in that order
//     (0, 2, 4, 6, 1, 3, 5, 7 in every 8).
//   (WgmmaOperands<float>, wgmma_forward.cuh, says both rules for the shared step.)
// A warpgroup's step is the 16-bit kernels' (wgmma_forward.cuh, WgmmaFwdRows), with tile t + 1's
// cp.async copies in flight behind it, in one of two schedules:
//   STAGES = 2: S_t and then P_t V_t in turn, each step its own last product. At d = 128, Q
//   (64 KB at 128 rows) and two stages of 64 keys (64 KB each) are what fits.
//   STAGES = 3: S_t issued beside P_{t-1} V_{t-1}, as the 16-bit kernels do. It takes a third
//   stage, since Vᵀ_{t-1} is still read in step t; at d = 128 only 32-key tiles or 64 query
//   rows fit.
// The two warpgroups of a block overlap one another's work through the warp schedulers.
// The warp-specialized forward (flash_fwd_wgmma_ws.cu) runs the same operands with float32
// (tf32_tiles.cuh) without the block-wide barrier per key tile, 7-22% faster (NOTES v42): the
// default of 'tf32' but where its producer's copies spill (64 < d <= 96; tile.wgmma_tf32_tiles).
//
// Grid: (ceil(T / BLOCK_M), sequences·heads) (block.cuh, QueryBlock). Block: NT = 32·warps
// threads, BLOCK_M = 16·warps, each warpgroup 64 query rows.
#pragma once
#include "tf32_tiles.cuh"
#include "wgmma_forward.cuh"

namespace cuflash {

template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, int STAGES, class V>
struct FwdWgmmaTf32 : TileKernel<FwdWgmmaTf32<T, DP, BLOCK_M, BLOCK_N, NT, STAGES, V>, 1024> {
    static_assert(sizeof(T) == 4, "float32 read as TF32");
    using Params = FwdParams<T, float>;
    using Block = QueryBlock<BLOCK_M, V, Params, float>;
    using Rows = WgmmaFwdRows<T, DP, BLOCK_M, BLOCK_N, Block>;   // wgmma_forward.cuh
    static constexpr int NW = NT / 32;
    static_assert(NW % 4 == 0 && BLOCK_M == 16 * NW, "64 query rows per warpgroup of 4 warps");
    static_assert(DP % 32 == 0 && BLOCK_N % 32 == 0 && BLOCK_N <= 256 && DP <= 256,
                  "whole 128-byte panels of float32");
    static_assert(STAGES == 2 || STAGES == 3, "2: S_t, then P_t V_t; 3: S_t beside P_{t-1} V_{t-1}");
    static_assert(!V::SPLIT && V::CACHE == kNoCache, "no split-KV, no KV cache (the host's plan)");

    struct Smem {
        float q[BLOCK_M * DP];               // resident Q tile, rounded; later each warp's O rows
        float k[STAGES][BLOCK_N * DP];       // K tiles (staged rounded by the host)
        float vt[STAGES][DP * BLOCK_N];      // Vᵀ tiles: DP rows of BLOCK_N keys
    };

    // Tile t of the key tiles kv into stage `stage` (tf32_tiles.cuh: the host's staged K, Vᵀ)
    static __device__ __forceinline__ void load_kv(const Params& p, const Block& blk,
                                                   const TileIter& kv, int t, Smem& sm,
                                                   int stage) {
        const int j0 = kv.start(t, BLOCK_N);
        Tf32StagedKV<DP, BLOCK_N, NT>::load_k(sm.k[stage], p, blk, j0);
        Tf32StagedKV<DP, BLOCK_N, NT>::load_vt(sm.vt[stage], p, blk, j0);
        cp_async_commit();
    }

    // Tile t landed and seen by every thread (and by the tensor cores), and every warpgroup done
    // with step t - 1; then tile t + 1's copies issued into the stage that tile t + 1 - STAGES
    // left (its last reader, P V of step t + 2 - STAGES, waited for before this barrier)
    static __device__ __forceinline__ int acquire(const Params& p, const Block& blk,
                                                  const TileIter& kv, int t, Smem& sm) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (t + 1 < kv.n) load_kv(p, blk, kv, t + 1, sm, (t + 1) % STAGES);
        return t % STAGES;
    }

    static __device__ __forceinline__ void body(const Params& p, const Block& blk, Smem& sm) {
        const int warp = threadIdx.x / 32;
        const TileIter kv = blk.template key_tiles<BLOCK_N>();

        load_tf32_tile<BLOCK_M, DP, NT>(sm.q, blk.seq.q_row(p.q, p.q_stride, blk.i0),
                                        p.q_stride[2], blk.rows, p.d);
        cp_async_commit();
        if (kv.n > 0) load_kv(p, blk, kv, 0, sm, 0);
        cp_async_wait<1>();                       // Q landed (this thread's copies)
        round_tf32_tile<BLOCK_M, DP, NT>(sm.q);   // made visible by the first acquire

        Rows rows(blk, sm.q, warp / 4, warp, threadIdx.x % 32);
        const int n = kv.n;
        if constexpr (STAGES == 2) {
            for (int t = 0; t < n; ++t) {         // S_t, then P_t V_t
                const int stage = acquire(p, blk, kv, t, sm);
                rows.template step<true>(kv, t, sm.k[stage], nullptr, NoStepHooks{});
                rows.last_product(sm.vt[stage], NoStepHooks{});
            }
        } else {                                  // S_t beside P_{t-1} V_{t-1}
            if (n > 0) {   // the first step peeled (flash_fwd_wgmma.cu: under `if (t > 0)` ptxas
                           // serialized every wgmma)
                const int stage = acquire(p, blk, kv, 0, sm);
                rows.template step<true>(kv, 0, sm.k[stage], nullptr, NoStepHooks{});
            }
            for (int t = 1; t < n; ++t) {
                const int stage = acquire(p, blk, kv, t, sm);
                rows.template step<false>(kv, t, sm.k[stage], sm.vt[(t + STAGES - 1) % STAGES],
                                          NoStepHooks{});
            }
            if (n > 0) rows.last_product(sm.vt[(n - 1) % STAGES], NoStepHooks{});
        }
        cp_async_wait<0>();
        __syncthreads();   // every warpgroup done with Q: its rows stage O
        rows.epilogue(p, sm.q);
    }
};

}  // namespace cuflash
