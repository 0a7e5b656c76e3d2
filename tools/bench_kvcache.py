"""Decode steps through attention_with_kvcache on one GPU (issue 14): K+V bytes read per second of
the one-launch kernel path, contiguous and paged caches, against a read-only kernel over the same
bytes (cuflash/experiments/readbw.py: the read-bandwidth ceiling) and torch's flash and cuDNN
backends (GQA through enable_gqa) in the same run; then the host time of a decode call.

float16, Hq = G·Hkv query heads, one query per sequence, every sequence S tokens, no append.

Timing: GPU time per call, from CUDA graphs. Each method's calls are captured into one graph
(CuPy's stream capture; torch.cuda.CUDAGraph for torch), replayed between two events, and the
time divided by the calls in it: the host's cost per call (measured separately, last) does not
enter, so a small step's bandwidth is the GPU's. When one cache is smaller than
``--footprint`` MB, the graph cycles through enough copies of it that the copies together
exceed L2 (the K/V of a real decode step come from device memory, not from L2): every method
reads the same copies in the same order.

Columns "MxN/fN/cN/tN" (with --tiles, --fill, --max-splits, --min-tiles): decode tiles
(kvcache.DECODE_TILE; mma kernel; a forced tile keeps its stages), and the split rule's blocks
per SM, split cap and key tiles per split at least (kvcache.DECODE_FILL, DECODE_MAX_SPLITS,
DECODE_MIN_TILES; kvcache._decode_split); by default the library's own choice ("auto", f1,
c128, t2).

    python tools/bench_kvcache.py [--grid 1x1,1x8,8x8,64x8] [--S 1024,8192,32768,131072]
                                  [--pages 256,16] [--tiles 16x64x4x2] [--fill 2]
                                  [--max-splits 128] [--min-tiles 2] [--host-calls 10000]
"""
from __future__ import annotations

import sys

import argparse
import math
import statistics
import time

import numpy as np


def _graph_ms(cp, calls, reps=5, check=False):
    """GPU ms per call of `calls` (a list of no-argument callables) captured into one graph.
    The captured calls' results stay alive until the timing is done (their memory is the
    graph's). check: the first call's result, replayed, must equal the same call run eagerly
    (arrays, or tuples of arrays), else ValueError."""
    # the inputs were made on the legacy default stream, which a non-blocking stream does not
    # wait for: without this sync the first eager call could read a cache still being filled
    # (call 97: paged pools scattered just before, eager NaN; NOTES v26)
    cp.cuda.Device().synchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        eager = [fn() for fn in calls[:2]]
        stream.synchronize()
        stream.begin_capture()
        captured = [fn() for fn in calls]
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        if check:
            first = lambda r: r[0] if isinstance(r, tuple) else r
            got, want = first(captured[0]), first(eager[0])
            if not bool(cp.array_equal(got, want)):
                diff = got.astype(cp.float32) - want.astype(cp.float32)
                raise ValueError(
                    f"the graph's replay differs from the eager call: "
                    f"{int(cp.count_nonzero(diff != 0))} of {diff.size} elements differ "
                    f"(NaN in replay {int(cp.isnan(got).sum())}, eager "
                    f"{int(cp.isnan(want).sum())}), max |diff| {float(cp.nanmax(cp.abs(diff)))}")
        out = []
        for _ in range(reps):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record(stream)
            graph.launch(stream)
            b.record(stream)
            b.synchronize()
            out.append(cp.cuda.get_elapsed_time(a, b) / len(calls))
        del captured, eager
    return statistics.median(out)


def _torch_ms(qs, ks, vs, backend, reps=5):
    """GPU ms per call of torch's SDPA (one backend), captured like _graph_ms; NaN when torch is
    missing or the backend refuses the shapes."""
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception:   # torch is a reference only
        return float("nan")
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    tq = [torch.as_tensor(q, device="cuda") for q in qs]
    tk = [torch.as_tensor(k, device="cuda") for k in ks]
    tv = [torch.as_tensor(v, device="cuda") for v in vs]
    n = len(tk)
    try:
        with sdpa_kernel(be):
            call = lambda i: F.scaled_dot_product_attention(tq[i % len(tq)], tk[i], tv[i],
                                                            enable_gqa=True)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for i in range(min(n, 2)):
                    call(i)
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for i in range(n):
                    call(i)
            g.replay()
            torch.cuda.synchronize()
            out = []
            for _ in range(reps):
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                b.synchronize()
                out.append(a.elapsed_time(b) / n)
        return statistics.median(out)
    except Exception as exc:
        print(f"  torch {backend}: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
        return float("nan")


def _paged(cp, k, v, page, rng):
    """The cache k, v (B, Hkv, S, d) as a pool of scattered pages and its block_table."""
    B, Hkv, S, d = k.shape
    per = S // page
    perm = cp.asarray(rng.permutation(B * per).astype("int32")).reshape(B, per)
    pools = []
    for x in (k, v):
        pool = cp.empty((B * per, Hkv, page, d), x.dtype)
        for b in range(B):   # a sequence at a time: no second copy of the whole cache
            pool[perm[b]] = x[b].reshape(Hkv, per, page, d).transpose(1, 0, 2, 3)
        pools.append(pool)
    return pools[0], pools[1], perm


def _random_f16(cp, shape):
    """Standard normal float16 values, made a (sequence, head) slab at a time (no float32 copy
    of the whole cache)."""
    x = cp.empty(shape, cp.float16)
    flat = x.reshape(-1, shape[-2], shape[-1])
    for i in range(flat.shape[0]):
        flat[i] = cp.random.standard_normal(shape[-2:], dtype=cp.float32)
    return x


def _step_inputs(cp, rng, B, Hkv, S, d, G, footprint_mb=256):
    """The inputs of one timed decode cell: (copies, qs, bufs, seqlens). bufs: enough (2, B, Hkv,
    S, d) float16 K/V copies that together they pass footprint_mb (at most 256), so that a graph
    cycling through them reads from device memory, not L2; qs: up to 4 query arrays (B, G·Hkv, 1,
    d); seqlens: every sequence S tokens."""
    kv_bytes = 2 * B * Hkv * S * d * 2
    copies = max(1, min(256, math.ceil(footprint_mb * 2 ** 20 / kv_bytes)))
    qs = [cp.asarray(rng.standard_normal((B, G * Hkv, 1, d)).astype(np.float16))
          for _ in range(min(copies, 4))]
    bufs = [_random_f16(cp, (2, B, Hkv, S, d)) for _ in range(copies)]
    return copies, qs, bufs, cp.full((B,), S, dtype=cp.int32)


def _host_us(cp, fn, n, chunk=100, passes=3):
    """(host, wall) µs per call of fn over n calls after 100 warm-up calls, each the least of
    `passes` passes (the lent machines' CPUs are shared: noise only adds). wall: the n calls
    back to back, then a sync: the larger of the host's and the GPU's time per call. host: the
    same n calls in chunks of `chunk`, timed from the first call of a chunk to the return of its
    last, the GPU drained between chunks (not timed), so that a GPU slower than the host never
    holds a call back: the host's own cost per call."""
    sync = cp.cuda.Device().synchronize
    for _ in range(100):
        fn()
    sync()
    host = wall = float("inf")
    for _ in range(passes):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        wall = min(wall, (time.perf_counter() - t0) / n * 1e6)
        spent, done = 0.0, 0
        while done < n:
            m = min(chunk, n - done)
            t0 = time.perf_counter()
            for _ in range(m):
                fn()
            spent += time.perf_counter() - t0
            sync()
            done += m
        host = min(host, spent / n * 1e6)
    return host, wall


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", default="1x1,1x8,8x8,64x8", help="BxHkv pairs")
    ap.add_argument("--S", default="1024,8192,32768,131072")
    ap.add_argument("--G", type=int, default=4)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--pages", default="256", help="page sizes of the paged layout")
    ap.add_argument("--fill", default="", help="split rule's blocks per SM; default the library's")
    ap.add_argument("--tiles", default="", help="mma tiles MxNxWxS; default auto")
    ap.add_argument("--max-splits", default="", help="split-KV caps; default the library's")
    ap.add_argument("--min-tiles", default="", help="key tiles per split at least; default the "
                    "library's")
    ap.add_argument("--no-host", action="store_true", help="skip the host-time part")
    ap.add_argument("--layouts", default="contiguous,paged", help="contiguous and/or paged")
    ap.add_argument("--footprint", type=int, default=256, help="MB of K/V copies cycled at least")
    ap.add_argument("--host-calls", type=int, default=10000)
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args(argv)
    import cupy as cp

    from cuflash import TileConfig, kvcache
    from cuflash.experiments.readbw import DeviceRead
    defaults = (kvcache.DECODE_TILE, kvcache.DECODE_FILL, kvcache.DECODE_MAX_SPLITS,
                kvcache.DECODE_MIN_TILES)
    tiles = [TileConfig(*(int(x) for x in t.split("x")), "mma") for t in a.tiles.split(",") if t]
    fills = [int(x) for x in a.fill.split(",") if x]
    caps = [int(x) for x in a.max_splits.split(",") if x] or [kvcache.DECODE_MAX_SPLITS]
    mins = [int(x) for x in a.min_tiles.split(",") if x] or [kvcache.DECODE_MIN_TILES]
    combos = [(t, n, m, u) for t in (tiles or [None])
              for n in (fills or [kvcache.DECODE_FILL]) for m in caps for u in mins]
    label = lambda t, n, m, u: (("auto" if t is None else f"{t.block_m}x{t.block_n}x{t.num_warps}")
                                + f"/f{n}/c{m}/t{u}")
    G, d = a.G, a.d
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"{props['name'].decode()}, float16, d={d}, Hq={G}·Hkv; TB/s of K+V "
          f"(GPU time per call from CUDA graphs)")
    head = (f"{'B':>3} {'Hkv':>3} {'S':>7} {'copies':>6} {'layout':>10} "
            + "".join(f"{label(*c):>17}" for c in combos)
            + f"{'ceiling':>9}{'flash':>8}{'cuDNN':>8}{'/ceil':>7}{'/cuDNN':>7}")
    print(head)
    rng = np.random.default_rng(0)
    rows = []
    for pair in a.grid.split(","):
        B, Hkv = (int(x) for x in pair.split("x"))
        for S in (int(x) for x in a.S.split(",")):
            kv_bytes = 2 * B * Hkv * S * d * 2
            rate = lambda ms: kv_bytes / (ms * 1e-3) / 1e12
            copies, qs, bufs, seqlens = _step_inputs(cp, rng, B, Hkv, S, d, G, a.footprint)
            readers = [DeviceRead(buf.view(cp.uint32).reshape(-1)) for buf in bufs]
            ceiling = rate(_graph_ms(cp, [r.launch for r in readers]))
            refs = [float("nan")] * 2
            if not a.no_torch:
                ks, vs = [b[0] for b in bufs], [b[1] for b in bufs]
                refs = [rate(_torch_ms(qs, ks, vs, be)) for be in ("flash", "cudnn")]
            layouts = [(x, 0) if x == "contiguous" else (f"paged{p}", int(p))
                       for x in a.layouts.split(",")
                       for p in (a.pages.split(",") if x == "paged" else [0])]
            for layout, page in layouts:
                if page == 0:
                    caches = [(b[0], b[1], None) for b in bufs]
                else:
                    if S % page:
                        continue
                    try:
                        caches = [_paged(cp, b[0], b[1], page, rng) for b in bufs]
                    except cp.cuda.memory.OutOfMemoryError as exc:   # a result: the sweep goes on
                        line = (f"{B:>3} {Hkv:>3} {S:>7} {copies:>6} {layout:>10} "
                                f"out of memory beside the contiguous cache ({exc})")
                        print(line, flush=True)
                        rows.append(line)
                        caches = None
                        cp.get_default_memory_pool().free_all_blocks()
                        continue
                cols = []
                for t, n, m, u in combos:
                    (kvcache.DECODE_TILE, kvcache.DECODE_FILL, kvcache.DECODE_MAX_SPLITS,
                     kvcache.DECODE_MIN_TILES) = t, n, m, u
                    calls = [lambda i=i, c=c: kvcache.attention_with_kvcache(
                        qs[i % len(qs)], c[0], c[1], cache_seqlens=seqlens, block_table=c[2],
                        validate=False) for i, c in enumerate(caches)]
                    try:
                        cols.append(rate(_graph_ms(cp, calls, check=True)))
                    except ValueError as exc:   # kept as a result: the row goes on
                        print(f"  B={B} Hkv={Hkv} S={S} {layout} {label(t, n, m, u)}: {exc}",
                              flush=True)
                        cols.append(float("nan"))
                best = max((c for c in cols if c == c), default=float("nan"))
                # a reading above the read kernel's by > 10% is no reading: marked '!'
                mark = lambda c: "!" if c > 1.1 * ceiling else " "
                line = (f"{B:>3} {Hkv:>3} {S:>7} {copies:>6} {layout:>10} "
                        + "".join(f"{c:>16.2f}{mark(c)}" for c in cols)
                        + f"{ceiling:>9.2f}{refs[0]:>8.2f}{refs[1]:>8.2f}"
                        + f"{best / ceiling:>7.2f}{best / refs[1]:>7.2f}")
                print(line, flush=True)
                rows.append(line)
                del caches
            del bufs, readers
            cp.get_default_memory_pool().free_all_blocks()
    (kvcache.DECODE_TILE, kvcache.DECODE_FILL, kvcache.DECODE_MAX_SPLITS,
     kvcache.DECODE_MIN_TILES) = defaults
    if a.no_host:
        print("\n" + head)
        for line in rows:
            print(line)
        return
    # host time of a decode call (B = 1, Hkv = 8, S = 1024): wall time per call, many calls
    q = cp.asarray(rng.standard_normal((1, G * 8, 1, d)).astype(np.float16))
    k, v = (cp.asarray(rng.standard_normal((1, 8, 1024, d)).astype(np.float16)) for _ in "kv")
    kn, vn = (cp.asarray(rng.standard_normal((1, 8, 1, d)).astype(np.float16)) for _ in "kv")
    seqlens = cp.full((1,), 1000, dtype=cp.int32)
    step = dict(cache_seqlens=seqlens, k_new=kn, v_new=vn)
    host = {
        "attend, validate=False": lambda: kvcache.attention_with_kvcache(
            q, k, v, cache_seqlens=seqlens, validate=False),
        "append + attend, validate=False": lambda: kvcache.attention_with_kvcache(
            q, k, v, validate=False, **step),
        "append + attend, validate=True": lambda: kvcache.attention_with_kvcache(
            q, k, v, **step),
    }
    print(f"\nhost time per decode call (B=1, Hkv=8, Hq={G * 8}, S=1024): host = the calls "
          f"alone (chunks of 100, GPU drained between), wall = back to back (host or GPU):")
    for name, fn in host.items():
        n = a.host_calls if "False" in name else max(1, a.host_calls // 10)
        h, w = _host_us(cp, fn, n)
        print(f"  {name:34} host {h:7.2f} us  wall {w:7.2f} us  ({n} calls)")
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        tq, tk, tv = (torch.as_tensor(x, device="cuda") for x in (q, k, v))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            h, w = _host_us(cp, lambda: F.scaled_dot_product_attention(tq, tk, tv,
                                                                       enable_gqa=True),
                            a.host_calls)
        print(f"  {'torch SDPA cuDNN (reference)':34} host {h:7.2f} us  wall {w:7.2f} us")
    except Exception as exc:
        print(f"  torch reference: {type(exc).__name__}")
    # where the host time goes
    import cProfile
    import pstats
    fn = host["append + attend, validate=False"]
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(2000):
        fn()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(14)
    print("\n" + head)
    for line in rows:
        print(line)


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
