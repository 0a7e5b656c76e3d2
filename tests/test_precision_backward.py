"""float32 backward's ``precision`` on the CPU: the twin's backward (cuflash.twin.backward,
called directly) and naive_attention_backward in 'ieee', 'tf32' and 'highest' (cuflash.precision).

1. The library's criterion against the float64 oracle: the twin's error <= 2x naive's in the
   same precision + FLOORS (helpers.assert_matches_oracle), on odd sizes (partial tiles), causal
   and not, d = 24 and 64, T < S and T > S, GQA (4 query heads on 2 kv heads), both dQ modes.
   The twin's backward reads out and lse from the twin's forward in the same precision, as
   attention_vjp runs them.
2. Naive in each precision within a fixed multiple of its own unit roundoff of the oracle
   (u(float32) = 2^-24 for 'ieee' and 'highest', u(TF32) = 2^-11 for 'tf32').
3. The precision changes the result: 'tf32' is far worse than 'ieee', 'highest' is not.
4. Every product of both backwards is computed in the precision asked (a spy on the matmul).
5. Refusals: an unknown precision, a precision given for non-float32 inputs.

Measured, rel_error against the oracle (max |error| / max |oracle|), twin deterministic:
  at this file's seeds (8 cases x 3 gradients): twin 'ieee' 1.5-5.6e-7, 'highest' 2.5-6.2e-7,
  'tf32' 2.5e-4-1.0e-3; naive 'ieee' 2.2-4.7e-7, 'highest' 2.4-5.5e-7, 'tf32' 2.5-8.2e-4.
  tf32 / ieee per gradient min 1164 (twin), 750 (naive); highest / ieee per gradient max 2.42
  (twin), 1.63 (naive), summed over the 24: 1.25 (twin), 1.05 (naive); twin / naive in the
  same precision max 1.57 ('ieee'), 1.93 ('highest'), 1.76 ('tf32').
  Over 25 seeds x these 4 shapes x causal and not (200 cases x 3 gradients, block 32 x 16):
  tf32 / ieee min 735, median 1477 (bound: 100); highest / ieee per gradient max 3.87, median
  1.56, 95th percentile 2.72 (bound: 8, so 3x holds for the sum only), summed 1.10-1.55 per
  seed (bound: 3); twin / naive 'ieee' max 2.7, 'highest' 3.0 (both far inside the float32 floor,
  2e-6 of the largest gradient), 'tf32' dq 2.25 (2 of 200 cases above 2x: the twin's
  D = rowsum(dO o O) takes O from the TF32 forward, naive's D = rowsum(P o dP) its own P), dk 1.99,
  dv 1.0003 (bare bound below: 3); naive relative to the largest oracle gradient: 'ieee' and
  'highest' max 12-13 u(float32), normwise 5.9 u, |bias| 1.6 u; 'tf32' max 1.9 u(TF32),
  normwise 1.2 u, |bias| 0.34 u.
  A backward that computes one product in another precision is not separable by error (dS
  carries TF32 rounding from S and dP either way; the dropped mutant twin_backward_dk_unrounded
  in tools/mutants.py): test_every_product_in_the_precision watches the products instead.
"""
import numpy as np
import pytest

import cuflash
from cuflash import naive as naive_mod, twin
from cuflash.mask import Mask
from cuflash.oracle import normwise_error, oracle_backward, rel_error, scale_bias

from helpers import assert_matches_oracle, case_seed, grad_scale

F32 = np.float32
PRECISIONS = ("ieee", "tf32", "highest")

#: (B, Hq, Hkv, T, S, d) and the twin's (block_m, block_n): odd sizes, every tile partial
CASES = [((2, 2, 2, 37, 53, 24), (32, 16)),
         ((1, 2, 2, 37, 53, 64), (16, 64)),
         ((1, 4, 2, 37, 53, 24), (32, 16)),    # GQA: 2 query heads per kv head
         ((1, 2, 2, 53, 37, 64), (32, 32))]

#: unit roundoff of the products of each precision
U = {"ieee": 2.0 ** -24, "highest": 2.0 ** -24, "tf32": 2.0 ** -11}
#: assert_matches_oracle's product_unit: TF32's roundoff for 'tf32' (a row that sees one key has
#: dS = 0 in naive, TF32 rounding in the twin, whose D comes from O; helpers.PRODUCT_UNITS)
PRODUCT_UNIT = {"ieee": None, "highest": None, "tf32": 2.0 ** -11}
#: naive's bounds, in units of U[precision] (max: relative to the largest oracle gradient);
#: 'ieee' and 'highest' those of naive float32 in test_naive.py; 'tf32' about 3x the measured
NAIVE_BOUNDS = {"ieee": {"max": 100.0, "normwise": 40.0, "bias": 8.0},
                "highest": {"max": 100.0, "normwise": 40.0, "bias": 8.0},
                "tf32": {"max": 6.0, "normwise": 4.0, "bias": 1.0}}


def _id(case):
    (B, Hq, Hkv, T, S, d), (bm, bn) = case
    return f"B{B}_H{Hq}-{Hkv}_T{T}_S{S}_d{d}_{bm}x{bn}"


def _inputs(shape, causal, dv=None):
    """Fresh standard-normal float32 q, k, v, dout (never zeros), seeded per case."""
    B, Hq, Hkv, T, S, d = shape
    dv = d if dv is None else dv
    rng = np.random.default_rng(case_seed("precision_backward", shape, causal, dv))
    q = rng.standard_normal((B, Hq, T, d)).astype(F32)
    k = rng.standard_normal((B, Hkv, S, d)).astype(F32)
    v = rng.standard_normal((B, Hkv, S, dv)).astype(F32)
    dout = rng.standard_normal((B, Hq, T, dv)).astype(F32)
    return q, k, v, dout


def _twin_grads(dout, q, k, v, causal, prec, block, deterministic=True):
    """(dq, dk, dv) shaped like q, k, v: the twin's forward then backward in ``prec`` on the
    flattened heads (each kv head repeated for its query heads, as cuflash.api does), dK and dV
    summed over each group's query heads in float32."""
    B, Hq, T, d = q.shape
    Hkv, S, dv = k.shape[1], k.shape[2], v.shape[3]
    G = Hq // Hkv
    q3, do3 = q.reshape(B * Hq, T, d), dout.reshape(B * Hq, T, dv)
    k3 = np.repeat(k, G, axis=1).reshape(B * Hq, S, d)
    v3 = np.repeat(v, G, axis=1).reshape(B * Hq, S, dv)
    kw = dict(mask=Mask.make(causal=causal), scale=d ** -0.5, block_m=block[0],
              block_n=block[1], precision=prec)
    out, lse = twin.forward(q3, k3, v3, **kw)
    dq3, dk3, dv3 = twin.backward(do3, q3, k3, v3, out, lse, deterministic=deterministic, **kw)
    assert dq3.dtype == dk3.dtype == dv3.dtype == F32
    return (dq3.reshape(q.shape), dk3.reshape(B, Hkv, G, S, d).sum(axis=2, dtype=F32),
            dv3.reshape(B, Hkv, G, S, dv).sum(axis=2, dtype=F32))


@pytest.mark.parametrize("deterministic", [True, False], ids=["det", "atomic"])
@pytest.mark.parametrize("prec", PRECISIONS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_twin_backward_against_oracle(case, causal, prec, deterministic):
    """err(twin) <= 2 err(naive, same precision) + floor; 'highest' also beside naive 'ieee'
    (float32's accuracy is its promise)."""
    shape, block = case
    q, k, v, dout = _inputs(shape, causal)
    refs = oracle_backward(dout, q, k, v, causal=causal)
    grads = _twin_grads(dout, q, k, v, causal, prec, block, deterministic)
    naives = {p: cuflash.naive_attention_backward(dout, q, k, v, causal=causal, precision=p)
              for p in {prec, "ieee"}}
    for i, name in enumerate(("dq", "dk", "dv")):
        for p in naives if prec == "highest" else (prec,):
            assert_matches_oracle(grads[i], refs[i], naives[p][i], dtype="float32",
                                  floor_scale=grad_scale(*refs), product_unit=PRODUCT_UNIT[prec],
                                  name=f"{name} (twin {prec}, naive {p})")
        if prec == "tf32":   # product_unit's floor (8 TF32 units) is above the error itself:
            # without a floor too (measured max 2.25 over 600 gradients, 1.76 here)
            err, err_naive = rel_error(grads[i], refs[i]), rel_error(naives[prec][i], refs[i])
            assert err <= 3 * err_naive, f"{name} (tf32): {err:.3e} > 3 x naive's {err_naive:.3e}"


@pytest.mark.parametrize("prec", PRECISIONS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_naive_backward_close_to_oracle(case, causal, prec):
    """Naive in each precision within NAIVE_BOUNDS units of its roundoff (the yardstick of the
    test above may not drift)."""
    shape, _ = case
    q, k, v, dout = _inputs(shape, causal)
    refs = oracle_backward(dout, q, k, v, causal=causal)
    grads = cuflash.naive_attention_backward(dout, q, k, v, causal=causal, precision=prec)
    u, b, scale = U[prec], NAIVE_BOUNDS[prec], grad_scale(*refs)
    for name, g, x, ref in zip(("dq", "dk", "dv"), grads, (q, k, v), refs):
        assert g.dtype == F32 and g.shape == x.shape, name
        err = rel_error(g, ref) * float(np.abs(ref).max()) / scale
        assert err <= b["max"] * u, f"{name} ({prec}): max error {err / u:.2f} u > {b['max']} u"
        nw, bias = normwise_error(g, ref), abs(scale_bias(g, ref))
        assert nw <= b["normwise"] * u, f"{name} ({prec}): normwise {nw / u:.2f} u"
        assert bias <= b["bias"] * u, f"{name} ({prec}): |bias| {bias / u:.2f} u"


def test_precision_changes_the_backward():
    """'tf32' >= 100x 'ieee' in every gradient of every case (measured min 735); 'highest' within
    8x of 'ieee' per gradient (measured max 3.87) and 3x summed over all (measured 1.10-1.55):
    for the twin and for naive. A backward that ignored the precision, or ran 'highest' as
    'tf32', fails."""
    errs = {(who, p): [] for who in ("twin", "naive") for p in PRECISIONS}
    for shape, block in CASES:
        for causal in (False, True):
            q, k, v, dout = _inputs(shape, causal)
            refs = oracle_backward(dout, q, k, v, causal=causal)
            for p in PRECISIONS:
                got = {"twin": _twin_grads(dout, q, k, v, causal, p, block),
                       "naive": cuflash.naive_attention_backward(dout, q, k, v, causal=causal,
                                                                 precision=p)}
                for who, grads in got.items():
                    errs[who, p] += [rel_error(g, r) for g, r in zip(grads, refs)]
    for who in ("twin", "naive"):
        ieee, tf32, highest = (np.array(errs[who, p]) for p in ("ieee", "tf32", "highest"))
        assert (tf32 >= 100 * ieee).all(), (who, (tf32 / ieee).min())
        assert (highest <= 8 * ieee).all(), (who, (highest / ieee).max())
        assert highest.sum() <= 3 * ieee.sum(), (who, highest.sum() / ieee.sum())


@pytest.mark.parametrize("deterministic", [True, False], ids=["det", "atomic"])
@pytest.mark.parametrize("prec", PRECISIONS)
def test_every_product_in_the_precision(monkeypatch, prec, deterministic):
    """Each of the five products (S = Q Kᵀ, dP = dO Vᵀ, dV = Pᵀ dO, dK = dSᵀ Q, dQ = dS K) is
    computed, and only in the precision asked: the twin's calls of cuflash.precision.matmul and
    naive's of _matmul, told apart by their operand shapes (d = 24, d_v = 40, block 32 x 16)."""
    T, S, d, dv, bm, bn = 37, 53, 24, 40, 32, 16
    q, k, v, dout = _inputs((1, 2, 2, T, S, d), False, dv=dv)
    seen = []

    def spy(real):
        def matmul(a, b, *args):   # twin: (a, b, precision); naive: (a, b, xp, prec)
            seen.append((a.shape[-2:], b.shape[-2:], args[-1]))
            return real(a, b, *args)
        return matmul

    q3, k3, v3, do3 = (x.reshape((2,) + x.shape[2:]) for x in (q, k, v, dout))
    kw = dict(mask=Mask(), scale=d ** -0.5, block_m=bm, block_n=bn, precision=prec)
    out, lse = twin.forward(q3, k3, v3, **kw)
    monkeypatch.setattr(twin, "matmul", spy(twin.matmul))
    twin.backward(do3, q3, k3, v3, out, lse, deterministic=deterministic, **kw)
    assert {p for *_, p in seen} == {prec}, seen
    # full tiles (T = 37 = 32 + 5, S = 53 = 3 x 16 + 5): the five products, nothing else
    full = {(a, b) for a, b, _ in seen if 5 not in a + b}
    assert full == {((bm, d), (d, bn)), ((bm, dv), (dv, bn)), ((bn, bm), (bm, dv)),
                    ((bn, bm), (bm, d)), ((bm, bn), (bn, d))}, full
    n_pairs = 2 * 4                                   # Q tiles x K/V tiles, none masked
    assert len(seen) == n_pairs * (7 if deterministic else 5)   # S and dP recomputed for dQ

    seen.clear()
    monkeypatch.setattr(naive_mod, "_matmul", spy(naive_mod._matmul))
    cuflash.naive_attention_backward(dout, q, k, v, precision=prec)
    assert [(a, b) for a, b, _ in seen] == [((T, d), (d, S)), ((S, T), (T, dv)),
                                            ((T, dv), (dv, S)), ((T, S), (S, d)),
                                            ((S, T), (T, d))]
    assert {p for *_, p in seen} == {prec}


def test_varlen_backward_passes_precision():
    """naive_attention_varlen_backward's precision reaches each sequence's backward: equal to
    naive_attention_backward per sequence in that precision, and not to 'ieee' under 'tf32'."""
    lens_q, lens_k, H, d = (37, 1, 20), (53, 17, 20), 2, 24
    cu_q, cu_k = (np.cumsum((0,) + n).astype(np.int32) for n in (lens_q, lens_k))
    rng = np.random.default_rng(case_seed("precision_backward varlen"))
    q, dout = (rng.standard_normal((cu_q[-1], H, d)).astype(F32) for _ in range(2))
    k, v = (rng.standard_normal((cu_k[-1], H, d)).astype(F32) for _ in range(2))
    got = {p: naive_mod.naive_attention_varlen_backward(dout, q, k, v, cu_q, cu_k, causal=True,
                                                        precision=p) for p in PRECISIONS}
    for p in PRECISIONS:
        for b in range(len(lens_q)):
            rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            one = cuflash.naive_attention_backward(
                *(np.ascontiguousarray(x[r].swapaxes(0, 1)) for x, r in
                  ((dout, rq), (q, rq), (k, rk), (v, rk))), causal=True, precision=p)
            for g, x, r in zip(got[p], one, (rq, rk, rk)):
                np.testing.assert_array_equal(g[r], x.swapaxes(0, 1))
    for g_tf32, g_ieee in zip(got["tf32"], got["ieee"]):
        assert np.abs(g_tf32 - g_ieee).max() > 1e-4 * np.abs(g_ieee).max()   # ~9e-4


@pytest.mark.parametrize("bad", ["bogus", "TF32", 3])
def test_unknown_precision_refused(bad):
    q, k, v, dout = _inputs((1, 1, 1, 5, 7, 8), False)
    with pytest.raises(ValueError, match=f"precision={bad!r}"):
        cuflash.naive_attention_backward(dout, q, k, v, precision=bad)
    cu = np.array([0, 5], np.int32), np.array([0, 7], np.int32)
    with pytest.raises(ValueError, match=f"precision={bad!r}"):
        naive_mod.naive_attention_varlen_backward(dout[0].swapaxes(0, 1), q[0].swapaxes(0, 1),
                                                  k[0].swapaxes(0, 1), v[0].swapaxes(0, 1), *cu,
                                                  precision=bad)
    with pytest.raises(ValueError, match=f"precision={bad!r}"):   # cuflash.precision.matmul
        _twin_grads(dout, q, k, v, False, bad, (16, 16))


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("prec", PRECISIONS)
def test_precision_is_float32s(dtype, prec):
    """As the forward (cuflash.precision.check): other dtypes have one precision, so only None
    is accepted for them."""
    q, k, v, dout = (x.astype(dtype) for x in _inputs((1, 1, 1, 5, 7, 8), False))
    with pytest.raises(ValueError, match=f"precision={prec!r} applies to float32"):
        cuflash.naive_attention_backward(dout, q, k, v, precision=prec)
    with pytest.raises(ValueError, match="applies to float32"):
        cuflash.naive_attention(q, k, v, precision=prec)             # the forward, the same
    grads = cuflash.naive_attention_backward(dout, q, k, v, precision=None)
    assert all(g.dtype == dtype for g in grads)
