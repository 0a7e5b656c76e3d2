"""float32's 'tf32' backward on the 16-bit warp-specialized kernels themselves (issue 15, NOTES.md
v70-v71; kernel='wgmma_f16s', cuflash/gpu/f16_scaled.py): float16 copies of q, k, v, dout and
out scaled by one power of two a tensor, the softmax scale and the gradients' factors
compensating, float32 gradients (params.cuh, G). The rule and its algebra without a GPU (the
factors against the float64 oracle on the copies), the plan's mapping onto the 16-bit kernels,
their compile; the kernels against the float64 oracle with 'tf32''s criterion (gpu-marked)."""
import itertools
import math

import numpy as np
import pytest

import cuflash
from cuflash import TileConfig, precision
from cuflash._xp import to_numpy
from cuflash.gpu import build, f16_scaled, plan
from cuflash.oracle import oracle_backward
from cuflash.tile import (F16_SCALED, F16_SCALED_DEFAULT_MAX_D, default_backward,
                          f16_scaled_tiles, wgmma_f16x3_tiles)

from helpers import (  # noqa: F401 (poison_gpu_outputs: autouse fixture)
    poison_gpu_outputs, assert_matches_oracle, case_seed, gqa_strided_inputs, grad_scale,
    make_inputs, score_variants, skip_unless_tile_fits)
from test_tf32 import _check_grads, _check_tile_backward, _product_unit

S12 = f16_scaled_tiles(64)[0]           # two consumer warpgroups
S8 = f16_scaled_tiles(64, short=True)[0]   # one, two blocks a multiprocessor
S128 = f16_scaled_tiles(128)[0]


# -- the rule ------------------------------------------------------------------------------------

@pytest.mark.parametrize("m", [1.0, 0.75, 3.0e-30, 1.7e30, 255.9, 256.0, 2.0 ** -140])
@pytest.mark.parametrize("top", [8, 3])
def test_power_of_two_puts_the_max_in_range(m, top):
    """max·2^e in [2^(top-1), 2^top) for every normal float32 maximum; e within the clamp."""
    f = f16_scaled.power_of_two(m, top)
    assert math.frexp(f)[0] == 0.5   # a power of two
    if m >= 2.0 ** -100:
        assert 2.0 ** (top - 1) <= m * f < 2.0 ** top, (m, f)
    else:   # clamped: the copy's largest entry stays below the range, never above
        assert m * f < 2.0 ** (top - 1) and f == 2.0 ** f16_scaled._EXP_RANGE[1]


@pytest.mark.parametrize("m", [0.0, float("nan"), float("inf")])
def test_power_of_two_of_nothing_is_one(m):
    assert f16_scaled.power_of_two(m, 8) == 1.0


def test_factors():
    f = f16_scaled.Factors.of((3.0, 0.01, 100.0, 1e-5), 0.125)   # q, k, v, dout
    assert (f.a, f.b, f.e, f.c) == (64.0, 16384.0, 0.0625, 2.0 ** 19)
    assert f.kernel_scale == 0.125 / (f.a * f.b)
    assert f.dq == f.kernel_scale * f.a / (f.c * f.e)
    assert f.dk == f.kernel_scale * f.b / (f.c * f.e)
    assert f.dv == 1.0 / f.c


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("qs,ks,vs,dos", [(1, 1, 1, 1), (1e-6, 1e6, 1e5, 1e-4),
                                          (1e3, 1e-3, 1e-6, 1e2)])
def test_copies_and_factors_give_the_gradients(causal, qs, ks, vs, dos):
    """The algebra: the exact (float64) backward of the float16 copies with the kernels' scale,
    times f.dq / f.kernel_scale etc. (the kernels apply the factor in place of the scale), is
    the float32 problem's backward within 'tf32''s criterion (the copies round to 11 bits, as
    TF32 does). A wrong factor, or out's copy with another scale than v's, fails it."""
    rng = np.random.default_rng(case_seed("f16s-alg", causal, qs, ks, vs, dos))
    T, S, d = 97, 130, 64
    rows = np.geomspace(0.25, 4.0, T).astype(np.float32)[:, None]
    q = (rng.standard_normal((2, T, d)) * rows * qs).astype(np.float32)
    k = (rng.standard_normal((2, S, d)) * ks).astype(np.float32)
    v = (rng.standard_normal((2, S, d)) * vs).astype(np.float32)
    dout = (rng.standard_normal((2, T, d)) * dos).astype(np.float32)
    scale = 1 / math.sqrt(d)
    f = f16_scaled.scales(q, k, v, dout, scale)
    q16, k16, v16, do16 = (f16_scaled.copy(x, s) for x, s in
                           ((q, f.a), (k, f.b), (v, f.e), (dout, f.c)))
    assert all(np.isfinite(x).all() for x in (q16, k16, v16, do16))
    g16 = oracle_backward(*(x.astype(np.float64) for x in (do16, q16, k16, v16)),
                          causal=causal, scale=f.kernel_scale)
    got = [g16[0] * (f.dq / f.kernel_scale), g16[1] * (f.dk / f.kernel_scale), g16[2] * f.dv]
    refs = oracle_backward(dout, q, k, v, causal=causal, scale=scale)
    naive = cuflash.naive_attention_backward(dout, q, k, v, causal=causal, scale=scale,
                                             precision="tf32")
    for name, g, ref, nv in zip(("dq", "dk", "dv"), got, refs, naive):
        assert_matches_oracle(g.astype(np.float32), ref, nv, dtype="float32",
                              floor_scale=grad_scale(*refs), name=name,
                              product_unit=_product_unit("tf32"))


# -- the plan ------------------------------------------------------------------------------------

def test_specs_are_the_16bit_pair_with_float_gradients():
    """A 'wgmma_f16s' tile's specs: the 16-bit warp-specialized pair of the same tile (float16,
    'wgmma'), float32 gradients (name _g32, G = float in the kernel and its parameter struct)."""
    assert precision.of_family(F16_SCALED) == "tf32"
    smem = plan.SMEM_LIMIT["sm_90"]
    for tile, d, det in itertools.product((S12, S8), (64, 40), (True, False)):
        specs = plan.specs_for("float32", d, tile, plan.Variant("causal"), True, det)
        want = plan.specs_for("float16", d, tile.replace(kernel="wgmma"), plan.Variant("causal"),
                              True, det)
        assert [s.name for s in specs] == [s.name.replace("_s2", "_s2_g32") for s in want]
        for s in specs:
            plan.validate(s, smem, "sm_90")
            assert s.float_grads and s.dtype == "float16" and s.family == "wgmma"
            assert build.kernel_type(s).endswith(", float>"), build.kernel_type(s)
            assert build._params_type(s) == "cuflash::BwdParams<__half, float, float>"


@pytest.mark.parametrize("tile,dtype,bwd,match", [
    (S12, "float32", False, "kernel='wgmma_f16s' is float32's backward of precision='tf32' "
                            "\\(float32 forward asked for\\)"),
    (S12, "float16", True, "float16 backward asked for"),
    (TileConfig(64, 64, 4, 2, F16_SCALED), "float32", True, "runs the warp-specialized 16-bit "
                                                             "backward only"),
])
def test_refused_naming_the_family(tile, dtype, bwd, match):
    with pytest.raises(ValueError, match=match):
        plan.specs_for(dtype, 64, tile, plan.Variant("dense"), bwd)


def test_default_backward_of_tf32():
    """'tf32''s default backward on sm_90 for a dense batch (staged): the 16-bit pair on scaled
    copies up to F16_SCALED_DEFAULT_MAX_D (its short tile where the batch is short), the x1
    pair above; not staged or not sm_90: the mma.sync TF32 pair."""
    for d, short, staged, arch in itertools.product((16, 64, 96, 128), (False, True),
                                                    (False, True), ("sm_90", "sm_80")):
        tile, det = default_backward(d, "float32", arch=arch, smem_limit=plan.SMEM_LIMIT[arch],
                                     staged=staged, short=short, deterministic=False,
                                     precision="tf32")
        if staged and arch == "sm_90":
            want = (f16_scaled_tiles(d, short)[0] if d <= F16_SCALED_DEFAULT_MAX_D else
                    wgmma_f16x3_tiles(d, True, "wgmma_f16x1")[0])
            assert (tile, det) == (want, True), (d, short, tile)
        else:
            assert tile.kernel == "tf32", (d, staged, arch, tile)


def test_default_kernels_compile_without_spills():
    """The default pair at d = 64 (both tiles, causal) builds for sm_90a without spilling
    (NVRTC, no GPU), and the copies' kernel (f16_copy.cuh); `cuflash compile --fail-on-spills`
    holds every default variant to it."""
    rep = build.compile_offline(build.f16_copy_source(), build.F16_COPY_NAME, "sm_90")
    assert rep.spills == 0
    for tile in (S12, S8):
        for spec in plan.specs_for("float32", 64, tile, plan.Variant("causal"), True):
            rep = build.compile_offline(build.source(spec), spec.name, spec.arch,
                                        spec.smem_bytes())
            assert rep.spills == 0, (spec.name, rep)


def test_io_model_counts_the_copies():
    """The IO model of a 'wgmma_f16s' backward: the 16-bit pair's on the copies, 2 bytes more an
    element of dq, dk, dv (float32), and the staging pass: 4 tensors read for their maxima, 5
    read and written in halves (out with v's factor). The DRAM model the same way."""
    from cuflash import iomodel
    B, T, S, d = 2, 1000, 700, 64
    for tile, det in itertools.product((S12, S8), (True, False)):
        for model in (iomodel.flash_backward, iomodel.flash_backward_dram):
            got = model(B, T, S, d, "float32", True, tile, det)
            inner = model(B, T, S, d, "float16", True, tile.replace(kernel="wgmma"), det)
            assert got.bytes_read == inner.bytes_read + B * ((2 * T + 2 * S) + (3 * T + 2 * S)) * d * 4
            assert got.bytes_written == inner.bytes_written + B * (T + 2 * S) * d * 2 + \
                B * (3 * T + 2 * S) * d * 2
            assert got.flops == inner.flops
    assert iomodel.stages_operands(F16_SCALED) and not iomodel.stages_operands("wgmma")


# -- the kernels ---------------------------------------------------------------------------------

_CASES = [(S12, T, S, d) for T, S, d in [(97, 257, 64), (257, 97, 64), (1000, 1000, 40),
                                         (17, 1, 48), (1, 77, 16), (130, 130, 64)]] + \
         [(S8, T, S, d) for T, S, d in [(97, 257, 64), (1000, 1000, 64), (17, 1, 48)]] + \
         [(S128, T, S, d) for T, S, d in [(97, 257, 128), (1000, 1000, 96)]]


@pytest.mark.gpu
@pytest.mark.parametrize("tile,T,S,d", _CASES,
                         ids=[f"{t.short()}-{T}-{S}-{d}" for t, T, S, d in _CASES])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_wgmma_f16s_against_oracle(cp, tile, causal, T, S, d):
    """dq, dk, dv within 'tf32''s criterion of the float64 oracle, odd shapes, T != S;
    deterministic: a second call gives its bits."""
    _check_tile_backward(cp, tile, causal, T, S, d, "wgf16s")


@pytest.mark.gpu
@pytest.mark.parametrize("qs,ks,vs", [(1e-6, 1e6, 1e5), (1e3, 1e-3, 1e-6)],
                         ids=["q-tiny-k-huge", "q-huge-v-tiny"])
@pytest.mark.parametrize("tile,d", [(S12, 64), (S128, 128)], ids=["d64", "d128"])
def test_wgmma_f16s_scales_into_range(cp, qs, ks, vs, tile, d):
    """Operands far outside float16's range, rows of unequal size: one power of two a tensor
    brings each into it, and the gradients meet 'tf32''s criterion as for unit inputs."""
    skip_unless_tile_fits(tile, d, np.float32, passes=("bwd",))
    q, k, v = make_inputs(cp, (1, 4, 200, d), (1, 4, 333, d), np.float32,
                          seed=case_seed("wgf16ss", qs, ks, vs, d))
    rows = cp.asarray(np.geomspace(0.25, 4.0, 200).astype(np.float32))[:, None]
    q, k, v = q * rows * np.float32(qs), k * np.float32(ks), v * np.float32(vs)
    _check_grads(cp, q, k, v, "tf32", name=f"d={d} q x{qs} k x{ks} v x{vs}", tile=tile)


@pytest.mark.gpu
@score_variants
@pytest.mark.parametrize("tile", [S12, S8], ids=["w12", "w8"])
@pytest.mark.parametrize("deterministic", [True, False], ids=["pair", "atomic"])
def test_wgmma_f16s_variants_and_gqa(cp, opts, tile, deterministic):
    """Every score variant (softcap and ALiBi read the kernels' own scale) under GQA (2 kv
    heads for 8 query heads), k and v strided views; the deterministic pair and atomic dQ."""
    d = 64
    skip_unless_tile_fits(tile, d, np.float32, passes=("bwd",))
    q, k, v, opts = gqa_strided_inputs(cp, d, np.float32, "wgf16s", opts)
    _check_grads(cp, q, k, v, "tf32", name=f"{tile.short()} GQA {sorted(opts)}", tile=tile,
                 deterministic=deterministic, **opts)


@pytest.mark.gpu
def test_wgmma_f16s_packed_batch(cp):
    """attention_varlen's backward on the scaled copies of a packed batch, against each
    sequence's own oracle."""
    d, lens = 64, [70, 1, 300]
    skip_unless_tile_fits(S12, d, np.float32, passes=("bwd",))
    total = sum(lens)
    q, k, v = make_inputs(cp, (total, 4, d), (total, 2, d), np.float32, seed=71)
    dout = make_inputs(cp, (total, 4, d), (1, 1, 1), np.float32, seed=72)[0]
    cu = cp.asarray(np.concatenate([[0], np.cumsum(lens)]), dtype=cp.int32)
    out, res = cuflash.attention_varlen(q, k, v, cu, cu, max_seqlen_q=max(lens),
                                        max_seqlen_k=max(lens), causal=True,
                                        return_residuals=True, precision="tf32")
    grads = cuflash.attention_varlen_backward(dout, res, tile=S12)
    host = [to_numpy(x) for x in (dout, q, k, v)]
    for b, (lo, hi) in enumerate(zip(np.cumsum([0] + lens)[:-1], np.cumsum(lens))):
        seq = [np.repeat(x[lo:hi].transpose(1, 0, 2), 4 // x.shape[1], axis=0) for x in host]
        refs = oracle_backward(*seq, causal=True)
        naive = cuflash.naive_attention_backward(*seq, causal=True, precision="tf32")
        gk = [to_numpy(g)[lo:hi].transpose(1, 0, 2) for g in grads]
        gk = [gk[0]] + [np.repeat(g, 2, axis=0) for g in gk[1:]]
        # dk, dv sum a kv head's two query heads: compare those sums
        refs = [refs[0]] + [r.reshape(2, 2, *r.shape[1:]).sum(1).repeat(2, axis=0)
                            for r in refs[1:]]
        naive = [naive[0]] + [r.reshape(2, 2, *r.shape[1:]).sum(1).repeat(2, axis=0)
                              for r in naive[1:]]
        for name, g, ref, nv in zip(("dq", "dk", "dv"), gk, refs, naive):
            assert_matches_oracle(g, ref, nv, dtype="float32", floor_scale=grad_scale(*refs),
                                  name=f"{name} seq {b}", product_unit=_product_unit("tf32"))


@pytest.mark.gpu
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
def test_cast_follows_the_rule(cp, strided):
    """f16_scaled.cast on C-contiguous arrays (kernels_cu/f16_copy.cuh) and on strided views
    (CuPy's kernels): the factors are scales()'s and the copies copy()'s bits; a NaN in a tensor
    makes its factor 1 (and stays NaN in its copy)."""
    rng = np.random.default_rng(case_seed("f16s-cast", strided))
    shapes = [(2, 3, 130, 64), (2, 3, 97, 64), (2, 3, 97, 64), (2, 3, 130, 64), (2, 3, 130, 64)]
    mags = (3e-4, 2e3, 0.7, 0.2, 5e-6)
    xs = [cp.asarray((rng.standard_normal(s[:-1] + (2 * s[-1],)) * m).astype(np.float32))
          for s, m in zip(shapes, mags)]
    xs = [x[..., ::2] if strided else cp.ascontiguousarray(x[..., :64]) for x in xs]
    q, k, v, out, dout = xs
    c = f16_scaled.cast(q, k, v, out, dout, 0.125)
    f = f16_scaled.scales(*(to_numpy(x) for x in (q, k, v, dout)), 0.125)
    assert c.factors == f
    for got, x, s in zip((c.q, c.k, c.v, c.out, c.dout), xs, (f.a, f.b, f.e, f.e, f.c)):
        assert got.dtype == cp.float16 and got.flags.c_contiguous
        np.testing.assert_array_equal(to_numpy(got), f16_scaled.copy(to_numpy(x), s))
    k = k.copy()
    k[1, 2, 50, 7] = np.nan
    c = f16_scaled.cast(q, k, v, out, dout, 0.125)
    assert c.factors.b == 1.0 and c.factors.a == f.a
    assert bool(cp.isnan(c.k[1, 2, 50, 7])) and int(cp.isnan(c.k).sum()) == 1


@pytest.mark.gpu
def test_tf32_default_backward_takes_f16s(cp):
    """precision='tf32' with tile=None at d = 64 on sm_90, a dense batch from
    WGMMA_F16X3_MIN_KEYS keys: the bits of the 'wgmma_f16s' tile its rule names."""
    from cuflash.tile import WGMMA_F16X3_MIN_KEYS, wgmma_one_consumer_pays
    d, n = 64, WGMMA_F16X3_MIN_KEYS
    tile = f16_scaled_tiles(d, wgmma_one_consumer_pays(d, n, n, True, backward=True))[0]
    skip_unless_tile_fits(tile, d, np.float32, passes=("bwd",))
    q, k, v = make_inputs(cp, (1, 2, n, d), (1, 2, n, d), np.float32, seed=68)
    dout = make_inputs(cp, (1, 2, n, d), (1, 1, 1, 1), np.float32, seed=69)[0]
    _, res = cuflash.attention(q, k, v, causal=True, return_residuals=True, precision="tf32")
    for a, b in zip(cuflash.attention_backward(dout, res, precision="tf32"),
                    cuflash.attention_backward(dout, res, tile=tile)):
        assert a.dtype == cp.float32
        cp.testing.assert_array_equal(a, b)
