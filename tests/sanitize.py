"""Small launches of every kernel family and role, for compute-sanitizer.

    compute-sanitizer --tool memcheck  --error-exitcode 1 python3 tests/sanitize.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py

Shapes are odd (partial tiles on both axes, S != T) so the edges are exercised; every family
runs dense, causal, a window with softcap and ALiBi, and a mask_mod (with its tile lists), then
the layouts of kernels_cu/seq.cuh: GQA (k, v with one head for q's four, the dK/dV blocks of
a group in two ranks: each walks two query heads, the ranks sum in order through float
accumulators), a transposed (B, T, H, d) view (strided rows) and a packed batch of mixed lengths
(cu_seqlens, an empty sequence included). The causal forward also runs split-KV (three splits and
the merge). Last, attention_with_kvcache's one-launch kernels in every dtype: a contiguous cache
and pages read in place, the GQA fold and one head per row, sequences of 0, 1 and odd lengths,
the append kernel, and validate=False with lengths and pages out of range (clamped).
"""
import sys

import numpy as np

import cuflash
from cuflash import TileConfig
from cuflash._xp import DTYPES, cupy_module
from cuflash.gpu import plan
from cuflash.mask_mod import MaskMod

CASES = [  # (dtype, d, forward tile, backward tile)
    ("float16", 64, TileConfig(128, 64, 4, 2, "mma"), TileConfig(64, 64, 4, 2, "mma")),
    ("bfloat16", 72, TileConfig(64, 32, 4, 1, "mma"), TileConfig(32, 64, 4, 1, "mma")),
    ("float16", 40, TileConfig(64, 64, 8, 1), TileConfig(32, 64, 4, 1)),
    ("float32", 128, TileConfig(64, 64, 8, 1), TileConfig(32, 64, 4, 1)),
    ("float64", 256, TileConfig(32, 32, 4, 1), TileConfig(16, 16, 4, 1)),
]
FP64_TC_CASES = [  # sm_80 / sm_90: the float64 tensor-core kernels (no atomic-dQ mode)
    ("float64", 64, TileConfig(64, 32, 4, 2, "dmma"), TileConfig(32, 32, 4, 2, "dmma")),
]
KEY_SPLIT_CASES = [  # the mma forward's key-split layout (flash_fwd_mma.cu v10)
    ("float16", 128, TileConfig(16, 64, 4, 2, "mma"), TileConfig(64, 64, 4, 2, "mma")),
]
TF32_CASES = [  # sm_80+: float32's forward on TF32 tensor cores ('tf32', 'highest'; simt backward)
    ("float32", 96, TileConfig(128, 64, 8, 2, "tf32x3"), TileConfig(32, 64, 4, 1)),
    ("float32", 64, TileConfig(32, 64, 4, 2, "tf32"), TileConfig(32, 64, 4, 1)),
]
HOPPER_CASES = [  # sm_90 only: the wgmma kernels (no atomic-dQ mode)
    ("float16", 128, TileConfig(128, 128, 8, 3, "wgmma"), TileConfig(64, 64, 4, 2, "wgmma")),
    ("bfloat16", 72, TileConfig(128, 64, 8, 4, "wgmma"), TileConfig(64, 128, 8, 1, "wgmma")),
    # the warp-specialized forward and dK/dV kernels (flash_fwd_wgmma_ws.cu, flash_bwd_wgmma_ws.cu:
    # mbarriers, named barriers; the GQA layout's group sum in two ranks with the producer)
    ("float16", 128, TileConfig(128, 128, 12, 2, "wgmma"), TileConfig(64, 128, 12, 2, "wgmma")),
    ("bfloat16", 200, TileConfig(128, 64, 12, 2, "wgmma"), TileConfig(32, 32, 4, 1)),
    # one consumer warpgroup, two blocks a multiprocessor: the d <= 64 defaults (NOTES v68, v69)
    ("bfloat16", 64, TileConfig(64, 128, 8, 2, "wgmma"), TileConfig(64, 64, 8, 2, "wgmma")),
    # three consumer warpgroups, copy-engine loads only: the d <= 64 forward default (NOTES v89;
    # no softcap, no packed batch: those take the tile above)
    ("float16", 64, TileConfig(192, 128, 16, 2, "wgmma"), TileConfig(64, 128, 12, 2, "wgmma")),
    # float32 'tf32''s backward on the 16-bit pair over scaled float16 copies, float32 gradient
    # stores (kernel='wgmma_f16s', NOTES v71): both tiles of its default
    ("float32", 64, TileConfig(32, 64, 4, 2, "tf32"), TileConfig(64, 64, 8, 2, "wgmma_f16s")),
    ("float32", 64, TileConfig(32, 64, 4, 2, "tf32"), TileConfig(64, 128, 12, 2, "wgmma_f16s")),
    # d = 128: the dQ kernel stages its float rows through Q's rows in two halves (NOTES v72)
    ("float32", 128, TileConfig(32, 64, 4, 2, "tf32"), TileConfig(64, 128, 12, 2, "wgmma_f16s")),
    # float64's forward default at 64 < d <= 128 (16 rows a warp on 16-key tiles, 195 KB: sm_90's
    # shared memory only; NOTES v76), with its backward's default
    ("float64", 128, TileConfig(128, 16, 8, 2, "dmma"), TileConfig(32, 64, 8, 1, "dmma")),
]

WGMMA_TF32_CASES = [  # sm_90 only: float32's TF32 wgmma forward of dense batches (no split-KV, no
    # packed batch: kernel='wgmma_tf32' refuses them), on its staged K and Vᵀ; 8 warps, and the
    # warp-specialized one (flash_fwd_wgmma_ws.cu: mbarriers, named barriers, Q rounded per
    # consumer)
    ("float32", 96, TileConfig(128, 64, 8, 2, "wgmma_tf32")),
    ("float32", 128, TileConfig(128, 64, 12, 2, "wgmma_tf32")),
    ("float32", 64, TileConfig(128, 128, 12, 2, "wgmma_tf32")),
]


def main():
    """``python tests/sanitize.py [kv | case DTYPE D]``: every case, or with ``kv`` the decode path
    alone (the KV-cache kernels, the append, split-KV's merge, the key-split and float64
    tensor-core cases), or with ``case`` the cases of that dtype and head dim alone (no KV cache):
    a sanitizer run that stopped part way finishes in pieces."""
    args = sys.argv[1:]
    if args not in ([], ["kv"]) and (len(args) != 3 or args[0] != "case" or args[1] not in DTYPES
                                     or not args[2].isdigit()):
        sys.exit(f"usage: sanitize.py [kv | case DTYPE D] (DTYPE one of {sorted(DTYPES)}), "
                 f"got {args}")
    cp = cupy_module()
    from cuflash.gpu import ops
    ops._GROUP_RANKS = 2   # GQA below: G = 4 in two ranks (gpu/ops.py, _group_ranks)
    rng = np.random.default_rng(0)
    from cuflash.tile import has_fp64_tensor_cores
    from cuflash.gpu.ops import device_arch
    arch = device_arch()
    extra = KEY_SPLIT_CASES + TF32_CASES + (FP64_TC_CASES if has_fp64_tensor_cores(arch) else [])
    if args == ["kv"]:
        cases = extra
    else:
        cases = CASES + extra + (HOPPER_CASES if arch == "sm_90" else [])
    if args[:1] == ["case"]:
        cases = [c for c in cases if c[0] == args[1] and c[1] == int(args[2])]
        if not cases and not any(c[:2] == (args[1], int(args[2])) for c in WGMMA_TF32_CASES):
            sys.exit(f"sanitize.py: no case with dtype {args[1]} and d = {args[2]} on {arch}")
    T, S = 77, 45
    docs = cp.asarray(np.cumsum(rng.random((2, S)) < 0.1, axis=1).astype(np.int32))
    options = {"dense": {}, "causal": dict(causal=True),
               "window_softcap_alibi": dict(window=(9, 3), softcap=2.0,
                                            alibi_slopes=cp.asarray([0.3, 0.1], dtype=cp.float32)),
               "mask_mod": dict(causal=True, mask_mod=MaskMod("doc[h, j] != (i % 3)", doc=docs))}
    if args == ["kv"]:   # the decode path first
        for dt in DTYPES:
            kv_cache(cp, rng, dt)
    for dt, d, ft, bt in cases:
        for name, kw in options.items():
            if plan.copy_engine_only(ft):   # it runs no softcap (plan._validate_wgmma)
                kw = {key: val for key, val in kw.items() if key != "softcap"}
            q, k, v, do = (cp.asarray(rng.standard_normal(s).astype(DTYPES[dt]))
                           for s in ((2, T, d), (2, S, d), (2, S, d), (2, T, d)))
            out, lse = cuflash.attention(q, k, v, tile=ft, return_lse=True, **kw)
            if name == "causal":
                cuflash.attention(q, k, v, tile=ft, num_splits=3, **kw)
            for det in _dets(bt):
                cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out, lse, **kw), tile=bt,
                                           deterministic=det)
            cp.cuda.Device().synchronize()
            print(f"ok {dt} d={d} {name} fwd={ft.short()} bwd={bt.short()}")
        layouts(cp, rng, dt, d, ft, bt)
    if arch == "sm_90" and args[:1] != ["kv"]:
        for dt, d, ft in WGMMA_TF32_CASES:
            if args[:1] != ["case"] or (dt, d) == (args[1], int(args[2])):
                staged_tf32(cp, rng, options, T, S, d, ft)
    if not args:
        for dt in DTYPES:
            kv_cache(cp, rng, dt)


def _dets(bt):
    """The backward's dQ modes a tile runs: both, but for the dmma tiles and the wgmma tiles
    other than the warp-specialized dK/dV one (dQ in its own pass only)."""
    return ((True,) if bt.kernel in ("wgmma", "dmma") and not bt.warp_specialized_dkdv
            else (True, False))


def staged_tf32(cp, rng, options, T, S, d, ft):
    """The TF32 wgmma forward (tile ft) with every option but a mask_mod, and GQA: forward only
    (its backward is kernel='tf32', run by TF32_CASES)."""
    rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float32))
    for name, kw in options.items():
        if name != "mask_mod":
            cuflash.attention(rand(2, T, d), rand(2, S, d), rand(2, S, d), tile=ft, **kw)
    cuflash.attention(rand(2, 4, 37, d), rand(2, 1, 29, d), rand(2, 1, 29, d), causal=True,
                      tile=ft)
    cp.cuda.Device().synchronize()
    print(f"ok float32 d={d} wgmma_tf32 fwd={ft.short()} (dense, causal, window/softcap/ALiBi, GQA)")


def layouts(cp, rng, dt, d, ft, bt):
    """GQA, a strided view and a packed batch through one family's kernels, causal."""
    dets = _dets(bt)
    rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(DTYPES[dt]))
    q, k, v = rand(2, 4, 37, d), rand(2, 1, 29, d), rand(2, 1, 29, d)   # GQA, G = 4
    x = rand(3, 2, 33, 2, 3 * d)[..., :d]     # (B, T, H, d) with padded rows
    views = tuple(t.transpose(0, 2, 1, 3) for t in x)                    # (B, H, T, d) views
    for qq, kk, vv in ((q, k, v), views):
        out, res = cuflash.attention(qq, kk, vv, causal=True, tile=ft, return_residuals=True)
        for det in dets:
            cuflash.attention_backward(rand(*out.shape), res, tile=bt, deterministic=det)
    cu = cp.asarray(np.array([0, 5, 5, 40, 47], dtype=np.int32))       # packed, one empty
    qp, kp, vp = rand(47, 4, d), rand(47, 2, d), rand(47, 2, d)
    out, res = cuflash.attention_varlen(qp, kp, vp, cu, cu, causal=True,
                                        tile=plan.without_tensor_maps(ft, d) if
                                        plan.copy_engine_only(ft) else ft,
                                        return_residuals=True)
    for det in dets:
        cuflash.attention_varlen_backward(rand(*out.shape), res, tile=bt, deterministic=det)
    cp.cuda.Device().synchronize()
    print(f"ok {dt} d={d} layouts (GQA, strided view, packed)")


def kv_cache(cp, rng, dt):
    """Decode steps over a contiguous cache and a paged pool (scattered pages), Tq = 1 (the GQA
    fold) and Tq = 3 with a window, automatic and forced splits (3, and 256: the merge's batches
    of staged splits, split_combine.cuh), and 4 and 8, which the 16-bit kernels on sm_90 merge in
    one thread-block cluster (finish_cluster_split). Two geometries: d = 64 over pages of 64 with
    a fold of 4 heads (16-row tiles), and d = 256 over pages of 32 with a fold of 8 (at Tq = 1 the
    16-row tile of 64 keys, each warp's 16 from its own page; at Tq = 3, 24 rows: the 32-row tile
    of 32 keys, kvcache._tile_for), where the kernels take those pages (not float32's tile)."""
    from cuflash import kvcache
    if DTYPES[dt] is None:
        return
    kvcache.DECODE_CLUSTER = 8
    from cuflash.gpu import ops
    for d, page, Hq in ((64, 64, 8), (256, 32, 16)):
        # only where the kernels take the pages (float32's 64-key tile at d = 256 does not hold
        # in pages of 32: its calls go to the reference path, which has no kernel to check and
        # refuses the out-of-range lengths below)
        if all(kvcache._tile_for(dt, d, rows, None, page, ops.device_arch(), ops.smem_limit())
               for rows in (16, 32)):
            _kv_geometry(cp, rng, dt, d, page, Hq)
    cp.cuda.Device().synchronize()
    print(f"ok {dt} kv cache (contiguous, paged)")


def _kv_geometry(cp, rng, dt, d, page, Hq):
    from cuflash.kvcache import attention_with_kvcache
    rand = lambda *s: cp.asarray(rng.standard_normal(s).astype(DTYPES[dt]))
    lens = np.array([0, 1, 70, 129], dtype=np.int32)
    B, Hkv, pages = len(lens), 2, -(-160 // page)
    table = np.arange(B * pages, dtype=np.int32)[::-1].reshape(B, pages).copy()
    caches = {"contiguous": (rand(B, Hkv, pages * page, d), rand(B, Hkv, pages * page, d), None),
              "paged": (rand(B * pages, Hkv, page, d), rand(B * pages, Hkv, page, d),
                        cp.asarray(table))}
    for layout, (kc, vc, bt) in caches.items():
        for Tq, kw in ((1, dict(causal=True)), (3, dict(causal=True, window=(40, None)))):
            for splits in (None, 3, 4, 8, 256):   # 256: the merge stages its splits in batches
                attention_with_kvcache(rand(B, Hq, Tq, d), kc, vc, cache_seqlens=cp.asarray(lens),
                                       block_table=bt, num_splits=splits, **kw)
        # an append (the append kernel), then validate=False with indices out of range: lengths
        # past the capacity and negative, pages outside the pool; the kernels must clamp them
        attention_with_kvcache(rand(B, Hq, 1, d), kc, vc, cache_seqlens=cp.asarray(lens),
                               block_table=bt, k_new=rand(B, Hkv, 2, d), v_new=rand(B, Hkv, 2, d))
        bad_lens = cp.asarray(np.array([10 ** 6, -5, 70, pages * page], np.int32))
        bad_table = None if bt is None else cp.asarray(np.where(table % 2 == 0, 10 ** 6, -2)
                                                       .astype(np.int32))
        attention_with_kvcache(rand(B, Hq, 1, d), kc, vc, cache_seqlens=bad_lens,
                               block_table=bad_table, k_new=rand(B, Hkv, 1, d),
                               v_new=rand(B, Hkv, 1, d), validate=False)


if __name__ == "__main__":
    main()
