"""Call 196 (with .ab/prof.patch, CUFLASH_PROF=1): where a block's time goes in the x1 kernels at
issue 15's short cells. Each block writes clock64 at: 0 entry, 1 consumer 0 ready (Q made / K,V
or Q,dO landed), 2 first tile done (forward), 3 mainloop done, 4 consumer 0's stores issued,
5 consumer 1's, 6 producer done; 7 its SM; the x1 / x3 forward also 12 barriers set, 8 consumer
0 started, 9 its Q rows made, 10 producer's first K issued, 11 first K landed (since call 200). Per kernel: mean phase times (us), the per-SM gap
between one block's last mark and the next block's entry, and each phase's share of SM time."""
import os, sys, collections
import numpy as np, cupy as cp
sys.path.insert(0, ".")
import cuflash
from cuflash.gpu import build

mods = {}
_orig = build._module_from_cubin
def _capture(path, device_id):
    m = _orig(path, device_id)
    mods[path] = m
    return m
build._module_from_cubin = _capture
build.get_kernel.cache_clear()

ghz = cp.cuda.runtime.getDeviceProperties(0)["clockRate"] / 1e6
print(f"# clock {ghz:.3f} GHz (props)")
DTYPE = os.environ.get("PROF_DTYPE", "float32")   # float16: the 16-bit ws forward (issue 13)
cells = [("fwd", 128, 2048, 1), ("fwd", 128, 2048, 0), ("fwd", 128, 16384, 1),
         ("bwd", 64, 2048, 1), ("bwd", 64, 2048, 0), ("bwd", 64, 16384, 1)]
if DTYPE != "float32":
    cells = [("fwd", 64, 2048, 0), ("fwd", 64, 2048, 1), ("fwd", 64, 16384, 0),
             ("fwd", 128, 2048, 1), ("fwd", 128, 16384, 1),
             ("bwd", 64, 2048, 0), ("bwd", 64, 2048, 1), ("bwd", 64, 16384, 0)]
TILES = {}   # by name: (pass, d) -> TileConfig (e.g. the 8-warp x1 tiles), else the default
if os.environ.get("PROF_TILES") == "w8":
    from cuflash.tile import wgmma_f16x3_tiles
    TILES = {("fwd", 128): wgmma_f16x3_tiles(128, False, "wgmma_f16x1", num_warps=8)[0],
             ("bwd", 64): wgmma_f16x3_tiles(64, True, "wgmma_f16x1", num_warps=8)[0]}
for pas, d, T, causal in [c for c in cells if c[0] in os.environ.get("PROF_CELLS", "fwd,bwd")]:
    B, H = 16384 // T, 2048 // d
    rng = cp.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((B, H, T, d), dtype=cp.float32).astype(DTYPE)
                   for _ in range(4))
    prec = "tf32" if DTYPE == "float32" else None
    tile = TILES.get((pas, d))
    _, res = cuflash.attention(q, k, v, causal=bool(causal), precision=prec, return_residuals=True,
                               tile=tile if pas == "fwd" else None)
    fn = ((lambda: cuflash.attention_backward(do, res, precision=prec, tile=tile)) if pas == "bwd"
          else (lambda: cuflash.attention(q, k, v, causal=bool(causal), precision=prec, tile=tile)))
    fn(); cp.cuda.runtime.deviceSynchronize()
    bufs = {}
    for path, m in mods.items():
        ptr = m.get_global("cuflash_prof")
        arr = cp.ndarray((65536, 16), cp.int64, ptr)
        arr.fill(0)
        bufs[path] = arr
    cp.cuda.runtime.deviceSynchronize()
    fn(); cp.cuda.runtime.deviceSynchronize()
    print(f"\n## {pas} d={d} T={T} causal={causal} B={B} H={H}")
    for path, arr in bufs.items():
        a = arr.get()
        used = a[:, 0] != 0
        if not used.any():
            continue
        a = a[used].astype(np.float64)
        name = path.split("/")[-1].split("-")[0]
        us = lambda x: x / ghz / 1000.0
        ent = a[:, 0]
        last = a[:, 1:7].max(axis=1)
        ph = {"ready": a[:, 1] - ent, "first_tile": np.where(a[:, 2] > 0, a[:, 2] - a[:, 1], np.nan),
              "loop": a[:, 3] - a[:, 1], "store0": a[:, 4] - a[:, 3],
              "c1_end-c0_end": a[:, 5] - a[:, 4], "prod_end-c0_end": a[:, 6] - a[:, 4],
              "block": last - ent}
        print(f"{name}: {len(a)} blocks")
        if (a[:, 8] > 0).all():   # the forward's finer start marks (slots 8-12)
            ph.update({"s:entry>init": a[:, 12] - ent, "s:init>consumer": a[:, 8] - a[:, 12],
                       "s:make_q": a[:, 9] - a[:, 8], "s:q>barrier": a[:, 1] - a[:, 9],
                       "s:ready>K0": a[:, 11] - a[:, 1], "s:K0>tile0": a[:, 2] - a[:, 11]})
        for k_, x in ph.items():
            x = x[np.isfinite(x)]
            if len(x):
                print(f"  {k_:16s} mean {us(x.mean()):7.2f} us  p10 {us(np.percentile(x,10)):7.2f}  p90 {us(np.percentile(x,90)):7.2f}")
        # per SM: blocks in entry order, the gap from a block's last mark to the next's entry
        gaps, span, busy = [], 0.0, collections.Counter()
        for sm in np.unique(a[:, 7]):
            b = a[a[:, 7] == sm]
            b = b[np.argsort(b[:, 0])]
            lb = b[:, 1:7].max(axis=1)
            gaps += list(b[1:, 0] - lb[:-1])
            span = max(span, lb.max() - b[0, 0])
            busy["ready"] += (b[:, 1] - b[:, 0]).sum()
            busy["loop"] += (b[:, 3] - b[:, 1]).sum()
            busy["store+tail"] += (lb - b[:, 3]).sum()
            busy["gap"] += (b[1:, 0] - lb[:-1]).sum()
        g = np.array(gaps)
        nsm = len(np.unique(a[:, 7]))
        print(f"  gap(next entry) mean {us(g.mean()):7.2f} us  p10 {us(np.percentile(g,10)):7.2f}  p90 {us(np.percentile(g,90)):7.2f}; "
              f"{nsm} SMs, longest SM span {us(span):8.1f} us, blocks/SM {len(a)/nsm:.1f}")
        tot = sum(busy.values())
        print("  share of SM time: " + ", ".join(f"{k_} {v_/tot:5.1%}" for k_, v_ in busy.items()))
    del q, k, v, do, res
    cp.get_default_memory_pool().free_all_blocks()
