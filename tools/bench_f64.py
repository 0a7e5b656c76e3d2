"""float64 attention on one GPU (issue 15): cuflash's kernels (the default for float64, the
dmma tiles named by --tiles, simt by --simt) against torch's SDPA MATH backend in float64 (when
torch is installed: it is the yardstick only, cuflash never imports it). Forward and backward
TFLOP/s (FLOPs 4·B·H·T²·d, halved when causal; backward 2.5× forward), median of --reps timed
calls between CUDA events; the error of each method against the float64 oracle (NumPy naive
float64) and of cuflash's naive float64 on the GPU, at a small shape. One CSV row per
measurement (--csv), a table last.

    python tools/bench_f64.py [--d 64 128] [--T 2048 4096 8192] [--tiles] [--simt] [--csv f]

B·H is chosen so that B·H·T² = 64·4096² (torch's T×T float64 scores: 8.6 GB per copy).
CUFLASH_BENCH_M8=1 compiles the dmma kernels with m8n8k4 only (CUFLASH_DMMA_M8, dmma.cuh): the
A/B of sm_90's m16n8k16 products, run in its own process.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_layouts import _time  # noqa: E402  (GPU time of one call: events, median)


def _m8_only():
    """Every dmma kernel compiled with CUFLASH_DMMA_M8 (m8n8k4 products only)."""
    from cuflash.gpu import build
    body = build._body

    def patched(spec):
        text = body(spec)
        return ("#define CUFLASH_DMMA_M8 1\n" + text) if spec.family == "dmma" else text
    build._body = patched


def _warm(spec):
    """Compile one kernel into CuPy's on-disk cache (in a worker process)."""
    if os.environ.get("CUFLASH_BENCH_M8"):
        _m8_only()
    from cuflash.gpu import build
    try:
        build.get_kernel(spec, 0)
        return None
    except Exception as exc:
        return f"{spec.name}: {str(exc)[:200]}"


def precompile(specs, jobs):
    """Every kernel the run will launch, compiled by `jobs` processes first (NVRTC takes
    seconds per float64 kernel; one process would spend most of the run compiling)."""
    import concurrent.futures as cf
    import multiprocessing as mp
    with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as ex:
        for err in ex.map(_warm, specs):
            if err:
                print("precompile:", err, flush=True)


def errors(cp, d, causal, tiles):
    """rel. error against the oracle of out, dq, dk, dv at B=1, H=2, T=S=777: cuflash with each
    tile (None: the default), cuflash's naive float64 on the GPU, torch math float64."""
    import cuflash
    from cuflash.oracle import oracle_attention, oracle_backward, rel_error
    rng = np.random.default_rng(d + causal)
    q, k, v, do = (rng.standard_normal((1, 2, 777, d)) for _ in range(4))
    ref, _ = oracle_attention(q, k, v, causal=causal)
    refs = oracle_backward(do, q, k, v, causal=causal)
    qc, kc, vc, dc = (cp.asarray(x) for x in (q, k, v, do))
    rows = {}
    for name, tile in tiles:
        out, res = cuflash.attention(qc, kc, vc, causal=causal, tile=tile[0] if tile else None,
                                     return_residuals=True)
        g = cuflash.attention_backward(dc, res, tile=tile[1] if tile else None)
        rows[name] = [rel_error(cp.asnumpy(x), r) for x, r in zip((out,) + tuple(g), (ref,) + refs)]
    out = cuflash.naive_attention(qc, kc, vc, causal=causal)
    g = cuflash.naive_attention_backward(dc, qc, kc, vc, causal=causal)
    rows["naive_f64_gpu"] = [rel_error(cp.asnumpy(x), r) for x, r in zip((out,) + tuple(g), (ref,) + refs)]
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        tq, tk, tv = (torch.tensor(x, device="cuda", requires_grad=True) for x in (q, k, v))
        with sdpa_kernel(SDPBackend.MATH):
            o = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        o.backward(torch.tensor(do, device="cuda"))
        rows["torch_math"] = [rel_error(x.detach().cpu().numpy(), r)
                              for x, r in zip((o, tq.grad, tk.grad, tv.grad), (ref,) + refs)]
    except ImportError:
        pass
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--T", type=int, nargs="+", default=[2048, 4096, 8192])
    ap.add_argument("--causal", choices=["no", "yes", "both"], default="both")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tiles", action="store_true", help="the dmma tile ablation at T = 4096")
    ap.add_argument("--simt", action="store_true", help="the simt kernels too, at T = 4096")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--errors", action="store_true", help="errors against the oracle")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--jobs", type=int, default=1, help="processes compiling the kernels first")
    a = ap.parse_args(argv)
    if os.environ.get("CUFLASH_BENCH_M8"):
        _m8_only()
    import cupy as cp

    import cuflash
    from cuflash import TileConfig as TC
    from cuflash.gpu.ops import device_arch
    torch = None
    if not a.no_torch:
        try:
            import torch
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            torch = None
    tag = "m8" if os.environ.get("CUFLASH_BENCH_M8") else ""
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"# {dev} {device_arch()} cupy {cp.__version__}"
          f" torch {torch.__version__ if torch else '-'}", flush=True)
    rows = []
    writer = None
    if a.csv:
        f = open(a.csv, "a", newline="")
        writer = csv.writer(f)

    def emit(method, d, T, causal, BH, tile, fwd, bwd):
        row = [method + (f"_{tag}" if tag and method.startswith("cuflash") else ""), d, T,
               int(causal), BH, tile, f"{fwd:.2f}", f"{bwd:.2f}"]
        rows.append(row)
        print(" ".join(map(str, row)), flush=True)
        if writer:
            writer.writerow(row)
            f.flush()

    # forward tiles and backward tiles of the ablation, per padded head dim
    ABL_F = {64: [TC(128, 64, 8, 2, "dmma"), TC(64, 64, 4, 1, "dmma"), TC(64, 64, 4, 2, "dmma"),
                  TC(128, 32, 8, 2, "dmma")],
             128: [TC(64, 32, 4, 2, "dmma"), TC(64, 32, 8, 2, "dmma"), TC(64, 16, 4, 2, "dmma")]}
    ABL_B = {64: [TC(64, 64, 8, 2, "dmma"), TC(32, 32, 4, 2, "dmma"), TC(32, 32, 4, 1, "dmma")],
             128: [TC(32, 32, 4, 2, "dmma"), TC(32, 64, 8, 1, "dmma"), TC(16, 32, 4, 2, "dmma")]}
    causals = {"no": [False], "yes": [True], "both": [False, True]}[a.causal]
    if a.jobs > 1:
        from cuflash.gpu import ops, plan
        from cuflash.tile import default_tile
        kw = dict(smem_limit=ops.smem_limit(), arch=device_arch())
        specs = {}
        for d in a.d:
            for causal in causals:
                pairs = [(default_tile(d, "float64", causal=causal, **kw),
                          default_tile(d, "float64", backward=True, causal=causal, **kw))]
                if a.simt:
                    pairs.append((default_tile(d, "float64"),
                                  default_tile(d, "float64", backward=True)))
                if a.tiles and not causal:
                    pairs += [(t, None) for t in ABL_F.get(d, [])]
                    pairs += [(None, t) for t in ABL_B.get(d, [])]
                for ft, bt in pairs:
                    for tile, bwd in ((ft, False), (bt, True)):
                        if tile is None:
                            continue
                        try:
                            for sp in plan.specs_for("float64", d, tile, causal, bwd):
                                specs[sp.name] = sp
                        except ValueError:
                            pass
        precompile(list(specs.values()), a.jobs)
    for d in a.d:
        for T in a.T:
            BH = max(1, 64 * 4096 * 4096 // (T * T))
            B, H = (BH // 16, 16) if BH >= 16 else (1, BH)
            rng = np.random.default_rng(T + d)
            q, k, v, do = (cp.asarray(rng.standard_normal((B, H, T, d))) for _ in range(4))
            for causal in causals:
                flops = 4.0 * B * H * T * T * d * (0.5 if causal else 1.0)
                tf = lambda ms: flops / ms / 1e9
                runs = [("cuflash", None, None)]
                if T == 4096 and a.tiles and not causal:
                    runs += [("cuflash_tile", t, None) for t in ABL_F.get(d, [])]
                    runs += [("cuflash_tile", None, t) for t in ABL_B.get(d, [])]
                if T == 4096 and a.simt:
                    runs += [("cuflash_simt", cuflash.default_tile(d, "float64"),
                              cuflash.default_tile(d, "float64", backward=True))]
                for method, ft, bt in runs:
                    try:
                        fwd = _time(cp, lambda: cuflash.attention(q, k, v, causal=causal, tile=ft),
                                    a.reps)
                        out, res = cuflash.attention(q, k, v, causal=causal, tile=ft,
                                                     return_residuals=True)
                        bwd = _time(cp, lambda: cuflash.attention_backward(do, res, tile=bt),
                                    a.reps)
                        del out, res
                    except Exception as exc:   # a tile that does not fit: say so, go on
                        print(f"{method} {ft} {bt}: {str(exc)[:300]}", flush=True)
                        continue
                    name = (ft or bt).short() if (ft or bt) else "default"
                    emit(method, d, T, causal, BH, name, tf(fwd), 2.5 * tf(bwd))
                if torch is not None:
                    tq, tk, tv = (torch.as_tensor(x, device="cuda").requires_grad_() for x in (q, k, v))
                    tdo = torch.as_tensor(do, device="cuda")

                    def t_fwd():
                        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
                            torch.nn.functional.scaled_dot_product_attention(tq, tk, tv,
                                                                             is_causal=causal)

                    def t_both():
                        with sdpa_kernel(SDPBackend.MATH):
                            o = torch.nn.functional.scaled_dot_product_attention(
                                tq, tk, tv, is_causal=causal)
                        o.backward(tdo)
                        tq.grad = tk.grad = tv.grad = None
                    try:
                        fwd = _time(cp, t_fwd, a.reps)
                        both = _time(cp, t_both, a.reps)
                        emit("torch_math", d, T, causal, BH, "-", tf(fwd),
                             2.5 * tf(max(both - fwd, 1e-6)))
                    except RuntimeError as exc:   # out of memory
                        print(f"torch_math d={d} T={T}: {str(exc)[:200]}", flush=True)
                    del tq, tk, tv, tdo
                    torch.cuda.empty_cache()
            del q, k, v, do
            cp.get_default_memory_pool().free_all_blocks()
    if a.errors:
        print("# rel. error vs oracle (B=1, H=2, T=S=777): out dq dk dv", flush=True)
        for d in a.d:
            for causal in causals:
                simt = (cuflash.default_tile(d, "float64"),
                        cuflash.default_tile(d, "float64", backward=True))
                for name, errs in errors(cp, d, causal, [("cuflash", None),
                                                          ("cuflash_simt", simt)]).items():
                    line = f"err {name} d={d} causal={int(causal)} " + \
                        " ".join(f"{e:.2e}" for e in errs)
                    print(line, flush=True)
                    if writer:
                        writer.writerow(["err", name, d, int(causal)] + [f"{e:.3e}" for e in errs])
    print("# method d T causal BH tile fwd_TFLOPs bwd_TFLOPs")
    for r in rows:
        print(" ".join(map(str, r)))
    return 0


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
