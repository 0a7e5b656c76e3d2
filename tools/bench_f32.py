"""float32 attention on one GPU (issue 15), forward or (--pass bwd) backward: cuflash in each
precision ('ieee': the CUDA cores; 'highest': 3xTF32; 'tf32': one TF32 product;
cuflash.precision) against torch's SDPA EFFICIENT_ATTENTION backend in float32 (torch is the
yardstick only, cuflash never imports it). FlashAttention's benchmark shapes (B·T = 16384,
H·d = 2048); TFLOP/s 4·B·H·T²·d forward, 10·B·H·T²·d backward, halved when causal; each timing
the median of --reps calls with the host ahead (cuflash.experiments.gputime), every method of a
cell in the same process. --tiles adds the TF32 tile ablation of the pass at T = 4096; --errors
the error of each method against the float64 oracle (max-norm and normwise) beside naive
float32 and naive with TF32 products, at B = 1, H = 4, T = S = 1024; --x3 'highest' as three
float16 products named too (kernel='wgmma_f16x3', tile.wgmma_f16x3_tiles: the forward, and with
--pass bwd the backward; 'highest''s default on sm_90 from WGMMA_F16X3_MIN_KEYS keys) beside
'highest''s mma.sync kernels ('mma_highest'), and 'tf32' as one float16 product
(kernel='wgmma_f16x1', NOTES.md v56; its default backward on sm_90 above d = 64) beside 'tf32''s
mma.sync backward ('mma_tf32'), and with --pass bwd the 16-bit pair on copies scaled per tensor
(kernel='wgmma_f16s', NOTES.md v71; its default backward on sm_90 at d <= 64) by name. A table
last.

    python tools/bench_f32.py [--pass bwd] [--d 64 128 256] [--T 2048 4096 8192 16384] [--tiles]
                              [--errors]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_f64 import precompile  # noqa: E402  (kernels compiled by worker processes first)

PRECISIONS = ("ieee", "highest", "tf32")


def ablation_tiles(d: int, families=("tf32x3", "tf32")):
    """The TF32 tiles --tiles times at T = 4096 (every one free of spills where NOTES v22 says;
    'wgmma_tf32': every tile of tile.wgmma_tf32_tiles)."""
    from cuflash import TileConfig as TC
    from cuflash.tile import WGMMA_TF32_MAX_D, wgmma_tf32_tiles
    shapes = {
        "tf32x3": {64: [(128, 64, 8, 2), (64, 32, 4, 2), (64, 64, 4, 2), (128, 32, 8, 2)],
                   128: [(128, 64, 8, 2), (128, 32, 8, 2), (64, 32, 4, 2), (64, 64, 4, 2),
                         (64, 32, 4, 1)],
                   256: [(64, 32, 4, 2), (64, 32, 4, 1), (64, 16, 4, 2), (128, 16, 8, 2)]},
        "tf32": {64: [(128, 64, 8, 2), (64, 64, 4, 2), (128, 64, 4, 2), (64, 32, 4, 2),
                      (128, 32, 8, 2)],
                 128: [(64, 32, 4, 2), (128, 32, 8, 2), (128, 64, 8, 2), (64, 64, 4, 2),
                       (128, 32, 4, 2), (64, 32, 4, 1)],
                 256: [(64, 32, 4, 2), (64, 16, 4, 2), (128, 16, 8, 2), (64, 32, 4, 1)]}}
    pad = 64 if d <= 64 else 128 if d <= 128 else 256
    return [t for fam in families for t in (
        (wgmma_tf32_tiles(pad) if pad <= WGMMA_TF32_MAX_D else []) if fam == "wgmma_tf32" else
        [TC(*t, fam) for t in shapes[fam][pad]])]


def ablation_tiles_bwd(d: int, families=("tf32x3", "tf32")):
    """The TF32 backward tiles --tiles times at T = 4096 (--pass bwd): solo warps (16 keys each)
    and pairs (16 keys per two warps), every one free of spills on sm_90 (NOTES v33)."""
    from cuflash import TileConfig as TC
    shapes = {64: [(32, 64, 4, 2), (32, 64, 4, 1), (32, 64, 8, 2), (64, 64, 8, 2),
                   (64, 64, 8, 1), (32, 128, 8, 2)],
              128: [(32, 64, 8, 2), (32, 64, 8, 1), (16, 64, 8, 2)]}   # 16 warps: 128 regs, spills
    return [TC(*t, fam) for fam in families for t in shapes[64 if d <= 64 else 128]]


def errors(cp, d, causal, x3=False):
    """{method: (max-norm rel. error, normwise error)} of out against the float64 oracle (x3:
    with the wgmma_f16x3 and wgmma_f16x1 tiles)."""
    import cuflash
    from cuflash.oracle import normwise_error, oracle_attention, rel_error
    rng = np.random.default_rng(d + 7 * causal)
    q, k, v = (rng.standard_normal((1, 4, 1024, d)).astype(np.float32) for _ in range(3))
    ref, _ = oracle_attention(q, k, v, causal=causal)
    qc, kc, vc = (cp.asarray(x) for x in (q, k, v))
    got = {f"cuflash_{p}": cuflash.attention(qc, kc, vc, causal=causal, precision=p)
           for p in PRECISIONS}
    from cuflash.tile import default_tile, wgmma_f16x3_tiles
    for t in (wgmma_f16x3_tiles(d) + wgmma_f16x3_tiles(d, False, "wgmma_f16x1") if x3 else []):
        got[t.short()] = cuflash.attention(qc, kc, vc, causal=causal, tile=t)
    if x3:   # 'highest''s mma.sync kernel by name (its default here may be the x3 forward)
        got["mma_highest"] = cuflash.attention(qc, kc, vc, causal=causal, precision="highest",
                                               tile=default_tile(d, "float32", causal=causal))
    got["naive_f32"] = cuflash.naive_attention(qc, kc, vc, causal=causal)
    got["naive_tf32"] = cuflash.naive_attention(qc, kc, vc, causal=causal, precision="tf32")
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            o = torch.nn.functional.scaled_dot_product_attention(
                *(torch.as_tensor(x, device="cuda") for x in (q, k, v)), is_causal=causal)
        got["torch_efficient"] = o.cpu().numpy()
        for x in (np.float16, "bfloat16"):
            dt = torch.float16 if x is np.float16 else torch.bfloat16
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                o = torch.nn.functional.scaled_dot_product_attention(
                    *(torch.as_tensor(y, device="cuda").to(dt) for y in (q, k, v)),
                    is_causal=causal)
            got[f"torch_flash_{'f16' if x is np.float16 else 'bf16'}"] = o.float().cpu().numpy()
    except ImportError:
        pass
    return {name: (rel_error(cp.asnumpy(x) if hasattr(x, "device") else x, ref),
                   normwise_error(cp.asnumpy(x) if hasattr(x, "device") else x, ref))
            for name, x in got.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--T", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    ap.add_argument("--causal", choices=["no", "yes", "both"], default="both")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tiles", action="store_true", help="the TF32 tile ablation at T = 4096")
    ap.add_argument("--families", default="tf32x3,tf32", help="the families --tiles times")
    ap.add_argument("--errors", action="store_true")
    ap.add_argument("--wgmma", action="store_true",
                    help="both forward kernels of 'tf32' named too, each cell: Hopper's wgmma "
                         "(kernel='wgmma_tf32', its first tile; the default of 'tf32' on sm_90 "
                         "where tile.wgmma_tf32_pays) and mma.sync (mma_tf32), and the "
                         "warp-specialized tiles of wgmma_tf32_tiles by name; above d = 128 "
                         "its wide tiles (wgmma_tf32_wide_tiles, opt-in) by name")
    ap.add_argument("--x3", action="store_true",
                    help="'highest' as three float16 products too (tile.wgmma_f16x3_tiles) "
                         "beside its mma.sync kernels (mma_highest), and 'tf32' as one "
                         "(kernel='wgmma_f16x1', its default backward on sm_90) beside its "
                         "mma.sync backward (mma_tf32)")
    ap.add_argument("--two-blocks", action="store_true",
                    help="with --x3: the float16-product tiles of one consumer warpgroup too, "
                         "two blocks a multiprocessor (wgmma_f16x3_tiles(num_warps=8), NOTES "
                         "v64), by name")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--jobs", type=int, default=8, help="processes compiling the kernels first")
    ap.add_argument("--pass", dest="pass_", choices=["fwd", "bwd"], default="fwd",
                    help="bwd: attention_backward in each precision (10·B·H·T²·d FLOPs, halved "
                         "when causal) against torch's efficient backward (autograd.grad)")
    a = ap.parse_args(argv)
    import cupy as cp

    import cuflash
    from cuflash.experiments import env, gputime
    from cuflash.gpu import ops, plan
    from cuflash.tile import (F16_SPLIT, WGMMA_TF32_MAX_D, WGMMA_TF32_WIDE_D, default_backward,
                              default_tile, f16_scaled_tiles, wgmma_f16x3_tiles,
                              wgmma_tf32_tiles, wgmma_tf32_wide_tiles)
    bwd = a.pass_ == "bwd"
    torch = None
    if not a.no_torch:
        try:
            import torch
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            torch = None
    print("# " + env.summary_line(env.collect("gpu")), flush=True)   # GPU, versions, date, commit
    causals = {"no": [False], "yes": [True], "both": [False, True]}[a.causal]
    kw = dict(smem_limit=ops.smem_limit(), arch=ops.device_arch())
    specs = {}
    for d in a.d:
        for causal in causals:
            tiles = [default_backward(d, "float32", causal=causal, precision=p, **kw)[0]
                     if bwd else default_tile(d, "float32", causal=causal, precision=p, **kw)
                     for p in PRECISIONS]
            if not bwd and d <= WGMMA_TF32_MAX_D:   # 'tf32''s default on sm_90 where it pays
                tiles.append(wgmma_tf32_tiles(d)[0])
                if a.wgmma:   # and the warp-specialized tiles --wgmma times
                    tiles += [t for t in wgmma_tf32_tiles(d) if t.warp_specialized]
            elif a.wgmma and not bwd and d <= WGMMA_TF32_WIDE_D:   # its wide tiles, opt-in
                tiles += wgmma_tf32_wide_tiles(d)
            if a.x3:
                tiles += wgmma_f16x3_tiles(d, bwd) + wgmma_f16x3_tiles(d, bwd, "wgmma_f16x1")
                if a.two_blocks:
                    tiles += [t for k in F16_SPLIT
                              for t in wgmma_f16x3_tiles(d, bwd, k, num_warps=8)]
                if bwd:
                    tiles.append(default_backward(d, "float32", causal=causal,
                                                  precision="tf32", **kw)[0])
            if a.tiles and not causal:
                tiles += (ablation_tiles_bwd if bwd else ablation_tiles)(d,
                                                                         a.families.split(","))
            for t in tiles:
                try:
                    plan.check_tile(t, d, "float32", backward=bwd, **kw)
                except ValueError:
                    continue
                for sp in plan.specs_for("float32", d, t, causal, bwd):
                    specs[sp.name] = sp
    precompile(list(specs.values()), a.jobs)

    def ms(fn):
        return statistics.median(gputime.gpu_times(fn, a.reps, 2))

    rows = []

    def emit(*row):
        rows.append(row)
        print(" ".join(map(str, row)), flush=True)

    for d in a.d:
        for T in a.T:
            B, H = max(1, 16384 // T), max(1, 2048 // d)
            rng = np.random.default_rng(T + d)
            q, k, v = (cp.asarray(rng.standard_normal((B, H, T, d)).astype(np.float32))
                       for _ in range(3))
            for causal in causals:
                flops = (10.0 if bwd else 4.0) * B * H * T * T * d * (0.5 if causal else 1.0)
                cell = {}
                runs = [(p, None, p) for p in PRECISIONS]
                if a.wgmma and not bwd and d <= WGMMA_TF32_MAX_D:
                    # both kernels of 'tf32' named, whichever its default takes at this length
                    runs.append(("wgmma_tf32", wgmma_tf32_tiles(d)[0], None))
                    runs.append(("mma_tf32", default_tile(d, "float32", causal=causal,
                                                          precision="tf32", **kw), None))
                    # and its warp-specialized tiles (flash_fwd_wgmma_ws.cu), by name
                    runs += [(t.short(), t, None) for t in wgmma_tf32_tiles(d)
                             if t.warp_specialized]
                elif a.wgmma and not bwd and d <= WGMMA_TF32_WIDE_D:
                    runs += [(t.short(), t, None) for t in wgmma_tf32_wide_tiles(d)]
                if a.x3:
                    # 'highest''s default on sm_90 from WGMMA_F16X3_MIN_KEYS keys: its mma.sync
                    # kernels named beside the x3 tiles
                    mma = (default_backward(d, "float32", causal=causal, precision="highest",
                                            **kw)[0] if bwd else
                           default_tile(d, "float32", causal=causal, precision="highest", **kw))
                    runs += [("mma_highest", mma, None)]
                    runs += [(t.short(), t, None) for t in wgmma_f16x3_tiles(d, bwd)]
                    # 'tf32' as one float16 product (its default backward on sm_90), beside
                    # its mma.sync backward by name
                    if bwd:
                        runs += [("mma_tf32", default_backward(d, "float32", causal=causal,
                                                               precision="tf32", **kw)[0], None)]
                    runs += [(t.short(), t, None)
                             for t in wgmma_f16x3_tiles(d, bwd, "wgmma_f16x1")]
                    if bwd:   # the 16-bit pair on scaled copies (v71): its first tiles
                        runs += [(t.short(), t, None) for t in f16_scaled_tiles(d)]
                    if a.two_blocks:   # one consumer warpgroup, two blocks an SM (NOTES v64)
                        runs += [(t.short(), t, None) for k in F16_SPLIT
                                 for t in wgmma_f16x3_tiles(d, bwd, k, num_warps=8)]
                if bwd:
                    dout = cp.asarray(rng.standard_normal((B, H, T, d)).astype(np.float32))
                    _, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True)
                if a.tiles and T == 4096 and not causal:
                    runs += [(t.short(), t, None) for t in (ablation_tiles_bwd if bwd else
                             ablation_tiles)(d, a.families.split(","))]
                for name, tile, prec in runs:
                    try:
                        if tile is not None:
                            plan.check_tile(tile, d, "float32", backward=bwd, **kw)
                        t_ms = ms(lambda: cuflash.attention_backward(dout, res, tile=tile,
                                                                     precision=prec)
                                  if bwd else cuflash.attention(q, k, v, causal=causal,
                                                                tile=tile, precision=prec))
                    except Exception as exc:   # a tile that does not fit: say so, go on
                        print(f"# {name} d={d} T={T}: {str(exc)[:200]}", flush=True)
                        continue
                    cell[name] = flops / t_ms / 1e9
                if torch is not None:
                    tq, tk, tv = (torch.as_tensor(x, device="cuda") for x in (q, k, v))

                    def t_fwd():
                        with torch.no_grad(), sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                            torch.nn.functional.scaled_dot_product_attention(tq, tk, tv,
                                                                             is_causal=causal)
                    try:
                        if bwd:
                            for x in (tq, tk, tv):
                                x.requires_grad_(True)
                            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                                to = torch.nn.functional.scaled_dot_product_attention(
                                    tq, tk, tv, is_causal=causal)
                            tdo = torch.as_tensor(dout, device="cuda")

                            def t_bwd():
                                torch.autograd.grad(to, (tq, tk, tv), tdo, retain_graph=True)
                        cell["torch_eff"] = flops / ms(t_bwd if bwd else t_fwd) / 1e9
                    except RuntimeError as exc:
                        print(f"# torch d={d} T={T}: {str(exc)[:200]}", flush=True)
                    to = tdo = None   # the autograd graph's saved tensors go with it
                    del tq, tk, tv, to, tdo
                    torch.cuda.empty_cache()
                ref = cell.get("torch_eff")
                for name, tf in cell.items():
                    emit(a.pass_, d, T, int(causal), name, f"{tf:.1f}",
                         f"{tf / ref:.2f}" if ref else "-")
            del q, k, v
            cp.get_default_memory_pool().free_all_blocks()
    if a.errors:
        print("# out's error vs the float64 oracle (B=1, H=4, T=S=1024): max-norm normwise")
        for d in a.d:
            for causal in causals:
                for name, (e, n) in errors(cp, d, causal, a.x3).items():
                    emit("err", d, 1024, int(causal), name, f"{e:.2e}", f"{n:.2e}")
    print("# pass d T causal method TFLOP/s ratio_to_torch_efficient (err: max-norm normwise)")
    for r in rows:
        print(" ".join(map(str, r)))
    return 0


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
