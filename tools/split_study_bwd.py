"""Issue 15's 'highest' backward on 16-bit tensor cores, before any kernel: which sums must be
fresh, and which may stay in the accumulator, for float32 gradients (dq, dk, dv) computed from
three float16 products a pair to stay within 2x naive float32's error? The same model as
tools/split_study.py (the forward's study, NOTES v44-v45): operands split hi + lo after a
power-of-two scale into float16's range, the tensor core's accumulator adds each instruction's
k-step of exact products and truncates toward zero (k = 16 for float16 wgmma, 8 for TF32
mma.sync).

The backward is FlashAttention-2's, as the warp-specialized dK/dV kernels run it: key blocks of
--block-k keys (a consumer warpgroup's 64 rows) stay resident while query tiles of --block-q
stream past; per (query tile I, key block J):
  Sᵀ = K_J Q_Iᵀ,  Pᵀ = exp(scale·Sᵀ - lse_I),  dPᵀ = V_J dO_Iᵀ,  dSᵀ = Pᵀ ∘ (dPᵀ - D_I)
  dV_J += Pᵀ dO_I,  dK_J += scale·dSᵀ Q_I,  dQ_I += scale·dS K_J
with D = rowsum(dO ∘ O) and O, lse the forward's (the float64 oracle's, stored in float32).

Scales (powers of two, exact; what a kernel can fold without another split of any operand):
q, k, v and dO are scaled per row, so one hi / lo copy of each serves every product it enters.
Where a row-scaled operand is the contraction side (dO in dV, Q in dK, K in dQ), its row factor
moves onto the other operand's columns (Pᵀ and dSᵀ: one more exponent in P's exp2, one
multiply in dS), which is then scaled per row of its own: Pᵀ and dSᵀ per key row (the four
lanes of a quad), dS for dQ per tile (a warpgroup max).

Sums (the scheme is "<Sᵀ and dPᵀ>/<dV and dK>"):
  Sᵀ, dPᵀ   fresh: each k-step's three products from zero, added to a float32 sum (FADD);
            chain: the accumulator runs over the whole head dimension
  dV, dK    tile: each query tile's products from zero, added to float32 totals (FADD);
            chain: the accumulator runs over every query tile of the sequence (no totals: the
            16-bit kernels' register budget, which d = 128 needs)
  dQ        always one partial a (query tile, key block), chained over the block's keys and
            added in float32 (as the kernels' atomics or their fixed-order sum do)
'rn' rounds every sum to nearest (float32 matmuls of the split operands: no truncation).

Error: cuflash.oracle's rel_error (max |x - ref| / max |ref|) of each gradient against the
float64 oracle, worst over seeds, divided by naive float32's (cuflash.naive's backward on the
same inputs, float32 matmuls): the library's criterion asks <= 2x; the table prints the worst
of dq, dk, dv.

    python tools/split_study_bwd.py [--T 512] [--d 64,128] [--std 1,4] [--seeds 2] [--heads 2]
                                    [--block-q 64] [--block-k 64]
"""
from __future__ import annotations

import os
import sys

import numpy as np

from cuflash.mask import Mask
from cuflash.naive import naive_attention_backward
from cuflash.oracle import oracle_attention, oracle_backward, rel_error

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(os.path.dirname(_HERE), "tests")]
from split_study import F32, mma, pow2_scale, study_args  # noqa: E402
from split_study import split_terms as _split_terms  # noqa: E402
from helpers import FLOORS, LSE_GRAD, UNIT_ROUNDOFF  # noqa: E402  (the tests' bound)

BLOCK_Q = BLOCK_K = 64   # a warpgroup's key rows; the query tiles the dK/dV kernels stream


def split_terms(a, b, kind: str):
    """The products of a·bᵀ: split_study's three for '3xtf32' and '3xf16', the one float32
    product for 'f32' (the CUDA-core kernels' 'ieee': the tiled backward without any split)."""
    return [(a, b)] if kind == "f32" else _split_terms(a, b, kind)


def product(a, b, kind: str, mode: str):
    """a @ bᵀ (a (..., M, K), b (..., N, K), float32) as three split products summed by `mode`
    ('rn', 'chain', 'fresh'; split_study.mma). 3xf16: a and b are scaled per row (their
    non-contraction axis) into float16's range first and the result unscaled (exact)."""
    K = 8 if kind == "3xtf32" else 16
    if kind == "f32":
        return mma(split_terms(a, b, kind), K, "rn")
    if kind != "3xf16":
        return mma(split_terms(a, b, kind), K, mode)
    sa = pow2_scale(a, -1)
    sb = pow2_scale(b, -1)
    out = mma(split_terms(a * sa, b * sb, kind), K, mode)
    return (out / sa / np.swapaxes(sb, -1, -2)).astype(F32)


def backward(do, q, k, v, out, lse, kind: str, scheme: str, causal: bool,
             block_q: int | None = None, block_k: int | None = None):
    """(dq, dk, dv) in float32 by the key-block-resident backward, products split (`kind`:
    '3xtf32', '3xf16') and summed by `scheme` ('<st>/<acc>': st 'fresh' | 'chain', acc 'tile' |
    'chain'; or 'rn'). q, k, v, do (H, T|S, d) float32; out (H, T, d), lse (H, T) float32."""
    H, T, d = q.shape
    S = k.shape[-2]
    bq, bk = block_q or BLOCK_Q, block_k or BLOCK_K
    if S % bk or T % bq:
        raise ValueError(f"T = {T}, S = {S} must be multiples of block_q = {bq}, block_k = {bk}")
    scale = F32(1 / np.sqrt(d))
    st, acc = ("rn", "rn") if scheme == "rn" else scheme.split("/")
    if st not in ("rn", "fresh", "chain") or acc not in ("rn", "tile", "chain"):
        raise ValueError(f"unknown scheme {scheme!r}")
    K = 8 if kind == "3xtf32" else 16
    f16 = kind == "3xf16"
    cut = "rn" if scheme == "rn" or kind == "f32" else "chain"   # one tile's products' sum
    nJ = S // bk
    kb, vb = (x.reshape(H, nJ, bk, d) for x in (k, v))          # key blocks: a batch axis
    D = (do * out).sum(-1, dtype=F32)                           # (H, T)
    visible = Mask.make(causal=causal).visible_matrix(T, S)     # (T, S), the library's rule
    one = lambda shape: np.ones(shape, F32)                     # noqa: E731  (3xtf32: no scales)
    # row scales of the contraction-side operands (dO in dV, Q in dK, K in dQ)
    s_do = pow2_scale(do, -1) if f16 else one((H, T, 1))
    s_q = pow2_scale(q, -1) if f16 else one((H, T, 1))
    s_k = pow2_scale(kb, -1) if f16 else one((H, nJ, bk, 1))
    b_k_dq = np.swapaxes(kb * s_k, -1, -2)                      # (K_J · 2^e)ᵀ (H, nJ, d, bk)
    dq = np.zeros((H, T, d), F32)
    a_v, a_k, b_v, b_k = [], [], [], []
    for i0 in range(0, T, bq):
        I = slice(i0, i0 + bq)
        qi, doi = q[:, None, I], do[:, None, I]                  # (H, 1, bq, d)
        st_ = (product(kb, qi, kind, st) * scale).astype(F32)    # Sᵀ (H, nJ, bk, bq)
        vis = visible[I].T.reshape(nJ, bk, bq)
        pt = np.where(vis, np.exp((st_ - lse[:, None, None, I]).astype(F32)), F32(0)).astype(F32)
        dpt = product(vb, doi, kind, st)                         # dPᵀ
        dst = (pt * (dpt - D[:, None, None, I])).astype(F32)     # dSᵀ
        # contraction-side row factors moved onto Pᵀ's and dSᵀ's columns (powers of two)
        a_v.append((pt / np.swapaxes(s_do[:, None, I], -1, -2)).astype(F32))
        a_k.append((dst / np.swapaxes(s_q[:, None, I], -1, -2)).astype(F32))
        b_v.append(np.swapaxes(doi * s_do[:, None, I], -1, -2))  # (dO_I · 2^e)ᵀ (H, 1, d, bq)
        b_k.append(np.swapaxes(qi * s_q[:, None, I], -1, -2))
        # dQ_I = Σ_J dS_IJ K_J: K's row factor onto dS's columns, dS scaled per tile
        ds = (np.swapaxes(dst, -1, -2) / np.swapaxes(s_k, -1, -2)).astype(F32)
        ra = pow2_scale(ds, (-2, -1)) if f16 else one((H, nJ, 1, 1))
        part = mma(split_terms(ds * ra, b_k_dq, kind), K, cut) / ra    # (H, nJ, bq, d)
        acc_q = np.zeros((H, 1, bq, d), F32)
        for j in range(nJ):                                      # one fixed order, float32
            acc_q = (acc_q + part[:, j:j + 1]).astype(F32)
        dq[:, I] = (acc_q[:, 0] * scale).astype(F32)
    grads = []
    for a_list, b_list in ((a_v, b_v), (a_k, b_k)):
        if acc == "chain":   # one row scale over the sequence: the accumulator keeps it
            ra = (pow2_scale(np.concatenate(a_list, -1), -1) if f16
                  else one((H, nJ, bk, 1)))
            c = None
            for a, b in zip(a_list, b_list):
                c = mma(split_terms(a * ra, b, kind), K, "chain", c)
            tot = (c / ra).astype(F32)
        else:
            tot = np.zeros((H, nJ, bk, d), F32)
            for a, b in zip(a_list, b_list):
                ra = pow2_scale(a, -1) if f16 else one(a.shape[:-1] + (1,))
                tot = (tot + mma(split_terms(a * ra, b, kind), K, cut) / ra).astype(F32)
        grads.append(tot.reshape(H, S, d))
    dv, dk = grads
    return dq, (dk * scale).astype(F32), dv


def naive(do, q, k, v, causal: bool):
    """Naive float32 backward (cuflash.naive: float32 matmuls, the T×S matrices written out):
    the criterion's reference."""
    return naive_attention_backward(do, q, k, v, causal=causal)


SCHEMES = [("f32", "rn"), ("3xtf32", "fresh/tile"), ("3xf16", "rn"), ("3xf16", "fresh/tile"),
           ("3xf16", "fresh/chain"), ("3xf16", "chain/tile"), ("3xf16", "chain/chain")]

def criterion_use(err, err_naive, ref, grad_scale, lse_scale) -> float:
    """err over the library's bound for a float32 gradient, tests/helpers.py's
    assert_matches_oracle: err <= 2 · naive's + FLOORS · (largest gradient / largest |this
    gradient|) + LSE_GRAD · max |lse| · u(float32); <= 1 passes (the floors are what let the
    tiled float32 backward, whose D comes from the stored O and whose P from the stored lse, pass
    where naive recomputes both)."""
    m = float(np.abs(ref).max())
    floor = FLOORS["float32"] * max(grad_scale, m) / m
    return err / (2 * err_naive + floor + LSE_GRAD * lse_scale * UNIT_ROUNDOFF["float32"])


def main(argv=None) -> int:
    ap = study_args(__doc__, seeds=2)
    ap.add_argument("--block-q", type=int, default=BLOCK_Q, help="queries per streamed tile")
    ap.add_argument("--block-k", type=int, default=BLOCK_K, help="keys per resident block")
    a = ap.parse_args(argv)
    names = [f"{k} {s}" for k, s in SCHEMES]
    print(f"T = S = {a.T}, {a.heads} heads, query tiles of {a.block_q}, key blocks of "
          f"{a.block_k}, worst of {a.seeds} seeds and of dq, dk, dv (the worst one named): each "
          f"scheme's rel_error / the tiled float32 backward's ('f32 rn', the CUDA-core kernels' "
          f"arithmetic), then in brackets its use of the tests' bound (<= 1 passes: 2 x naive "
          f"float32's + floors)")
    print(f"{'d':>4} {'std':>4} {'causal':>6} {'naive dq/dk/dv':>26}  "
          + "  ".join(f"{n:>20}" for n in names))
    worst_all = {n: [0.0, 0.0] for n in names}
    for d in map(int, a.d.split(",")):
        for std in map(float, a.std.split(",")):
            for causal in (False, True):
                worst = {n: [0.0, "", 0.0] for n in names}
                base = np.zeros(3)
                for seed in range(a.seeds):
                    rng = np.random.default_rng([d, int(std * 10), causal, seed, 1])
                    q, k, v, do = (rng.standard_normal((a.heads, a.T, d)).astype(F32)
                                   * F32(std if i < 3 else 1) for i in range(4))
                    out, lse = oracle_attention(q, k, v, causal=causal)
                    lse_scale = float(np.abs(lse).max())
                    out, lse = out.astype(F32), lse.astype(F32)
                    refs = oracle_backward(do, q, k, v, causal=causal)
                    gs = max(float(np.abs(r).max()) for r in refs)
                    nb = [rel_error(x, r) for x, r in zip(naive(do, q, k, v, causal), refs)]
                    base = np.maximum(base, nb)
                    errs = {}
                    for (kind, sc), n in zip(SCHEMES, names):
                        g = backward(do, q, k, v, out, lse, kind, sc, causal, a.block_q, a.block_k)
                        errs[n] = [rel_error(x, ref) for x, ref in zip(g, refs)]
                    tiled = errs[names[0]]
                    for n in names:
                        r = [e / t for e, t in zip(errs[n], tiled)]
                        w = int(np.argmax(r))
                        use = max(criterion_use(e, b, ref, gs, lse_scale)
                                  for e, b, ref in zip(errs[n], nb, refs))
                        if r[w] > worst[n][0]:
                            worst[n][:2] = [r[w], "qkv"[w]]
                        worst[n][2] = max(worst[n][2], use)
                for n in names:
                    worst_all[n] = [max(worst_all[n][0], worst[n][0]),
                                    max(worst_all[n][1], worst[n][2])]
                print(f"{d:>4} {std:>4g} {causal!s:>6} {base[0]:8.2e} {base[1]:8.2e} {base[2]:8.2e}  "
                      + "  ".join(f"{worst[n][0]:9.2f}x {worst[n][1]} [{worst[n][2]:4.2f}]"
                                  for n in names), flush=True)
    print("worst over all cells (ratio to 'f32 rn' [use of the bound]): " + ", ".join(
        f"{n} {w[0]:.2f}x [{w[1]:.2f}]" for n, w in worst_all.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
