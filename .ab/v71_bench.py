"""Session 41 (NOTES v71): 'tf32''s backward, its new default at d <= 64 ('wgmma_f16s', the
16-bit pair on float16 copies scaled per tensor) against the x1 pair (the old default) and
torch's efficient float32 backward, bench_f32's shapes (B·T = 16384, H·d = 2048), same process.
d = 128 names the f16s tile too (opt-in there: its dQ kernel spills 16 B).

    PYTHONPATH=. python3 .ab/v71_bench.py [--d 64 128] [--T 2048 4096 16384] [--reps 5]
"""
import argparse
import statistics

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--T", type=int, nargs="+", default=[2048, 4096, 16384])
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    import cupy as cp
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import cuflash
    from cuflash.experiments import env as run_env, gputime
    from cuflash.tile import f16_scaled_tiles, wgmma_f16x3_tiles, wgmma_one_consumer_pays
    print("# " + run_env.summary_line(run_env.collect("gpu")), flush=True)

    def ms(fn):
        return statistics.median(gputime.gpu_times(fn, a.reps, 2))

    rows = []
    for d in a.d:
        for T in a.T:
            B, H = max(1, 16384 // T), max(1, 2048 // d)
            rng = np.random.default_rng(T + d)
            q, k, v, dout = (cp.asarray(rng.standard_normal((B, H, T, d)).astype(np.float32))
                             for _ in range(4))
            for causal in (False, True):
                flops = 10.0 * B * H * T * T * d * (0.5 if causal else 1.0)
                _, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True,
                                           precision="tf32")
                f16s = f16_scaled_tiles(d, wgmma_one_consumer_pays(d, T, T, causal))[0]
                x1 = wgmma_f16x3_tiles(d, True, "wgmma_f16x1")[0]
                cell = {"tf32": ms(lambda: cuflash.attention_backward(dout, res,
                                                                      precision="tf32")),
                        "f16s": ms(lambda: cuflash.attention_backward(dout, res, tile=f16s)),
                        "x1": ms(lambda: cuflash.attention_backward(dout, res, tile=x1))}
                tq, tk, tv = (torch.as_tensor(x, device="cuda").requires_grad_(True)
                              for x in (q, k, v))
                with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                    to = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv,
                                                                          is_causal=causal)
                tdo = torch.as_tensor(dout, device="cuda")
                cell["torch_eff"] = ms(lambda: torch.autograd.grad(to, (tq, tk, tv), tdo,
                                                                   retain_graph=True))
                del to, tq, tk, tv, tdo
                torch.cuda.empty_cache()
                for name, t in cell.items():
                    rows.append((d, T, int(causal), name, flops / t / 1e9,
                                 cell["torch_eff"] / t, cell["x1"] / t))
                    print("bwd %d %d %d %s %.1f %.2f %.2f" % rows[-1], flush=True)
                del res
                cp.get_default_memory_pool().free_all_blocks()
    print("# d T causal method TFLOP/s x_torch_eff x_x1")
    for r in rows:
        print("bwd %d %d %d %s %.1f %.2f %.2f" % r)


if __name__ == "__main__":
    main()
