// cuflash: what happens to a score between Q·Kᵀ and the softmax (cuflash/scores.py has the same
// rule for the twin, naive and the oracle). With s = scale·(q·k):
//   softcap c > 0:  s <- c·tanh(s / c)                        (Gemma-2)
//   ALiBi slope:    s <- s - slope·|i + S - T - j|            (FlashAttention-2's alibi_slopes)
// Kernels keep scores in "u units", where p = 2^(u·mul - m·mul): dense scores stay raw q·k with
// mul = scale·log2(e) folded into one FFMA; transformed ones are converted to log2 units here
// (mul = 1). The backward also needs d s_out / d s_in = 1 - tanh² (1 without softcap); the
// final scale of dK and dQ supplies the rest of the chain rule.
#pragma once
#include "common.cuh"
#include "seq.cuh"

namespace cuflash {

// float(n) for 0 <= n < 2^23 on the FMA pipe: n's bits under 2^23's exponent, minus 2^23 (exact).
// The int-to-float convert (I2F) issues on the same unit as ex2 (MUFU), 16 per SM per clock, so
// one per score would halve the softmax's throughput (ALiBi's distance, every score).
__device__ __forceinline__ float small_int_to_float(int n) {
    return __int_as_float(0x4B000000 | n) - 8388608.f;
}
__device__ __forceinline__ double small_int_to_double(int n) { return double(n); }

template <class V, typename Acc>
struct ScoreMod {
    static constexpr bool kTransforms = V::SOFTCAP || V::ALIBI;
    Acc mul;          // multiplies u inside exp2
    Acc cap_in;       // scale / c: the argument of tanh per unit of q·k
    Acc cap_out;      // c·log2(e): tanh back to log2 units
    Acc slope;        // slope·log2(e) of this (sequence, query head)
    Acc scale_log2;
    int diag;

    template <class P>
    __device__ __forceinline__ ScoreMod(const P& p, const Seq& seq) : diag(seq.S_len - seq.T_len) {
        scale_log2 = p.scale_log2;
        mul = kTransforms ? Acc(1) : p.scale_log2;
        cap_in = V::SOFTCAP ? p.scale / p.softcap : Acc(0);
        cap_out = V::SOFTCAP ? p.softcap * Acc(kLog2e) : Acc(0);
        slope = V::ALIBI ? Acc(p.alibi_slopes[seq.b * p.heads + seq.h]) * Acc(kLog2e) : Acc(0);
    }

    // |i + diag - j| as Acc (ALiBi's distance; below 2^23 for any sequence cuflash runs)
    __device__ __forceinline__ Acc distance(int i, int j) const {
        const int n = abs(i + diag - j);
        if constexpr (sizeof(Acc) == 4) return small_int_to_float(n);
        else return small_int_to_double(n);
    }

    // u of the raw score x = q·k at query i, key j (identity when nothing transforms)
    __device__ __forceinline__ Acc logit(Acc x, int i, int j) const {
        if constexpr (!kTransforms) {
            return x;
        } else {
            Acc u;
            if constexpr (V::SOFTCAP) u = cap_out * Num<Acc>::tanh(x * cap_in);
            else u = x * scale_log2;
            if constexpr (V::ALIBI) u -= slope * distance(i, j);
            return u;
        }
    }

    // u as above, and g = d(softcapped s) / d s (1 without softcap) for the backward
    __device__ __forceinline__ Acc logit_grad(Acc x, int i, int j, Acc& g) const {
        if constexpr (!V::SOFTCAP) {
            g = Acc(1);
            return logit(x, i, j);
        } else {
            const Acc t = Num<Acc>::tanh(x * cap_in);
            g = Acc(1) - t * t;
            Acc u = cap_out * t;
            if constexpr (V::ALIBI) u -= slope * distance(i, j);
            return u;
        }
    }
};

}  // namespace cuflash
