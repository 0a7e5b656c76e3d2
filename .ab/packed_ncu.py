"""Issue 12: why the packed kernel's causal forward of 16 equal sequences (4096 each) runs at
~0.93 of the dense kernel on the same (16, 4096) problem, the packed rows through the dense
kernel at ~0.98 (call 66). One causal forward each (Hq = 16, d = 128, fp16), for
    ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats \
        --section LaunchStats --section SchedulerStats -k regex:fwd python .ab/packed_ncu.py"""
import cupy as cp
import numpy as np

import cuflash

rng = np.random.default_rng(0)
Hq, d, n, L = 16, 128, 16, 4096
r = lambda shape: cp.asarray(rng.standard_normal(shape).astype(np.float16))
q, k, v = (r((n * L, Hq, d)) for _ in range(3))
view = lambda x: x.reshape(n, L, Hq, d).transpose(0, 2, 1, 3)
dense = [view(x).copy() for x in (q, k, v)]
lens = cuflash.SeqLens(cp.asarray(np.arange(0, n * L + 1, L).astype(np.int32)))
runs = {"dense": lambda: cuflash.attention(*dense, causal=True),
        "view": lambda: cuflash.attention(view(q), view(k), view(v), causal=True),
        "packed": lambda: cuflash.attention_varlen(q, k, v, lens, causal=True)}
for f in runs.values():
    f()
cp.cuda.Device().synchronize()
cp.cuda.profiler.start()
for name, f in runs.items():
    cp.cuda.nvtx.RangePush(name)
    f()
    cp.cuda.nvtx.RangePop()
cp.cuda.Device().synchronize()
cp.cuda.profiler.stop()
