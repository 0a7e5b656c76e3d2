// cuflash: the backward's preprocess, D_i = Σ_c dO[i][c] · O[i][c] (FlashAttention-2, Algorithm 2
// line 4), one warp per query row, 8 rows per block of 256 threads; grid (ceil(T / 8),
// sequences·heads) as the query-tile kernels' (seq.cuh); shared by every kernel family; PACKED as
// theirs (a compile-time variant).
#pragma once
#include "common.cuh"
#include "seq.cuh"
#include "softmax.cuh"

namespace cuflash {

template <typename T, bool PACKED>
struct BwdPreprocess {
    using Acc = typename Accum<T>::type;
    static constexpr int kThreads = 256;

    static __device__ __forceinline__ void run(const BwdParams<T, Acc>& p) {
        constexpr int E = 16 / sizeof(T);
        const int bz = batch_index();
        if (bz >= p.batch * p.heads) return;
        const Seq seq = Seq::of<PACKED>(p, bz / p.heads, bz % p.heads);
        const int i = blockIdx.x * (kThreads / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
        if (i >= seq.T_len) return;
        const T* out = seq.q_row(p.out, p.out_stride, i);
        const T* dout = seq.q_row(p.dout, p.dout_stride, i);
        Acc acc = Acc(0);
        for (int c = lane * E; c < p.d; c += 32 * E) {
            Acc o[E], g[E];
            load16<T, Acc>(out + c, o);
            load16<T, Acc>(dout + c, g);
#pragma unroll
            for (int e = 0; e < E; ++e) acc += o[e] * g[e];
        }
        acc = lanes_sum<32>(acc);
        if (lane == 0) p.D[seq.row(i)] = acc;
    }
};

}  // namespace cuflash
