import sys
"""The order blocks start in (kernels_cu/block.cuh, GridTile): the previous order (each row's
tiles in turn, heaviest first: sections of one row, ``ops._SCHED_ROWS = 1``) against the rule
(tile.section_rows: every row of an L2-sized section gets its heaviest tile first), side by side
in one process, rounds alternating. FlashAttention's shapes (batch·T = 16384, 16 query heads),
float16, forward and backward, causal and not, GQA groups G (kv heads 16 / G). TFLOP/s count
visible scores (4·B·H·T·S·d, half of it causal; 2.5 times that backward); median over rounds of
the mean of `calls` calls between CUDA events. NOTES.md v13.

    python3 tools/bench_order.py [--T 2048,4096,8192,16384] [--d 64,128] [--G 1,4,8]
    python3 tools/bench_order.py --ranks 1,2,4 --G 1,8,16   # the GQA backward's ranks per group
                                                             # (ops._GROUP_RANKS), new order only
"""
import argparse
import statistics

import cupy as cp
import numpy as np

import cuflash
from cuflash.experiments import gputime
from cuflash.gpu import ops


def _ms(fn, calls):
    """ms per call of `calls` calls between CUDA events, the host ahead (gputime)"""
    return gputime.gpu_ms(fn, calls)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", default="2048,4096,8192,16384")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--G", default="1,4,8")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--ranks", default="", help="backward only: these ranks per GQA group "
                    "(and the rule's choice) in the new order, instead of old against new")
    a = ap.parse_args()
    if a.ranks:
        return ranks_sweep(a)
    rng = np.random.default_rng(0)
    Hq = 16
    orders = {"old": 1, "new": None}
    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, float16, Hq={Hq}, "
          f"batch·T=16384; TFLOP/s old order (one row per section) / new (tile.section_rows)")
    print(f"{'pass':>8} {'causal':>6} {'d':>4} {'T':>6} {'G':>3} {'old':>7} {'new':>7} "
          f"{'new/old':>8} {'new/MHA':>8}")
    rows = []
    for d in map(int, a.d.split(",")):
        for T in map(int, a.T.split(",")):
            B = 16384 // T
            q, do = (cp.asarray(rng.standard_normal((B, Hq, T, d)).astype(np.float16))
                     for _ in range(2))
            for causal in (False, True):
                flops = 4.0 * B * Hq * T * T * d * (0.5 if causal else 1.0)
                mha = {}
                for G in map(int, a.G.split(",")):
                    k, v = (cp.asarray(rng.standard_normal((B, Hq // G, T, d)).astype(np.float16))
                            for _ in range(2))
                    _, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True)
                    calls = {"forward": lambda: cuflash.attention(q, k, v, causal=causal),
                             "backward": lambda: cuflash.attention_backward(do, res)}
                    for pass_, fn in calls.items():
                        times = {o: [] for o in orders}
                        for o, s in orders.items():   # warm-up and compile
                            ops._SCHED_ROWS = s
                            fn()
                        for _ in range(a.rounds):
                            for o, s in orders.items():
                                ops._SCHED_ROWS = s
                                times[o].append(_ms(fn, a.calls))
                        ops._SCHED_ROWS = None
                        f = flops * (2.5 if pass_ == "backward" else 1.0)
                        tf = {o: f / statistics.median(t) / 1e9 for o, t in times.items()}
                        if G == 1:
                            mha[pass_] = tf["new"]
                        rel = tf["new"] / mha[pass_] if pass_ in mha else float("nan")
                        line = (f"{pass_:>8} {str(causal):>6} {d:>4} {T:>6} {G:>3} "
                                f"{tf['old']:>7.1f} {tf['new']:>7.1f} "
                                f"{tf['new'] / tf['old']:>8.3f} {rel:>8.3f}")
                        print(line, flush=True)
                        rows.append(line)
                    del res, k, v
            del q, do
            cp.get_default_memory_pool().free_all_blocks()


def ranks_sweep(a):
    """Backward TFLOP/s in the new order for each forced rank count (ops._GROUP_RANKS, divisors
    of G) and the rule's (auto), rounds alternating; MHA (G = 1) beside."""
    rng = np.random.default_rng(0)
    Hq = 16
    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, float16, Hq={Hq}, "
          f"batch·T=16384; backward TFLOP/s by ranks per GQA group (new order); /MHA in ()")
    for d in map(int, a.d.split(",")):
        for T in map(int, a.T.split(",")):
            B = 16384 // T
            q, do = (cp.asarray(rng.standard_normal((B, Hq, T, d)).astype(np.float16))
                     for _ in range(2))
            for causal in (False, True):
                flops = 2.5 * 4.0 * B * Hq * T * T * d * (0.5 if causal else 1.0)
                mha, cells = None, []
                for G in map(int, a.G.split(",")):
                    k, v = (cp.asarray(rng.standard_normal((B, Hq // G, T, d)).astype(np.float16))
                            for _ in range(2))
                    _, res = cuflash.attention(q, k, v, causal=causal, return_residuals=True)
                    fn = lambda: cuflash.attention_backward(do, res)
                    opts = [None] + [r for r in map(int, a.ranks.split(","))
                                     if G % r == 0 and (G > 1 or r == 1)]
                    opts = opts if G > 1 else [None]
                    times = {o: [] for o in opts}
                    for o in opts:
                        ops._GROUP_RANKS = o
                        fn()
                    for _ in range(a.rounds):
                        for o in opts:
                            ops._GROUP_RANKS = o
                            times[o].append(_ms(fn, a.calls))
                    ops._GROUP_RANKS = None
                    tf = {o: flops / statistics.median(t) / 1e9 for o, t in times.items()}
                    if G == 1:
                        mha = tf[None]
                    cells.append(f"G{G}: " + " ".join(
                        f"{'auto' if o is None else 'r' + str(o)} {x:.0f} ({x / mha:.3f})"
                        for o, x in tf.items()))
                    del res, k, v
                print(f"d={d} T={T} causal={causal}: " + " | ".join(cells), flush=True)
            del q, do
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
