"""Issue 15, the long-T float32 error (NOTES v22/v23), modelled on the CPU: one head, T = 16384, d = 64,
24 query rows, the online softmax over 64-key tiles in float32 with O accumulated key by key (an
FFMA chain per output element) or per tile from zero; max-norm over the rows against float64."""
# max-norm over R rows (error / max |oracle| over all rows), O accumulated key by key in float32
# ("seq", an FFMA chain per output element) or per 64-key tile from zero ("tile")
import numpy as np
rng = np.random.default_rng(2)
T, d, R = 16384, 64, 24
K = rng.standard_normal((T, d)).astype(np.float32)
V = rng.standard_normal((T, d)).astype(np.float32)
Q = rng.standard_normal((R, d)).astype(np.float32)
L2E = np.float32(1.4426950408889634)
S64 = (Q.astype(np.float64) @ K.T.astype(np.float64)) / 8.0
P64 = np.exp(S64 - S64.max(1, keepdims=True))
O64 = (P64 @ V.astype(np.float64)) / P64.sum(1, keepdims=True)
S = (Q @ K.T) * np.float32(1 / 8)
res = {}
for mode in ("seq", "tile"):
    O = np.zeros((R, d), np.float32)
    for r in range(R):
        m = np.float32(-np.inf); l = np.float32(0); o = np.zeros(d, np.float32)
        for t0 in range(0, T, 64):
            st = S[r, t0:t0 + 64]
            mn = max(m, st.max())
            a = np.float32(np.exp2(np.float32((m - mn) * L2E))) if m > -np.inf else np.float32(0)
            p = np.exp2((st - mn) * L2E).astype(np.float32)
            l = np.float32(l * a + p.sum(dtype=np.float32)); o = (o * a).astype(np.float32)
            if mode == "tile":
                o = (o + (p @ V[t0:t0 + 64])).astype(np.float32)
            else:
                Vt = V[t0:t0 + 64]
                for j in range(64):
                    o = (o + p[j] * Vt[j]).astype(np.float32)
            m = mn
        O[r] = o / l
    res[mode] = np.abs(O - O64).max() / np.abs(O64).max()
naive = (np.exp(S - S.max(1, keepdims=True)).astype(np.float32) @ V) 
naive = naive / np.exp(S - S.max(1, keepdims=True)).astype(np.float32).sum(1, keepdims=True)
res["naive sgemm"] = np.abs(naive - O64).max() / np.abs(O64).max()
print({k: f"{v:.2e}" for k, v in res.items()})
