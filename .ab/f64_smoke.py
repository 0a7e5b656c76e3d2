"""Quick correctness of the float64 default kernels against the oracle (issue 15, device call):
one line per case, the oracle criterion's numbers; exit 1 on a failure."""
import os, sys
import numpy as np
import cupy as cp
sys.path.insert(0, "tests")
if os.environ.get("CUFLASH_BENCH_M8"):
    sys.path.insert(0, "tools")
    import bench_f64
    bench_f64._m8_only()
import cuflash
from cuflash.oracle import oracle_attention, oracle_backward, rel_error
from helpers import assert_matches_oracle, grad_scale
bad = 0
for d in (64, 128, 40):
    for causal in (False, True):
        for T, S in ((97, 131), (130, 70)):
            rng = np.random.default_rng(T + d)
            q, k, v, do = (rng.standard_normal((2, 3, n, d)) for n in (T, S, S, T))
            qc, kc, vc, dc = (cp.asarray(x) for x in (q, k, v, do))
            ref, lse_ref = oracle_attention(q, k, v, causal=causal)
            refs = oracle_backward(do, q, k, v, causal=causal)
            out, res = cuflash.attention(qc, kc, vc, causal=causal, return_residuals=True)
            g = cuflash.attention_backward(dc, res)
            naive = cuflash.naive_attention(qc, kc, vc, causal=causal)
            ng = cuflash.naive_attention_backward(dc, qc, kc, vc, causal=causal)
            errs = [rel_error(cp.asnumpy(x), r) for x, r in zip((out,) + tuple(g), (ref,) + refs)]
            nerrs = [rel_error(cp.asnumpy(x), r) for x, r in zip((naive,) + tuple(ng), (ref,) + refs)]
            ok = True
            try:
                assert_matches_oracle(out, ref, naive, dtype=np.float64, name="out")
                for nm, x, r, n in zip(("dq", "dk", "dv"), g, refs, ng):
                    assert_matches_oracle(x, r, n, dtype=np.float64, name=nm, floor_scale=grad_scale(*refs))
            except AssertionError as e:
                ok = False; bad += 1; print("FAIL", e)
            print("ok " if ok else "BAD", f"d={d} causal={causal} T={T} S={S}",
                  "err", " ".join(f"{e:.1e}" for e in errs), "naive", " ".join(f"{e:.1e}" for e in nerrs), flush=True)
from cuflash.tile import default_tile
from cuflash.gpu import ops
print("default tiles", [default_tile(d, "float64", backward=b, smem_limit=ops.smem_limit(), arch=ops.device_arch()).short()
                        for d in (64, 128) for b in (False, True)])
print("smoke", "PASS" if bad == 0 else f"{bad} FAILED")
sys.exit(1 if bad else 0)
