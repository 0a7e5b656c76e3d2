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

    // u of the raw score x = q·k at query i, key j (identity when nothing transforms)
    __device__ __forceinline__ Acc logit(Acc x, int i, int j) const {
        if constexpr (!kTransforms) {
            return x;
        } else {
            Acc u;
            if constexpr (V::SOFTCAP) u = cap_out * Num<Acc>::tanh(x * cap_in);
            else u = x * scale_log2;
            if constexpr (V::ALIBI) u -= slope * Acc(abs(i + diag - j));
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
            if constexpr (V::ALIBI) u -= slope * Acc(abs(i + diag - j));
            return u;
        }
    }
};

}  // namespace cuflash
