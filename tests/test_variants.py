"""Attention variants on the shared mask / score-modifier layer: sliding and two-sided windows
(alone and with causal), softcap, ALiBi, custom mask_mods, and their combinations. Forward and
backward of every path (the CPU twin; on a GPU every kernel family, both dQ modes) against the
float64 oracle, which runs the same rule through cuflash.naive; the naive path itself is checked
against the oracle first. Odd shapes, T != S, rows that see no key."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash._xp import dtype_name, to_numpy
from cuflash.mask_mod import MaskMod
from cuflash.oracle import oracle_attention, oracle_backward, rel_error
from helpers import (ALL_DTYPES, assert_matches_oracle, family_cases, grad_scale, make_inputs,
                     skip_family_here)

LEAD = (2, 3)    # (batch, heads)


def _doc_ids(n, seed):
    """Segment ids of a packed batch: (batch, n) runs of random lengths."""
    rng = np.random.default_rng(seed)
    return np.stack([np.cumsum(rng.random(n) < 0.08) for _ in range(LEAD[0])]).astype(np.int32)


def variants(xp, T, S):
    """name -> keyword arguments of attention (arrays on xp)."""
    slopes = xp.asarray(np.array([0.5, 0.25, 0.125], dtype=np.float32))
    # document ids of the keys; query i sits at key position i + S - T (bottom-right aligned),
    # queries before the first key get a document of their own (-1)
    ids_k = _doc_ids(S, 11)
    pos = np.arange(T) + S - T
    ids_q = np.where(pos >= 0, ids_k[:, np.clip(pos, 0, S - 1)], -1).astype(np.int32)
    return {
        "sliding16": dict(causal=True, window=(16, None)),
        "window5_7": dict(window=(5, 7)),
        "window_right9": dict(window=(None, 9)),
        "softcap": dict(causal=True, softcap=2.0),
        # Gemma-2's cap with scores well past it (scale 4: |s| up to ~100), where the kernels'
        # tanh of 16-bit inputs (tanh.approx) is furthest from tanh in absolute terms
        "softcap30": dict(softcap=30.0, scale=4.0),
        "alibi": dict(alibi_slopes=slopes),
        "cap_alibi_window": dict(window=(40, 3), softcap=1.5, alibi_slopes=slopes),
        "doc_causal": dict(causal=True, mask_mod=MaskMod("doc_q[b, i] == doc_k[b, j]",
                                                         doc_q=ids_q, doc_k=ids_k)),
        "prefix_lm": dict(mask_mod=MaskMod("(j <= i) | (j < prefix)", prefix=24)),
    }


VARIANT_NAMES = ["sliding16", "window5_7", "window_right9", "softcap", "softcap30", "alibi",
                 "cap_alibi_window", "doc_causal", "prefix_lm"]
SHAPES = [(97, 131, 64), (130, 70, 40)]


def _check(xp, dtype, T, S, d, name, fwd_tile=None, bwd_tile=None, dets=(True, False), seed=0):
    kw = variants(xp, T, S)[name]
    q, k, v = make_inputs(xp, LEAD + (T, d), LEAD + (S, d), dtype, seed=seed)
    do = make_inputs(xp, LEAD + (T, d), LEAD + (1, d), dtype, seed=seed + 1)[0]
    ref_out, ref_lse = oracle_attention(q, k, v, **kw)
    if xp is not np:
        from cuflash.gpu.ops import poisoned_outputs
    else:
        import contextlib
        poisoned_outputs = contextlib.nullcontext
    with poisoned_outputs():
        out, lse = cuflash.attention(q, k, v, tile=fwd_tile, return_lse=True, **kw)
    naive_out, naive_lse = cuflash.naive_attention(q, k, v, return_lse=True, **kw)
    assert_matches_oracle(out, ref_out, naive_out, dtype=dtype, name=f"{name} out", kind="out")
    assert_matches_oracle(lse, ref_lse, naive_lse, dtype=dtype, name=f"{name} lse", kind="lse")
    refs = oracle_backward(do, q, k, v, **kw)
    naive = cuflash.naive_attention_backward(do, q, k, v, **kw)
    lse_scale = float(np.abs(ref_lse[np.isfinite(ref_lse)]).max(initial=0.0))
    for det in dets:
        with poisoned_outputs():
            grads = cuflash.attention_backward(do, cuflash.Residuals(q, k, v, out, lse, **kw),
                                               tile=bwd_tile, deterministic=det)
        for g, r, n, gname in zip(grads, refs, naive, ("dq", "dk", "dv")):
            assert_matches_oracle(g, r, n, dtype=dtype, name=f"{name} {gname} (det={det})",
                                  floor_scale=grad_scale(*refs), kind=gname,
                                  lse_scale=lse_scale)


@pytest.mark.parametrize("name", VARIANT_NAMES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_naive_variants_match_oracle(dtype, name):
    """The naive path (the yardstick of every check below) against the float64 oracle."""
    T, S, d = 61, 45, 32
    kw = variants(np, T, S)[name]
    q, k, v = make_inputs(np, LEAD + (T, d), LEAD + (S, d), dtype, seed=3)
    ref, ref_lse = oracle_attention(q, k, v, **kw)
    out, lse = cuflash.naive_attention(q, k, v, return_lse=True, **kw)
    tol = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 8e-2}[dtype_name(dtype)]
    assert rel_error(out, ref) < tol
    np.testing.assert_array_equal(np.isneginf(to_numpy(lse)), np.isneginf(ref_lse))


@pytest.mark.parametrize("name", VARIANT_NAMES)
@pytest.mark.parametrize("T,S,d", SHAPES, ids=lambda x: str(x))
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_twin_variants(dtype, T, S, d, name):
    _check(np, dtype, T, S, d, name, fwd_tile=TileConfig(32, 16), bwd_tile=TileConfig(16, 32))


# -- every kernel family on the GPU -------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", VARIANT_NAMES)
@pytest.mark.parametrize("T,S,d", SHAPES, ids=lambda x: str(x))
@pytest.mark.parametrize("fam,dtype,tiles,dets", family_cases())
def test_kernel_variants(fam, dtype, tiles, dets, T, S, d, name):
    import cupy as cp
    skip_family_here(fam, dtype)
    _check(cp, dtype, T, S, d, name, fwd_tile=tiles[0], bwd_tile=tiles[1], dets=dets,
           seed=hash((fam, name, T)) % 1000)


@pytest.mark.gpu
@pytest.mark.parametrize("window,open_", [((2 ** 40, 9), (None, 9)), ((7, 2 ** 31 + 5), (7, None)),
                                          ((1 << 30, 0), (None, 0))])
def test_window_bound_past_any_sequence_is_open(window, open_):
    """A window side wider than any sequence (2^30 and more: the kernels' kUnbounded, which the
    host clamps to) gives the same bits as the open side, forward and backward."""
    import cupy as cp
    q, k, v = make_inputs(cp, (*LEAD, 37, 64), (*LEAD, 45, 64), np.float16, 5)
    do = cp.asarray(np.random.default_rng(6).standard_normal(q.shape).astype(np.float16))
    (o1, r1), (o2, r2) = (cuflash.attention(q, k, v, window=w, return_residuals=True)
                          for w in (window, open_))
    assert cp.array_equal(o1, o2) and cp.array_equal(r1.lse, r2.lse)
    assert not bool(cp.isnan(o1).any())
    for g1, g2 in zip(cuflash.attention_backward(do, r1), cuflash.attention_backward(do, r2)):
        assert cp.array_equal(g1, g2)
