"""Session 40, CPU study (NOTES v70): 'tf32''s backward as the 16-bit kernels' arithmetic on
float16 copies scaled by one power of two per tensor (not per row), emulated in NumPy.

The 16-bit backward rounds its operands (q, k, v, dout, out) to float16 and P, dS to float16
before the dV / dK / dQ products, accumulating in float32: 11-bit significands, as TF32's.
What float16 lacks is TF32's exponent range; one power of two per tensor (max |x| -> 2^E)
brings a tensor into it, and the gradients come back by scalar factors:
    q~ = q·a, k~ = k·b, v~ = v·e, dO~ = dO·c, O~ = O·e, scale' = scale / (a·b)
    dP~ = dO~ V~ᵀ = c·e·dP;  D~ = rowsum(dO~ ∘ O~) = c·e·D;  dS~ = P ∘ (dP~ - D~) = c·e·dS
    dV = (P_f16ᵀ dO~) / c;  dK = scale'·(dS~_f16ᵀ q~) · b / (c·e);  dQ = scale'·(dS~_f16 k~) · a / (c·e)
This script measures the error of that against the float64 oracle beside naive 'tf32''s (the
criterion of tests/test_tf32.py: err <= 2·err(naive tf32) + floor), on the tests' shapes and
on the range test's inputs (q ×1e-6 / k ×1e6 / v ×1e5 with rows 0.25..4), with float32 or
float16 gradient stores, D from the float16 copies (the 16-bit kernels' preprocess) or from
float32 (scaled by c·e).

    .venv/bin/python .ab/tf32_via_f16.py
"""
import sys

import numpy as np

sys.path.insert(0, "tests")
import cuflash                                          # noqa: E402
from cuflash.oracle import oracle_backward, rel_error   # noqa: E402

F16, F32 = np.float16, np.float32


def pow2_scale(x, top):
    """2^k with max|x|·2^k in [2^(top-1), 2^top)."""
    m = float(np.abs(x).max())
    return 1.0 if m == 0 else 2.0 ** (top - 1 - np.floor(np.log2(m)))


def f16(x, s):
    return (x.astype(np.float64) * s).astype(F16).astype(F32)


def emulate(dout, q, k, v, out, lse, causal, top_qk=8, top_vdo=4, store16=False, d_from16=True):
    """dq, dk, dv of the scaled float16 path (float32 accumulation)."""
    T, S, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / np.sqrt(d)
    a, b = pow2_scale(q, top_qk), pow2_scale(k, top_qk)
    e, c = pow2_scale(v, top_vdo), pow2_scale(dout, top_vdo)
    qt, kt, vt, dot = f16(q, a), f16(k, b), f16(v, e), f16(dout, c)
    sc = F32(scale / (a * b))
    s = (qt @ np.swapaxes(kt, -1, -2)) * sc
    if causal:
        s = np.where(np.tril(np.ones((T, S), bool), S - T), s, -np.inf)
    lse_safe = np.where(lse == -np.inf, np.inf, lse)   # rows that see no key: P = 0
    p = np.exp(s - lse_safe[..., None]).astype(F32)
    dpt = dot @ np.swapaxes(vt, -1, -2)
    if d_from16:
        Dt = (dot * f16(out, e)).sum(-1, dtype=F32)
    else:
        Dt = ((dout.astype(F32) * out.astype(F32)).sum(-1) * F32(c * e)).astype(F32)
    dst = p * (dpt - Dt[..., None])
    p16, ds16 = p.astype(F16).astype(F32), dst.astype(F16).astype(F32)
    dv = np.swapaxes(p16, -1, -2) @ dot / F32(c)
    dk = (np.swapaxes(ds16, -1, -2) @ qt) * sc * F32(b / (c * e))
    dq = (ds16 @ kt) * sc * F32(a / (c * e))
    if store16:   # the 16-bit kernels' stores, scaled back afterwards
        dq, dk, dv = (x.astype(F16).astype(F32) for x in (dq, dk, dv))
    return dq, dk, dv


def main():
    rng = np.random.default_rng(40)
    cases = [((2, 3, 97, 64), 257), ((2, 3, 257, 128), 97), ((2, 3, 1000, 40), 1000),
             ((2, 3, 17, 96), 1), ((2, 3, 130, 72), 130), ((1, 4, 200, 64), 333)]
    print(f"{'case':34} {'grad':4} {'naive':>9} {'f32 st':>8} {'f16 st':>8} {'D f32':>8}  "
          f"(error / the criterion's bound 2·naive + floor: <= 1 passes)")
    worst = {}
    for shape, S in cases:
        for causal in (False, True):
            for rng_case in ("unit", "range"):
                B, H, T, d = shape
                q, k, v = (rng.standard_normal((B, H, n, d)).astype(F32) for n in (T, S, S))
                dout = rng.standard_normal((B, H, T, d)).astype(F32)
                if rng_case == "range":
                    rows = np.geomspace(0.25, 4.0, T).astype(F32)[:, None]
                    q, k, v = q * rows * F32(1e-6), k * F32(1e6), v * F32(1e5)
                out, lse = cuflash.naive_attention(q, k, v, causal=causal, return_lse=True)
                refs = oracle_backward(dout, q, k, v, causal=causal)
                naive = cuflash.naive_attention_backward(dout, q, k, v, causal=causal,
                                                         precision="tf32")
                runs = [emulate(dout, q, k, v, out, lse, causal),
                        emulate(dout, q, k, v, out, lse, causal, store16=True),
                        emulate(dout, q, k, v, out, lse, causal, d_from16=False)]
                gs = max(float(np.abs(r).max()) for r in refs)   # helpers.grad_scale
                for gi, gname in enumerate(("dq", "dk", "dv")):
                    ref = refs[gi]
                    m = float(np.abs(ref).max())
                    denom = m if m > 0 else 1.0
                    # helpers.assert_matches_oracle's floor: FLOORS['float32'] and PRODUCT_UNITS
                    # product units (2^-11) of max(floor scale, max |oracle|)
                    floor = (2e-6 + 8 * 2.0 ** -11) * max(gs, m) / denom
                    en = rel_error(naive[gi], ref)
                    errs = [rel_error(r[gi], ref) for r in runs]
                    ratios = [x / (2 * en + floor) for x in errs]   # <= 1 passes
                    ok = ["ok" if x <= 2 * en + floor else "FAIL" for x in errs]
                    for name, rt in zip(("f32", "f16", "Df32"), ratios):
                        worst[name] = max(worst.get(name, 0), rt)
                    tag = f"{shape[2:]} S={S} {'causal' if causal else 'full'} {rng_case}"
                    print(f"{tag:34} {gname:4} {en:9.2e} " +
                          " ".join(f"{r:8.3f}{'' if o == 'ok' else '!'}" for r, o in zip(ratios, ok)))
    print("worst error / bound:", {n: round(x, 2) for n, x in worst.items()})


def via_api_twin():
    """The same path through the library's API on the CPU twin (float16 arrays: the 16-bit
    kernels' roundings of P and dS, float16 gradient stores), scale' passed as Residuals' scale:
    err / bound per gradient."""
    from helpers import grad_scale
    for (T, S, d) in ((97, 257, 64), (257, 97, 128), (130, 130, 72)):
        for causal in (False, True):
            rng = np.random.default_rng(T + S + d)
            q, k, v, dout = (rng.standard_normal((2, 3, n, d)).astype(F32) for n in (T, S, S, T))
            _, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True,
                                       precision="tf32")
            a_, b_ = pow2_scale(q, 8), pow2_scale(k, 8)
            e_, c_ = pow2_scale(v, 3), pow2_scale(dout, 3)
            h = [(x.astype(np.float64) * s).astype(F16)
                 for x, s in ((q, a_), (k, b_), (v, e_), (dout, c_), (res.out, e_))]
            r16 = cuflash.Residuals(h[0], h[1], h[2], h[4], res.lse, causal=causal,
                                    scale=1 / np.sqrt(d) / (a_ * b_))
            dq, dk, dv = cuflash.attention_backward(h[3], r16)
            ce = c_ * e_
            got = (dq.astype(F32) * F32(a_ / ce), dk.astype(F32) * F32(b_ / ce),
                   dv.astype(F32) / F32(c_))
            refs = oracle_backward(dout, q, k, v, causal=causal)
            naive = cuflash.naive_attention_backward(dout, q, k, v, causal=causal,
                                                     precision="tf32")
            gs = grad_scale(*refs)
            for name, g, r, n in zip(("dq", "dk", "dv"), got, refs, naive):
                m = float(np.abs(r).max())
                floor = (2e-6 + 8 * 2.0 ** -11) * max(gs, m) / m
                err, en = rel_error(g, r), rel_error(n, r)
                print(f"api/twin T={T} S={S} d={d} causal={int(causal)} {name} err {err:.2e} "
                      f"naive {en:.2e} err/bound {err / (2 * en + floor):.3f}")


if __name__ == "__main__":
    main()
    via_api_twin()
