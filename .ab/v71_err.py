"""Session 41 (NOTES v71): the backward's error against the float64 oracle, as README's precision
table counts it (max |error| / max |oracle|, the largest of dq, dk, dv; B = 1, H = 4,
standard-normal inputs, T = S), for 'tf32' by its default (d = 64: 'wgmma_f16s'), the x1 pair
by tile, float32 'highest', bfloat16 and float16, at d = 64, T = 1024 and 4096, causal and not.

    PYTHONPATH=. python3 .ab/v71_err.py
"""
import numpy as np


def main():
    import cupy as cp
    import cuflash
    from cuflash.experiments import env as run_env
    from cuflash.oracle import oracle_backward
    from cuflash.tile import wgmma_f16x3_tiles
    print("# " + run_env.summary_line(run_env.collect("gpu")), flush=True)
    d = 64
    x1 = wgmma_f16x3_tiles(d, True, "wgmma_f16x1")[0]
    print("T causal method err(max-norm, largest of dq dk dv)")
    for T in (1024, 4096):
        rng = np.random.default_rng(T)
        host = [rng.standard_normal((1, 4, T, d)) for _ in range(4)]
        for causal in (False, True):
            refs = oracle_backward(host[3], *host[:3], causal=causal)   # (dout, q, k, v)
            runs = [("tf32", np.float32, dict(precision="tf32")),
                    ("tf32_x1", np.float32, dict(tile=x1)),
                    ("highest", np.float32, dict(precision="highest")),
                    ("bfloat16", "bfloat16", {}), ("float16", np.float16, {})]
            for name, dt, kw in runs:
                from cuflash._xp import resolve_dtype
                q, k, v, do = (cp.asarray(x.astype(resolve_dtype(dt))) for x in host)
                _, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True,
                                           precision=kw.get("precision"))
                grads = cuflash.attention_backward(do, res, **kw)
                err = max(float(np.abs(cp.asnumpy(g).astype(np.float64) - r).max()
                                / np.abs(r).max()) for g, r in zip(grads, refs))
                print(f"{T} {int(causal)} {name} {err:.2e}", flush=True)


if __name__ == "__main__":
    main()
