"""v90 (session 50): float64's dmma backward at d = 64 and 128 (default tiles; the tree on
sys.argv[1]) and float32 'highest''s tf32x3 forward at d = 128 on explicit tiles, TFLOP/s, best
of 2 medians. Prints one RESULT line of JSON."""
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np, cupy as cp
import cuflash
spec = importlib.util.spec_from_file_location("gputime", "cuflash/experiments/gputime.py")
gt = importlib.util.module_from_spec(spec); spec.loader.exec_module(gt)
rng = np.random.default_rng(0)
out = {}
def run(key, fn, flops):
    ms = float(np.median(gt.gpu_times(fn, 5, 2)))
    out[key] = round(flops / ms / 1e9, 2)
for d in (128, 64):
    for T in (2048, 4096):
        for causal in (False, True):
            B, H = 1, 4
            q, k, v, do = (cp.asarray(rng.standard_normal((B, H, T, d))) for _ in range(4))
            o, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True)
            run(f"f64 bwd d={d} T={T} causal={causal}", lambda: cuflash.attention_backward(do, res),
                4.0 * B * H * T * T * d * (0.5 if causal else 1) * 2.5)
if len(sys.argv) > 2:
    for t in ((128, 64, 8, 2), (128, 32, 8, 2), (64, 32, 4, 2)):
        tile = cuflash.TileConfig(*t, "tf32x3")
        for T in (4096, 16384):
            for causal in (False, True):
                B, H, d = max(1, 16384 // T), 16, 128
                q, k, v = (cp.asarray(rng.standard_normal((B, H, T, d)).astype(np.float32)) for _ in range(3))
                run(f"tf32x3 fwd {'x'.join(map(str, t))} T={T} causal={causal}",
                    lambda: cuflash.attention(q, k, v, causal=causal, tile=tile, precision="highest"),
                    4.0 * B * H * T * T * d * (0.5 if causal else 1))
print("RESULT " + json.dumps(out))
