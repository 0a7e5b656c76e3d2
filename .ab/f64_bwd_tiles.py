"""Session 43 (NOTES v78's next step): float64's backward on dmma tiles whose dQ kernel gives each
warp two m-tiles (m16n8k16, v78's fragments) against the default, with torch's float64 math path
beside them. At d = 64, TileConfig(64, 32, 4, 2): dQ 64 query rows on 4 warps (two m-tiles
each), dK/dV 32 keys on 4 warps (one); NVRTC 13 sm_90a: 246 / 244 registers, no spill. Every
candidate with two m-tiles in dK/dV, and every one at d = 128, spilled (160-2896 bytes).
Explicit tiles: what runs is independent of the tree's default.

    PYTHONPATH=. python3 .ab/f64_bwd_tiles.py [--d 64] [--T 4096 16384] [--reps 5]
        [--tiles 64x64x8x2,64x32x4x2]     (the first: the baseline of x_default)
"""
import argparse
import statistics

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, nargs="+", default=[64])
    ap.add_argument("--T", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tiles", default="64x64x8x2,64x32x4x2")
    a = ap.parse_args()
    import cupy as cp
    import cuflash
    from cuflash import TileConfig as TC
    from cuflash.experiments import env as run_env, gputime
    from cuflash.oracle import oracle_backward, rel_error
    print("# " + run_env.summary_line(run_env.collect("gpu")), flush=True)
    tiles = [TC(*map(int, t.split("x")), "dmma") for t in a.tiles.split(",")]
    ms = lambda fn: statistics.median(gputime.gpu_times(fn, a.reps, 2))
    for d in a.d:
        # correctness: odd shape, every tile, the largest error of dq, dk, dv against the oracle
        rng = np.random.default_rng(7)
        q, k, v = (rng.standard_normal((2, 3, n, d)) for n in (333, 517, 517))
        do = rng.standard_normal((2, 3, 333, d))
        g = [cp.asarray(x) for x in (q, k, v, do)]
        for causal in (False, True):
            ref = oracle_backward(do, q, k, v, causal=causal)
            nv = max(rel_error(cp.asnumpy(x), r) for x, r in zip(
                cuflash.naive_attention_backward(g[3], *g[:3], causal=causal), ref))
            res = cuflash.attention(*g[:3], causal=causal, return_residuals=True)[1]
            errs = [max(rel_error(cp.asnumpy(x), r) for x, r in zip(
                cuflash.attention_backward(g[3], res, tile=t), ref)) for t in tiles]
            print(f"# error d={d} causal={int(causal)} naive {nv:.2e} " +
                  " ".join(f"{t.short()} {e:.2e}" for t, e in zip(tiles, errs)), flush=True)
        print("# d T causal tile TFLOP/s x_default x_torch_math")
        for T in a.T:
            BH = max(1, 64 * 4096 * 4096 // (T * T))
            B, H = (BH // 16, 16) if BH >= 16 else (1, BH)
            rng = np.random.default_rng(T)
            q, k, v, do = (cp.asarray(rng.standard_normal((B, H, T, d))) for _ in range(4))
            for causal in (False, True):
                flops = 2.5 * 4.0 * B * H * T * T * d * (0.5 if causal else 1.0)
                tm = None
                try:
                    import torch
                    from torch.nn.attention import SDPBackend, sdpa_kernel
                    tq, tk, tv = (torch.as_tensor(x, device="cuda").requires_grad_() for x in (q, k, v))
                    tdo = torch.as_tensor(do, device="cuda")
                    with sdpa_kernel(SDPBackend.MATH):
                        to = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
                        tm = ms(lambda: torch.autograd.grad(to, (tq, tk, tv), tdo, retain_graph=True))
                    del tq, tk, tv, tdo, to
                    torch.cuda.empty_cache()
                except Exception as exc:   # torch absent, or out of memory
                    print(f"# torch math T={T} causal={int(causal)}: {str(exc)[:120]}")
                res = cuflash.attention(q, k, v, causal=causal, return_residuals=True)[1]
                t0 = None
                for t in tiles:
                    try:
                        m = ms(lambda: cuflash.attention_backward(do, res, tile=t))
                    except Exception as exc:
                        print(f"# {t.short()}: {str(exc)[:160]}", flush=True)
                        continue
                    t0 = t0 or m
                    xt = f"{tm / m:.2f}" if tm else "-"
                    print(f"bwd {d} {T} {int(causal)} {t.short()} {flops / m / 1e9:.1f} "
                          f"{t0 / m:.3f} {xt}", flush=True)
                if tm:
                    print(f"bwd {d} {T} {int(causal)} torch_math {flops / tm / 1e9:.1f} - 1.00")


if __name__ == "__main__":
    main()
