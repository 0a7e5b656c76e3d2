// cuflash: what happens to a score between Q·Kᵀ and the softmax (cuflash/scores.py has the same
// rule for the twin, naive and the oracle). With s = scale·(q·k):
//   softcap c > 0:  s <- c·tanh(s / c)                        (Gemma-2)
//   ALiBi slope:    s <- s - slope·|i + S - T - j|            (FlashAttention-2's alibi_slopes)
// Kernels keep scores in "u units", where p = 2^(u·mul - m) with m = max u·mul (softmax.cuh),
// and choose the units that cost the fewest instructions per score (mul folds into the exp's
// FFMA):
//   plain:    u = x = q·k                                  mul = scale·log2 e
//   ALiBi:    u = x - (slope / scale)·|dist|               mul = scale·log2 e
//   softcap:  u = tanh(x·scale / c) - (slope / c)·|dist|   mul = c·log2 e
// dist = i + diag - j comes in as Acc (Distance: one conversion per tile, not per score). tanh is
// tanh_fast (common.cuh: absolute error about 2.4e-7, below what lse's float32 criterion allows
// at any cap) for 16-bit storage, and tanhf / tanh for float32 and float64, whose outputs are
// held to their own precision. The backward also needs d s_out / d s_in = 1 - tanh² (1 without softcap); the final
// scale of dK and dQ supplies the rest of the chain rule.
#pragma once
#include "common.cuh"
#include "seq.cuh"

namespace cuflash {

template <class V, class P>
struct ScoreMod {
    using Acc = typename P::Acc;
    static constexpr bool kTransforms = V::SOFTCAP || V::ALIBI;
    static constexpr bool kFastTanh = sizeof(typename P::Elem) == 2;
    Acc mul;          // multiplies u inside exp2
    Acc cap_in;       // scale / c: the argument of tanh per unit of q·k
    Acc slope;        // ALiBi's slope in u units: slope / scale, or slope / c with softcap
    int diag;

    __device__ __forceinline__ ScoreMod(const P& p, const Seq& seq) : diag(seq.S_len - seq.T_len) {
        mul = V::SOFTCAP ? p.softcap * Acc(kLog2e) : p.scale_log2;
        cap_in = V::SOFTCAP ? p.scale / p.softcap : Acc(0);
        slope = V::ALIBI ? Acc(p.alibi_slopes[seq.b * p.heads + seq.h]) / (V::SOFTCAP ? p.softcap : p.scale)
                         : Acc(0);
    }

    // tanh(x·cap_in)
    __device__ __forceinline__ Acc capped(Acc x) const {
        if constexpr (kFastTanh) return tanh_fast(x, cap_in);
        else return Num<Acc>::tanh(x * cap_in);
    }

    // u of the raw score x = q·k at distance dist = i + diag - j (x itself when nothing
    // transforms)
    __device__ __forceinline__ Acc logit(Acc x, Acc dist) const {
        Acc u = V::SOFTCAP ? capped(x) : x;
        if constexpr (V::ALIBI) u = fma(-slope, Num<Acc>::abs(dist), u);
        return u;
    }

    // u as above, and g = d(softcapped s) / d s (1 without softcap) for the backward
    __device__ __forceinline__ Acc logit_grad(Acc x, Acc dist, Acc& g) const {
        if constexpr (!V::SOFTCAP) {
            g = Acc(1);
            return logit(x, dist);
        } else {
            Acc u = capped(x);
            g = Acc(1) - u * u;
            if constexpr (V::ALIBI) u = fma(-slope, Num<Acc>::abs(dist), u);
            return u;
        }
    }
};

// ALiBi's i + diag - j of a fragment's elements as Acc: element (0, 0)'s converted once per tile,
// each other's an exact integer offset from it that the unrolled loops fold to a constant (the
// sum stays exact below 2^24, float's integer range). `at(r, e, i, j)` is softmax.cuh's functor.
template <typename Acc>
struct Distance {
    int i0, j0;
    Acc base;
    template <class At>
    __device__ __forceinline__ Distance(At& at, int diag) {
        at(0, 0, i0, j0);
        base = Acc(i0 + diag - j0);
    }
    __device__ __forceinline__ Acc operator()(int i, int j) const {
        return base + Acc((i - i0) - (j - j0));
    }
};

}  // namespace cuflash
