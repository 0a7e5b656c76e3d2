"""Grouped-query and multi-query attention (issue 12): k and v with Hkv heads on axis -3, q with
Hq = G · Hkv; query head h reads kv head h // G; dk and dv come back with k's and v's shapes,
summed over each group. Forward and backward against the float64 oracle on the twin and (xp
fixture) the CUDA kernels, for G in {1, 2, 4, 8, Hq}; the oracle itself against a head-by-head
definition; equality with K/V repeated by hand; broadcasting; errors."""
import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash._xp import to_numpy
from cuflash.mask_mod import MaskMod
from cuflash.oracle import oracle_attention, oracle_backward, rel_error

from helpers import poison_gpu_outputs  # noqa: F401 (autouse fixture)
from helpers import ALL_DTYPES, FLOORS, PeakTracker, case_seed, dtype_param, randn
from issue12_helpers import check_dense, kernel_route

HQ = 16
GROUPS = [1, 2, 4, 8, HQ]
T, S, D = 37, 45, 24


def _tiles(xp):
    return (TileConfig(16, 32), TileConfig(32, 16)) if xp is np else (None, None)


def _inputs(xp, dtype, G, *, B=1, Hq=HQ, T=T, S=S, d=D, d_v=None, seed=0):
    d_v = d if d_v is None else d_v
    Hkv = Hq // G
    q = randn(xp, (B, Hq, T, d), dtype, seed)
    k = randn(xp, (B, Hkv, S, d), dtype, seed + 1)
    v = randn(xp, (B, Hkv, S, d_v), dtype, seed + 2)
    dout = randn(xp, (B, Hq, T, d_v), dtype, seed + 3)
    return q, k, v, dout


@pytest.mark.parametrize("G", GROUPS, ids=lambda g: f"G{g}")
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_gqa_matches_oracle(xp, dtype, G):
    q, k, v, dout = _inputs(xp, dtype, G, seed=case_seed("gqa", G))
    fwd, bwd = _tiles(xp)
    out, lse, grads = check_dense(xp, q, k, v, dout, dtype=dtype, name=f"G={G}", fwd_tile=fwd,
                                  bwd_tile=bwd, dets=(True, False), causal=True)
    assert out.shape == (1, HQ, T, D) and lse.shape == (1, HQ, T)
    assert grads[True][1].shape == (1, HQ // G, S, D)


@pytest.mark.gpu
@pytest.mark.parametrize("det", [True, False], ids=["det", "atomic"])
@pytest.mark.parametrize("G,ranks", [pytest.param(4, 1, marks=pytest.mark.slow), (4, 2),
                                     pytest.param(4, 4, marks=pytest.mark.slow),
                                     pytest.param(HQ, 16, marks=pytest.mark.slow),
                                     pytest.param(HQ, None, marks=pytest.mark.slow)],
                         ids=lambda x: f"{x}")
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_gqa_group_sum_in_order(dtype, G, ranks, det, monkeypatch):
    """The dK/dV kernels split a kv head's G query heads over `ranks` blocks per key tile (one
    walking all G; one per query head; between) and sum the ranks through float accumulators in
    a fixed order (kernels_cu/epilogue.cuh, store_dkdv): with many key tiles, a ragged last one,
    two sequences and every family's default tile, the oracle criterion holds and dk, dv are the
    same bits on every run (dq too when det). None: the default rule (gpu/ops.py)."""
    from cuflash._xp import cupy_module
    from cuflash.gpu import ops
    monkeypatch.setattr(ops, "_GROUP_RANKS", ranks)
    xp = cupy_module()
    q, k, v, dout = _inputs(xp, dtype, G, B=2, T=300, S=333, d=64,
                            seed=case_seed("gqa-order", G, det))
    _, _, grads = check_dense(xp, q, k, v, dout, dtype=dtype, name=f"G={G} ordered",
                              dets=(det,), causal=True)
    out, lse, res = cuflash.attention(q, k, v, causal=True, return_lse=True,
                                      return_residuals=True)
    runs = [cuflash.attention_backward(dout, res, deterministic=det) for _ in range(3)]
    for other in runs[1:]:
        for name, a, b in zip(("dq", "dk", "dv"), runs[0], other):
            if det or name != "dq":
                np.testing.assert_array_equal(to_numpy(a), to_numpy(b), err_msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("bfloat16")])
def test_gqa_warp_specialized_dkdv(dtype, d, ranks, monkeypatch):
    """The warp-specialized dK/dV kernel (flash_bwd_wgmma_ws.cu) walks the query heads of its
    chunk through one ring (the producer's tile count runs on over the heads) and, with ranks >
    1, sums the group through float accumulators at block barriers its producer warpgroup meets
    too: the oracle criterion and the same bits on a second run."""
    from cuflash._xp import cupy_module
    from cuflash.gpu import ops
    if ops.device_arch() != "sm_90":
        pytest.skip("wgmma kernels need an sm_90 GPU")
    monkeypatch.setattr(ops, "_GROUP_RANKS", ranks)
    xp = cupy_module()
    tile = TileConfig(64, 128, 12, 2, "wgmma")
    q, k, v, dout = _inputs(xp, dtype, 4, B=2, T=300, S=333, d=d,
                            seed=case_seed("gqa-ws", d, ranks))
    check_dense(xp, q, k, v, dout, dtype=dtype, name=f"ws dK/dV ranks={ranks}",
                bwd_tile=tile, dets=(True, False), causal=True)
    _, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)
    a, b = (cuflash.attention_backward(dout, res, tile=tile) for _ in range(2))
    for name, x, y in zip(("dq", "dk", "dv"), a, b):
        np.testing.assert_array_equal(to_numpy(x), to_numpy(y), err_msg=name)


def test_group_ranks_rule(monkeypatch):
    """The fewest ranks per group (a divisor of G) giving one and a half waves of blocks (the
    dK/dV kernel's resident blocks), G at most; an override wins."""
    from cuflash.gpu import ops
    wave = 200                                     # 1.5 waves: 300 blocks
    assert ops._group_ranks(1, 10, wave) == 1
    assert ops._group_ranks(8, 300, wave) == 1     # enough blocks with one rank
    assert ops._group_ranks(8, 299, wave) == 2
    assert ops._group_ranks(8, 75, wave) == 4
    assert ops._group_ranks(8, 74, wave) == 8
    assert ops._group_ranks(8, 10, wave) == 8      # never more than G
    assert ops._group_ranks(6, 60, wave) == 6      # divisors of 6: 1, 2, 3, 6
    assert ops._group_ranks(6, 100, wave) == 3
    monkeypatch.setattr(ops, "_GROUP_RANKS", 2)
    assert ops._group_ranks(8, 10, wave) == 2 and ops._group_ranks(1, 10, wave) == 1


def _variants(xp):
    slopes = xp.asarray(np.geomspace(0.5, 0.004, HQ).astype(np.float32))   # one per query head
    return {
        "dense": dict(),
        "window_softcap": dict(window=(12, 5), softcap=2.0),
        "alibi_causal": dict(causal=True, alibi_slopes=slopes),
        # h is the query head: even query heads see every key, odd ones a causal band
        "mask_mod_h": dict(mask_mod=MaskMod("(h % 2 == 0) | (j <= i + 8)")),
    }


@pytest.mark.parametrize("name", ["dense", "window_softcap", "alibi_causal", "mask_mod_h"])
@pytest.mark.parametrize("G", [4, HQ], ids=lambda g: f"G{g}")
@pytest.mark.parametrize("dtype", [dtype_param("bfloat16"), dtype_param("float32")])
def test_gqa_variants(xp, dtype, G, name):
    """Per-query-head settings (ALiBi slopes, a mask_mod of h) differ inside a group."""
    kw = _variants(xp)[name]
    q, k, v, dout = _inputs(xp, dtype, G, seed=case_seed("gqa-var", G, name))
    fwd, bwd = _tiles(xp)
    check_dense(xp, q, k, v, dout, dtype=dtype, name=f"G={G} {name}", fwd_tile=fwd,
                bwd_tile=bwd, **kw)


def _head_by_head(q, k, v, dout, G, **kw):
    """The oracle one query head at a time with kv head h // G, dk and dv summed by hand: no
    code of the grouped path."""
    B, Hq = q.shape[:2]
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    lse = np.zeros(q.shape[:-1])
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    slopes = kw.pop("alibi_slopes", None)
    for b in range(B):
        for h in range(Hq):
            one = dict(kw, alibi_slopes=None if slopes is None else slopes[h:h + 1])
            args = (q[b, h][None], k[b, h // G][None], v[b, h // G][None])
            o, l = oracle_attention(*args, **one)
            g = oracle_backward(dout[b, h][None], *args, **one)
            out[b, h], lse[b, h] = o[0], l[0]
            dq[b, h] = g[0][0]
            dk[b, h // G] += g[1][0]
            dv[b, h // G] += g[2][0]
    return out, lse, (dq, dk, dv)


@pytest.mark.parametrize("G", [2, 4], ids=lambda g: f"G{g}")
def test_oracle_gqa_is_head_by_head(G):
    """The yardstick: the oracle's grouped broadcast equals the oracle run head by head."""
    q, k, v, dout = _inputs(np, np.float64, G, B=2, Hq=8, T=9, S=13, d=8, d_v=5, seed=G)
    kw = dict(causal=True, window=(6, None), softcap=3.0,
              alibi_slopes=np.linspace(0.1, 0.8, 8))
    want_out, want_lse, want = _head_by_head(q, k, v, dout, G, **kw)
    out, lse = oracle_attention(q, k, v, **kw)
    np.testing.assert_allclose(out, want_out, rtol=0, atol=1e-14)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-15, atol=0)
    for name, got, w in zip(("dq", "dk", "dv"), oracle_backward(dout, q, k, v, **kw), want):
        np.testing.assert_allclose(got, w, rtol=0, atol=1e-13, err_msg=name)


@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("bfloat16")])
def test_naive_gqa_close_to_oracle(dtype):
    """The 16-bit yardstick under GQA (test_naive.py's bounds, in units of u)."""
    from test_naive import _bounds, _check
    from helpers import grad_scale
    q, k, v, dout = _inputs(np, dtype, 4, B=2, Hq=8, seed=3)
    u, b = _bounds(dtype)
    ref, _ = oracle_attention(q, k, v, causal=True)
    _check("out", cuflash.naive_attention(q, k, v, causal=True), ref, u, b)
    refs = oracle_backward(dout, q, k, v, causal=True)
    grads = cuflash.naive_attention_backward(dout, q, k, v, causal=True)
    for name, g, x, r in zip(("dq", "dk", "dv"), grads, (q, k, v), refs):
        assert g.shape == x.shape and g.dtype == x.dtype
        _check(name, g, r, u, b, floor_scale=grad_scale(*refs))


@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float32")])
def test_gqa_equals_repeated_kv(xp, dtype):
    """GQA is attention with each kv head repeated G times: the same output bits, and dk, dv
    the float32 sums over each group of the repeated gradients, rounded once."""
    G = 4
    q, k, v, dout = _inputs(xp, dtype, G, B=2, Hq=8, seed=7)
    out, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)
    k_rep, v_rep = (xp.repeat(x, G, axis=1) for x in (k, v))
    out_r, res_r = cuflash.attention(q, k_rep, v_rep, causal=True, return_residuals=True)
    np.testing.assert_array_equal(to_numpy(out), to_numpy(out_r))
    dq, dk, dv = cuflash.attention_backward(dout, res)
    dq_r, dk_r, dv_r = cuflash.attention_backward(dout, res_r)
    np.testing.assert_array_equal(to_numpy(dq), to_numpy(dq_r))
    for g, g_rep in ((dk, dk_r), (dv, dv_r)):
        g_rep = to_numpy(g_rep)
        summed = g_rep.astype(np.float32).reshape(2, 2, G, *g_rep.shape[2:]).sum(axis=2)
        if xp is np:
            np.testing.assert_array_equal(to_numpy(g), summed.astype(dtype))
        else:
            assert rel_error(g, summed) <= FLOORS[np.dtype(dtype).name]


def test_gqa_with_broadcast_leading_dims(xp):
    """GQA and NumPy broadcasting together: q (3, 8, T, d) against k with one batch entry and
    2 heads and v with one batch entry and 1 head (v broadcast over its heads too); a 3-D q
    (8, T, d) against k, v (2, S, d)."""
    dtype = np.float32
    q = randn(xp, (3, 8, T, D), dtype, 1)
    k = randn(xp, (1, 2, S, D), dtype, 2)
    v = randn(xp, (1, 1, S, 16), dtype, 3)
    dout = randn(xp, (3, 8, T, 16), dtype, 4)
    fwd, bwd = _tiles(xp)
    check_dense(xp, q, k, v, dout, dtype=dtype, name="broadcast", fwd_tile=fwd, bwd_tile=bwd,
                causal=True)
    q3, k3, v3 = randn(xp, (8, T, D), dtype, 5), randn(xp, (2, S, D), dtype, 6), \
        randn(xp, (2, S, D), dtype, 7)
    check_dense(xp, q3, k3, v3, randn(xp, (8, T, D), dtype, 8), dtype=dtype, name="3-D",
                fwd_tile=fwd, bwd_tile=bwd)


def test_gqa_vjp(xp):
    q, k, v, dout = _inputs(xp, np.float64, 4, Hq=8, seed=11)
    out, vjp = cuflash.attention_vjp(q, k, v, causal=True)
    assert rel_error(out, oracle_attention(q, k, v, causal=True)[0]) <= 1e-12
    for g, r in zip(vjp(dout), oracle_backward(dout, q, k, v, causal=True)):
        assert rel_error(g, r) <= 1e-12


def test_gqa_kernel_route():
    """The GPU route on the CPU (the twin in the kernels' place): K/V reach the 'kernels' with
    their kv heads only (FakeKernels checks), dK/dV come back summed over each group."""
    q, k, v, dout = _inputs(np, np.float16, 4, Hq=8, d=20, seed=13)
    with kernel_route() as fake:
        check_dense(np, q, k, v, dout, dtype=np.float16, name="route", causal=True)
    assert fake.calls == [("forward", 24), ("backward", 24)]


# -- errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("hq,hkv", [(6, 4), (3, 2), (8, 3)])
def test_heads_must_divide(xp, hq, hkv):
    q = randn(xp, (2, hq, 5, 16), np.float32, 1)
    k = randn(xp, (2, hkv, 7, 16), np.float32, 2)
    v = randn(xp, (2, hkv, 7, 16), np.float32, 3)
    match = (rf"q has {hq} heads \(q.shape\[-3\]\) and k, v have {hkv} .*must be a multiple of "
             rf"the kv heads")
    with pytest.raises(ValueError, match=match):
        cuflash.attention(q, k, v)
    with pytest.raises(ValueError, match=match):
        cuflash.naive_attention(q, k, v)


def test_fewer_query_heads_than_kv_heads_do_not_broadcast(xp):
    q = randn(xp, (2, 2, 5, 16), np.float32, 1)
    k = randn(xp, (2, 4, 7, 16), np.float32, 2)
    with pytest.raises(ValueError, match=r"leading dims of q \(2, 2\), k \(2, 4\) and v "
                                         r"\(2, 4\) do not broadcast"):
        cuflash.attention(q, k, k)


def test_k_and_v_heads_must_broadcast(xp):
    q = randn(xp, (2, 8, 5, 16), np.float32, 1)
    k = randn(xp, (2, 4, 7, 16), np.float32, 2)
    v = randn(xp, (2, 2, 7, 16), np.float32, 3)
    with pytest.raises(ValueError, match=r"do not broadcast"):
        cuflash.attention(q, k, v)


@pytest.mark.gpu
@pytest.mark.parametrize("G", [4, 8], ids=lambda g: f"G{g}")
def test_gqa_extra_memory_is_the_outputs_only(G):
    """Issue 12: GQA reads each kv head in place. The forward's pool growth is out and lse (each
    rounded to the pool's 512-byte blocks), nothing the size of K or V repeated; the backward's
    is at most its gradients, D (lse's size) and, when a kv head's blocks split its group, the
    float dK/dV accumulators (ops._backward) and their counters, where K and V repeated per
    query head would add (G - 1)·(k + v) bytes and G-times dK/dV."""
    import cupy as cp
    q, k, v, dout = _inputs(cp, np.float16, G, B=2, T=1024, S=1024, d=128, seed=case_seed(G))
    out, res = cuflash.attention(q, k, v, causal=True, return_residuals=True)   # compiles
    cuflash.attention_backward(dout, res)
    cp.cuda.Device().synchronize()
    up = lambda n: -(-n // 512) * 512
    with PeakTracker(cp) as fwd:
        out2, lse2 = cuflash.attention(q, k, v, causal=True, return_lse=True)
    assert fwd.above <= up(out2.nbytes) + up(lse2.nbytes) + 512, (fwd.above, out2.nbytes)
    del out2, lse2
    with PeakTracker(cp) as bwd:
        grads = cuflash.attention_backward(dout, res)
    own = sum(up(g.nbytes) for g in grads) + up(res.lse.nbytes) + 2 * (k.nbytes + v.nbytes)
    assert bwd.above <= own + 65536, (bwd.above, own, (G - 1) * (k.nbytes + v.nbytes))
