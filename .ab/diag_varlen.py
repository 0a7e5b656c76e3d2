"""Where the packed varlen batch loses against dense (issue 12): the same 65536 tokens,
Hq=16, d=128, fp16, forward and backward, timed side by side in rounds:
  dense      (16, 16, 4096, 128) contiguous
  dense8k    (8, 16, 8192, 128) contiguous (the same tokens in half the sequences)
  view       the (16, 4096, 16, 128) array's transposed view (packed rows, dense kernel)
  equal      attention_varlen of 16 sequences of 4096 (packed kernel, equal lengths), SeqLens
  random     attention_varlen of the seeded uniform 1..8192 lengths, SeqLens
  random-cu  the same given the arrays (a readback per call)
TFLOP/s of real work and ratio to dense."""
import sys
import numpy as np, cupy as cp
sys.path.insert(0, "tools")
import cuflash
from bench_issue12 import interleaved, _pairs

rng = np.random.default_rng(0)
Hq, d, total = 16, 128, 65536
lens, left = [], total
while left > 0:
    L = min(left, int(rng.integers(1, 8193))); lens.append(L); left -= L
r = lambda shape: cp.asarray(rng.standard_normal(shape).astype(np.float16))
q, k, v, do = (r((total, Hq, d)) for _ in range(4))
cu_r = cp.asarray(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
cu_e = cp.asarray(np.arange(0, total + 1, 4096).astype(np.int32))
sl_r, sl_e = cuflash.SeqLens(cu_r), cuflash.SeqLens(cu_e)
view = lambda x: x.reshape(16, 4096, Hq, d).transpose(0, 2, 1, 3)
dense = [view(x).copy() for x in (q, k, v, do)]
dense8k = [x.reshape(8, 8192, Hq, d).transpose(0, 2, 1, 3).copy() for x in (q, k, v, do)]
for causal in (False, True):
    fl_e = 4.0 * d * Hq * 16 * _pairs(4096, causal)
    fl_r = 4.0 * d * Hq * sum(_pairs(L, causal) for L in lens)
    fns, flops = {}, {}
    def add(name, fwd, bwd_of, fl):
        _, res = fwd(True)
        fns[("f", name)] = lambda: fwd(False)
        fns[("b", name)] = lambda: bwd_of(res)
        flops[name] = fl
    add("dense", lambda rr: cuflash.attention(*dense[:3], causal=causal, return_residuals=rr),
        lambda res: cuflash.attention_backward(dense[3], res), fl_e)
    fl_8 = 4.0 * d * Hq * 8 * _pairs(8192, causal)
    add("dense8k", lambda rr: cuflash.attention(*dense8k[:3], causal=causal, return_residuals=rr),
        lambda res: cuflash.attention_backward(dense8k[3], res), fl_8)
    add("view", lambda rr: cuflash.attention(view(q), view(k), view(v), causal=causal,
                                              return_residuals=rr),
        lambda res: cuflash.attention_backward(view(do), res), fl_e)
    add("equal", lambda rr: cuflash.attention_varlen(q, k, v, sl_e, causal=causal,
                                                      return_residuals=rr),
        lambda res: cuflash.attention_varlen_backward(do, res), fl_e)
    add("random", lambda rr: cuflash.attention_varlen(q, k, v, sl_r, causal=causal,
                                                       return_residuals=rr),
        lambda res: cuflash.attention_varlen_backward(do, res), fl_r)
    add("random-cu", lambda rr: cuflash.attention_varlen(q, k, v, cu_r, cu_r, causal=causal,
                                                          return_residuals=rr),
        lambda res: cuflash.attention_varlen_backward(do, res), fl_r)
    ms = {n: sorted(t)[len(t) // 2] for n, t in interleaved(fns, 5, 3).items()}
    for p, m in (("f", 1.0), ("b", 2.5)):
        tf = {n: m * flops[n] / ms[(p, n)] / 1e9 for n in flops}
        print(f"{'fwd' if p == 'f' else 'bwd'} causal={causal!s:5} " + "  ".join(
            f"{n} {tf[n]:6.1f} ({tf[n] / tf['dense']:.3f})" for n in tf), flush=True)
