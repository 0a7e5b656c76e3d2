"""The online softmax over many key tiles (NOTES v24): a few queries against S = 20011 keys, so
that a row's running max m, sum l and O are rescaled by alpha once per key tile, 300 to 1250
times. An alpha that is not exactly 1 while the max stands (it was 2^δ, δ the rounding of m·mul,
until v24) moves l and lse by n_tiles·δ: at S = 32768 float32's lse was 100× naive's error and out
13×, while every shorter test passed. Forward and backward, every kernel family and dtype, the
TF32 forward's narrowest tile (the most key tiles), each dtype's default kernels, and the CPU twin;
the float64-oracle criterion with naive in the same precision as the yardstick."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash.oracle import oracle_attention

from helpers import poison_gpu_outputs  # noqa: F401 (autouse fixture)
from helpers import (ALL_DTYPES, assert_matches_oracle, case_seed, family_cases, randn,
                     skip_family_here)
from issue12_helpers import check_dense

#: queries, keys, head dim: S / 16 = 1250 key tiles at the narrowest tile
T, S, D = 97, 20011, 64


def _inputs(xp, dtype, seed):
    """Standard-normal q, k, v (scores of standard deviation 1 at scale 1/sqrt(d): lse ~ 10.4,
    where m·mul's rounding is 5e-7) and dout, two heads."""
    q = randn(xp, (2, T, D), dtype, seed)
    k = randn(xp, (2, S, D), dtype, seed + 1)
    v = randn(xp, (2, S, D), dtype, seed + 2)
    dout = randn(xp, (2, T, D), dtype, seed + 3)
    return q, k, v, dout


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_long_keys_on_the_twin(causal):
    q, k, v, dout = _inputs(np, np.float32, case_seed("long-twin", causal))
    check_dense(np, q, k, v, dout, dtype=np.float32, name="long keys twin",
                fwd_tile=TileConfig(16, 64), bwd_tile=TileConfig(64, 16), causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("fam,dtype,tiles,dets", family_cases())
def test_long_keys_through_every_family(fam, dtype, tiles, dets, causal):
    from cuflash._xp import cupy_module
    skip_family_here(fam, dtype)
    xp = cupy_module()
    q, k, v, dout = _inputs(xp, dtype, case_seed("long-family", fam, causal))
    check_dense(xp, q, k, v, dout, dtype=dtype, name=f"long keys {fam}", fwd_tile=tiles[0],
                bwd_tile=tiles[1], dets=dets, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_long_keys_default_kernels(dtype):
    from cuflash._xp import cupy_module
    if dtype is None:
        pytest.skip("no bfloat16 (ml_dtypes)")
    xp = cupy_module()
    q, k, v, dout = _inputs(xp, dtype, case_seed("long-default", str(dtype)))
    check_dense(xp, q, k, v, dout, dtype=dtype, name="long keys default", dets=(True, False))


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [TileConfig(64, 16, 4, 2, "tf32x3"),
                                  TileConfig(64, 16, 4, 2, "tf32")], ids=lambda t: t.kernel)
def test_long_keys_tf32_forward(tile):
    """float32's TF32 forward at 16-key tiles (1250 of them): out and lse; naive in the kernel's
    precision ('highest': float32; 'tf32': TF32 products)."""
    from cuflash import precision
    from cuflash._xp import cupy_module
    xp = cupy_module()
    q, k, v, _ = _inputs(xp, np.float32, case_seed("long-tf32", tile.kernel))
    prec = precision.of_family(tile.kernel)
    ref = oracle_attention(q, k, v)
    got = cuflash.attention(q, k, v, tile=tile, precision=prec, return_lse=True)
    naive = cuflash.naive_attention(q, k, v, precision="tf32" if prec == "tf32" else "ieee",
                                    return_lse=True)
    for what, g, r, n in zip(("out", "lse"), got, ref, naive):
        assert_matches_oracle(g, r, n, dtype="float32", name=f"{what} long keys {tile.kernel}",
                              kind=what)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["ieee", "highest"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_long_sequence_float32(d, causal, precision):
    """float32 at T = S = 16384, one head, forward and backward (the backward runs on the CUDA
    cores in every precision): a sum over every key (out, dq) or every query (dk, dv) kept as
    one running FFMA chain read 2-4.5x naive float32's error here (dv 4.35x at d = 128 causal)
    and passed at T = 97 (NOTES v25). The worst of 16384 rows is what shows it. The reference is
    naive attention in float64 on the GPU (checked against the oracle in test_naive; the NumPy
    oracle would need ~10 GB and a minute here)."""
    from cuflash._xp import cupy_module, to_numpy
    from helpers import grad_scale
    from issue12_helpers import criterion
    xp = cupy_module()
    n = 16384
    seed = case_seed("long-f32", d, causal, precision)
    q, k, v, dout = (randn(xp, (1, n, d), np.float32, seed + i) for i in range(4))

    def naive(*x):
        out, lse = cuflash.naive_attention(*x[:3], causal=causal, return_lse=True)
        grads = cuflash.naive_attention_backward(x[3], *x[:3], causal=causal)
        return [to_numpy(a) for a in (out, lse, *grads)]

    ref = naive(*(x.astype(xp.float64) for x in (q, k, v, dout)))
    yard = naive(q, k, v, dout)
    out, lse, res = cuflash.attention(q, k, v, causal=causal, precision=precision,
                                      return_lse=True, return_residuals=True)
    got = [out, lse, *cuflash.attention_backward(dout, res)]
    scale = grad_scale(*ref[2:])
    for what, g, r, y in zip(("out", "lse", "dq", "dk", "dv"), got, ref, yard):
        criterion(g, r, y, dtype="float32", name=f"{what} long float32 {precision}", kind=what,
                   floor_scale=scale if what.startswith("d") else None)
