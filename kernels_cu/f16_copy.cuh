// cuflash: the float16 copies of 'tf32''s backward on the 16-bit kernels (cuflash/gpu/
// f16_scaled.py states the rule, y = float16(x · s) rounded to nearest, and holds a CuPy
// elementwise kernel to it where an array is not contiguous): a C-contiguous float32 array read
// four floats a thread (16-byte loads, 8-byte stores), grid-stride. CuPy's elementwise copy ran
// at 1.26 TB/s on the H100 (NOTES v71, call 212), half of what a streaming copy reaches.
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

}  // namespace cuflash
