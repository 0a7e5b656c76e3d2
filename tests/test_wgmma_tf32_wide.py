"""float32's 'tf32' forward on Hopper's warpgroup tensor cores at wide heads (issue 15: 'tf32' at
d = 256 ran 1.86-2.52x torch's efficient float32 kernel on mma.sync, the bar is 5x; NOTES v46,
v47): the 4-warp kernel of flash_fwd_wgmma_tf32.cu with 32-key tiles above
tile.WGMMA_TF32_MAX_D, opt-in (tile.wgmma_tf32_wide_tiles; never a default until measured). The
plan's rules and the compile without a GPU; the kernel against the float64 oracle beside naive
with TF32 products (gpu-marked; test_tf32's _check_kernel)."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash.gpu import build, plan
from cuflash.tile import (WGMMA_TF32_MAX_D, WGMMA_TF32_WIDE_D, default_tile,
                          wgmma_tf32_wide_tiles)

from helpers import (  # noqa: F401 (poison_gpu_outputs: autouse fixture)
    poison_gpu_outputs, case_seed, make_inputs, skip_unless_tile_fits)
from test_tf32 import _check_kernel

WIDE = TileConfig(64, 32, 4, 2, "wgmma_tf32")
VARIANTS = (plan.Variant("dense"), plan.Variant("causal"),
            plan.Variant("window", softcap=True, alibi=True))


def test_wide_tiles_and_plan():
    smem = plan.SMEM_LIMIT["sm_90"]
    for d, pad in ((129, 192), (160, 192), (192, 192), (193, 256), (256, 256)):
        assert wgmma_tf32_wide_tiles(d) == [WIDE]
        for variant in VARIANTS:
            (spec,) = plan.specs_for("float32", d, WIDE, variant, False)
            plan.validate(spec, smem, "sm_90")
            assert spec.head_dim == pad and spec.arch == "sm_90a"
    for d in (WGMMA_TF32_MAX_D, WGMMA_TF32_WIDE_D + 1):
        with pytest.raises(ValueError, match="wide TF32 wgmma tiles take head dims"):
            wgmma_tf32_wide_tiles(d)
    # 'tf32''s default above d = 128 where the caller's batch is dense and long enough
    # (staged: tile.wgmma_tf32_pays, from WGMMA_TF32_WIDE_MIN_KEYS keys); mma.sync otherwise
    for d in (160, 256):
        for causal in (False, True):
            for staged in (False, True):
                t = default_tile(d, "float32", causal=causal, precision="tf32", arch="sm_90",
                                 smem_limit=smem, staged=staged)
                assert t == (WIDE if staged else t) and (staged or t.kernel == "tf32"), \
                    (d, causal, staged, t)


@pytest.mark.parametrize("tile,d,match", [
    (TileConfig(128, 64, 12, 2, "wgmma_tf32"), 256, "key tiles of 32"),
    (TileConfig(64, 64, 4, 2, "wgmma_tf32"), 192, "key tiles of 32"),
    (WIDE, 288, f"head dims up to {WGMMA_TF32_WIDE_D}"),
    (TileConfig(64, 32, 4, 3, "wgmma_tf32"), 256, "shared memory"),
])
def test_validate_names_the_problem(tile, d, match):
    with pytest.raises(ValueError, match=match):
        for spec in plan.specs_for("float32", d, tile, False, False):
            plan.validate(spec, plan.SMEM_LIMIT["sm_90"], "sm_90")


def test_wide_kernels_compile_without_spills():
    """NVRTC, no GPU: d = 192 and 256, dense, causal and with every modifier, no spill and no
    wgmma serialized by ptxas, within sm_90's shared memory."""
    for d in (192, 256):
        for variant in VARIANTS:
            (spec,) = plan.specs_for("float32", d, WIDE, variant, False)
            assert spec.smem_bytes() <= plan.SMEM_LIMIT["sm_90"]
            r = build.compile_offline(build.source(spec), spec.name, spec.arch, spec.smem_bytes())
            assert r.spills == 0 and not r.serialized, (spec.name, r)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T,S,d", [(97, 257, 256), (257, 97, 150), (300, 300, 192),
                                   (1, 77, 200), (130, 130, 129)])
def test_wide_tile_against_oracle(cp, causal, T, S, d):
    """Within the criterion of naive with TF32 products (out and lse), odd shapes, T != S, the
    head dim padded to 192 or 256."""
    skip_unless_tile_fits(WIDE, d, np.float32)
    q, k, v = make_inputs(cp, (2, 3, T, d), (2, 3, S, d), np.float32,
                          seed=case_seed("wgtf32wide", causal, T, S, d))
    out, lse = cuflash.attention(q, k, v, causal=causal, tile=WIDE, return_lse=True)
    _check_kernel(cp, out, lse, q, k, v, "tf32", name=WIDE.short(), causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("opts", [dict(window=(40, 7)), dict(softcap=5.0),
                                  dict(causal=True, softcap=3.0, alibi="slopes")],
                         ids=["window", "softcap", "causal-softcap-alibi"])
def test_wide_tile_variants_and_gqa(cp, opts):
    skip_unless_tile_fits(WIDE, 256, np.float32)
    q, _, _ = make_inputs(cp, (2, 4, 150, 256), (2, 4, 1, 256), np.float32,
                          seed=case_seed("wgtf32widev", sorted(opts)))
    _, k, v = make_inputs(cp, (2, 2, 1, 256), (2, 2, 203, 256), np.float32,
                          seed=case_seed("wgtf32widekv", sorted(opts)))
    opts = dict(opts)
    if opts.get("alibi"):
        del opts["alibi"]
        opts["alibi_slopes"] = cp.asarray(np.linspace(0.05, 0.5, 4), dtype=cp.float32)
    out, lse = cuflash.attention(q, k, v, tile=WIDE, return_lse=True, **opts)
    _check_kernel(cp, out, lse, q, k, v, "tf32", name="wide GQA", **opts)


def test_wide_staging_compiles():
    """The staging kernel of wide heads (tf32_stage.cuh at TF32_STAGE_WIDE_D) compiles; its shared
    rows stay within the static limit."""
    r = build.compile_offline(build.tf32_stage_source(build.TF32_STAGE_WIDE_D),
                              build.tf32_stage_name(build.TF32_STAGE_WIDE_D), "sm_90")
    assert r.spills == 0 and r.smem_static <= 48 * 1024, r
    assert build.tf32_stage_name() == build.TF32_STAGE_NAME   # the narrow one keeps its name


@pytest.mark.gpu
@pytest.mark.parametrize("S,block_n,D", [(37, 32, 256), (129, 32, 192)])
def test_wide_staging_matches_the_rule(cp, S, block_n, D):
    """The wide staging kernel gives tf32_stage.staged's arrays bit for bit (NaN-poisoned
    outputs), from k and v with broadcast rows."""
    from cuflash.gpu import ops, tf32_stage
    k = cp.asarray(np.random.default_rng(S).standard_normal((2, 3, S, D)).astype(np.float32))
    v = cp.broadcast_to(cp.asarray(np.random.default_rng(S + 1).standard_normal(
        (1, 3, S, D)).astype(np.float32)), (2, 3, S, D))
    got = tf32_stage.staged_run(ops._Run(k, k, v, 2, 3, 1, S, S), block_n)
    want_k, want_v = tf32_stage.staged(k, v, block_n, cp)
    cp.testing.assert_array_equal(got.k, want_k)
    cp.testing.assert_array_equal(got.v, want_v)


@pytest.mark.gpu
def test_wide_default_where_it_pays(cp):
    """precision='tf32' with tile=None at d = 256: from WGMMA_TF32_WIDE_MIN_KEYS keys a dense
    batch in one pass runs the wide tile (its bits, and the criterion), one key fewer the
    mma.sync kernel (its bits)."""
    from cuflash.tile import WGMMA_TF32_WIDE_MIN_KEYS
    skip_unless_tile_fits(WIDE, 256, np.float32)
    n = WGMMA_TF32_WIDE_MIN_KEYS
    q, k, v = make_inputs(cp, (1, 1, 300, 256), (1, 1, n, 256), np.float32, seed=71)
    out, lse = cuflash.attention(q, k, v, precision="tf32", return_lse=True)
    cp.testing.assert_array_equal(out, cuflash.attention(q, k, v, tile=WIDE))
    _check_kernel(cp, out, lse, q, k, v, "tf32", name="wide default")
    mma = default_tile(256, "float32", precision="tf32")
    short = [x[:, :, :n - 1] for x in (k, v)]
    cp.testing.assert_array_equal(cuflash.attention(q, *short, precision="tf32"),
                                  cuflash.attention(q, *short, tile=mma))
