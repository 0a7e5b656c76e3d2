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

// The merged row's lse from its splits' largest lse_s, m, and sum = Σ_s e^(lse_s - m): -inf
// where no split saw a key (sum 0). Both merges below.
template <typename Acc>
__device__ __forceinline__ Acc merged_lse(Acc m, Acc sum) {
    return sum == Acc(0) ? -Num<Acc>::inf() : m + Num<Acc>::log2(sum) * Acc(kLn2);
}

// Called by every thread of a forward block (V::SPLIT) after its partials are stored: i0, rows,
// the tile's first query and its rows; tile: its index among the (sequence, head)'s query tiles,
// tiles_x of them; grid_row: the (sequence, head)'s grid row (block.cuh, locate_head); scratch:
// the block's shared memory (scratch_bytes, 16-byte aligned), free once the partials are stored.
//
// The merging block is alone with a few KiB per row to read from L2: its time is load latency and
// instruction count. So each lane stages its own 16-byte column chunk of many splits at once into
// its warp's share of shared memory with cp.async (two buffers, one landing while the other is
// summed), and the splits' lse are read from L2 once into shared memory, where their max, their
// sum and each split's weight w_s are computed once for the row (NOTES v29).
template <int NT, class P>
__device__ __forceinline__ void finish_split(const P& p, const Seq& seq, int i0, int rows,
                                             int tile, int tiles_x, int grid_row, char* scratch,
                                             int scratch_bytes) {
    using Acc = typename P::Acc;
    using T = typename P::Elem;
    constexpr int E = 16 / sizeof(Acc), NW = NT / 32;   // Acc per 16-byte chunk
    int* counter = p.split_counter + (long long)grid_row * tiles_x + tile;
    // every thread's partial stores come before thread 0's release (the barrier orders them), and
    // thread 0's acquire before every thread's reads of the other splits' partials (the second
    // barrier): CUTLASS's GenericBarrier pattern, one fence in the block instead of two per thread
    __syncthreads();
    bool last = false;
    if (threadIdx.x == 0) {
        last = atom_add_acq_rel_gpu(counter, 1) == p.num_splits - 1;
        if (last) *counter = 0;
    }
    if (!__syncthreads_or(last)) return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, splits = p.num_splits;
    const int chunks = p.d / E;                    // 16-byte chunks of a partial row
    const long long step = p.split_rows;           // split s of an lse row: s · split_rows rows on
    const long long split_bytes = step * p.d * (long long)sizeof(Acc);   // ... of an O row
    // this warp's room: the splits' weights w_s, then two buffers of `half` splits × 32 lanes ×
    // 16 bytes; lane l's chunks at 16·l of each 512-byte split (its own: no other lane reads them).
    // The warps that have a row share the block's memory: a tile of fewer rows than warps (one
    // query per head, no GQA fold) stages more splits a round, so fewer L2 rounds (NOTES v99).
    const int busy = rows < NW ? (rows > 1 ? rows : 1) : NW;
    const int room = scratch_bytes / busy & ~15, wbytes = (splits * int(sizeof(Acc)) + 15) & ~15;
    // every split in one round where the room holds them all (one buffer; the second stays
    // empty), else two buffers of `half` splits: one landing while the other is summed (NOTES v104)
    const int fit = (room - wbytes) / (32 * 16);
    const int half = fit >= splits ? splits : fit / 2;
    // (the host caps num_splits at what this room holds: cuflash/gpu/ops.py, merge_split_cap,
    // the same arithmetic; small explicit tiles hold fewer than checks.MAX_SPLITS)
    if (half < 1) __trap();
    Acc* w = reinterpret_cast<Acc*>(scratch + warp * room);
    char* mine = scratch + warp * room + wbytes + 16 * lane;
    for (int r = warp; r < rows; r += NW) {
        const long long row = seq.row(i0 + r);
        const Acc* lse_s = p.lse_accum + row;
        const char* part = reinterpret_cast<const char*>(p.out_accum + row * p.d);
        // splits s0 .. s0 + half - 1 (those that exist) of chunk c into buffer buf, one group
        auto stage = [&](int c, int s0, int buf) {
            if (c < chunks) {
                const char* src = part + 16 * c + s0 * split_bytes;
                char* dst = mine + buf * half * 512;
                const int n = splits - s0 < half ? splits - s0 : half;
                for (int s = 0; s < n; ++s, src += split_bytes, dst += 512)
                    cp_async16(dst, src, true);
            }
            cp_async_commit();
        };
        stage(lane, 0, 0);   // in flight with the lse loads

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
        const Acc lse = merged_lse(m, sum);
        if (lane == 0) p.lse[row] = lse;
        for (int s = lane; s < splits; s += 32)
            w[s] = sum == Acc(0) ? Acc(0) : Num<Acc>::exp2((w[s] - lse) * Acc(kLog2e));
        __syncwarp();   // every split's weight in place

        T* out = seq.q_row(p.out, p.out_stride, i0 + r);
        for (int c = lane; c < ((chunks + 31) & ~31); c += 32) {   // whole warps: cp.async groups
            if (c > lane) stage(c, 0, 0);
            Acc acc[E];
#pragma unroll
            for (int e = 0; e < E; ++e) acc[e] = Acc(0);
            for (int s0 = 0, buf = 0; s0 < splits; s0 += half, buf ^= 1) {
                stage(c, s0 + half, buf ^ 1);   // the next splits (an empty group past the last)
                cp_async_wait<1>();             // this lane's copies of s0 .. landed
                __syncwarp();   // (and a compiler barrier: the reads below stay after the wait)
                const int n = splits - s0 < half ? splits - s0 : half;
                const char* x16 = mine + buf * half * 512;
                if (c < chunks && sum != Acc(0))
#pragma unroll 4
                    for (int s = 0; s < n; ++s, x16 += 512) {
                        const Acc ws = w[s0 + s];
                        if constexpr (E == 4) {
                            const float4 x = *reinterpret_cast<const float4*>(x16);
                            acc[0] += ws * x.x; acc[1] += ws * x.y; acc[2] += ws * x.z; acc[3] += ws * x.w;
                        } else {
                            const double2 x = *reinterpret_cast<const double2*>(x16);
                            acc[0] += ws * x.x; acc[1] += ws * x.y;
                        }
                    }
                __syncwarp();   // the buffer read before the next copies into it are issued
            }
            cp_async_wait<0>();
            if (c < chunks)
#pragma unroll
                for (int e = 0; e < E; ++e) out[c * E + e] = Store<T>::from(acc[e]);
        }
        __syncwarp();   // the weights read before the next row's
    }
}

// The same for a QueryBlock (block.cuh) whose kernel's shared memory is sm: the scratch is all of
// the launch's dynamic shared memory from sm on, which a launch of at most one block an SM may
// make larger than the layout (cuflash/gpu/ops.py, merge_room_bytes)
template <int NT, int BLOCK_M, class P, class QB, class Smem>
__device__ __forceinline__ void finish_split(const P& p, const QB& blk, Smem& sm) {
    finish_split<NT>(p, blk.seq, blk.i0, blk.rows, blk.i0 / BLOCK_M, QB::tiles_x(p), blk.at.row,
                     reinterpret_cast<char*>(&sm), int(dynamic_smem_from(&sm)));
}

// Split-KV in thread-block clusters (sm_90; V::CLUSTER = C = p.num_splits, block.cuh
// QueryBlock): the C splits of a query tile are the blocks of one cluster. Each leaves its partial
// (lse_s, and O_s normalized by its own sum, as above) in its own shared memory, a
// ClusterPartials, and the cluster merges them through its shared memory: no stores to L2, no
// fence, no counter, and the merge shared by the C blocks (NOTES v91). Each thread of the
// cluster takes 4-column chunks of the rows, reads the C splits' lse of the row and their
// chunks from the other blocks, and writes out and lse.
template <int ROWS, int DP>
struct ClusterPartials {
    static constexpr int LD = DP + 8;   // a row's floats: the fragments' float2 stores (8 rows ×
                                        // 4 column pairs a warp) fall in distinct banks
    float lse[ROWS];
    alignas(16) float o[ROWS][LD];
};

// Called by every thread of every block of the cluster once its partials are in `part` (the
// cluster barrier's arrival releases them)
template <int NT, class P, class QB, class Part>
__device__ __forceinline__ void finish_cluster_split(const P& p, const QB& blk, const Part& part) {
    using T = typename P::Elem;
    constexpr int C = QB::kCluster;
    static_assert(C > 1, "clusters of 2, 4 or 8 blocks");
    if (p.num_splits != C) __trap();   // the host launches one cluster of all the splits
    cluster_arrive();   // this block's partials, released to the cluster
    cluster_wait();     // and every other block's, acquired
    const int chunks = p.d / 4, items = blk.rows * chunks;
    unsigned lse_at[C], o_at[C];
#pragma unroll
    for (int s = 0; s < C; ++s) {
        lse_at[s] = cluster_map(smem_addr(part.lse), s);
        o_at[s] = cluster_map(smem_addr(&part.o[0][0]), s);
    }
    for (int it = QB::cluster_rank() * NT + threadIdx.x; it < items; it += C * NT) {
        const int r = it / chunks, c = 4 * (it % chunks);
        float x[C], m = -Num<float>::inf();
#pragma unroll
        for (int s = 0; s < C; ++s) x[s] = cluster_ld(lse_at[s] + 4 * r);
        float4 o[C];
#pragma unroll
        for (int s = 0; s < C; ++s) o[s] = cluster_ld4(o_at[s] + 4 * (r * Part::LD + c));
#pragma unroll
        for (int s = 0; s < C; ++s) m = Num<float>::max(m, x[s]);
        float sum = 0.f;
#pragma unroll
        for (int s = 0; s < C; ++s) {
            x[s] = m == -Num<float>::inf() ? 0.f : Num<float>::exp2((x[s] - m) * float(kLog2e));
            sum += x[s];
        }
        const float inv = sum == 0.f ? 0.f : 1.f / sum;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int s = 0; s < C; ++s) {
            const float w = x[s] * inv;
            acc.x += w * o[s].x; acc.y += w * o[s].y; acc.z += w * o[s].z; acc.w += w * o[s].w;
        }
        T* out = blk.seq.q_row(p.out, p.out_stride, blk.i0 + r) + c;
        out[0] = Store<T>::from(acc.x); out[1] = Store<T>::from(acc.y);
        out[2] = Store<T>::from(acc.z); out[3] = Store<T>::from(acc.w);
        if (c == 0) p.lse[blk.seq.row(blk.i0 + r)] = merged_lse(m, sum);
    }
    cluster_arrive();   // this block's reads of the others' partials are done
    cluster_wait();     // and no block leaves while another may still read its partials
}

}  // namespace cuflash
