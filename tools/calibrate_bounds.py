"""Where the 16-bit roundoff bounds of tests/helpers.py and the naive bounds of
tests/test_naive.py come from: each error measure of the CPU twin (64×64 tiles) and of the naive
path against the float64 oracle, and of wrong answers made from the twin, in units of the dtype's
unit roundoff u (lse: u of float32; 'zero': rows where the oracle is
exactly 0, max |x| relative to the largest gradient in units of u of the accumulator), largest (twin, naive) or smallest (mutants) over shapes,
causal and not, and seeds.

    python tools/calibrate_bounds.py [--seeds 4] [--dtypes float16,bfloat16,float32]

Mutants: 'scale' (out × 1.01), 'drop' (key S-1 hidden from every query, forward and backward),
'lse' (lse + log 1.02, and the backward fed that lse), 'D' (D = rowsum(dO ∘ O) × 1.001).
Takes about a minute per dtype and seed count 4 on two cores.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import cuflash  # noqa: E402
from cuflash import twin  # noqa: E402
from cuflash.mask import Mask  # noqa: E402
from cuflash.oracle import (normwise_error, oracle_attention, oracle_backward,  # noqa: E402
                            rel_error, row_error, scale_bias)
from helpers import (ACCUM, DTYPES, SMALLEST_NORMAL, UNIT_ROUNDOFF, make_inputs,  # noqa: E402
                     randn)
from test_checkers import DropLastKey, ScaledD  # noqa: E402

SHAPES = [(1, 257, 32), (17, 97, 64), (97, 17, 128), (97, 97, 256), (257, 1000, 16),
          (1000, 257, 72), (257, 257, 32), (97, 257, 64), (257, 97, 128)]


MEASURES = ("max", "normwise", "bias", "row", "zero")


def measures(x, ref, u, u_acc, grad_scale, tiny=0.0):
    """Each measure of x against ref in units of u; 'row' only for out, dq, dk, dv (lse has
    -inf), 'zero' (rows where ref is exactly 0: max |x| / grad_scale, in units of u_acc) for
    gradients."""
    got = {"max": rel_error(x, ref) / u, "normwise": normwise_error(x, ref) / u,
           "bias": abs(scale_bias(x, ref)) / u}
    if grad_scale is not None or ref.ndim == 3 and np.isfinite(ref).all():
        got["row"] = row_error(x, ref, tau=u, tiny=tiny) / u
    if grad_scale is not None:
        zero = (np.asarray(ref) == 0).all(axis=-1)
        got["zero"] = (float(np.abs(np.asarray(x, np.float64)[zero]).max()) / grad_scale / u_acc
                       if zero.any() else 0.0)
    return got


def one_case(dtype, T, S, d, causal, seed):
    """{(who, tensor): {measure: value in units of u}} for one problem."""
    name = np.dtype(dtype).name if dtype != DTYPES["bfloat16"] else "bfloat16"
    u, u_acc = UNIT_ROUNDOFF[name], UNIT_ROUNDOFF[ACCUM[name]]
    q, k, v = make_inputs(np, (2, T, d), (2, S, d), dtype, seed)
    do = randn(np, (2, T, d), dtype, seed + 1000)
    mask, scale = Mask.make(causal=causal), d ** -0.5
    kw = dict(scale=scale, block_m=64, block_n=64)
    out, lse = twin.forward(q, k, v, mask=mask, **kw)
    ref_out, ref_lse = oracle_attention(q, k, v, causal=causal)
    refs = oracle_backward(do, q, k, v, causal=causal)
    n_out, n_lse = cuflash.naive_attention(q, k, v, causal=causal, return_lse=True)
    answers = {"twin": (out, lse, twin.backward(do, q, k, v, out, lse, mask=mask, **kw)),
               "naive": (n_out, n_lse, cuflash.naive_attention_backward(do, q, k, v,
                                                                        causal=causal))}
    drop = DropLastKey(mask)
    o2, l2 = twin.forward(q, k, v, mask=drop, **kw)
    answers["drop"] = (o2, l2, twin.backward(do, q, k, v, o2, l2, mask=drop, **kw))
    wrong = lse + np.log(1.02).astype(lse.dtype)
    answers["lse"] = (None, wrong, twin.backward(do, q, k, v, out, wrong, mask=mask, **kw))
    answers["D"] = (None, None, twin.backward(do, q, k, v, out, lse, mask=mask, **kw,
                                              counter=ScaledD(1.001)))
    answers["scale"] = ((out.astype(np.float64) * 1.01).astype(dtype), None, (None,) * 3)
    gs = max(float(np.abs(r).max()) for r in refs)
    res = {}
    for who, (o, l, grads) in answers.items():
        for tensor, x, ref, unit, g in (("out", o, ref_out, u, None),
                                        ("lse", l, ref_lse, u_acc, None),
                                        *((n, g, r, u, gs) for n, g, r in zip(("dq", "dk", "dv"),
                                                                              grads, refs))):
            if x is not None:
                res[(who, tensor)] = measures(x, ref, unit, u_acc, g,
                                              SMALLEST_NORMAL.get(name, 0.0))
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--dtypes", default="float16,bfloat16,float32")
    args = ap.parse_args(argv)
    for name in args.dtypes.split(","):
        table = {}
        for (T, S, d), causal, seed in itertools.product(SHAPES, (False, True), range(args.seeds)):
            for key, vals in one_case(DTYPES[name], T, S, d, causal, seed).items():
                table.setdefault(key, []).append(vals)
        print(f"== {name}: u = {UNIT_ROUNDOFF[name]:.3g} (lse: u({ACCUM[name]})); "
              f"twin, naive: largest; mutants: smallest")
        print(f"{'who':6s} {'tensor':6s} " + " ".join(f"{m:>9s}" for m in MEASURES))
        for (who, tensor), rows in sorted(table.items()):
            # the smallest a mutant reaches; for 'zero' only over problems that have such rows
            pick = max if who in ("twin", "naive") else min
            cells = []
            for m in MEASURES:
                vals = [r[m] for r in rows if m in r and (m != "zero" or r[m] > 0 or
                                                           who in ("twin", "naive"))]
                cells.append(f"{pick(vals):9.3g}" if vals else f"{'-':>9s}")
            print(f"{who:6s} {tensor:6s} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
