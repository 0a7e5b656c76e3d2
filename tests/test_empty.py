"""Zero-size problems on every launch path (issue: a zero-size batch once killed the CUDA
context). Batch 0, heads 0, T = 0 and S = 0 with T > 0, forward and backward, each kernel family
and dQ mode: results of the right shapes, dtypes and values, and then a real call in the same
process, checked against the oracle, shows that the context survived."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash._xp import accum_dtype, to_numpy
from cuflash.oracle import oracle_attention, oracle_backward, rel_error
from helpers import make_inputs

# (name, q shape, k/v shape): d = 16 everywhere
CASES = [("batch0", (0, 3, 17, 16), (1, 3, 20, 16)),
         ("heads0", (2, 0, 17, 16), (2, 0, 20, 16)),
         ("T0", (2, 3, 0, 16), (2, 3, 20, 16)),
         ("S0", (2, 3, 17, 16), (2, 3, 0, 16)),
         ("T0_S0", (2, 3, 0, 16), (2, 3, 0, 16))]

# (id, dtype, forward tile, backward tile, deterministic): every kernel family; None = default
FAMILIES = [("default-f16", np.float16, None, None, True),
            ("default-f32", np.float32, None, None, True),
            ("simt", np.float32, TileConfig(16, 16, 4, 1, "simt"), TileConfig(16, 16, 4, 1, "simt"), True),
            ("simt-atomic", np.float32, None, TileConfig(16, 16, 4, 1, "simt"), False),
            ("mma", np.float16, TileConfig(64, 32, 4, 1, "mma"), TileConfig(64, 64, 4, 1, "mma"), True),
            ("mma-atomic", np.float16, None, TileConfig(64, 128, 8, 2, "mma"), False),
            ("wgmma", np.float16, TileConfig(128, 64, 8, 3, "wgmma"), TileConfig(64, 64, 4, 2, "wgmma"), True),
            ("wgmma-ws", np.float16, TileConfig(128, 128, 12, 2, "wgmma"),
             TileConfig(64, 128, 12, 2, "wgmma"), True)]


def _skip_unsupported(xp, fwd_tile, bwd_tile):
    if xp is np:
        return
    from cuflash.gpu import ops
    if any(t is not None and t.kernel == "wgmma" for t in (fwd_tile, bwd_tile)) \
            and ops.device_arch() != "sm_90":
        pytest.skip("wgmma kernels need an sm_90 GPU")


def _real_call_works(xp, dtype, fwd_tile, bwd_tile, deterministic):
    """A small causal forward and backward after the empty one, against the float64 oracle."""
    q, k, v = make_inputs(xp, (2, 33, 64), (2, 40, 64), dtype, seed=501)
    do = make_inputs(xp, (2, 33, 64), (2, 1, 64), dtype, seed=502)[0]
    out, lse = cuflash.attention(q, k, v, causal=True, tile=fwd_tile, return_lse=True)
    grads = cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out, lse, causal=True),
                                       tile=bwd_tile, deterministic=deterministic)
    ref, _ = oracle_attention(q, k, v, causal=True)
    refs = oracle_backward(do, q, k, v, causal=True)
    tol = 1e-2 if np.dtype(dtype).itemsize == 2 else 1e-5
    assert rel_error(out, ref) < tol
    for g, r in zip(grads, refs):
        assert rel_error(g, r) < 5 * tol


@pytest.mark.parametrize("fam,dtype,fwd_tile,bwd_tile,det", FAMILIES, ids=[f[0] for f in FAMILIES])
@pytest.mark.parametrize("name,q_shape,k_shape", CASES, ids=[c[0] for c in CASES])
def test_zero_size(xp, fam, dtype, fwd_tile, bwd_tile, det, name, q_shape, k_shape):
    _skip_unsupported(xp, fwd_tile, bwd_tile)
    q, k, v = make_inputs(xp, q_shape, k_shape, dtype, seed=500)
    lead = np.broadcast_shapes(q_shape[:-2], k_shape[:-2])
    T, S, d = q_shape[-2], k_shape[-2], q_shape[-1]
    out, lse = cuflash.attention(q, k, v, causal=True, tile=fwd_tile, return_lse=True)
    assert out.shape == lead + (T, d) and out.dtype == np.dtype(dtype)
    assert lse.shape == lead + (T,) and lse.dtype == accum_dtype(dtype)
    # a query that sees no key: out = 0, lse = -inf (S = 0 here means every query)
    assert not to_numpy(out).any() if S == 0 else True
    assert np.isneginf(to_numpy(lse)).all() if S == 0 else True
    do = xp.ones_like(out)
    dq, dk, dv = cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out, lse, causal=True),
                                            tile=bwd_tile, deterministic=det)
    for g, x in zip((dq, dk, dv), (q, k, v)):
        assert g.shape == x.shape and g.dtype == x.dtype
        assert not to_numpy(g).any()       # nothing to differentiate: all gradients are 0
    _real_call_works(xp, dtype, fwd_tile, bwd_tile, det)


@pytest.mark.parametrize("q_shape,k_shape", [((1, 4, 5, 3), (2, 1, 0, 3)),
                                             ((1, 1, 5, 3), (2, 3, 0, 3)),
                                             ((4, 5, 3), (2, 1, 0, 3))], ids=str)
def test_no_key_broadcast_lse_shape(xp, q_shape, k_shape):
    """S = 0 with q's leading dims broadcast by k/v's: naive's (and so the oracle's) lse had q's
    own leading dims while out had the broadcast ones (P V broadcast them); every path gives
    lead + (T,) as cuflash.attention does."""
    q, k, v = make_inputs(xp, q_shape, k_shape, np.float32, seed=503)
    lead = np.broadcast_shapes(q_shape[:-2], k_shape[:-2])
    for out, lse in (cuflash.attention(q, k, v, return_lse=True),
                     cuflash.naive_attention(q, k, v, return_lse=True),
                     oracle_attention(q, k, v)):
        assert out.shape == lead + (5, 3) and lse.shape == lead + (5,)
        assert not to_numpy(out).any() and np.isneginf(to_numpy(lse)).all()
