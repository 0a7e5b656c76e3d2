// cuflash: split-KV's merge (params.cuh, the forward with num_splits > 1). Each split s of a query
// row left lse_s and O_s (normalized by its own sum); the row's attention is
//     lse = log Σ_s e^{lse_s},   out = Σ_s w_s · O_s,   w_s = e^{lse_s - lse}
// (a split that saw no key has lse_s = -inf and weight 0; a row that saw none gets lse = -inf and
// O = 0, as the forward's). One block of kThreads threads per query row: warp 0 reduces the
// splits' lse (lanes striding over the splits), the weights go to shared memory MAX_SPLITS at a
// time, and every thread sums its columns over the splits (coalesced reads of each split's
// row; columns c and c + kThreads, d <= 256). So a decode step's few rows with many splits are merged by as many threads as
// they have columns, and a prefill's many rows by as many blocks. Grid (T, sequences·heads)
// (seq.cuh; the launch passes T = the longest sequence's queries).
#pragma once
#include "common.cuh"
#include "seq.cuh"
#include "softmax.cuh"

namespace cuflash {

template <typename T, bool PACKED, int MAX_SPLITS>
struct SplitCombine {
    using Acc = typename Accum<T>::type;
    static constexpr int kThreads = 128;   // cuflash/gpu/build.py's COMBINE_THREADS

    static __device__ __forceinline__ void run(const FwdParams<T, Acc>& p) {
        __shared__ Acc weight[MAX_SPLITS];
        __shared__ Acc row_lse;
        const int bz = batch_index();
        if (bz >= p.batch * p.heads) return;
        const Seq seq = Seq::of<PACKED>(p, bz / p.heads, bz % p.heads);
        const int i = blockIdx.x;
        if (i >= seq.T_len) return;   // the whole block leaves together
        const long long row = seq.row(i);
        const Acc* lse_s = p.lse_accum + row;   // split s at lse_s[s · split_rows]
        const int splits = p.num_splits;
        if (threadIdx.x < 32) {
            const int lane = threadIdx.x;
            Acc m = -Num<Acc>::inf();
            for (int s = lane; s < splits; s += 32) m = Num<Acc>::max(m, lse_s[s * p.split_rows]);
            m = lanes_max<32>(m);
            Acc sum = Acc(0);
            if (m != -Num<Acc>::inf())
                for (int s = lane; s < splits; s += 32)
                    sum += Num<Acc>::exp2((lse_s[s * p.split_rows] - m) * Acc(kLog2e));
            sum = lanes_sum<32>(sum);
            if (lane == 0) {
                row_lse = sum == Acc(0) ? -Num<Acc>::inf() : m + Num<Acc>::log2(sum) * Acc(kLn2);
                p.lse[row] = row_lse;
            }
        }
        __syncthreads();
        const Acc lse = row_lse;
        T* out = seq.q_row(p.out, p.out_stride, i);
        const Acc* part = p.out_accum + row * p.d;   // split s at part[s · split_rows · d]
        const long long step = (long long)p.split_rows * p.d;
        constexpr int kCols = 256 / kThreads;       // columns per thread (d <= 256)
        Acc acc[kCols];
#pragma unroll
        for (int j = 0; j < kCols; ++j) acc[j] = Acc(0);
        // the splits MAX_SPLITS at a time: their weights in shared memory, then every column
        for (int s0 = 0; s0 < splits && lse != -Num<Acc>::inf(); s0 += MAX_SPLITS) {
            const int n = min(MAX_SPLITS, splits - s0);
            for (int s = threadIdx.x; s < n; s += kThreads)
                weight[s] = Num<Acc>::exp2((lse_s[(s0 + s) * p.split_rows] - lse) * Acc(kLog2e));
            __syncthreads();
#pragma unroll
            for (int j = 0; j < kCols; ++j) {
                const int c = threadIdx.x + j * kThreads;
                if (c < p.d) {
                    const Acc* col = part + s0 * step + c;
#pragma unroll 8
                    for (int s = 0; s < n; ++s) acc[j] += weight[s] * col[s * step];
                }
            }
            __syncthreads();
        }
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
            const int c = threadIdx.x + j * kThreads;
            if (c < p.d) out[c] = Store<T>::from(acc[j]);
        }
    }
};

}  // namespace cuflash
