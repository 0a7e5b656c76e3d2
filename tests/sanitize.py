"""Small launches of every kernel family and role, for compute-sanitizer.

    compute-sanitizer --tool memcheck  --error-exitcode 1 python3 tests/sanitize.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py

Shapes are odd (partial tiles on both axes, S != T) so the edges are exercised.
"""
import numpy as np

import cuflash
from cuflash import TileConfig
from cuflash._xp import DTYPES, cupy_module

CASES = [  # (dtype, d, forward tile, backward tile)
    ("float16", 64, TileConfig(128, 64, 4, 2, "mma"), TileConfig(64, 64, 4, 2, "mma")),
    ("bfloat16", 72, TileConfig(64, 32, 4, 1, "mma"), TileConfig(32, 64, 4, 1, "mma")),
    ("float16", 40, TileConfig(64, 64, 8, 1), TileConfig(32, 64, 4, 1)),
    ("float32", 128, TileConfig(64, 64, 8, 1), TileConfig(32, 64, 4, 1)),
    ("float64", 256, TileConfig(32, 32, 4, 1), TileConfig(16, 16, 4, 1)),
]


def main():
    cp = cupy_module()
    rng = np.random.default_rng(0)
    for dt, d, ft, bt in CASES:
        for causal in (False, True):
            T, S = 77, 45
            q, k, v, do = (cp.asarray(rng.standard_normal(s).astype(DTYPES[dt]))
                           for s in ((2, T, d), (2, S, d), (2, S, d), (2, T, d)))
            out, lse = cuflash.attention(q, k, v, causal=causal, tile=ft, return_lse=True)
            for det in (True, False):
                cuflash.attention_backward(do, q, k, v, out, lse, causal=causal, tile=bt,
                                           deterministic=det)
            cp.cuda.Device().synchronize()
            print(f"ok {dt} d={d} causal={causal} fwd={ft.short()} bwd={bt.short()}")


if __name__ == "__main__":
    main()
