"""Issue 15's 'highest' on 16-bit tensor cores, before any kernel: is float32 attention whose two
products run as three float16 products (x = hi + lo, each float16, scaled by powers of two into
float16's range) as accurate as naive float32, with the tensor core's truncating accumulator
modelled? Emulated on the CPU in NumPy; calibrated against the H200's 3xTF32 figures of NOTES v22
(call 75), which the same model must reproduce before its float16 figures mean anything.

Operands (each product a·b of attention's two, S = Q·Kᵀ and O = P·V, as three products, small
terms first: lo_a·hi_b + hi_a·lo_b + hi_a·hi_b; lo·lo is below float32's rounding):
  3xtf32   hi = tf32(x), lo = tf32(x - hi) (cuflash.precision.split): 11 + 11 bits, TF32's
           8-bit exponent, no scaling
  3xf16    x scaled by 2^e so that the block's largest |x| lies in [2^13, 2^14) (as
           flash_fwd_wgmma_x3.cu scales: Q and K per row, V per key tile, P by 2^14: factors
           the kernel folds into S once per tile and into the O update), hi = f16(x·2^e),
           lo = f16(x·2^e - hi): 11 + 11 bits too, and float16's rate on wgmma is twice TF32's
Sums (the tensor core takes a k-step of K products per instruction: m16n8k8 for TF32 mma.sync,
K = 8; wgmma's k16 for float16, K = 16):
  rn       float32 matmuls of the split operands (sums rounded to nearest: no tensor core)
  chain    both products' running sums in the accumulator: every instruction adds its K exact
           products to the accumulator and truncates toward zero (a model: products exact,
           addends aligned and cut; NOTES v22)
  fresh    Q·Kᵀ: each k-step's three products summed from zero in the accumulator (truncated),
           then added to S in float32 on the FMA pipe; P·V: each key tile's products summed from
           zero (truncated per instruction), then O = O·alpha + O_tile in float32 (the scheme
           tf32.cuh's 'highest' runs, which measured 1.3-1.5× naive float32 on the H200)
  qk-chain Q·Kᵀ chained, P·V per key tile (measured 4.7× on the H200 for 3xTF32)

The softmax is the kernels' online one over key tiles of --block-n keys (64: flash_fwd_wgmma_x3.cu's
tile; running max m, sum l, O rescaled by alpha), in float32. Error: rel_error of out (max |x - ref| / max |ref|) against the float64
oracle, worst over seeds, and its ratio to naive float32's (float32 matmuls, float32 softmax)
on the same inputs: the library's criterion asks <= 2x.

    python tools/split_study.py [--T 512] [--d 64,128] [--std 1,4] [--seeds 3] [--heads 2]
                                [--block-n 64]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from cuflash import precision
from cuflash.mask import Mask
from cuflash.oracle import normwise_error, oracle_attention, rel_error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tf32_study  # noqa: E402  (its 'f32' scheme is naive float32)

F32, F64 = np.float32, np.float64
BLOCK_N = 64    # keys per tile of the online softmax (main's --block-n; flash_fwd_wgmma_x3.cu's)


def rz32(x: np.ndarray) -> np.ndarray:
    """float64 -> float32, truncated toward zero (the accumulator's rounding in the model)."""
    f = x.astype(F32)
    over = np.abs(f.astype(F64)) > np.abs(x)
    f[over] = np.nextafter(f[over], F32(0))
    return f


def pow2_scale(x: np.ndarray, axis) -> np.ndarray:
    """2^e per block (max over `axis`) with the block's largest |x| in [2^13, 2^14); 1 where the
    block is zero; e within float32's [-126, 127] (flash_fwd_wgmma_x3.cu's f16_range_scale: a
    block near float32's smallest numbers stays below float16's range)."""
    m = np.abs(x).max(axis=axis, keepdims=True).astype(F64)
    e = np.where(m > 0, 13 - np.floor(np.log2(np.where(m > 0, m, 1.0))), 0.0)
    return np.exp2(np.clip(e, -126, 127)).astype(F32)


def f16_split(x: np.ndarray):
    """(hi, lo) of x (float32, already scaled into float16's range), each a float16 value held
    as float32: hi = f16(x), lo = f16(x - hi) (x - hi is exact in float32)."""
    hi = x.astype(np.float16).astype(F32)
    return hi, (x - hi).astype(np.float16).astype(F32)


def split_terms(a, b, kind):
    """The three (a-part, b-part) products of a·bᵀ, small terms first."""
    if kind == "3xtf32":
        (ah, al), (bh, bl) = precision.split(a), precision.split(b)
    else:
        (ah, al), (bh, bl) = f16_split(a), f16_split(b)
    return [(al, bh), (ah, bl), (ah, bh)]


def mma(terms, K: int, mode: str, c=None) -> np.ndarray:
    """Σ_terms a @ bᵀ over the last axis (a (..., M, D), b (..., N, D)) as the model's tensor
    core: mode 'rn' float32 matmuls; 'chain' every instruction (K of the D axis, one term)
    added to the accumulator c (zero when None) exactly, then truncated; 'fresh' each k-step's
    terms chained from zero and added to the float32 sum (RN)."""
    if mode == "rn":
        out = None
        for a, b in terms:
            t = (a @ np.swapaxes(b, -1, -2)).astype(F32)
            out = t if out is None else (out + t).astype(F32)
        return out if c is None else (c + out).astype(F32)
    D = terms[0][0].shape[-1]
    shape = terms[0][0].shape[:-1] + (terms[0][1].shape[-2],)
    acc = np.zeros(shape, F32) if c is None else c.astype(F32)
    total = np.zeros(shape, F32)
    for k0 in range(0, D, K):
        step = np.zeros(shape, F32) if mode == "fresh" else acc
        for a, b in terms:
            exact = a[..., k0:k0 + K].astype(F64) @ np.swapaxes(b[..., k0:k0 + K], -1, -2).astype(F64)
            step = rz32(step.astype(F64) + exact)
        if mode == "fresh":
            total = (total + step).astype(F32)
        else:
            acc = step
    return total if mode == "fresh" else acc


def attention(q, k, v, kind: str, sums: str, causal: bool, block_n: int | None = None) -> np.ndarray:
    """out of softmax(q kᵀ / sqrt(d)) v by the online softmax over key tiles, both products split
    (`kind`: '3xtf32', '3xf16'; 'f32' naive float32) and summed by `sums` ('rn', 'chain',
    'fresh', 'qk-chain')."""
    H, T, d = q.shape
    S = k.shape[-2]
    bn = block_n or BLOCK_N
    scale = F32(1 / np.sqrt(d))
    K = 8 if kind == "3xtf32" else 16
    qk_mode = {"rn": "rn", "chain": "chain", "fresh": "fresh", "qk-chain": "chain"}[sums]
    pv_chained = sums == "chain"
    sq = pow2_scale(q, -1) if kind == "3xf16" else np.ones((H, T, 1), F32)
    m = np.full((H, T, 1), -np.inf, F32)
    l = np.zeros((H, T, 1), F32)
    o = np.zeros((H, T, d), F32)
    visible = Mask.make(causal=causal).visible_matrix(T, S)   # the library's rule
    for j0 in range(0, S, bn):
        kt, vt = k[:, j0:j0 + bn], v[:, j0:j0 + bn]
        sk = pow2_scale(kt, -1) if kind == "3xf16" else np.ones((H, kt.shape[1], 1), F32)
        s = mma(split_terms(q * sq, kt * sk, kind), K, qk_mode)
        s = (s / sq / np.swapaxes(sk, -1, -2)).astype(F32) * scale   # powers of two: exact
        s = np.where(visible[:, j0:j0 + bn], s, -np.inf).astype(F32)
        m_new = np.maximum(m, s.max(-1, keepdims=True))
        safe = np.where(np.isfinite(m_new), m_new, F32(0))
        alpha = np.exp(np.where(np.isfinite(m), m - safe, -np.inf)).astype(F32)
        p = np.exp((s - safe).astype(F32)).astype(F32)
        l = (l * alpha + p.sum(-1, keepdims=True, dtype=F32)).astype(F32)
        sp = F32(2.0 ** 14) if kind == "3xf16" else F32(1)
        sv = pow2_scale(vt, (-2, -1)) if kind == "3xf16" else np.ones((H, 1, 1), F32)
        terms = split_terms(p * sp, np.swapaxes(vt * sv, -1, -2), kind)
        if pv_chained:   # O kept in the accumulator across tiles, rescaled in registers
            o = mma(terms, K, "chain", (o * alpha).astype(F32) * (sp * sv)) / (sp * sv)
        else:            # each tile's P·V from zero, added on the FMA pipe
            o_tile = mma(terms, K, "rn" if sums == "rn" else "chain")
            o = (o * alpha + o_tile / (sp * sv)).astype(F32)
        m = m_new
    return (o / l).astype(F32)


def naive(q, k, v, causal: bool) -> np.ndarray:
    """Naive float32 attention (float32 matmuls, float32 softmax): the criterion's reference,
    tf32_study's 'f32' scheme."""
    return tf32_study.attention(q, k, v, "f32", causal)


SCHEMES = [("3xtf32", "chain"), ("3xtf32", "qk-chain"), ("3xtf32", "fresh"),
           ("3xf16", "rn"), ("3xf16", "chain"), ("3xf16", "qk-chain"), ("3xf16", "fresh")]


def study_args(doc: str, seeds: int) -> argparse.ArgumentParser:
    """The options of this study and of split_study_bwd.py: T = S, head dims, input standard
    deviations, heads, seeds (inputs drawn per cell and seed)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--std", default="1,4", help="input standard deviations (4: peaky softmax)")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=seeds)
    return ap


def main(argv=None) -> int:
    ap = study_args(__doc__, seeds=3)
    ap.add_argument("--block-n", type=int, default=BLOCK_N, help="keys per tile")
    a = ap.parse_args(argv)
    names = [f"{k} {s}" for k, s in SCHEMES]
    print(f"T = S = {a.T}, {a.heads} heads, key tiles of {a.block_n}, worst of {a.seeds} seeds: "
          f"each scheme's rel_error of out / naive float32's (normwise error / naive's in "
          f"brackets)")
    print(f"{'d':>4} {'std':>4} {'causal':>6} {'naive f32':>9}  " + "  ".join(f"{n:>17}" for n in names))
    worst_all = {n: 0.0 for n in names}
    for d in map(int, a.d.split(",")):
        for std in map(float, a.std.split(",")):
            for causal in (False, True):
                worst = {n: (0.0, 0.0) for n in names}
                base = (0.0, 0.0)
                for seed in range(a.seeds):
                    rng = np.random.default_rng([d, int(std * 10), causal, seed])
                    q, k, v = (rng.standard_normal((a.heads, a.T, d)).astype(F32) * F32(std)
                               for _ in range(3))
                    ref = oracle_attention(q, k, v, causal=causal)[0]
                    nv = naive(q, k, v, causal)
                    nb = (rel_error(nv, ref), normwise_error(nv, ref))
                    base = tuple(max(x, y) for x, y in zip(base, nb))
                    for (kind, sums), n in zip(SCHEMES, names):
                        out = attention(q, k, v, kind, sums, causal, a.block_n)
                        e = (rel_error(out, ref) / nb[0], normwise_error(out, ref) / nb[1])
                        worst[n] = tuple(max(x, y) for x, y in zip(worst[n], e))
                for n in names:
                    worst_all[n] = max(worst_all[n], worst[n][0])
                print(f"{d:>4} {std:>4g} {causal!s:>6} {base[0]:9.2e}  " + "  ".join(
                    f"{worst[n][0]:7.2f}x [{worst[n][1]:5.2f}x]" for n in names), flush=True)
    print("worst max-norm ratio over all cells: " + ", ".join(
        f"{n} {worst_all[n]:.2f}x" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
