// cuflash: how tensor-core kernels write their results, written once.
//   store_rows_staged  rows of a C-fragment accumulator (each warp owns 16·MT rows: O of the
//                      forward, dQ of the dQ kernels), each row times a factor, rounded to T,
//                      staged in shared memory the warp owns and stored with 16-byte writes
//   store_rows_direct  rows of a C-fragment accumulator (16 per warp: dK, dV) stored from the
//                      registers, 4 bytes per lane
// C fragment (mma.cuh): acc[mt][n][e] is row 16·mt + g + 8·(e / 2), column 8·n + 2t + e % 2 of
// the warp's rows, lane = 4g + t.
#pragma once
#include "mma.cuh"

namespace cuflash {

// rows [wrow, wrow + 16·MT) of the tile: row r gets acc · factor[mt][h] (r = wrow + 16·mt + g + 8h),
// staged at stage[off(r, col)] (the caller's own rows of a shared-memory tile, free by now), then
// copied to g_out (row stride ld) for rows < rows_valid and columns < d.
template <typename T, int MT, int NO, int DP, class Off>
__device__ __forceinline__ void store_rows_staged(T* __restrict__ g_out, int d, int ld, int rows_valid,
                                                  const float (&acc)[MT][NO][4],
                                                  const float (&factor)[MT][2], T* stage, Off&& off,
                                                  int wrow, int lane) {
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = wrow + mt * 16 + g + h * 8;
#pragma unroll
            for (int n = 0; n < NO; ++n)
                *reinterpret_cast<unsigned*>(stage + off(r, n * 8 + 2 * t4)) =
                    pack2<T>(acc[mt][n][2 * h] * factor[mt][h], acc[mt][n][2 * h + 1] * factor[mt][h]);
        }
    __syncwarp();
    constexpr int CPR = DP / 8;   // 16-byte chunks per row
#pragma unroll
    for (int c = lane; c < 16 * MT * CPR; c += 32) {
        const int r = wrow + c / CPR, col = (c % CPR) * 8;
        if (r < rows_valid && col < d)
            *reinterpret_cast<uint4*>(g_out + size_t(r) * ld + col) =
                *reinterpret_cast<const uint4*>(stage + off(r, col));
    }
}

// rows [wrow, wrow + 16) of the tile, acc · factor, rows < rows_valid and columns < d (row
// stride ld).
template <typename T, int NO>
__device__ __forceinline__ void store_rows_direct(T* __restrict__ g_out, int d, int ld, int rows_valid,
                                                  const float (&acc)[NO][4], float factor,
                                                  int wrow, int lane) {
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = wrow + g + h * 8;
        if (r >= rows_valid) continue;
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            const int c = n * 8 + 2 * t4;
            if (c < d)
                *reinterpret_cast<unsigned*>(g_out + size_t(r) * ld + c) =
                    pack2<T>(acc[n][2 * h] * factor, acc[n][2 * h + 1] * factor);
        }
    }
}

// The dK/dV kernels' end: dK = scale · Σ_h Σ_i dS_ijᵀ Q_i and dV = Σ_h Σ_i P_ijᵀ dO_i of the key
// tile of a KeyBlock `kb` (block.cuh; summed over its kv head's query heads h, zero where no query
// saw the tile), this warp's 16 keys from wkey.
template <typename T, int NO, class P, class KB>
__device__ __forceinline__ void store_dkdv(const P& p, const KB& kb, const float (&dK)[NO][4],
                                           const float (&dV)[NO][4], int wkey, int lane) {
    store_rows_direct<T, NO>(kb.seq.k_row(p.dk, p.dk_stride, kb.j0), p.d, int(p.dk_stride[2]),
                             kb.rows, dK, p.scale, wkey, lane);
    store_rows_direct<T, NO>(kb.seq.k_row(p.dv, p.dv_stride, kb.j0), p.d, int(p.dv_stride[2]),
                             kb.rows, dV, 1.f, wkey, lane);
}

}  // namespace cuflash
