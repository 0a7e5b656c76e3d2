"""Issue 15, v22: how the 3xTF32 forward sums (the tensor core truncates when it adds to its
accumulator). CUFLASH_FRESH_QK / _PV (tf32.cuh): QK 0 = the k-steps chained in the tensor core,
1 = each k-step from zero, added by an FADD; PV 0 = chained over every key, 1 = per k-step,
2 = each key tile from zero, added to O by FADDs. Errors vs the float64 oracle (max-norm,
normwise) beside naive float32, worst over seeds; and forward TFLOP/s at T = 4096.
    QK=0 PV=2 python3 .ab/tf32_schemes.py"""
import os, statistics, sys
import numpy as np
import cupy as cp
qk, pv = int(os.environ.get("QK", 1)), int(os.environ.get("PV", 1))
from cuflash.gpu import build
body = build._body
build._body = lambda spec: (f"#define CUFLASH_FRESH_QK {qk}\n#define CUFLASH_FRESH_PV {pv}\n" + body(spec)) if spec.family == "tf32x3" else body(spec)
import cuflash
from cuflash.oracle import normwise_error, oracle_attention, rel_error
from cuflash.experiments import gputime
worst = {}
for d in (64, 128):
    for (T, S) in ((1000, 1000), (97, 257), (257, 2000)):
        for causal in (False, True):
            for seed in range(3):
                rng = np.random.default_rng(seed * 1000 + d + T)
                q = rng.standard_normal((2, 3, T, d)).astype(np.float32)
                k, v = (rng.standard_normal((2, 3, S, d)).astype(np.float32) for _ in range(2))
                ref, _ = oracle_attention(q, k, v, causal=causal)
                qc, kc, vc = map(cp.asarray, (q, k, v))
                o = cp.asnumpy(cuflash.attention(qc, kc, vc, causal=causal, precision="highest"))
                n = cp.asnumpy(cuflash.naive_attention(qc, kc, vc, causal=causal))
                r = (rel_error(o, ref) / rel_error(n, ref), normwise_error(o, ref) / normwise_error(n, ref))
                key = (d,)
                w = worst.get(key, (0, 0))
                worst[key] = (max(w[0], r[0]), max(w[1], r[1]))
for (d,), (a, b) in worst.items():
    print(f"QK={qk} PV={pv} d={d} err/naive_f32: max-norm {a:.2f} normwise {b:.2f}", flush=True)
for d in (64, 128):
    B, H, T = 4, 2048 // d, 4096
    rng = np.random.default_rng(0)
    q, k, v = (cp.asarray(rng.standard_normal((B, H, T, d)).astype(np.float32)) for _ in range(3))
    flops = 4.0 * B * H * T * T * d
    t = statistics.median(gputime.gpu_times(lambda: cuflash.attention(q, k, v, precision="highest"), 5, 2))
    print(f"QK={qk} PV={pv} d={d} T=4096 tile {cuflash.tile.default_tile(d, 'float32', precision='highest', smem_limit=232448, arch='sm_90').short()} {flops / t / 1e9:.1f} TFLOP/s", flush=True)
