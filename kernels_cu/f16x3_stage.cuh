// cuflash: float32 rows split once per call for the float16-product kernels
// (flash_fwd_wgmma_x3.cu, flash_bwd_wgmma_x3.cu; precisions 'highest' and 'tf32' on sm_90), two
// arrays a, b of one shape in one pass. cuflash/gpu/f16x3_stage.py states the layout and computes
// it with array operations (the reference the tests hold this kernel to). Each staged row is a
// StagedRow<DP, LO> (f16x3.cuh): as float16, columns 0..DP-1 hi and, with LO, DP..2·DP-1 lo of
// the row times its scale (zeros past d), then as float the inverse the kernel multiplies back:
//     a's row j (the forward's K; the backward's q and dout, or k and v):
//         scale = f16_range_scale(max_c |a[j, c]|), inverse 1 / scale
//     b's row j, B_TILE (the forward's V): scale = f16_range_scale(max over j's tile of ROWS
//         rows |b|), inverse 1 / (scale · 2^14) (the forward scales P by 2^14, kX3PScale; tiles
//         of ROWS keys from key 0, the kernel's own); else as a's rows
// and three zero floats. Rows S..S_pad-1 are zeros (per row: inverse 1). LO false ('tf32', one
// product of hi parts): no lo part, rows of DP / 2 + 4 floats.
// One block: one tile (ROWS rows) of one (sequence, head), NT threads; a warp takes RPW rows,
// lane l columns 2l, 2l + 1, 2l + 64, 2l + 65, ... (one half2 store a pair). A warp loads all its
// rows of an array before it stores any (the loads in flight together: NOTES v58).
#pragma once
#include "f16x3.cuh"
#include "stage_pair.cuh"

namespace cuflash {

template <int BLOCK_N, int DP, int NT, bool B_TILE, bool LO = true>
struct X3Stage {
    using Row = StagedRow<DP, LO>;
    static constexpr int W = Row::kFloats;      // floats a staged row
    static constexpr int PPL = DP / 64;         // column pairs a lane
    static constexpr int WARPS = NT / 32;
    static constexpr int RPW = BLOCK_N / WARPS; // rows a warp
    static_assert(DP % 64 == 0 && BLOCK_N % WARPS == 0, "whole rows on whole warps");

    // Row j's values (zeros past S and d) and the largest |x| of them on this lane
    static __device__ __forceinline__ float load_row(const float* __restrict__ x, long long ld,
                                                     int j, int S, int D, int lane,
                                                     float2 (&r)[PPL]) {
        float m = 0.f;
#pragma unroll
        for (int i = 0; i < PPL; ++i) {
            const int c = 2 * lane + 64 * i;
            const float* at = x + j * ld + c;
            r[i].x = j < S && c < D ? __ldg(at) : 0.f;
            r[i].y = j < S && c + 1 < D ? __ldg(at + 1) : 0.f;
            m = fmaxf(m, fmaxf(fabsf(r[i].x), fabsf(r[i].y)));
        }
        return m;
    }
    static __device__ __forceinline__ float warp_max(float m) {
#pragma unroll
        for (int w = 16; w > 0; w /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, w));
        return m;
    }
    // One staged row: hi (and lo) of x·scale (split2_f16's arithmetic), then the inverse
    static __device__ __forceinline__ void store_row(float* __restrict__ row,
                                                     const float2 (&r)[PPL], float scale,
                                                     float inv, int lane) {
        unsigned* h = reinterpret_cast<unsigned*>(row);   // half2s
#pragma unroll
        for (int i = 0; i < PPL; ++i) {
            unsigned hi, lo;
            split2_f16(r[i].x, r[i].y, scale, hi, lo);
            const int c2 = lane + 32 * i;   // the pair's place in half2s
            h[c2] = hi;
            if constexpr (LO) h[DP / 2 + c2] = lo;
        }
        if (lane < 4) row[Row::kInvHalf / 2 + lane] = lane == 0 ? inv : 0.f;
    }

    // This warp's rows j, j + WARPS, ... of x, each scaled on its own, into out's rows 0, WARPS, ...
    static __device__ __forceinline__ void per_row(const float* __restrict__ x, long long ld,
                                                   float* __restrict__ out, int j, int S, int D,
                                                   int lane) {
        float2 row[RPW][PPL];
        float m[RPW];
#pragma unroll
        for (int n = 0; n < RPW; ++n) m[n] = load_row(x, ld, j + n * WARPS, S, D, lane, row[n]);
#pragma unroll
        for (int n = 0; n < RPW; ++n) {
            const float s = f16_range_scale(warp_max(m[n]));
            store_row(out + n * WARPS * W, row[n], s, 1.f / s, lane);
        }
    }

    // grid (S_pad / BLOCK_N, sequences · heads); ks, vs: (sequences · heads, S_pad, W) floats
    static __device__ __forceinline__ void run(const StagePair& in, float* __restrict__ ks,
                                               float* __restrict__ vs) {
        __shared__ float block_max[WARPS];
        const int bh = blockIdx.y, j0 = blockIdx.x * BLOCK_N, S = in.S, S_pad = in.S_pad, D = in.D;
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const float* kb = in.a_rows(bh);
        const float* vb = in.b_rows(bh);
        const long long ks2 = in.as2, vs2 = in.bs2;
        float* k_out = ks + ((long long)bh * S_pad + j0) * W;
        float* v_out = vs + ((long long)bh * S_pad + j0) * W;
        // a (and b unless B_TILE): each row its own scale
        per_row(kb, ks2, k_out + warp * W, j0 + warp, S, D, lane);
        if constexpr (!B_TILE) {
            per_row(vb, vs2, v_out + warp * W, j0 + warp, S, D, lane);
            return;
        }
        // b (the forward's V): one scale for the tile
        float2 x[RPW][PPL];
        float m = 0.f;
#pragma unroll
        for (int n = 0; n < RPW; ++n)
            m = fmaxf(m, load_row(vb, vs2, j0 + warp + n * WARPS, S, D, lane, x[n]));
        m = warp_max(m);
        if (lane == 0) block_max[warp] = m;
        __syncthreads();
#pragma unroll
        for (int w = 0; w < WARPS; ++w) m = fmaxf(m, block_max[w]);
        const float s = f16_range_scale(m), inv = 1.f / (s * kX3PScale);
#pragma unroll
        for (int n = 0; n < RPW; ++n) store_row(v_out + (warp + n * WARPS) * W, x[n], s, inv, lane);
    }
};

}  // namespace cuflash
