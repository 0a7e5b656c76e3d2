"""Call 195: each kernel's share of a 'tf32' call at issue 15's short cells (ncu gpu__time_duration
per launch, one profiled call after a warm-up). bench_f32's shapes: B = 16384 / T, H = 2048 / d."""
import sys
import numpy as np, cupy as cp
sys.path.insert(0, ".")
import cuflash
from cupy.cuda import profiler

cells = [("bwd", 64, 2048, 0), ("bwd", 64, 2048, 1), ("bwd", 64, 16384, 1), ("bwd", 64, 4096, 1),
         ("fwd", 128, 2048, 1), ("fwd", 128, 2048, 0), ("fwd", 128, 16384, 1)]
for pas, d, T, causal in [cells[int(sys.argv[1])]]:
    B, H = 16384 // T, 2048 // d
    rng = cp.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((B, H, T, d), dtype=cp.float32) for _ in range(4))
    _, res = cuflash.attention(q, k, v, causal=bool(causal), precision="tf32", return_residuals=True)
    fn = ((lambda: cuflash.attention_backward(do, res, precision="tf32")) if pas == "bwd" else
          (lambda: cuflash.attention(q, k, v, causal=bool(causal), precision="tf32")))
    fn(); fn(); cp.cuda.runtime.deviceSynchronize()
    print(f"CELL {pas} {d} {T} {causal}", flush=True)
    profiler.start(); fn(); cp.cuda.runtime.deviceSynchronize(); profiler.stop()
