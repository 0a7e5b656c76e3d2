"""GPU-only checks of the CUDA kernels: every output element written (every test here runs with
outputs poisoned with NaN before each launch: the autouse fixture poison_gpu_outputs), identical bits on repeated runs, agreement with the CPU twin to rounding,
explicit TileConfigs of both kernel families against the oracle, refusals, launch details and
O(T) device memory. The shared tests (test_forward.py, test_backward.py, ...) also run on the GPU
through the `xp` fixture."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash._xp import dtype_name, to_numpy
from cuflash.oracle import oracle_attention, oracle_backward

from helpers import (  # poison_gpu_outputs: autouse fixture
    poison_gpu_outputs, ALL_DTYPES, PeakTracker, assert_matches_oracle, case_seed, grad_scale,
    make_inputs, skip_unless_tile_fits)

pytestmark = pytest.mark.gpu

SIMT = [TileConfig(64, 64, 8, 1), TileConfig(32, 32, 4, 1), TileConfig(16, 32, 2, 1)]
MMA_FWD = [TileConfig(128, 64, 4, 2, "mma"), TileConfig(64, 64, 4, 1, "mma"),
           TileConfig(64, 32, 4, 2, "mma"), TileConfig(32, 32, 2, 2, "mma")]
WGMMA_FWD = [TileConfig(128, 128, 8, 3, "wgmma"), TileConfig(128, 64, 8, 4, "wgmma"),
             TileConfig(64, 64, 4, 3, "wgmma"), TileConfig(64, 256, 4, 3, "wgmma"),
             TileConfig(128, 16, 8, 3, "wgmma"),
             # warp-specialized: a producer warpgroup and two consumers (flash_fwd_wgmma_ws.cu)
             TileConfig(128, 128, 12, 2, "wgmma"), TileConfig(128, 64, 12, 4, "wgmma"),
             TileConfig(128, 16, 12, 3, "wgmma"),
             # one consumer warpgroup, two blocks a multiprocessor (NOTES v68)
             TileConfig(64, 128, 8, 2, "wgmma"), TileConfig(64, 64, 8, 2, "wgmma"),
             # three consumer warpgroups, copy-engine loads only (d <= 64; NOTES v89)
             TileConfig(192, 128, 16, 2, "wgmma")]
WGMMA_BWD = [TileConfig(64, 64, 4, 2, "wgmma"), TileConfig(64, 128, 8, 2, "wgmma"),
             TileConfig(64, 64, 4, 1, "wgmma"), TileConfig(128, 128, 8, 1, "wgmma")]
# warp-specialized dK/dV: a producer warpgroup and two consumers (flash_bwd_wgmma_ws.cu); dQ in
# its own pass (deterministic) or by atomics in the dK/dV kernel
WGMMA_WS_BWD = [TileConfig(64, 128, 12, 2, "wgmma"), TileConfig(64, 128, 12, 3, "wgmma"),
                # one consumer warpgroup, two blocks a multiprocessor (d <= 64; NOTES v66)
                TileConfig(64, 64, 8, 2, "wgmma"), TileConfig(64, 64, 8, 3, "wgmma")]
MMA_BWD = [TileConfig(64, 64, 4, 2, "mma"), TileConfig(32, 64, 4, 1, "mma"),
           TileConfig(32, 32, 2, 2, "mma")]
# float64 tensor cores: 16 and 8 rows per warp (m16n8k16 on sm_90, m8n8k4), 1 and 2 stages
DMMA_FWD = [TileConfig(64, 32, 4, 2, "dmma"), TileConfig(128, 64, 8, 2, "dmma"),
            TileConfig(64, 32, 8, 2, "dmma"), TileConfig(32, 32, 4, 1, "dmma"),
            TileConfig(128, 16, 8, 2, "dmma"),  # sm_90's default at 64 < d <= 128 (NOTES v76)
            TileConfig(64, 16, 4, 1, "dmma")]
DMMA_BWD = [TileConfig(32, 32, 4, 2, "dmma"), TileConfig(64, 64, 8, 2, "dmma"),
            TileConfig(32, 64, 4, 1, "dmma"), TileConfig(16, 16, 2, 1, "dmma"),
            TileConfig(64, 32, 4, 2, "dmma")]   # dQ of two m-tiles a warp (m16n8k16 on sm_90)


def _finite_everywhere(name, x):
    x = to_numpy(x).astype(np.float64)
    bad = ~np.isfinite(x)
    assert not bad.any(), f"{name}: {bad.sum()} of {x.size} elements not written (NaN/inf) " \
                          f"at {np.argwhere(bad)[:5].tolist()}"


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T,S,d", [(97, 257, 72), (257, 257, 128), (1, 17, 16), (130, 300, 256)])
def test_every_output_written(cp, dtype, causal, T, S, d):
    """Outputs start as NaN; with finite inputs where every query sees a key, nothing stays NaN."""
    q, k, v = make_inputs(cp, (2, T, d), (2, S, d), dtype, seed=T * 7 + S)
    do = make_inputs(cp, (2, T, d), (2, S, d), dtype, seed=5)[0]
    out, lse = cuflash.attention(q, k, v, causal=causal, return_lse=True)
    _finite_everywhere("out", out)
    _finite_everywhere("lse", lse)
    for det in (True, False):
        for name, g in zip(("dq", "dk", "dv"), cuflash.attention_backward(
            do, cuflash.Residuals(q, k, v, out, lse, causal=causal), deterministic=det)):
            _finite_everywhere(f"{name} (deterministic={det})", g)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_repeated_runs_identical_bits(cp, dtype):
    q, k, v = make_inputs(cp, (3, 300, 64), (3, 333, 64), dtype, seed=11)
    do = make_inputs(cp, (3, 300, 64), (3, 333, 64), dtype, seed=12)[0]
    runs = []
    for _ in range(3):
        out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
        grads = cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out, lse, causal=True),
                                           deterministic=True)
        runs.append([to_numpy(x).view(np.uint8) for x in (out, lse) + tuple(grads)])
    for r in runs[1:]:
        for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), runs[0], r):
            assert np.array_equal(a, b), f"{name} differs between runs ({dtype_name(dtype)})"


def _ulp_tol(dtype, ref, factor):
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23,
           "float64": 2.0 ** -52}[dtype_name(dtype)]
    return factor * eps * float(np.abs(ref).max())


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("tile", [TileConfig(64, 64, 8, 1), TileConfig(64, 64, 4, 2, "mma")],
                         ids=lambda t: t.short())
def test_kernels_agree_with_twin(cp, dtype, tile):
    """Same inputs, same tiles: the kernels and the CPU twin compute one function; they differ
    only by the order of float32 (float64) sums, i.e. by rounding: a few units in the last place
    of the output dtype (16-bit outputs: one rounding step either way)."""
    if tile.kernel == "mma" and dtype_name(dtype) not in ("float16", "bfloat16"):
        pytest.skip("mma kernels take float16/bfloat16")
    q, k, v = make_inputs(cp, (2, 200, 64), (2, 190, 64), dtype, seed=21)
    do = make_inputs(cp, (2, 200, 64), (2, 190, 64), dtype, seed=22)[0]
    qn, kn, vn, don = (to_numpy(x) for x in (q, k, v, do))
    out_g, lse_g = cuflash.attention(q, k, v, causal=True, tile=tile, return_lse=True)
    out_c, lse_c = cuflash.attention(qn, kn, vn, causal=True, tile=tile, return_lse=True)
    small = dtype_name(dtype) in ("float16", "bfloat16")
    f = 2 if small else 256
    ref = to_numpy(out_c).astype(np.float64)
    diff = np.abs(to_numpy(out_g).astype(np.float64) - ref).max()
    assert diff <= _ulp_tol(dtype, ref, f), f"out: kernel vs twin differ by {diff:.3e}"
    lse_ref = to_numpy(lse_c).astype(np.float64)
    lse_got = to_numpy(lse_g).astype(np.float64)
    # T > S causal: the first T - S rows see no key, lse = -inf in both
    assert np.array_equal(np.isneginf(lse_got), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    acc = "float64" if dtype_name(dtype) == "float64" else "float32"
    diff = np.abs(lse_got[fin] - lse_ref[fin]).max()
    assert diff <= _ulp_tol(acc, lse_ref[fin], 256), f"lse: kernel vs twin differ by {diff:.3e}"
    g_gpu = cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out_g, lse_g, causal=True),
                                       deterministic=True, tile=tile)
    g_cpu = cuflash.attention_backward(don,
                                       cuflash.Residuals(qn, kn, vn, out_c, lse_c, causal=True),
                                       deterministic=True, tile=tile)
    for name, a, b in zip(("dq", "dk", "dv"), g_gpu, g_cpu):
        ref = to_numpy(b).astype(np.float64)
        diff = np.abs(to_numpy(a).astype(np.float64) - ref).max()
        # 16-bit: P and dS are rounded to the dtype inside; a score that differs in its last
        # float32 bit can round the other way, so allow a few steps of the 16-bit grid
        assert diff <= _ulp_tol(dtype, ref, 8 if small else 1024), \
            f"{name}: kernel vs twin differ by {diff:.3e}"


def _tile_cases():
    cases = []
    for dt in ("float16", "bfloat16"):
        cases += [(dt, t, "fwd") for t in MMA_FWD + WGMMA_FWD] + [(dt, t, "bwd") for t in MMA_BWD]
        cases += [(dt, t, "bwd_det") for t in WGMMA_BWD] + [(dt, t, "bwd") for t in WGMMA_WS_BWD]
    for dt in ("float16", "float32", "float64"):
        cases += [(dt, t, "both") for t in SIMT]
    cases += [("float64", t, "fwd") for t in DMMA_FWD] + [("float64", t, "bwd_det") for t in DMMA_BWD]
    return [pytest.param(dt, t, p, id=f"{dt}-{t.short()}-{p}") for dt, t, p in cases]


@pytest.mark.parametrize("dtype,tile,pass_", _tile_cases())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T,S,d", [(97, 257, 64), (257, 97, 128), (1000, 1000, 40), (17, 1, 96)])
def test_tiles_against_oracle(cp, dtype, tile, pass_, causal, T, S, d):
    skip_unless_tile_fits(tile, d, dtype, passes=("fwd",) if pass_ == "fwd" else
                          ("bwd", "fwd") if pass_ == "both" else ("bwd",))   # bwd, bwd_det
    # a seed per tile, pass and shape: a kernel that skips a tile cannot pass on stale values
    seed = case_seed(dtype, tile, pass_, causal, T, S, d)
    q, k, v = make_inputs(cp, (2, T, d), (2, S, d), dtype, seed=seed)
    qn, kn, vn = (to_numpy(x) for x in (q, k, v))
    ref_out, ref_lse = oracle_attention(qn, kn, vn, causal=causal)
    fwd_tile = tile if pass_ in ("fwd", "both") else None
    out, lse = cuflash.attention(q, k, v, causal=causal, tile=fwd_tile, return_lse=True)
    naive_out = cuflash.naive_attention(q, k, v, causal=causal)
    assert_matches_oracle(out, ref_out, naive_out, dtype=dtype, name="out")
    if pass_ == "fwd":
        return
    do = make_inputs(cp, (2, T, d), (2, S, d), dtype, seed=seed + 1)[0]
    refs = oracle_backward(to_numpy(do), qn, kn, vn, causal=causal)
    naive = cuflash.naive_attention_backward(do, q, k, v, causal=causal)
    for det in ((True,) if pass_ == "bwd_det" else (True, False)):
        grads = cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out, lse, causal=causal),
                                           tile=tile, deterministic=det)
        for name, g, r, n in zip(("dq", "dk", "dv"), grads, refs, naive):
            assert_matches_oracle(g, r, n, dtype=dtype, name=f"{name} (det={det})",
                                  floor_scale=grad_scale(*refs))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_three_consumer_forward_where_the_copy_engine_cannot_read(cp, causal):
    """The forward of three consumer warpgroups loads by the copy engine only: on arrays it
    cannot map (k and v broadcast over heads: a stride of 0, tma.map_shape) it runs
    plan.without_tensor_maps's tile, as exact; a packed batch or softcap with it is refused,
    naming the tile's limits."""
    t = TileConfig(192, 128, 16, 2, "wgmma")
    skip_unless_tile_fits(t, 64, "float16", passes=("fwd",))
    for T, S in ((500, 300), (77, 1000)):
        seed = case_seed("float16", t, "views", causal, T, S, 64)
        q, k, v = make_inputs(cp, (2, 3, T, 64), (2, 1, S, 64), "float16", seed=seed)
        k, v = (cp.broadcast_to(x, (2, 3, S, 64)) for x in (k, v))
        qn, kn, vn = (to_numpy(x) for x in (q, k, v))
        ref_out, ref_lse = oracle_attention(qn, kn, vn, causal=causal)
        out, lse = cuflash.attention(q, k, v, causal=causal, tile=t, return_lse=True)
        naive = cuflash.naive_attention(q, k, v, causal=causal)
        assert_matches_oracle(out, ref_out, naive, dtype="float16", name="out")
    with pytest.raises(ValueError, match="unpacked batches without softcap"):   # mapped arrays
        cuflash.attention(q, cp.ascontiguousarray(k), cp.ascontiguousarray(v), causal=causal,
                          tile=t, softcap=5.0)
    cu = cp.asarray(np.array([0, 5, 40], dtype=np.int32))
    qp = make_inputs(cp, (40, 2, 64), (40, 2, 64), "float16", seed=seed + 1)
    with pytest.raises(ValueError, match="unpacked batches without softcap"):
        cuflash.attention_varlen(*qp, cu, cu, causal=causal, tile=t)


def test_tile_that_does_not_fit_is_refused(cp):
    q, k, v = make_inputs(cp, (1, 64, 256), (1, 64, 256), np.float64, seed=1)
    with pytest.raises(ValueError, match=r"needs \d+ bytes of shared memory.*allows \d+"):
        cuflash.attention(q, k, v, tile=TileConfig(128, 128, 16, 1))


def test_mma_refuses_float32(cp):
    q, k, v = make_inputs(cp, (1, 64, 64), (1, 64, 64), np.float32, seed=1)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        cuflash.attention(q, k, v, tile=TileConfig(64, 64, 4, 2, "mma"))
    with pytest.raises(ValueError, match="needs float64"):
        cuflash.attention(q, k, v, tile=TileConfig(64, 32, 4, 2, "dmma"))


def test_float64_default_is_dmma_where_it_runs(cp):
    """float64 on sm_80 / sm_90 takes the float64 tensor-core kernels by default (d <= 128,
    deterministic backward); atomic dQ stays on simt, and asking dmma for it is refused."""
    from cuflash.gpu.ops import device_arch, smem_limit
    from cuflash.tile import default_tile, has_fp64_tensor_cores
    want = "dmma" if has_fp64_tensor_cores(device_arch()) else "simt"
    kw = dict(smem_limit=smem_limit(), arch=device_arch())
    assert default_tile(128, np.float64, **kw).kernel == want
    assert default_tile(64, np.float64, backward=True, **kw).kernel == want
    assert default_tile(64, np.float64, backward=True, deterministic=False, **kw).kernel == "simt"
    q, k, v = make_inputs(cp, (1, 40, 64), (1, 40, 64), np.float64, seed=1)
    out, lse = cuflash.attention(q, k, v, return_lse=True)
    with pytest.raises(ValueError, match="dQ in its own pass"):
        cuflash.attention_backward(q, cuflash.Residuals(q, k, v, out, lse),
                                   tile=TileConfig(32, 32, 4, 2, "dmma"), deterministic=False)


def test_wgmma_forward_on_hopper_only(cp):
    """On sm_90 the wgmma tile runs and matches the oracle at T not a multiple of block_m; on any
    other GPU it is refused with a message naming the architecture."""
    from cuflash.gpu.ops import device_arch
    q, k, v = make_inputs(cp, (3, 200, 64), (3, 333, 64), np.float16, seed=4)
    tile = TileConfig(128, 128, 8, 3, "wgmma")
    if device_arch() != "sm_90":
        with pytest.raises(ValueError, match="runs only on sm_90"):
            cuflash.attention(q, k, v, tile=tile)
        return
    out = cuflash.attention(q, k, v, tile=tile)
    ref, _ = oracle_attention(*(to_numpy(x) for x in (q, k, v)))
    assert_matches_oracle(out, ref, cuflash.naive_attention(q, k, v), dtype=np.float16,
                          name="out")
    with pytest.raises(ValueError, match="dQ in their own pass"):
        cuflash.attention_backward(q,
                                   cuflash.Residuals(q, k, v, out, cp.zeros((3, 200), cp.float32)),
                                   tile=TileConfig(64, 64, 4, 2, "wgmma"), deterministic=False)


def test_ws_forward_loads_through_tensor_maps(cp, monkeypatch):
    """On sm_90 the warp-specialized forward's producer loads by the copy engine where the host
    made tensor maps (ops.ForwardLaunch._tensor_maps: tma_loads 1) and by cp.async where it could
    not (k and v broadcast over the batch: stride 0, no map); both match the oracle with GQA,
    rows past T and S and columns past d (d = 96: the second panel of 64 half outside) read as
    zeros."""
    from cuflash.gpu import ops
    if ops.device_arch() != "sm_90":
        pytest.skip("the warp-specialized forward runs on sm_90")
    seen, real = [], ops.ForwardLaunch._tensor_maps

    def spy(self, *args):
        fields = real(self, *args)
        seen.append(fields["tma_loads"])
        return fields

    monkeypatch.setattr(ops.ForwardLaunch, "_tensor_maps", spy)
    tile = TileConfig(128, 128, 12, 2, "wgmma")
    q, k, v = make_inputs(cp, (2, 4, 201, 96), (2, 2, 333, 96), np.float16,
                          seed=case_seed("tensor-maps"))
    broadcast = (cp.broadcast_to(k[:1], k.shape), cp.broadcast_to(v[:1], v.shape))
    for (kk, vv), maps in (((k, v), 1), (broadcast, 0)):
        seen.clear()
        out = cuflash.attention(q, kk, vv, causal=True, tile=tile)
        assert seen == [maps]
        ref, _ = oracle_attention(*(to_numpy(x) for x in (q, kk, vv)), causal=True)
        assert_matches_oracle(out, ref, cuflash.naive_attention(q, kk, vv, causal=True),
                              dtype=np.float16, name=f"out (tma_loads={maps})")


def test_ws_backward_loads_through_tensor_maps(cp, monkeypatch):
    """On sm_90 the warp-specialized backward gets tensor maps (ops._backward_maps: tma_loads 1;
    its dK/dV kernel reads by the copy engine only), also for k and v broadcast over the batch,
    which the host copies first (stride 0 cannot be mapped), and with atomic dQ a fifth map, of
    dq_accum, through which the copy engine adds dQ (rows past T and columns past d skipped); dQ,
    dK and dV match the oracle with GQA and d = 96 (the second 64-column panel half outside the
    arrays), for both dQ modes."""
    from cuflash.gpu import ops
    if ops.device_arch() != "sm_90":
        pytest.skip("the warp-specialized backward runs on sm_90")
    seen, real = [], ops._backward_maps

    def spy(r, dout, dt, dkdv, dq_accum=None):
        got = real(r, dout, dt, dkdv, dq_accum)
        seen.append((got[2]["tma_loads"], 0 not in got[0].k.strides,
                     any(got[2]["tma"][64:80])))
        return got

    monkeypatch.setattr(ops, "_backward_maps", spy)
    tile = TileConfig(64, 128, 12, 2, "wgmma")
    seed = case_seed("tensor-maps-backward")
    q, k, v = make_inputs(cp, (2, 4, 201, 96), (2, 2, 333, 96), np.float16, seed=seed)
    do = make_inputs(cp, (2, 4, 201, 96), (2, 2, 333, 96), np.float16, seed=seed + 1)[0]
    broadcast = (cp.broadcast_to(k[:1], k.shape), cp.broadcast_to(v[:1], v.shape))
    for kk, vv in ((k, v), broadcast):
        out, lse = cuflash.attention(q, kk, vv, causal=True, return_lse=True)
        qn, kn, vn = (to_numpy(x) for x in (q, kk, vv))
        refs = oracle_backward(to_numpy(do), qn, kn, vn, causal=True)
        naive = cuflash.naive_attention_backward(do, q, kk, vv, causal=True)
        for det in (True, False):
            seen.clear()
            grads = cuflash.attention_backward(
                do, cuflash.Residuals(q, kk, vv, out, lse, causal=True), tile=tile,
                deterministic=det)
            assert seen == [(1, True, not det)]
            for name, g, r, n in zip(("dq", "dk", "dv"), grads, refs, naive):
                assert_matches_oracle(g, r, n, dtype=np.float16, name=f"{name} (det={det})",
                                      floor_scale=grad_scale(*refs))


def test_default_backward_dq_mode(cp):
    """deterministic=False with tile=None runs default_backward's choice: on sm_90 the
    deterministic pair (the warp-specialized atomic dQ measured slower, v20), so its gradients
    equal deterministic=True's bit for bit; elsewhere the atomic-dQ tile, within the oracle's
    bound."""
    from cuflash.gpu.ops import device_arch
    q, k, v = make_inputs(cp, (2, 3, 197, 64), (2, 3, 301, 64), np.float16, seed=11)
    do = make_inputs(cp, (2, 3, 197, 64), (2, 3, 1, 64), np.float16, seed=12)[0]
    out, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)
    det = cuflash.attention_backward(do, res)
    fast = cuflash.attention_backward(do, res, deterministic=False)
    if device_arch() == "sm_90":
        for a, b in zip(det, fast):
            assert cp.array_equal(a, b)
        return
    qn, kn, vn, don = (to_numpy(x) for x in (q, k, v, do))
    refs = oracle_backward(don, qn, kn, vn, causal=True)
    naive = cuflash.naive_attention_backward(do, q, k, v, causal=True)
    for name, g, r, n in zip("qkv", fast, refs, naive):
        assert_matches_oracle(g, r, n, dtype=np.float16, name=f"d{name} (det=False)")


def test_batch_beyond_grid_limit(cp):
    """More than 65535 heads: the launcher splits the batch over several grids (65535 + 4465
    heads); every head of every launch chunk is checked against the oracle (outputs start as
    NaN), forward and backward."""
    B = 70000
    q, k, v = make_inputs(cp, (B, 3, 16), (B, 5, 16), np.float16, seed=2)
    do = make_inputs(cp, (B, 3, 16), (B, 5, 16), np.float16, seed=3)[0]
    out, lse = cuflash.attention(q, k, v, return_lse=True)
    qn, kn, vn, don = (to_numpy(x) for x in (q, k, v, do))
    ref, ref_lse = oracle_attention(qn, kn, vn)
    naive_out, naive_lse = cuflash.naive_attention(qn, kn, vn, return_lse=True)
    assert_matches_oracle(out, ref, naive_out, dtype=np.float16, name="out")
    assert_matches_oracle(lse, ref_lse, naive_lse, dtype=np.float16, name="lse")
    err = np.abs(to_numpy(out).astype(np.float64) - ref).max(axis=(1, 2))
    assert np.isfinite(err).all() and err.max() < 4e-3, \
        f"heads {np.flatnonzero(~(err < 4e-3))[:5].tolist()} wrong (chunks start at 0 and 65535)"
    refs = oracle_backward(don, qn, kn, vn)
    naive = cuflash.naive_attention_backward(don, qn, kn, vn)
    for det in (True, False):
        grads = cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out, lse),
                                           deterministic=det)
        for name, g, r, n in zip(("dq", "dk", "dv"), grads, refs, naive):
            assert_matches_oracle(g, r, n, dtype=np.float16, name=f"{name} (det={det})",
                                  floor_scale=grad_scale(*refs))


def test_misaligned_and_strided_inputs(cp):
    """A data pointer that is not 16-byte aligned, and a strided view, give the same result."""
    B, T, d = 2, 33, 64
    base = cp.asarray(np.random.default_rng(3).standard_normal(B * T * d + 1).astype(np.float16))
    q = base[1:].reshape(B, T, d)        # offset by 2 bytes
    assert q.data.ptr % 16 != 0
    big = cp.asarray(np.random.default_rng(4).standard_normal((B, 2 * T, d)).astype(np.float16))
    k = big[:, ::2]                      # strided view
    v = big[:, 1::2]
    out = cuflash.attention(q, k, v, causal=True)
    ref = cuflash.attention(q.copy(), cp.ascontiguousarray(k), cp.ascontiguousarray(v), causal=True)
    assert np.array_equal(to_numpy(out), to_numpy(ref))


def test_new_thread_launches(cp):
    """A thread whose first CUDA call is cuflash's (forward, then backward: launches that go
    straight to cuLaunchKernel, which needs a current context, ops.bind_context) gets what the
    main thread gets, bit for bit."""
    import threading
    q, k, v = make_inputs(cp, (2, 97, 64), (2, 131, 64), np.float16, seed=8)
    do = make_inputs(cp, (2, 97, 64), (2, 131, 64), np.float16, seed=9)[0]

    def run():
        out, lse = cuflash.attention(q, k, v, causal=True, return_lse=True)
        return out, cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out, lse))

    want = run()
    cp.cuda.Device().synchronize()
    got, errors = [], []

    def work():
        try:
            got.append(run())
            cp.cuda.get_current_stream().synchronize()
        except Exception as exc:   # reported below
            errors.append(exc)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    (out, grads), (want_out, want_grads) = got[0], want
    assert np.array_equal(to_numpy(out), to_numpy(want_out))
    for a, b in zip(grads, want_grads):
        assert np.array_equal(to_numpy(a), to_numpy(b))


_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}"""


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_runs_on_current_stream(cp, backward):
    """The kernels run on CuPy's current stream. On a non-blocking stream: a kernel that spins
    ~0.5 s, then new values copied into q, then the call. Launched on the current stream, the call
    waits for the copy and sees the new q; launched on any other stream it would run at once on
    the old q (non-blocking streams do not synchronize with the null stream), and differ."""
    q_old, k, v = make_inputs(cp, (4, 512, 64), (4, 512, 64), np.float16, seed=6)
    q_new, do = make_inputs(cp, (4, 512, 64), (4, 512, 64), np.float16, seed=7)[:2]
    out_new, lse_new = cuflash.attention(q_new, k, v, return_lse=True)
    want = to_numpy(cuflash.attention_backward(
        do, cuflash.Residuals(q_new, k, v, out_new, lse_new))[0]
                    if backward else out_new)
    q = q_old.copy()
    cp.cuda.Device().synchronize()
    spin = cp.RawKernel(_SPIN, "spin")
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        spin((1,), (1,), (np.int64(10**9),))        # ~0.5 s at the H200's ~2 GHz
        q[...] = q_new
        if backward:   # out/lse of the new q, so only q's timing can make a difference
            got = cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out_new, lse_new))[0]
        else:
            got = cuflash.attention(q, k, v)
    stream.synchronize()
    assert np.array_equal(to_numpy(got), want)


@pytest.mark.parametrize("dtype", ALL_DTYPES[:1] + ALL_DTYPES[2:3], ids=["f16", "f32"])
def test_flash_memory_is_linear_in_T(cp, dtype):
    """Peak device memory above the inputs grows ~4× when T grows 4× (naive would grow ~16×)."""
    peaks = {}
    for T in (2048, 8192):
        q, k, v = make_inputs(cp, (4, T, 64), (4, T, 64), dtype, seed=T)
        do = make_inputs(cp, (4, T, 64), (4, T, 64), dtype, seed=T + 1)[0]
        out, lse = cuflash.attention(q, k, v, return_lse=True)       # compile outside the tracker
        cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out, lse))
        cp.cuda.Device().synchronize()
        with PeakTracker(cp) as fwd:
            out2 = cuflash.attention(q, k, v)
        del out2
        with PeakTracker(cp) as bwd:
            grads = cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out, lse))
        del grads
        peaks[T] = (fwd.above, bwd.above)
    for i, name in enumerate(("forward", "backward")):
        ratio = peaks[8192][i] / peaks[2048][i]
        assert ratio <= 4.5, f"{name}: peak memory grew {ratio:.1f}× for 4× T ({peaks})"
