// cuflash: float32 operands as two float16 parts on Hopper's 16-bit tensor cores (precision
// 'highest' as kernel family 'wgmma_f16x3': flash_fwd_wgmma_x3.cu, flash_bwd_wgmma_x3.cu; NOTES
// v44-v46; tools/split_study.py and split_study_bwd.py are the arithmetic in NumPy). A block of
// values x (a row, or a tile) is scaled by a power of two 2^e into float16's range (its largest
// |x| in [2^13, 2^14)) and split x·2^e = hi + lo, hi = f16(x·2^e), lo = f16(x·2^e - hi): 22
// significant bits. A product a·b runs as lo_a·hi_b + hi_a·lo_b + hi_a·hi_b (lo·lo is below
// float32's rounding), and, since the tensor core's accumulator truncates, no sum longer than one
// k16 step of a reduction over the head dim, or one tile of a reduction over keys or queries,
// stays in it. Precision 'tf32' on the same kernels ('wgmma_f16x1') takes hi alone, one product
// a pair (F16Products below).
#pragma once
#include "common.cuh"
#include "mask.cuh"
#include "wgmma_tiles.cuh"

namespace cuflash {

template <int N>
struct F16Products;           // the products of a pair of split operands (below)
using X3 = F16Products<3>;    // 'highest''s

// What every float16-product kernel takes (each derives from it): float32 inputs, whose float16
// splits are the kernel's own, in dense batches in one pass (no split-KV, KV cache or packed
// sequences: the staged rows are made per (sequence, kv head) of a dense batch)
template <typename T, class V>
struct F16ProductKernel {
    static_assert(sizeof(T) == 4, "float32 inputs (their float16 splits are the kernel's own)");
    static_assert(!V::SPLIT && V::CACHE == kNoCache && V::PACKED == kUnpacked,
                  "dense batches in one pass");
};

// The x3 forward's factor on P before its split (P <= 1 stays below 2^14, in float16's range);
// its inverse is folded into V's (f16x3_stage.cuh)
constexpr float kX3PScale = 16384.f;

// 2^e such that m·2^e lies in [2^13, 2^14), m a block's largest |x| (>= 0); 1 where m is 0 or
// not finite. A power of two: scaling and unscaling are exact.
__device__ __forceinline__ float f16_range_scale(float m) {
    const int E = int((__float_as_uint(m) >> 23) & 0xff);   // biased exponent
    if (m == 0.f || E == 255) return 1.f;
    const int e = 13 - (max(E, 1) - 127);
    return __uint_as_float(unsigned(min(max(e, -126), 127) + 127) << 23);
}

// x·scale split into float16 hi and lo, as two packed pairs: hi = f16(x·scale), lo =
// f16(x·scale - hi) (exact in float32)
__device__ __forceinline__ void split2_f16(float a, float b, float scale, unsigned& hi,
                                           unsigned& lo) {
    a *= scale;
    b *= scale;
    __half2 h = __floats2half2_rn(a, b);
    const float2 hf = __half22float2(h);
    __half2 l = __floats2half2_rn(a - hf.x, b - hf.y);
    hi = *reinterpret_cast<unsigned*>(&h);
    lo = *reinterpret_cast<unsigned*>(&l);
}

// ROWS rows of a float32 tile written as float16 hi and lo (LO false: hi alone, 'tf32''s
// F16Products<1>, which reads no lo part), rows first.. of tiles laid out as
// sw128<LROWS, 2> (LROWS rows in all), by the NT threads tid = 0..NT-1: item i = tid + n·NT is
// 8 elements, columns 8·(i % CPR) of row i / CPR (CPR = DP / 8 chunks a row, a power of two up
// to 32: a row's chunks lie on CPR neighbouring lanes of one warp, so its largest |x| is a
// shuffle reduction).
//   load(r, c, x)       x[0..7] = elements c..c+7 of row r (zeros past the data)
//   scale_of(r, m)      the row's scale, given its largest |x| (a power of two)
// A thread's items go in batches of up to 8 (64 registers), every load of a batch issued before
// the batch's first use: a block's Q tile is one round trip to memory at d <= 128, not one per
// item pair (NOTES v63: a forward block spent 7 us, not 4, before its first product at d = 128).
// One product at d <= 64 ('tf32''s x1 forward) keeps the pairwise loop: there the batch moved
// the mainloop's schedule, 5-7% slower causal at T >= 8192 (call 198), where x3 gained.
template <int ROWS, int LROWS, int DP, int NT, bool LO = true, class Load, class ScaleOf>
__device__ __forceinline__ void split_rows_f16(__half* hi, __half* lo, int first, int tid,
                                               Load&& load, ScaleOf&& scale_of) {
    constexpr int CPR = DP / 8, ITEMS = ROWS * CPR / NT;
    constexpr int BATCH = DP < 128 && !LO ? 1 : ITEMS < 8 ? ITEMS : 8;
    static_assert(CPR <= 32 && (CPR & (CPR - 1)) == 0 && (ROWS * CPR) % NT == 0 &&
                      ITEMS % BATCH == 0,
                  "a row's chunks on neighbouring lanes of one warp; whole batches");
    // item i's 8 elements x, loaded: its row's scale, then its hi (and lo) in the tiles
    auto split = [&](int i, float (&x)[8]) {
        const int r = i / CPR, c = (i % CPR) * 8;
        float m = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) m = fmaxf(m, fabsf(x[e]));
#pragma unroll
        for (int w = CPR / 2; w > 0; w /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, w));
        const float s = scale_of(r, m);
        uint4 h, l;
        split2_f16(x[0], x[1], s, h.x, l.x);
        split2_f16(x[2], x[3], s, h.y, l.y);
        split2_f16(x[4], x[5], s, h.z, l.z);
        split2_f16(x[6], x[7], s, h.w, l.w);
        const int at = sw128<LROWS, 2>(first + r, c);
        *reinterpret_cast<uint4*>(hi + at) = h;
        if constexpr (LO) *reinterpret_cast<uint4*>(lo + at) = l;
    };
    if constexpr (BATCH == 1) {
#pragma unroll 2
        for (int i = tid; i < ROWS * CPR; i += NT) {
            float x[8];
            load(i / CPR, (i % CPR) * 8, x);
            split(i, x);
        }
    } else {
#pragma unroll 1
        for (int b0 = 0; b0 < ITEMS; b0 += BATCH) {
            float x[BATCH][8];
#pragma unroll
            for (int n = 0; n < BATCH; ++n) {
                const int i = tid + (b0 + n) * NT;
                load(i / CPR, (i % CPR) * 8, x[n]);
            }
#pragma unroll
            for (int n = 0; n < BATCH; ++n) split(tid + (b0 + n) * NT, x[n]);
        }
    }
}

// split_rows_f16's scale of a tile scaled per row: each row's own (f16_range_scale of its
// largest |x|), whose inverse the row's first thread writes to inv[r]
template <int DP>
struct RowScaleInto {
    float* inv;
    int tid;
    __device__ __forceinline__ float operator()(int r, float m) const {
        const float s = f16_range_scale(m);
        if (tid % (DP / 8) == 0) inv[r] = 1.f / s;
        return s;
    }
};

// Rows r0 .. r0 + 63 of a block's float32 rows (row i at src + i·ld; zeros from row `rows` on
// and past column d) split into the hi / lo (LO: split_rows_f16) tiles of LROWS rows by the 128 threads of a
// warpgroup (tid 0..127), each row with its own scale, whose inverse goes to inv[r0 + r]
template <int LROWS, int DP, bool LO = true>
__device__ __forceinline__ void split_global_rows(__half* hi, __half* lo, float* inv, int r0,
                                                  int tid, const float* src, long long ld,
                                                  int rows, int d) {
    split_rows_f16<64, LROWS, DP, 128, LO>(
        hi, lo, r0, tid,
        [&](int r, int col, float (&x)[8]) {
            const bool row_ok = r0 + r < rows;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
                if (row_ok && col + 4 * h < d)
                    v = *reinterpret_cast<const float4*>(src + (r0 + r) * ld + col + 4 * h);
                x[4 * h] = v.x; x[4 * h + 1] = v.y; x[4 * h + 2] = v.z; x[4 * h + 3] = v.w;
            }
        },
        RowScaleInto<DP>{inv + r0, tid});
}

// One staged row (f16x3_stage.cuh writes it; the kernels' producers read it, rows ld halves
// apart): hi's DP halves, then with LO lo's DP halves, then the row's inverse scale as a float and
// three zero floats. 'tf32' (F16Products<1>) reads no lo part, and its rows hold none (NOTES v58).
template <int DP, bool LO = true>
struct StagedRow {
    static constexpr int kInvHalf = (LO ? 2 : 1) * DP;   // the inverse's place, in halves
    static constexpr int kFloats = kInvHalf / 2 + 4;      // a row's floats (16-byte rows)
    static __device__ __forceinline__ float inverse(const __half* row) {
        return *reinterpret_cast<const float*>(row + kInvHalf);
    }
};

// Staged rows (StagedRow: a row's hi, lo and inverse, ld halves apart) of one tile of ROWS
// rows, all within the staged array, copied by the 128 threads of a warpgroup (cp.async):
//   copy_staged_tiles  hi and lo (LO false: hi alone) into sw128 tiles (src: this thread's
//                      source in the tile, SwizzledTiles' thread_src, so that a loop can step
//                      it; tile: row 0)
//   store_staged_inverses  the rows' inverses into inv[0 .. ROWS - 1] (thread tid: rows tid,
//                      + 128..) by plain loads and stores (NOTES v52: racecheck reported the
//                      consumers' reads of cp.async-copied scales, call 172, and of these as
//                      well, call 175); the producers arrive on the full barrier for the copies
//                      and the stores (Mbarrier::arrive_after_copies)
template <int ROWS, int DP, bool LO = true>
__device__ __forceinline__ void copy_staged_tiles(__half* hi, __half* lo, const __half* src,
                                                  const __half* tile, int ld) {
    using Tiles = SwizzledTiles<DP, 128>;
    Tiles::template load_from<ROWS>(hi, src, tile, ROWS, DP, ld);
    if constexpr (LO) Tiles::template load_from<ROWS>(lo, src + DP, tile, ROWS, DP, ld);
}
template <int ROWS, int DP, bool LO = true>
__device__ __forceinline__ void store_staged_inverses(float* inv, const __half* tile, int ld, int tid) {
#pragma unroll
    for (int r = tid; r < ROWS; r += 128) inv[r] = StagedRow<DP, LO>::inverse(tile + size_t(r) * ld);
}
// K's and V's staged key tiles as a producer thread streams them, tile after tile (the x3
// forward's and dQ kernel's producers): rows of k0 / v0, kld / vld halves apart; this thread's
// cp.async sources in the next tile, stepped past each tile (IN_ORDER: tile t + 1 starts ROWS
// rows after tile t, as pipeline.cuh's KVStream) or, out of order (a mask_mod's tile lists),
// computed from each tile's first key (seek)
template <int ROWS, int DP, bool IN_ORDER>
struct StagedKV {
    const __half *k0, *v0;
    int kld, vld;
    const __half *k_src, *v_src;
    static __device__ __forceinline__ const __half* src(const __half* x0, int ld, int j0) {
        return SwizzledTiles<DP, 128>::template thread_src<ROWS>(x0 + size_t(j0) * ld, ld);
    }
    __device__ __forceinline__ StagedKV(const __half* k0_, int kld_, const __half* v0_, int vld_,
                                        int first)
        : k0(k0_), v0(v0_), kld(kld_), vld(vld_), k_src(src(k0_, kld_, first)),
          v_src(src(v0_, vld_, first)) {}
    __device__ __forceinline__ void seek(int j0) {
        if constexpr (!IN_ORDER) {
            k_src = src(k0, kld, j0);
            v_src = src(v0, vld, j0);
        }
    }
    __device__ __forceinline__ void next() {
        k_src += size_t(ROWS) * kld;
        v_src += size_t(ROWS) * vld;
    }
};

// Both, for a tile's row 0 at `tile` (its sources computed here)
template <int ROWS, int DP, bool LO = true>
__device__ __forceinline__ void copy_staged_rows(__half* hi, __half* lo, float* inv,
                                                 const __half* tile, int ld, int tid) {
    copy_staged_tiles<ROWS, DP, LO>(hi, lo, SwizzledTiles<DP, 128>::template thread_src<ROWS>(tile, ld),
                                tile, ld);
    store_staged_inverses<ROWS, DP, LO>(inv, tile, ld, tid);
}

// C fragments as the A fragments of k16 steps, split: c[2·kk], c[2·kk + 1] (two 8-column
// n-tiles of the warp's rows g and g + 8) into hi[kk], lo[kk] in c_to_a's order, row h's values
// times scale[h] first ('tf32', F16Products<1>, reads hi alone: the compiler drops its lo)
template <int NK>
__device__ __forceinline__ void split_c_to_a(const float (&c)[2 * NK][4], const float (&scale)[2],
                                             unsigned (&hi)[NK][4], unsigned (&lo)[NK][4]) {
#pragma unroll
    for (int kk = 0; kk < NK; ++kk) {
        split2_f16(c[2 * kk][0], c[2 * kk][1], scale[0], hi[kk][0], lo[kk][0]);
        split2_f16(c[2 * kk][2], c[2 * kk][3], scale[1], hi[kk][1], lo[kk][1]);
        split2_f16(c[2 * kk + 1][0], c[2 * kk + 1][1], scale[0], hi[kk][2], lo[kk][2]);
        split2_f16(c[2 * kk + 1][2], c[2 * kk + 1][3], scale[1], hi[kk][3], lo[kk][3]);
    }
}

// Each of the warp's two rows (g, g + 8) of C fragments c: the power of two that puts the row
// into float16's range (f16_range_scale of its largest |x|, over this thread's columns and its
// quad's: a row of a wgmma accumulator lies on the four lanes 4g .. 4g + 3), and its inverse
template <int N>
__device__ __forceinline__ void row_scales_f16(const float (&c)[N][4], float (&scale)[2],
                                               float (&inv)[2]) {
    float m[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) m[e >> 1] = fmaxf(m[e >> 1], fabsf(c[n][e]));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 1));
        m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 2));
        scale[h] = f16_range_scale(m[h]);
        inv[h] = 1.f / scale[h];   // a power of two: exact
    }
}

// The K-major descriptors of step kk of a·bᵀ, both operands' hi and lo tiles in shared memory
// (sw128 tiles of LA and LB rows)
struct X3Descs {
    unsigned long long a_hi, a_lo, b_hi, b_lo;
};
template <int LA, int LB>
__device__ __forceinline__ X3Descs x3_kmajor(const __half* a_hi, const __half* a_lo,
                                             const __half* b_hi, const __half* b_lo, int kk) {
    return {kmajor_desc<LA>(a_hi, kk), kmajor_desc<LA>(a_lo, kk), kmajor_desc<LB>(b_hi, kk),
            kmajor_desc<LB>(b_lo, kk)};
}

// The products of a pair of split operands (NOTES v56):
//   F16Products<3>  precision 'highest' (kernel family 'wgmma_f16x3'): lo·hi + hi·lo + hi·hi,
//                   every sum over the head dim one k16 step from zero (the accumulator
//                   truncates), added in float32 by the kernel
//   F16Products<1>  precision 'tf32' (family 'wgmma_f16x1'): hi·hi alone, one product of 11-bit
//                   significands as a TF32 product (v55: the same error); the k16 steps of a sum
//                   over the head dim chained in the accumulator (its truncation, ~2^-23 a step,
//                   far below the operands' 2^-11); no lo part made, copied or read
// Sums over keys or queries run a tile at a time from zero in both (each tile's rows carry a
// scale of their own).
template <int N>
struct F16Products {
    static_assert(N == 1 || N == 3, "one product ('tf32') or three ('highest')");
    static constexpr bool kLo = N == 3;      // operands carry lo parts
    static constexpr bool kChain = N == 1;   // a sum over the head dim chained in the accumulator
    // Halves of a lo tile of n halves in shared memory: n, or without lo parts a 1024-byte
    // placeholder (the tiles after it stay on the 1024-byte boundaries of the 128-byte swizzle)
    __host__ __device__ static constexpr int lo_halves(int n) { return kLo ? n : 512; }

    // One k16 step of a·bᵀ from zero into acc, both operands in shared memory, small terms first
    template <class MMA, class Frag>
    static __device__ __forceinline__ void step_ss(Frag& acc, const X3Descs& s) {
        static_assert(kLo, "one product chains its k16 steps (chain_ss)");
        MMA::ss(acc, s.a_lo, s.b_hi, 0);
        MMA::ss(acc, s.a_hi, s.b_lo, 1);
        MMA::ss(acc, s.a_hi, s.b_hi, 1);
    }

    // a·bᵀ over its KS k16 steps chained in acc (kChain only); desc(kk): step kk's X3Descs
    template <class MMA, int KS, class Frag, class Desc>
    static __device__ __forceinline__ void chain_ss(Frag& acc, Desc&& desc) {
        static_assert(kChain, "'highest' sums each k16 step from zero");
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            const X3Descs s = desc(kk);
            MMA::ss(acc, s.a_hi, s.b_hi, kk > 0 ? 1 : 0);
        }
    }

    // One k16 step of A·B into acc, A from registers (hi, lo fragments), B in shared memory
    // (MN-major descriptors of its hi and lo tiles); first: the step that starts acc from zero
    template <class MMA, class Frag>
    static __device__ __forceinline__ void step_rs(Frag& acc, const unsigned (&a_hi)[4],
                                                   const unsigned (&a_lo)[4],
                                                   unsigned long long b_hi,
                                                   unsigned long long b_lo, bool first) {
        if constexpr (kLo) {
            MMA::template rs<1>(acc, a_lo, b_hi, first ? 0 : 1);
            MMA::template rs<1>(acc, a_hi, b_lo, 1);
            MMA::template rs<1>(acc, a_hi, b_hi, 1);
        } else {
            MMA::template rs<1>(acc, a_hi, b_hi, first ? 0 : 1);
        }
    }

    // A fragments read by wgmma in flight kept alive until it is done (wgmma_keep_regs)
    template <int NK>
    static __device__ __forceinline__ void keep(unsigned (&hi)[NK][4], unsigned (&lo)[NK][4]) {
        wgmma_keep_regs(hi);
        if constexpr (kLo) wgmma_keep_regs(lo);
    }
};
// acc += part, then part's next k-step may be issued (both C fragments of N columns)
template <int N>
__device__ __forceinline__ void add_fresh(float (&acc)[N][4], float (&part)[N][4]) {
    wgmma_fence_regs(part);
    add_fragments(acc, part);
}

// The column of C fragment element e of n-tile n within its tile, for the thread of lane
// 4g + t4 (mma.cuh's layout: columns n·8 + 2·t4 and + 1)
__device__ __forceinline__ int frag_col(int n, int e, int t4) { return n * 8 + 2 * t4 + (e & 1); }

// C fragments times a factor per row (row[h]: rows g, g + 8) and one per column (col[j]: column j
// of the tile, frag_col), one multiply at a time (powers of two: exact; no product of two factors
// that could overflow)
template <int N>
__device__ __forceinline__ void unscale(float (&c)[N][4], const float (&row)[2], const float* col,
                                        int t4) {
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[n][e] = c[n][e] * row[e >> 1] * col[frag_col(n, e, t4)];
}

// C fragments times a factor per column only (a reduction's row factors moved onto them)
template <int N>
__device__ __forceinline__ void scale_columns(float (&c)[N][4], const float* col, int t4) {
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[n][e] *= col[frag_col(n, e, t4)];
}

}  // namespace cuflash
