// cuflash: float32 attention on TF32 tensor cores (sm_80+): mma.sync m16n8k8 .tf32 with float32
// accumulators, the forward's products for float32 inputs (flash_fwd_mma.cu with Tf32Products;
// cuflash/precision.py is the same arithmetic in NumPy, and the CPU twin's).
//
//   Tf32Products<1>  precision="tf32": each operand rounded to TF32 (10-bit mantissa,
//                    cvt.rna: to nearest, ties away from zero), one product.
//   Tf32Products<3>  precision="highest": each operand split x = big + small, big = tf32(x),
//                    small = tf32(x - big) (x - big is exact in float32), and a·b summed as
//                    small_a·big_b + big_a·small_b + big_a·big_b (CUTLASS's 3xTF32; small·small
//                    is below float32's rounding); the tensor core's accumulator truncates, so
//                    no running sum stays in it: each k-step of Q·Kᵀ and each key tile of P·V
//                    is summed there from zero and added to S and O on the FMA pipe (mma1688,
//                    add_pv; NOTES.md v22: 1.3-1.5× naive float32's error, 7-19× without).
//
// Fragment layouts of mma.m16n8k8 with .tf32 (PTX ISA, "Matrix Fragments for mma.m16n8k8"), for
// lane l with g = l / 4 and t = l % 4:
//   A (16×8, row-major), 4 regs: a0 = (g, t), a1 = (g + 8, t), a2 = (g, t + 4), a3 = (g + 8, t + 4)
//   B (8×8, "col"), 2 regs: b0 = (k t, n g), b1 = (k t + 4, n g)
//   C (16×8 float), 4 values: c0, c1 = (g, 2t..2t + 1), c2, c3 = (g + 8, 2t..2t + 1)
// A product may take its k in any order as long as A and B agree:
//   Q·Kᵀ   k-step kk is head columns 8kk .. 8kk + 7 in order: A and B are single 4-byte loads of
//          Q and K rows (lanes g·LDS + t: with LDS ≡ 4 or 20 mod 32 the 32 lanes hit 32 banks).
//   P·V    k-step n is the 8 keys of S's n-tile n, slot t ↔ key 2t and slot t + 4 ↔ key 2t + 1,
//          so the C fragment of S is the A fragment as it stands (a0 = c0, a1 = c2, a2 = c1,
//          a3 = c3); B reads V rows 2t and 2t + 1 at column g of each output n-tile (banks
//          2t·LDS + g: distinct for those LDS). O comes out in the C layout of the 16-bit
//          kernels, so their softmax, merge and epilogue serve unchanged.
#pragma once
#include "mma.cuh"

namespace cuflash {

// float32 -> TF32 (to nearest, ties away from zero), as the bits of a float32 whose low 13 bits
// are zero
__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// An operand as the tensor core takes it: N = 1, big = tf32(x); N = 3, also small = tf32(x - big)
template <int N>
struct Tf32Operand {
    unsigned big, small;
    Tf32Operand() = default;
    __device__ __forceinline__ explicit Tf32Operand(float x) : big(to_tf32(x)) {
        if constexpr (N == 3) small = to_tf32(x - __uint_as_float(big));
    }
};

// c += a · b for one 16×8×8 product of TF32 operands with float accumulators
__device__ __forceinline__ void mma1688_tf32(float (&c)[4], unsigned a0, unsigned a1, unsigned a2,
                                             unsigned a3, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// c += a · b with a, b float32 values split for N products (the header), the small terms first.
// FRESH (N = 3, Q·Kᵀ's k-steps): the products summed by the tensor core from zero, then added to
// c by FADDs. The tensor core adds to its accumulator with truncation, not float32's rounding to
// nearest (products exact, addends aligned and cut), so a running sum kept in it drifts by about
// an ulp per k-step, always toward zero: on the H200 that put 3xTF32 at 7-19× naive float32's
// error (NOTES.md v22) where the CPU emulation, which rounds to nearest, had it at 0.7-1.5×. One
// k-step's sum from zero is cut once; the running sum rounds to nearest on the FMA pipe. (P·V's
// key tiles are summed from zero by add_pv itself; N = 1, 'tf32', accumulates in the tensor
// core: its operand rounding, 2^-11, dwarfs the cut.)
template <int N, bool FRESH = false>
__device__ __forceinline__ void mma1688(float (&c)[4], const Tf32Operand<N> (&a)[4],
                                        const Tf32Operand<N> (&b)[2]) {
    if constexpr (N == 3 && FRESH) {
        float t[4] = {0.f, 0.f, 0.f, 0.f};
        mma1688<N>(t, a, b);
#pragma unroll
        for (int e = 0; e < 4; ++e) c[e] += t[e];
        return;
    }
    if constexpr (N == 3) {
        mma1688_tf32(c, a[0].small, a[1].small, a[2].small, a[3].small, b[0].big, b[1].big);
        mma1688_tf32(c, a[0].big, a[1].big, a[2].big, a[3].big, b[0].small, b[1].small);
    }
    mma1688_tf32(c, a[0].big, a[1].big, a[2].big, a[3].big, b[0].big, b[1].big);
}

template <int N>
struct Tf32Products {
    static_assert(N == 1 || N == 3, "one TF32 product (precision='tf32') or three ('highest')");
    template <int DP, bool SWIZZLE = false>   // no swizzled form (HalfProducts' kLds)
    static constexpr int kLds = DP + 4;   // ≡ 4 or 20 mod 32 for DP a multiple of 16 (the header)

    // s[mt][n] += Q_mt · K_nᵀ over DP columns (HalfProducts::scores' contract, float32 tiles)
    template <int MT, int WN, int DP, int LDS>
    static __device__ __forceinline__ void scores(float (&s)[MT][WN / 8][4], const float* Qs,
                                                  int wrow, const float* Ks, int wkey, int lane) {
        const int g = lane >> 2, t = lane & 3;
        const float* q = Qs + (wrow + g) * LDS + t;
        const float* k = Ks + (wkey + g) * LDS + t;
        // N = 3: one k-step's products in flight at a time (unrolled, ptxas keeps every k-step's
        // partial sums live at once and spills: NVRTC 13.0, sm_90, 4-28 B at d = 64-256)
#pragma unroll (N == 3 ? 1 : DP / 8)
        for (int kk = 0; kk < DP / 8; ++kk) {
            Tf32Operand<N> a[MT][4] = {};
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const float* r = q + 16 * mt * LDS + 8 * kk;
                a[mt][0] = Tf32Operand<N>(r[0]);
                a[mt][1] = Tf32Operand<N>(r[8 * LDS]);
                a[mt][2] = Tf32Operand<N>(r[4]);
                a[mt][3] = Tf32Operand<N>(r[8 * LDS + 4]);
            }
#pragma unroll
            for (int n = 0; n < WN / 8; ++n) {
                const float* r = k + 8 * n * LDS + 8 * kk;
                const Tf32Operand<N> b[2] = {Tf32Operand<N>(r[0]), Tf32Operand<N>(r[4])};
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) mma1688<N, true>(s[mt][n], a[mt], b);
            }
        }
    }

    // o[mt] += P_mt · V (HalfProducts::add_pv's contract): P split from the S fragments once;
    // N = 3: for each 8-column n-tile of O, the tile's keys summed by the tensor core from zero
    // and added to O by FADDs (mma1688's reason), so the running sum of O never sits in the
    // tensor core's accumulator; N = 1 accumulates there (mma1688)
    template <int MT, int WN, int DP, int LDS>
    static __device__ __forceinline__ void add_pv(float (&o)[MT][DP / 8][4],
                                                  const float (&s)[MT][WN / 8][4], const float* Vs,
                                                  int lane) {
        const int g = lane >> 2, t = lane & 3;
        Tf32Operand<N> a[MT][WN / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < WN / 8; ++n) {
                a[mt][n][0] = Tf32Operand<N>(s[mt][n][0]);
                a[mt][n][1] = Tf32Operand<N>(s[mt][n][2]);
                a[mt][n][2] = Tf32Operand<N>(s[mt][n][1]);
                a[mt][n][3] = Tf32Operand<N>(s[mt][n][3]);
            }
        const float* r = Vs + 2 * t * LDS + g;
#pragma unroll
        for (int c = 0; c < DP / 8; ++c) {
            float sum[MT][4] = {};
#pragma unroll
            for (int n = 0; n < WN / 8; ++n) {
                const float* rn = r + 8 * n * LDS + 8 * c;
                const Tf32Operand<N> b[2] = {Tf32Operand<N>(rn[0]), Tf32Operand<N>(rn[LDS])};
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    mma1688<N>(N == 3 ? sum[mt] : o[mt][c], a[mt][n], b);
            }
            if constexpr (N == 3) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) o[mt][c][e] += sum[mt][e];
            }
        }
    }
};

}  // namespace cuflash
