import sys
"""Issue 12's speed criteria, each measured side by side in one process (the configurations of a
cell timed in alternating rounds, so that clock drift falls on all of them alike):

  gqa:     TFLOP/s at G = 4 and 8 against MHA (G = 1) at the same Hq = 16 and T, forward and
           backward, d = 128, causal and not, batch·T = 16384 (target >= 0.97).
  varlen:  a packed batch of 65536 tokens, lengths uniform in 1..8192 (seeded), against dense
           batches of the same total tokens at T = 4096 (the mean length) and T = 8192 (the
           longest), TFLOP/s of real work (visible scores of each sequence), forward and
           backward, Hq = 16, d = 128 (target >= 0.9). Two ways: "varlen" given the
           cu_seqlens arrays (each call reads them back to be checked: a device sync between
           calls; its backward timed from residuals without the forward's SeqLens, as before
           SeqLens existed), "seqlens" given a cuflash.SeqLens (checked once; no sync),
           "bounds" (forward only) given the arrays and both max_seqlen (flash-attn's call: the
           readback waits until the launch is prepared), "two_cu" (forward only) the same with
           a copy of cu_seqlens for the keys (the general packed kernels; the others pass one
           array and run the self-attention ones: NOTES v23).
  strided: a (B, T, H, d) array's transposed view (B, H, T, d) against the same values
           contiguous, forward and backward, and the pool growth of a forward on the view (the
           outputs only, no copy; target >= 0.97 and no growth beyond out and lse).

TFLOP/s: 4·d per visible score forward, 2.5 times that backward; the median over rounds of the
mean of `calls` calls between CUDA events, queued behind a spin kernel so that the first
call's host work is not timed (cuflash.experiments.gputime; NOTES v21). A ratio is the median
over rounds of the ratio within a round (each round times every configuration once, starting
one configuration later than the round before), so that the GPU's clock drift, which moves
every timing of a round alike, and the place in the round cancel; the median of the two
medians moved ±3% between runs (NOTES v15). NOTES.md v13.

    python3 tools/bench_issue12.py [--parts gqa,varlen,strided] [--rounds 5] [--calls 3]
                                   [--min-ms 0] [--bwd-tile 64x128x12x2]
"""
import argparse
import dataclasses
import math
import statistics

import cupy as cp
import numpy as np

import cuflash
from cuflash.experiments import gputime
from bench_fwd_tiles import _tile   # tools/: 'MxNxWxS' of kernel 'wgmma'


def _ms(fn, calls):
    """ms per call of `calls` calls between CUDA events, the host ahead (gputime)"""
    return gputime.gpu_ms(fn, calls)


def interleaved(fns: dict, rounds: int, calls: int, min_ms: float = 0.0) -> dict:
    """ms per call of each function in every round (a list per function), the functions taking
    turns, round r starting with the (r mod n)-th; each timing spans at least `calls` calls
    and, where one call is short, enough calls to last about `min_ms` (so that a 0.3 ms kernel
    is not timed over 1 ms of launches)."""
    n = {}
    for name, fn in fns.items():
        fn()
        n[name] = max(calls, math.ceil(min_ms / max(_ms(fn, 1), 1e-3)))
    names = list(fns)
    times = {name: [0.0] * rounds for name in fns}
    for r in range(rounds):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            times[name][r] = _ms(fns[name], n[name])
    return times


def rate(flops: float, times: list) -> float:
    """TFLOP/s from the median time of a list of ms per call"""
    return flops / statistics.median(times) / 1e9


def speedup(times: list, ref: list) -> float:
    """The median over rounds of ref's time over times' in the same round (> 1: faster than ref)"""
    return statistics.median(r / t for t, r in zip(times, ref))


def _rand(rng, shape):
    return cp.asarray(rng.standard_normal(shape).astype(np.float16))


def _pairs(L, causal):
    return L * (L + 1) // 2 if causal else L * L


def gqa(a, rng):
    Hq, d = 16, 128
    print(f"\ngqa: Hq={Hq}, d={d}, float16, batch·T=16384; TFLOP/s (ratio to G=1)")
    for T in (2048, 4096, 8192, 16384):
        B = 16384 // T
        q, do = _rand(rng, (B, Hq, T, d)), _rand(rng, (B, Hq, T, d))
        for causal in (False, True):
            fns, res = {}, {}
            for G in (1, 4, 8):
                k, v = _rand(rng, (B, Hq // G, T, d)), _rand(rng, (B, Hq // G, T, d))
                _, res[G] = cuflash.attention(q, k, v, causal=causal, return_residuals=True)
                fns[("forward", G)] = lambda k=k, v=v: cuflash.attention(q, k, v, causal=causal)
                fns[("backward", G)] = lambda G=G: cuflash.attention_backward(do, res[G],
                                                                              tile=a.bwd_tile)
            ms = interleaved(fns, a.rounds, a.calls, a.min_ms)
            flops = 4.0 * d * B * Hq * _pairs(T, causal)
            for pass_ in ("forward", "backward"):
                f = flops * (2.5 if pass_ == "backward" else 1.0)
                print(f"  {pass_:>8} T={T:>5} causal={causal!s:>5}: " + "  ".join(
                    f"G{G} {rate(f, ms[(pass_, G)]):6.1f} "
                    f"({speedup(ms[(pass_, G)], ms[(pass_, 1)]):.3f})" for G in (1, 4, 8)),
                    flush=True)
            del res, fns
        del q, do
        cp.get_default_memory_pool().free_all_blocks()


def varlen(a, rng):
    Hq, d, total = 16, 128, 65536
    lens, left = [], total
    while left > 0:
        L = min(left, int(rng.integers(1, 8193)))
        lens.append(L)
        left -= L
    cu = cp.asarray(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
    cu_k = cu.copy()
    print(f"\nvarlen: {len(lens)} sequences, {total} tokens, lengths uniform in 1..8192 "
          f"(min {min(lens)}, max {max(lens)}), Hq={Hq}, d={d}, float16; TFLOP/s of real work "
          f"(ratio to dense)")
    q, k, v, do = (_rand(rng, (total, Hq, d)) for _ in range(4))
    for causal in (False, True):
        fns = {}
        sl = cuflash.SeqLens(cu)
        _, res = cuflash.attention_varlen(q, k, v, sl, causal=causal, return_residuals=True)
        fns[("forward", "varlen")] = lambda: cuflash.attention_varlen(q, k, v, cu, cu,
                                                                      causal=causal)
        # the arrays' residuals keep the forward's SeqLens: read back once, as a SeqLens would
        _, res_sync = cuflash.attention_varlen(q, k, v, cu, cu, causal=causal,
                                               return_residuals=True)
        res_sync = dataclasses.replace(res_sync, seqlens=None)
        fns[("backward", "varlen")] = lambda: cuflash.attention_varlen_backward(do, res_sync)
        fns[("forward", "seqlens")] = lambda: cuflash.attention_varlen(q, k, v, sl,
                                                                       causal=causal)
        fns[("backward", "seqlens")] = lambda: cuflash.attention_varlen_backward(do, res)
        # the arrays and both bounds (flash-attn's call): read back once the launch is prepared
        fns[("forward", "bounds")] = lambda: cuflash.attention_varlen(
            q, k, v, cu, cu, causal=causal, max_seqlen_q=max(lens), max_seqlen_k=max(lens))
        # the same with a copy of cu for the keys: the general packed kernels (the keys' offsets
        # read from their own array) in place of the self-attention ones (NOTES v23)
        fns[("forward", "two_cu")] = lambda: cuflash.attention_varlen(
            q, k, v, cu, cu_k, causal=causal, max_seqlen_q=max(lens), max_seqlen_k=max(lens))
        real = 4.0 * d * Hq * sum(_pairs(L, causal) for L in lens)
        flops = {"varlen": real, "seqlens": real, "bounds": real, "two_cu": real}
        dres = {}
        for T in (4096, 8192):
            B = total // T
            qd, kd, vd, dod = (x.reshape(B, T, Hq, d).transpose(0, 2, 1, 3).copy()
                               for x in (q, k, v, do))
            _, dres[T] = cuflash.attention(qd, kd, vd, causal=causal, return_residuals=True)
            fns[("forward", T)] = (lambda qd=qd, kd=kd, vd=vd:
                                   cuflash.attention(qd, kd, vd, causal=causal))
            fns[("backward", T)] = lambda dod=dod, T=T: cuflash.attention_backward(dod, dres[T])
            flops[T] = 4.0 * d * Hq * B * _pairs(T, causal)
        ms = interleaved(fns, a.rounds, a.calls, a.min_ms)
        for pass_ in ("forward", "backward"):
            m = 2.5 if pass_ == "backward" else 1.0
            hows = [h for h in ("varlen", "seqlens", "bounds", "two_cu") if (pass_, h) in ms]
            tf = {key: rate(m * flops[key], ms[(pass_, key)]) for key in hows + [4096, 8192]}
            # real work per ms against dense's: the per-round speedup scaled by the FLOP ratio
            rel = {(how, T): speedup(ms[(pass_, how)], ms[(pass_, T)]) * flops[how] / flops[T]
                   for how in hows for T in (4096, 8192)}
            for how in hows:
                print(f"  {pass_:>8} causal={causal!s:>5} {how:>7}: {tf[how]:6.1f}   " +
                      "  ".join(f"dense T={T} {tf[T]:6.1f} ({rel[(how, T)]:.3f})"
                                for T in (4096, 8192)), flush=True)
        del res, dres, fns
    cp.get_default_memory_pool().free_all_blocks()


def strided(a, rng):
    B, T, H, d = 4, 4096, 16, 128
    print(f"\nstrided: (B, T, H, d) = ({B}, {T}, {H}, {d}) transposed to (B, H, T, d), float16; "
          f"TFLOP/s (ratio to contiguous)")
    base = [_rand(rng, (B, T, H, d)) for _ in range(4)]
    views = [x.transpose(0, 2, 1, 3) for x in base]
    conts = [cp.ascontiguousarray(x) for x in views]
    pool = cp.get_default_memory_pool()
    for causal in (False, True):
        fns, res = {}, {}
        for name, (q, k, v, do) in (("view", views), ("contiguous", conts)):
            _, res[name] = cuflash.attention(q, k, v, causal=causal, return_residuals=True)
            fns[("forward", name)] = (lambda q=q, k=k, v=v:
                                      cuflash.attention(q, k, v, causal=causal))
            fns[("backward", name)] = lambda do=do, name=name: cuflash.attention_backward(
                do, res[name], tile=a.bwd_tile)
        ms = interleaved(fns, a.rounds, a.calls, a.min_ms)
        flops = 4.0 * d * B * H * _pairs(T, causal)
        for pass_ in ("forward", "backward"):
            m = 2.5 if pass_ == "backward" else 1.0
            tf = {n: rate(m * flops, ms[(pass_, n)]) for n in ("view", "contiguous")}
            rel = speedup(ms[(pass_, "view")], ms[(pass_, "contiguous")])
            print(f"  {pass_:>8} causal={causal!s:>5}: view {tf['view']:6.1f} contiguous "
                  f"{tf['contiguous']:6.1f} ({rel:.3f})", flush=True)
        del res, fns
    # the pool keeps what a call freed: its total after a call from empty is the call's peak
    cp.cuda.Device().synchronize()
    pool.free_all_blocks()
    before = pool.total_bytes()
    out, lse = cuflash.attention(*views[:3], causal=True, return_lse=True)
    cp.cuda.Device().synchronize()
    grown = pool.total_bytes() - before
    expect = out.nbytes + lse.nbytes
    print(f"  pool growth of a forward on the view: {grown} bytes; out + lse: {expect} bytes "
          f"({'no copy' if grown <= expect + 4096 else 'MORE: a copy'})")
    del out, lse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="gqa,varlen,strided")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--min-ms", type=float, default=0.0,
                    help="each timing lasts about this long at least (more calls per timing)")
    ap.add_argument("--bwd-tile", default=None,
                    help="the gqa and strided parts' backward tile, block_m x block_n x warps x "
                         "stages of kernel 'wgmma' (e.g. 64x128x12x2); default: the library's")
    a = ap.parse_args()
    if a.bwd_tile is not None:
        a.bwd_tile = _tile(a.bwd_tile)
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "cupy", cp.__version__,
          "backward tile", a.bwd_tile.short() if a.bwd_tile else "default")
    rng = np.random.default_rng(12)
    for part in a.parts.split(","):
        {"gqa": gqa, "varlen": varlen, "strided": strided}[part](a, rng)


if __name__ == "__main__":
    import gpu_tool  # noqa: E402  (this folder: the script's own)
    sys.exit(gpu_tool.run(main))
