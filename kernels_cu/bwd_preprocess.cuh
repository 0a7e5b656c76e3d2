// cuflash: the backward's preprocess, D_i = Σ_c dO[i][c] · O[i][c] (FlashAttention-2, Algorithm 2
// line 4): LANES lanes per query row (each loads 16 bytes of O and of dO per step along the row),
// ROWS = 256 / LANES rows per block of 256 threads; grid (ceil(T / ROWS), sequences·heads) as the
// query-tile kernels' (seq.cuh); shared by every kernel family; PACKED as theirs (a compile-time
// variant). ROWS is cuflash/gpu/build.py's PREPROCESS_ROWS, which the launch divides T by.
#pragma once
#include "common.cuh"
#include "seq.cuh"
#include "softmax.cuh"

namespace cuflash {

template <typename T, bool PACKED, int ROWS>
struct BwdPreprocess {
    using Acc = typename Accum<T>::type;
    static constexpr int kThreads = 256, LANES = kThreads / ROWS;
    static_assert(kThreads % ROWS == 0 && 32 % LANES == 0, "rows of a power-of-two lane count");

    static __device__ __forceinline__ void run(const BwdParams<T, Acc>& p) {
        constexpr int E = 16 / sizeof(T);
        const int bz = batch_index();
        if (bz >= p.batch * p.heads) return;
        const Seq seq = Seq::of<PACKED>(p, bz / p.heads, bz % p.heads);
        const int i = blockIdx.x * ROWS + threadIdx.x / LANES, lane = threadIdx.x % LANES;
        const bool row = i < seq.T_len;   // (whole groups of LANES lanes leave together)
        Acc acc = Acc(0);
        if (row) {
            const T* out = seq.q_row(p.out, p.out_stride, i);
            const T* dout = seq.q_row(p.dout, p.dout_stride, i);
            for (int c = lane * E; c < p.d; c += LANES * E) {
                Acc o[E], g[E];
                load16<T, Acc>(out + c, o);
                load16<T, Acc>(dout + c, g);
#pragma unroll
                for (int e = 0; e < E; ++e) acc += o[e] * g[e];
            }
        }
        acc = lanes_sum<LANES>(acc);   // every lane of the warp takes part in the shuffles
        if (row && lane == 0) p.D[seq.row(i)] = acc;
    }
};

}  // namespace cuflash
