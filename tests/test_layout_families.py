"""Issue 12's layouts through every kernel family on the GPU, forward and backward, against the
float64 oracle with naive in the same precision as the yardstick (issue12_helpers.check_dense,
check_varlen):

  gqa       G = 4 and MQA (8 query heads on 2 and on 1 kv head), head dim 59 (padded to 64)
  packed    a packed batch given one cu_seqlens array for queries and keys (the self-attention
            kernels, plan.Variant.same_lens) and one of different query and key lengths
            (the general packed kernels, with sequences of 0 and 1 keys), GQA G = 2
  head_dims head dims 1 and 111 (padded to 16 and 112), and head_dim_v != head_dim (59 / 24)
  strided   a (B, T, H, d) array's (B, H, T, d) view with padded rows, GQA on such views

test_gqa, test_varlen, test_head_dims and test_layouts run the same layouts through each dtype's
default kernels (and the CPU twin); this file runs every other family's tiles
(helpers.KERNEL_FAMILIES, as test_variants does for the masks), and float32's TF32 forward
kernels ('tf32' and 'highest', whose backward runs on the CUDA cores)."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig, precision
from cuflash._xp import dtype_name, to_numpy
from cuflash.oracle import oracle_attention, oracle_attention_varlen

from helpers import poison_gpu_outputs  # noqa: F401 (autouse fixture)
from helpers import (assert_matches_oracle, case_seed, family_cases, randn,
                     skip_family_here)
from issue12_helpers import check_dense, check_varlen, cu_seqlens

LAYOUTS = ["gqa4", "mqa", "packed_shared", "packed_cross", "head_dim_1", "head_dim_111",
           "head_dim_v", "strided", "strided_gqa"]
#: packed batches: one sequence longer than the others together, lengths 0 and 1, odd lengths
SHARED = [1, 7, 64, 0, 33]
CROSS = ([3, 9, 40, 2, 1], [5, 1, 47, 0, 6])


def _bthd(xp, dtype, B, n, H, d, seed, pad=0):
    """A (B, H, n, d) view of a (B, n, H, d + pad) array (strided rows, every axis but d)."""
    x = randn(xp, (B, n, H, d + pad), dtype, seed)[..., :d]
    return x.transpose(0, 2, 1, 3)


def _dense_case(xp, dtype, layout, seed):
    """(q, k, v, dout, options) of a layout run through cuflash.attention."""
    B, T, S = 2, 57, 71
    if layout in ("gqa4", "mqa"):
        Hq, Hkv, d, d_v = 8, (2 if layout == "gqa4" else 1), 59, 59
    elif layout.startswith("head_dim"):
        Hq, Hkv = 3, 3
        d, d_v = {"head_dim_1": (1, 1), "head_dim_111": (111, 111), "head_dim_v": (59, 24)}[layout]
    else:
        Hq, Hkv, d, d_v = 4, (2 if layout == "strided_gqa" else 4), 64, 64
    if layout.startswith("strided"):
        q, k, v, dout = (_bthd(xp, dtype, B, n, h, dd, seed + i, pad=8)
                         for i, (n, h, dd) in enumerate(((T, Hq, d), (S, Hkv, d), (S, Hkv, d_v),
                                                         (T, Hq, d_v))))
        assert not q.flags.c_contiguous and not k.flags.c_contiguous
    else:
        q = randn(xp, (B, Hq, T, d), dtype, seed)
        k = randn(xp, (B, Hkv, S, d), dtype, seed + 1)
        v = randn(xp, (B, Hkv, S, d_v), dtype, seed + 2)
        dout = randn(xp, (B, Hq, T, d_v), dtype, seed + 3)
    opts = dict(causal=True) if layout != "head_dim_v" else dict(window=(9, 4))
    return q, k, v, dout, opts


def _packed_case(xp, dtype, layout, seed):
    """(q, k, v, dout, cu_q, cu_k) of a packed batch: Hq = 4, Hkv = 2, d = 40."""
    lq, lk = (SHARED, SHARED) if layout == "packed_shared" else CROSS
    Hq, Hkv, d = 4, 2, 40
    q = randn(xp, (sum(lq), Hq, d), dtype, seed)
    k = randn(xp, (sum(lk), Hkv, d), dtype, seed + 1)
    v = randn(xp, (sum(lk), Hkv, d), dtype, seed + 2)
    dout = randn(xp, (sum(lq), Hq, d), dtype, seed + 3)
    cu_q = cu_seqlens(lq, xp)
    cu_k = cu_q if layout == "packed_shared" else cu_seqlens(lk, xp)
    return q, k, v, dout, cu_q, cu_k


def _check_tiles(tiles, q, k, v, dtype):
    """Skip a layout whose padded head dim the family's tile cannot hold here."""
    from cuflash.checks import kernel_head_dim
    from cuflash.gpu import plan
    from cuflash.gpu.ops import device_arch, smem_limit
    D = kernel_head_dim(max(q.shape[-1], v.shape[-1]))
    for backward, t in enumerate(tiles):
        try:
            plan.check_tile(t, D, dtype_name(dtype), backward=bool(backward),
                            smem_limit=smem_limit(), arch=device_arch())
        except ValueError as exc:
            pytest.skip(f"{t.short()} at head dim {D}: {exc}")


def run_layout(xp, dtype, layout, fwd_tile, bwd_tile, dets, seed):
    """One layout forward and backward through the given tiles, checked against the oracle."""
    if layout.startswith("packed"):
        q, k, v, dout, cu_q, cu_k = _packed_case(xp, dtype, layout, seed)
        if xp is not np:
            _check_tiles((fwd_tile, bwd_tile), q, k, v, dtype)
        out, _, _ = check_varlen(xp, q, k, v, cu_q, cu_k, dout, dtype=dtype, name=layout,
                                 tile=fwd_tile, bwd_tile=bwd_tile, dets=dets, causal=True)
        assert out.shape == q.shape
        return
    q, k, v, dout, opts = _dense_case(xp, dtype, layout, seed)
    if xp is not np:
        _check_tiles((fwd_tile, bwd_tile), q, k, v, dtype)
    out, lse, grads = check_dense(xp, q, k, v, dout, dtype=dtype, name=layout,
                                  fwd_tile=fwd_tile, bwd_tile=bwd_tile, dets=dets, **opts)
    assert out.shape == q.shape[:-1] + (v.shape[-1],)
    for g, x in zip(grads[dets[0]], (q, k, v)):
        assert g.shape == x.shape


def test_layouts_on_the_twin():
    """The layouts' own set-up (shapes, views, the shared array) on the CPU twin, so that the
    GPU cases below fail only for the kernels."""
    for i, layout in enumerate(LAYOUTS):
        run_layout(np, np.float32, layout, TileConfig(16, 32), TileConfig(32, 16), (True,),
                   seed=case_seed("layout-twin", i))


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fam,dtype,tiles,dets", family_cases())
def test_layouts_through_every_family(fam, dtype, tiles, dets, layout):
    from cuflash._xp import cupy_module
    skip_family_here(fam, dtype)
    run_layout(cupy_module(), dtype, layout, tiles[0], tiles[1], dets,
               seed=case_seed("layout-family", fam, layout))


TF32_FORWARD = [TileConfig(64, 32, 4, 2, "tf32"), TileConfig(64, 32, 4, 2, "tf32x3")]


def run_tf32_layout(xp, tile, layout, seed):
    """One layout's forward through a TF32 tile, out and lse against the oracle with naive in
    the kernel's precision as the yardstick ('tf32': naive with TF32 products; 'highest': naive
    float32)."""
    prec = precision.of_family(tile.kernel)
    naive_prec = "tf32" if prec == "tf32" else "ieee"
    if layout.startswith("packed"):
        q, k, v, _, cu_q, cu_k = _packed_case(xp, np.float32, layout, seed)
        if xp is not np:
            _check_tiles((tile,), q, k, v, np.float32)
        ref = oracle_attention_varlen(q, k, v, cu_q, cu_k, causal=True)
        got = cuflash.attention_varlen(q, k, v, cu_q, cu_k, causal=True, tile=tile,
                                       precision=prec, return_lse=True)
        naive = cuflash.naive_attention_varlen(q, k, v, cu_q, cu_k, causal=True,
                                               precision=naive_prec, return_lse=True)
    else:
        q, k, v, _, opts = _dense_case(xp, np.float32, layout, seed)
        if xp is not np:
            _check_tiles((tile,), q, k, v, np.float32)
        ref = oracle_attention(q, k, v, **opts)
        got = cuflash.attention(q, k, v, tile=tile, precision=prec, return_lse=True, **opts)
        naive = cuflash.naive_attention(q, k, v, precision=naive_prec, return_lse=True, **opts)
    for what, g, r, n in zip(("out", "lse"), got, ref, naive):
        assert_matches_oracle(g, r, n, dtype="float32", name=f"{what} {layout} {tile.kernel}",
                              kind=what)
    assert not np.isnan(to_numpy(got[0])).any()


def test_tf32_layouts_on_the_twin():
    """The TF32 cases' set-up on the CPU twin (which rounds products as the kernels do)."""
    for i, layout in enumerate(LAYOUTS):
        for tile in TF32_FORWARD:
            run_tf32_layout(np, tile, layout, seed=case_seed("layout-tf32-twin", i))


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tile", TF32_FORWARD, ids=lambda t: t.kernel)
def test_layouts_through_tf32_forward(tile, layout):
    """float32's TF32 forward kernels ('tf32': one product; 'highest': three), out and lse; the
    backward of these runs on the CUDA cores (the simt family above)."""
    from cuflash._xp import cupy_module
    from cuflash.gpu.ops import device_arch
    if int(device_arch()[3:5]) < 80:
        pytest.skip("TF32 tensor cores need sm_80 or later")
    run_tf32_layout(cupy_module(), tile, layout, seed=case_seed("layout-tf32", tile.kernel, layout))
