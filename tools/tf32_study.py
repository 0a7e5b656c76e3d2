"""Issue 15's question before any kernel: how accurate is float32 attention whose two products
(S = Q Kᵀ, O = P V) run on TF32 tensor cores, one product ("tf32") or split ("3xtf32": CUTLASS's
big·big + big·small + small·big; "4xtf32": with small·small), against naive float32 and the
float64 oracle? Emulated on the CPU in NumPy:

  tf32(x)     float32 rounded to TF32's 10-bit mantissa, to nearest, ties away from zero (PTX
              cvt.rna.tf32.f32): add half an ulp of TF32 to the bit pattern and cut 13 bits.
  product     a product of two TF32 numbers is exact in float32 (11 + 11 significant bits), so a
              float32 BLAS matmul of TF32-rounded operands stands for the tensor core's MMA with
              float32 accumulation (the order of the sums differs; so does naive's).
  split       x = big + small, big = tf32(x), small = tf32(x - big) (x - big is exact in
              float32); the partial products are summed small terms first.

The softmax runs in float32 (max, exp, sum) as the kernels' do; P is split like any operand.
The error is cuflash.oracle's rel_error (max |x - ref| / max |ref|) of out, per scheme and
against naive float32 (float32 matmuls throughout) on the same inputs: the library's criterion
asks a path for <= 2x naive's error in its precision.

    python tools/tf32_study.py [--T 512] [--d 64,128,256] [--std 1,4] [--seeds 3]
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from cuflash import precision
from cuflash.oracle import normwise_error, oracle_attention, rel_error


# the roundings, as the library computes them (cuflash.precision: the kernels' and the twin's)
tf32, split = precision.tf32, precision.split


def product(a: np.ndarray, b: np.ndarray, scheme: str) -> np.ndarray:
    """a @ b (float32 in and out) by one scheme: 'f32', 'tf32', '3xtf32', '4xtf32'."""
    f = np.float32
    if scheme == "f32":
        return (a.astype(f) @ b.astype(f)).astype(f)
    if scheme == "tf32":
        return (tf32(a) @ tf32(b)).astype(f)
    (ab, as_), (bb, bs) = split(a), split(b)
    terms = [as_ @ bb, ab @ bs]
    if scheme == "4xtf32":
        terms.insert(0, as_ @ bs)
    small = terms[0].astype(f)
    for t in terms[1:]:
        small = (small + t).astype(f)
    return ((ab @ bb).astype(f) + small).astype(f)


def attention(q, k, v, scheme: str, causal: bool) -> np.ndarray:
    """out of softmax(q kᵀ / sqrt(d)) v, float32 softmax, both products by `scheme`."""
    d = q.shape[-1]
    s = product(q, np.swapaxes(k, -1, -2), scheme) * np.float32(1 / np.sqrt(d))
    if causal:
        T, S = s.shape[-2:]
        s = np.where(np.arange(S)[None, :] <= np.arange(T)[:, None] + S - T, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp((s - m).astype(np.float32)).astype(np.float32)
    l = p.sum(-1, keepdims=True, dtype=np.float32)
    return (product(p, v, scheme) / l).astype(np.float32)


SCHEMES = ("f32", "tf32", "3xtf32", "4xtf32")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--d", default="64,128,256")
    ap.add_argument("--std", default="1,4", help="input standard deviations (4: peaky softmax)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args(argv)
    print(f"T = S = {a.T}, {a.heads} heads, worst of {a.seeds} seeds; rel_error of out against "
          f"the float64 oracle (normwise in brackets), and the ratio to naive float32's")
    print(f"{'d':>4} {'std':>4} {'causal':>6}  " + "  ".join(f"{s:>22}" for s in SCHEMES))
    for d in map(int, a.d.split(",")):
        for std in map(float, a.std.split(",")):
            for causal in (False, True):
                worst = {s: (0.0, 0.0) for s in SCHEMES}
                for seed in range(a.seeds):
                    rng = np.random.default_rng([d, int(std * 10), causal, seed])
                    q, k, v = (rng.standard_normal((a.heads, a.T, d)).astype(np.float32)
                               * np.float32(std) for _ in range(3))
                    ref = oracle_attention(q, k, v, causal=causal)[0]
                    for s in SCHEMES:
                        out = attention(q, k, v, s, causal)
                        e = (rel_error(out, ref), normwise_error(out, ref))
                        worst[s] = tuple(max(x, y) for x, y in zip(worst[s], e))
                base = worst["f32"][0]
                print(f"{d:>4} {std:>4g} {causal!s:>6}  " + "  ".join(
                    f"{worst[s][0]:8.2e} [{worst[s][1]:7.1e}] {worst[s][0] / base:4.1f}x"
                    for s in SCHEMES), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
