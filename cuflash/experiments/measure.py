"""Measuring one point: time, peak memory above the inputs, and error against the float64 oracle.

GPU: time from CUDA events after warm-up, each timed call queued behind a short spin kernel so
that the host's work for it is not counted as GPU time (``gputime``); peak memory
from a tracking allocator installed around one call (CuPy's pool keeps no high-water mark), minus
the bytes in use before it (the inputs). CPU: NumPy's BLAS pinned to ``measure.threads`` threads
(threadpoolctl; the count is recorded in the row), wall time (``time.perf_counter``) in batches
until the batch medians agree (``time_until_stable``), and the ``tracemalloc`` peak above the
inputs. Inputs are random normal, generated once per point.

Only the pass named by the point is measured: a backward point times ``attention_backward`` alone,
given the forward's out and lse computed beforehand (naive: ``naive_attention_backward`` alone).
Every method runs the point's attention variant with the same options (``variants.call_options``:
window, softcap, ALiBi slopes, a documents mask_mod), on the arrays of its layout
(``layouts.input_shapes``: GQA's k and v with Hkv heads, a packed varlen batch with its
cu_seqlens, the padded batch) through the layout's functions (``layouts.functions``:
attention or attention_varlen; materialized repeats K/V inside the forward and sums dK/dV over
each group after the backward). float32's precision (``Point.precision``,
:func:`precision_option`) goes to the forward calls of naive, flash and twin (a backward
point's: the forward that makes its residuals; the backward takes none); the error can be
checked on a sample of heads (``measure.error_heads``, :func:`error_sample`). A KV-cache point
(``decode``) is one decode step on the
arrays ``decode.make_inputs`` allocates (whose bytes, tokens, slots and pages its row records),
through ``decode.build_call``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
import time
import traceback
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import api, oracle
from .._xp import cupy_module, resolve_dtype
from ..checks import SeqLens
from . import decode, gputime, layouts, variants
from .points import Point
from .schema import Measure
from .unavailable import Unavailable, point_module


_OOM_TEXT = ("out of memory", "cudaerrormemoryallocation", "cublas_status_alloc_failed",
             "cuda_error_out_of_memory")


def is_oom(exc: BaseException) -> bool:
    """True for MemoryError, CuPy's OutOfMemoryError and CUDA errors whose text says out of memory."""
    if isinstance(exc, MemoryError):
        return True
    cp = cupy_module()
    if cp is not None and isinstance(exc, cp.cuda.memory.OutOfMemoryError):
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(t in text for t in _OOM_TEXT)


@dataclasses.dataclass
class Call:
    """The measured call of one point, ready to run."""

    fn: Callable[[], Any]
    """Runs the measured pass once and returns its outputs."""
    kind: str
    """'cupy', 'torch' or 'cpu': how time and memory are read."""
    outputs: Callable[[Any], tuple]
    """Outputs of ``fn`` as NumPy arrays: (out,), (dq, dk, dv) or (out, dq, dk, dv)."""


# -- inputs ---------------------------------------------------------------------------------------

def make_inputs(point: Point, seed: int, on_host: bool = False) -> dict:
    """q, k, v (and dout for a backward pass): random normal arrays of the point's layout
    (``layouts.input_shapes``: (batch, heads, T|S, d), k and v with Hkv heads; a packed varlen
    batch (tokens, heads, d) and its int32 ``cu_seqlens``) in the point's dtype, NumPy on the
    CPU and CuPy on the GPU (``on_host``: NumPy copied to the GPU, so no kernel runs to make
    them). A KV-cache point: ``decode.make_inputs``."""
    if point.cache:
        return decode.make_inputs(point, seed, on_host)
    dtype = resolve_dtype(point.dtype)
    shapes = layouts.input_shapes(point)
    cu = layouts.cu_seqlens(point)
    cp = point_module(point)
    gpu = cp is not np
    extra = {} if cu is None else {"cu_seqlens": cu}
    if gpu and not on_host:
        rng = cp.random.default_rng(seed)
        made = {n: rng.standard_normal(s, dtype=cp.float32).astype(dtype)
                for n, s in shapes.items()}
        return {**made, **{n: cp.asarray(a) for n, a in extra.items()}}
    rng = np.random.default_rng(seed)
    host = {n: rng.standard_normal(s, dtype=np.float32).astype(dtype) for n, s in shapes.items()}
    host.update(extra)
    return {n: cp.asarray(a) for n, a in host.items()} if gpu else host


def _to_numpy(x) -> np.ndarray:
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)


# -- the measured call ----------------------------------------------------------------------------

def precision_option(point: Point) -> dict:
    """``{'precision': ...}`` for the point's calls (flash, twin, naive, forward and backward; a
    packed varlen batch's naive functions too), or {} for None (the dtype's default). Flash's
    backward gets it through its tile's kernel family (points._variants)."""
    return {} if point.precision is None else {"precision": point.precision}


def build_call(point: Point, inputs: dict) -> Call:
    """The callable measured at this point (setup such as the forward's out/lse done here)."""
    if point.cache:
        return decode.build_call(point, inputs)
    if point.method_name == "torch_sdpa":
        from .torch_sdpa import build_call as torch_call
        return torch_call(point, inputs)
    kind = "cupy" if point.device == "gpu" else "cpu"
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    dout = inputs.get("dout")
    xp = point_module(point)
    opts = variants.call_options(point, xp)        # causal and the variant, on q's device
    prec = precision_option(point)                 # float32's

    def as_numpy(result):
        return tuple(_to_numpy(x) for x in (result if isinstance(result, tuple) else (result,)))

    pos = layouts.positional(point, inputs)          # cu_seqlens of a packed varlen batch
    fold = lambda grads: layouts.fold_grads(point, grads, xp)                       # noqa: E731
    kv = lambda: layouts.kv_for_call(point, k, v, xp)    # materialized: repeated  # noqa: E731

    if point.method_name == "naive":
        nfwd, nbwd = layouts.functions(point, "naive")
        fwd = lambda: nfwd(q, *kv(), *pos, **opts, **prec)                          # noqa: E731
        if point.pass_ == "forward":
            return Call(fwd, kind, as_numpy)
        k2, v2 = kv()                  # as the forward left them (not measured)
        bwd = lambda: fold(nbwd(dout, q, k2, v2, *pos, **opts, **prec))             # noqa: E731
        if point.pass_ == "backward":
            return Call(bwd, kind, as_numpy)
        return Call(lambda: (fwd(),) + fold(nbwd(dout, q, *kv(), *pos, **opts, **prec)), kind,
                    as_numpy)

    # flash and twin: cuflash.attention / attention_varlen on the point's arrays (NumPy arrays
    # run the CPU twin); attention_backward takes either's residuals. A packed batch's
    # cu_seqlens are checked once here (cuflash.SeqLens), not read back in every timed call.
    attend, _ = layouts.functions(point, "api")
    if pos:
        pos = (SeqLens(*pos),)
    det = bool(point.deterministic)
    if point.pass_ == "forward":
        return Call(lambda: attend(q, *kv(), *pos, tile=point.fwd_tile, **opts, **prec), kind,
                    as_numpy)
    if point.pass_ == "backward":
        # the forward with the default tile of the point's precision, not measured
        _, res = attend(q, *kv(), *pos, return_residuals=True, **opts, **prec)
        return Call(lambda: fold(api.attention_backward(dout, res, tile=point.bwd_tile,
                                                        deterministic=det)), kind, as_numpy)

    def both():
        o, res_ = attend(q, *kv(), *pos, tile=point.fwd_tile, return_residuals=True, **opts,
                         **prec)
        return (o,) + fold(api.attention_backward(dout, res_, tile=point.bwd_tile,
                                                  deterministic=det))
    return Call(both, kind, as_numpy)


# -- time -----------------------------------------------------------------------------------------

#: A CPU batch lasts at least this long (and at least ``repeats`` calls), so that its median is
#: not taken over a handful of calls of a few microseconds each.
MIN_BATCH_SECONDS = 0.02
#: CPU timing stops once the medians of this many consecutive batches agree.
STABLE_WINDOW = 3


def time_call(call: Call, cfg: Measure) -> dict:
    """Time the call (after ``cfg.warmup`` untimed ones): ``summarize``'s columns.

    GPU (CuPy, torch): ``cfg.repeats`` CUDA-event timings with the host ahead
    (``gputime.gpu_times``; fewer when ``cfg.max_seconds`` runs out). CPU:
    ``time_until_stable``; the summary is over its last batches and adds
    ``time_spread``, the relative spread of their medians."""
    if call.kind in ("cupy", "torch"):
        return summarize(gputime.gpu_times(call.fn, cfg.repeats, cfg.warmup, cfg.max_seconds))
    times, spread = time_until_stable(call.fn, cfg.repeats, cfg.warmup, cfg.max_seconds,
                                      cfg.stable_spread)
    return dict(summarize(times), time_spread=spread)


def relative_spread(values) -> float:
    """(max - min) / median of the values."""
    v = np.asarray(values, dtype=np.float64)
    return float((v.max() - v.min()) / np.median(v))


def time_until_stable(fn, repeats: int, warmup: int, max_seconds: float,
                      stable_spread: float, clock=time.perf_counter
                      ) -> tuple[list[float], float | None]:
    """Wall-clock milliseconds of calls of ``fn`` in batches (each at least ``repeats`` calls
    and ``MIN_BATCH_SECONDS``), until the medians of the last ``STABLE_WINDOW`` batches are
    within ``stable_spread`` of each other (relative spread) or ``max_seconds`` have passed.

    Returns the times of those last batches and their medians' relative spread (None with a
    single batch). Python's garbage collector is off while timing, as in ``timeit``; ``clock``
    is the timer (seconds)."""
    for _ in range(warmup):
        fn()
    batches: list[list[float]] = []
    spread = None
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = clock()
        while True:
            batch: list[float] = []
            b0 = clock()
            while len(batch) < repeats or clock() - b0 < MIN_BATCH_SECONDS:
                t0 = clock()
                fn()
                batch.append((clock() - t0) * 1e3)
                if clock() - start > max_seconds:
                    break
            batches.append(batch)
            window = batches[-STABLE_WINDOW:]
            if len(window) > 1:
                spread = relative_spread([np.median(b) for b in window])
            if len(window) == STABLE_WINDOW and spread <= stable_spread:
                break
            if clock() - start > max_seconds:
                break
    finally:
        if was_enabled:
            gc.enable()
    return [t for b in batches[-STABLE_WINDOW:] for t in b], spread


def summarize(times_ms) -> dict:
    """Median, minimum, 20th and 80th percentile of the timed calls, in ms."""
    t = np.asarray(times_ms, dtype=np.float64)
    return {"repeats": len(t), "time_ms_median": float(np.median(t)),
            "time_ms_min": float(t.min()),
            "time_ms_p20": float(np.percentile(t, 20)), "time_ms_p80": float(np.percentile(t, 80))}


# -- memory ---------------------------------------------------------------------------------------

def _cupy_peak(fn):
    """Run fn once with a tracking allocator; (result, peak bytes of the pool above the start)."""
    cp = cupy_module()
    pool = cp.get_default_memory_pool()
    cp.cuda.Device().synchronize()
    base = pool.used_bytes()
    peak = base

    def malloc(size):
        nonlocal peak
        mem = pool.malloc(size)
        peak = max(peak, pool.used_bytes())
        return mem

    previous = cp.cuda.get_allocator()
    cp.cuda.set_allocator(malloc)
    try:
        result = fn()
        cp.cuda.Device().synchronize()
    finally:
        cp.cuda.set_allocator(previous)
    return result, peak - base


def _torch_peak(fn):
    import torch
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() - base


def _cpu_peak(fn):
    """(result, tracemalloc peak above the start): NumPy reports its buffers to tracemalloc."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if started:
            tracemalloc.stop()
    return result, peak


def peak_memory(call: Call):
    """(result, peak bytes above the inputs) of one call."""
    return {"cupy": _cupy_peak, "torch": _torch_peak, "cpu": _cpu_peak}[call.kind](call.fn)


# -- error ----------------------------------------------------------------------------------------

def error_sample(point: Point, heads: int) -> tuple[int, int] | None:
    """(query heads, kv heads) of the first batch entry that the oracle checks with
    ``measure.error_heads = heads`` (whole GQA groups, so that dK and dV are complete), or None
    for the whole problem: heads 0, nothing left out, or a point it does not sample (a packed
    varlen batch, a KV-cache step; a ring checks its own)."""
    if not heads or point.cache or layouts.packed_varlen(point) or point.method_name == "ring":
        return None
    batch, hq, _, _ = point.run_shape
    nq = min(hq, -(-heads // point.group) * point.group)
    if batch == 1 and nq == hq:
        return None
    return nq, nq // point.group


def error_scores(point: Point, heads: int = 0) -> int:
    """Score entries the float64 oracle materializes for the point (``error_sample``'s heads of
    one batch entry, or ``Point.run_scores``): what ``measure.error_limit`` bounds."""
    sample = error_sample(point, heads)
    if sample is None:
        return point.run_scores
    _, _, T, S = point.run_shape
    return sample[0] * T * S


def _sampled(point: Point, inputs: dict, outputs: tuple, opts: dict, heads: int):
    """(inputs, outputs, options) cut to ``error_sample``'s heads of the first batch entry (the
    ALiBi slopes of those heads); as they are for the whole problem. Arrays are (batch, heads,
    T|S, d), on any device; the outputs (out,), (dq, dk, dv) or both, shaped like q, k, v."""
    sample = error_sample(point, heads)
    if sample is None:
        return inputs, outputs, opts
    nq, nkv = sample
    n_out = (nq,) * (point.pass_ in ("forward", "both")) + (
        (nq, nkv, nkv) if point.pass_ in ("backward", "both") else ())
    if len(outputs) != len(n_out):         # oracle_error says what is wrong
        return inputs, outputs, opts
    cut = {"q": nq, "dout": nq, "k": nkv, "v": nkv}
    inputs = {n: a[:1, :cut[n]] for n, a in inputs.items()}
    outputs = tuple(x[:1, :n] for x, n in zip(outputs, n_out))
    if "alibi_slopes" in opts:
        opts = dict(opts, alibi_slopes=opts["alibi_slopes"][:nq])
    return inputs, outputs, opts


def oracle_error(point: Point, inputs: dict, outputs: tuple, heads: int = 0) -> float:
    """Largest rel_error of the outputs against the float64 oracle (backward: over dq, dk, dv),
    with the point's variant, on the point's own arrays (GQA's Hkv heads, a packed batch one
    sequence at a time; a KV-cache step: ``decode.oracle_error``). ``heads`` > 0: only the
    first ``heads`` query heads (whole GQA groups) of the first batch entry (``error_sample``,
    ``measure.error_heads``), so that the oracle's T x S matrices fit at large batch·heads."""
    if point.cache:
        return decode.oracle_error(point, inputs, outputs)
    inputs, outputs, opts = _sampled(point, inputs, outputs, variants.call_options(point, np),
                                     heads)
    host = {n: _to_numpy(a) for n, a in inputs.items()}       # (only the sample copied)
    pos = layouts.positional(point, host)
    fwd, bwd = layouts.functions(point, "oracle")
    refs: tuple = ()
    if point.pass_ in ("forward", "both"):
        refs += (fwd(host["q"], host["k"], host["v"], *pos, **opts)[0],)
    if point.pass_ in ("backward", "both"):
        refs += tuple(bwd(host["dout"], host["q"], host["k"], host["v"], *pos, **opts))
    if len(refs) != len(outputs):
        raise RuntimeError(f"{point.method} returned {len(outputs)} arrays, expected {len(refs)}")
    return max(oracle.rel_error(x, ref) for x, ref in zip(outputs, refs))


# -- one point ------------------------------------------------------------------------------------

def free_device_memory() -> None:
    """Return cached blocks of CuPy's pools (and torch's, if loaded) between points."""
    gc.collect()
    cp = cupy_module()
    if cp is not None:
        try:
            cp.get_default_memory_pool().free_all_blocks()
            cp.get_default_pinned_memory_pool().free_all_blocks()
        except Exception:
            pass
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                torch.cuda.empty_cache()
        except Exception:
            pass


def measure_point(point: Point, cfg: Measure) -> dict:
    """Measure one point; exceptions propagate (the runner classifies OOM, unavailable, error).

    Order: one call under the memory probe (its outputs give the error), then warm-up and timing.
    A KV-cache point makes one call before the probe (``_measure``). A ring point is measured by
    its own worker processes (``ring.measure``).
    """
    if point.method_name == "ring":
        from .ring import measure as measure_ring
        return measure_ring(point, cfg)
    if point.device == "gpu":
        from .._xp import gpu_available
        if not gpu_available():
            raise Unavailable("no CUDA GPU is visible to CuPy")
        return _measure(point, cfg)
    with blas_threads(cfg.threads) as threads:
        return dict(_measure(point, cfg), threads=threads)


def time_point(point: Point, cfg: Measure) -> dict:
    """One more timing of a CPU point (fresh inputs, BLAS pinned): ``time_call``'s columns and
    ``threads``. Used for the extra rounds of ``measure.rounds``."""
    with blas_threads(cfg.threads) as threads:
        inputs = make_inputs(point, cfg.seed)
        return dict(time_call(build_call(point, inputs), cfg), threads=threads)


@contextlib.contextmanager
def blas_threads(n: int):
    """Pin NumPy's BLAS to ``n`` threads (threadpoolctl) inside the block; yields the thread
    count in effect (the largest over the BLAS libraries loaded), None when none is found."""
    from threadpoolctl import threadpool_info, threadpool_limits
    with threadpool_limits(limits=n, user_api="blas"):
        counts = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
        yield max(counts) if counts else None


def _measure(point: Point, cfg: Measure) -> dict:
    row: dict = {}
    inputs = make_inputs(point, cfg.seed)
    if point.cache:
        row.update(decode.allocation_columns(point, inputs))
    call = build_call(point, inputs)
    want_error = (cfg.error and error_scores(point, cfg.error_heads) <= cfg.error_limit
                  and (not point.cache or decode.has_oracle(point)))
    if point.cache and cfg.memory:
        # one call first (its append rewrites the same slots): what a process allocates on its
        # first call (imports, caches) is not the step's; measured 1.25 MB against 45 kB on
        # cpu_kv_cache.yaml's first point
        call.fn()
    if cfg.memory or want_error:
        if cfg.memory:
            result, row["peak_mem_bytes"] = peak_memory(call)
        else:
            result = call.fn()
        if want_error:
            row["error_rel"] = oracle_error(point, inputs, call.outputs(result),
                                            cfg.error_heads)
        del result
    if cfg.time:
        row.update(time_call(call, cfg))
    return row


def _where(exc: BaseException) -> str:
    """' (at cuflash/naive.py:23 in _matmul)': the innermost cuflash frame of the traceback."""
    root = Path(__file__).resolve().parents[1]
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if Path(f.filename).resolve().is_relative_to(root)
              and not f.filename.endswith(("runner.py", "measure.py"))]
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {Path(f.filename).resolve().relative_to(root.parent)}:{f.lineno} in {f.name})"


def _shorten(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, note) for an exception raised while measuring one point. An error's note ends with
    where in cuflash it was raised."""
    if isinstance(exc, Unavailable):
        return "unavailable", _shorten(str(exc))
    text = _shorten(f"{type(exc).__name__}: {exc}")
    if is_oom(exc):
        return "oom", text
    if getattr(exc, "located", False):      # the message says where (ring.WorkerError)
        return "error", _shorten(str(exc), 400)
    return "error", _shorten(text, 240) + _where(exc)
