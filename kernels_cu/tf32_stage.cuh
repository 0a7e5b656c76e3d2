// cuflash: K and Vᵀ staged for the TF32 wgmma forward (flash_fwd_wgmma_tf32.cu), in one pass over
// k and v. cuflash/gpu/tf32_stage.py states the rule and computes it with array operations
// (the reference the tests hold this kernel to):
//     kr[b, h, j, c]      = tf32(k[b, h, j, c])                  (0 for S <= j < S_pad)
//     vt[b, h, c, 8u + s] = tf32(v[b, h, 8u + key_of_slot(s), c])  (0 past S)
// One block: KEYS keys (KEYS / 8 groups of 8) × D columns of one (sequence, kv head), NT
// threads (cuflash/gpu/build.py, TF32_STAGE_THREADS: the launch's block too). K goes row by row (reads and writes along c); V goes through shared memory, read along
// c and written along the keys of each Vᵀ row.
#pragma once
#include "stage_pair.cuh"
#include "tf32.cuh"

namespace cuflash {

// The key of the 8 that k-slot s of a P·V step holds (tf32_stage.KEY_OF_SLOT): slot t key 2t,
// slot t + 4 key 2t + 1
__device__ __forceinline__ int key_of_slot(int s) { return s < 4 ? 2 * s : 2 * (s - 4) + 1; }

template <int KEYS, int MAX_D, int NT>
struct Tf32Stage {
    static_assert(KEYS % 8 == 0, "whole 8-key groups");

    static constexpr int N = KEYS * MAX_D / NT;   // items a thread at most (D = MAX_D)
    static_assert(KEYS * MAX_D % NT == 0, "whole rounds of items");

    // grid (S_pad / KEYS, sequences · heads); in.a: k, in.b: v
    static __device__ __forceinline__ void run(const StagePair& in, float* __restrict__ kr,
                                               float* __restrict__ vt) {
        __shared__ float sv[KEYS][MAX_D + 1];   // odd row length: the column reads hit 32 banks
        const int bh = blockIdx.y, j0 = blockIdx.x * KEYS, S = in.S, S_pad = in.S_pad, D = in.D;
        const float* kb = in.a_rows(bh);
        const float* vb = in.b_rows(bh);
        const long long ks2 = in.as2, vs2 = in.bs2;
        // item i = threadIdx.x + n·NT: row i / D, column i % D; every load of the thread issued
        // before its first store (in flight together: NOTES v58)
        float kx[N], vx[N];
#pragma unroll
        for (int n = 0; n < N; ++n) {
            const int i = threadIdx.x + n * NT, r = i / D, c = i % D, j = j0 + r;
            const bool in = i < KEYS * D && j < S;
            kx[n] = in ? __ldg(kb + j * ks2 + c) : 0.f;
            vx[n] = in ? __ldg(vb + j * vs2 + c) : 0.f;
        }
#pragma unroll
        for (int n = 0; n < N; ++n) {
            const int i = threadIdx.x + n * NT, r = i / D, c = i % D;
            if (i < KEYS * D) {
                kr[((long long)bh * S_pad + j0 + r) * D + c] = __uint_as_float(to_tf32(kx[n]));
                sv[r][c] = __uint_as_float(to_tf32(vx[n]));
            }
        }
        __syncthreads();
        for (int i = threadIdx.x; i < D * KEYS; i += NT) {
            const int c = i / KEYS, s = i % KEYS;
            vt[((long long)bh * D + c) * S_pad + j0 + s] = sv[(s & ~7) + key_of_slot(s & 7)][c];
        }
    }
};

}  // namespace cuflash
