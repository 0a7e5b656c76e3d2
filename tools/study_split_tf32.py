"""Issue 15, float32 on tensor cores, before any kernel: how accurate is attention whose two
products run on split TF32 operands? A CPU study (NumPy, no GPU), NOTES.md v14.

TF32 keeps 10 explicit mantissa bits (cvt.rna.tf32.f32 rounds to nearest, ties away). A float32
x splits into big = tf32(x) and small = tf32(x - big); a product of two TF32 numbers is exact in
float32 (22 bits), so a tensor core's float32 accumulation of them is a float32 sum of exact
products. The modes, for S = Q·Kᵀ and O = P·V:

  fp32  float32 products (what naive float32 computes; the criterion's reference)
  tf32  tf32(a)·tf32(b): one product ("tf32", opt-in)
  3x    small·big + big·small, then + big·big (CUTLASS's 3xTF32: small·small dropped)
  4x    small·small too

Each matmul here is a float32 BLAS matmul of the rounded operands (the products exact, the sums
rounded in float32 by BLAS's order, not the tensor core's: how the hardware orders its k = 8
sums is the part this study does not see). The softmax is float32 as in the kernels. Error:
max |out − float64 oracle| over the output, worst of `--trials` random normal inputs; issue
15's criterion is 3x ≤ 2 × fp32.

    python3 tools/study_split_tf32.py [--dims 64,128,256] [--lengths 512,2048] [--trials 3]
"""
import argparse

import numpy as np

from cuflash import precision


# the roundings, as the library computes them (cuflash.precision)
tf32, split = precision.tf32, precision.split


def matmul(a, b, mode):
    a, b = a.astype(np.float32), b.astype(np.float32)
    if mode == "fp32":
        return a @ b
    if mode == "tf32":
        return tf32(a) @ tf32(b)
    ab, asm = split(a)
    bb, bsm = split(b)
    if mode == "3x":
        return (asm @ bb + ab @ bsm) + ab @ bb
    if mode == "4x":
        return ((asm @ bsm + asm @ bb) + ab @ bsm) + ab @ bb
    raise ValueError(mode)


def attention(q, k, v, mode):
    scale = 1.0 / np.sqrt(q.shape[-1])
    if mode == "f64":
        s = (q.astype(np.float64) @ k.T.astype(np.float64)) * scale
        p = np.exp(s - s.max(1, keepdims=True))
        return (p / p.sum(1, keepdims=True)) @ v.astype(np.float64)
    s = matmul(q, k.T, mode) * np.float32(scale)
    p = np.exp(s - s.max(1, keepdims=True)).astype(np.float32)
    return matmul(p, v, mode) / p.sum(1, keepdims=True, dtype=np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--lengths", default="512,2048")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    modes = ("fp32", "tf32", "3x", "4x")
    print(f"{'d':>4} {'T=S':>5} " + " ".join(f"{m:>9}" for m in modes) + "   3x/fp32")
    for d in map(int, a.dims.split(",")):
        for T in map(int, a.lengths.split(",")):
            worst = dict.fromkeys(modes, 0.0)
            for _ in range(a.trials):
                q, k, v = (rng.standard_normal((T, d)).astype(np.float32) for _ in range(3))
                ref = attention(q, k, v, "f64")
                for m in modes:
                    worst[m] = max(worst[m], float(np.abs(attention(q, k, v, m) - ref).max()))
            print(f"{d:>4} {T:>5} " + " ".join(f"{worst[m]:9.2e}" for m in modes)
                  + f"   {worst['3x'] / worst['fp32']:.2f}")


if __name__ == "__main__":
    main()
