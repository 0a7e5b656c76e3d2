// cuflash: how tensor-core kernels write their results, written once.
//   store_rows_staged  rows of a C-fragment accumulator (each warp owns 16·MT rows: O of the
//                      forward, dQ of the dQ kernels), each row times a factor, rounded to T,
//                      staged in shared memory the warp owns and stored with 16-byte writes
//   store_rows_direct  rows of a C-fragment accumulator (16 per warp: dK, dV) stored from the
//                      registers, two elements per lane and store (store2)
//   store_dkdv         the dK/dV kernels' end: a GQA group's blocks summed in a fixed order
// C fragment (mma.cuh): acc[mt][n][e] is row 16·mt + g + 8·(e / 2), column 8·n + 2t + e % 2 of
// the warp's rows, lane = 4g + t.
#pragma once
#include "mma.cuh"
#include "softmax.cuh"

namespace cuflash {

// rows [wrow, wrow + 16·MT) of the tile: row r gets acc · factor[mt][h] (r = wrow + 16·mt + g + 8h),
// staged at stage[off(r, col)] (the caller's own rows of a shared-memory tile, free by now), then
// copied to g_out (row stride ld) for rows < rows_valid and columns < d.
template <typename T, int MT, int NO, int DP, class Off>
__device__ __forceinline__ void store_rows_staged(T* __restrict__ g_out, int d, int ld, int rows_valid,
                                                  const float (&acc)[MT][NO][4],
                                                  const float (&factor)[MT][2], T* stage, Off&& off,
                                                  int wrow, int lane) {
    const int t4 = lane & 3;
    for_each_frag_row<MT>(wrow, lane, [&](int mt, int h, int r) {
#pragma unroll
        for (int n = 0; n < NO; ++n)
            store2<T>(stage + off(r, n * 8 + 2 * t4), acc[mt][n][2 * h] * factor[mt][h],
                      acc[mt][n][2 * h + 1] * factor[mt][h]);
    });
    __syncwarp();
    constexpr int EPC = 16 / sizeof(T), CPR = DP / EPC;   // elements per 16-byte chunk; per row
#pragma unroll
    for (int c = lane; c < 16 * MT * CPR; c += 32) {
        const int r = wrow + c / CPR, col = (c % CPR) * EPC;
        if (r < rows_valid && col < d)
            *reinterpret_cast<uint4*>(g_out + size_t(r) * ld + col) =
                *reinterpret_cast<const uint4*>(stage + off(r, col));
    }
}

// rows [wrow, wrow + 16) of the tile, acc · factor, in G wider than the staging rows' T (float
// from 16-bit rows): P = sizeof(G) / sizeof(T) passes of DP / P columns, each staged in the
// caller's rows (a G element in P slots of T, at off(r, P · column)) and copied to g_out (row
// stride ld) with 16-byte writes, rows < rows_valid and columns < d
template <typename G, typename T, int NO, int DP, class Off>
__device__ __forceinline__ void store_rows_staged_wide(G* __restrict__ g_out, int d, int ld,
                                                       int rows_valid, const float (&acc)[NO][4],
                                                       float factor, T* stage, Off&& off,
                                                       int wrow, int lane) {
    constexpr int P = sizeof(G) / sizeof(T), NP = NO / P, W = DP / P;   // a pass: n-tiles, columns
    constexpr int EPC = 16 / sizeof(G), CPR = W / EPC;   // G a 16-byte chunk; chunks a pass's row
    static_assert(P * sizeof(T) == sizeof(G) && NO % P == 0 && W % EPC == 0, "whole passes");
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int p = 0; p < P; ++p) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int n = 0; n < NP; ++n)
                store2<G>(reinterpret_cast<G*>(stage + off(wrow + g + 8 * h, P * (n * 8 + 2 * t4))),
                          acc[p * NP + n][2 * h] * factor, acc[p * NP + n][2 * h + 1] * factor);
        __syncwarp();
#pragma unroll
        for (int c = lane; c < 16 * CPR; c += 32) {
            const int r = wrow + c / CPR, col = (c % CPR) * EPC;
            if (r < rows_valid && p * W + col < d)
                *reinterpret_cast<uint4*>(g_out + size_t(r) * ld + p * W + col) =
                    *reinterpret_cast<const uint4*>(stage + off(r, P * col));
        }
        __syncwarp();   // the next pass rewrites the rows
    }
}

// A warp's O rows (C fragments: MT m-tiles of 16 rows from wrow; inv: 1 / l of each row),
// normalized, as floats with 8-byte stores from the fragments: row r < rows to row_of(r), its
// first d columns. Split-KV's partials: to out_accum (store_out) or to a thread-block cluster's
// shared memory (flash_fwd_mma.cu, split_combine.cuh).
template <int MT, int NO, class RowOf>
__device__ __forceinline__ void store_float_rows(RowOf&& row_of, int rows, int d,
                                                 const float (&o)[MT][NO][4],
                                                 const float (&inv)[MT][2], int wrow, int lane) {
    const int t4 = lane & 3;
    for_each_frag_row<MT>(wrow, lane, [&](int mt, int h, int r) {
        if (r >= rows) return;
        float* row = row_of(r);
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            const int c = n * 8 + 2 * t4;
            if (c < d)
                *reinterpret_cast<float2*>(row + c) =
                    make_float2(o[mt][n][2 * h] * inv[mt][h], o[mt][n][2 * h + 1] * inv[mt][h]);
        }
    });
}

// The tensor-core forward kernels' end, O · (1 / l) of a QueryBlock `blk` (block.cuh): rounded
// to T and stored through the staging rows (store_rows_staged), or with split-KV (params.cuh)
// this split's O_s as floats to its rows of out_accum (store_float_rows).
template <typename T, int MT, int NO, int DP, class P, class QB, class Off>
__device__ __forceinline__ void store_out(const P& p, const QB& blk, const float (&o)[MT][NO][4],
                                          const float (&inv)[MT][2], T* stage, Off&& off,
                                          int wrow, int lane) {
    if constexpr (QB::kSplit) {
        store_float_rows<MT, NO>([&](int r) { return blk.out_accum_row(p, r); }, blk.rows, p.d,
                                 o, inv, wrow, lane);
    } else {
        store_rows_staged<T, MT, NO, DP>(blk.seq.q_row(p.out, p.out_stride, blk.i0), p.d,
                                         int(p.out_stride[2]), blk.rows, o, inv, stage, off, wrow,
                                         lane);
    }
}

// Warps that split each tile's keys (flash_fwd_mma.cu, KW > 1) hold O, m and l of all 16·MT rows
// over their own keys; merge them into warp 0's, as split-KV's merge does across blocks:
// M = max_w m_w, scale_w = 2^(m_w - M) (m in log2 units; 0 for a warp that saw no key), O = Σ_w scale_w·O_w,
// l = Σ_w scale_w·l_w. buf: free shared memory (the K/V ring after the loop) of kMergeFloats.
// Every warp of the block calls it; it returns true in warp 0, which then holds the result (its
// l whole on lane t = 0 of each quad, so OnlineSoftmax::finalize's quad sum gives it).
template <int KW, int MT>
struct KeyWarpMerge {
    static constexpr int ROWS = 16 * MT;
    template <int DP>
    static constexpr int kMergeFloats = KW > 1 ? 2 * KW * ROWS + (KW - 1) * ROWS * DP : 0;

    template <int NO, class Softmax>
    static __device__ __forceinline__ bool run(float (&o)[MT][NO][4], Softmax& sm,
                                               float* buf, int warp, int lane) {
        float* m_buf = buf;                  // [KW][ROWS]
        float* l_buf = buf + KW * ROWS;      // [KW][ROWS]
        float* o_buf = buf + 2 * KW * ROWS;  // [KW - 1][ROWS][8·NO]
        const int g = lane >> 2, t4 = lane & 3;
        auto row_of = [&](int r) { return (r >> 1) * 16 + g + (r & 1) * 8; };
#pragma unroll
        for (int r = 0; r < 2 * MT; ++r) {
            const float l = lanes_sum<4>(sm.l[r]);
            if (t4 == 0) {
                m_buf[warp * ROWS + row_of(r)] = sm.m[r];
                l_buf[warp * ROWS + row_of(r)] = l;
            }
        }
        __syncthreads();
        auto scale_of = [&](float m, float M) {
            return m == -Num<float>::inf() ? 0.f : Num<float>::exp2(m - M);
        };
        float scale[2 * MT], M[2 * MT], L[2 * MT];
#pragma unroll
        for (int r = 0; r < 2 * MT; ++r) {
            M[r] = -Num<float>::inf();
#pragma unroll
            for (int w = 0; w < KW; ++w) M[r] = Num<float>::max(M[r], m_buf[w * ROWS + row_of(r)]);
            scale[r] = scale_of(sm.m[r], M[r]);
            L[r] = 0.f;
#pragma unroll
            for (int w = 0; w < KW; ++w)
                L[r] += scale_of(m_buf[w * ROWS + row_of(r)], M[r]) * l_buf[w * ROWS + row_of(r)];
        }
        if (warp > 0) {
            float* mine = o_buf + (warp - 1) * ROWS * (8 * NO);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int n = 0; n < NO; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        mine[row_of(2 * mt + (e >> 1)) * (8 * NO) + n * 8 + 2 * t4 + (e & 1)] =
                            o[mt][n][e] * scale[2 * mt + (e >> 1)];
        }
        __syncthreads();
        if (warp > 0) return false;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NO; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int at = row_of(2 * mt + (e >> 1)) * (8 * NO) + n * 8 + 2 * t4 + (e & 1);
                    float x = o[mt][n][e] * scale[2 * mt + (e >> 1)];
#pragma unroll
                    for (int w = 1; w < KW; ++w) x += o_buf[(w - 1) * ROWS * (8 * NO) + at];
                    o[mt][n][e] = x;
                }
#pragma unroll
        for (int r = 0; r < 2 * MT; ++r) {
            sm.m[r] = M[r];
            sm.l[r] = t4 == 0 ? L[r] : 0.f;
        }
        return true;
    }
};

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
                store2<T>(g_out + size_t(r) * ld + c, acc[n][2 * h] * factor,
                          acc[n][2 * h + 1] * factor);
        }
    }
}

// A C-fragment accumulator of a warp (16 rows from wrow; mma.cuh) as store_dkdv visits it:
// each(f) calls f(row, column, value) for each of this thread's elements.
template <int NO>
struct Fragments {
    const float (&acc)[NO][4];
    int wrow, lane;
    template <class F>
    __device__ __forceinline__ void each(F&& f) const {
        const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int n = 0; n < NO; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) f(wrow + g + h * 8, n * 8 + 2 * t4 + e, acc[n][2 * h + e]);
    }
};

// One accumulator tile's turn in store_dkdv: accum (+)= own, or out = (accum + own) · factor.
template <typename T, typename Acc, class Tile>
__device__ __forceinline__ void group_sum_turn(const Tile& tile, Acc* accum, T* out, int ld,
                                               Acc factor, int rows, int d, bool first, bool last) {
    tile.each([&](int r, int c, Acc v) {
        if (r >= rows || c >= d) return;
        const size_t o = size_t(r) * ld + c;
        if (!first) v += __ldcg(accum + o);
        if (last) out[o] = Store<T>::from(v * factor);
        else __stcg(accum + o, v);
    });
}

// A tile with no elements: store_dkdv's part for threads that hold no sums (a warp-specialized
// kernel's producer), so that they meet the group sum's block barriers
struct NoTile {
    template <class F>
    __device__ __forceinline__ void each(F&&) const {}
};

// The dK/dV kernels' end (a KeyBlock `kb`, block.cuh: one key tile and a chunk of the query heads
// of kv head hk): dK = dk_scale · Σ_h Σ_i dS_ijᵀ Q_i and dV = dv_scale · Σ_h Σ_i P_ijᵀ dO_i over
// the G query heads h of hk (zero where no query saw the tile; params.cuh: the factors); dk_tile, dv_tile hold the sums over this block's
// chunk (each(f): f(row, column, value) for each of this thread's elements).
// One chunk per group: direct() stores them (each family's own store).
// Several: the chunks' blocks of the tile take turns in the order of their rank (a counter per
// key tile, p.dkdv_sem, zeroed). Rank 0 writes its sums to float accumulators (p.dk_accum,
// p.dv_accum, shaped and strided as dk and dv), the ranks after it add theirs, the last adds its
// own and stores dK, dV (P::Grad, params.cuh). The same order on every run, so the sum is deterministic; no
// G-times buffer. A block waits only for blocks of lower grid index, which the GPU dispatches
// first.
template <class P, class KB, class Direct, class TK, class TV>
__device__ __forceinline__ void store_dkdv(const P& p, const KB& kb, Direct&& direct,
                                           const TK& dk_tile, const TV& dv_tile) {
    if (kb.ranks == 1) {
        direct();
        return;
    }
    const int rank = kb.rank;
    const bool first = rank == 0, last = rank == kb.ranks - 1;
    int* counter = kb.group_counter(p);
    if (threadIdx.x == 0)
        while (ld_acquire_gpu(counter) != rank) {
        }
    __syncthreads();
    group_sum_turn<typename P::Grad>(dk_tile, kb.seq.k_row(p.dk_accum, p.dk_stride, kb.j0),
                                     kb.seq.k_row(p.dk, p.dk_stride, kb.j0),
                                     int(p.dk_stride[2]), p.dk_scale, kb.rows, p.d, first, last);
    group_sum_turn<typename P::Grad>(dv_tile, kb.seq.k_row(p.dv_accum, p.dv_stride, kb.j0),
                                     kb.seq.k_row(p.dv, p.dv_stride, kb.j0),
                                     int(p.dv_stride[2]), p.dv_scale, kb.rows, p.d, first, last);
    if (!last) {
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) st_release_gpu(counter, rank + 1);
    }
}

// store_dkdv of the tensor-core kernels: this warp's 16 keys from wkey, C fragments dK, dV
template <int NO, class P, class KB>
__device__ __forceinline__ void store_dkdv_fragments(const P& p, const KB& kb,
                                                     const float (&dK)[NO][4],
                                                     const float (&dV)[NO][4], int wkey, int lane) {
    using G = typename P::Grad;
    store_dkdv(
        p, kb,
        [&] {
            store_rows_direct<G, NO>(kb.seq.k_row(p.dk, p.dk_stride, kb.j0), p.d,
                                     int(p.dk_stride[2]), kb.rows, dK, p.dk_scale, wkey, lane);
            store_rows_direct<G, NO>(kb.seq.k_row(p.dv, p.dv_stride, kb.j0), p.d,
                                     int(p.dv_stride[2]), kb.rows, dV, p.dv_scale, wkey, lane);
        },
        Fragments<NO>{dK, wkey, lane}, Fragments<NO>{dV, wkey, lane});
}

// Fragments of a warp that may hold the other tile (on = false: no elements)
template <int NO>
struct FragmentsIf {
    Fragments<NO> tile;
    bool on;
    template <class F>
    __device__ __forceinline__ void each(F&& f) const {
        if (on) tile.each(f);
    }
};

// The same for a warp that holds one of them (is_dk: dK, else dV) of its 16 keys from wkey; a
// warp holding the other stores it in the same call (every thread of the block takes part)
template <int NO, class P, class KB>
__device__ __forceinline__ void store_dkdv_one(const P& p, const KB& kb, const float (&acc)[NO][4],
                                               bool is_dk, int wkey, int lane) {
    using G = typename P::Grad;
    store_dkdv(
        p, kb,
        [&] {
            if (is_dk)
                store_rows_direct<G, NO>(kb.seq.k_row(p.dk, p.dk_stride, kb.j0), p.d,
                                         int(p.dk_stride[2]), kb.rows, acc, p.dk_scale, wkey,
                                         lane);
            else
                store_rows_direct<G, NO>(kb.seq.k_row(p.dv, p.dv_stride, kb.j0), p.d,
                                         int(p.dv_stride[2]), kb.rows, acc, p.dv_scale, wkey,
                                         lane);
        },
        FragmentsIf<NO>{{acc, wkey, lane}, is_dk}, FragmentsIf<NO>{{acc, wkey, lane}, !is_dk});
}

}  // namespace cuflash
