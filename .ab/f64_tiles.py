"""Session 42 (NOTES v74): float64's forward at d = 128 on sm_90, the default 64 x 32 x 8 warps
x 2 stages (8 rows a warp: m8n8k4) against tiles of 16 rows a warp (m16n8k16): 64 x 16 x 4 x 1
(100 KB, two blocks an SM), 128 x 16 x 8 x 1 / x 2 (one block), and 32 x 32 x 4 x 1, with torch's
float64 math path beside them (issue 15's yardstick). bench_f64's shapes (B·H·T² = 64·4096²).
Explicit tiles: what runs is independent of the tree's default.

    PYTHONPATH=. python3 .ab/f64_tiles.py [--T 4096 16384] [--reps 5]
"""
import argparse
import statistics

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--d", type=int, nargs="+", default=[128])
    ap.add_argument("--tiles", default="64x32x8x2,64x16x4x1,128x16x8x1,128x16x8x2,32x32x4x1",
                    help="dmma tiles, the first the baseline of x_default")
    a = ap.parse_args()
    import cupy as cp
    import cuflash
    from cuflash import TileConfig as TC
    from cuflash.experiments import env as run_env, gputime
    from cuflash.oracle import oracle_attention, rel_error
    print("# " + run_env.summary_line(run_env.collect("gpu")), flush=True)
    tiles = [None if t == "default" else TC(*map(int, t.split("x")), "dmma")
             for t in a.tiles.split(",")]
    for d in a.d:
        run(a, d, tiles, cp, cuflash, gputime, oracle_attention, rel_error)


def name(t):
    return "default" if t is None else t.short()


def run(a, d, tiles, cp, cuflash, gputime, oracle_attention, rel_error):
    # correctness first: odd shape, every tile, against the oracle (naive float64 beside it)
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 3, n, d)) for n in (333, 517, 517))
    for causal in (False, True):
        ref, _ = oracle_attention(q, k, v, causal=causal)
        nv = rel_error(cp.asnumpy(cuflash.naive_attention(*(cp.asarray(x) for x in (q, k, v)),
                                                          causal=causal)), ref)
        errs = [rel_error(cp.asnumpy(cuflash.attention(*(cp.asarray(x) for x in (q, k, v)),
                                                       causal=causal, tile=t)), ref) for t in tiles]
        print(f"# error causal={int(causal)} naive {nv:.2e} " +
              " ".join(f"{name(t)} {e:.2e}" for t, e in zip(tiles, errs)), flush=True)

    def ms(fn):
        return statistics.median(gputime.gpu_times(fn, a.reps, 2))

    print("# d T causal tile TFLOP/s x_default x_torch_math")
    for T in a.T:
        BH = max(1, 64 * 4096 * 4096 // (T * T))
        B, H = (BH // 16, 16) if BH >= 16 else (1, BH)
        rng = np.random.default_rng(T)
        q, k, v = (cp.asarray(rng.standard_normal((B, H, T, d))) for _ in range(3))
        for causal in (False, True):
            flops = 4.0 * B * H * T * T * d * (0.5 if causal else 1.0)
            tm = None
            try:
                import torch
                from torch.nn.attention import SDPBackend, sdpa_kernel
                tq, tk, tv = (torch.as_tensor(x, device="cuda") for x in (q, k, v))
                with sdpa_kernel(SDPBackend.MATH):
                    f = lambda: torch.nn.functional.scaled_dot_product_attention(
                        tq, tk, tv, is_causal=causal)
                    tm = ms(f)
                del tq, tk, tv
                torch.cuda.empty_cache()
            except Exception as exc:   # torch absent, or out of memory
                print(f"# torch math T={T} causal={int(causal)}: {str(exc)[:120]}")
            t0 = None
            for t in tiles:
                try:
                    m = ms(lambda: cuflash.attention(q, k, v, causal=causal, tile=t))
                except Exception as exc:
                    print(f"# {name(t)}: {str(exc)[:160]}", flush=True)
                    continue
                t0 = t0 or m
                xt = f"{tm / m:.2f}" if tm else "-"
                print(f"fwd {d} {T} {int(causal)} {name(t)} {flops / m / 1e9:.1f} "
                      f"{t0 / m:.3f} {xt}", flush=True)
            if tm:
                print(f"fwd {d} {T} {int(causal)} torch_math {flops / tm / 1e9:.1f} - 1.00")


if __name__ == "__main__":
    main()
