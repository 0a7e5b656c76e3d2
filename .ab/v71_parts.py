"""Session 41 (NOTES v71): where 'wgmma_f16s''s backward spends its time beyond the 16-bit pair,
d = 64, bench_f32's shapes: the whole call; f16_scaled.cast alone; its maxima; its copies; the
call with cast replaced by the cached copies (the pair with float32 gradients and its
preprocess); the plain 16-bit backward on the copies (float16 gradients).

    PYTHONPATH=. python3 .ab/v71_parts.py [--T 2048 4096] [--reps 7]
"""
import argparse
import statistics

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    import cupy as cp
    import cuflash
    from cuflash.experiments import gputime
    from cuflash.gpu import f16_scaled, ops
    from cuflash.tile import f16_scaled_tiles, wgmma_one_consumer_pays

    def ms(fn):
        return statistics.median(gputime.gpu_times(fn, a.reps, 2))

    d = a.d
    print("T causal part ms")
    for T in a.T:
        B, H = max(1, 16384 // T), max(1, 2048 // d)
        rng = np.random.default_rng(T)
        q, k, v, dout = (cp.asarray(rng.standard_normal((B, H, T, d)).astype(np.float32))
                         for _ in range(4))
        for causal in (False, True):
            _, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True,
                                       precision="tf32")
            tile = f16_scaled_tiles(d, wgmma_one_consumer_pays(d, T, T, causal))[0]
            absmax, scaled = f16_scaled._cupy_kernels()
            parts = {
                "whole": lambda: cuflash.attention_backward(dout, res, tile=tile),
                "cast": lambda: f16_scaled.cast(q, k, v, res.out, dout, res.scale or d ** -0.5),
                "maxima_get": lambda: cp.stack([absmax(x) for x in (q, k, v, dout)]).get(),
                "maxima": lambda: cp.stack([absmax(x) for x in (q, k, v, dout)]),
                "abs_max_cub": lambda: cp.stack([cp.abs(x).max() for x in (q, k, v, dout)]),
                "copies": lambda: [scaled(x, cp.float32(0.5), cp.empty(x.shape, cp.float16))
                                   for x in (q, k, v, res.out, dout)],
            }
            c = f16_scaled.cast(q, k, v, res.out, dout, res.scale or d ** -0.5)
            real = f16_scaled.cast
            f16_scaled.cast = lambda *args: c
            try:
                parts["pair_g32"] = ms(lambda: cuflash.attention_backward(dout, res, tile=tile))
            finally:
                f16_scaled.cast = real
            r16 = cuflash.Residuals(c.q, c.k, c.v, c.out, res.lse, causal=causal,
                                    scale=c.factors.kernel_scale)
            parts["plain_f16"] = ms(lambda: cuflash.attention_backward(
                c.dout, r16, tile=tile.replace(kernel="wgmma")))
            for name, fn in parts.items():
                t = fn if isinstance(fn, float) else ms(fn)
                print(f"{T} {int(causal)} {name} {t:.3f}", flush=True)
            del res, c, r16
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
