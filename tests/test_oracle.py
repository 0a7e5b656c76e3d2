"""The float64 oracle against definitions that share no code with it: attention row by row in
extended precision (np.longdouble, math.fsum), and its gradient against central finite
differences (test_backward.py). The oracle is naive attention in float64, so a change to the
naive code that all dtypes share would move the oracle too: these tests pin it."""
import math

import numpy as np
import pytest

from cuflash.oracle import oracle_attention, oracle_backward

from helpers import make_inputs, randn


def _definition(q, k, v, causal, scale):
    """out, lse, and the analytic gradient pieces of one head, one query at a time: scores
    s_j = scale · q·k_j over the keys the query sees (j <= i + S - T when causal), p = softmax(s),
    out = Σ p_j v_j, lse = log Σ exp s_j."""
    T, S = q.shape[0], k.shape[0]
    ld = np.longdouble
    out, lse = np.zeros((T, v.shape[1]), ld), np.full(T, -np.inf, ld)
    for i in range(T):
        n = min(S, i + S - T + 1) if causal else S
        if n <= 0:
            continue
        s = np.array([ld(scale) * math.fsum(float(a) * float(b) for a, b in zip(q[i], k[j]))
                      for j in range(n)], dtype=ld)
        m = s.max()
        e = np.exp(s - m)
        lse[i] = m + np.log(e.sum())
        out[i] = (e[:, None] * v[:n].astype(ld)).sum(axis=0) / e.sum()
    return out, lse


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T,S,d", [(5, 9, 16), (9, 5, 16), (7, 7, 24), (1, 3, 16)])
def test_oracle_forward_matches_the_definition(T, S, d, causal):
    q, k, v = make_inputs(np, (T, d), (S, d), np.float64, seed=T * 10 + S)
    scale = 0.7
    out, lse = oracle_attention(q, k, v, causal=causal, scale=scale)
    want_out, want_lse = _definition(q, k, v, causal, scale)
    np.testing.assert_allclose(out, want_out.astype(np.float64), rtol=0, atol=1e-13)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse.astype(np.float64)))
    fin = np.isfinite(lse)
    np.testing.assert_allclose(lse[fin], want_lse[fin].astype(np.float64), rtol=1e-14, atol=0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_oracle_backward_matches_the_definition(causal):
    """dV = Pᵀ dO, dS = P ∘ (dO Vᵀ - rowsum(dO ∘ O)), dQ = scale · dS K, dK = scale · dSᵀ Q,
    written here from P of the definition above."""
    T, S, d, scale = 6, 8, 16, 0.5
    q, k, v = make_inputs(np, (T, d), (S, d), np.float64, seed=3)
    dout = randn(np, (T, d), np.float64, seed=4)
    out, lse = _definition(q, k, v, causal, scale)
    ld = np.longdouble
    s = ld(scale) * (q.astype(ld) @ k.astype(ld).T)
    seen = (np.arange(S)[None, :] <= np.arange(T)[:, None] + S - T) if causal else \
        np.ones((T, S), bool)
    p = np.where(seen, np.exp(s - np.where(np.isfinite(lse), lse, 0)[:, None]), 0)
    dp = dout.astype(ld) @ v.astype(ld).T
    ds = p * (dp - (dout.astype(ld) * out).sum(axis=1)[:, None])
    want = (ld(scale) * ds @ k.astype(ld), ld(scale) * ds.T @ q.astype(ld), p.T @ dout.astype(ld))
    for name, got, w in zip(("dq", "dk", "dv"), oracle_backward(dout, q, k, v, causal=causal,
                                                                 scale=scale), want):
        np.testing.assert_allclose(got, w.astype(np.float64), rtol=0, atol=1e-13, err_msg=name)
