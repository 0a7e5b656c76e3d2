// cuflash: float64 tensor-core building blocks (sm_80+): mma.sync m8n8k4 .f64, what the dmma
// kernels (flash_fwd_dmma.cu, flash_bwd_dmma.cu) are made of beside the shared mainloop parts.
//
// Fragment layouts of mma.m8n8k4 with .f64 (PTX ISA, "Matrix Fragments for mma.m8n8k4 with
// .f64 floating point type"), for lane l with g = l / 4 and t = l % 4:
//   A (8×4, row-major): one double, element (g, t)
//   B (4×8, "col"):     one double, element (k t, n g)
//   C (8×8):            two doubles, elements (g, 2t) and (g, 2t + 1)
// A product may take its k in any order as long as A and B agree; the kernels use that twice.
//   dmma_abt, C += A·Bᵀ over the head dim (Q·Kᵀ, dO·Vᵀ, K·Qᵀ, V·dOᵀ; A and B both rows of a
//     shared-memory tile): lane t loads 16 bytes, columns 16s + 4t + 2h and + 1 of each
//     16-column span s (h = 0, 1), and feeds them to two k-steps; B's lane reads the same
//     columns of its row, so k-step (s, h, e) pairs column 16s + 4t + 2h + e of both.
//   dmma_cx, C += P·X with P in registers as the C fragments of a score tile (P·V, dS·K, Pᵀ·dO,
//     dSᵀ·Q): n-tile n of P holds columns 8n + 2t and 8n + 2t + 1 at lane t, which is the A
//     fragment of two k-steps (e = 0, 1: lane t ↔ row 8n + 2t + e of X); B reads those rows of
//     X. Along the head dim B pairs two n-tiles: n-tile 2p + c, lane g, reads column
//     16p + 2g + c (one 16-byte load for c = 0, 1), so that output n-tile 2p + c holds columns
//     16p + 4t + 2e + c at lane t, element e: four consecutive columns 16p + 4t .. 16p + 4t + 3.
// So P never leaves registers (as in the 16-bit mma kernels), and every shared-memory read of
// the m8n8k4 path is a 16-byte load. Tiles are rows of LDS = DP + 2 doubles (odd 16-byte chunks
// per row): a quarter-warp's eight 16-byte reads then fall in eight different bank groups in both
// patterns (rows g = 0, 1 × chunks 2t + h: g·LDS/2 + 2t is even for g = 0, odd for g = 1; rows
// 2t + e × chunk g: 2t·LDS/2 runs through 0, 2, 4, 6 mod 8).
// On sm_90, a warp with an even number of m-tiles runs four consecutive k-steps of two m-tiles as
// one m16n8k16 product (dmma16816: its A fragment is two m8n8k4 A fragments per k-step, rows g
// and g + 8). Its fragments take one element of a row each (A: rows g and g + 8 interleaved; B of
// P·X: four rows of X), so that path reads every double with its own 8-byte load straight into
// its fragment slot, in column orders under which a half-warp's 16 reads hit 16 different bank
// pairs (dmma_abt, dmma_cx): built from 16-byte loads, the fragments took a third of the d = 128
// forward's instructions in register copies (NOTES v78).
#pragma once
#include "mma.cuh"

namespace cuflash {

// On sm_90 a pair of m-tiles (rows g and g + 8 of 16) takes one m16n8k16 product in place of
// eight m8n8k4 products: the same operands, fewer instructions (PTX ISA: m16n8k16 .f64 is sm_90
// and later; CUFLASH_DMMA_M8 keeps m8n8k4 everywhere, for comparisons)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(CUFLASH_DMMA_M8)
constexpr bool kDmmaM16 = true;
#else
constexpr bool kDmmaM16 = false;
#endif
// Whether a warp of M m-tiles takes the m16n8k16 path: pairs of m-tiles on sm_90. One rule for
// dmma_k4, dmma_abt and dmma_cx (which read their fragments by it) and DRows (which walks the
// accumulator columns in the order dmma_cx left them)
template <int M>
constexpr bool kDmmaPairs = kDmmaM16 && M % 2 == 0;

// c += a · b for one 8×8×4 product in float64 (not volatile: the products carry no side effect,
// so ptxas may interleave them with the shared-memory loads that feed them)
__device__ __forceinline__ void dmma884(double (&c)[2], double a, double b) {
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
        : "+d"(c[0]), "+d"(c[1])
        : "d"(a), "d"(b));
}

// (c0; c1) += a · b for one 16×8×16 product (sm_90): a[2kk] is row g, a[2kk + 1] row g + 8 of
// k-step kk (lane t: k = t + 4kk), b[kk] row k of column g; c0 rows g, c1 rows g + 8. So it is
// the four m8n8k4 k-steps kk of m-tiles c0 and c1 in one instruction.
__device__ __forceinline__ void dmma16816(double (&c0)[2], double (&c1)[2], const double (&a)[8],
                                          const double (&b)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, {%0, %1, %2, %3};\n"
        : "+d"(c0[0]), "+d"(c0[1]), "+d"(c1[0]), "+d"(c1[1])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
          "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
#else
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        dmma884(c0, a[2 * kk], b[kk]);
        dmma884(c1, a[2 * kk + 1], b[kk]);
    }
#endif
}

// The four k-steps kk of m-tiles m (x) and m + 1 (y), A operand of dmma16816; and of m-tile m
// alone, each by dmma884 (x[kk], b[kk])
template <int M, int N>
__device__ __forceinline__ void dmma_k4(double (&c)[M][N][2], const double (&x)[M][4],
                                        const double (&b)[4], int n) {
    if constexpr (kDmmaPairs<M>) {
#pragma unroll
        for (int m = 0; m < M; m += 2) {
            const double a[8] = {x[m][0], x[m + 1][0], x[m][1], x[m + 1][1],
                                 x[m][2], x[m + 1][2], x[m][3], x[m + 1][3]};
            dmma16816(c[m][n], c[m + 1][n], a, b);
        }
    } else {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int m = 0; m < M; ++m) dmma884(c[m][n], x[m][kk], b[kk]);
    }
}

__device__ __forceinline__ double2 lds_d2(const double* s) {
    return *reinterpret_cast<const double2*>(s);
}

// Every value of an array of C fragments set to 0 (an accumulator before its first product)
template <int M, int N>
__device__ __forceinline__ void zero_dfragments(double (&c)[M][N][2]) {
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int n = 0; n < N; ++n) c[m][n][0] = c[m][n][1] = 0.0;
}

// The dmma kernels' tile loader: cp.async of 16-byte chunks (two doubles) into rows of LDS
// doubles (mma.cuh, CpAsyncTiles)
template <int DP, int LDS, int NT>
using DmmaTiles = CpAsyncTiles<DP, NT, RowMajor<LDS>, 2>;

// The tile shape every dmma kernel shares: RES rows resident in shared memory (queries; keys for
// dK/dV) dealt to the NT / 32 warps in m-tiles of 8 rows, tiles of STR streamed rows (keys;
// queries for dK/dV) through a ring of STAGES buffers, DP head columns; every tile staged in rows
// of LDS doubles (the header) by Tiles (pipeline.cuh). Each kernel names its one DmmaShape Shape
// and takes these from it.
template <typename T, int RES, int STR, int DP, int NT, int STAGES>
struct DmmaShape {
    static_assert(sizeof(T) == 8, "the dmma kernels take float64");
    static constexpr int NW = NT / 32;
    static constexpr int MT = RES / (8 * NW);   // 8-row m-tiles per warp
    static constexpr int NS = STR / 8;          // 8-column n-tiles of the score tile
    static constexpr int NO = DP / 8;           // 8-column n-tiles of the output rows
    static constexpr int LDS = DP + 2;          // row stride (doubles) of every tile
    static_assert(LDS % 64 != 0, "padded rows (mma.cuh tile_at swizzles 16-bit rows only)");
    static_assert(MT >= 1 && RES == 8 * MT * NW, "resident rows (BLOCK_M; dK/dV: BLOCK_N) must be 8·MT·warps");
    static_assert(STR % 8 == 0 && DP % 16 == 0, "streamed rows a multiple of 8, DP of 16");
    static_assert(STAGES == 1 || STAGES == 2, "1 or 2 stages");
    using Tiles = DmmaTiles<DP, LDS, NT>;
};

// c[m][n] += A_m · B_nᵀ over DP columns: A_m rows 8m .. 8m + 7 of A, B_n rows 8n .. 8n + 7 of B,
// both rows of LDS doubles in shared memory (the k order of the header: k-step kk = 2h + e of
// span s is column 16s + 4t + 2h + e).
template <int M, int N, int DP, int LDS>
__device__ __forceinline__ void dmma_abt(double (&c)[M][N][2], const double* A, const double* B,
                                         int lane) {
    const int g = lane >> 2, t = lane & 3;
    if constexpr (kDmmaPairs<M>) {
        // m16n8k16: each A double read straight into its place in the fragment (rows g and
        // g + 8 of a pair of m-tiles), so no register copies build the fragment (NOTES v78);
        // k-step kk of span s is column 16s + (t & 1) + 8·(t >> 1) + 2kk of A and B rows:
        // a half-warp's 8-byte reads (rows g..g+3, LDS ≡ 2 mod 16) then fall in 16 different
        // 8-byte bank pairs
        const int c0 = (t & 1) + 8 * (t >> 1);
        const double* a_row = A + g * LDS + c0;
        const double* b_row = B + g * LDS + c0;
#pragma unroll
        for (int s = 0; s < DP / 16; ++s) {
            double a[M / 2][8];
#pragma unroll
            for (int m = 0; m < M; m += 2)
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) {
                    a[m / 2][2 * kk] = a_row[8 * m * LDS + 16 * s + 2 * kk];
                    a[m / 2][2 * kk + 1] = a_row[8 * (m + 1) * LDS + 16 * s + 2 * kk];
                }
#pragma unroll
            for (int n = 0; n < N; ++n) {
                double b[4];
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) b[kk] = b_row[8 * n * LDS + 16 * s + 2 * kk];
#pragma unroll
                for (int m = 0; m < M; m += 2) dmma16816(c[m][n], c[m + 1][n], a[m / 2], b);
            }
        }
        return;
    }
    const double* a_row = A + g * LDS + 4 * t;
    const double* b_row = B + g * LDS + 4 * t;
#pragma unroll
    for (int s = 0; s < DP / 16; ++s) {
        double x[M][4];
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const double2 v = lds_d2(a_row + 8 * m * LDS + 16 * s + 2 * h);
                x[m][2 * h] = v.x;
                x[m][2 * h + 1] = v.y;
            }
#pragma unroll
        for (int n = 0; n < N; ++n) {
            const double2 b0 = lds_d2(b_row + 8 * n * LDS + 16 * s);
            const double2 b1 = lds_d2(b_row + 8 * n * LDS + 16 * s + 2);
            const double b[4] = {b0.x, b0.y, b1.x, b1.y};
            dmma_k4(c, x, b, n);
        }
    }
}

// acc[m] += P_m · X: P_m (8 rows × 8·NK columns) as the C fragments p[m][n] of a score tile, X
// (8·NK rows × DP, row stride LDS) in shared memory; acc in the paired layout of the header.
// k-steps run in pairs of P's n-tiles: kk = 2·(n % 2) + e.
template <int M, int NK, int DP, int LDS>
__device__ __forceinline__ void dmma_cx(double (&acc)[M][DP / 8][2], const double (&p)[M][NK][2],
                                        const double* X, int lane) {
    static_assert(NK % 2 == 0, "pairs of 8-key n-tiles");
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int n = 0; n < NK; n += 2) {
        double x[M][4];
#pragma unroll
        for (int m = 0; m < M; ++m) {
            x[m][0] = p[m][n][0];
            x[m][1] = p[m][n][1];
            x[m][2] = p[m][n + 1][0];
            x[m][3] = p[m][n + 1][1];
        }
        if constexpr (kDmmaPairs<M>) {
            // m16n8k16: each B double read straight into its place (rows 8n + 2t + 0, 1, 8, 9
            // of X), lane g reading column 16q + (g & 3) + 4c + 8·(g >> 2) for output n-tile
            // 2q + c, so that a half-warp's 8-byte reads fall in 16 different bank pairs
            const double* row = X + (8 * n + 2 * t) * LDS + (g & 3) + 8 * (g >> 2);
#pragma unroll
            for (int q = 0; q < DP / 16; ++q)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const double* col = row + 16 * q + 4 * c;
                    const double b[4] = {col[0], col[LDS], col[8 * LDS], col[9 * LDS]};
                    dmma_k4(acc, x, b, 2 * q + c);
                }
            continue;
        }
        const double* row = X + (8 * n + 2 * t) * LDS + 2 * g;   // k-step 0; 1, 2, 3 below
#pragma unroll
        for (int q = 0; q < DP / 16; ++q) {
            const double2 b0 = lds_d2(row + 16 * q);
            const double2 b1 = lds_d2(row + LDS + 16 * q);
            const double2 b2 = lds_d2(row + 8 * LDS + 16 * q);
            const double2 b3 = lds_d2(row + 9 * LDS + 16 * q);
            const double bx[4] = {b0.x, b1.x, b2.x, b3.x}, by[4] = {b0.y, b1.y, b2.y, b3.y};
            dmma_k4(acc, x, bx, 2 * q);
            dmma_k4(acc, x, by, 2 * q + 1);
        }
    }
}

// Rows of a dmma_cx accumulator (M m-tiles of 8 rows from wrow) and the pairs of consecutive
// columns each lane holds: each2(f) calls f(m, row, first column, v0, v1) per pair, each(f)
// f(row, column, value) per element (store_dkdv's tile, epilogue.cuh). Lane t, element e of
// output n-tile 2q + c holds column 16q + 4t + 2e + c (m8n8k4: B lane g reads columns 16q + 2g
// and + 1) or 16q + 8·(t >> 1) + 2·(t & 1) + 4c + e (m16n8k16, dmma_cx's own column order).
template <int M, int NO>
struct DRows {
    const double (&acc)[M][NO][2];
    int wrow, lane;
    template <class F>
    __device__ __forceinline__ void each2(F&& f) const {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
            for (int q = 0; q < NO / 2; ++q)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    if constexpr (kDmmaPairs<M>)   // h = c: elements e = 0, 1 of n-tile 2q + c
                        f(m, wrow + 8 * m + g, 16 * q + 8 * (t >> 1) + 2 * (t & 1) + 4 * h,
                          acc[m][2 * q + h][0], acc[m][2 * q + h][1]);
                    else                  // h = e: n-tiles 2q and 2q + 1
                        f(m, wrow + 8 * m + g, 16 * q + 4 * t + 2 * h, acc[m][2 * q][h],
                          acc[m][2 * q + 1][h]);
                }
    }
    template <class F>
    __device__ __forceinline__ void each(F&& f) const {
        each2([&](int, int r, int c, double v0, double v1) {
            f(r, c, v0);
            f(r, c + 1, v1);
        });
    }
};

// rows wrow .. wrow + 8·M - 1 of a dmma_cx accumulator, row of m-tile m times factor[m], to
// g_out (row stride ld) for rows < rows_valid and columns < d (a multiple of 8: a pair of
// columns is in or out whole), 16-byte stores from the registers
template <int M, int NO>
__device__ __forceinline__ void store_drows(double* __restrict__ g_out, int d, long long ld,
                                            int rows_valid, const double (&acc)[M][NO][2],
                                            const double (&factor)[M], int wrow, int lane) {
    DRows<M, NO>{acc, wrow, lane}.each2([&](int m, int r, int c, double v0, double v1) {
        if (r >= rows_valid || c >= d) return;
        *reinterpret_cast<double2*>(g_out + r * ld + c) = make_double2(v0 * factor[m], v1 * factor[m]);
    });
}

}  // namespace cuflash
