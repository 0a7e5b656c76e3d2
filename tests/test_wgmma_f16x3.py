"""float32's 'highest' as three float16 products on Hopper's 16-bit warpgroup tensor cores (issue
15; kernel='wgmma_f16x3': 'highest''s default on sm_90 for dense batches from
tile.WGMMA_F16X3_MIN_KEYS keys, tile.float32_wgmma_pays): the forward (kernels_cu/flash_fwd_wgmma_x3.cu,
NOTES.md v44-v45, tools/split_study.py) and the backward's deterministic pair (64-query tiles at
d <= 64, 32-query tiles up to d = 128: flash_bwd_wgmma_x3.cu, NOTES v46, v54,
tools/split_study_bwd.py). The plan's rules, the kernels
compiled without a GPU, and the kernels against the float64 oracle beside naive float32
(gpu-marked; the library's criterion, test_tf32's _check_kernel and _check_grads with precision
'highest')."""
import itertools

import numpy as np
import pytest

import cuflash
from cuflash import TileConfig, precision
from cuflash._xp import to_numpy
from cuflash.gpu import build, plan
from cuflash.tile import (F16_SPLIT, WGMMA_F16X3_BWD_MAX_D, WGMMA_F16X3_MAX_D,
                          WGMMA_F16X3_MIN_KEYS, default_backward, default_tile, float32_wgmma_pays, wgmma_f16x3_pays,
                          wgmma_f16x3_tiles)

from helpers import (  # noqa: F401 (poison_gpu_outputs: autouse fixture)
    poison_gpu_outputs, assert_matches_oracle, case_seed, gqa_strided_inputs, make_inputs,
    score_variants, skip_unless_tile_fits)
from test_tf32 import _check_grads, _check_kernel, _check_tile_backward

X3_TILES = wgmma_f16x3_tiles(64)
X3 = X3_TILES[0]
#: the backward's tiles: the warp-specialized dK/dV shape (its dQ kernel takes it transposed)
X3B_TILES = wgmma_f16x3_tiles(64, backward=True)
X3B = X3B_TILES[0]
X3B128 = wgmma_f16x3_tiles(128, backward=True)[0]   # 64 < d <= 128: 32-query tiles


# -- the plan ------------------------------------------------------------------------------------

def test_family_and_plan():
    assert precision.of_family("wgmma_f16x3") == "highest" and X3.warp_specialized
    smem = plan.SMEM_LIMIT["sm_90"]
    for d in (16, 40, 64, 100, 128):
        for tile in X3_TILES:
            for variant in (plan.Variant("dense"), plan.Variant("causal"),
                            plan.Variant("window", softcap=True, alibi=True)):
                (spec,) = plan.specs_for("float32", d, tile, variant, False)
                plan.validate(spec, smem, "sm_90")
                assert spec.arch == "sm_90a" and spec.head_dim % 64 == 0
                assert build.kernel_type(spec).startswith(
                    f"cuflash::FwdWgmmaX3<float, {spec.head_dim}, 128, {tile.block_n}, 384, 2, ")
    assert X3_TILES == [TileConfig(128, 64, 12, 2, "wgmma_f16x3"),
                        TileConfig(128, 32, 12, 2, "wgmma_f16x3")]
    assert X3B_TILES == [TileConfig(64, 128, 12, s, "wgmma_f16x3") for s in (2, 3)]
    assert wgmma_f16x3_tiles(65, backward=True) == [TileConfig(32, 128, 12, 2, "wgmma_f16x3")]
    assert X3B128 == wgmma_f16x3_tiles(WGMMA_F16X3_BWD_MAX_D, backward=True)[0]
    assert wgmma_f16x3_tiles(WGMMA_F16X3_MAX_D + 1) == []
    assert wgmma_f16x3_tiles(WGMMA_F16X3_BWD_MAX_D + 1, backward=True) == []


def test_highest_default_where_it_pays():
    """'highest''s default on sm_90 where the caller says its batch is dense (staged: the API
    says so where tile.float32_wgmma_pays): the x3 forward up to d = 128, the x3 pair up to
    d = 64 (deterministic, even when deterministic=False is asked); elsewhere, on other GPUs
    and for 'tf32' / 'ieee' the kernels before it."""
    for d in (16, 64, 96, 128, 160, 256):
        for staged in (False, True):
            for arch in ("sm_90", "sm_80"):
                smem = plan.SMEM_LIMIT[arch]
                fwd = default_tile(d, "float32", arch=arch, smem_limit=smem, staged=staged)
                bwd, det = default_backward(d, "float32", arch=arch, smem_limit=smem,
                                            staged=staged, deterministic=False)
                on = staged and arch == "sm_90"
                if on and d <= WGMMA_F16X3_MAX_D:
                    assert fwd == X3, (d, arch)
                else:
                    assert fwd.kernel != "wgmma_f16x3", (d, staged, arch)
                if on and d <= WGMMA_F16X3_BWD_MAX_D:
                    assert (bwd, det) == (wgmma_f16x3_tiles(d, True)[0], True), (d, arch)
                else:
                    assert bwd.kernel != "wgmma_f16x3", (d, staged, arch)
                for prec in ("tf32", "ieee"):
                    t = default_tile(d, "float32", arch=arch, smem_limit=smem, staged=staged,
                                     precision=prec)
                    assert t.kernel != "wgmma_f16x3", (d, prec)
    n = WGMMA_F16X3_MIN_KEYS
    assert wgmma_f16x3_pays(128, n) and not wgmma_f16x3_pays(128, n - 1)
    assert not wgmma_f16x3_pays(WGMMA_F16X3_MAX_D + 1, 10**6)
    assert wgmma_f16x3_pays(64, n, backward=True)
    assert wgmma_f16x3_pays(WGMMA_F16X3_BWD_MAX_D, n, backward=True)
    assert not wgmma_f16x3_pays(WGMMA_F16X3_BWD_MAX_D + 1, n, backward=True)
    assert float32_wgmma_pays("highest", 128, n) and not float32_wgmma_pays("ieee", 64, n)
    assert float32_wgmma_pays("tf32", 64, n, backward=True)   # the x1 pair: test_wgmma_f16x1.py
    assert float32_wgmma_pays("tf32", 128, 1) == float32_wgmma_pays("tf32", 128, 1, False)


def test_api_asks_for_x3_only_for_dense_batches(monkeypatch):
    """The API's side of the rule: attention and attention_backward say their batch is dense
    (attention: in one pass, num_splits=1), attention_varlen and split-KV do not; the key count
    decides (WGMMA_F16X3_MIN_KEYS). Checked on a device the API is told about (sm_90's shared
    memory), with NumPy arrays: no GPU needed."""
    from cuflash import api, checks
    monkeypatch.setattr(api, "_device",
                        lambda p: (p.kernel_d,
                                   dict(smem_limit=plan.SMEM_LIMIT["sm_90"], arch="sm_90")))
    n = WGMMA_F16X3_MIN_KEYS
    for d, S in ((64, n), (128, n), (64, n - 1), (160, n)):
        q = np.zeros((1, 2, 8, d), np.float32)
        k = np.zeros((1, 2, S, d), np.float32)
        p = checks.check_qkv(q, k, k, causal=False, scale=None)
        fwd, prec = api._forward_tile(p, None, None, dense=True)
        assert prec == "highest"
        assert (fwd == X3) == (S >= n and d <= WGMMA_F16X3_MAX_D), (d, S, fwd)
        assert api._forward_tile(p, None, None, dense=False)[0].kernel != "wgmma_f16x3"
        bwd, det, _ = api._backward_choice(p, None, True, None, dense=True)
        x3b = wgmma_f16x3_tiles(d, backward=True)[:1]
        assert [bwd] == x3b if S >= n and d <= WGMMA_F16X3_BWD_MAX_D else bwd.kernel != \
            "wgmma_f16x3", (d, S, bwd)
        assert api._backward_choice(p, None, True, None)[0].kernel != "wgmma_f16x3"


@pytest.mark.parametrize("dtype,backward,match", [
    ("float16", False, "float32's forward and backward of precision='highest': float32 inputs "
                       "only, got float16"),
    ("bfloat16", True, "float32's forward and backward of precision='highest': float32 inputs "
                       "only, got bfloat16"),
])
def test_plan_refuses_other_passes(dtype, backward, match):
    with pytest.raises(ValueError, match=match):
        plan.specs_for(dtype, 64, X3, False, backward)


def test_backward_plan():
    """The backward: the deterministic pair, the dQ kernel on the dK/dV tile transposed, every
    mask and modifier, d up to 64, within sm_90's shared memory; a default only where the
    caller's batch is dense (test_highest_default_where_it_pays)."""
    smem = plan.SMEM_LIMIT["sm_90"]
    assert X3B.warp_specialized_dkdv and not X3B.warp_specialized
    for d in (16, 40, 64):
        for tile in X3B_TILES:
            for variant in (plan.Variant("dense"), plan.Variant("causal"),
                            plan.Variant("window", softcap=True, alibi=True)):
                dkdv, dq = plan.specs_for("float32", d, tile, variant, True)
                for spec in (dkdv, dq):
                    plan.validate(spec, smem, "sm_90")
                    assert spec.arch == "sm_90a" and spec.head_dim == 64
                s = tile.num_stages
                assert dq.tile == tile.replace(block_m=128, block_n=64) and dq.warp_specialized
                assert build.kernel_type(dkdv).startswith(
                    f"cuflash::DkdvWgmmaX3<float, 64, 64, 128, 384, {s}, cuflash::Variant<")
                assert build.kernel_type(dq).startswith(
                    f"cuflash::DqWgmmaX3<float, 64, 128, 64, 384, {s}, cuflash::Variant<")
    for d in (80, 128):   # 64 < d <= 128: 32-query tiles, the dQ kernel's keys 32 a tile
        for variant in (plan.Variant("dense"), plan.Variant("causal"),
                        plan.Variant("window", softcap=True, alibi=True)):
            dkdv, dq = plan.specs_for("float32", d, X3B128, variant, True)
            for spec in (dkdv, dq):
                plan.validate(spec, smem, "sm_90")
                assert spec.head_dim == 128
            assert dq.tile == X3B128.replace(block_m=128, block_n=32) and dq.warp_specialized
            assert build.kernel_type(dkdv).startswith(
                "cuflash::DkdvWgmmaX3<float, 128, 32, 128, 384, 2, cuflash::Variant<")
            assert build.kernel_type(dq).startswith(
                "cuflash::DqWgmmaX3<float, 128, 128, 32, 384, 2, cuflash::Variant<")
    from cuflash.tile import default_backward
    for d in (32, 64):
        for causal in (False, True):
            tile, _ = default_backward(d, "float32", causal=causal, arch="sm_90", smem_limit=smem)
            assert tile.kernel != "wgmma_f16x3"


@pytest.mark.parametrize("tile,variant,d,det,match", [
    (X3B, plan.Variant(), 64, False, ": kernel='wgmma_f16x3''s backward computes dQ in its own pass"),
    (X3B128, plan.Variant(), 160, True, f"head dims up to {WGMMA_F16X3_BWD_MAX_D}"),
    (X3B, plan.Variant(), 128, True, "at d = 128 is warp-specialized: block_m = 32"),
    (X3B128, plan.Variant(), 64, True, "at d = 64 is warp-specialized: block_m = 64"),
    (TileConfig(32, 128, 12, 3, "wgmma_f16x3"), plan.Variant(), 128, True, "takes 2 stages"),
    (X3, plan.Variant(), 64, True, "block_m = 64, block_n = 128 on num_warps = 12"),
    (TileConfig(64, 128, 12, 4, "wgmma_f16x3"), plan.Variant(), 64, True, "2 or 3 stages"),
    (X3B, plan.Variant(packed=True), 64, True, "packed batch"),
])
def test_backward_validate_names_the_problem(tile, variant, d, det, match):
    with pytest.raises(ValueError, match=match):
        for spec in plan.specs_for("float32", d, tile, variant, True, det):
            plan.validate(spec, plan.SMEM_LIMIT["sm_90"], "sm_90")


@pytest.mark.parametrize("tile,variant,d,match", [
    (TileConfig(128, 64, 12, 3, "wgmma_f16x3"), plan.Variant(), 64, "num_stages = 2"),
    (TileConfig(128, 128, 12, 2, "wgmma_f16x3"), plan.Variant(), 64, "block_n = 32 or 64"),
    (TileConfig(128, 64, 8, 2, "wgmma_f16x3"), plan.Variant(), 64, "is warp-specialized"),
    (X3, plan.Variant(packed=True), 64, "packed batch"),
    (X3, plan.Variant(split=True), 64, "split-KV"),
    (X3, plan.Variant(cache="cache"), 64, "KV cache"),
    (X3, plan.Variant(), 192, f"head dims up to {WGMMA_F16X3_MAX_D}"),
])
def test_validate_names_the_problem(tile, variant, d, match):
    (spec,) = plan.specs_for("float32", d, tile, variant, False)
    with pytest.raises(ValueError, match=match):
        plan.validate(spec, plan.SMEM_LIMIT["sm_90"], "sm_90")
    with pytest.raises(ValueError, match="runs only on sm_90"):
        plan.validate(plan.specs_for("float32", 64, X3, False, False)[0],
                      plan.SMEM_LIMIT["sm_80"], "sm_80")


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("kernel", list(F16_SPLIT))
def test_kernels_compile_without_spills(kernel, backward):
    """NVRTC, no GPU: each float16-product family's first forward tile and backward pair
    (tile.F16_SPLIT: 'wgmma_f16x3', 'wgmma_f16x1') at d = 64 and 128, dense, causal and with
    every modifier, compile for sm_90a with no spill and no wgmma serialized by ptxas, within
    the shared memory of sm_90."""
    for variant, d in itertools.product((plan.Variant("dense"), plan.Variant("causal"),
                                         plan.Variant("window", softcap=True, alibi=True)),
                                        (64, 128)):
        tile = wgmma_f16x3_tiles(d, backward, kernel)[0]
        for spec in plan.specs_for("float32", d, tile, variant, backward):
            assert spec.smem_bytes() <= plan.SMEM_LIMIT["sm_90"]
            r = build.compile_offline(build.source(spec), spec.name, spec.arch, spec.smem_bytes())
            assert r.spills == 0 and not r.serialized, (spec.name, r)


# -- the kernels ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("tile", X3_TILES + wgmma_f16x3_tiles(64, num_warps=8),
                         ids=lambda t: t.short())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T,S,d", [(97, 257, 64), (257, 97, 128), (1000, 1000, 40), (17, 1, 96),
                                   (1, 77, 16), (300, 300, 128)])
def test_wgmma_f16x3_against_oracle(cp, tile, causal, T, S, d):
    """Within 2x naive float32's error of the float64 oracle (out and lse), odd shapes, T != S."""
    skip_unless_tile_fits(tile, d, np.float32)
    q, k, v = make_inputs(cp, (2, 3, T, d), (2, 3, S, d), np.float32,
                          seed=case_seed("wgf16x3", tile, causal, T, S, d))
    out, lse = cuflash.attention(q, k, v, causal=causal, tile=tile, return_lse=True)
    _check_kernel(cp, out, lse, q, k, v, "highest", name=tile.short(), causal=causal)
    again = cuflash.attention(q, k, v, causal=causal, tile=tile, precision="highest")
    cp.testing.assert_array_equal(again, out)


@pytest.mark.gpu
@pytest.mark.parametrize("qs,ks,vs", [(1e-6, 1e6, 1e5), (1.0, 1.0, 1.0), (1e3, 1e-3, 1e-6)],
                         ids=["q-tiny-k-huge", "unit", "q-huge-v-tiny"])
def test_wgmma_f16x3_scales_into_range(cp, qs, ks, vs):
    """Operands far outside float16's range (q at 1e-6 is below its normal numbers, k at 1e6 and
    v at 1e5 above its largest, 65504; the scores stay O(1)) and rows of unequal size are scaled
    into it by powers of two: the criterion holds as for unit inputs."""
    skip_unless_tile_fits(X3, 128, np.float32)
    q, k, v = make_inputs(cp, (1, 4, 200, 128), (1, 4, 333, 128), np.float32,
                          seed=case_seed("wgf16x3s", qs, ks, vs))
    rows = cp.asarray(np.geomspace(0.25, 4.0, 200).astype(np.float32))[:, None]
    q, k, v = q * rows * np.float32(qs), k * np.float32(ks), v * np.float32(vs)
    out, lse = cuflash.attention(q, k, v, tile=X3, return_lse=True)
    _check_kernel(cp, out, lse, q, k, v, "highest", name=f"q x{qs} k x{ks} v x{vs}")


@pytest.mark.gpu
@pytest.mark.parametrize("opts", [dict(window=(40, 7)), dict(softcap=5.0),
                                  dict(causal=True, window=(30, None)), dict(alibi="slopes"),
                                  dict(causal=True, softcap=3.0, alibi="slopes")],
                         ids=["window", "softcap", "causal-window", "alibi",
                              "causal-softcap-alibi"])
def test_wgmma_f16x3_variants_and_gqa(cp, opts):
    skip_unless_tile_fits(X3, 128, np.float32)
    q, _, _ = make_inputs(cp, (2, 8, 150, 128), (2, 8, 1, 128), np.float32,
                          seed=case_seed("wgf16x3v", sorted(opts)))
    _, kv, _ = make_inputs(cp, (2, 2, 1, 128), (2, 2, 203, 256), np.float32,
                           seed=case_seed("wgf16x3kv", sorted(opts)))
    k, v = kv[..., :128], kv[..., 128:]   # strided views
    opts = dict(opts)
    if opts.get("alibi"):
        del opts["alibi"]
        opts["alibi_slopes"] = cp.asarray(np.linspace(0.05, 0.5, 8), dtype=cp.float32)
    out, lse = cuflash.attention(q, k, v, tile=X3, return_lse=True, **opts)
    _check_kernel(cp, out, lse, q, k, v, "highest", name="wgmma_f16x3 GQA", **opts)


@pytest.mark.gpu
def test_wgmma_f16x3_matches_the_mma_kernel(cp):
    """The same precision on two kernels ('tf32x3' by mma.sync, this one): both float32-accurate,
    so they agree to a few float32 roundings of out's largest value."""
    skip_unless_tile_fits(X3, 128, np.float32)
    q, k, v = make_inputs(cp, (1, 4, 512, 128), (1, 4, 512, 128), np.float32, seed=61)
    a = to_numpy(cuflash.attention(q, k, v, tile=X3))
    mma = default_tile(128, "float32", precision="highest")
    assert mma.kernel == "tf32x3"
    b = to_numpy(cuflash.attention(q, k, v, tile=mma))
    scale = np.abs(b).max()
    assert np.abs(a - b).max() <= 3e-6 * scale, np.abs(a - b).max() / scale


@pytest.mark.gpu
def test_wgmma_f16x3_refuses_what_it_does_not_run(cp):
    skip_unless_tile_fits(X3, 64, np.float32)
    q, k, v = make_inputs(cp, (1, 2, 64, 64), (1, 2, 64, 64), np.float32, seed=62)
    with pytest.raises(ValueError, match="split-KV"):
        cuflash.attention(q, k, v, tile=X3, num_splits=2)
    with pytest.raises(ValueError, match="precision='tf32' does not match"):
        cuflash.attention(q, k, v, tile=X3, precision="tf32")


# -- the backward --------------------------------------------------------------------------------

_X3B_CASES = [(tile, T, S, d) for tile in X3B_TILES
              for T, S, d in [(97, 257, 64), (257, 97, 40), (1000, 1000, 64), (17, 1, 48),
                              (1, 77, 16), (300, 300, 64)]] + \
             [(X3B128, T, S, d) for T, S, d in [(97, 257, 128), (257, 97, 96), (1000, 1000, 128),
                                                (17, 1, 80), (1, 77, 128), (300, 300, 112)]] + \
             [(wgmma_f16x3_tiles(64, True, num_warps=8)[0], T, S, d)   # one consumer, 2 blocks
              for T, S, d in [(97, 257, 64), (1000, 1000, 48)]]


@pytest.mark.gpu
@pytest.mark.parametrize("tile,T,S,d", _X3B_CASES,
                         ids=[f"{t.short()}-{T}-{S}-{d}" for t, T, S, d in _X3B_CASES])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_wgmma_f16x3_backward_against_oracle(cp, tile, causal, T, S, d):
    """dq, dk, dv within the criterion (2x naive float32's error plus the float32 floors) of the
    float64 oracle, odd shapes, T != S; the pair is deterministic: a second call gives its bits."""
    _check_tile_backward(cp, tile, causal, T, S, d, "wgf16x3b")


@pytest.mark.gpu
@pytest.mark.parametrize("qs,ks,vs,ds", [(1e-6, 1e6, 1e5, 1e-5), (4.0, 1.0, 1.0, 1.0),
                                         (1e3, 1e-3, 1e-6, 1e4)],
                         ids=["q-tiny-k-huge", "peaky", "q-huge-v-tiny"])
@pytest.mark.parametrize("d", [64, 128])
def test_wgmma_f16x3_backward_scales_into_range(cp, qs, ks, vs, ds, d):
    """Operands and dout far outside float16's range, rows of unequal size (q's rows over
    0.25-4: softmax rows from flat to peaked), scaled into it by powers of two per row: the
    criterion holds as for unit inputs."""
    from cuflash.oracle import oracle_backward
    from helpers import grad_scale
    tile = wgmma_f16x3_tiles(d, backward=True)[0]
    skip_unless_tile_fits(tile, d, np.float32, passes=("bwd",))
    q, k, v = make_inputs(cp, (1, 4, 200, d), (1, 4, 333, d), np.float32,
                          seed=case_seed("wgf16x3bs", qs, ks, vs, d))
    rows = cp.asarray(np.geomspace(0.25, 4.0, 200).astype(np.float32))[:, None]
    q, k, v = q * rows * np.float32(qs), k * np.float32(ks), v * np.float32(vs)
    dout = make_inputs(cp, (1, 4, 200, d), (1, 1, 1, 1), np.float32, seed=7)[0] * np.float32(ds)
    _, res = cuflash.attention(q, k, v, return_residuals=True)
    grads = cuflash.attention_backward(dout, res, tile=tile)
    host = [to_numpy(x) for x in (dout, q, k, v)]
    refs = oracle_backward(*host)
    naive = cuflash.naive_attention_backward(*host)
    for name, g, ref, nv in zip(("dq", "dk", "dv"), grads, refs, naive):
        assert_matches_oracle(g, ref, nv, dtype="float32", floor_scale=grad_scale(*refs),
                              name=f"{name} d={d} q x{qs} k x{ks} v x{vs} dout x{ds}")


@pytest.mark.gpu
@score_variants
@pytest.mark.parametrize("d", [64, 128])
def test_wgmma_f16x3_backward_variants_and_gqa(cp, opts, d):
    """Every score variant under GQA (2 kv heads for 8 query heads: the dK/dV kernel sums each
    group), k and v strided views."""
    tile = wgmma_f16x3_tiles(d, backward=True)[0]
    skip_unless_tile_fits(tile, d, np.float32, passes=("bwd",))
    q, k, v, opts = gqa_strided_inputs(cp, d, np.float32, "wgf16x3b", opts)
    _check_grads(cp, q, k, v, "highest", name=f"wgmma_f16x3 d={d} GQA {sorted(opts)}", tile=tile,
                 **opts)


@pytest.mark.gpu
def test_wgmma_f16x3_backward_matches_the_mma_pair(cp):
    """The same precision on two backward pairs ('tf32x3' by mma.sync, this one): both
    float32-accurate, so they agree to a few float32 roundings of each gradient's largest value."""
    skip_unless_tile_fits(X3B, 64, np.float32, passes=("bwd",))
    q, k, v = make_inputs(cp, (1, 4, 512, 64), (1, 4, 512, 64), np.float32, seed=63)
    dout = make_inputs(cp, (1, 4, 512, 64), (1, 1, 1, 1), np.float32, seed=64)[0]
    _, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)
    a = [to_numpy(g) for g in cuflash.attention_backward(dout, res, tile=X3B)]
    b = [to_numpy(g) for g in cuflash.attention_backward(dout, res, precision="highest")]
    for name, x, y in zip(("dq", "dk", "dv"), a, b):
        scale = np.abs(y).max()
        assert np.abs(x - y).max() <= 1e-5 * scale, (name, np.abs(x - y).max() / scale)


@pytest.mark.gpu
def test_wgmma_f16x3_backward_refuses_what_it_does_not_run(cp):
    skip_unless_tile_fits(X3B, 64, np.float32, passes=("bwd",))
    q, k, v = make_inputs(cp, (1, 2, 64, 160), (1, 2, 64, 160), np.float32, seed=65)
    _, res = cuflash.attention(q, k, v, return_residuals=True)
    with pytest.raises(ValueError, match=f"head dims up to {WGMMA_F16X3_BWD_MAX_D}"):
        cuflash.attention_backward(q, res, tile=X3B128)
    q, k, v = (x[..., :128].copy() for x in (q, k, v))
    _, res = cuflash.attention(q, k, v, return_residuals=True)
    with pytest.raises(ValueError, match="at d = 128 is warp-specialized: block_m = 32"):
        cuflash.attention_backward(q, res, tile=X3B)
    q, k, v = (x[..., :64].copy() for x in (q, k, v))
    _, res = cuflash.attention(q, k, v, return_residuals=True)
    with pytest.raises(ValueError, match="computes dQ in its own pass"):
        cuflash.attention_backward(q, res, tile=X3B, deterministic=False)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, WGMMA_F16X3_BWD_MAX_D])
def test_highest_default_takes_x3_where_it_pays(cp, d):
    """precision='highest' (float32's default) with tile=None: on sm_90 a dense batch in one pass
    from WGMMA_F16X3_MIN_KEYS keys runs the x3 forward (the same bits as its tile named) and the
    x3 backward pair (64-query tiles at d = 64, 32-query tiles at d = 128); one key fewer,
    automatic split-KV and a packed batch run the mma.sync kernels (their bits)."""
    x3b = wgmma_f16x3_tiles(d, backward=True)[0]
    skip_unless_tile_fits(X3, d, np.float32)
    skip_unless_tile_fits(x3b, d, np.float32, passes=("bwd",))
    mma = default_tile(d, "float32", precision="highest")
    mma_b, _ = default_backward(d, "float32", precision="highest")
    n = WGMMA_F16X3_MIN_KEYS
    q, k, v = make_inputs(cp, (1, 2, n, d), (1, 2, n, d), np.float32, seed=66)
    dout = make_inputs(cp, (1, 2, n, d), (1, 1, 1, 1), np.float32, seed=67)[0]
    got, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)
    cp.testing.assert_array_equal(got, cuflash.attention(q, k, v, tile=X3, causal=True))
    assert not bool(cp.array_equal(got, cuflash.attention(q, k, v, tile=mma, causal=True)))
    for a, b in zip(cuflash.attention_backward(dout, res),
                    cuflash.attention_backward(dout, res, tile=x3b)):
        cp.testing.assert_array_equal(a, b)
    short = [x[:, :, :n - 1] for x in (q, k, v)]     # one key below: the mma.sync kernels
    out, res = cuflash.attention(*short, return_residuals=True)
    cp.testing.assert_array_equal(out, cuflash.attention(*short, tile=mma))
    for a, b in zip(cuflash.attention_backward(dout[:, :, :n - 1], res),
                    cuflash.attention_backward(dout[:, :, :n - 1], res, tile=mma_b)):
        cp.testing.assert_array_equal(a, b)
    cp.testing.assert_array_equal(cuflash.attention(q, k, v, num_splits=None),
                                  cuflash.attention(q, k, v, tile=mma, num_splits=None))
    cu = cp.asarray([0, n], dtype=cp.int32)
    packed = [x[0].transpose(1, 0, 2).copy() for x in (q, k, v)]   # (T, heads, d)
    cp.testing.assert_array_equal(
        cuflash.attention_varlen(*packed, cu, cu, max_seqlen_q=n, max_seqlen_k=n),
        cuflash.attention_varlen(*packed, cu, cu, max_seqlen_q=n, max_seqlen_k=n, tile=mma))
