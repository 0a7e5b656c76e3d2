"""Decode steps through attention_with_kvcache on one GPU (issue 14): K+V bytes read per second
of the one-launch kernel path, contiguous and paged caches, against a read-only kernel over the
same cache (cuflash/experiments/readbw.py, the read-bandwidth ceiling) and torch's flash and cuDNN
backends (GQA through enable_gqa) in the same run; then the host time of a small decode step.
float16, Hq = G·Hkv query heads, one query per sequence, every sequence S tokens, no append.
Columns "MxN/bN": the decode tile (kvcache.DECODE_TILE; mma kernel) and ops' split-KV target of
N blocks per SM (kvcache.DECODE_BLOCKS_PER_SM).

    python tools/bench_kvcache.py [--S 4096,32768,131072] [--B 1,8,64] [--bps 4,8,16]
                                  [--tiles 16x64x1x2,32x64x2x2]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_layouts import _time  # noqa: E402


def _torch_rates(cp, q, k, v, rate):
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception:   # torch is a reference only
        return [float("nan")] * 2
    tq, tk, tv = (torch.as_tensor(x, device="cuda") for x in (q, k, v))
    out = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        try:
            with sdpa_kernel(backend):
                out.append(rate(_time(cp, lambda: F.scaled_dot_product_attention(
                    tq, tk, tv, enable_gqa=True))))
        except Exception:
            out.append(float("nan"))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--S", default="4096,32768,131072")
    ap.add_argument("--B", default="1,8,64")
    ap.add_argument("--hkv", type=int, default=8)
    ap.add_argument("--G", type=int, default=4)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--page", type=int, default=256)
    ap.add_argument("--bps", default="4,8,16")
    ap.add_argument("--tiles", default="16x64x1x2,32x64x2x2", help="mma tiles MxNxWxS")
    ap.add_argument("--host-calls", type=int, default=2000)
    a = ap.parse_args(argv)
    import cupy as cp
    import numpy as np

    from cuflash import TileConfig, kvcache
    from cuflash.experiments.readbw import DeviceRead
    bps = [int(x) for x in a.bps.split(",")]
    tiles = [TileConfig(*(int(x) for x in t.split("x")), "mma") for t in a.tiles.split(",")]
    combos = [(t, n) for t in tiles for n in bps]
    Hkv, G, d = a.hkv, a.G, a.d
    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, float16, d={d}, "
          f"Hkv={Hkv}, Hq={G * Hkv}; TB/s of K+V")
    print(f"{'B':>3} {'S':>7} {'layout':>10} "
          + "".join(f"{f'{t.block_m}x{t.block_n}/b{n}':>10}" for t, n in combos)
          + f"{'ceiling':>9}{'flash':>8}{'cuDNN':>8}")
    rng = np.random.default_rng(0)
    for B in (int(x) for x in a.B.split(",")):
        for S in (int(x) for x in a.S.split(",")):
            kv_bytes = 2 * B * Hkv * S * d * 2
            rate = lambda ms: kv_bytes / (ms * 1e-3) / 1e12
            q = cp.asarray(rng.standard_normal((B, G * Hkv, 1, d)).astype(np.float16))
            k, v = (cp.empty((B, Hkv, S, d), cp.float16) for _ in range(2))
            for x in (k, v):
                for b in range(B):
                    x[b] = cp.random.standard_normal((Hkv, S, d), dtype=cp.float32)
            seqlens = cp.full((B,), S, dtype=cp.int32)
            reader = DeviceRead(k.view(cp.uint32).reshape(-1))
            ceiling = k.nbytes / (_time(cp, reader.launch) * 1e-3) / 1e12
            refs = _torch_rates(cp, q, k, v, rate)
            P = a.page
            pages = B * (S // P)
            perm = cp.asarray(rng.permutation(pages).astype(np.int32)).reshape(B, S // P)
            for layout in ("contiguous", f"paged{P}"):
                if layout == "contiguous":
                    kc, vc, table = k, v, None
                else:   # the same tokens in scattered pages
                    kc, vc = (cp.empty((pages, Hkv, P, d), cp.float16) for _ in range(2))
                    for c, x in ((kc, k), (vc, v)):
                        c[perm.reshape(-1)] = x.reshape(B, Hkv, S // P, P, d).transpose(
                            0, 2, 1, 3, 4).reshape(pages, Hkv, P, d)
                    table = perm
                cols = []
                for t, n in combos:
                    kvcache.DECODE_TILE, kvcache.DECODE_BLOCKS_PER_SM = t, n
                    cols.append(rate(_time(cp, lambda: kvcache.attention_with_kvcache(
                        q, kc, vc, cache_seqlens=seqlens, block_table=table))))
                print(f"{B:>3} {S:>7} {layout:>10} " + "".join(f"{c:>10.2f}" for c in cols)
                      + f"{ceiling:>9.2f}{refs[0]:>8.2f}{refs[1]:>8.2f}", flush=True)
                del kc, vc
            del k, v, reader
            cp.get_default_memory_pool().free_all_blocks()
    kvcache.DECODE_TILE, kvcache.DECODE_BLOCKS_PER_SM = None, 8
    # host time of a small step (B = 1, S = 1024): wall time per call over many calls
    q = cp.asarray(rng.standard_normal((1, G * Hkv, 1, d)).astype(np.float16))
    k = cp.asarray(rng.standard_normal((1, Hkv, 1024, d)).astype(np.float16))
    v = cp.asarray(rng.standard_normal((1, Hkv, 1024, d)).astype(np.float16))
    seqlens = cp.full((1,), 1024, dtype=cp.int32)
    for _ in range(50):
        kvcache.attention_with_kvcache(q, k, v, cache_seqlens=seqlens)
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(a.host_calls):
        kvcache.attention_with_kvcache(q, k, v, cache_seqlens=seqlens)
    cp.cuda.Device().synchronize()
    print(f"host+device time per small decode call (B=1, S=1024, {a.host_calls} calls): "
          f"{(time.perf_counter() - t0) / a.host_calls * 1e6:.1f} us")


if __name__ == "__main__":
    main()
