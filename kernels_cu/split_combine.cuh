// cuflash: split-KV's merge (params.cuh, the forward with num_splits > 1), done by the forward
// kernel itself. Each split s of a query row leaves lse_s and O_s (normalized by its own sum);
// the row's attention is
//     lse = log Σ_s e^{lse_s},   out = Σ_s w_s · O_s,   w_s = e^{lse_s - lse}
// (a split that saw no key has lse_s = -inf and weight 0; a row that saw none gets lse = -inf and
// O = 0, as the forward's). The last of a query tile's num_splits blocks to store its partials
// merges the tile (the count in split_counter, one per query tile, which that block sets back to
// 0 for the next launch): one launch per forward, no second kernel. In the merging block each
// warp takes rows; its lanes reduce a row's lse over the splits, then sum 16-byte column chunks
// over them.
#pragma once
#include "common.cuh"
#include "seq.cuh"
#include "softmax.cuh"

namespace cuflash {

// Called by every thread of a forward block (V::SPLIT) after its partials are stored: i0, rows,
// the tile's first query and its rows; tile: its index among the (sequence, head)'s query tiles,
// tiles_x of them; grid_row: the (sequence, head)'s grid row (block.cuh, locate_head).
template <int NT, class P>
__device__ __forceinline__ void finish_split(const P& p, const Seq& seq, int i0, int rows,
                                             int tile, int tiles_x, int grid_row) {
    using Acc = typename P::Acc;
    using T = typename P::Elem;
    constexpr int E = 16 / sizeof(Acc), NW = NT / 32;   // Acc per 16-byte chunk
    int* counter = p.split_counter + (long long)grid_row * tiles_x + tile;
    __threadfence();   // this block's partials are visible GPU-wide before it is counted
    __syncthreads();
    bool last = false;
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1) == p.num_splits - 1;
        if (last) *counter = 0;
    }
    if (!__syncthreads_or(last)) return;
    __threadfence();   // ... and the other splits' are visible here (read past L1: __ldcg)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, splits = p.num_splits;
    const long long step = p.split_rows;   // split s of an lse row: s · split_rows rows on
    for (int r = warp; r < rows; r += NW) {
        const long long row = seq.row(i0 + r);
        const Acc* lse_s = p.lse_accum + row;
        Acc m = -Num<Acc>::inf();
        for (int s = lane; s < splits; s += 32) m = Num<Acc>::max(m, __ldcg(lse_s + s * step));
        m = lanes_max<32>(m);
        Acc sum = Acc(0);
        if (m != -Num<Acc>::inf())
            for (int s = lane; s < splits; s += 32)
                sum += Num<Acc>::exp2((__ldcg(lse_s + s * step) - m) * Acc(kLog2e));
        sum = lanes_sum<32>(sum);
        const Acc lse = sum == Acc(0) ? -Num<Acc>::inf() : m + Num<Acc>::log2(sum) * Acc(kLn2);
        if (lane == 0) p.lse[row] = lse;
        T* out = seq.q_row(p.out, p.out_stride, i0 + r);
        const Acc* part = p.out_accum + row * p.d;   // split s at part[s · split_rows · d]
        for (int c = lane * E; c < p.d; c += 32 * E) {
            Acc acc[E];
#pragma unroll
            for (int e = 0; e < E; ++e) acc[e] = Acc(0);
            if (sum != Acc(0))
#pragma unroll 8   // eight splits' loads in flight at once: the merge is latency-bound
                for (int s = 0; s < splits; ++s) {
                    const Acc w = Num<Acc>::exp2((__ldcg(lse_s + s * step) - lse) * Acc(kLog2e));
                    const Acc* src = part + s * step * p.d + c;
                    if constexpr (E == 4) {
                        const float4 x = __ldcg(reinterpret_cast<const float4*>(src));
                        acc[0] += w * x.x; acc[1] += w * x.y; acc[2] += w * x.z; acc[3] += w * x.w;
                    } else {
                        const double2 x = __ldcg(reinterpret_cast<const double2*>(src));
                        acc[0] += w * x.x; acc[1] += w * x.y;
                    }
                }
#pragma unroll
            for (int e = 0; e < E; ++e)
                if (c + e < p.d) out[c + e] = Store<T>::from(acc[e]);
        }
    }
}

// The same for a QueryBlock (block.cuh)
template <int NT, int BLOCK_M, class P, class QB>
__device__ __forceinline__ void finish_split(const P& p, const QB& blk) {
    finish_split<NT>(p, blk.seq, blk.i0, blk.rows, blk.i0 / BLOCK_M, QB::tiles_x(p), blk.at.row);
}

}  // namespace cuflash
