// cuflash: split-KV's merge (params.cuh, the forward with num_splits > 1). Each split s of a query
// row left lse_s and O_s (normalized by its own sum); the row's attention is
//     lse = log Σ_s e^{lse_s},   out = Σ_s e^{lse_s - lse} · O_s
// (a split that saw no key has lse_s = -inf and weight 0; a row that saw none gets lse = -inf and
// O = 0, as the forward's). LANES lanes per query row, ROWS = 256 / LANES rows per block of 256
// threads; grid (ceil(T / ROWS), sequences·heads) as the query-tile kernels' (seq.cuh). ROWS is
// cuflash/gpu/build.py's PREPROCESS_ROWS, which the launch divides T by.
#pragma once
#include "common.cuh"
#include "seq.cuh"

namespace cuflash {

template <typename T, bool PACKED, int ROWS>
struct SplitCombine {
    using Acc = typename Accum<T>::type;
    static constexpr int kThreads = 256, LANES = kThreads / ROWS;
    static_assert(kThreads % ROWS == 0, "whole lanes per row");

    static __device__ __forceinline__ void run(const FwdParams<T, Acc>& p) {
        const int bz = batch_index();
        if (bz >= p.batch * p.heads) return;
        const Seq seq = Seq::of<PACKED>(p, bz / p.heads, bz % p.heads);
        const int i = blockIdx.x * ROWS + threadIdx.x / LANES, lane = threadIdx.x % LANES;
        if (i >= seq.T_len) return;   // (no shuffles below)
        const long long row = seq.row(i);
        const Acc* lse_s = p.lse_accum + row;   // split s at lse_s[s · split_rows]
        Acc m = -Num<Acc>::inf();
        for (int s = 0; s < p.num_splits; ++s) m = Num<Acc>::max(m, lse_s[s * p.split_rows]);
        Acc sum = Acc(0);
        if (m != -Num<Acc>::inf())
            for (int s = 0; s < p.num_splits; ++s)
                sum += Num<Acc>::exp2((lse_s[s * p.split_rows] - m) * Acc(kLog2e));
        const Acc lse = sum == Acc(0) ? -Num<Acc>::inf() : m + Num<Acc>::log2(sum) * Acc(kLn2);
        if (lane == 0) p.lse[row] = lse;
        T* out = seq.q_row(p.out, p.out_stride, i);
        for (int c = lane; c < p.d; c += LANES) {
            Acc acc = Acc(0);
            if (sum != Acc(0))
                for (int s = 0; s < p.num_splits; ++s) {
                    const Acc w = Num<Acc>::exp2((lse_s[s * p.split_rows] - lse) * Acc(kLog2e));
                    acc += w * p.out_accum[(s * p.split_rows + row) * p.d + c];
                }
            out[c] = Store<T>::from(acc);
        }
    }
};

}  // namespace cuflash
