"""Where a tiny call's host time goes (cProfile over 2000 calls each): dense forward, dense
backward, attention_varlen given a SeqLens, and given the arrays with both bounds."""
import cProfile, pstats, io, time
import numpy as np, cupy as cp
import cuflash

rng = np.random.default_rng(0)
r = lambda shape: cp.asarray(rng.standard_normal(shape).astype(np.float16))
q, k, v, do = (r((2, 4, 64, 64)) for _ in range(4))
qp, kp, vp = (r((512, 4, 64)) for _ in range(3))
cu = cp.asarray(np.arange(0, 513, 64).astype(np.int32))
sl = cuflash.SeqLens(cu)
_, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)
runs = {"dense fwd": lambda: cuflash.attention(q, k, v, causal=True),
        "dense bwd": lambda: cuflash.attention_backward(do, res),
        "varlen SeqLens": lambda: cuflash.attention_varlen(qp, kp, vp, sl, causal=True),
        "varlen bounds": lambda: cuflash.attention_varlen(qp, kp, vp, cu, cu, causal=True,
                                                          max_seqlen_q=64, max_seqlen_k=64)}
for name, f in runs.items():
    for _ in range(50):
        f()
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        f()
    t = (time.perf_counter() - t0) / 2000 * 1e6
    cp.cuda.Device().synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        f()
    pr.disable()
    cp.cuda.Device().synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
    print(f"===== {name}: {t:.1f} us/call host (no profiler)\n" + s.getvalue()[-5200:])
