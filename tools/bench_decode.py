"""Decode-step bandwidth on one GPU: one query per sequence over S cached keys (float16, d = 128,
MHA), K + V bytes read per second, for cuflash.attention without and with split-KV
(num_splits=1 and None: automatic; the default tile, then --tiles with automatic splits),
torch's SDPA flash and cuDNN backends when torch is
installed, and a read-only ceiling measured in the same run (a CuPy sum over an array of the
same bytes). Median of 20 calls between CUDA events, after 3 warm-ups.

    python3 tools/bench_decode.py [--S 1024,16384,131072] [--bh 1x32,8x32,64x8]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_layouts import _time as _time_ms  # noqa: E402


def _time(cp, fn):
    """Median seconds of 20 calls between CUDA events (bench_layouts' timer)."""
    return _time_ms(cp, fn, reps=20) / 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--S", default="1024,16384,131072")
    ap.add_argument("--bh", default="1x32,8x32,64x8", help="batch x heads, comma-separated")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--tiles", default="mma:16x64x1x2,mma:32x64x2x2,wgmma:64x128x4x3",
                    help="extra tiles run with automatic splits: kernel:MxNxWxS, comma-separated")
    a = ap.parse_args(argv)
    import cupy as cp

    import cuflash
    from cuflash import TileConfig
    tiles = []
    for spec in filter(None, a.tiles.split(",")):
        kernel, dims = spec.split(":")
        tiles.append(TileConfig(*(int(x) for x in dims.split("x")), kernel))
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception:   # torch is a reference only
        torch = None
    d = a.d
    cp.random.seed(0)
    rand = lambda *shape: cp.random.standard_normal(shape, dtype=cp.float32).astype(cp.float16)
    names = "".join(f" {f'{t.kernel}{t.block_m}x{t.block_n}':>14}" for t in tiles)
    print(f"{'B':>4} {'H':>4} {'S':>7}  {'KV MB':>8}  TB/s: {'split=1':>8} {'auto':>8}{names} "
          f"{'torch flash':>11} {'cuDNN':>8} {'read ceiling':>12}", flush=True)
    for bh in a.bh.split(","):
        B, H = (int(x) for x in bh.split("x"))
        for S in (int(s) for s in a.S.split(",")):
            q, k, v = rand(B, H, 1, d), rand(B, H, S, d), rand(B, H, S, d)
            kv_bytes = k.nbytes + v.nbytes
            rate = lambda t: kv_bytes / t / 1e12
            one = rate(_time(cp, lambda: cuflash.attention(q, k, v, num_splits=1)))
            auto = rate(_time(cp, lambda: cuflash.attention(q, k, v, num_splits=None)))
            extra = "".join(
                f" {rate(_time(cp, lambda: cuflash.attention(q, k, v, tile=t, num_splits=None))):>14.2f}"
                for t in tiles)
            flat = cp.concatenate([k.reshape(-1), v.reshape(-1)])
            ceiling = rate(_time(cp, lambda: flat.sum(dtype=cp.float32)))
            del flat
            refs = []
            if torch is not None:
                tq, tk, tv = (torch.as_tensor(x, device="cuda") for x in (q, k, v))
                for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
                    try:
                        with sdpa_kernel(backend):
                            refs.append(rate(_time(cp, lambda: F.scaled_dot_product_attention(
                                tq, tk, tv))))
                    except Exception:
                        refs.append(float("nan"))
            else:
                refs = [float("nan")] * 2
            print(f"{B:>4} {H:>4} {S:>7}  {kv_bytes / 1e6:>8.1f}        {one:>8.2f} {auto:>8.2f}{extra} "
                  f"{refs[0]:>11.2f} {refs[1]:>8.2f} {ceiling:>12.2f}", flush=True)


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
