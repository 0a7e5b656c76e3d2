// cuflash: the backward's preprocess, D_i = Σ_c dO[i][c] · O[i][c] (FlashAttention-2, Algorithm 2
// line 4), one warp per row of the flattened (batch·T_len, d) arrays, 8 rows per block of 256
// threads; shared by every kernel family.
#pragma once
#include "common.cuh"
#include "params.cuh"
#include "softmax.cuh"

namespace cuflash {

template <typename T>
struct BwdPreprocess {
    using Acc = typename Accum<T>::type;
    static constexpr int kThreads = 256;

    static __device__ __forceinline__ void run(const BwdParams<T, Acc>& p) {
        constexpr int E = 16 / sizeof(T);
        const long long rows = (long long)p.batch * p.T_len;
        const long long r = (long long)blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
        const int lane = threadIdx.x % 32;
        if (r >= rows) return;
        Acc acc = Acc(0);
        for (int c = lane * E; c < p.d; c += 32 * E) {
            Acc o[E], g[E];
            load16<T, Acc>(p.out + r * p.d + c, o);
            load16<T, Acc>(p.dout + r * p.d + c, g);
#pragma unroll
            for (int e = 0; e < E; ++e) acc += o[e] * g[e];
        }
        acc = lanes_sum<32>(acc);
        if (lane == 0) p.D[r] = acc;
    }
};

}  // namespace cuflash
