"""Issue 12 follow-up (NOTES v23): the general packed kernel (two cu_seqlens arrays) still reads
its causal diagonal from memory and runs ~5% behind the dense kernel on the same work. Candidate:
test the tile's cut as j1 - 1 - diag > i0 + right (the diagonal on the keys' side), so that the
compare's other operand, i0 + right, is uniform, as in every fast probe of calls 79-81. The
rewrite changes the SASS of 58 of the 141 dense d = 128 sm_90 kernels, so it is probed here on
the packed kernel alone, not landed. Variants (the packed kernels' source only):
  self      one array for both (the kPackedSelf kernels: main)
  general   two arrays of equal values (kPacked, main)
  jside     two arrays, with the rewrite
Each run: dense on the (B, H, T, d) copy, the packed arrays' view through the dense kernel, and
the packed kernel, one causal forward each, 3 times, under
    ncu --csv --print-units base --profile-from-start off --metrics gpu__time_duration.sum \
        python .ab/packed_probe2.py VARIANT"""
import sys
import cupy as cp
import numpy as np

import cuflash
from cuflash.gpu import build

CUT = "if (has_right() && j1 - 1 > i0 + diag + right) return true;"
REWRITE = {"jside": [(CUT, "if (has_right() && j1 - 1 - diag > i0 + right) return true;")]}
variant = sys.argv[1] if len(sys.argv) > 1 else "general"
_source = build.source


def source(spec):
    src = _source(spec)
    if spec.variant.packed:
        for old, new in REWRITE.get(variant, []):
            assert src.count(old) == 1, (variant, old)
            src = src.replace(old, new)
    return src


build.source = source
rng = np.random.default_rng(0)
Hq, d, n, L = 16, 128, 16, 4096
r = lambda shape: cp.asarray(rng.standard_normal(shape).astype(np.float16))
q, k, v = (r((n * L, Hq, d)) for _ in range(3))
view = lambda x: x.reshape(n, L, Hq, d).transpose(0, 2, 1, 3)
dense = [view(x).copy() for x in (q, k, v)]
cu = cp.asarray(np.arange(0, n * L + 1, L).astype(np.int32))
cu_k = cu if variant == "self" else cu.copy()
runs = {"dense": lambda: cuflash.attention(*dense, causal=True),
        "view": lambda: cuflash.attention(view(q), view(k), view(v), causal=True),
        "packed": lambda: cuflash.attention_varlen(q, k, v, cu, cu_k, max_seqlen_q=L,
                                                   max_seqlen_k=L, causal=True)}
ref = runs["dense"]()
out = runs["packed"]()
err = float(cp.abs(view(out).astype(cp.float32) - ref.astype(cp.float32)).max())
print(f"{variant}: packed vs dense max|diff| {err:.3g}", file=sys.stderr)
for f in runs.values():
    f()
cp.cuda.Device().synchronize()
cp.cuda.profiler.start()
for _ in range(3):
    for name, f in runs.items():
        f()
cp.cuda.Device().synchronize()
cp.cuda.profiler.stop()
