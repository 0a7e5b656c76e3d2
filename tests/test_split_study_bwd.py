"""tools/split_study_bwd.py's model of the float32 backward on split 16-bit tensor-core products
(issue 15's 'highest' backward on wgmma, NOTES v46): the model computes the gradients (to float32
accuracy when nothing truncates), its power-of-two scales survive rows of very different sizes,
and the schemes order as the forward's study found (sums chained across the sequence >> sums
from zero). CPU only."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import split_study_bwd as sb  # noqa: E402

from cuflash.oracle import normwise_error, oracle_attention, oracle_backward  # noqa: E402

F32 = np.float32


def _problem(T, d, seed, row_sizes=False):
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((1, T, d)).astype(F32) for _ in range(4))
    if row_sizes:   # rows of v and dO over 2^-20 .. 2^20 (float16's range is 2^-24 .. 2^16),
        # of q and k over 2^-20 .. 1 (larger scores make lse, stored in float32, the error)
        for x, top in ((q, 0), (k, 0), (v, 20), (do, 20)):
            x *= np.exp2(rng.integers(-20, top + 1, (1, T, 1))).astype(F32)
    return q, k, v, do


def _errors(q, k, v, do, causal, schemes):
    out, lse = oracle_attention(q, k, v, causal=causal)
    refs = oracle_backward(do, q, k, v, causal=causal)
    res = {}
    for kind, sc in schemes:
        g = sb.backward(do, q, k, v, out.astype(F32), lse.astype(F32), kind, sc, causal)
        res[f"{kind} {sc}"] = [normwise_error(x, r) for x, r in zip(g, refs)]
    return res


@pytest.mark.parametrize("causal", [False, True])
def test_model_computes_the_gradients(causal):
    q, k, v, do = _problem(128, 32, 0)
    e = _errors(q, k, v, do, causal, [("f32", "rn"), ("3xf16", "rn")])
    for name, errs in e.items():
        assert max(errs) < 2e-6, (name, errs)   # float32's accuracy: a wrong D or scale is ~1e-2
    assert max(e["3xf16 rn"]) < 3 * max(e["f32 rn"])


def test_scales_hold_rows_of_any_size():
    q, k, v, do = _problem(128, 32, 1, row_sizes=True)
    e = _errors(q, k, v, do, False, [("f32", "rn"), ("3xf16", "fresh/tile")])
    assert max(e["3xf16 fresh/tile"]) < 4 * max(e["f32 rn"]) < 1e-5, e


def test_a_sum_across_the_sequence_in_the_accumulator_costs_accuracy():
    q, k, v, do = _problem(256, 64, 2)
    e = _errors(q, k, v, do, False, [("f32", "rn"), ("3xf16", "fresh/tile"),
                                     ("3xf16", "fresh/chain")])
    tile, chain, ref = (max(e[n]) for n in ("3xf16 fresh/tile", "3xf16 fresh/chain", "f32 rn"))
    assert tile < 2.5 * ref
    assert chain > 2 * tile


def test_bad_scheme_and_blocks_are_refused():
    q, k, v, do = _problem(128, 16, 3)
    out, lse = oracle_attention(q, k, v)
    with pytest.raises(ValueError, match="scheme"):
        sb.backward(do, q, k, v, out.astype(F32), lse.astype(F32), "3xf16", "fresh/rows", False)
    with pytest.raises(ValueError, match="block_q"):
        sb.backward(do, q, k, v, out.astype(F32), lse.astype(F32), "3xf16", "rn", False,
                    block_q=48)
