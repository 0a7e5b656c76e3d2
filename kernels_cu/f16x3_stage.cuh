// cuflash: float32 rows split once per call for the x3 kernels (flash_fwd_wgmma_x3.cu,
// flash_bwd_wgmma_x3.cu; precision 'highest' on sm_90), two arrays a, b of one shape in one pass.
// cuflash/gpu/f16x3_stage.py states the layout and computes it with array operations (the
// reference the tests hold this kernel to). Each staged row is DP + 4 floats: as float16, columns
// 0..DP-1 hi and DP..2·DP-1 lo of the row times its scale (zeros past d), then as float, at float
// DP, the inverse the kernel multiplies back:
//     a's row j (the forward's K; the backward's q and dout, or k and v):
//         scale = f16_range_scale(max_c |a[j, c]|), inverse 1 / scale
//     b's row j, B_TILE (the forward's V): scale = f16_range_scale(max over j's tile of ROWS
//         rows |b|), inverse 1 / (scale · 2^14) (the forward scales P by 2^14, kX3PScale; tiles
//         of ROWS keys from key 0, the kernel's own); else as a's rows
// and floats DP + 1..DP + 3 zero. Rows S..S_pad-1 are zeros (per row: inverse 1).
// One block: one tile (ROWS rows) of one (sequence, head), NT threads; a warp takes a row at a
// time, lane l its columns l, l + 32, ...
#pragma once
#include "f16x3.cuh"

namespace cuflash {

template <int BLOCK_N, int DP, int NT, bool B_TILE>
struct X3Stage {
    static constexpr int W = DP + 4;            // floats a staged row
    static constexpr int CPL = DP / 32;         // columns a lane
    static constexpr int WARPS = NT / 32;
    static constexpr int RPW = BLOCK_N / WARPS; // rows a warp
    static_assert(DP % 32 == 0 && BLOCK_N % WARPS == 0, "whole rows on whole warps");

    // Row j's values (zeros past S and d) and the largest |x| of them on this lane
    static __device__ __forceinline__ float load_row(const float* x, long long ld, int j, int S,
                                                     int D, int lane, float (&r)[CPL]) {
        float m = 0.f;
#pragma unroll
        for (int i = 0; i < CPL; ++i) {
            const int c = lane + 32 * i;
            r[i] = j < S && c < D ? x[j * ld + c] : 0.f;
            m = fmaxf(m, fabsf(r[i]));
        }
        return m;
    }
    static __device__ __forceinline__ float warp_max(float m) {
#pragma unroll
        for (int w = 16; w > 0; w /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, w));
        return m;
    }
    // One staged row: hi and lo of x·scale (split2_f16's arithmetic), then the inverse
    static __device__ __forceinline__ void store_row(float* row, const float (&r)[CPL], float scale,
                                                     float inv, int lane) {
        __half* h = reinterpret_cast<__half*>(row);
#pragma unroll
        for (int i = 0; i < CPL; ++i) {
            const float a = r[i] * scale;
            const __half hi = __float2half_rn(a);
            h[lane + 32 * i] = hi;
            h[DP + lane + 32 * i] = __float2half_rn(a - __half2float(hi));
        }
        if (lane < 4) row[DP + lane] = lane == 0 ? inv : 0.f;
    }

    // grid (S_pad / BLOCK_N, sequences · kv heads); k, v strides [sequence, head, row] in
    // elements; ks, vs: (sequences · kv heads, S_pad, W) floats
    static __device__ __forceinline__ void run(const float* k, const float* v, long long ks0,
                                               long long ks1, long long ks2, long long vs0,
                                               long long vs1, long long vs2, int heads, int S,
                                               int S_pad, int D, float* ks, float* vs) {
        __shared__ float block_max[WARPS];
        const int bh = blockIdx.y, b = bh / heads, h = bh % heads, j0 = blockIdx.x * BLOCK_N;
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const float* kb = k + b * ks0 + h * ks1;
        const float* vb = v + b * vs0 + h * vs1;
        float* k_out = ks + ((long long)bh * S_pad + j0) * W;
        float* v_out = vs + ((long long)bh * S_pad + j0) * W;
        // a (and b unless B_TILE): each row its own scale
        const auto per_row = [&](const float* x, long long ld, float* out) {
#pragma unroll
            for (int n = 0; n < RPW; ++n) {
                const int r = warp + n * WARPS;
                float row[CPL];
                const float s = f16_range_scale(warp_max(load_row(x, ld, j0 + r, S, D, lane, row)));
                store_row(out + r * W, row, s, 1.f / s, lane);
            }
        };
        per_row(kb, ks2, k_out);
        if constexpr (!B_TILE) {
            per_row(vb, vs2, v_out);
            return;
        }
        // b (the forward's V): one scale for the tile
        float x[RPW][CPL], m = 0.f;
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
