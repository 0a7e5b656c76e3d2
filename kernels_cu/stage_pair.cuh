// cuflash: what a staging pass reads (tf32_stage.cuh, f16x3_stage.cuh): two float32 arrays of
// one row count S, strides [sequence, head, row] in elements, rows of D floats, staged into
// S_pad rows per (sequence, head). Both staging kernels take it through one signature, written
// once (cuflash/gpu/build.py, _stage_entry).
#pragma once

namespace cuflash {

struct StagePair {
    const float* a;
    const float* b;
    long long as0, as1, as2, bs0, bs1, bs2;
    int heads, S, S_pad, D;

    // The rows of (sequence, head) bh = sequence · heads + head
    __device__ __forceinline__ const float* a_rows(int bh) const {
        return a + (bh / heads) * as0 + (bh % heads) * as1;
    }
    __device__ __forceinline__ const float* b_rows(int bh) const {
        return b + (bh / heads) * bs0 + (bh % heads) * bs1;
    }
};

}  // namespace cuflash
