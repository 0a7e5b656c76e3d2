"""float32's 'tf32' as one float16 product of power-of-two-scaled rows on Hopper's 16-bit warpgroup
tensor cores (issue 15, NOTES.md v55-v56; kernel='wgmma_f16x1'): the x3 kernels
(flash_fwd_wgmma_x3.cu, flash_bwd_wgmma_x3.cu) with F16Products<1>, the default backward of
'tf32' on sm_90 for dense batches where tile.float32_wgmma_pays; the forward opt-in. A TF32
product rounds each operand to 11 significant bits; so does float16 inside its range, which
the rows' scales supply: the kernels are held to 'tf32''s criterion (2x naive attention with TF32
products, test_tf32's _check_kernel and _check_grads). The plan's rules without a GPU (the kernels
compile beside x3's: test_wgmma_f16x3.py); the kernels against the float64 oracle (gpu-marked)."""
import itertools

import numpy as np
import pytest

import cuflash
from cuflash import TileConfig, precision
from cuflash.gpu import build, plan
from cuflash.tile import (F16_SCALED_DEFAULT_MAX_D, F16_SPLIT, WGMMA_F16X1_FWD_MIN_D,
                          WGMMA_F16X3_BWD_MAX_D, WGMMA_F16X3_MIN_KEYS, default_backward,
                          default_tile, f16_scaled_tiles, float32_wgmma_pays, wgmma_f16x3_tiles,
                          x3_dq_block_n)

from helpers import (  # noqa: F401 (poison_gpu_outputs: autouse fixture)
    poison_gpu_outputs, case_seed, gqa_strided_inputs, make_inputs, score_variants,
    skip_unless_tile_fits, skip_without_nvrtc)
from test_tf32 import _check_grads, _check_kernel, _check_tile_backward

X1_TILES = wgmma_f16x3_tiles(64, kernel="wgmma_f16x1")
X1 = X1_TILES[0]
X1B = wgmma_f16x3_tiles(64, True, "wgmma_f16x1")[0]
X1B128 = wgmma_f16x3_tiles(128, True, "wgmma_f16x1")[0]   # 64 < d <= 128: 32-query tiles
# one consumer warpgroup, two blocks a multiprocessor (NOTES v64; opt-in by name)
X1_TILES_W8 = wgmma_f16x3_tiles(64, kernel="wgmma_f16x1", num_warps=8)
X1B_W8 = wgmma_f16x3_tiles(64, True, "wgmma_f16x1", num_warps=8)[0]
X1B128_W8 = wgmma_f16x3_tiles(128, True, "wgmma_f16x1", num_warps=8)[0]


# -- the plan ------------------------------------------------------------------------------------

def test_family_tiles_and_kernel_type():
    """'wgmma_f16x1' computes 'tf32' on the x3 kernels' tiles and structs, with F16Products<1>
    last; 'wgmma_f16x3''s kernel types keep their default (their names and code unchanged)."""
    assert F16_SPLIT == {"wgmma_f16x3": 3, "wgmma_f16x1": 1}
    assert precision.of_family("wgmma_f16x1") == "tf32"
    for d, bwd in itertools.product((16, 64, 96, 128, 160, 256), (False, True)):
        x3 = [t.replace(kernel="wgmma_f16x1") for t in wgmma_f16x3_tiles(d, bwd)]
        # x3's tiles, and above d = 64 a third stage in the backward (no lo tiles: NOTES v57);
        # the forward's a third stage too, and 128 keys at d <= 64 (NOTES v61)
        if bwd:
            extra = [x3[0].replace(num_stages=3)] if 64 < d <= WGMMA_F16X3_BWD_MAX_D else []
        else:
            extra = [x3[0].replace(block_n=n, num_stages=s) for s, n in
                     ((2, 128), (3, 64), (3, 32), (3, 128)) if n < 128 or d <= 64] if x3 else []
        assert wgmma_f16x3_tiles(d, bwd, "wgmma_f16x1") == x3 + extra, d
    # the dQ kernel's key tile: 64 at every head dim (x3: the dK/dV tile transposed, 32 keys at
    # d = 128; x1's dK/dV kernel keeps 32 queries there: NOTES v57)
    for d in (64, 128):
        dkdv, dq = plan.specs_for("float32", d, wgmma_f16x3_tiles(d, True, "wgmma_f16x1")[0],
                                  plan.Variant("dense"), True)
        assert dq.tile.block_n == 64 == x3_dq_block_n(d, "wgmma_f16x1"), dq.tile
        assert dq.tile.block_m == dkdv.tile.block_n == 128
    assert x3_dq_block_n(128) == 32 and x3_dq_block_n(64) == 64
    with pytest.raises(ValueError, match="kernel='wgmma': the float16-product families are "
                                         "'wgmma_f16x3', 'wgmma_f16x1'"):
        wgmma_f16x3_tiles(64, kernel="wgmma")
    assert X1.warp_specialized and X1B.warp_specialized_dkdv
    smem = plan.SMEM_LIMIT["sm_90"]
    for d, tile, bwd in ((64, X1, False), (128, X1, False), (64, X1B, True), (128, X1B128, True)):
        for spec in plan.specs_for("float32", d, tile, plan.Variant("causal"), bwd):
            plan.validate(spec, smem, "sm_90")
            kt = build.kernel_type(spec)
            assert spec.arch == "sm_90a" and kt.endswith(", cuflash::F16Products<1>>"), kt
            assert kt.split("<")[0] in ("cuflash::FwdWgmmaX3", "cuflash::DkdvWgmmaX3",
                                        "cuflash::DqWgmmaX3"), kt
            x3 = build.kernel_type(plan.specs_for(
                "float32", d, tile.replace(kernel="wgmma_f16x3"), plan.Variant("causal"),
                bwd)[0])
            assert "F16Products" not in x3, x3


def test_two_block_tiles():
    """8-warp float16-product tiles (one consumer warpgroup) are compiled for two blocks a
    multiprocessor: __launch_bounds__(256, 2), the IO model's blocks in flight doubled; the
    plan refuses those whose shared memory does not fit twice, naming why; the 12-warp tiles and
    the other families keep one."""
    hopper = plan.SMEM_LIMIT["sm_90"]
    assert [t.block_m for t in X1_TILES_W8] == [64] * len(X1_TILES_W8)
    assert (X1B_W8.block_m, X1B_W8.block_n, X1B128_W8.block_m) == (64, 64, 32)
    for d, tile, bwd in ((64, X1_TILES_W8[0], False), (128, X1_TILES_W8[0], False),
                         (64, X1B_W8, True), (128, X1B128_W8, True)):
        specs = plan.specs_for("float32", d, tile, plan.Variant("causal"), bwd)
        for spec in specs:
            plan.validate(spec, hopper, "sm_90")
            assert spec.warp_specialized and spec.min_blocks() == 2, spec.name
            assert "__launch_bounds__(256, 2)" in build.source(spec), spec.name
        if bwd:   # the dQ kernel takes the tile transposed: 64 queries on one consumer too
            assert specs[1].tile.block_m == 64 and specs[1].tile.num_warps == 8
    assert tile.blocks_per_sm(backward=True) == 2 and X1B_W8.blocks_per_sm() == 2
    from cuflash import iomodel
    assert iomodel.resident_blocks_of(X1_TILES_W8[0]) == 2 * iomodel.resident_blocks_of(X1)
    assert iomodel.resident_blocks_of(X1B_W8, backward=True) == \
        2 * iomodel.resident_blocks_of(X1B, backward=True)
    for t, bwd in ((X1, False), (X1B, True), (TileConfig(128, 64, 8, 2, "wgmma"), False)):
        assert t.blocks_per_sm(backward=bwd) == 1, t
    # the TF32 warp-specialized forward keeps two consumer warpgroups: no 8-warp tile of its own;
    # the 16-bit one takes one since v68, two blocks a multiprocessor as these
    with pytest.raises(ValueError, match="two consumer warpgroups"):
        plan.check_tile(TileConfig(64, 64, 8, 2, "wgmma_tf32"), 64, "float32")
    one16 = TileConfig(64, 128, 8, 2, "wgmma")
    plan.check_tile(one16, 64, "float16")
    assert one16.blocks_per_sm() == 2
    with pytest.raises(ValueError, match=r"runs two blocks a multiprocessor, and this tile's "
                                         r"1\d{5} bytes of shared memory do not fit twice"):
        plan.check_tile(TileConfig(64, 64, 8, 3, "wgmma_f16x1"), 128, "float32")
    with pytest.raises(ValueError, match="do not fit twice"):
        plan.check_tile(TileConfig(64, 64, 8, 2, "wgmma_f16x3"), 128, "float32")
    with pytest.raises(ValueError, match="num_warps=7"):
        wgmma_f16x3_tiles(64, kernel="wgmma_f16x1", num_warps=7)
    # a head too wide for the family says so, not that two blocks do not fit (fuzzing)
    with pytest.raises(ValueError, match="takes head dims up to 128"):
        plan.check_tile(TileConfig(64, 64, 8, 2, "wgmma_f16x3"), 192, "float32")


def test_two_block_kernels_compile_in_half_the_registers():
    """NVRTC, sm_90a: the 8-warp x1 kernels (forward d = 64 / 128, the backward pair at d = 64)
    launch at 128 registers a thread (two blocks of 256) and spill nothing: the split's producer
    keeps 48 (kernels_cu/barrier.cuh, RegisterSplit; at 32-40 they spilled 4-152 bytes)."""
    skip_without_nvrtc()
    specs = plan.specs_for("float32", 128, X1_TILES_W8[0], plan.Variant("causal"), False) + \
        plan.specs_for("float32", 64, X1B_W8, plan.Variant("causal"), True)
    for spec in specs:
        rep = build.compile_offline(build.source(spec), spec.name, spec.arch, spec.smem_bytes())
        assert rep.registers == 128, (spec.name, rep.registers)
        assert rep.spills == 0, f"{spec.name} spills {rep.spills} bytes"
        assert not rep.serialized, spec.name


def test_tf32_default_backward_where_it_pays():
    """'tf32''s default backward on sm_90 where the caller says its batch is dense (staged): the
    x1 pair above F16_SCALED_DEFAULT_MAX_D up to d = 128 (deterministic, even when
    deterministic=False is asked; narrower: 'wgmma_f16s', test_f16_scaled.py); elsewhere and
    wider, the mma.sync TF32 pair. Its forward: the x1 kernel from WGMMA_F16X1_FWD_MIN_D to 128
    where staged on sm_90, else the TF32 kernels."""
    for d in (16, 64, 96, 128):
        for staged, arch in itertools.product((False, True), ("sm_90", "sm_80")):
            smem = plan.SMEM_LIMIT[arch]
            bwd, det = default_backward(d, "float32", arch=arch, smem_limit=smem, staged=staged,
                                        deterministic=False, precision="tf32")
            if staged and arch == "sm_90" and d <= F16_SCALED_DEFAULT_MAX_D:
                assert (bwd, det) == (f16_scaled_tiles(d)[0], True), d
            elif staged and arch == "sm_90":
                assert (bwd, det) == (wgmma_f16x3_tiles(d, True, "wgmma_f16x1")[0], True), d
            else:
                assert bwd.kernel == "tf32", (d, staged, arch, bwd)
            fwd = default_tile(d, "float32", arch=arch, smem_limit=smem, staged=staged,
                               precision="tf32")
            if staged and arch == "sm_90" and d >= WGMMA_F16X1_FWD_MIN_D:
                assert fwd == wgmma_f16x3_tiles(d, False, "wgmma_f16x1")[0], (d, fwd)
            elif staged and arch == "sm_90" and d == 64:   # where both run 64 columns (v62)
                assert fwd == TileConfig(128, 128, 12, 2, "wgmma_f16x1"), (d, fwd)
            else:
                assert fwd.kernel in ("tf32", "wgmma_tf32"), (d, fwd)
    n = WGMMA_F16X3_MIN_KEYS
    assert float32_wgmma_pays("tf32", 64, n, backward=True)
    assert float32_wgmma_pays("tf32", WGMMA_F16X3_BWD_MAX_D, n, backward=True)
    assert not float32_wgmma_pays("tf32", 64, n - 1, backward=True)
    assert not float32_wgmma_pays("tf32", WGMMA_F16X3_BWD_MAX_D + 1, n, backward=True)


def test_api_asks_for_x1_only_for_dense_batches(monkeypatch):
    """The API's side: attention_backward with precision='tf32' on a dense batch from
    WGMMA_F16X3_MIN_KEYS keys takes the x1 pair (at d = 64 'wgmma_f16s', its short tile for 8
    queries), a shorter or packed one the mma.sync pair.
    NumPy arrays on a device the API is told about (sm_90): no GPU needed."""
    from cuflash import api, checks
    monkeypatch.setattr(api, "_device",
                        lambda p: (p.kernel_d,
                                   dict(smem_limit=plan.SMEM_LIMIT["sm_90"], arch="sm_90")))
    n = WGMMA_F16X3_MIN_KEYS
    for d, S in ((64, n), (128, n), (64, n - 1)):
        q = np.zeros((1, 2, 8, d), np.float32)
        k = np.zeros((1, 2, S, d), np.float32)
        p = checks.check_qkv(q, k, k, causal=False, scale=None)
        bwd = api._backward_choice(p, None, True, "tf32", dense=True)[0]
        want = None if S < n else f16_scaled_tiles(d, True)[0] \
            if d <= F16_SCALED_DEFAULT_MAX_D else wgmma_f16x3_tiles(d, True, "wgmma_f16x1")[0]
        assert bwd == want if want else bwd.kernel == "tf32", (d, S, bwd)
        assert api._backward_choice(p, None, True, "tf32")[0].kernel == "tf32"


@pytest.mark.parametrize("tile,d,bwd,match", [
    (X1.replace(block_n=128), 128, False, "kernel='wgmma_f16x1' takes block_n = 32 or 64 at "
                                          "d = 128"),
    (X1.replace(num_stages=4), 64, False, "kernel='wgmma_f16x1' is warp-specialized: block_m = "
                                          "128 on num_warps = 12 \\(or 64 on 8, two blocks a "
                                          "multiprocessor\\), num_stages = 2 or 3"),
    (X1B, 128, True, "kernel='wgmma_f16x1''s dK/dV kernel at d = 128 is warp-specialized: "
                     "block_m = 32"),
    (X1B128, 160, True, "kernel='wgmma_f16x1''s backward takes head dims up to 128"),
])
def test_validate_names_the_family(tile, d, bwd, match):
    smem = plan.SMEM_LIMIT["sm_90"]
    with pytest.raises(ValueError, match=match):
        for spec in plan.specs_for("float32", d, tile, plan.Variant("dense"), bwd):
            plan.validate(spec, smem, "sm_90")


def test_atomic_dq_refused_naming_the_family():
    """deterministic=False on an x1 tile: refused, the message naming the tile and its family."""
    with pytest.raises(ValueError, match=r"^TileConfig wgmma_f16x1_m64_n128_w12_s2: "
                                         r"kernel='wgmma_f16x1''s backward computes dQ in its "
                                         r"own pass: use deterministic=True"):
        plan.specs_for("float32", 64, X1B, plan.Variant("dense"), True, False)


def test_precision_must_match_the_tile():
    """An x1 tile computes 'tf32': asking 'highest' of it is refused, naming both (NumPy inputs:
    the check comes before any device work)."""
    q = np.ones((1, 1, 8, 64), np.float32)
    with pytest.raises(ValueError, match="precision='highest' does not match"):
        cuflash.attention(q, q, q, tile=X1, precision="highest")


# -- the kernels ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("tile", X1_TILES + X1_TILES_W8, ids=lambda t: t.short())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T,S,d", [(97, 257, 64), (257, 97, 128), (1000, 1000, 40), (17, 1, 96),
                                   (1, 77, 16), (300, 300, 128)])
def test_wgmma_f16x1_against_oracle(cp, tile, causal, T, S, d):
    """Within 2x naive attention's error with TF32 products (out and lse), odd shapes, T != S."""
    skip_unless_tile_fits(tile, d, np.float32)
    q, k, v = make_inputs(cp, (2, 3, T, d), (2, 3, S, d), np.float32,
                          seed=case_seed("wgf16x1", tile, causal, T, S, d))
    out, lse = cuflash.attention(q, k, v, causal=causal, tile=tile, return_lse=True)
    _check_kernel(cp, out, lse, q, k, v, "tf32", name=tile.short(), causal=causal)


_X1B_CASES = [(X1B, T, S, d) for T, S, d in [(97, 257, 64), (257, 97, 40), (1000, 1000, 64),
                                             (17, 1, 48), (1, 77, 16)]] + \
             [(X1B128, T, S, d) for T, S, d in [(97, 257, 128), (257, 97, 96), (1000, 1000, 128),
                                                (17, 1, 80), (300, 300, 112)]] + \
             [(X1B128.replace(num_stages=3), T, S, d) for T, S, d in [(257, 97, 128),
                                                                     (1000, 1000, 96)]] + \
             [(X1B_W8, T, S, d) for T, S, d in [(97, 257, 64), (1000, 1000, 64), (17, 1, 48)]] + \
             [(X1B_W8.replace(num_stages=3), 257, 97, 64)] + \
             [(X1B128_W8, T, S, d) for T, S, d in [(97, 257, 128), (1000, 1000, 96)]]


@pytest.mark.gpu
@pytest.mark.parametrize("tile,T,S,d", _X1B_CASES,
                         ids=[f"{t.short()}-{T}-{S}-{d}" for t, T, S, d in _X1B_CASES])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_wgmma_f16x1_backward_against_oracle(cp, tile, causal, T, S, d):
    """dq, dk, dv within 'tf32''s criterion (2x naive with TF32 products, plus the floors) of
    the float64 oracle, odd shapes, T != S; deterministic: a second call gives its bits."""
    _check_tile_backward(cp, tile, causal, T, S, d, "wgf16x1b")


@pytest.mark.gpu
@pytest.mark.parametrize("qs,ks,vs", [(1e-6, 1e6, 1e5), (1e3, 1e-3, 1e-6)],
                         ids=["q-tiny-k-huge", "q-huge-v-tiny"])
@pytest.mark.parametrize("d", [64, 128])
def test_wgmma_f16x1_scales_into_range(cp, qs, ks, vs, d):
    """Operands far outside float16's range (below its normal numbers, above 65504), rows of
    unequal size, scaled into it by powers of two: forward and backward meet 'tf32''s criterion
    as for unit inputs (TF32 has float32's exponent range; these kernels must match it)."""
    fwd, bwd = X1, wgmma_f16x3_tiles(d, True, "wgmma_f16x1")[0]
    skip_unless_tile_fits(fwd, d, np.float32)
    skip_unless_tile_fits(bwd, d, np.float32, passes=("bwd",))
    q, k, v = make_inputs(cp, (1, 4, 200, d), (1, 4, 333, d), np.float32,
                          seed=case_seed("wgf16x1s", qs, ks, vs, d))
    rows = cp.asarray(np.geomspace(0.25, 4.0, 200).astype(np.float32))[:, None]
    q, k, v = q * rows * np.float32(qs), k * np.float32(ks), v * np.float32(vs)
    out, lse = cuflash.attention(q, k, v, tile=fwd, return_lse=True)
    _check_kernel(cp, out, lse, q, k, v, "tf32", name=f"d={d} q x{qs} k x{ks} v x{vs}")
    _check_grads(cp, q, k, v, "tf32", name=f"d={d} q x{qs} k x{ks} v x{vs}", tile=bwd)


@pytest.mark.gpu
@score_variants
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("warps", [12, 8])
def test_wgmma_f16x1_variants_and_gqa(cp, opts, d, warps):
    """Every score variant under GQA (2 kv heads for 8 query heads), k and v strided views:
    the forward and the backward pair, on two consumer warpgroups and on one (two blocks a
    multiprocessor)."""
    fwd = wgmma_f16x3_tiles(d, False, "wgmma_f16x1", num_warps=warps)[0]
    bwd = wgmma_f16x3_tiles(d, True, "wgmma_f16x1", num_warps=warps)[0]
    skip_unless_tile_fits(fwd, d, np.float32)
    skip_unless_tile_fits(bwd, d, np.float32, passes=("bwd",))
    q, k, v, opts = gqa_strided_inputs(cp, d, np.float32, "wgf16x1", opts)
    out, lse = cuflash.attention(q, k, v, tile=fwd, return_lse=True, **opts)
    _check_kernel(cp, out, lse, q, k, v, "tf32", name=f"{fwd.short()} d={d} GQA", **opts)
    _check_grads(cp, q, k, v, "tf32", name=f"wgmma_f16x1 d={d} GQA {sorted(opts)}", tile=bwd,
                 **opts)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [WGMMA_F16X3_BWD_MAX_D])
def test_tf32_default_backward_takes_x1_where_it_pays(cp, d):
    """precision='tf32' with tile=None: on sm_90 a dense batch from WGMMA_F16X3_MIN_KEYS keys runs
    the x1 pair (the bits of its tile named); one key fewer runs the mma.sync TF32 pair (its
    bits)."""
    if d <= F16_SCALED_DEFAULT_MAX_D:
        pytest.skip(f"'tf32''s default backward at d = {d} is 'wgmma_f16s' (test_f16_scaled.py)")
    x1b = wgmma_f16x3_tiles(d, True, "wgmma_f16x1")[0]
    skip_unless_tile_fits(x1b, d, np.float32, passes=("bwd",))
    mma_b, _ = default_backward(d, "float32", precision="tf32")
    assert mma_b.kernel == "tf32"
    n = WGMMA_F16X3_MIN_KEYS
    q, k, v = make_inputs(cp, (1, 2, n, d), (1, 2, n, d), np.float32, seed=68)
    dout = make_inputs(cp, (1, 2, n, d), (1, 1, 1, 1), np.float32, seed=69)[0]
    _, res = cuflash.attention(q, k, v, causal=True, return_residuals=True, precision="tf32")
    got = cuflash.attention_backward(dout, res, precision="tf32")
    for a, b in zip(got, cuflash.attention_backward(dout, res, tile=x1b)):
        cp.testing.assert_array_equal(a, b)
    assert not all(bool(cp.array_equal(a, b)) for a, b in
                   zip(got, cuflash.attention_backward(dout, res, tile=mma_b)))
    short = [x[:, :, :n - 1] for x in (q, k, v)]
    _, res = cuflash.attention(*short, return_residuals=True, precision="tf32")
    for a, b in zip(cuflash.attention_backward(dout[:, :, :n - 1], res, precision="tf32"),
                    cuflash.attention_backward(dout[:, :, :n - 1], res, tile=mma_b)):
        cp.testing.assert_array_equal(a, b)


@pytest.mark.gpu
def test_wgmma_f16x1_is_one_product(cp):
    """Not 'highest' in disguise: the x1 backward's dq error is far above the x3 pair's on the
    same inputs (one product of 11-bit significands against three), and within 'tf32''s."""
    skip_unless_tile_fits(X1B, 64, np.float32, passes=("bwd",))
    q, k, v = make_inputs(cp, (1, 4, 256, 64), (1, 4, 256, 64), np.float32, seed=70)
    e1 = _check_grads(cp, q, k, v, "tf32", name="x1", tile=X1B)
    e3 = _check_grads(cp, q, k, v, "highest", name="x3", tile=X1B.replace(kernel="wgmma_f16x3"))
    assert e1 > 30 * e3, (e1, e3)
