// cuflash: the float16 copies of 'tf32''s backward on the 16-bit kernels and the maxima they are
// scaled by (cuflash/gpu/f16_scaled.py states the rule, max |x| and y = float16(x · s) rounded
// to nearest, and runs CuPy kernels where an array is not contiguous): a C-contiguous float32
// array read four floats a thread (16-byte loads), grid-stride. CuPy's elementwise copy ran at
// 1.26 TB/s on the H100 and its reduction at 2.0 (NOTES v71, call 212).
#pragma once
#include <cuda_fp16.h>

namespace cuflash {

// y[i] = float16(x[i] · s) for i < 4·n4 (x, y 16-byte and 8-byte aligned)
__device__ __forceinline__ void scaled_copy4(const float4* __restrict__ x, float s,
                                             uint2* __restrict__ y, long long n4) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const float4 a = __ldcs(x + i);   // read once: stream past L2
        const __half2 lo = __floats2half2_rn(a.x * s, a.y * s);
        const __half2 hi = __floats2half2_rn(a.z * s, a.w * s);
        y[i] = make_uint2(*reinterpret_cast<const unsigned*>(&lo),
                          *reinterpret_cast<const unsigned*>(&hi));
    }
}

// *m = max(*m, max_i |x[i]|) over i < 4·n4, as the floats' bits (a non-negative float's order is
// its bits' as an int; NaN's bits lie above inf's, so a NaN wins); *m starts at 0
__device__ __forceinline__ void absmax4(const float4* __restrict__ x, long long n4, int* m) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    int best = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const float4 a = __ldg(x + i);
        best = max(best, max(max(__float_as_int(fabsf(a.x)), __float_as_int(fabsf(a.y))),
                             max(__float_as_int(fabsf(a.z)), __float_as_int(fabsf(a.w)))));
    }
    best = __reduce_max_sync(0xffffffffu, best);   // every lane reaches it (no early return)
    if (threadIdx.x % 32 == 0) atomicMax(m, best);
}

}  // namespace cuflash
