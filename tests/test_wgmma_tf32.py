"""float32's forward of precision='tf32' on Hopper's warpgroup tensor cores (issue 15;
kernels_cu/flash_fwd_wgmma_tf32.cu, kernel='wgmma_tf32', the default of dense batches on sm_90
where tile.wgmma_tf32_pays): the host's staged K and Vᵀ
(cuflash/gpu/tf32_stage.py), the plan's rules, the kernels compiled without a GPU, and the
kernels against the float64 oracle beside naive attention with TF32 products (gpu-marked; the
library's criterion, test_tf32's _check_kernel)."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig, precision
from cuflash._xp import to_numpy
from cuflash.gpu import build, plan, tf32_stage
from cuflash.tile import (x1_forward_default, WGMMA_F16X1_FWD_MIN_D, WGMMA_TF32_MAX_D, WGMMA_TF32_MIN_KEYS, WGMMA_TF32_WIDE_D,
                          WGMMA_TF32_WIDE_MIN_KEYS, wgmma_tf32_wide_tiles,
                          default_tile, wgmma_tf32_pays,
                          wgmma_tf32_tiles)

from helpers import (  # noqa: F401 (poison_gpu_outputs: autouse fixture)
    poison_gpu_outputs, case_seed, make_inputs, skip_unless_tile_fits)
from test_tf32 import _check_kernel

F32 = np.float32


# -- the staged K and Vᵀ --------------------------------------------------------------------------

@pytest.mark.parametrize("S,block_n", [(37, 64), (64, 64), (1, 32), (129, 128)])
def test_staged_keys_and_values(S, block_n):
    """kr is k rounded to TF32 and zero-padded to whole tiles; vt, read in the kernel's k-slot
    order (slot t: key 2t, slot t + 4: key 2t + 1 of each 8), is V rounded: P (in S's
    accumulator order) times vt's rows gives P·tf32(V), padding included."""
    rng = np.random.default_rng(S)
    B, H, D = 2, 3, 64
    k, v = (rng.standard_normal((B, H, S, D)).astype(F32) for _ in range(2))
    kr, vt = tf32_stage.staged(k, v, block_n)
    S_pad = tf32_stage.padded_keys(S, block_n)
    assert S_pad % block_n == 0 and S <= S_pad < S + block_n
    assert kr.shape == (B, H, S_pad, D) and vt.shape == (B, H, D, S_pad)
    assert kr.flags.c_contiguous and vt.flags.c_contiguous
    np.testing.assert_array_equal(kr[:, :, :S], precision.tf32(k))
    assert not kr[:, :, S:].any() and not (kr.view(np.uint32) & np.uint32(0x1FFF)).any()
    assert not (vt.view(np.uint32) & np.uint32(0x1FFF)).any()
    slots = np.array(tf32_stage.KEY_OF_SLOT)
    assert sorted(slots) == list(range(8))
    assert all(slots[t] == 2 * t and slots[t + 4] == 2 * t + 1 for t in range(4))
    p = rng.random((5, S_pad))
    p[:, S:] = 0
    # the kernel's A fragment: k-slot s of step u holds key 8u + KEY_OF_SLOT[s]
    a = p.reshape(5, S_pad // 8, 8)[:, :, slots].reshape(5, S_pad)
    for b in range(B):
        for h in range(H):
            got = a @ vt[b, h].astype(np.float64).T
            want = p[:, :S] @ precision.tf32(v[b, h]).astype(np.float64)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_staged_checks():
    k = np.zeros((1, 1, 8, 32), F32)
    with pytest.raises(ValueError, match="block_n=12 must be a multiple of 8"):
        tf32_stage.staged(k, k, 12)
    with pytest.raises(ValueError, match="one shape"):
        tf32_stage.staged(k, np.zeros((1, 1, 9, 32), F32), 32)


# -- the plan ------------------------------------------------------------------------------------

def test_tiles_and_plan():
    smem = plan.SMEM_LIMIT["sm_90"]
    for d in (16, 64, 100, 128):
        for tile in wgmma_tf32_tiles(d):
            assert tile.kernel == "wgmma_tf32" and precision.of_family(tile.kernel) == "tf32"
            for variant in (plan.Variant("dense"), plan.Variant("causal"),
                            plan.Variant("window", softcap=True, alibi=True)):
                (spec,) = plan.specs_for("float32", d, tile, variant, False)
                plan.validate(spec, smem, "sm_90")
                assert spec.arch == "sm_90a" and spec.head_dim % 32 == 0
                # 12 warps: the warp-specialized forward's producer and two consumers
                struct = "FwdWgmmaWs" if tile.num_warps == 12 else "FwdWgmmaTf32"
                assert spec.warp_specialized == (tile.num_warps == 12)
                assert build.kernel_type(spec).startswith(
                    f"cuflash::{struct}<float, {spec.head_dim}, {tile.block_m}, "
                    f"{tile.block_n}, {tile.num_threads}, {tile.num_stages},")
        assert any(t.warp_specialized for t in wgmma_tf32_tiles(d))
    with pytest.raises(ValueError, match="head dims up to 128"):
        wgmma_tf32_tiles(WGMMA_TF32_MAX_D + 1)
    # the default of 'tf32' where the caller says its batch is dense (staged) and it pays, on
    # sm_90 only; the backward and other GPUs keep the mma.sync TF32 kernels ('highest': its own
    # warpgroup kernel, test_wgmma_f16x3.py)
    for d in (16, 64, 96, 128, 256):
        for staged in (False, True):
            for prec in ("tf32", "highest"):
                for arch in ("sm_90", "sm_80"):
                    for backward in (False, True):
                        try:
                            t = default_tile(d, "float32", arch=arch, smem_limit=smem,
                                             precision=prec, staged=staged, backward=backward)
                        except ValueError:   # 'tf32' backward above d = 128
                            assert prec == "tf32" and backward and d > 128
                            continue
                        want = (staged and prec == "tf32" and arch == "sm_90" and not backward
                                and d <= WGMMA_TF32_WIDE_D)
                        if want and x1_forward_default(d) is not None:
                            # the one-float16-product forward first (test_wgmma_f16x1.py)
                            assert t.kernel == "wgmma_f16x1", (d, staged, prec, arch)
                        elif want:
                            assert t == (wgmma_tf32_tiles(d) if d <= WGMMA_TF32_MAX_D else
                                         wgmma_tf32_wide_tiles(d))[0], (d, staged, prec, arch)
                        else:
                            assert t.kernel != "wgmma_tf32", (d, staged, prec, arch, backward)
    assert wgmma_tf32_pays(128, 1) and wgmma_tf32_pays(96, 1) and not wgmma_tf32_pays(288, 10**6)
    assert wgmma_tf32_pays(256, WGMMA_TF32_WIDE_MIN_KEYS)
    assert not wgmma_tf32_pays(136, WGMMA_TF32_WIDE_MIN_KEYS - 1)
    assert wgmma_tf32_pays(64, WGMMA_TF32_MIN_KEYS) and not wgmma_tf32_pays(64, WGMMA_TF32_MIN_KEYS - 1)
    assert not wgmma_tf32_pays(16, 1000) and wgmma_tf32_pays(16, 4096)


@pytest.mark.parametrize("tile,dtype,backward,match", [
    (TileConfig(128, 64, 8, 2, "wgmma_tf32"), "float16", False, "float32's forward"),
    (TileConfig(128, 64, 8, 2, "wgmma_tf32"), "float32", True, "backward of precision='tf32' "
                                                                "runs kernel='tf32'"),
])
def test_plan_refuses_other_passes(tile, dtype, backward, match):
    with pytest.raises(ValueError, match=match):
        plan.specs_for(dtype, 64, tile, False, backward)


@pytest.mark.parametrize("tile,variant,match", [
    (TileConfig(128, 64, 8, 4, "wgmma_tf32"), plan.Variant(), "2 stages"),
    (TileConfig(128, 16, 8, 2, "wgmma_tf32"), plan.Variant(), "block_n must be a multiple of 32"),
    (TileConfig(32, 64, 4, 2, "wgmma_tf32"), plan.Variant(), "block_m = 16·num_warps"),
    (TileConfig(128, 64, 8, 2, "wgmma_tf32"), plan.Variant(packed=True), "packed batch"),
    (TileConfig(128, 64, 8, 2, "wgmma_tf32"), plan.Variant(split=True), "split-KV"),
    (TileConfig(128, 64, 8, 2, "wgmma_tf32"), plan.Variant(cache="cache"), "KV cache"),
    (TileConfig(64, 64, 8, 2, "wgmma_tf32"), plan.Variant(), "two consumer warpgroups"),
    (TileConfig(128, 64, 12, 1, "wgmma_tf32"), plan.Variant(), "warp-specialized TF32 forward "
                                                                "needs 2 to 4 stages"),
    (TileConfig(128, 64, 12, 2, "wgmma_tf32"), plan.Variant(packed=True), "packed batch"),
])
def test_validate_names_the_problem(tile, variant, match):
    (spec,) = plan.specs_for("float32", 64, tile, variant, False)
    with pytest.raises(ValueError, match=match):
        plan.validate(spec, plan.SMEM_LIMIT["sm_90"], "sm_90")
    with pytest.raises(ValueError, match="runs only on sm_90"):
        plan.validate(plan.specs_for("float32", 64, wgmma_tf32_tiles(64)[0], False, False)[0],
                      plan.SMEM_LIMIT["sm_80"], "sm_80")


def test_first_tiles_compile_without_spills():
    """NVRTC, no GPU: the first tile of d = 64 and 128 (the warp-specialized kernel) and the first
    8-warp tile, dense and causal with every modifier, compile for sm_90a with no spill and
    wgmma not serialized by ptxas; at d = 96 the first tile is the 8-warp one (the
    warp-specialized producer spills at 96 columns: tile.wgmma_tf32_tiles)."""
    for d in (64, 96, 128):
        first = wgmma_tf32_tiles(d)[0]
        assert first.warp_specialized == (d != 96), d
        eight = next(t for t in wgmma_tf32_tiles(d) if not t.warp_specialized)
        for variant in (plan.Variant("causal"), plan.Variant("window", softcap=True, alibi=True)):
            for tile in ((first, eight) if d != 96 else (first,)):
                (spec,) = plan.specs_for("float32", d, tile, variant, False)
                r = build.compile_offline(build.source(spec), spec.name, spec.arch,
                                          spec.smem_bytes())
                assert r.spills == 0 and not r.serialized, (spec.name, r)


# -- the kernels ---------------------------------------------------------------------------------

def _hopper_or_skip(tile, d):
    skip_unless_tile_fits(tile, d, np.float32)   # sm_90 only, and its shared memory


WGMMA_TF32_TILES = [TileConfig(*t, "wgmma_tf32") for t in (
    (128, 128, 8, 2), (128, 64, 8, 2), (64, 64, 4, 2), (128, 32, 8, 2),   # S_j, then P_j V_j
    (128, 64, 8, 3), (64, 64, 4, 3), (128, 32, 8, 3),                      # S_j beside P_(j-1) V_(j-1)
    (128, 128, 12, 2), (128, 64, 12, 2), (128, 32, 12, 3))]                # warp-specialized


@pytest.mark.gpu
@pytest.mark.parametrize("tile", WGMMA_TF32_TILES, ids=lambda t: t.short())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T,S,d", [(97, 257, 64), (257, 97, 128), (1000, 1000, 40), (17, 1, 96),
                                   (1, 77, 16), (300, 300, 128)])
def test_wgmma_tf32_against_oracle(cp, tile, causal, T, S, d):
    _hopper_or_skip(tile, d)
    q, k, v = make_inputs(cp, (2, 3, T, d), (2, 3, S, d), np.float32,
                          seed=case_seed("wgtf32", tile, causal, T, S, d))
    out, lse = cuflash.attention(q, k, v, causal=causal, tile=tile, return_lse=True)
    _check_kernel(cp, out, lse, q, k, v, "tf32", name=tile.short(), causal=causal)
    # the same bits as asked with precision='tf32' named (the tile decides it either way)
    again = cuflash.attention(q, k, v, causal=causal, tile=tile, precision="tf32")
    cp.testing.assert_array_equal(again, out)


@pytest.mark.gpu
@pytest.mark.parametrize("opts", [dict(window=(40, 7)), dict(softcap=5.0),
                                  dict(causal=True, window=(30, None)), dict(alibi="slopes"),
                                  dict(causal=True, softcap=3.0, alibi="slopes")],
                         ids=["window", "softcap", "causal-window", "alibi",
                              "causal-softcap-alibi"])
@pytest.mark.parametrize("tile", [TileConfig(128, 64, 8, 2, "wgmma_tf32"),
                                  TileConfig(128, 64, 12, 2, "wgmma_tf32")], ids=lambda t: t.short())
def test_wgmma_tf32_variants_and_gqa(cp, opts, tile):
    _hopper_or_skip(tile, 128)
    q, _, _ = make_inputs(cp, (2, 8, 150, 128), (2, 8, 1, 128), np.float32,
                          seed=case_seed("wgtf32v", sorted(opts)))
    _, k, v = make_inputs(cp, (2, 2, 1, 128), (2, 2, 203, 128), np.float32,
                          seed=case_seed("wgtf32kv", sorted(opts)))
    opts = dict(opts)
    if opts.get("alibi"):
        del opts["alibi"]
        opts["alibi_slopes"] = cp.asarray(np.linspace(0.05, 0.5, 8), dtype=cp.float32)
    out, lse = cuflash.attention(q, k, v, tile=tile, return_lse=True, **opts)
    _check_kernel(cp, out, lse, q, k, v, "tf32", name="wgmma_tf32 GQA", **opts)


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [TileConfig(128, 64, 8, 2, "wgmma_tf32"),
                                  TileConfig(128, 64, 12, 2, "wgmma_tf32")], ids=lambda t: t.short())
def test_wgmma_tf32_matches_the_mma_kernel(cp, tile):
    """The wgmma kernel and the mma.sync 'tf32' kernel compute the same TF32 products of the same
    roundings; their sums run in other orders (and exp2 is ex2.approx here, exact there), so a
    P near a TF32 rounding boundary may round the other way: about one element in 2^11, each
    moving out by 2^-11 of its 1/512 share. So they agree to 2e-5 of out's largest value, 25x
    below TF32's own error (5e-4; a wrong rounding of a whole operand moves out by ~1e-4). Both
    wgmma kernels: the 8-warp one and the warp-specialized one."""
    _hopper_or_skip(tile, 128)
    q, k, v = make_inputs(cp, (1, 4, 512, 128), (1, 4, 512, 128), np.float32, seed=51)
    a = to_numpy(cuflash.attention(q, k, v, tile=tile))
    mma = default_tile(128, "float32", precision="tf32")   # staged=False: the mma.sync kernel
    assert mma.kernel == "tf32"
    b = to_numpy(cuflash.attention(q, k, v, tile=mma))
    scale = np.abs(b).max()
    assert np.abs(a - b).max() <= 2e-5 * scale, np.abs(a - b).max() / scale


@pytest.mark.gpu
@pytest.mark.parametrize("S,block_n,D", [(37, 64, 64), (300, 128, 32), (1, 64, 128), (129, 32, 96)])
def test_staging_kernel_matches_the_rule(cp, S, block_n, D):
    """kernels_cu/tf32_stage.cuh gives tf32_stage.staged's arrays bit for bit (NaN-poisoned
    outputs: every element written), from k and v with strided (broadcast) rows."""
    from cuflash.gpu import ops
    k = cp.asarray(np.random.default_rng(S).standard_normal((2, 3, S, D)).astype(F32))
    v = cp.broadcast_to(cp.asarray(np.random.default_rng(S + 1).standard_normal(
        (1, 3, S, D)).astype(F32)), (2, 3, S, D))
    r = ops._Run(k, k, v, 2, 3, 1, S, S)
    got = tf32_stage.staged_run(r, block_n)
    want_k, want_v = tf32_stage.staged(k, v, block_n, cp)
    cp.testing.assert_array_equal(got.k, want_k)
    cp.testing.assert_array_equal(got.v, want_v)


@pytest.mark.gpu
def test_wgmma_tf32_refuses_what_it_does_not_run(cp):
    tile = TileConfig(128, 64, 8, 2, "wgmma_tf32")
    _hopper_or_skip(tile, 64)
    q, k, v = make_inputs(cp, (1, 2, 64, 64), (1, 2, 64, 64), np.float32, seed=52)
    with pytest.raises(ValueError, match="split-KV"):
        cuflash.attention(q, k, v, tile=tile, num_splits=2)
    with pytest.raises(ValueError, match="precision='highest' does not match"):
        cuflash.attention(q, k, v, tile=tile, precision="highest")


@pytest.mark.gpu
def test_tf32_default_takes_wgmma_where_it_pays(cp):
    """precision='tf32' with tile=None: on sm_90 a dense batch in one pass runs the TF32 wgmma
    kernel where tile.wgmma_tf32_pays (the same bits as its tile named), the mma.sync kernel
    otherwise: short keys at d = 64, automatic split-KV, a packed batch (the mma kernel's bits).
    At d = 64 the Hopper kernel is the one-float16-product x1 tile (tile.x1_forward_default,
    NOTES v62), which takes the TF32 wgmma kernel's place."""
    tile = x1_forward_default(64) or wgmma_tf32_tiles(64)[0]
    _hopper_or_skip(tile, 64)
    mma = default_tile(64, "float32", precision="tf32")
    T = WGMMA_TF32_MIN_KEYS
    q, k, v = make_inputs(cp, (1, 2, T, 64), (1, 2, T, 64), np.float32, seed=53)
    got = cuflash.attention(q, k, v, precision="tf32", causal=True)
    cp.testing.assert_array_equal(got, cuflash.attention(q, k, v, tile=tile, causal=True))
    assert not bool(cp.array_equal(got, cuflash.attention(q, k, v, tile=mma, causal=True)))
    short = [x[:, :, :T - 1] for x in (q, k, v)]     # one key below: the mma kernel
    cp.testing.assert_array_equal(cuflash.attention(*short, precision="tf32"),
                                  cuflash.attention(*short, tile=mma))
    cp.testing.assert_array_equal(cuflash.attention(q, k, v, precision="tf32", num_splits=None),
                                  cuflash.attention(q, k, v, tile=mma, num_splits=None))
    cu = cp.asarray([0, T], dtype=cp.int32)
    packed = [x[0].transpose(1, 0, 2).copy() for x in (q, k, v)]   # (T, heads, d)
    cp.testing.assert_array_equal(
        cuflash.attention_varlen(*packed, cu, cu, max_seqlen_q=T, max_seqlen_k=T,
                                 precision="tf32"),
        cuflash.attention_varlen(*packed, cu, cu, max_seqlen_q=T, max_seqlen_k=T, tile=mma))
