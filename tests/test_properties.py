"""Hypothesis property tests of the CPU twin over random shapes, tiles and masks: it matches the
float64 oracle (naive-relative criterion), its lse matches, its outputs are finite, each output
row is a convex combination of the visible value rows, and its gradients match the oracle's."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuflash
from cuflash import TileConfig
from cuflash.oracle import oracle_attention, oracle_backward

from helpers import assert_matches_oracle, grad_scale, make_inputs, randn

SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

problems = st.fixed_dictionaries({
    "batch": st.integers(1, 2),
    "T": st.integers(1, 80),
    "S": st.integers(1, 80),
    "d": st.sampled_from([16, 24, 32, 40, 48, 56, 64]),
    "causal": st.booleans(),
    "block_m": st.sampled_from([16, 32, 64]),
    "block_n": st.sampled_from([16, 32, 64]),
    "dtype": st.sampled_from([np.float32, np.float64]),
    "seed": st.integers(0, 2**32 - 1),
})


def _inputs(p):
    return make_inputs(np, (p["batch"], p["T"], p["d"]), (p["batch"], p["S"], p["d"]), p["dtype"],
                       p["seed"])


@settings(max_examples=40, **SETTINGS)
@given(problems)
def test_twin_forward_matches_oracle(p):
    q, k, v = _inputs(p)
    causal, tile = p["causal"], TileConfig(p["block_m"], p["block_n"])
    out, lse = cuflash.attention(q, k, v, causal=causal, tile=tile, return_lse=True)
    ref_out, ref_lse = oracle_attention(q, k, v, causal=causal)
    naive_out, naive_lse = cuflash.naive_attention(q, k, v, causal=causal, return_lse=True)
    assert_matches_oracle(out, ref_out, naive_out, dtype=p["dtype"], name=f"out {p}")
    assert_matches_oracle(lse, ref_lse, naive_lse, dtype=p["dtype"], name=f"lse {p}")
    assert np.isfinite(out).all()
    seen = np.arange(p["T"]) + p["S"] - p["T"] >= 0 if causal else np.ones(p["T"], bool)
    assert np.isfinite(lse[:, seen]).all() and (lse[:, ~seen] == -np.inf).all()


@settings(max_examples=40, **SETTINGS)
@given(problems)
def test_twin_output_is_convex_combination_of_values(p):
    """Row i of out lies, column by column, between the min and max of the value rows it sees."""
    q, k, v = _inputs(p)
    T, S, causal = p["T"], p["S"], p["causal"]
    out = cuflash.attention(q, k, v, causal=causal,
                            tile=TileConfig(p["block_m"], p["block_n"]))
    slack = 1e-5 if p["dtype"] == np.float32 else 1e-12
    for i in range(T):
        n = min(S, i + S - T + 1) if causal else S
        if n <= 0:
            assert (out[:, i] == 0).all()
            continue
        lo, hi = v[:, :n].min(axis=1), v[:, :n].max(axis=1)
        assert (out[:, i] >= lo - slack).all() and (out[:, i] <= hi + slack).all(), i


@settings(max_examples=25, **SETTINGS)
@given(problems, st.booleans())
def test_twin_backward_matches_oracle(p, deterministic):
    q, k, v = _inputs(p)
    dout = randn(np, q.shape, p["dtype"], seed=p["seed"] + 1)
    causal, tile = p["causal"], TileConfig(p["block_m"], p["block_n"])
    out, lse = cuflash.attention(q, k, v, causal=causal, tile=tile, return_lse=True)
    grads = cuflash.attention_backward(dout, cuflash.Residuals(q, k, v, out, lse, causal=causal),
                                       tile=tile, deterministic=deterministic)
    refs = oracle_backward(dout, q, k, v, causal=causal)
    naive = cuflash.naive_attention_backward(dout, q, k, v, causal=causal)
    for name, g, ref, nv in zip(("dq", "dk", "dv"), grads, refs, naive):
        assert np.isfinite(g).all(), name
        assert_matches_oracle(g, ref, nv, dtype=p["dtype"], floor_scale=grad_scale(*refs),
                              name=f"{name} {p} det={deterministic}")
