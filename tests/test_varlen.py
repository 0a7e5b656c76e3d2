"""Variable-length packed batches (issue 12): cuflash.attention_varlen and
attention_varlen_backward against the float64 oracle (one sequence at a time) on the twin and,
through the xp fixture, the CUDA kernels: lengths 0, 1, odd and one sequence longer than all
the others together, T_b != S_b, causal and not, windows, softcap, ALiBi, GQA/MQA, head_dim_v !=
head_dim, strided inputs; equality with dense attention; residuals; every bad argument."""
import contextlib

import numpy as np
import pytest

import cuflash
from cuflash import TileConfig
from cuflash._xp import to_numpy
from cuflash.oracle import (oracle_attention, oracle_attention_varlen, oracle_backward,
                            oracle_backward_varlen)

from helpers import poison_gpu_outputs  # noqa: F401 (autouse fixture)
from helpers import ALL_DTYPES, case_seed, dtype_param, randn
from issue12_helpers import check_varlen, cu_seqlens, kernel_route

#: (query lengths, key lengths). "self": T_b = S_b, with two sequences of equal length (one
#: gathered group) and 64 > the other lengths together (23). "cross": T_b != S_b, keys fewer
#: than queries (3 vs 1: with causal the first queries see no key), a sequence with queries and
#: no keys (out 0, lse -inf), one with keys and no queries (dk, dv 0), 40 > 15 and 47 > 21.
BATCHES = {
    "self": ([1, 7, 3, 64, 0, 7, 5], [1, 7, 3, 64, 0, 7, 5]),
    # "self" with one array for both: cu_seqlens_k is cu_seqlens_q, so the kernels of packed
    # self-attention run (plan.Variant.same_lens: one array read, the diagonal the main one)
    "shared": ([1, 7, 3, 64, 0, 7, 5], [1, 7, 3, 64, 0, 7, 5]),
    "cross": ([1, 9, 3, 0, 40, 2], [5, 9, 1, 6, 47, 0]),
}
HQ, D = 4, 24


def _tiles(xp):
    return (TileConfig(16, 32), TileConfig(32, 16)) if xp is np else (None, None)


def _packed(xp, dtype, batch, *, Hq=HQ, Hkv=HQ, d=D, d_v=None, seed=0):
    lq, lk = BATCHES[batch] if isinstance(batch, str) else batch
    d_v = d if d_v is None else d_v
    q = randn(xp, (sum(lq), Hq, d), dtype, seed)
    k = randn(xp, (sum(lk), Hkv, d), dtype, seed + 1)
    v = randn(xp, (sum(lk), Hkv, d_v), dtype, seed + 2)
    dout = randn(xp, (sum(lq), Hq, d_v), dtype, seed + 3)
    cq = cu_seqlens(lq, xp)
    return q, k, v, dout, cq, cq if batch == "shared" else cu_seqlens(lk, xp)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_varlen_matches_oracle(xp, dtype, batch, causal):
    q, k, v, dout, cq, ck = _packed(xp, dtype, batch, seed=case_seed("varlen", batch, causal))
    fwd, bwd = _tiles(xp)
    out, lse, _ = check_varlen(xp, q, k, v, cq, ck, dout, dtype=dtype, name=batch, tile=fwd,
                               bwd_tile=bwd, dets=(True, False), causal=causal)
    if batch == "cross":   # sequence 5 has two queries and no key
        rows = slice(sum(BATCHES["cross"][0][:5]), None)
        assert not to_numpy(out[rows]).any() and np.isneginf(to_numpy(lse[:, rows])).all()


def _variants(xp):
    return {
        "sliding": dict(causal=True, window=(8, None)),
        "window": dict(window=(5, 3)),
        "softcap": dict(causal=True, softcap=2.5),
        "alibi_heads": dict(causal=True, alibi_slopes=xp.asarray(
            np.array([0.5, 0.25, 0.125, 0.0625], np.float32))),
        "alibi_batch_heads": dict(alibi_slopes=xp.asarray(
            np.linspace(0.01, 0.6, 7 * HQ).reshape(7, HQ).astype(np.float32))),
        "all": dict(causal=True, window=(11, None), softcap=1.5, alibi_slopes=xp.asarray(
            np.array([0.3, 0.2, 0.1, 0.05], np.float32))),
    }


@pytest.mark.parametrize("name", ["sliding", "window", "softcap", "alibi_heads",
                                  "alibi_batch_heads", "all"])
@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("dtype", [dtype_param("bfloat16"), dtype_param("float32")])
def test_varlen_variants(xp, dtype, batch, name):
    kw = _variants(xp)[name]
    if name == "alibi_batch_heads":   # one slope per (sequence, head)
        kw = dict(alibi_slopes=kw["alibi_slopes"][:len(BATCHES[batch][0])])
    q, k, v, dout, cq, ck = _packed(xp, dtype, batch, seed=case_seed("var", batch, name))
    fwd, bwd = _tiles(xp)
    check_varlen(xp, q, k, v, cq, ck, dout, dtype=dtype, name=f"{batch} {name}", tile=fwd,
                 bwd_tile=bwd, **kw)


@pytest.mark.parametrize("Hkv", [2, 1], ids=["gqa", "mqa"])
@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float64")])
def test_varlen_gqa_and_head_dim_v(xp, dtype, Hkv):
    q, k, v, dout, cq, ck = _packed(xp, dtype, "cross", Hkv=Hkv, d=40, d_v=16, seed=Hkv)
    fwd, bwd = _tiles(xp)
    _, _, grads = check_varlen(xp, q, k, v, cq, ck, dout, dtype=dtype, name=f"Hkv={Hkv}",
                               tile=fwd, bwd_tile=bwd, causal=True, window=(20, None))
    dk = to_numpy(grads[True][1])
    k_rows = slice(15, 21)   # sequence 3: keys, no queries
    assert dk.shape == (sum(BATCHES["cross"][1]), Hkv, 40) and not dk[k_rows].any()


@pytest.mark.parametrize("d", [1, 59])
def test_varlen_odd_head_dims(xp, d):
    q, k, v, dout, cq, ck = _packed(xp, np.float32, "self", d=d, seed=d)
    fwd, bwd = _tiles(xp)
    check_varlen(xp, q, k, v, cq, ck, dout, dtype=np.float32, name=f"d={d}", tile=fwd,
                 bwd_tile=bwd, causal=True)


def test_varlen_kernel_route():
    """The GPU route on the CPU (the twin in the kernels' place): the packed tokens reach the
    'kernels' in place, every sequence in one launch set, at the padded head dim."""
    q, k, v, dout, cq, ck = _packed(np, np.float16, "self", d=20, seed=5)
    with kernel_route() as fake:
        check_varlen(np, q, k, v, cq, ck, dout, dtype=np.float16, name="route", causal=True)
    assert fake.calls == [("forward", 24), ("backward", 24)]


@pytest.mark.parametrize("batch", ["self", "shared"])
def test_varlen_shared_offsets_pick_their_kernels(batch):
    """One cu_seqlens array for queries and keys (self-attention) runs the kernels that read it
    alone (plan.Variant.same_lens); two arrays, even of equal values, run the general ones. Both
    against the oracle."""
    q, k, v, dout, cq, ck = _packed(np, np.float16, batch, d=24, seed=7)
    with kernel_route() as fake:
        check_varlen(np, q, k, v, cq, ck, dout, dtype=np.float16, name=batch, causal=True)
    assert [r.same_lens for r, *_ in fake.runs] == [batch == "shared"] * 2


# -- what packed means --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float32")])
def test_equal_lengths_are_dense_attention(xp, dtype):
    """A packed batch of equal lengths is dense attention on (B, H, T, d): the same bits, out
    packed as q, lse (Hq, total_q), gradients packed as q, k, v."""
    B, Tq, Sk, Hq, Hkv = 3, 21, 30, 4, 2
    q, k, v, dout, cq, ck = _packed(xp, dtype, ([Tq] * B, [Sk] * B), Hq=Hq, Hkv=Hkv, seed=17)
    kw = dict(causal=True, softcap=4.0)
    out, lse, res = cuflash.attention_varlen(q, k, v, cq, ck, return_lse=True,
                                             return_residuals=True, **kw)
    dense = lambda x, n: x.reshape(B, n, x.shape[1], x.shape[2]).transpose(0, 2, 1, 3)
    out_d, lse_d, res_d = cuflash.attention(dense(q, Tq), dense(k, Sk), dense(v, Sk),
                                            return_lse=True, return_residuals=True, **kw)
    np.testing.assert_array_equal(to_numpy(out), to_numpy(out_d.transpose(0, 2, 1, 3)).reshape(
        B * Tq, Hq, D))
    np.testing.assert_array_equal(to_numpy(lse), to_numpy(lse_d.transpose(1, 0, 2)).reshape(
        Hq, B * Tq))
    grads = cuflash.attention_varlen_backward(dout, res)
    grads_d = cuflash.attention_backward(dense(dout, Tq), res_d)
    for g, gd in zip(grads, grads_d):
        np.testing.assert_array_equal(to_numpy(g), to_numpy(gd.transpose(0, 2, 1, 3)).reshape(
            g.shape))


def test_oracle_varlen_is_per_sequence():
    """The yardstick: the varlen oracle equals the dense oracle run on each sequence alone (kv
    heads repeated by hand for GQA)."""
    q, k, v, dout, cq, ck = _packed(np, np.float64, "cross", Hq=4, Hkv=2, d=8, d_v=5, seed=2)
    kw = dict(causal=True, window=(4, None), softcap=3.0)
    out, lse = oracle_attention_varlen(q, k, v, cq, ck, **kw)
    grads = oracle_backward_varlen(dout, q, k, v, cq, ck, **kw)
    seen_k = np.zeros(k.shape[0], bool)
    for b in range(len(cq) - 1):
        rq, rk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if rq.stop == rq.start:
            continue
        seen_k[rk] = True
        heads = lambda x, rows: x[rows].transpose(1, 0, 2)
        kb, vb = (np.repeat(heads(x, rk), 2, axis=0) for x in (k, v))
        o, l = oracle_attention(heads(q, rq), kb, vb, **kw)
        np.testing.assert_allclose(out[rq], o.transpose(1, 0, 2), rtol=0, atol=1e-14)
        np.testing.assert_array_equal(lse[:, rq], l)
        dq, dk, dv = oracle_backward(heads(dout, rq), heads(q, rq), kb, vb, **kw)
        np.testing.assert_allclose(grads[0][rq], dq.transpose(1, 0, 2), rtol=0, atol=1e-13)
        for got, want in ((grads[1], dk), (grads[2], dv)):
            summed = want.reshape(2, 2, *want.shape[1:]).sum(axis=1)
            np.testing.assert_allclose(got[rk], summed.transpose(1, 0, 2), rtol=0, atol=1e-13)
    assert not grads[1][~seen_k].any() and not grads[2][~seen_k].any()


def test_varlen_strided_inputs(xp):
    """Views with any strides: q sliced from a wider array, k and v transposed from head-major
    arrays; the results equal those of contiguous copies, and come back C-contiguous."""
    q, k, v, dout, cq, ck = _packed(xp, np.float32, "cross", seed=31)
    wide = xp.concatenate([q, q], axis=2)[:, :, :D]                 # strides of a (., ., 2D)
    kt, vt = (xp.ascontiguousarray(x.transpose(1, 0, 2)).transpose(1, 0, 2) for x in (k, v))
    assert not (wide.flags.c_contiguous or kt.flags.c_contiguous)
    out, res = cuflash.attention_varlen(wide, kt, vt, cq, ck, causal=True, return_residuals=True)
    out_c, res_c = cuflash.attention_varlen(q, k, v, cq, ck, causal=True, return_residuals=True)
    np.testing.assert_array_equal(to_numpy(out), to_numpy(out_c))
    for g, gc in zip(cuflash.attention_varlen_backward(dout, res),
                     cuflash.attention_varlen_backward(dout, res_c)):
        assert g.flags.c_contiguous
        np.testing.assert_array_equal(to_numpy(g), to_numpy(gc))


def test_residuals(xp):
    """attention_backward takes the varlen residuals too; VarlenResiduals can be built by hand;
    max_seqlen at or above the real lengths is accepted."""
    q, k, v, dout, cq, ck = _packed(xp, np.float64, "self", seed=41)
    kw = dict(causal=True, max_seqlen_q=64, max_seqlen_k=100)
    out, lse, res = cuflash.attention_varlen(q, k, v, cq, ck, return_lse=True,
                                             return_residuals=True, **kw)
    assert isinstance(res, cuflash.VarlenResiduals) and isinstance(res, cuflash.Residuals)
    assert res.q is q and res.out is out and res.lse is lse and res.cu_seqlens_q is cq
    a = cuflash.attention_varlen_backward(dout, res)
    b = cuflash.attention_backward(dout, res)
    c = cuflash.attention_varlen_backward(dout, cuflash.VarlenResiduals(
        q, k, v, out, lse, cu_seqlens_q=cq, cu_seqlens_k=ck, causal=True))
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(to_numpy(x), to_numpy(y))
        np.testing.assert_array_equal(to_numpy(x), to_numpy(z))
    assert cuflash.attention_varlen(q, k, v, cq, ck).shape == (q.shape[0], HQ, D)


def test_seqlens(xp, monkeypatch):
    """A cuflash.SeqLens stands for both cu_seqlens: the same bits as the arrays, forward and
    backward, in every varlen entry point; with it (and in the backward of residuals whose
    forward checked the arrays) no call reads cu_seqlens back to the host (the sync that
    stalls the GPU between calls)."""
    q, k, v, dout, cq, ck = _packed(xp, np.float32, "cross", seed=45)
    out, lse, res = cuflash.attention_varlen(q, k, v, cq, ck, causal=True, return_lse=True,
                                             return_residuals=True)
    grads = cuflash.attention_varlen_backward(dout, res)
    lens = cuflash.SeqLens(cq, ck)
    assert lens.batch == 6 and lens.max_seqlen_q == 40 and lens.max_seqlen_k == 47
    assert lens.cu_seqlens_q is cq and lens.cu_seqlens_k is ck
    np.testing.assert_array_equal(lens.cu_q, np.cumsum([0] + BATCHES["cross"][0]))
    same = cuflash.SeqLens(cq)
    assert same.cu_seqlens_k is cq and same.max_seqlen_k == 40

    def no_readback(*a, **kw):
        raise AssertionError("cu_seqlens read back to the host")
    monkeypatch.setattr(cuflash.checks, "_read_cu_seqlens", no_readback)
    out2, lse2, res2 = cuflash.attention_varlen(q, k, v, lens, causal=True, max_seqlen_q=40,
                                                return_lse=True, return_residuals=True)
    np.testing.assert_array_equal(to_numpy(out2), to_numpy(out))
    np.testing.assert_array_equal(to_numpy(lse2), to_numpy(lse))
    for g in (cuflash.attention_varlen_backward(dout, res2),
              cuflash.attention_varlen_backward(dout, res),    # the forward's SeqLens, kept
              cuflash.attention_backward(dout, res)):
        for a, b in zip(g, grads):
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    ref = cuflash.naive_attention_varlen(q, k, v, lens, causal=True)
    np.testing.assert_array_equal(to_numpy(ref), to_numpy(
        cuflash.naive_attention_varlen(q, k, v, lens, causal=True)))
    cuflash.naive_attention_varlen_backward(dout, q, k, v, lens, causal=True)
    # residuals whose arrays were swapped for others are read again
    other = cuflash.VarlenResiduals(q, k, v, out, lse, causal=True, cu_seqlens_q=cq,
                                    cu_seqlens_k=ck.copy(), seqlens=lens)
    with pytest.raises(AssertionError, match="read back"):
        cuflash.attention_varlen_backward(dout, other)


def test_seqlens_errors(xp):
    q, k, v, dout, cq, ck = _packed(xp, np.float32, ([2, 3], [4, 1]), seed=50)
    i32 = lambda a: xp.asarray(np.array(a, dtype=np.int32))
    lens = cuflash.SeqLens(cq, ck)
    with pytest.raises(TypeError, match=r"cu_seqlens_k must be left out \(None\) when "
                                        r"cu_seqlens_q is a cuflash.SeqLens"):
        cuflash.attention_varlen(q, k, v, lens, ck)
    with pytest.raises(TypeError, match=r"cu_seqlens_k is missing"):
        cuflash.attention_varlen(q, k, v, cq)
    for given_k in (None, ck):   # (with neither, the error once named cu_seqlens_k only)
        with pytest.raises(TypeError, match=r"cu_seqlens_q is missing"):
            cuflash.attention_varlen(q, k, v, None, given_k)
    with pytest.raises(TypeError, match=r"cu_seqlens_q is a SeqLens already"):
        cuflash.SeqLens(lens)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[0\]=1 must be 0"):
        cuflash.SeqLens(i32([1, 2, 5]))
    with pytest.raises(ValueError, match=r"cu_seqlens_k must be non-decreasing"):
        cuflash.SeqLens(cq, i32([0, 4, 3]))
    with pytest.raises(ValueError, match=r"cu_seqlens_q has 3 entries \(2 sequences\) and "
                                         r"cu_seqlens_k 4"):
        cuflash.SeqLens(cq, i32([0, 1, 4, 5]))
    with pytest.raises(TypeError, match=r"cu_seqlens_k must have dtype int32"):
        cuflash.SeqLens(cq, xp.asarray(np.array([0, 4, 5])))
    # the totals and max_seqlen are still checked per call, from the host copies
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[-1\]=5 must equal q.shape\[0\]=4"):
        cuflash.attention_varlen(q[:4], k, v, lens)
    with pytest.raises(ValueError, match=r"max_seqlen_k=3 is smaller than sequence 0's length 4"):
        cuflash.attention_varlen(q, k, v, lens, max_seqlen_k=3)


@pytest.mark.gpu
def test_seqlens_on_another_device():
    import cupy as cp
    q, k, v, dout, cq, ck = _packed(cp, np.float32, ([2, 3], [4, 1]), seed=50)
    with pytest.raises(TypeError, match=r"the SeqLens' cu_seqlens are on the host \(NumPy\) "
                                        r"but q is on GPU 0"):
        cuflash.attention_varlen(q, k, v, cuflash.SeqLens(cq.get(), ck.get()))
    with pytest.raises(TypeError, match=r"cu_seqlens_k is on the host \(NumPy\) but "
                                        r"cu_seqlens_q is on GPU 0"):
        cuflash.SeqLens(cq, ck.get())


@pytest.mark.parametrize("lengths", [[], [0, 0], [0]], ids=["no-sequence", "no-tokens", "one-empty"])
def test_empty_batches(xp, lengths):
    q, k, v, dout, cq, ck = _packed(xp, np.float32, (lengths, lengths), seed=3)
    out, lse, res = cuflash.attention_varlen(q, k, v, cq, ck, return_lse=True,
                                             return_residuals=True)
    assert out.shape == (0, HQ, D) and lse.shape == (HQ, 0)
    assert [g.shape for g in cuflash.attention_varlen_backward(dout, res)] == \
        [q.shape, k.shape, v.shape]


# -- errors ---------------------------------------------------------------------------------------

def _good(xp):
    q, k, v, dout, cq, ck = _packed(xp, np.float32, ([2, 3], [4, 1]), seed=50)
    return dict(q=q, k=k, v=v, cu_seqlens_q=cq, cu_seqlens_k=ck), dout


def _bad_cases(xp):
    i32 = lambda a: xp.asarray(np.array(a, dtype=np.int32))
    r = lambda shape, seed=51: randn(xp, shape, np.float32, seed)
    return {
        "cu_int64": (dict(cu_seqlens_q=xp.asarray(np.array([0, 2, 5]))), TypeError,
                     r"cu_seqlens_q must have dtype int32 .*got int64"),
        "cu_float": (dict(cu_seqlens_k=xp.asarray(np.array([0, 4, 5], np.float32))),
                     TypeError, r"cu_seqlens_k must have dtype int32 .*got float32"),
        "cu_list": (dict(cu_seqlens_q=[0, 2, 5]), TypeError,
                    r"cu_seqlens_q must be a numpy.ndarray or cupy.ndarray, got list"),
        "cu_2d": (dict(cu_seqlens_q=i32([[0, 2, 5]])), ValueError,
                  r"cu_seqlens_q must be 1-D with batch \+ 1 entries.*\(1, 3\)"),
        "cu_empty": (dict(cu_seqlens_k=i32([])), ValueError, r"cu_seqlens_k must be 1-D"),
        "cu_start": (dict(cu_seqlens_q=i32([1, 2, 5])), ValueError,
                     r"cu_seqlens_q\[0\]=1 must be 0"),
        "cu_decreasing": (dict(cu_seqlens_k=i32([0, 4, 3, 5]), cu_seqlens_q=i32([0, 2, 2, 5])),
                          ValueError, r"cu_seqlens_k must be non-decreasing: cu_seqlens_k\[2\]=3 "
                                      r"< cu_seqlens_k\[1\]=4"),
        "cu_end_q": (dict(cu_seqlens_q=i32([0, 2, 4])), ValueError,
                     r"cu_seqlens_q\[-1\]=4 must equal q.shape\[0\]=5"),
        "cu_end_k": (dict(cu_seqlens_k=i32([0, 4, 6])), ValueError,
                     r"cu_seqlens_k\[-1\]=6 must equal k.shape\[0\]=5"),
        "cu_lengths": (dict(cu_seqlens_k=i32([0, 1, 4, 5])), ValueError,
                       r"cu_seqlens_q has 3 entries \(2 sequences\) and cu_seqlens_k 4 "
                       r"\(3 sequences\)"),
        "max_q": (dict(max_seqlen_q=2), ValueError,
                  r"max_seqlen_q=2 is smaller than sequence 1's length 3 "
                  r"\(cu_seqlens_q\[2\] - cu_seqlens_q\[1\]\)"),
        "max_k": (dict(max_seqlen_k=3), ValueError,
                  r"max_seqlen_k=3 is smaller than sequence 0's length 4"),
        "max_float": (dict(max_seqlen_q=3.0), TypeError, r"max_seqlen_q must be an int or None"),
        "heads": (dict(q=r((5, 3, 24)), k=r((5, 2, 24), 52), v=r((5, 2, 24), 53)), ValueError,
                  r"q has 3 heads \(q.shape\[1\]\) and k, v have 2 \(k.shape\[1\]\): the query "
                  r"heads must be a multiple of the kv heads"),
        "kv_heads_0": (dict(k=r((5, 0, 24), 52), v=r((5, 0, 24), 53)), ValueError,
                       r"q has 4 heads .* and k, v have 0"),
        "kv_differ": (dict(v=r((5, 2, 24), 53)), ValueError,
                      r"k and v must have the same tokens and kv heads"),
        "head_dim_0": (dict(q=r((5, 4, 0)), k=r((5, 4, 0), 52)), ValueError,
                       r"head_dim=0 \(q.shape\[-1\]\) is not supported"),
        "head_dim_257": (dict(q=r((5, 4, 257)), k=r((5, 4, 257), 52)), ValueError,
                         r"head_dim=257 \(q.shape\[-1\]\) is not supported"),
        "head_dim_v_300": (dict(v=r((5, 4, 300), 53)), ValueError,
                           r"head_dim_v=300 \(v.shape\[-1\]\) is not supported"),
        "head_dims_qk": (dict(k=r((5, 4, 16), 52)), ValueError,
                         r"head_dim must match: q.shape\[-1\]=24, k.shape\[-1\]=16"),
        "rank": (dict(q=r((1, 5, 4, 24))), ValueError,
                 r"q must have 3 dims \(total_q, heads, head_dim\)"),
        "dtype": (dict(v=r((5, 4, 24)).astype(np.float64)), TypeError,
                  r"q, k, v must share one dtype"),
        "causal": (dict(causal=1), TypeError, r"causal must be a bool"),
        "alibi_shape": (dict(alibi_slopes=xp.ones(3, np.float32)), ValueError,
                        r"alibi_slopes of shape \(3,\) does not broadcast to the leading dims "
                        r"\(2, 4\)"),
        "return_lse": (dict(return_lse="yes"), TypeError, r"return_lse must be a bool"),
    }


@pytest.mark.parametrize("case", sorted(_bad_cases(np)))
def test_bad_arguments(xp, case):
    args, _ = _good(xp)
    change, exc, match = _bad_cases(xp)[case]
    args.update(change)
    with pytest.raises(exc, match=match):
        cuflash.attention_varlen(**args)
    if "return_lse" not in change:
        with pytest.raises(exc, match=match):
            cuflash.naive_attention_varlen(**args)


#: The cases whose cu_seqlens values are wrong: with both max_seqlen bounds given the call
#: reads them back late (checks._PendingSeqLens), and must still fail with the same error
_VALUE_CASES = ("cu_start", "cu_decreasing", "cu_end_q", "cu_end_k", "cu_lengths", "cu_int64",
                "cu_2d", "cu_empty")


@pytest.mark.parametrize("case", _VALUE_CASES)
@pytest.mark.parametrize("route", ["call", "kernels"])
def test_bad_cu_seqlens_with_both_bounds(xp, case, route):
    if route == "kernels" and xp is not np:
        pytest.skip("the kernel route on the CPU runs NumPy arrays")
    args, _ = _good(xp)
    change, exc, match = _bad_cases(xp)[case]
    args.update(change, max_seqlen_q=100, max_seqlen_k=100)
    with contextlib.ExitStack() as stack:
        fake = stack.enter_context(kernel_route()) if route == "kernels" else None
        with pytest.raises(exc, match=match):
            cuflash.attention_varlen(**args)
    if fake is not None:
        assert fake.calls == []   # nothing ran: the late check comes before the launch


@pytest.mark.parametrize("case", _VALUE_CASES)
def test_bad_cu_seqlens_with_no_query_heads(xp, case):
    """No query heads: nothing is launched and no length is read, and the late check must run
    all the same (it did not: the call returned an empty output)."""
    args, _ = _good(xp)
    change, exc, match = _bad_cases(xp)[case]
    args.update(change, max_seqlen_q=100, max_seqlen_k=100)
    args["q"] = args["q"][:, :0]
    with pytest.raises(exc, match=match):
        cuflash.attention_varlen(**args)


@pytest.mark.parametrize("bound, match", [
    (dict(max_seqlen_q=2, max_seqlen_k=100), r"max_seqlen_q=2 is smaller than sequence 1's "
                                             r"length 3"),
    (dict(max_seqlen_q=100, max_seqlen_k=3), r"max_seqlen_k=3 is smaller than sequence 0's "
                                             r"length 4"),
    (dict(max_seqlen_q=-1, max_seqlen_k=100), r"max_seqlen_q=-1 must be >= 0"),
    (dict(max_seqlen_q=3, max_seqlen_k=4.0), r"max_seqlen_k must be an int or None")])
@pytest.mark.parametrize("route", ["call", "kernels"])
def test_bounds_too_small_with_both_given(xp, bound, match, route):
    if route == "kernels" and xp is not np:
        pytest.skip("the kernel route on the CPU runs NumPy arrays")
    args, _ = _good(xp)
    with contextlib.ExitStack() as stack:
        fake = stack.enter_context(kernel_route()) if route == "kernels" else None
        with pytest.raises((ValueError, TypeError), match=match):
            cuflash.attention_varlen(**args, **bound)
    if fake is not None:
        assert fake.calls == []


@pytest.mark.parametrize("extra", [0, 37])
def test_both_bounds_read_cu_seqlens_after_the_launch_is_prepared(extra):
    """Given the arrays and both bounds (flash-attn's convention), the kernels' route prepares
    the launch from the bounds and reads cu_seqlens back only then (before_launch); the result
    is that of the immediate check, a bound above the longest length included (a larger grid
    whose extra blocks have no rows)."""
    q, k, v, dout, cq, ck = _packed(np, np.float16, ([5, 1, 40, 0, 17], [9, 3, 33, 2, 40]),
                                    d=20, seed=8)
    with kernel_route() as fake:
        ref = cuflash.attention_varlen(q, k, v, cq, ck, causal=True, return_lse=True)
        assert fake.resolved_before_launch
        got = cuflash.attention_varlen(q, k, v, cq, ck, causal=True, return_lse=True,
                                       max_seqlen_q=40 + extra, max_seqlen_k=40 + extra)
        assert not fake.resolved_before_launch
        assert fake.runs[-1][0].T == 40 + extra and fake.runs[-1][0].S == 40 + extra
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)


@pytest.mark.gpu
def test_both_bounds_read_back_late_on_the_gpu(monkeypatch):
    """The real GPU route: the readback comes after ops.ForwardLaunch is made and before the
    launch; out, lse and the gradients equal those of a SeqLens call bit for bit."""
    import cupy as cp
    from cuflash import checks
    from cuflash.gpu import ops
    q, k, v, dout, cq, ck = _packed(cp, np.float16, ([5, 1, 140, 0, 77], [9, 3, 133, 2, 140]),
                                    d=64, seed=9)
    order = []
    made = ops.ForwardLaunch.__init__
    resolve = checks._PendingSeqLens.resolve

    def make(self, *a, **kw):
        made(self, *a, **kw)
        order.append("launch made")

    def read_back(self):
        if self._host is None:
            order.append("read back")
        resolve(self)

    monkeypatch.setattr(ops.ForwardLaunch, "__init__", make)
    monkeypatch.setattr(checks._PendingSeqLens, "resolve", read_back)
    got = cuflash.attention_varlen(q, k, v, cq, ck, causal=True, return_lse=True,
                                   return_residuals=True, max_seqlen_q=150, max_seqlen_k=150)
    assert order == ["launch made", "read back"]
    ref = cuflash.attention_varlen(q, k, v, cuflash.SeqLens(cq, ck), causal=True,
                                   return_lse=True, return_residuals=True)
    for a, b in zip(got[:2], ref[:2]):
        np.testing.assert_array_equal(cp.asnumpy(a), cp.asnumpy(b))
    for a, b in zip(cuflash.attention_varlen_backward(dout, got[2]),
                    cuflash.attention_varlen_backward(dout, ref[2])):
        np.testing.assert_array_equal(cp.asnumpy(a), cp.asnumpy(b))


@pytest.mark.gpu
def test_cu_seqlens_on_another_device():
    import cupy as cp
    args, _ = _good(cp)
    host = dict(args, cu_seqlens_q=cp.asnumpy(args["cu_seqlens_q"]))
    with pytest.raises(TypeError, match=r"cu_seqlens_q is on the host \(NumPy\) but q is on "
                                        r"GPU 0 \(CuPy\)"):
        cuflash.attention_varlen(**host)
    args, _ = _good(np)
    dev = dict(args, cu_seqlens_k=cp.asarray(args["cu_seqlens_k"]))
    with pytest.raises(TypeError, match=r"cu_seqlens_k is on GPU 0 \(CuPy\) but q is on the "
                                        r"host \(NumPy\)"):
        cuflash.attention_varlen(**dev)


def test_backward_errors(xp):
    args, dout = _good(xp)
    out, lse, res = cuflash.attention_varlen(**args, return_lse=True, return_residuals=True)
    _, dense_res = cuflash.attention(args["q"], args["k"], args["v"], return_residuals=True)
    with pytest.raises(TypeError, match=r"takes the VarlenResiduals .* got Residuals"):
        cuflash.attention_varlen_backward(dout, dense_res)
    with pytest.raises(ValueError, match=r"dout must have shape \(5, 4, 24\)"):
        cuflash.attention_varlen_backward(dout[:4], res)
    bad_lse = cuflash.VarlenResiduals(args["q"], args["k"], args["v"], out,
                                      xp.ascontiguousarray(lse.T), **{
                                          k: v for k, v in res.options().items()
                                          if k not in ("max_seqlen_q", "max_seqlen_k")})
    with pytest.raises(ValueError, match=r"lse must have shape \(4, 5\) \(as the forward's lse "
                                         r"\(Hq, total_q\)\)"):
        cuflash.attention_varlen_backward(dout, bad_lse)
    with pytest.raises(TypeError, match=r"deterministic must be a bool"):
        cuflash.attention_varlen_backward(dout, res, deterministic=None)


def test_backward_of_no_queries_checks_precision_and_tile(xp):
    """A packed batch with no query rows has no group for the twin to run, which was where its
    precision and tile were checked: the backward returned zeros for precision='bogus' and for
    a float64 tile on float16 inputs. Now checked first, on both paths."""
    q = xp.zeros((0, 2, 8), xp.float16)
    k = xp.ones((5, 2, 8), xp.float16)
    cu_q, cu_k = (xp.asarray(c, xp.int32) for c in ([0, 0, 0], [0, 3, 5]))
    _, res = cuflash.attention_varlen(q, k, k, cu_q, cu_k, return_residuals=True)
    with pytest.raises(ValueError, match=r"precision='bogus' must be one of"):
        cuflash.attention_varlen_backward(q, res, precision="bogus")
    with pytest.raises(ValueError, match=r"precision='tf32' applies to float32 inputs"):
        cuflash.attention_varlen_backward(q, res, precision="tf32")
    with pytest.raises(ValueError, match=r"TileConfig.kernel='dmma' needs float64 inputs"):
        cuflash.attention_varlen_backward(q, res, tile=TileConfig(kernel="dmma"))
    dq, dk, dv = cuflash.attention_varlen_backward(q, res)
    assert dq.shape == (0, 2, 8) and not to_numpy(dk).any() and not to_numpy(dv).any()
