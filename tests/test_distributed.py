"""cuflash.distributed: slicing, the ring planner, the LSE merge, ring attention forward and
backward on N = 1..4 virtual ranks (SimulatedRing: threads running the CPU twin; CuPy on one GPU
in the gpu tier), bad input (the same clear error on every rank, no hang), the NCCL path's
start-up pieces that run without a GPU (TCP rendezvous, import safety), and on a machine with
2 GPUs the NCCL ring itself (examples/ring_demo.py under the env-var launch and mpirun)."""
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import cuflash
from cuflash._xp import gpu_available, to_numpy
from cuflash.distributed import (CommError, RankErrors, SimulatedRing, chunk_ranges,
                                 local_positions, merge_all, merge_into, merge_partials,
                                 pair_kinds, ring_attention, ring_attention_backward, ring_plan,
                                 shard, unshard, work_per_rank)
from cuflash.distributed import nccl as dnccl
from cuflash.mask import Mask
from cuflash.mask_mod import MaskMod
from cuflash.oracle import oracle_attention, oracle_backward

from helpers import (  # poison_gpu_outputs: autouse fixture
    poison_gpu_outputs, assert_matches_oracle, dtype_param, grad_scale, make_inputs, randn)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUTS = ("contiguous", "zigzag")


# -- slicing ------------------------------------------------------------------------------------

def test_chunk_ranges():
    assert chunk_ranges(12, 3, 1, "contiguous") == [(4, 8)]
    # zigzag, N = 3: 6 chunks of 2; rank r holds chunks r and 5 - r
    assert [chunk_ranges(12, 3, r, "zigzag") for r in range(3)] == [
        [(0, 2), (10, 12)], [(2, 4), (8, 10)], [(4, 6), (6, 8)]]
    assert local_positions(8, 2, 1, "zigzag").tolist() == [2, 3, 4, 5]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("N", [1, 2, 3, 4])
def test_shard_unshard_round_trip(N, layout):
    L = 2 * N * 3
    x = np.random.default_rng(N).standard_normal((2, L, 5))
    parts = [shard(x, N, r, layout) for r in range(N)]
    for r, p in enumerate(parts):   # each rank's rows are the global rows at its positions
        np.testing.assert_array_equal(p, x[:, local_positions(L, N, r, layout)])
    np.testing.assert_array_equal(unshard(parts, layout), x)
    seen = np.sort(np.concatenate([local_positions(L, N, r, layout) for r in range(N)]))
    np.testing.assert_array_equal(seen, np.arange(L))          # a partition of the positions
    y = np.moveaxis(x, 1, 0)                                   # sequence on another axis
    np.testing.assert_array_equal(
        unshard([shard(y, N, r, layout, axis=0) for r in range(N)], layout, axis=0), y)


def test_slicing_errors():
    with pytest.raises(ValueError, match=r"seq_len=10 is not divisible by 2 · world_size = 6"):
        chunk_ranges(10, 3, 0, "zigzag")
    with pytest.raises(ValueError, match=r"seq_len=10 is not divisible by world_size = 3"):
        shard(np.zeros((10, 4)), 3, 0, "contiguous")
    with pytest.raises(ValueError, match=r"rank=3 must be < world_size=3"):
        chunk_ranges(12, 3, 3)
    with pytest.raises(ValueError, match=r"layout='striped' must be one of"):
        chunk_ranges(12, 3, 0, "striped")
    with pytest.raises(ValueError, match=r"world_size=0 must be >= 1"):
        chunk_ranges(12, 0, 0)
    with pytest.raises(ValueError, match="part 1 has shape"):
        unshard([np.zeros((4, 2)), np.zeros((6, 2))])


# -- the planner ------------------------------------------------------------------------------

def _covered(L, N, rank, layout, mask, contiguous_only=False):
    """(local T, L) count of how often each (local query, global key) pair is computed."""
    qp = local_positions(L, N, rank, layout)
    cover = np.zeros((len(qp), L), dtype=int)
    for s, calls in enumerate(ring_plan(L, N, rank, layout, mask,
                                        contiguous_only=contiguous_only)):
        kp = local_positions(L, N, (rank - s) % N, layout)
        for c in calls:
            (q0, q1), (k0, k1) = c.q, c.k
            seen = c.mask.visible_matrix(q1 - q0, k1 - k0).astype(int)
            np.add.at(cover, (np.arange(q0, q1)[:, None], kp[k0:k1][None, :]), seen)
            if contiguous_only:
                assert c.q_pos == qp[q0] and (np.diff(qp[q0:q1]) == 1).all()
                assert c.k_pos == kp[k0] and (np.diff(kp[k0:k1]) == 1).all()
    return qp, cover


MASKS = [Mask(), Mask(None, 0), Mask(2, 0), Mask(5, 0), Mask(0, 3), Mask(3, 1), Mask(9, None),
         Mask(0, 0)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("N", [1, 2, 3, 4])
def test_plan_covers_every_visible_pair_once(N, layout):
    """Every (query, key) pair the global mask shows is computed by exactly one call, and no call
    computes a hidden pair, for dense, causal, sliding and two-sided windows, chunks of 1 to 3."""
    for c in (1, 3):
        L = 2 * N * c
        for mask in MASKS:
            full = mask.visible_matrix(L, L).astype(int)
            for contiguous_only in (False, True):
                for rank in range(N):
                    qp, cover = _covered(L, N, rank, layout, mask, contiguous_only)
                    assert (cover == full[qp]).all(), (N, layout, c, mask, rank, contiguous_only)


@pytest.mark.parametrize("N", [2, 3, 4])
def test_zigzag_balances_causal(N):
    L = 2 * N * 8
    kinds = pair_kinds(L, N, "zigzag", Mask(None, 0))
    n = 2 * N
    for a in range(n):
        for b in range(n):
            assert kinds[a, b] == ("causal" if a == b else "dense" if b < a else "none")
    work = work_per_rank(L, N, "zigzag", Mask(None, 0))
    assert len(set(work)) == 1 and sum(work) == L * (L + 1) // 2
    contiguous = work_per_rank(L, N, "contiguous", Mask(None, 0))
    assert sum(contiguous) == sum(work) and contiguous[-1] > contiguous[0]
    for layout in LAYOUTS:               # one local call per step (never more kernels than steps)
        for mask in (Mask(), Mask(None, 0)):
            for r in range(N):
                assert all(len(step) <= 1 for step in ring_plan(L, N, r, layout, mask))
    # zigzag causal: step 0 is the local causal call, later steps dense
    plan = ring_plan(L, N, 1, "zigzag", Mask(None, 0))
    assert plan[0][0].mask == Mask(None, 0) and plan[0][0].q == (0, L // N)
    assert all(step[0].mask.dense for step in plan[1:])


# -- the merge ----------------------------------------------------------------------------------

def _blocks(S, cuts):
    edges = [0] + list(cuts) + [S]
    return list(zip(edges[:-1], edges[1:]))


@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float32"),
                                   dtype_param("float64")])
def test_merge_equals_direct_attention(dtype):
    """Attention over key blocks, merged, equals attention over all keys (the float64 oracle,
    within the project's criterion), including rows that see no key in some blocks (a sliding
    window) and rows that see no key at all (S < T, causal: out 0, lse -inf)."""
    T, S, d = 40, 33, 16
    q, k, v = make_inputs(np, (2, T, d), (2, S, d), dtype, 7)
    # the global mask on block-local keys: key j of the block [a, b) is key j + a of S
    masks = {"causal": "j + a <= i + diag",
             "window_4_0": "(j + a <= i + diag) & (j + a >= i + diag - 4)"}
    for name, expr in masks.items():
        opts = dict(causal=True) if name == "causal" else dict(window=(4, 0))
        ref_o, ref_l = oracle_attention(q, k, v, **opts)
        n_o, n_l = cuflash.naive_attention(q, k, v, return_lse=True, **opts)
        outs, lses = [], []
        for a, b in _blocks(S, (5, 6, 20)):
            o, l = cuflash.attention(q, k[:, a:b], v[:, a:b], return_lse=True,
                                     mask_mod=MaskMod(expr, a=a, diag=S - T))
            outs.append(o)
            lses.append(l)
        assert any(np.isneginf(l).any() and np.isfinite(l).any() for l in lses)
        out, lse = merge_all(outs, lses)
        assert out.dtype == lse.dtype == (np.float64 if dtype == np.float64 else np.float32)
        assert np.isneginf(lse).sum() == np.isneginf(ref_l).sum() > 0
        assert (out[np.isneginf(lse)] == 0).all()
        assert_matches_oracle(out.astype(dtype), ref_o, n_o, dtype=dtype, name=f"out {name}")
        assert_matches_oracle(lse, ref_l, n_l, dtype=dtype, name=f"lse {name}")
        # the running two-at-a-time form (the ring's) gives the same
        o2, l2 = outs[0].astype(out.dtype), lses[0]
        for o, l in zip(outs[1:], lses[1:]):
            o2, l2 = merge_partials(o2, l2, o, l)
        tol = 1e-13 if dtype == np.float64 else 1e-6
        np.testing.assert_allclose(o2, out, rtol=0, atol=tol)
        np.testing.assert_array_equal(np.isneginf(l2), np.isneginf(lse))
        np.testing.assert_allclose(l2[np.isfinite(l2)], lse[np.isfinite(lse)], rtol=tol)
        acc_o = np.zeros(out.shape, out.dtype)         # merge_into, on row slices
        acc_l = np.full(lse.shape, -np.inf, lse.dtype)
        for o, l in zip(outs, lses):
            merge_into(acc_o, acc_l, o[:, :20], l[:, :20], rows=slice(0, 20))
            merge_into(acc_o, acc_l, o[:, 20:], l[:, 20:], rows=slice(20, None))
        np.testing.assert_array_equal(acc_o, o2)
        np.testing.assert_array_equal(acc_l, l2)


def test_merge_edge_values():
    """-inf rows in both blocks give out 0 and lse -inf without a warning; lse 1e4 apart (or
    -1e30 and 3e38) neither overflows nor loses the larger block; NaN stays NaN."""
    o_a = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], dtype=np.float32)
    o_b = -o_a
    l_a = np.array([-np.inf, 1e4, -1e30, np.nan], dtype=np.float32)
    l_b = np.array([-np.inf, 0.0, 3e38, 0.0], dtype=np.float32)
    with np.errstate(divide="raise", invalid="raise", over="raise"):   # underflow is a 0 weight
        out, lse = merge_partials(o_a[:3], l_a[:3], o_b[:3], l_b[:3])
        out2, lse2 = merge_all([o_a[:3], o_b[:3]], [l_a[:3], l_b[:3]])
    for o, l in ((out, lse), (out2, lse2)):
        assert l[0] == -np.inf and (o[0] == 0).all()
        assert l[1] == np.float32(1e4) and np.array_equal(o[1], o_a[1])
        assert l[2] == np.float32(3e38) and np.array_equal(o[2], o_b[2])
    with np.errstate(invalid="ignore"):
        o3, l3 = merge_partials(o_a, l_a, o_b, l_b)
    assert np.isnan(l3[3]) and np.isnan(o3[3]).all()
    # a small second weight: lse = max + log1p(exp(-20)), exact to float32 rounding
    _, l4 = merge_partials(o_a[:1], np.float32([3.0]), o_b[:1], np.float32([-17.0]))
    assert abs(float(l4[0]) - (3.0 + np.log1p(np.exp(-20.0)))) <= 4.8e-7 * 3
    with pytest.raises(ValueError, match="do not match"):
        merge_partials(o_a, l_a[:2], o_b, l_b)


def test_merged_residuals_split_the_backward():
    """With the merged out and lse, attention_backward on each key block gives that block's dk,
    dv and its share of dq: the shares add up to the full backward (the ring backward's rule)."""
    T, S, d = 37, 45, 16
    q, k, v = make_inputs(np, (2, T, d), (2, S, d), np.float64, 3)
    do = randn(np, (2, T, d), np.float64, 4)
    out, res = cuflash.attention(q, k, v, softcap=3.0, return_residuals=True)
    full = cuflash.attention_backward(do, res)
    dq = np.zeros_like(q)
    dks, dvs = [], []
    for a, b in _blocks(S, (10, 11, 30)):
        g = cuflash.attention_backward(do, cuflash.Residuals(q, k[:, a:b], v[:, a:b], out,
                                                             res.lse, softcap=3.0))
        dq += g[0]
        dks.append(g[1])
        dvs.append(g[2])
    np.testing.assert_allclose(dq, full[0], rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.concatenate(dks, 1), full[1], rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.concatenate(dvs, 1), full[2], rtol=0, atol=1e-13)


# -- ring attention -----------------------------------------------------------------------------

def run_ring(N, layout, q, k, v, do, bwd=None, **opts):
    """Global (out, lse, dq, dk, dv) of ring attention on N simulated ranks (``bwd``: keyword
    arguments of the backward; a ``tile`` in opts goes to both)."""
    parts = [[shard(x, N, r, layout) for r in range(N)] for x in (q, k, v, do)]
    bwd = dict(bwd or {}, **({"tile": opts["tile"]} if "tile" in opts else {}))

    def rank_fn(comm, q, k, v, do):
        out, lse, res = ring_attention(q, k, v, comm=comm, layout=layout, return_lse=True,
                                       return_residuals=True, **opts)
        return (out, lse) + ring_attention_backward(do, res, **bwd)

    got = SimulatedRing(N, timeout=30).run(rank_fn, *parts)
    out = unshard([g[0] for g in got], layout)
    lse = unshard([g[1][..., None] for g in got], layout)[..., 0]
    grads = [unshard([g[i] for g in got], layout) for i in (2, 3, 4)]
    return out, lse, grads


def check_ring(xp, N, layout, dtype, lead_q, lead_k, L, d, seed, bwd=None, **opts):
    q, k, v = make_inputs(xp, lead_q + (L, d), lead_k + (L, d), dtype, seed)
    lead = np.broadcast_shapes(lead_q, lead_k)
    do = randn(xp, lead + (L, d), dtype, seed + 1)
    out, lse, grads = run_ring(N, layout, q, k, v, do, bwd=bwd, **opts)
    opts.pop("tile", None)
    assert out.dtype == dtype and out.shape == lead + (L, d)
    ref_o, ref_l = oracle_attention(q, k, v, **opts)
    n_o, n_l = cuflash.naive_attention(q, k, v, return_lse=True, **opts)
    assert_matches_oracle(out, ref_o, n_o, dtype=dtype, name=f"out N={N} {layout} {opts}")
    assert_matches_oracle(lse, ref_l, n_l, dtype=dtype, name=f"lse N={N} {layout} {opts}")
    refs = oracle_backward(do, q, k, v, **opts)
    naive = cuflash.naive_attention_backward(do, q, k, v, **opts)
    for name, g, x, ref, nv in zip(("dq", "dk", "dv"), grads, (q, k, v), refs, naive):
        assert g.dtype == x.dtype and g.shape == x.shape, name
        assert_matches_oracle(g, ref, nv, dtype=dtype, floor_scale=grad_scale(*refs),
                              name=f"{name} N={N} {layout} {opts}")
    # single-process cuflash on the whole sequence: the same result up to rounding
    s_o, s_l, s_res = cuflash.attention(q, k, v, return_lse=True, return_residuals=True, **opts)
    single = (s_o, s_l) + cuflash.attention_backward(do, s_res)
    ring = (out, lse) + tuple(grads)
    if N == 1:                 # one call per rank and an exact merge with nothing
        for a, b in zip(ring, single):
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    elif dtype == np.float64:
        for a, b in zip(ring, single):
            a, b = to_numpy(a), to_numpy(b)
            fin = np.isfinite(b)
            assert (np.isfinite(a) == fin).all()
            np.testing.assert_allclose(a[fin], b[fin], rtol=0,
                                       atol=1e-13 * max(1, np.abs(b[fin]).max()))
    return ring


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("float32"),
                                   dtype_param("float64")])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("N", [1, 2, 3, 4])
def test_ring_matches_oracle_and_single(N, layout, dtype, causal):
    check_ring(np, N, layout, dtype, (2, 2), (2, 2), 12 * N, 16,
               seed=N * 10 + LAYOUTS.index(layout), causal=causal)


def test_ring_bfloat16():
    dtype = dtype_param("bfloat16").values[0]
    if dtype is None:
        pytest.skip("ml_dtypes not installed")
    check_ring(np, 3, "zigzag", dtype, (1, 2), (1, 2), 36, 32, seed=5, causal=True)


VARIANTS = {
    "sliding": dict(causal=True, window=(5, None)),
    "two_sided": dict(window=(3, 7)),
    "softcap": dict(causal=True, softcap=2.0),
    # documents packed in one sequence (ids on global positions) and a few rows that see no key
    "doc_mask_mod": dict(causal=True, mask_mod=MaskMod(
        "(doc[b, i] == doc[b, j]) & (i % 7 != 3)",
        doc=np.repeat(np.arange(6), 8)[None].repeat(2, 0).astype(np.int32))),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("N,layout", [(2, "contiguous"), (3, "zigzag")])
def test_ring_variants(N, layout, name):
    L = 48
    opts = VARIANTS[name]
    out, lse, *_ = check_ring(np, N, layout, np.dtype(np.float32), (2, 1), (2, 1), L, 16,
                              seed=len(name), **opts)
    if name == "doc_mask_mod":        # rows i % 7 == 3 see no key: lse -inf, out 0
        rows = np.arange(L) % 7 == 3
        assert np.isneginf(lse[..., rows]).all() and (out[..., rows, :] == 0).all()
        assert np.isfinite(lse[..., ~rows]).all()


def test_ring_gqa():
    """GQA by broadcasting, as cuflash.attention takes it: k, v (B, H_kv, 1, T, d), q
    (B, H_kv, G, T, d); dk, dv summed over the group (only k, v travel)."""
    check_ring(np, 2, "zigzag", np.dtype(np.float32), (1, 2, 3), (1, 2, 1), 32, 16, seed=9,
               causal=True)


def test_ring_atomic_dq_and_tile():
    """deterministic=False (the atomic dQ order) and a tile reach every local call."""
    check_ring(np, 3, "zigzag", np.dtype(np.float16), (2,), (2,), 96, 32, seed=12,
               bwd=dict(deterministic=False), causal=True, tile=cuflash.TileConfig(16, 32))


def test_ring_empty_sequence():
    q = np.zeros((2, 0, 16), np.float32)
    out = SimulatedRing(2).run(lambda comm, q: ring_attention(q, q, q, comm=comm, causal=True),
                               [q, q])
    assert all(o.shape == (2, 0, 16) for o in out)


def test_ring_reuse_of_a_simulated_ring():
    ring = SimulatedRing(2)
    q = np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)
    parts = [shard(q, 2, r) for r in range(2)]
    first = ring.run(lambda c, x: ring_attention(x, x, x, comm=c), parts)
    second = ring.run(lambda c, x: ring_attention(x, x, x, comm=c), parts)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


# -- bad input: one clear error on every rank, no hang ---------------------------------------------

@pytest.mark.parametrize("timeout", [float("nan"), 0, -1.0, True, "5"], ids=repr)
def test_simulated_ring_timeout_must_be_a_positive_number(timeout):
    """A NaN timeout waited forever for a rank that never came (the bound the docstring
    promises); 0 or below failed only at the first operation."""
    with pytest.raises(ValueError, match=r"timeout=.* must be a finite number of seconds > 0"):
        SimulatedRing(2, timeout=timeout)


def _every_rank_raises(N, fn, per_rank, exc, match, timeout=20.0):
    t0 = time.monotonic()
    errs = SimulatedRing(N, timeout=timeout).run(fn, *per_rank, return_exceptions=True)
    assert time.monotonic() - t0 < timeout / 2, "a rank waited for the time-out"
    for r, e in enumerate(errs):
        assert isinstance(e, exc), f"rank {r}: {e!r}"
        assert __import__("re").search(match, str(e)), f"rank {r}: {e}"
    return errs


def _fwd(comm, q, k, v, **kw):
    return ring_attention(q, k, v, comm=comm, **kw)


def test_error_shapes_differ():
    qs = [np.zeros((2, 8, 16), np.float32), np.zeros((2, 6, 16), np.float32)]
    _every_rank_raises(2, _fwd, [qs, qs, qs], ValueError,
                       r"ring_attention: the ranks disagree on q.shape \(rank 0: \[2, 8, 16\], "
                       r"rank 1: \[2, 6, 16\]\)")


def test_error_dtypes_differ():
    qs = [np.zeros((2, 8, 16), np.float32), np.zeros((2, 8, 16), np.float16)]
    _every_rank_raises(2, _fwd, [qs, qs, qs], TypeError,
                       r"disagree on dtype \(rank 0: float32, rank 1: float16\)")


def test_error_world_size_does_not_divide():
    qs = [np.zeros((1, 5, 16), np.float32)] * 3     # zigzag needs 2 chunks per rank
    _every_rank_raises(3, _fwd, [qs, qs, qs], ValueError,
                       r"rank 0 of 3 rejected its input: ValueError: seq_len=15 is not "
                       r"divisible by 2 · world_size = 6")


def test_error_on_one_rank_only():
    """A setting only rank 1 gets wrong: rank 1's own check fails, and every rank says so."""
    qs = [np.zeros((1, 8, 16), np.float32)] * 3

    def fn(comm, q, k, v):
        return ring_attention(q, k, v, comm=comm, causal="yes" if comm.rank == 1 else True)

    _every_rank_raises(3, fn, [qs, qs, qs], TypeError,
                       r"rank 1 of 3 rejected its input: TypeError: causal must be a bool")


def test_error_settings_differ():
    qs = [np.zeros((1, 8, 16), np.float32)] * 2

    def fn(comm, q, k, v):
        return ring_attention(q, k, v, comm=comm, window=(2, comm.rank))

    _every_rank_raises(2, fn, [qs, qs, qs], ValueError, r"disagree on window")


def test_error_alibi_and_unequal_lengths():
    qs = [np.zeros((2, 8, 16), np.float32)] * 2
    slopes = np.ones(2, np.float32)
    _every_rank_raises(2, lambda c, q: _fwd(c, q, q, q, alibi_slopes=slopes), [qs],
                       NotImplementedError, r"alibi_slopes is not supported by ring_attention")
    ks = [np.zeros((2, 4, 16), np.float32)] * 2
    _every_rank_raises(2, _fwd, [qs, ks, ks], ValueError,
                       r"q has 8 local rows and k, v have 4; they must be equal")


def test_error_backward_dout():
    q = np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)

    def fn(comm, q):
        out, res = ring_attention(q, q, q, comm=comm, return_residuals=True)
        do = out if comm.rank == 0 else out[:, :3]
        return ring_attention_backward(do, res)

    _every_rank_raises(2, fn, [[q[:, :4], q[:, 4:]]], ValueError,
                       r"ring_attention_backward: rank 1 of 2 rejected its input: ValueError: "
                       r"dout must have shape \(1, 4, 16\)")


def test_error_not_a_communicator():
    q = np.zeros((1, 8, 16), np.float32)
    with pytest.raises(TypeError, match=r"is not a communicator: it lacks rank, world_size, "
                                        r"shift, allgather"):
        ring_attention(q, q, q, comm=object())
    with pytest.raises(TypeError, match="RingResiduals"):
        ring_attention_backward(q, cuflash.attention(q, q, q, return_residuals=True)[1])


def test_a_rank_that_dies_breaks_the_ring_at_once():
    """A rank that fails outside ring_attention (it never arrives): the others raise CommError
    as soon as it is gone, not after the time-out."""
    qs = [np.zeros((1, 8, 16), np.float32)] * 3

    def fn(comm, q):
        if comm.rank == 2:
            raise RuntimeError("rank 2 ran out of memory")
        return ring_attention(q, q, q, comm=comm)

    t0 = time.monotonic()
    with pytest.raises(RankErrors) as info:
        SimulatedRing(3, timeout=30).run(fn, qs)
    assert time.monotonic() - t0 < 10
    errs = info.value.errors
    assert isinstance(errs[2], RuntimeError) and "out of memory" in str(errs[2])
    for e in errs[:2]:
        assert isinstance(e, CommError) and "another rank failed" in str(e)


def test_a_failure_mid_ring_reaches_every_rank(monkeypatch):
    """Rank 1 fails in its local kernel at step 1, with a shift in flight: it aborts the ring,
    and the other ranks raise CommError at once instead of waiting for the time-out."""
    real = cuflash.api.attention
    calls = []

    def flaky(*args, **kwargs):
        if threading.current_thread().name == "sim-rank-1":
            calls.append(1)
            if len(calls) == 2:
                raise MemoryError("out of device memory")
        return real(*args, **kwargs)

    monkeypatch.setattr(cuflash.api, "attention", flaky)
    q = np.random.default_rng(0).standard_normal((1, 24, 16)).astype(np.float32)
    t0 = time.monotonic()
    errs = SimulatedRing(3, timeout=30).run(
        lambda comm, x: ring_attention(x, x, x, comm=comm, causal=True),
        [shard(q, 3, r) for r in range(3)], return_exceptions=True)
    assert time.monotonic() - t0 < 10
    assert isinstance(errs[1], MemoryError)
    for e in (errs[0], errs[2]):
        assert isinstance(e, CommError) and "another rank failed" in str(e), e


def test_a_rank_that_hangs_times_out():
    qs = [np.zeros((1, 8, 16), np.float32)] * 2

    def fn(comm, q):
        if comm.rank == 1:
            time.sleep(1.0)             # late: longer than the ring's time-out
            return None
        t0 = time.monotonic()
        try:
            return ring_attention(q, q, q, comm=comm)
        finally:
            assert time.monotonic() - t0 < 0.9

    errs = SimulatedRing(2, timeout=0.3).run(fn, qs, return_exceptions=True)
    assert isinstance(errs[0], CommError) and "did not arrive within 0.3 s" in str(errs[0])


def test_ranks_calling_different_operations():
    ring = SimulatedRing(2, timeout=10)

    def fn(comm):
        if comm.rank == 0:
            return comm.allgather({"x": 1})
        return comm.shift([np.zeros(3)]).wait()

    errs = ring.run(fn, return_exceptions=True)
    for e in errs:
        assert isinstance(e, CommError) and "called different operations" in str(e)


def test_simulated_shift_reads_at_wait():
    """Like a network, the data leaves at wait(): a sender that writes a posted array before
    wait() corrupts what its neighbour receives (ring_attention must never do that)."""
    def fn(comm):
        x = np.full(3, float(comm.rank))
        pending = comm.shift([x])
        x[:] = 99.0
        return pending.wait()[0]

    got = SimulatedRing(2).run(fn)
    assert (got[0] == 99).all() and (got[1] == 99).all()


# -- NCCL start-up pieces that run without a GPU ---------------------------------------------

def test_nccl_id_bytes_round_trip():
    uid = tuple(int(x) for x in np.random.default_rng(0).integers(-128, 128, 128))
    assert dnccl.id_from_bytes(dnccl.id_to_bytes(uid)) == uid
    with pytest.raises(CommError, match="128 bytes"):
        dnccl.id_from_bytes(b"123")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rendezvous(ranks, world_sizes, timeout=10.0, late=None):
    port = _free_port()
    uid = tuple(range(-64, 64))
    out = [None] * len(ranks)

    def body(i):
        if late == i:
            time.sleep(timeout + 0.2)
            return
        try:
            out[i] = dnccl.rendezvous_tcp(ranks[i], world_sizes[i], "127.0.0.1", port,
                                          lambda: uid, timeout)
        except Exception as exc:   # noqa: BLE001
            out[i] = exc

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(ranks))]
    for t in threads[::-1]:                  # the others start before rank 0 listens
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(timeout + 5)
    return out, dnccl.id_to_bytes(uid)


def test_tcp_rendezvous():
    out, uid = _rendezvous([0, 1, 2], [3, 3, 3])
    assert out == [uid] * 3


def test_tcp_rendezvous_errors_reach_every_rank():
    out, _ = _rendezvous([0, 1, 1], [3, 3, 3])
    assert all(isinstance(e, CommError) and "two processes have RANK=1" in str(e) for e in out), out
    out, _ = _rendezvous([0, 1], [2, 3])
    assert all(isinstance(e, CommError) and "has WORLD_SIZE=3, rank 0 has 2" in str(e)
               for e in out), out
    out, _ = _rendezvous([0, 1, 2], [3, 3, 3], timeout=1.0, late=2)
    assert isinstance(out[0], CommError) and "missing ranks [2]" in str(out[0])
    assert isinstance(out[1], CommError)


def test_distributed_imports_without_cupy_or_mpi4py():
    code = ("import sys; sys.modules['cupy'] = None; sys.modules['mpi4py'] = None\n"
            "import os; os.environ.pop('NCCL_NVLS_ENABLE', None)\n"
            "import cuflash, cuflash.distributed as d\n"
            "try:\n    d.NcclComm.from_env(launcher='single')\n"
            "except d.CommError as e:\n    print('ERR', e)\n"
            "print('NVLS', os.environ.get('NCCL_NVLS_ENABLE'))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr
    assert "ERR NcclComm needs CuPy with NCCL" in proc.stdout
    assert "NVLS 0" in proc.stdout


def test_detect_launcher(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert dnccl.detect_launcher() == "single"
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert dnccl.detect_launcher() == "env"
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert dnccl.detect_launcher() == "mpi"


def test_ring_demo_check_simulated():
    """examples/ring_demo.py --check, the lead's 2-GPU script, on 2 virtual CPU ranks: its
    slicing, references and criterion (everything but NCCL) run in CI."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "ring_demo.py"),
                           "--check", "--simulate", "2", "--seq", "64", "--dim", "16"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("CHECK PASSED") == 2, proc.stdout
    assert proc.stdout.count(" ok") == 2 * 3 * 2 * 5, proc.stdout   # ranks, dtypes, causal, kinds


# -- GPU ------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [dtype_param("float16"), dtype_param("bfloat16"),
                                   dtype_param("float32")])
def test_simulated_ring_on_one_gpu(dtype):
    """CuPy arrays, N = 2 virtual ranks on one GPU: the CUDA kernels inside the ring."""
    import cupy
    check_ring(cupy, 2, "zigzag", np.dtype(dtype), (1, 2), (1, 2), 256, 64, seed=3, causal=True)
    check_ring(cupy, 3, "contiguous", np.dtype(dtype), (1, 2), (1, 2), 192, 64, seed=4)


@pytest.mark.gpu
def test_nccl_single_rank():
    """NcclComm with one rank: set-up, allgather, and ring_attention through it."""
    import cupy
    with dnccl.NcclComm.from_env(launcher="single", timeout=60) as comm:
        assert (comm.rank, comm.world_size) == (0, 1)
        assert comm.allgather({"a": [1, 2]}) == [{"a": [1, 2]}]
        x = cupy.arange(6, dtype=cupy.float32)
        assert (comm.shift([x]).wait()[0] == x).all()
        q, k, v = make_inputs(cupy, (1, 2, 128, 64), (1, 2, 128, 64), np.float16, 0)
        out = ring_attention(q, k, v, comm=comm, causal=True)
        ref = cuflash.attention(q, k, v, causal=True)
        assert bool((out == ref).all())


def _gpu_count():
    if not gpu_available():
        return 0
    import cupy
    return cupy.cuda.runtime.getDeviceCount()


def _demo(extra):
    return [sys.executable, os.path.join(ROOT, "examples", "ring_demo.py"), "--check",
            "--seq", "2048", "--heads", "2", "--dim", "64", "--timeout", "120"] + extra


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_nccl_ring_two_gpus_env_launch(dtype):
    """examples/ring_demo.py --check on 2 GPUs, started by RANK / WORLD_SIZE / LOCAL_RANK /
    MASTER_ADDR / MASTER_PORT: forward and backward, causal and not, against the float64 oracle
    and single-GPU cuflash."""
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "NCCL_NVLS_ENABLE": "0",
               "PYTHONPATH": ROOT}
        procs.append(subprocess.Popen(_demo(["--dtype", dtype]), env=env, cwd=ROOT, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for rank, (p, text) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {rank}:\n{text}"
        assert "CHECK PASSED" in text, text


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_count() < 2, reason="needs 2 GPUs")
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")
def test_nccl_ring_two_gpus_mpirun():
    pytest.importorskip("mpi4py")
    cmd = ["mpirun", "-np", "2", "-x", "NCCL_NVLS_ENABLE=0", "-x", f"PYTHONPATH={ROOT}"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    proc = subprocess.run(cmd + _demo(["--dtype", "float16"]), cwd=ROOT, text=True,
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("CHECK PASSED") == 2, proc.stdout
