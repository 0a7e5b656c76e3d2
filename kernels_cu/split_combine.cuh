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
#include "mma.cuh"
#include "seq.cuh"
#include "softmax.cuh"

namespace cuflash {

// Called by every thread of a forward block (V::SPLIT) after its partials are stored: i0, rows,
// the tile's first query and its rows; tile: its index among the (sequence, head)'s query tiles,
// tiles_x of them; grid_row: the (sequence, head)'s grid row (block.cuh, locate_head); scratch:
// the block's shared memory (scratch_bytes, 16-byte aligned), free once the partials are stored.
//
// The merge is latency-bound (a few KiB per row from L2, one block), so each warp stages a row's
// partials into its share of shared memory with cp.async, as many splits at once as fit: a
// register load per split kept 8 splits in flight, one L2 round trip per 8 splits (NOTES v29).
// The splits' lse go through shared memory too: read from L2 once, then their max, their sum and
// each split's weight w_s from there.
template <int NT, class P>
__device__ __forceinline__ void finish_split(const P& p, const Seq& seq, int i0, int rows,
                                             int tile, int tiles_x, int grid_row, char* scratch,
                                             int scratch_bytes) {
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
    __threadfence();   // ... and the other splits' are visible here (read past L1: .cg, __ldcg)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, splits = p.num_splits;
    const int chunks = p.d / E;                    // 16-byte chunks of a partial row
    const long long step = p.split_rows;           // split s of an lse row: s · split_rows rows on
    const long long split_bytes = step * p.d * (long long)sizeof(Acc);   // ... of an O row
    // this warp's room: the splits' lse, then their weights w_s (wbytes), then staged chunks
    const int room = scratch_bytes / NW & ~15, wbytes = (splits * int(sizeof(Acc)) + 15) & ~15;
    Acc* w = reinterpret_cast<Acc*>(scratch + warp * room);
    char* staged = scratch + warp * room + wbytes;
    const int slots = (room - wbytes) / 16;        // 16-byte chunks staged at once
    // (num_splits <= MAX_SPLITS, cuflash/checks.py: every kernel's shared memory holds a warp's
    // weights and one split's row)
    if (slots < 32 && slots < chunks) __trap();
    for (int r = warp; r < rows; r += NW) {
        const long long row = seq.row(i0 + r);
        const Acc* lse_s = p.lse_accum + row;
        const char* part = reinterpret_cast<const char*>(p.out_accum + row * p.d);
        // splits s0 .. s0 + n - 1, chunks c0 .. c0 + nc - 1 of each, to staged[(s - s0)·nc + c - c0]
        auto stage = [&](int c0, int nc, int s0, int n) {
            for (int k = lane; k < n * nc; k += 32)
                cp_async16(staged + 16 * k, part + (s0 + k / nc) * split_bytes + 16 * (c0 + k % nc),
                           true);
            cp_async_commit();
        };
        int nc = chunks < 32 ? chunks : 32, per = slots / nc;   // chunks per lane group, splits
        stage(0, nc, 0, per < splits ? per : splits);           // in flight with the lse loads

        Acc m = -Num<Acc>::inf();
        for (int s0 = lane; s0 < splits; s0 += 32 * 4) {   // four loads in flight per lane
            Acc x[4];
#pragma unroll
            for (int k = 0; k < 4; ++k)
                x[k] = s0 + 32 * k < splits ? __ldcg(lse_s + (s0 + 32 * k) * step) : -Num<Acc>::inf();
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (s0 + 32 * k < splits) w[s0 + 32 * k] = x[k];
                m = Num<Acc>::max(m, x[k]);
            }
        }
        m = lanes_max<32>(m);
        Acc sum = Acc(0);
        if (m != -Num<Acc>::inf())
            for (int s = lane; s < splits; s += 32) sum += Num<Acc>::exp2((w[s] - m) * Acc(kLog2e));
        sum = lanes_sum<32>(sum);
        const Acc lse = sum == Acc(0) ? -Num<Acc>::inf() : m + Num<Acc>::log2(sum) * Acc(kLn2);
        if (lane == 0) p.lse[row] = lse;
        for (int s = lane; s < splits; s += 32)
            w[s] = sum == Acc(0) ? Acc(0) : Num<Acc>::exp2((w[s] - lse) * Acc(kLog2e));

        T* out = seq.q_row(p.out, p.out_stride, i0 + r);
        for (int c0 = 0; c0 < chunks; c0 += 32) {   // lane: chunk c0 + lane of every split
            nc = chunks - c0 < 32 ? chunks - c0 : 32;
            per = slots / nc;
            Acc acc[E];
#pragma unroll
            for (int e = 0; e < E; ++e) acc[e] = Acc(0);
            for (int s0 = 0; s0 < splits; s0 += per) {
                const int n = splits - s0 < per ? splits - s0 : per;
                if (c0 > 0 || s0 > 0) stage(c0, nc, s0, n);
                cp_async_wait<0>();
                __syncwarp();   // every lane's copies (and weights) in place
                if (lane < nc && sum != Acc(0))
                    for (int s = 0; s < n; ++s) {
                        const Acc ws = w[s0 + s];
                        const char* src = staged + 16 * (s * nc + lane);
                        if constexpr (E == 4) {
                            const float4 x = *reinterpret_cast<const float4*>(src);
                            acc[0] += ws * x.x; acc[1] += ws * x.y; acc[2] += ws * x.z; acc[3] += ws * x.w;
                        } else {
                            const double2 x = *reinterpret_cast<const double2*>(src);
                            acc[0] += ws * x.x; acc[1] += ws * x.y;
                        }
                    }
                __syncwarp();   // ... and read before the next copies land
            }
            if (lane < nc)
#pragma unroll
                for (int e = 0; e < E; ++e) out[(c0 + lane) * E + e] = Store<T>::from(acc[e]);
        }
    }
}

// The same for a QueryBlock (block.cuh) whose kernel's shared memory is sm
template <int NT, int BLOCK_M, class P, class QB, class Smem>
__device__ __forceinline__ void finish_split(const P& p, const QB& blk, Smem& sm) {
    finish_split<NT>(p, blk.seq, blk.i0, blk.rows, blk.i0 / BLOCK_M, QB::tiles_x(p), blk.at.row,
                     reinterpret_cast<char*>(&sm), int(sizeof(Smem)));
}

}  // namespace cuflash
