"""float32 on TF32 tensor cores (issue 15): ``precision='tf32'`` (one product of TF32-rounded
operands) and ``'highest'`` (3xTF32) in cuflash.precision, the CPU twin, naive attention, the
API's checks, the kernel plan, and the kernels (flash_fwd_mma.cu with Tf32Products, gpu-marked).

The criterion is the library's: error against the float64 oracle <= 2x naive's in the same
precision (naive float32 for 'highest', naive with TF32 products for 'tf32'). And 'highest' must
be clearly better than 'tf32', so a kernel that runs one product where three were asked fails."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig, precision
from cuflash._xp import to_numpy
from cuflash.gpu import build, plan
from cuflash.oracle import normwise_error, oracle_attention, rel_error
from cuflash.tile import default_tile, tf32_tiles

from helpers import (  # poison_gpu_outputs: autouse fixture
    poison_gpu_outputs, assert_matches_oracle, case_seed, make_inputs, skip_unless_tile_fits)

F32 = np.float32


# -- the roundings ------------------------------------------------------------------------------

def test_tf32_rounds_to_nearest_ties_away():
    one = F32(1.0)
    ulp = F32(2.0 ** -10)   # TF32's ulp at 1
    x = np.array([1 + 2.0 ** -11, 1 + 2.0 ** -12, 1 + 3 * 2.0 ** -12, -(1 + 2.0 ** -11), 0.0,
                  3.0e-39], dtype=F32)
    got = precision.tf32(x)
    assert got[0] == one + ulp            # a tie: away from zero
    assert got[1] == one                  # below half an ulp: down
    assert got[2] == one + ulp            # above half: up
    assert got[3] == -(one + ulp)         # ties away from zero for negatives too
    assert got[4] == 0
    bits = got.view(np.uint32)
    assert not (bits & np.uint32(0x1FFF)).any(), "TF32 keeps 10 mantissa bits: low 13 bits zero"


def test_tf32_keeps_nans_and_infinities():
    """A NaN whose payload lies only in the 13 dropped bits rounded to an infinity (the bits
    plus 0x1000, masked); cvt.rna.tf32.f32 keeps a NaN a NaN."""
    bits = np.array([0x7F800001, 0xFF800100, 0x7FC00000, 0x7F800000, 0xFF800000], np.uint32)
    got = precision.tf32(bits.view(F32))
    assert np.isnan(got[:3]).all()
    assert got[3] == np.inf and got[4] == -np.inf


def test_split_recovers_float32():
    x = np.random.default_rng(0).standard_normal(10000).astype(F32) * F32(100)
    big, small = precision.split(x)
    for part in (big, small):
        assert not (part.view(np.uint32) & np.uint32(0x1FFF)).any()
    err_split = np.abs((big.astype(np.float64) + small) - x) / np.abs(x)
    err_one = np.abs(big.astype(np.float64) - x) / np.abs(x)
    assert err_split.max() <= 2.0 ** -21          # 22 significant bits kept
    assert err_one.max() > 2.0 ** -12             # one TF32 number keeps 11


def test_matmul_precisions_order():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 128)).astype(F32), rng.standard_normal((128, 48)).astype(F32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    errs = {p: rel_error(precision.matmul(a, b, p), ref) for p in ("ieee", "tf32", "highest")}
    assert errs["highest"] <= 4 * errs["ieee"]
    assert errs["tf32"] >= 100 * errs["highest"]
    with pytest.raises(ValueError, match="precision='bf16'"):
        precision.matmul(a, b, "bf16")


@pytest.mark.parametrize("bad", ["TF32", "fp32", 3, True])
def test_precision_must_be_known(bad):
    q = np.ones((1, 4, 8), F32)
    with pytest.raises(ValueError, match="precision="):
        cuflash.attention(q, q, q, precision=bad)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_precision_is_float32s(dtype):
    q = np.ones((1, 4, 8), dtype)
    with pytest.raises(ValueError, match="applies to float32"):
        cuflash.attention(q, q, q, precision="highest")
    cuflash.attention(q, q, q, precision=None)   # None: the dtype's own


def test_tile_and_precision_must_agree():
    q = np.random.default_rng(2).standard_normal((1, 32, 16)).astype(F32)
    with pytest.raises(ValueError, match="does not match tile"):
        cuflash.attention(q, q, q, tile=TileConfig(64, 32, 4, 2, "tf32"), precision="highest")
    with pytest.raises(ValueError, match="does not match tile"):
        cuflash.attention(q, q, q, tile=TileConfig(64, 64, 4, 1), precision="tf32")
    with pytest.raises(ValueError, match="does not match tile"):
        cuflash.attention(q, q, q, tile=TileConfig(64, 32, 4, 2, "tf32x3"), precision="ieee")
    # 'highest' on a CUDA-core tile (default_tile's choice before sm_80): float32 products
    np.testing.assert_array_equal(
        cuflash.attention(q, q, q, tile=TileConfig(64, 64, 4, 1), precision="highest"),
        cuflash.attention(q, q, q, tile=TileConfig(64, 64, 4, 1), precision="ieee"))
    # a TF32 tile without precision computes its own precision (the twin too)
    a = cuflash.attention(q, q, q, tile=TileConfig(64, 32, 4, 2, "tf32"))
    b = cuflash.attention(q, q, q, tile=TileConfig(64, 32, 4, 2, "tf32"), precision="tf32")
    c = cuflash.attention(q, q, q, tile=TileConfig(64, 32, 4, 2))
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 0   # and not the 'ieee' result


def test_plan_refuses_what_tf32_kernels_cannot_run():
    t = TileConfig(64, 32, 4, 2, "tf32x3")
    with pytest.raises(ValueError, match="float32 inputs only"):
        plan.specs_for("float16", 64, t, False, backward=False)
    with pytest.raises(ValueError, match="float32 inputs only"):
        plan.specs_for("float16", 64, t, False, backward=True)
    with pytest.raises(ValueError, match="sm_80 or later"):
        plan.check_tile(t, 64, "float32", arch="sm_75")
    with pytest.raises(ValueError, match="16 or 32 rows per warp"):
        plan.check_tile(TileConfig(64, 32, 1, 2, "tf32"), 64, "float32", arch="sm_90")
    # the backward: a deterministic pair only, heads up to 128, 16 keys per warp (two warps
    # per 16 keys above d = 64)
    bt = TileConfig(32, 64, 4, 2, "tf32x3")
    with pytest.raises(ValueError, match="computes dQ in its own pass"):
        plan.specs_for("float32", 64, bt, False, backward=True, deterministic=False)
    with pytest.raises(ValueError, match="head dims up to 128"):
        plan.check_tile(TileConfig(32, 64, 8, 1, "tf32x3"), 160, "float32", backward=True)
    with pytest.raises(ValueError, match="head dims up to 128"):
        default_tile(160, "float32", backward=True, precision="tf32")
    with pytest.raises(ValueError, match="one warp per 16 keys"):
        plan.check_tile(TileConfig(32, 128, 4, 1, "tf32"), 64, "float32", backward=True)
    with pytest.raises(ValueError, match="a pair of warps per 16 keys"):
        plan.check_tile(TileConfig(32, 64, 4, 1, "tf32"), 128, "float32", backward=True)
    # a pair of warps per 16 keys at any head dim (block_n = 8·num_warps)
    plan.check_tile(TileConfig(64, 64, 8, 2, "tf32x3"), 64, "float32", backward=True)
    # 'highest' above 128 runs on the CUDA cores, as accurate
    assert default_tile(160, "float32", backward=True).kernel == "simt"


@pytest.mark.parametrize("prec,family", [("tf32", "tf32"), ("highest", "tf32x3")])
def test_backward_tiles_and_kernel_types(prec, family):
    """The float32 backward's default in a TF32 precision: that family's pair (flash_bwd_tf32.cu),
    deterministic=False too (no atomic mode), the dQ kernel on the tile transposed."""
    from cuflash.tile import default_backward, tf32_backward_tiles
    for arch, limit in (("sm_90", plan.SMEM_LIMIT["sm_90"]), ("sm_80", plan.SMEM_LIMIT["sm_80"])):
        for d in (16, 64, 100, 128):
            for det in (True, False):
                tile, dq_det = default_backward(d, "float32", arch=arch, smem_limit=limit,
                                                deterministic=det, precision=prec)
                assert tile.kernel == family and tile in tf32_backward_tiles(d, family)
                assert dq_det
    tile = tf32_backward_tiles(128, family)[0]
    dkdv, dq = plan.specs_for("float32", 128, tile, True, True)
    stages = 1    # tile.tf32_backward_tiles: calls 141 (tf32x3) and 147 ('tf32')
    assert build.kernel_type(dkdv).startswith(
        f"cuflash::DkdvTf32<float, 128, 32, 64, 256, {stages},")
    assert build.kernel_type(dq).startswith(f"cuflash::DqMma<float, 128, 64, 32, 128, {stages},")
    assert build.kernel_type(dq).endswith(f"cuflash::Tf32Products<{precision.PRODUCTS[family]}>>")
    # 'ieee' keeps the CUDA cores; the default ('highest') takes the 3xTF32 pair
    assert default_backward(64, "float32", arch="sm_90", smem_limit=plan.SMEM_LIMIT["sm_90"],
                            precision="ieee")[0].kernel == "simt"
    assert default_backward(64, "float32", arch="sm_90",
                            smem_limit=plan.SMEM_LIMIT["sm_90"])[0].kernel == "tf32x3"


@pytest.mark.parametrize("prec,family,n", [("tf32", "tf32", 1), ("highest", "tf32x3", 3)])
def test_default_tiles_and_kernel_type(prec, family, n):
    for arch, limit in (("sm_90", plan.SMEM_LIMIT["sm_90"]), ("sm_80", plan.SMEM_LIMIT["sm_80"])):
        for d in (16, 64, 100, 128, 256):
            tile = default_tile(d, "float32", arch=arch, smem_limit=limit, precision=prec)
            assert tile.kernel == family
            assert tile in tf32_tiles(d, family)
    spec = plan.specs_for("float32", 128, tf32_tiles(128, family)[0], True, False)[0]
    assert spec.name.startswith(f"cuflash_{family}_fwd_f32_d128")
    assert build.kernel_type(spec).endswith(f"cuflash::Tf32Products<{n}>>")
    assert precision.of_family(family) == prec


def test_tf32_kernels_in_the_compile_check():
    from cuflash.gpu.precompile import default_specs
    names = {s.name for s in default_specs("sm_90")}
    for fam in ("tf32", "tf32x3"):
        for d in (64, 128, 256):
            assert any(n.startswith(f"cuflash_{fam}_fwd_f32_d{d}_") for n in names), (fam, d)
    for role in ("bwd_dkdv", "bwd_dq"):   # the default float32 backward ('highest')
        for d in (64, 128):
            assert any(n.startswith(f"cuflash_tf32x3_{role}_f32_d{d}_") for n in names), (role, d)


# -- the CPU twin and naive ----------------------------------------------------------------------

def _inputs(xp, B, H, T, S, d, seed, std=1.0):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((B, H, T, d)) * std).astype(F32)
    k = (rng.standard_normal((B, H, S, d)) * std).astype(F32)
    v = rng.standard_normal((B, H, S, d)).astype(F32)
    return tuple(xp.asarray(x) for x in (q, k, v))


@pytest.mark.parametrize("causal", [False, True])
def test_twin_precisions_against_oracle(causal):
    q, k, v = _inputs(np, 2, 2, 77, 130, 64, seed=3)
    ref, ref_lse = oracle_attention(q, k, v, causal=causal)
    got = {p: cuflash.attention(q, k, v, causal=causal, precision=p, return_lse=True)
           for p in ("ieee", "tf32", "highest")}
    naive = {p: cuflash.naive_attention(q, k, v, causal=causal, precision=p)
             for p in ("ieee", "tf32")}
    for p, ref_prec in (("ieee", "ieee"), ("highest", "ieee"), ("tf32", "tf32")):
        assert_matches_oracle(got[p][0], ref, naive[ref_prec], dtype="float32",
                              name=f"out ({p})")
    assert rel_error(got["tf32"][0], ref) >= 50 * rel_error(got["highest"][0], ref)


@pytest.mark.parametrize("causal", [False, True])
def test_twin_backward_precisions_against_oracle(causal):
    """The twin's backward in each precision against the oracle beside naive's backward in the
    same one ('highest' beside naive float32); 'tf32' clearly worse than 'highest', which is at
    float32's level: a backward that dropped the split or the rounding fails."""
    from cuflash.oracle import oracle_backward
    from helpers import grad_scale
    q, k, v = _inputs(np, 2, 2, 77, 130, 64, seed=4)
    dout = np.random.default_rng(5).standard_normal(q.shape).astype(F32)
    refs = oracle_backward(dout, q, k, v, causal=causal)
    errs = {}
    for prec, naive_prec in (("ieee", "ieee"), ("highest", "ieee"), ("tf32", "tf32")):
        out, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True)
        grads = cuflash.attention_backward(dout, res, precision=prec)
        naive = cuflash.naive_attention_backward(dout, q, k, v, causal=causal,
                                                 precision=naive_prec)
        for name, g, ref, nv in zip(("dq", "dk", "dv"), grads, refs, naive):
            assert_matches_oracle(g, ref, nv, dtype="float32", floor_scale=grad_scale(*refs),
                                  name=f"{name} ({prec})", product_unit=_product_unit(prec))
        errs[prec] = np.array([rel_error(g, r) for g, r in zip(grads, refs)])
    # each of dq, dk, dv (a product left unrounded under 'tf32' shows in its own gradient)
    assert (errs["tf32"] >= 50 * errs["highest"]).all(), errs
    assert (errs["highest"] <= 4 * errs["ieee"]).all(), errs
    with pytest.raises(ValueError, match="precision="):
        cuflash.naive_attention_backward(dout, q, k, v, precision="bogus")
    with pytest.raises(ValueError, match="precision="):
        cuflash.attention_backward(dout, res, precision="bogus")


# -- the kernels ----------------------------------------------------------------------------------

TF32_TILES = [TileConfig(64, 32, 4, 2, "tf32x3"), TileConfig(128, 64, 8, 2, "tf32x3"),
              TileConfig(128, 32, 4, 2, "tf32x3"), TileConfig(32, 32, 2, 1, "tf32x3"),
              TileConfig(64, 32, 4, 2, "tf32"), TileConfig(128, 64, 8, 2, "tf32"),
              TileConfig(32, 64, 4, 2, "tf32x3")]   # last: warps split the keys (MT = 1 rows)


def _check_kernel(cp, out, lse, q, k, v, prec, *, name, **opts):
    """out and lse of a TF32 kernel against the oracle, beside naive in its precision (naive
    float32 for 'highest')."""
    qn, kn, vn = (to_numpy(x) for x in (q, k, v))
    ref_out, ref_lse = oracle_attention(qn, kn, vn, **opts)
    naive_prec = "tf32" if prec == "tf32" else "ieee"
    n_out, n_lse = cuflash.naive_attention(q, k, v, precision=naive_prec, return_lse=True, **opts)
    assert_matches_oracle(out, ref_out, n_out, dtype="float32", name=f"out {name}")
    assert_matches_oracle(lse, ref_lse, n_lse, dtype="float32", name=f"lse {name}")
    return rel_error(to_numpy(out), ref_out)


@pytest.mark.gpu
@pytest.mark.parametrize("tile", TF32_TILES, ids=lambda t: t.short())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T,S,d", [(97, 257, 64), (257, 97, 128), (1000, 1000, 40), (17, 1, 96),
                                   (130, 300, 256), (1, 77, 16)])
def test_tf32_tiles_against_oracle(cp, tile, causal, T, S, d):
    skip_unless_tile_fits(tile, d, np.float32)
    seed = case_seed("tf32", tile, causal, T, S, d)
    q, k, v = make_inputs(cp, (2, 3, T, d), (2, 3, S, d), np.float32, seed=seed)
    out, lse = cuflash.attention(q, k, v, causal=causal, tile=tile, return_lse=True)
    _check_kernel(cp, out, lse, q, k, v, precision.of_family(tile.kernel), name=tile.short(),
                  causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("opts", [dict(window=(40, 7)), dict(softcap=5.0), dict(causal=True, window=(30, None)),
                                  dict(alibi="slopes"), dict(causal=True, softcap=3.0, alibi="slopes")],
                         ids=["window", "softcap", "causal-window", "alibi", "causal-softcap-alibi"])
@pytest.mark.parametrize("prec", ["tf32", "highest"])
def test_tf32_variants_against_oracle(cp, opts, prec):
    q, k, v = make_inputs(cp, (2, 4, 150, 64), (2, 4, 203, 64), np.float32,
                          seed=case_seed("tf32v", prec, sorted(opts)))
    opts = dict(opts)
    if opts.get("alibi"):
        del opts["alibi"]
        opts["alibi_slopes"] = cp.asarray(np.linspace(0.05, 0.5, 4), dtype=cp.float32)
    out, lse = cuflash.attention(q, k, v, precision=prec, return_lse=True, **opts)
    _check_kernel(cp, out, lse, q, k, v, prec, name=prec, **opts)


@pytest.mark.gpu
@pytest.mark.parametrize("prec", ["tf32", "highest"])
def test_tf32_gqa_and_split_kv(cp, prec):
    q, _, _ = make_inputs(cp, (2, 8, 33, 128), (2, 8, 1, 128), np.float32, seed=21)
    _, k, v = make_inputs(cp, (2, 2, 1, 128), (2, 2, 999, 128), np.float32, seed=22)
    for splits in (1, 3, None):
        out, lse = cuflash.attention(q, k, v, causal=True, precision=prec, return_lse=True,
                                     num_splits=splits)
        _check_kernel(cp, out, lse, q, k, v, prec, name=f"GQA splits={splits}", causal=True)


@pytest.mark.gpu
def test_highest_is_three_products(cp):
    """'highest' keeps float32's accuracy where one TF32 product does not: the same inputs
    through both, the error of 'highest' at least 50x below 'tf32's, and at float32's level
    (within 2x naive float32's normwise error). A kernel that ran one product (or none split)
    under 'highest' fails here."""
    q, k, v = make_inputs(cp, (2, 4, 512, 128), (2, 4, 512, 128), np.float32, seed=31)
    qn, kn, vn = (to_numpy(x) for x in (q, k, v))
    ref, _ = oracle_attention(qn, kn, vn)
    hi = to_numpy(cuflash.attention(q, k, v, precision="highest"))
    lo = to_numpy(cuflash.attention(q, k, v, precision="tf32"))
    naive = to_numpy(cuflash.naive_attention(q, k, v))
    assert rel_error(lo, ref) >= 50 * rel_error(hi, ref)
    assert normwise_error(hi, ref) <= 2 * normwise_error(naive, ref)
    # the default float32 precision is 'highest': the 3xTF32 kernels where they run
    from cuflash.gpu.ops import device_arch, smem_limit
    tile = cuflash.tile.default_tile(128, "float32", arch=device_arch(), smem_limit=smem_limit())
    assert tile.kernel == "tf32x3"
    np.testing.assert_array_equal(to_numpy(cuflash.attention(q, k, v)), hi)


@pytest.mark.gpu
@pytest.mark.parametrize("prec", ["tf32", "highest"])
def test_tf32_packed_batch(cp, prec):
    """attention_varlen in a TF32 precision against the oracle of each sequence (naive in the
    same precision over the same sequences as the yardstick)."""
    from cuflash.oracle import oracle_attention_varlen
    lens = np.array([1, 130, 0, 77, 300], dtype=np.int32)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    n = int(cu[-1])
    q, k, v = make_inputs(cp, (n, 4, 64), (n, 2, 64), np.float32, seed=41)
    cuc = cp.asarray(cu)
    out, lse = cuflash.attention_varlen(q, k, v, cuc, cuc, causal=True, precision=prec,
                                        return_lse=True)
    ref_out, ref_lse = oracle_attention_varlen(*(to_numpy(x) for x in (q, k, v)), cu, cu,
                                               causal=True)
    naive_prec = "tf32" if prec == "tf32" else "ieee"
    n_out = cuflash.attention_varlen(*(to_numpy(x) for x in (q, k, v)), cu, cu, causal=True,
                                     precision=naive_prec)
    assert_matches_oracle(out, ref_out, n_out, dtype="float32", name=f"out packed {prec}")


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [TileConfig(64, 32, 4, 2, "tf32"), TileConfig(128, 64, 8, 2, "tf32x3")],
                         ids=lambda t: t.short())
def test_tf32_kernels_agree_with_twin(cp, tile):
    """The kernel and the twin round the same operands to TF32 (cvt.rna: ties away) and multiply
    them exactly; only the order and rounding of the float32 sums differ (the tensor core
    truncates): within 256 float32 ulps of max |out|, where the operand rounding alone ('tf32')
    moves the output by ~4000 (5e-4)."""
    q, k, v = make_inputs(cp, (2, 200, 64), (2, 190, 64), np.float32, seed=51)
    out_g, lse_g = cuflash.attention(q, k, v, causal=True, tile=tile, return_lse=True)
    out_c, lse_c = cuflash.attention(*(to_numpy(x) for x in (q, k, v)), causal=True, tile=tile,
                                     return_lse=True)
    ref = to_numpy(out_c).astype(np.float64)
    tol = 256 * 2.0 ** -23 * np.abs(ref).max()
    diff = np.abs(to_numpy(out_g) - ref).max()
    assert diff <= tol, f"out: kernel vs twin differ by {diff:.3e} > {tol:.3e}"
    fin = np.isfinite(to_numpy(lse_c))
    dl = np.abs(to_numpy(lse_g)[fin] - to_numpy(lse_c)[fin]).max()
    assert dl <= 256 * 2.0 ** -23 * np.abs(to_numpy(lse_c)[fin]).max()


def test_tf32x3_wide_heads_compile_at_256():
    """'tf32x3' compiles head dims above plan.TF32X3_WIDE for 256 (narrower wide tiles spill)."""
    tile = tf32_tiles(200, "tf32x3")[0]
    assert plan.specs_for("float32", 200, tile, False, False)[0].head_dim == 256
    assert plan.specs_for("float32", 160, tf32_tiles(160, "tf32x3")[0], False, False)[0].head_dim == 160
    assert plan.specs_for("float32", 200, tf32_tiles(200, "tf32")[0], False, False)[0].head_dim == 224


@pytest.mark.gpu
@pytest.mark.parametrize("d", [40, 96, 160, 200, 256])
@pytest.mark.parametrize("prec", ["tf32", "highest"])
def test_tf32_default_tiles_every_width(cp, d, prec):
    """The default tile of each precision at head dims of every tf32_tiles branch (d = 200 runs
    tf32x3's kernel compiled for 256) against the oracle."""
    q, k, v = make_inputs(cp, (2, 2, 133, d), (2, 2, 170, d), np.float32,
                          seed=case_seed("tf32w", d, prec))
    out, lse = cuflash.attention(q, k, v, causal=True, precision=prec, return_lse=True)
    _check_kernel(cp, out, lse, q, k, v, prec, name=f"{prec} d={d}", causal=True)


# -- the backward (flash_bwd_tf32.cu) ------------------------------------------------------------

# solo (16 keys per warp) and pair (16 keys per two warps: block_n = 8·warps) tiles
TF32_BWD_TILES = [TileConfig(32, 64, 4, 2, "tf32x3"), TileConfig(32, 64, 8, 2, "tf32x3"),
                  TileConfig(64, 64, 8, 2, "tf32x3"),
                  TileConfig(32, 32, 2, 1, "tf32x3"), TileConfig(64, 64, 4, 1, "tf32x3"),
                  TileConfig(32, 64, 4, 2, "tf32"), TileConfig(32, 64, 8, 2, "tf32"),
                  TileConfig(32, 64, 8, 1, "tf32")]


def _product_unit(prec):
    """assert_matches_oracle's product_unit of a backward in ``prec``: TF32's unit roundoff for
    'tf32' (its dS of one-key rows, helpers.PRODUCT_UNITS), None otherwise."""
    return 2.0 ** -11 if prec == "tf32" else None


def _check_grads(cp, q, k, v, prec, *, name, tile=None, deterministic=True, **opts):
    """dq, dk, dv of the TF32 backward against the float64 oracle, beside naive's backward in
    its precision (naive float32 for 'highest'); returns dq's error."""
    from cuflash.oracle import oracle_backward
    from helpers import grad_scale, randn
    dout = randn(cp, q.shape[:-1] + (v.shape[-1],), np.float32, 977)
    out, res = cuflash.attention(q, k, v, return_residuals=True, **opts)
    grads = cuflash.attention_backward(dout, res, tile=tile, deterministic=deterministic,
                                       precision=None if tile is not None else prec)
    host = [to_numpy(x) for x in (dout, q, k, v)]
    opts = {n: to_numpy(x) if n == "alibi_slopes" else x for n, x in opts.items()}
    refs = oracle_backward(*host, **opts)
    naive = cuflash.naive_attention_backward(
        *host, precision="tf32" if prec == "tf32" else "ieee", **opts)
    for gname, g, ref, nv in zip(("dq", "dk", "dv"), grads, refs, naive):
        assert_matches_oracle(g, ref, nv, dtype="float32", floor_scale=grad_scale(*refs),
                              name=f"{gname} {name}", product_unit=_product_unit(prec))
    return rel_error(to_numpy(grads[0]), refs[0])


def _check_tile_backward(cp, tile, causal, T, S, d, tag):
    """A backward tile's dq, dk, dv against the float64 oracle (``_check_grads`` in the tile's
    precision) at (2, 3, T, d) queries and (2, 3, S, d) keys (seed from ``tag`` and the case),
    and deterministic: a second call gives its bits."""
    skip_unless_tile_fits(tile, d, np.float32, passes=("bwd",))
    q, k, v = make_inputs(cp, (2, 3, T, d), (2, 3, S, d), np.float32,
                          seed=case_seed(tag, tile, causal, T, S, d))
    _check_grads(cp, q, k, v, precision.of_family(tile.kernel), name=tile.short(), tile=tile,
                 causal=causal)
    dout = make_inputs(cp, (2, 3, T, d), (1, 1, 1, 1), np.float32, seed=5)[0]
    _, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True)
    a = cuflash.attention_backward(dout, res, tile=tile)
    b = cuflash.attention_backward(dout, res, tile=tile)
    for x, y in zip(a, b):
        cp.testing.assert_array_equal(x, y)


@pytest.mark.gpu
@pytest.mark.parametrize("tile", TF32_BWD_TILES, ids=lambda t: t.short())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T,S,d", [(97, 257, 64), (257, 97, 128), (1000, 1000, 40), (17, 1, 96),
                                   (1, 77, 16), (130, 130, 72)])
def test_tf32_backward_tiles_against_oracle(cp, tile, causal, T, S, d):
    skip_unless_tile_fits(tile, d, np.float32, passes=("bwd",))
    seed = case_seed("tf32bwd", tile, causal, T, S, d)
    q, k, v = make_inputs(cp, (2, 3, T, d), (2, 3, S, d), np.float32, seed=seed)
    _check_grads(cp, q, k, v, precision.of_family(tile.kernel), name=tile.short(), tile=tile,
                 causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("opts", [dict(window=(40, 7)), dict(softcap=5.0),
                                  dict(causal=True, window=(30, None)), dict(alibi="slopes")],
                         ids=["window", "softcap", "causal-window", "alibi"])
@pytest.mark.parametrize("prec", ["tf32", "highest"])
@pytest.mark.parametrize("d", [64, 128])
def test_tf32_backward_variants_and_gqa(cp, opts, prec, d):
    """Every score variant through the TF32 backward, under GQA (2 kv heads for 4 query heads:
    the dK/dV kernel sums each group), deterministic=False too (it runs the pair)."""
    q, _, _ = make_inputs(cp, (2, 4, 150, d), (2, 4, 1, d), np.float32,
                          seed=case_seed("tf32bv", prec, d, sorted(opts)))
    _, k, v = make_inputs(cp, (2, 2, 1, d), (2, 2, 203, d), np.float32, seed=case_seed("kv", d))
    opts = dict(opts)
    if opts.get("alibi"):
        del opts["alibi"]
        opts["alibi_slopes"] = cp.asarray(np.linspace(0.05, 0.5, 4), dtype=cp.float32)
    _check_grads(cp, q, k, v, prec, name=f"{prec} d={d} {sorted(opts)}", deterministic=False,
                 **opts)


@pytest.mark.gpu
def test_tf32_backward_highest_is_three_products(cp):
    """'highest' keeps float32's accuracy in the backward where one TF32 product does not: dq's
    error at least 20x below 'tf32's, each within the criterion; the default float32 backward is
    the 3xTF32 pair and gives its bits, run after run (the pair is deterministic)."""
    q, k, v = make_inputs(cp, (2, 4, 512, 128), (2, 4, 512, 128), np.float32, seed=61)
    hi = _check_grads(cp, q, k, v, "highest", name="highest")
    lo = _check_grads(cp, q, k, v, "tf32", name="tf32")
    assert lo >= 20 * hi, (lo, hi)
    from cuflash.gpu.ops import device_arch, smem_limit
    from cuflash.tile import default_backward
    assert default_backward(128, "float32", arch=device_arch(),
                            smem_limit=smem_limit())[0].kernel == "tf32x3"
    dout = make_inputs(cp, (2, 4, 512, 128), (1, 1, 1, 1), np.float32, seed=62)[0]
    out, res = cuflash.attention(q, k, v, return_residuals=True)
    a = [to_numpy(g) for g in cuflash.attention_backward(dout, res)]
    b = [to_numpy(g) for g in cuflash.attention_backward(dout, res, precision="highest")]
    c = [to_numpy(g) for g in cuflash.attention_backward(dout, res, precision="ieee")]
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(x, y)
        assert np.abs(x - z).max() > 0   # and not the CUDA cores' result


@pytest.mark.gpu
@pytest.mark.parametrize("prec", ["tf32", "highest"])
def test_tf32_backward_packed_batch(cp, prec):
    """attention_varlen_backward in a TF32 precision against the oracle of each sequence."""
    from cuflash.oracle import oracle_backward_varlen
    from helpers import grad_scale, randn
    lens = np.array([1, 130, 0, 77, 300], dtype=np.int32)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    n = int(cu[-1])
    q, k, v = make_inputs(cp, (n, 4, 64), (n, 2, 64), np.float32, seed=71)
    dout = randn(cp, (n, 4, 64), np.float32, 72)
    cuc = cp.asarray(cu)
    out, res = cuflash.attention_varlen(q, k, v, cuc, cuc, causal=True, return_residuals=True)
    grads = cuflash.attention_varlen_backward(dout, res, precision=prec)
    host = [to_numpy(x) for x in (dout, q, k, v)]
    refs = oracle_backward_varlen(*host, cu, cu, causal=True)
    naive = cuflash.naive_attention_varlen_backward(
        *host, cu, cu, causal=True, precision="tf32" if prec == "tf32" else "ieee")
    for gname, g, ref, nv in zip(("dq", "dk", "dv"), grads, refs, naive):
        assert_matches_oracle(g, ref, nv, dtype="float32", floor_scale=grad_scale(*refs),
                              name=f"{gname} packed {prec}", product_unit=_product_unit(prec))
