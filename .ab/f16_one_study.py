"""Idea for issue 15's 'tf32' (NOTES v55, CPU only): one float16 product of rows scaled by powers
of two (the x3 kernels' staging, hi part only) in place of one TF32 product. Emulated as
tools/tf32_study.py emulates TF32: q, k rows scaled into [2^13, 2^14) and rounded to float16
(nearest even), products exact in float32; P scaled by 2^14, V per key tile of 64 (its largest
|x|), both rounded to float16. Error of out against the float64 oracle beside 'tf32' and naive
float32 on the same inputs (worst of 3 seeds)."""
import sys
import numpy as np
sys.path.insert(0, "tools")
import tf32_study as ts
from cuflash.oracle import oracle_attention, rel_error

f = np.float32


def scale_rows(x, axis=-1):
    m = np.abs(x).max(axis=axis, keepdims=True)
    e = np.where(m > 0, 13 - np.floor(np.log2(np.where(m > 0, m, 1))), 0)
    return np.ldexp(f(1), e.astype(np.int32)).astype(f)


def f16(x):
    return x.astype(np.float16).astype(f)


def attention_f16(q, k, v, causal, block_n=64):
    d = q.shape[-1]
    sq, sk = scale_rows(q), scale_rows(k)
    s = (f16(q * sq) @ np.swapaxes(f16(k * sk), -1, -2)).astype(f)
    s = (s / sq / np.swapaxes(sk, -1, -2)).astype(f) * f(1 / np.sqrt(d))
    if causal:
        T, S = s.shape[-2:]
        s = np.where(np.arange(S)[None, :] <= np.arange(T)[:, None] + S - T, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp((s - m).astype(f)).astype(f)
    l = p.sum(-1, keepdims=True, dtype=f)
    H, S, _ = v.shape
    out = np.zeros(q.shape, f)
    for j in range(0, S, block_n):   # V per key tile, P·2^14; tiles summed in float32
        vt = v[:, j:j + block_n]
        sv = scale_rows(vt.reshape(H, -1))[:, :, None]   # (H, 1, 1)
        out = (out + (f16(p[..., j:j + block_n] * f(2 ** 14)) @ f16(vt * sv)) / (sv * f(2 ** 14))).astype(f)
    return (out / l).astype(f)


T, heads = 512, 4
print(f"T = S = {T}: rel_error vs float64 oracle (worst of 3 seeds), ratio to naive float32")
for d in (64, 128, 256):
    for std in (1.0, 4.0):
        for causal in (False, True):
            w = {"f32": 0, "tf32": 0, "f16row": 0}
            for seed in range(3):
                rng = np.random.default_rng([d, int(std * 10), causal, seed])
                q, k, v = (rng.standard_normal((heads, T, d)).astype(f) * f(std) for _ in range(3))
                ref = oracle_attention(q, k, v, causal=causal)[0]
                w["f32"] = max(w["f32"], rel_error(ts.attention(q, k, v, "f32", causal), ref))
                w["tf32"] = max(w["tf32"], rel_error(ts.attention(q, k, v, "tf32", causal), ref))
                w["f16row"] = max(w["f16row"], rel_error(attention_f16(q, k, v, causal), ref))
            print(f"d={d:3} std={std:g} causal={causal!s:5}  f32 {w['f32']:.2e}  tf32 {w['tf32']:.2e} "
                  f"({w['tf32'] / w['f32']:.0f}x)  f16row {w['f16row']:.2e} ({w['f16row'] / w['f32']:.0f}x)", flush=True)
