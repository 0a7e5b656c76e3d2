"""Session 40 (NOTES v70), for the next device session: what 'tf32''s backward would cost on the
16-bit kernels, run on float16 copies scaled by one power of two per tensor, measured with no
library change (a prototype: its staging and the float32 gradients are CuPy passes a real
implementation would fold into its kernels).

Per cell (bench_f32's shapes: B·T = 16384, H·d = 2048; float32 inputs):
  tf32      cuflash.attention_backward(precision='tf32'): the x1 pair today, with its staging;
  via16     per-tensor max |x| of q, k, v, dout, out (5 reductions, one host read of the four
            scales), float16 copies x·2^e (5 elementwise passes), the 16-bit backward (default
            tile) with scale' = scale / (a·b), and dq, dk, dv back to float32 times their
            factor (3 elementwise passes): .ab/tf32_via_f16.py's emulation;
  f16 bwd   the 16-bit backward alone on those copies (the kernels' share of via16);
  torch_eff torch's efficient float32 backward (autograd.grad), the yardstick of issue 15.
The forward the same way first (fwd rows: 'tf32' today against the 16-bit forward on the copies,
out back to float32). Then a small accuracy check of both against the float64 oracle beside
naive 'tf32' (the criterion of tests/test_tf32.py with the float16 stores of this prototype).

    PYTHONPATH=. python3 .ab/via16_gpu.py [--d 64 128] [--T 2048 4096 16384] [--reps 5]
"""
import argparse
import statistics
import sys

import numpy as np

sys.path.insert(0, "tests")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--T", type=int, nargs="+", default=[2048, 4096, 16384])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    import cupy as cp
    import cuflash
    from cuflash.experiments import env as run_env, gputime
    print("# " + run_env.summary_line(run_env.collect("gpu")), flush=True)
    torch = None
    if not a.no_torch:
        try:
            import torch
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError as exc:
            print(f"# torch left out: {exc}")
    to16 = cp.ElementwiseKernel("float32 x, float32 s", "float16 y", "y = (half)(x * s)",
                                "cuflash_via16_to16")
    back = cp.ElementwiseKernel("float16 x, float32 f", "float32 y", "y = (float)x * f",
                                "cuflash_via16_back")

    def scales(xs, tops):
        """2^e per tensor with max |x|·2^e in [2^(top-1), 2^top): one host read for all."""
        m = cp.stack([cp.abs(x).max() for x in xs]).astype(cp.float64)
        e = cp.asarray(tops, dtype=cp.float64) - 1 - cp.floor(cp.log2(cp.where(m > 0, m, 1)))
        return [float(x) for x in cp.exp2(e).get()]

    def via16(dout, res, keep=None):
        q, k, v, out = res.q, res.k, res.v, res.out
        a_, b_, e_, c_ = scales((q, k, v, dout), (8, 8, 3, 3))
        f16 = [to16(x, cp.float32(s)) for x, s in ((q, a_), (k, b_), (v, e_), (dout, c_),
                                                   (out, e_))]
        scale = 1.0 / np.sqrt(q.shape[-1]) if res.scale is None else res.scale
        r16 = cuflash.Residuals(f16[0], f16[1], f16[2], f16[4], res.lse, causal=res.causal,
                                scale=scale / (a_ * b_))
        if keep is not None:
            keep.update(r16=r16, do16=f16[3])
        dq, dk, dv = cuflash.attention_backward(f16[3], r16)
        ce = c_ * e_
        return (back(dq, cp.float32(a_ / ce)), back(dk, cp.float32(b_ / ce)),
                back(dv, cp.float32(1.0 / c_)))

    def via16_fwd(q, k, v, causal):
        """The forward the same way: out = 16-bit forward on q~, k~, v~ (scale'), times 1 / e;
        lse as computed (scale' restores the logits)."""
        a_, b_, e_ = scales((q, k, v), (8, 8, 3))
        q16, k16, v16 = (to16(x, cp.float32(s)) for x, s in ((q, a_), (k, b_), (v, e_)))
        o16, lse = cuflash.attention(q16, k16, v16, causal=causal, return_lse=True,
                                     scale=1.0 / np.sqrt(q.shape[-1]) / (a_ * b_))
        return back(o16, cp.float32(1.0 / e_)), lse

    def ms(fn):
        return statistics.median(gputime.gpu_times(fn, a.reps, 2))

    print("pass d T causal method TFLOP/s ratio_to_torch_eff")
    rows = []
    for d in a.d:
        for T in a.T:
            B, H = max(1, 16384 // T), max(1, 2048 // d)
            rng = np.random.default_rng(T + d)
            q, k, v, dout = (cp.asarray(rng.standard_normal((B, H, T, d)).astype(np.float32))
                             for _ in range(4))
            for causal in (False, True):
                flops = 4.0 * B * H * T * T * d * (0.5 if causal else 1.0)
                fcell = {"tf32": ms(lambda: cuflash.attention(q, k, v, causal=causal,
                                                              precision="tf32")),
                         "via16": ms(lambda: via16_fwd(q, k, v, causal))}
                for name, t_ms in fcell.items():
                    print(f"fwd {d} {T} {int(causal)} {name} {flops / t_ms / 1e9:.1f} "
                          f"{fcell['tf32'] / t_ms:.2f}x_tf32", flush=True)
                flops = 10.0 * B * H * T * T * d * (0.5 if causal else 1.0)
                _, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True,
                                           precision="tf32")
                keep = {}
                via16(dout, res, keep)
                cell = {"tf32": ms(lambda: cuflash.attention_backward(dout, res,
                                                                      precision="tf32")),
                        "via16": ms(lambda: via16(dout, res)),
                        "f16_bwd": ms(lambda: cuflash.attention_backward(keep["do16"],
                                                                         keep["r16"]))}
                if torch is not None:
                    tq, tk, tv = (torch.as_tensor(x, device="cuda").requires_grad_(True)
                                  for x in (q, k, v))
                    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                        to = torch.nn.functional.scaled_dot_product_attention(
                            tq, tk, tv, is_causal=causal)
                    tdo = torch.as_tensor(dout, device="cuda")
                    cell["torch_eff"] = ms(lambda: torch.autograd.grad(
                        to, (tq, tk, tv), tdo, retain_graph=True))
                    del to, tq, tk, tv
                    torch.cuda.empty_cache()
                ref = cell.get("torch_eff")
                for name, t_ms in cell.items():
                    rate = flops / t_ms / 1e9
                    ratio = f"{ref / t_ms:.2f}" if ref else "-"
                    print(f"bwd {d} {T} {int(causal)} {name} {rate:.1f} {ratio}", flush=True)
                    rows.append((d, T, causal, name, rate))
                del res, keep
                cp.get_default_memory_pool().free_all_blocks()
    # accuracy: unit inputs, odd shapes, against the oracle beside naive 'tf32'
    from cuflash.oracle import oracle_backward, rel_error
    from helpers import grad_scale
    for (T, S, d) in ((97, 257, 64), (257, 97, 128), (1000, 1000, 40), (130, 130, 72)):
        for causal in (False, True):
            rng = np.random.default_rng(T + S + d)
            q, k, v, dout = (cp.asarray(rng.standard_normal((2, 3, n, d)).astype(np.float32))
                             for n in (T, S, S, T))
            _, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True,
                                       precision="tf32")
            o, lse = via16_fwd(q, k, v, causal)
            from cuflash.oracle import oracle_attention
            ro, rl = oracle_attention(*(cp.asnumpy(x) for x in (q, k, v)), causal=causal)
            no, nl = cuflash.naive_attention(*(cp.asnumpy(x) for x in (q, k, v)), causal=causal,
                                             precision="tf32", return_lse=True)
            for name, g, r, n in (("out", o, ro, no), ("lse", lse, rl, nl)):
                fin = np.isfinite(r)
                err = rel_error(cp.asnumpy(g)[fin], r[fin])
                en = rel_error(n[fin], r[fin])
                print(f"acc T={T} S={S} d={d} causal={int(causal)} {name} err {err:.2e} "
                      f"naive {en:.2e} err/bound {err / (2 * en + 2e-6):.3f}", flush=True)
            got = via16(dout, res)
            host = [cp.asnumpy(x) for x in (dout, q, k, v)]
            refs = oracle_backward(*host, causal=causal)
            naive = cuflash.naive_attention_backward(*host, causal=causal, precision="tf32")
            gs = grad_scale(*refs)
            for name, g, r, n in zip(("dq", "dk", "dv"), got, refs, naive):
                m = float(np.abs(r).max())
                floor = (2e-6 + 8 * 2.0 ** -11) * max(gs, m) / (m if m > 0 else 1.0)
                err, en = rel_error(cp.asnumpy(g), r), rel_error(n, r)
                print(f"acc T={T} S={S} d={d} causal={int(causal)} {name} err {err:.2e} "
                      f"naive {en:.2e} err/bound {err / (2 * en + floor):.3f}", flush=True)


if __name__ == "__main__":
    main()
