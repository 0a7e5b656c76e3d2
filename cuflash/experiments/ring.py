"""Ring attention in experiments (issue 16): the method ``ring``, measured by worker processes.

A method entry ``{name: ring, world_size: 2, slicing: zigzag, launch: processes}`` has a point at
every (T, causal, window, softcap, ...) of the sweeps, like ``flash``, and runs there
``cuflash.distributed.ring_attention`` (and its backward, by the point's ``pass``) on a sequence
of T tokens cut into ``world_size`` parts (``slicing``: zigzag or contiguous,
``cuflash.distributed.layout``). A point is measured by worker processes that this module starts
and watches (:func:`measure`); the runner's own process measures nothing of it:

* ``launch: processes`` (GPUs): ``world_size`` processes, one GPU each, started with the
  environment other launchers set (RANK, WORLD_SIZE, LOCAL_RANK = rank, MASTER_ADDR =
  127.0.0.1, MASTER_PORT a free port): each makes ``NcclComm.from_env(launcher="env")``, so
  the workers rendezvous over TCP and talk over NCCL exactly as ``examples/ring_demo.py``
  under a launcher does. A machine with fewer GPUs than ``world_size`` records the point as
  'unavailable' ("skipped: ...") without starting anything.
* ``launch: simulated``: one process running the ranks as threads of a
  ``cuflash.distributed.SimulatedRing`` (the CPU twin on NumPy arrays; CuPy arrays on one GPU
  with ``device: gpu``): the whole path, CI included, without NCCL.

Every rank measures its own time; rank 0 gathers them (``comm.allgather``) and writes the row.
A worker that fails (an exception, out of memory, a crash) writes what went wrong to its status
file and exits; its peers, which may be waiting for it inside NCCL, are stopped
:data:`GRACE_S` seconds later; nothing outlives ``timeout_s`` (method option, default
:data:`DEFAULT_TIMEOUT_S`). A failure is a row, not the end of the run: out of memory on any
rank is 'oom' (larger T of the method then 'oom-skipped' by the runner), anything else 'error'
with the failing rank's message and where it was raised, a time-out 'error' saying which ranks
had not finished.

What a point measures, all on the same arrays in the same processes (each rank's local q, k, v
(and dout) of shape (batch, heads, T / world_size, d); random unless the point is small enough
for the float64 oracle (``measure.error_limit``), then one seeded global problem sharded):

1. one call of the pass with the memory probe (processes: CuPy's pool through a tracking
   allocator on every rank; ``peak_mem_bytes``: the largest rank's peak above its inputs,
   ``peak_total_bytes``: the largest rank's peak in use, inputs included; NCCL's own buffers
   are not in CuPy's pool; simulated ranks share one heap: not measured) and, within the
   oracle's limit, ``error_rel`` (every rank's rows against the float64 oracle of the whole
   problem, max error over max reference across ranks, as ``oracle.rel_error``); this call
   also records the shapes of every shift the ring makes;
2. ``measure.warmup`` more calls, then ``time_ms_*``: up to ``measure.repeats`` timed calls
   (fewer once ``measure.max_seconds`` have passed: the ranks vote at each start), each
   started on all ranks together (an allgather as barrier), timed on each rank's host clock
   around the call with the stream synchronized; a call's time is the slowest rank's, and
   ``rank_spread`` is (max - min) / max of the ranks' median times;
3. ``split: true`` (default): whether the communication is hidden. ``ring_compute_ms``: the same
   calls with a loopback communicator (every shift hands back the block it was given: the same
   local kernels, merges and sums, no transfer); ``ring_comm_ms``: the recorded shifts alone,
   same sizes, same order, nothing computed (NCCL send/recv to the next rank). Then
   ``comm_exposed_ms`` = time - compute (what the ring costs above its kernels: transfers not
   hidden, plus whatever the concurrent NCCL kernels take from the attention kernels; noise
   can make it negative) and ``comm_hidden`` = 1 - max(exposed, 0) / comm, clipped to [0, 1]
   (1: the ring is as fast as its kernels alone). Same number of calls as the timing, each
   the slowest rank's;
4. ``serial: true``: ``ring_serial_ms``, the ring with every shift waited for before the step's
   kernels start (no overlap): compute + communication in sequence.

Throughput per GPU (``tflops_per_gpu``, filled by the runner for every row): the FLOPs of the
whole problem (``layouts.flops``, visible pairs only) / time / world_size; a single-GPU row's is
its ``tflops``. The ratio ring / single at the same T is then t_single / (world_size · t_ring).
``pred_bytes`` of a ring row is the IO model of the whole problem as one flash call with the
library's default tiles (:func:`as_single`): the ring's transfers and its per-rank calls are not
modelled.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..distributed.layout import LAYOUTS as SLICINGS
from ..distributed.layout import chunks_per_rank
from .unavailable import Unavailable, point_module

#: The method's name in experiment files.
METHOD = "ring"
#: How the ranks run: one process per GPU (NCCL), or threads of one process (SimulatedRing).
LAUNCHES = ("processes", "simulated")
#: Method columns of the results (and of a point's key): the ranks, the slicing, the launch.
KEY_COLUMNS = ("world_size", "slicing", "launch")
#: Columns only ring rows fill (module docstring).
MEASURED_COLUMNS = ("ring_compute_ms", "ring_comm_ms", "ring_serial_ms", "comm_exposed_ms",
                    "comm_hidden", "rank_spread")
DEFAULT_TIMEOUT_S = 600.0
"""Seconds a point's workers may take, start-up and kernel compilation included."""
GRACE_S = 5.0
"""After a worker failed, seconds its peers get to finish (they see the failure as a broken
ring) before they are stopped."""
_MAX_TIMED = 100
"""Timed calls per kind at most (their times travel in one allgather of at most 16 KiB)."""


@dataclasses.dataclass(frozen=True)
class Options:
    """The options of a ``ring`` method entry (see the module docstring)."""

    world_size: int = 2
    slicing: str = "zigzag"
    launch: str = "processes"
    split: bool = True
    serial: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S

    def point_fields(self) -> dict:
        """The ``points.Point`` fields of a point of this entry."""
        return {"world_size": self.world_size, "slicing": self.slicing, "launch": self.launch,
                "ring_split": self.split, "ring_serial": self.serial,
                "ring_timeout_s": self.timeout_s}


# -- schema helpers (called by schema.build) ------------------------------------------------------

def divisor(world_size: int, slicing: str) -> int:
    """What every T must be a multiple of: the number of equal chunks (2·N zigzag, N contiguous)."""
    return chunks_per_rank(slicing) * world_size


def axes_problems(ax, opts: Options) -> list[tuple[str, str]]:
    """[(axis key, why)] of what a sweep asks that a ring point cannot run (empty: fine). A
    KV-cache sweep has no ring points and no problems."""
    if ax.cache:
        return []
    out = []
    if any(s != "seq_len" for s in ax.kv_len):
        out.append(("kv_len", f"ring attention splits one sequence of T tokens (queries, keys "
                              f"and values alike): use kv_len: seq_len, got {list(ax.kv_len)}"))
    parts = divisor(opts.world_size, opts.slicing)
    for T in ax.seq_len:
        if T % parts:
            out.append(("seq_len", f"seq_len={T} is not divisible by {parts}: {opts.slicing} "
                                   f"slicing over world_size={opts.world_size} ranks cuts the "
                                   f"sequence into {parts} equal chunks"))
            break
    if True in ax.alibi:
        out.append(("alibi", "ring_attention does not take ALiBi (its distance needs global "
                             "positions that a local call cannot express); drop it from the "
                             "sweeps the ring runs in"))
    for key, plain in (("mask", (None,)), ("varlen", (None,)), ("group", (1,))):
        if tuple(getattr(ax, key)) != plain:
            out.append((key, f"{key} is not wired into the ring method (its points run causal "
                             f"or not, windows and softcap on one dense sequence); put it in a "
                             f"sweep the ring does not run in, or drop the ring"))
    return out


# -- points and predictions -----------------------------------------------------------------------

def is_ring(point) -> bool:
    return getattr(point, "method_name", None) == METHOD


def describe(point) -> str:
    """' ring of 2 ranks (zigzag, processes)' for a ring point, '' otherwise."""
    if not is_ring(point):
        return ""
    return f" ring of {point.world_size} ranks ({point.slicing}, {point.launch})"


def as_single(point):
    """The same problem as one flash call with the library's default tiles (deterministic dQ):
    what the IO model counts for a ring row (``runner.predicted``)."""
    from ..tile import default_tile
    fwd = point.pass_ in ("forward", "both")
    bwd = point.pass_ in ("backward", "both")
    causal = bool(point.causal)
    return dataclasses.replace(
        point, method_name="flash",
        fwd_tile=default_tile(point.head_dim, point.dtype, causal=causal) if fwd else None,
        bwd_tile=default_tile(point.head_dim, point.dtype, backward=True, causal=causal,
                              deterministic=True) if bwd else None,
        deterministic=True if bwd else None)


def model_notes(point) -> list[str]:
    if not is_ring(point):
        return []
    return ["pred_bytes: the whole problem as one flash call (default tiles); the ring's "
            "transfers and per-rank calls are not modelled"]


def measure_again(row: dict) -> bool:
    """Whether a resumed run measures this row again although it is not an error: a ring row
    skipped for want of GPUs (the next machine may have them)."""
    return row.get("method_name") == METHOD and row.get("status") == "unavailable"


# -- the launcher (the runner's process) ----------------------------------------------------------

class WorkerError(RuntimeError):
    """A ring point's workers failed or timed out; the message says which rank and why (and
    where the failing rank raised it), so ``measure.classify`` adds no location of its own."""

    located = True


def worker_argv(folder: Path) -> list[str]:
    """The command of one worker process (``folder``: the point's spec and status files).
    Tests replace it to plant failures."""
    return [sys.executable, "-m", "cuflash.experiments.ring", str(folder)]


def _repo_root() -> str:
    """The folder holding the ``cuflash`` package this process runs (for the workers' path)."""
    return str(Path(__file__).resolve().parents[2])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_count() -> int:
    """CUDA GPUs visible to CuPy here (0 without CuPy or a driver)."""
    from .._xp import cupy_module, gpu_available
    if not gpu_available():
        return 0
    try:
        return int(cupy_module().cuda.runtime.getDeviceCount())
    except Exception:
        return 0


_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _worker_env(rank: int, processes: int, port: int, point) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in _LAUNCH_VARS and not k.startswith(("OMPI_", "PMI_", "PMIX_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_repo_root(), env.get("PYTHONPATH")) if p)
    env.update(PYTHONUNBUFFERED="1", NCCL_NVLS_ENABLE="0",
               CUFLASH_DIST_TIMEOUT=f"{point.ring_timeout_s or DEFAULT_TIMEOUT_S:g}")
    if point.launch == "processes":
        env.update(RANK=str(rank), WORLD_SIZE=str(processes), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return env


def measure(point, cfg) -> dict:
    """Measure one ring point in worker processes (module docstring); the row's measured
    columns. Raises ``measure.Unavailable`` (too few GPUs, no NCCL), MemoryError (a rank ran out
    of memory) or :class:`WorkerError` (anything else, time-outs included), which the runner
    records as the row's status and note."""
    n = int(point.world_size)
    if point.launch == "processes":
        have = gpu_count()
        if have < n:
            raise Unavailable(f"skipped: a ring of {n} ranks runs one process per GPU and needs "
                              f"{n} GPUs; {have} visible here")
        processes = n
    else:
        processes = 1
    timeout = float(point.ring_timeout_s or DEFAULT_TIMEOUT_S)
    with tempfile.TemporaryDirectory(prefix="cuflash-ring-") as tmp:
        folder = Path(tmp)
        spec = {"point": point.to_json(), "measure": dataclasses.asdict(cfg)}
        (folder / "spec.json").write_text(json.dumps(spec))
        port = _free_port()
        procs: list[subprocess.Popen] = []
        logs = []
        stopped: set[int] = set()
        try:
            for r in range(processes):
                log = open(folder / f"rank{r}.log", "wb")
                logs.append(log)
                procs.append(subprocess.Popen(worker_argv(folder), cwd=_repo_root(),
                                              env=_worker_env(r, processes, port, point),
                                              stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT))
            outcome, elapsed = _wait(procs, timeout)
        finally:
            stopped = _stop(procs)
            for log in logs:
                log.close()
        return _collect(folder, procs, outcome, elapsed, stopped, point)


def _wait(procs, timeout: float) -> tuple[str, float]:
    """Watch the workers: ('done', s) when all exited, ('failed', s) once one failed and its
    peers had GRACE_S to follow, ('timeout', s) at the deadline."""
    start = time.monotonic()
    failed_at = None
    while True:
        now = time.monotonic()
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return "done", now - start
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = now
        if failed_at is not None and now - failed_at > GRACE_S:
            return "failed", now - start
        if now - start > timeout:
            return "timeout", now - start
        time.sleep(0.02)


def _stop(procs) -> set[int]:
    """Terminate (then kill) the workers still running; the ranks that were stopped."""
    stopped = {r for r, p in enumerate(procs) if p.poll() is None}
    for r in stopped:
        with contextlib.suppress(OSError):
            procs[r].terminate()
    deadline = time.monotonic() + 3.0
    for r in stopped:
        try:
            procs[r].wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                procs[r].kill()
            procs[r].wait()
    return stopped


def _log_tail(path: Path, lines: int = 2, limit: int = 240) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    tail = " | ".join([ln.strip() for ln in text.splitlines() if ln.strip()][-lines:])
    return tail if len(tail) <= limit else "..." + tail[-limit:]


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _collect(folder: Path, procs, outcome: str, elapsed: float, stopped: set[int], point) -> dict:
    """The row from rank 0's status file, or the exception that describes what failed."""
    n = len(procs)
    status = {}
    for r in range(n):
        path = folder / f"rank{r}.json"
        if path.is_file():
            with contextlib.suppress(ValueError, OSError):
                status[r] = json.loads(path.read_text())
    first = status.get(0, {})
    if outcome == "done" and all(status.get(r, {}).get("ok") for r in range(n)) \
            and isinstance(first.get("row"), dict):
        return first["row"]
    failures = [f for r in sorted(status) for f in status[r].get("failures", [])]
    causes = [f for f in failures if f.get("cause")] or failures
    texts = [f"rank {f['rank']} of {point.world_size}: {f['error']}" for f in causes]
    for r, p in enumerate(procs):
        code = p.returncode
        if r in status or r in stopped or code is None:
            continue
        why = (f"killed by {_signal_name(code)}" if code < 0 else f"exited with code {code}")
        texts.append(f"worker {r} {why} without a report"
                     + (f" (log: {_log_tail(folder / f'rank{r}.log')})" if code else ""))
        if code == -signal.SIGKILL:
            raise MemoryError(f"{texts[-1]}: by the OS for lack of host memory, most likely")
    if outcome == "timeout":
        late = sorted(stopped)
        texts.insert(0, f"timed out after {elapsed:.0f} s (method option timeout_s="
                        f"{point.ring_timeout_s:g}): worker{'s' * (len(late) != 1)} {late} had "
                        f"not finished (log of worker {late[0] if late else 0}: "
                        f"{_log_tail(folder / f'rank{late[0] if late else 0}.log')})")
    elif stopped and texts:
        texts.append(f"worker{'s' * (len(stopped) != 1)} {sorted(stopped)} stopped "
                     f"{GRACE_S:g} s after the failure")
    if not texts:
        texts = [f"the workers finished without a row (log: {_log_tail(folder / 'rank0.log')})"]
    note = "; ".join(texts)
    if outcome != "timeout" and any(f.get("oom") for f in causes):
        raise MemoryError(note)
    if outcome != "timeout" and causes and all(f.get("unavailable") for f in causes):
        raise Unavailable(note)
    raise WorkerError(note)


# -- communicators around the real one (the worker's side) ---------------------------------------

class _Done:
    def __init__(self, arrays):
        self._arrays = arrays

    def wait(self) -> list:
        return self._arrays


class LoopbackComm:
    """A communicator whose shift hands back the arrays it is given, at once: the ring's local
    kernels, merges and sums without any transfer (compute-only time). ``allgather`` returns the
    object once per rank."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size

    def shift(self, arrays):
        return _Done(list(arrays))

    def allgather(self, obj) -> list:
        return [obj] * self.world_size


class RecordingComm:
    """The real communicator, recording the (shape, dtype) of every array of every shift."""

    def __init__(self, comm):
        self._comm = comm
        self.rank, self.world_size = comm.rank, comm.world_size
        self.shifts: list[list[tuple]] = []

    def shift(self, arrays):
        arrays = list(arrays)
        self.shifts.append([(tuple(a.shape), a.dtype) for a in arrays])
        return self._comm.shift(arrays)

    def allgather(self, obj) -> list:
        return self._comm.allgather(obj)

    def abort(self):
        if hasattr(self._comm, "abort"):
            self._comm.abort()


class SerialComm:
    """The real communicator with every shift waited for when it is posted: the step's kernels
    start only once its transfer is over (the ring without overlap)."""

    def __init__(self, comm):
        self._comm = comm
        self.rank, self.world_size = comm.rank, comm.world_size

    def shift(self, arrays):
        return _Done(self._comm.shift(arrays).wait())

    def allgather(self, obj) -> list:
        return self._comm.allgather(obj)

    def abort(self):
        if hasattr(self._comm, "abort"):
            self._comm.abort()


# -- the worker -----------------------------------------------------------------------------------

class PeerFailed(RuntimeError):
    """Another rank failed at a step where the ranks compare notes (a consequence, not a cause)."""


def _failure(exc: BaseException, rank: int) -> dict:
    """What a rank reports about an exception: its text and where in cuflash it was raised,
    whether it is out of memory, a missing library, or a consequence of another rank's
    failure."""
    from ..distributed import CommError
    from .measure import _where, is_oom
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    if len(text) > 400:
        text = text[:397] + "..."
    return {"rank": rank, "error": text + _where(exc), "oom": is_oom(exc),
            "unavailable": isinstance(exc, Unavailable),
            "cause": not isinstance(exc, (CommError, PeerFailed))}


def _agree(comm, error: BaseException | None, what: str) -> None:
    """Every rank says whether its step worked; all raise if one did not (no rank is left
    waiting for a peer that gave up)."""
    got = comm.allgather(None if error is None else _failure(error, comm.rank))
    if error is not None:
        raise error
    bad = [g for g in got if g is not None]
    if bad:
        raise PeerFailed(f"{what}: rank {bad[0]['rank']} failed: {bad[0]['error']}")


def _sync(xp) -> None:
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def _opts(point) -> dict:
    """Keyword arguments of ring_attention: the point's variant (causal, window, softcap) and
    its slicing."""
    from .variants import call_options
    opts = call_options(point, np)
    return dict(opts, layout=point.slicing)


def _global_inputs(point, cfg) -> dict:
    """One seeded global problem on the host (NumPy): q, k, v (and dout)."""
    from .measure import make_inputs
    return make_inputs(dataclasses.replace(point, device="cpu"), cfg.seed)


def _reference(point, inputs: dict) -> list:
    """The float64 oracle's outputs of the pass on the global problem: [out] forward,
    [dq, dk, dv] backward, [out, dq, dk, dv] both."""
    from ..oracle import oracle_attention, oracle_backward
    opts = {k: v for k, v in _opts(point).items() if k != "layout"}
    refs = []
    if point.pass_ in ("forward", "both"):
        refs.append(oracle_attention(inputs["q"], inputs["k"], inputs["v"], **opts)[0])
    if point.pass_ in ("backward", "both"):
        refs += list(oracle_backward(inputs["dout"], inputs["q"], inputs["k"], inputs["v"],
                                     **opts))
    return refs


def _local_inputs(point, cfg, xp, rank: int, host: dict | None) -> dict:
    """This rank's q, k, v (and dout): its rows of the global host problem when there is one,
    else random normal arrays made on the device (seeded by rank)."""
    from ..distributed import shard
    from .layouts import input_shapes
    if host is not None:
        return {n: xp.asarray(shard(a, point.world_size, rank, point.slicing))
                for n, a in host.items()}
    from .._xp import resolve_dtype
    dtype = resolve_dtype(point.dtype)
    local = {}
    for n, shape in input_shapes(point).items():
        shape = shape[:-2] + (shape[-2] // point.world_size, shape[-1])
        if xp is np:
            rng = np.random.default_rng([cfg.seed, rank, len(local)])
            local[n] = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        else:
            rng = xp.random.default_rng(cfg.seed * 1000 + rank * 10 + len(local))
            local[n] = rng.standard_normal(shape, dtype=xp.float32).astype(dtype)
    return local


def _pass_fn(point, inputs: dict, comm):
    """call(c) -> the pass's outputs on communicator c (a wrapper of this rank's comm). A
    backward point takes the residuals of one forward made here (not timed)."""
    from ..distributed import ring_attention, ring_attention_backward
    q, k, v, dout = inputs["q"], inputs["k"], inputs["v"], inputs.get("dout")
    opts = _opts(point)
    if point.pass_ == "forward":
        return lambda c: (ring_attention(q, k, v, comm=c, **opts),)
    if point.pass_ == "backward":
        _, res = ring_attention(q, k, v, comm=comm, return_residuals=True, **opts)
        return lambda c: tuple(ring_attention_backward(dout, dataclasses.replace(res, comm=c)))

    def both(c):
        out, res = ring_attention(q, k, v, comm=c, return_residuals=True, **opts)
        return (out,) + tuple(ring_attention_backward(dout, res))
    return both


@contextlib.contextmanager
def _gpu_peak(cp):
    """Track CuPy's pool inside the block: box['base'] (bytes in use at the start) and
    box['peak'] (the most in use)."""
    pool = cp.get_default_memory_pool()
    cp.cuda.Device().synchronize()
    box = {"base": pool.used_bytes(), "peak": pool.used_bytes()}

    def malloc(size):
        mem = pool.malloc(size)
        box["peak"] = max(box["peak"], pool.used_bytes())
        return mem

    previous = cp.cuda.get_allocator()
    cp.cuda.set_allocator(malloc)
    try:
        yield box
    finally:
        cp.cuda.set_allocator(previous)


def _timed(comm, fn, count: int, max_seconds: float, xp) -> list[float]:
    """Milliseconds of up to ``count`` calls of fn, each started on every rank together (the
    allgather of each rank's vote to go on is the barrier); after the first, no call starts once
    ``max_seconds`` have passed on some rank."""
    times: list[float] = []
    start = time.perf_counter()
    count = min(count, _MAX_TIMED)
    while True:
        go = len(times) < count and (not times or time.perf_counter() - start <= max_seconds)
        if not all(comm.allgather(bool(go))):
            return times
        _sync(xp)
        t0 = time.perf_counter()
        fn()
        _sync(xp)
        times.append((time.perf_counter() - t0) * 1e3)


def _row_errors(point, outs, refs, rank) -> list:
    """[(max |x - ref|, max |ref|, x has NaN where ref has none)] of this rank's rows of each
    output (ref: the global oracle's, sharded as the rank holds it)."""
    from ..distributed import shard
    from .measure import _to_numpy
    found = []
    for x, ref in zip(outs, refs):
        mine = shard(ref, point.world_size, rank, point.slicing)
        x = _to_numpy(x).astype(np.float64)
        fin = np.isfinite(mine)
        nan = bool(np.any(np.isnan(x) & ~np.isnan(mine)))
        err = float(np.abs(x[fin] - mine[fin]).max(initial=0.0))
        found.append((err, float(np.abs(mine[fin]).max(initial=0.0)), nan))
    return found


def _rank(comm, point, cfg, xp, host, refs, *, memory: bool) -> dict | None:
    """One rank's whole measurement (module docstring); the row on rank 0, None elsewhere."""
    rank, n = comm.rank, comm.world_size
    error = None
    try:
        inputs = _local_inputs(point, cfg, xp, rank, host)
    except Exception as exc:
        error = exc
    _agree(comm, error, "making the inputs")
    fn = _pass_fn(point, inputs, comm)
    record = RecordingComm(comm)
    peak = contextlib.nullcontext({}) if not (memory and xp is not np) else _gpu_peak(xp)
    with peak as box:
        outs = fn(record)
        _sync(xp)
    errs = _row_errors(point, outs, refs, rank) if refs is not None else None
    del outs
    for _ in range(cfg.warmup):
        fn(comm)
    times = _timed(comm, lambda: fn(comm), cfg.repeats, cfg.max_seconds, xp)
    count = len(times)
    compute = shifts = serial = None
    if point.ring_split:
        loop = LoopbackComm(rank, n)
        compute = _timed(comm, lambda: fn(loop), count, math.inf, xp)
        signatures = {tuple((s, str(d)) for s, d in sh): sh for sh in record.shifts}
        error = None
        try:
            buffers = {key: [xp.empty(s, dtype=d) for s, d in sh]     # contents: any
                       for key, sh in signatures.items()}
        except Exception as exc:
            error = exc
        _agree(comm, error, "allocating the comm-only buffers")
        plan = [buffers[tuple((s, str(d)) for s, d in sh)] for sh in record.shifts]

        def replay():
            for arrays in plan:
                comm.shift(arrays).wait()
        shifts = _timed(comm, replay, count, math.inf, xp)
        del buffers, plan
    if point.ring_serial:
        ser = SerialComm(comm)
        serial = _timed(comm, lambda: fn(ser), count, math.inf, xp)
    mine = {"t": times, "c": compute, "m": shifts, "s": serial, "errs": errs,
            "base": box.get("base"), "peak": box.get("peak"), "shifts": len(record.shifts)}
    got = comm.allgather(_rounded(mine))
    return _row(point, got) if rank == 0 else None


def _rounded(obj):
    """Floats to 7 significant digits (what travels in the allgather)."""
    if isinstance(obj, float):
        return float(f"{obj:.7g}") if math.isfinite(obj) else obj
    if isinstance(obj, (list, tuple)):
        return [_rounded(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    return obj


def _slowest(per_rank: list[list[float]]) -> list[float]:
    """Per call, the slowest rank's time."""
    return [max(ts[i] for ts in per_rank) for i in range(min(len(ts) for ts in per_rank))]


def _row(point, got: list[dict]) -> dict:
    """Rank 0's row from every rank's report."""
    from .measure import summarize
    times = _slowest([g["t"] for g in got])
    row = summarize(times)
    medians = [float(np.median(g["t"])) for g in got]
    row["rank_spread"] = (max(medians) - min(medians)) / max(medians) if max(medians) else 0.0
    if got[0]["c"] is not None:
        compute = float(np.median(_slowest([g["c"] for g in got])))
        comm = float(np.median(_slowest([g["m"] for g in got])))
        exposed = row["time_ms_median"] - compute
        row.update(ring_compute_ms=compute, ring_comm_ms=comm, comm_exposed_ms=exposed,
                   comm_hidden=(min(1.0, max(0.0, 1.0 - max(exposed, 0.0) / comm))
                                if comm > 0 else None))
    if got[0]["s"] is not None:
        row["ring_serial_ms"] = float(np.median(_slowest([g["s"] for g in got])))
    if all(g["peak"] is not None for g in got):
        row["peak_mem_bytes"] = max(int(g["peak"]) - int(g["base"]) for g in got)
        row["peak_total_bytes"] = max(int(g["peak"]) for g in got)
    if got[0]["errs"] is not None:
        errs = [g["errs"] for g in got]
        worst = 0.0
        for i in range(len(errs[0])):
            if any(e[i][2] for e in errs):
                worst = math.inf
                break
            num, den = max(e[i][0] for e in errs), max(e[i][1] for e in errs)
            worst = max(worst, num / den if den > 0 else num)
        row["error_rel"] = worst
    if point.launch == "simulated":
        row["note"] = (f"{point.world_size} virtual ranks as threads of one process "
                       f"(SimulatedRing{', the CPU twin' if point.device == 'cpu' else ''}); "
                       f"memory not measured (one heap)")
    return row


def _run_processes(point, cfg) -> dict | None:
    """This process's rank of a ``launch: processes`` point (NCCL); the row on rank 0."""
    try:
        import cupy  # noqa: F401
        from cupy.cuda import nccl
    except Exception as exc:
        raise Unavailable(f"the ring's processes need CuPy with NCCL: {type(exc).__name__}: "
                          f"{exc}") from exc
    if not getattr(nccl, "available", False):
        raise Unavailable("the ring's processes need NCCL, which CuPy could not load")
    from ..distributed import NcclComm
    xp = point_module(point)
    host = refs = None
    if cfg.error and point.run_scores <= cfg.error_limit:
        host = _global_inputs(point, cfg)
        refs = _reference(point, host)
    comm = NcclComm.from_env(launcher="env", timeout=point.ring_timeout_s)
    try:
        row = _rank(comm, point, cfg, xp, host, refs, memory=cfg.memory)
    except BaseException:
        comm.abort()
        raise
    comm.close()
    return row


def _run_simulated(point, cfg) -> dict:
    """A ``launch: simulated`` point: its ranks as threads (SimulatedRing); the row."""
    from ..distributed import SimulatedRing
    xp = point_module(point)
    host = refs = None
    if cfg.error and point.run_scores <= cfg.error_limit:
        host = _global_inputs(point, cfg)
        refs = _reference(point, host)
    ring = SimulatedRing(point.world_size, timeout=point.ring_timeout_s or DEFAULT_TIMEOUT_S)
    got = ring.run(lambda c: _rank(c, point, cfg, xp, host, refs, memory=False))
    return got[0]


def worker_main(folder) -> int:
    """A worker: measure its rank of the point in ``folder/spec.json``, write
    ``folder/rank<r>.json`` ({ok, row (rank 0), failures}); exit code 0 when it worked."""
    from ..distributed import RankErrors
    from .measure import blas_threads
    from .points import Point
    from .schema import Measure
    folder = Path(folder)
    spec = json.loads((folder / "spec.json").read_text())
    point = Point.from_json(spec["point"])
    cfg = Measure(**spec["measure"])
    rank = int(os.environ.get("RANK", "0")) if point.launch == "processes" else 0
    status: dict = {"rank": rank, "ok": False, "row": None, "failures": []}
    code = 1
    try:
        if point.device == "cpu":
            with blas_threads(cfg.threads) as threads:
                row = (_run_simulated(point, cfg) if point.launch == "simulated"
                       else _run_processes(point, cfg))
            if row is not None:
                row["threads"] = threads
        else:
            row = (_run_simulated(point, cfg) if point.launch == "simulated"
                   else _run_processes(point, cfg))
        status.update(ok=True, row=row)
        code = 0
    except RankErrors as exc:
        status["failures"] = [_failure(e, r) for r, e in enumerate(exc.errors) if e is not None]
    except BaseException as exc:      # noqa: BLE001 - reported to the launcher
        status["failures"] = [_failure(exc, rank)]
        print(f"rank {rank}: {status['failures'][0]['error']}", file=sys.stderr, flush=True)
    tmp = folder / f".rank{rank}.json.{os.getpid()}"
    tmp.write_text(json.dumps(status, default=float))
    os.replace(tmp, folder / f"rank{rank}.json")
    return code


# -- a table for the README (python -m cuflash.experiments.report ring PATH) ---------------------

def _num(x, fmt="{:.3g}") -> str:
    return "–" if x is None else fmt.format(x)


def table(path) -> str:
    """Markdown tables of a ring run: per (sweep, causal, window, T) the single-GPU baseline
    (rows without world_size: flash, or the twin on the CPU) against each ring method: time,
    throughput per GPU, their ratio, compute-only and comm-only time, exposed and hidden
    communication, peak memory per GPU; then the largest T that ran and the first that ran out
    of memory per method."""
    from .results import Cells, human_bytes, read_rows
    rows = read_rows(path)
    cells = Cells()
    for r in rows:
        key = (r.get("sweep") or "", bool(r.get("causal")), r.get("window") or "",
               r.get("pass"), int(r["seq_len"]))
        cells.put(key, r["method"], r)
    methods = list(dict.fromkeys(r["method"] for r in rows))
    ringed = {r["method"] for r in rows if r.get("method_name") == METHOD}
    single = [m for m in methods if m not in ringed]
    rings = [m for m in methods if m in ringed]
    head = ["sweep", "causal", "window", "T", "method", "ms", "TFLOP/s per GPU",
            "ring / single", "compute-only ms", "comm-only ms", "exposed ms", "comm hidden",
            "peak per GPU"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    sweeps = {s: i for i, s in enumerate(dict.fromkeys(r.get("sweep") or "" for r in rows))}
    for key in sorted(cells, key=lambda k: (sweeps[k[0]], not k[1], k[2], k[3] or "", k[4])):
        c = cells[key]
        base = next((c[m] for m in single if m in c), None)
        for m in single + rings:
            r = c.get(m)
            if r is None:
                continue
            ok = r.get("status") == "ok"
            ratio = None
            if ok and m in rings and base is not None and base.get("status") == "ok" \
                    and base.get("tflops_per_gpu") and r.get("tflops_per_gpu"):
                ratio = r["tflops_per_gpu"] / base["tflops_per_gpu"]
            hidden = r.get("comm_hidden")
            peak = r.get("peak_total_bytes")
            lines.append("| " + " | ".join([
                key[0], str(key[1]).lower(), key[2] or "none", str(key[4]), m,
                _num(r.get("time_ms_median"), "{:.4g}") if ok else r.get("status", "?"),
                _num(r.get("tflops_per_gpu")) if ok else "–", _num(ratio, "{:.3f}"),
                _num(r.get("ring_compute_ms"), "{:.4g}"), _num(r.get("ring_comm_ms"), "{:.4g}"),
                _num(r.get("comm_exposed_ms"), "{:.3g}"),
                "–" if hidden is None else f"{hidden:.0%}",
                "–" if peak is None else human_bytes(peak)]) + " |")
    reach = ["", "| sweep | method | largest T that ran | first T out of memory |",
             "| --- | --- | --- | --- |"]
    for sweep in sweeps:
        for m in single + rings:
            mine = [r for r in rows if r["method"] == m and (r.get("sweep") or "") == sweep]
            ran = [int(r["seq_len"]) for r in mine if r.get("status") == "ok"]
            oom = [int(r["seq_len"]) for r in mine if r.get("status") == "oom"]
            if mine:
                reach.append(f"| {sweep} | {m} | {max(ran) if ran else '–'} | "
                             f"{min(oom) if oom else 'none'} |")
    return "\n".join(lines + reach) + cells.note()


__all__ = ["METHOD", "LAUNCHES", "SLICINGS", "KEY_COLUMNS", "MEASURED_COLUMNS", "Options",
           "measure", "worker_main", "LoopbackComm", "RecordingComm", "SerialComm", "table"]


if __name__ == "__main__":
    from cuflash.experiments.ring import worker_main as _main
    _code = _main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_code)      # the status file is written: no interpreter teardown to hang in
