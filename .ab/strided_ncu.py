"""Issue 12: the strided backward's kernel time against contiguous inputs, clocks locked by ncu
(tools/bench_issue12.py's strided cell, non-causal backward, read 0.964-1.011 over five runs).
One process per case: (B, T, H, d) = (4, 4096, 16, 128) float16 transposed to (B, H, T, d)
('view') or the same values contiguous ('contiguous'), causal or not; 3 backward calls profiled.
    ncu --csv --print-units base --profile-from-start off --metrics gpu__time_duration.sum \
        python .ab/strided_ncu.py view|contiguous 0|1"""
import sys
import cupy as cp
import numpy as np

import cuflash

layout, causal = sys.argv[1], bool(int(sys.argv[2]))
rng = np.random.default_rng(0)
B, T, H, d = 4, 4096, 16, 128
base = [cp.asarray(rng.standard_normal((B, T, H, d)).astype(np.float16)) for _ in range(4)]
xs = [x.transpose(0, 2, 1, 3) for x in base]
if layout == "contiguous":
    xs = [cp.ascontiguousarray(x) for x in xs]
q, k, v, do = xs
_, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True)
for _ in range(2):
    cuflash.attention_backward(do, res)
cp.cuda.Device().synchronize()
cp.cuda.profiler.start()
for _ in range(3):
    cuflash.attention_backward(do, res)
cp.cuda.Device().synchronize()
cp.cuda.profiler.stop()
