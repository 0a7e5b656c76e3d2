"""Running an experiment: every point measured once, one CSV row each, then the plots.

The results folder (default ``results/<name>/``) holds ``results.csv``, ``env.json`` (the
environment of each run), ``experiment.yaml`` (the experiment as run, after ``--set``; enough with
the CSV to redraw the plots) and the PNGs. Rerunning into the same folder resumes: points already
there are skipped, earlier 'error' rows are measured again.

With ``measure: {hbm_bytes: true}`` the DRAM bytes of GPU points are measured by Nsight Compute
in batches: the points of a chunk of at most ``HBM_BATCH`` are timed one by one, then one ncu
process profiles those whose status is 'ok' (``ncu.measure_hbm_many``), and only then are the
chunk's rows written, in order. An interruption loses at most the chunk being measured; a resumed
run measures it again. An ncu failure is a note on the rows it concerns (status stays 'ok').

One point's failure is data, not the end of the run: out of memory is a row with status 'oom'
(larger sizes of the same method then become 'oom-skipped' without trying), a method that cannot
run here is 'unavailable', anything else is 'error' with the message. A schema error stops the run
before anything is measured. Ring points run in worker processes (``ring.measure``): a worker's
failure or time-out is the point's row; a ring row skipped for want of GPUs is measured again
when the run is resumed.

SIGTERM stops a run as Ctrl-C does (``_terminate_as_interrupt``): nothing of the point in flight is
kept, and a rerun resumes there. Out of memory on the CPU is not an exception: the OS kills the
process. So a CPU point whose ``hostmem.needed_bytes`` exceed ``hostmem.available_bytes`` is
recorded as 'oom' without running, and while a point is measured its description sits in ``measuring.json``: a run that finds one
there was killed in that point (out of memory, most likely) and records it as 'oom', so a rerun
goes past it instead of dying at the same point again.

One run at a time per folder (``files.folder_lock``); the folder is checked before anything is
written (``files.prepare_folder``), and the CSV, env.json and experiment.yaml are replaced through
uniquely named temp files (``files.atomic_write_text``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import math
import signal
import threading
import time
from pathlib import Path
from typing import Callable

import yaml

from .. import iomodel
from ..tile import default_backward, default_tile
from . import env as envmod
from . import files, hostmem, results
from .measure import classify, free_device_memory, measure_point, time_point
from . import decode, layouts, ring, variants
from .points import KEY_COLUMNS, Point, enumerate_points, fmt, key_text, resolve_device
from .results import human_bytes
from .schema import Experiment

RESULTS_CSV = "results.csv"
SET_ASIDE_CSV = "set_aside.csv"
"""Rows of results.csv a resume could not read (torn lines, unknown statuses), kept here."""
HBM_BATCH = 20
"""Most points profiled by one ncu process (hbm_bytes), and so most rows held back from the CSV."""
SPEC_YAML = "experiment.yaml"
MEASURING_JSON = "measuring.json"
"""The point being measured now; left behind only when the process was killed in it."""
_SIZE_COLUMNS = ("seq_len", "kv_len", "batch")


@dataclasses.dataclass
class RunSummary:
    """What a run did: where its files are and how many points ended how."""

    out_dir: Path
    csv: Path
    plots: list[Path]
    measured: int = 0
    skipped: int = 0
    statuses: dict = dataclasses.field(default_factory=dict)
    plot_error: str | None = None


def default_out_dir(exp: Experiment) -> Path:
    return Path("results") / exp.name


def predicted(p: Point) -> iomodel.Traffic:
    """Predicted bytes and FLOPs of the point's measured pass (``cuflash.iomodel``).

    naive and torch 'math' use the naive model; flash and twin the tiled model with their tiles;
    torch's fused backends the tiled model with cuflash's default tiles (atomic dQ, as FA2).
    The model counts the problems that run (``layouts.problems``: the point's arrays, the padded
    batch, or each sequence of a packed varlen batch) under the point's mask
    (``variants.model_mask``: causal, window, packed documents), so only the tiles the mask
    leaves, plus what the layout moves besides (``layouts.extra_traffic``: the materialized
    K/V's copies); FLOPs count only the visible scores of real tokens (``layouts.flops``).
    A KV-cache step: ``decode.step_traffic`` (``kvcache.decode_step_bytes``: what a step moves
    at least; read_ceiling: its array). A ring point: the whole problem as one flash call
    (``ring.as_single``)."""
    if ring.is_ring(p):
        p = ring.as_single(p)
    if p.cache:
        return decode.step_traffic(p)
    total = layouts.extra_traffic(p)
    for bh, T, S, mask in layouts.problems(p):
        total = total + _predicted_problem(p, (bh, T, S, p.head_dim, p.dtype, mask))
    return iomodel.Traffic(total.bytes_read, total.bytes_written, layouts.flops(p))


def _predicted_problem(p: Point, args: tuple) -> iomodel.Traffic:
    """The IO model of one attention problem (batch·heads, T, S, d, dtype, mask) of the point's
    method and pass."""
    mask = args[-1]
    if p.method_name == "naive" or (p.method_name == "torch_sdpa" and p.backend == "math"):
        total = iomodel.predict("naive", p.pass_, *args)
    else:
        if p.method_name == "torch_sdpa":
            fwd_tile = default_tile(p.head_dim, p.dtype, causal=mask.causal,
                                    precision=p.precision)
            bwd_tile, det = default_backward(p.head_dim, p.dtype, causal=mask.causal,
                                             deterministic=False)
        else:
            fwd_tile, bwd_tile, det = p.fwd_tile, p.bwd_tile, bool(p.deterministic)
        total = None
        if p.pass_ in ("forward", "both"):
            total = iomodel.predict("flash", "forward", *args, tile=fwd_tile)
        if p.pass_ in ("backward", "both"):
            bwd = iomodel.predict("flash", "backward", *args, tile=bwd_tile, deterministic=det)
            total = bwd if total is None else total + bwd
    return total


def _group_of_row(row: dict) -> tuple[str, ...]:
    return tuple(key_text(row, c) for c in KEY_COLUMNS if c not in _SIZE_COLUMNS)


def _scores_of_row(row: dict) -> int:
    return int(row["batch"]) * int(row["heads"]) * int(row["seq_len"]) * int(row["kv_len"])


def _fmt_seconds(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else (
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


def write_spec(exp: Experiment, out_dir: Path) -> Path:
    """Store the experiment as run (after overrides) beside the results, for ``cuflash plot``."""
    raw = dict(exp.raw or {})
    raw["name"] = exp.name
    path = out_dir / SPEC_YAML
    text = (f"# {exp.name}: as run from {exp.source}\n"
            f"# redraw the plots: cuflash plot {out_dir / RESULTS_CSV}\n"
            + yaml.safe_dump(raw, sort_keys=False))
    return files.atomic_write_text(path, text)


def estimate_text(points: list[Point], cfg) -> str:
    """What a run of ``points`` will take, said before it starts: the count and the bound that
    ``measure.max_seconds`` puts on timing."""
    n = len(points)
    text = f"{n} point{'s' * (n != 1)} to measure"
    if n and cfg.time:
        text += (f"; timing is capped at measure.max_seconds={cfg.max_seconds:g} s a point, so "
                 f"at most {_fmt_seconds(n * cfg.max_seconds)} of timing, plus warm-up and the "
                 f"memory and error calls; an ETA follows each point")
    return text


def _killed_point(out_dir: Path, log) -> tuple[Point, int] | None:
    """The point an earlier run was killed in (``MEASURING_JSON``), and that run's index."""
    path = out_dir / MEASURING_JSON
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        found = Point.from_json(data["point"]), int(data["run"])
    except (ValueError, KeyError, TypeError) as exc:
        aside = files.keep_aside(path)
        log(f"warning: {path} could not be read ({exc}); kept it as {aside.name}")
        return None
    path.unlink()
    return found


def _killed_row(p: Point, run_id: int) -> dict:
    row = {**p.columns(), "run": run_id, "status": "oom",
           "note": "the run measuring this point was killed (by the OS for lack of memory, most "
                   "likely); not tried again: delete this row to retry it",
           "timestamp": datetime.datetime.now().isoformat(timespec="seconds")}
    _add_predictions(row, p)
    return {k: results.cell_text(v) for k, v in row.items()}


def _host_oom(p: Point, cfg) -> str | None:
    """Why a CPU point cannot fit in the memory available now, or None when it can."""
    if p.device != "cpu":
        return None
    need = hostmem.needed_bytes(p, cfg.error, cfg.error_limit, cfg.error_heads)
    room = hostmem.available_bytes()
    if room is None or need <= room:
        return None
    return (f"not run: needs about {human_bytes(need)} of host memory, {human_bytes(room)} "
            f"available (the OS would kill the run)")


def _add_note(row: dict, text: str) -> None:
    row["note"] = f"{row['note']}; {text}" if row.get("note") else text


_UNSTABLE = "time not stable"


def _note_unstable(row: dict, cfg) -> None:
    """Say in the note when the row's timing did not settle (replacing an earlier such note)."""
    kept = [t for t in (row.get("note") or "").split("; ") if t and not t.startswith(_UNSTABLE)]
    row["note"] = "; ".join(kept) or None
    spread = row.get("time_spread")
    if spread is not None and spread > cfg.stable_spread:
        _add_note(row, f"{_UNSTABLE}: the last batch medians spread {spread:.0%} > "
                       f"measure.stable_spread={cfg.stable_spread:g} when max_seconds ran out")


def run(exp: Experiment, out_dir=None, *, log: Callable[[str], None] = print,
        measure: Callable = measure_point, hbm_many: Callable | None = None,
        hbm_batch: int = HBM_BATCH, draw: bool = True,
        retime: Callable = time_point) -> RunSummary:
    """Measure every point of ``exp`` not already in ``out_dir``'s CSV, then draw the plots.

    ``measure(point, measure_cfg) -> dict`` and ``hbm_many(point_jsons, timeout_s) -> list of
    NcuBytes or NcuUnavailable`` (one ncu process per call, ``ncu.measure_hbm_many``) are
    parameters so tests can count or fake calls; ``hbm_batch``: rows per ncu batch;
    ``retime(point, measure_cfg) -> dict``: one more timing of a CPU point (``measure.rounds``).
    """
    from .._xp import gpu_available
    device = resolve_device(exp)
    if device == "gpu" and not gpu_available():
        raise RuntimeError(f"{exp.source}: device: gpu, but no CUDA GPU is visible to CuPy; "
                           f"use device: cpu or auto")
    if hbm_many is None:
        from .ncu import measure_hbm_many as hbm_many
    out_dir = files.prepare_folder(out_dir if out_dir is not None else default_out_dir(exp))
    with files.folder_lock(out_dir), _terminate_as_interrupt():
        return _run_locked(exp, device, out_dir, log, measure, hbm_many, hbm_batch, draw,
                           retime)


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM (``timeout``, ``kill``, a scheduler's preemption) stops the run as Ctrl-C does:
    the point in flight is dropped, not left in ``measuring.json`` to be recorded as 'oom' by
    the next run (what a kill by the OS means). Main thread only (signal's rule)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _check_labels(points, old_rows, csv_path: Path) -> None:
    """Stop a resume that gives a label of the results to another method: its rows would be
    kept as the new method's (the label is what keys a point) and the stored experiment.yaml
    would name the new one."""
    now = {p.method: p.method_name for p in points}
    for r in old_rows:
        label, name = r.get("method"), r.get("method_name")
        if name and now.get(label, name) != name:
            raise ValueError(f"{csv_path} holds method label {label!r} measured by {name!r}; this "
                             f"experiment gives {label!r} to {now[label]!r}: use another label "
                             f"or another --out")


def check_plots(exp: Experiment, points: list[Point]) -> None:
    """SchemaError for a plot filter or ratio baseline value that none of the experiment's
    points has (filter: {heads: 7}, {window: [1, 0]}, {status: okk}, ratio: {numerator:
    {dtype: float99}}): such a plot would come out empty after the whole run. Columns the
    points do not set (measurements) are not checked, but for ``status``."""
    from .schema import SchemaError
    have: dict[str, set] = {}
    for p in points:
        for c, v in p.columns().items():
            have.setdefault(c, set()).add(fmt(v))
    have["status"] = set(results.STATUSES)
    for i, plot in enumerate(exp.plots):
        checks = [(f"filter.{c}", c, vals) for c, vals in plot.filter]
        base = plot.ratio_numerator or plot.ratio_denominator
        if isinstance(base, tuple):
            which = "numerator" if plot.ratio_numerator else "denominator"
            checks += [(f"ratio.{which}.{c}", c, (v,)) for c, v in base]
        for where, c, vals in checks:
            if c not in have:
                continue
            for v in vals:
                if fmt(v) not in have[c]:
                    shown = sorted(have[c], key=lambda t: (len(t), t))
                    raise SchemaError(exp.source, f"plots[{i}].{where}",
                                      f"{v!r} is not a value of {c} in any point of this "
                                      f"experiment (it has {shown[:12]}"
                                      f"{' ...' if len(shown) > 12 else ''}): the plot would "
                                      f"be empty")


def _run_locked(exp, device, out_dir: Path, log, measure, hbm_many, hbm_batch,
                draw, retime) -> RunSummary:
    points = enumerate_points(exp, device)
    check_plots(exp, points)                  # a plot that would be empty: stop before measuring
    csv_path = out_dir / RESULTS_CSV
    torn: list[dict] = []
    header, old = results.read_raw(csv_path, torn)   # not a results CSV: stop before writing
    _check_labels(points, old, csv_path)      # a label re-used for another method: likewise
    write_spec(exp, out_dir)
    environment = envmod.collect(device)
    if any(p.device == "cpu" for p in points):
        environment["blas_threads_pinned"] = exp.measure.threads
    run_id = envmod.record(out_dir, exp.name, environment, log)
    gpu_name = envmod.device_name(environment)

    # Resume: keep every finished row except errors of this experiment's points (measured
    # again), and the OOM frontier. Rows it cannot read (torn, an unknown status) are set aside
    # in SET_ASIDE_CSV, never deleted.
    wanted = {p.key() for p in points}
    keep = [r for r in old if r.get("status") in results.STATUSES
            and not ((r["status"] == "error" or ring.measure_again(r))
                     and results.row_key(r) in wanted)]
    unread = ([dict(r, **{results.SET_ASIDE_WHY: "torn: too few or too many cells"})
               for r in torn]
              + [dict(r, **{results.SET_ASIDE_WHY: f"unknown status {r.get('status')!r}"})
                 for r in old if r.get("status") not in results.STATUSES])
    if unread:
        results.set_aside(out_dir / SET_ASIDE_CSV, header, unread)
        log(f"{len(unread)} row{'s' * (len(unread) != 1)} of {csv_path} could not be read "
            f"(torn, or an unknown status): moved to {out_dir / SET_ASIDE_CSV}, not measured "
            f"again unless this experiment has their points")
    killed = _killed_point(out_dir, log)
    if killed is not None:
        row = _killed_row(*killed)
        keep = [r for r in keep if results.row_key(r) != results.row_key(row)] + [row]
        log(f"an earlier run was killed while measuring {killed[0].describe()}: recorded as "
            f"'oom', not tried again")
    done = {results.row_key(r) for r in keep}
    oom_at: dict[tuple, tuple[int, int]] = {}
    for r in keep:
        if r["status"] == "oom":
            g, size = _group_of_row(r), (_scores_of_row(r), int(r["seq_len"]))
            oom_at[g] = min(oom_at.get(g, size), size)
    cfg = exp.measure
    summary = RunSummary(out_dir, csv_path, [])
    todo = [p for p in points if p.key() not in done]
    summary.skipped = len(points) - len(todo)
    if summary.skipped:
        log(f"resuming {csv_path}: {summary.skipped} of {len(points)} points already there")
    log(f"{exp.name}: {estimate_text(todo, cfg)}; on "
        f"{gpu_name if device == 'gpu' else 'cpu'} -> {csv_path}")
    if any(p.device == "cpu" for p in todo):
        log(f"  CPU points: NumPy's BLAS pinned to measure.threads={cfg.threads} thread"
            f"{'s' * (cfg.threads != 1)}; wall time in batches until the last three batch "
            f"medians agree within measure.stable_spread={cfg.stable_spread:g}")
    if any(p.device == "cpu" and p.method_name == "flash" for p in todo):
        log("  flash on the CPU runs the tiled twin (cuflash/twin.py): recorded with its "
            "block sizes only")

    spent, n_measured = 0.0, 0
    # hbm_bytes: rows waiting for their DRAM bytes (and the rows after them, to keep the CSV's
    # order); written once one ncu process has profiled the batch. Lost if the run is interrupted.
    pending: list[tuple[Point, dict, bool]] = []     # (point, row, whether ncu measures it)

    def eta(i: int) -> str:
        return _fmt_seconds(spent / max(n_measured, 1) * (len(todo) - i))

    timed: list[tuple[Point, dict]] = []       # CPU rows timed in this run (for more rounds)
    timed += _one_round_rows(keep, points, cfg, log)   # and those a stopped run timed once

    def finish(p: Point, row: dict) -> None:
        row["timestamp"] = datetime.datetime.now().isoformat(timespec="seconds")
        writer.write(row)
        if p.device == "cpu" and row["status"] == "ok" and row.get("time_ms_median") \
                and not ring.is_ring(p):        # a ring's rounds would need its workers again
            timed.append((p, row))
        summary.statuses[row["status"]] = summary.statuses.get(row["status"], 0) + 1
        summary.measured += 1

    def flush(i: int) -> None:
        nonlocal spent
        batch = [(p, row) for p, row, needs_ncu in pending if needs_ncu]
        if batch:
            t0 = time.perf_counter()
            log(f"  ncu: DRAM bytes of {len(batch)} point{'s' * (len(batch) != 1)} "
                f"in one process ...")
            found = _measure_hbm_batch([p for p, _ in batch], cfg, hbm_many)
            spent += time.perf_counter() - t0
            for (p, row), result in zip(batch, found):
                _apply_hbm(row, result)
            got = sum(1 for r in found if not isinstance(r, Exception))
            log(f"  ncu: {got} of {len(batch)} measured in "
                f"{_fmt_seconds(time.perf_counter() - t0)}  (ETA {eta(i)})")
            for p, row in batch:
                if row.get("hbm_bytes") is None:
                    text = (row.get("note") or "")[:200]
                else:
                    text = f"hbm {human_bytes(row['hbm_bytes'])}" + (
                        f" ({row['hbm_pred_ratio']:.3g}x predicted)"
                        if row.get("hbm_pred_ratio") else "")
                log(f"    {p.describe()}: {text}")
        for p, row, _ in pending:
            finish(p, row)
        pending.clear()

    with results.Writer(csv_path, keep, rewrite=True) as writer:
        for i, p in enumerate(todo, 1):
            row = {**p.columns(), "run": run_id,
                   "device_name": gpu_name if p.device == "gpu" else envmod.device_name(
                       {"device": "cpu", "cpu_count": environment.get("cpu_count")})}
            frontier = oom_at.get(p.oom_group())
            t0 = time.perf_counter()
            needs_ncu = False
            if cfg.oom_skip and frontier and p.scores >= frontier[0] and p.seq_len >= frontier[1]:
                row["status"] = "oom-skipped"
                row["note"] = (f"not tried: {p.method} ran out of memory at "
                               f"seq_len={frontier[1]} in this configuration")
            elif (no_room := _host_oom(p, cfg)) is not None:
                row["status"], row["note"] = "oom", no_room
                size = (p.scores, p.seq_len)
                oom_at[p.oom_group()] = min(oom_at.get(p.oom_group(), size), size)
            else:
                marker = out_dir / MEASURING_JSON
                if not ring.is_ring(p):   # a ring runs in its workers: they die, not the runner
                    files.atomic_write_text(marker, json.dumps({"run": run_id,
                                                                "point": p.to_json()}))
                try:
                    row.update(measure(p, cfg))
                    row["status"] = "ok"
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # one point's failure is recorded, the run goes on
                    row["status"], row["note"] = classify(exc)
                    if row["status"] == "oom":
                        size = (p.scores, p.seq_len)
                        oom_at[p.oom_group()] = min(oom_at.get(p.oom_group(), size), size)
                finally:
                    marker.unlink(missing_ok=True)
                    if p.device == "gpu":
                        free_device_memory()
                _note_unstable(row, cfg)
                if row["status"] == "ok" and cfg.hbm_bytes:
                    if p.device == "gpu":
                        needs_ncu = True              # measured with the batch, by ncu
                    else:
                        _add_note(row, "hbm_bytes: not measured on the CPU")
                n_measured += 1
                spent += time.perf_counter() - t0
            _add_predictions(row, p)
            log(f"[{summary.skipped + i}/{len(points)}] {p.describe()}: {_short_result(row)}"
                + ("  (hbm: after the batch)" if needs_ncu else "") + f"  (ETA {eta(i)})")
            if pending or needs_ncu:
                pending.append((p, row, needs_ncu))
                if len(pending) >= max(hbm_batch, 1):
                    flush(i)
            else:
                finish(p, row)
        flush(len(todo))
    if cfg.time and cfg.rounds > 1 and timed:
        _more_rounds(timed, cfg, csv_path, retime, log)
    if draw and exp.plots:
        from .plots import draw_all
        try:
            summary.plots, problems = draw_all(results.read_rows(csv_path), exp.plots,
                                               out_dir, envmod.load(out_dir), csv_path)
        except Exception as exc:  # the measurements are safe in the CSV; say what broke
            problems = [f"{type(exc).__name__}: {exc}"]
        if problems:
            summary.plot_error = "; ".join(problems)
            for line in problems:
                log(line)
            log(f"redraw with: cuflash plot {csv_path}")
    return summary


def _more_rounds(timed: list[tuple[Point, dict]], cfg, csv_path: Path, retime, log) -> None:
    """Time the CPU points of this run ``cfg.rounds - 1`` more times, round-robin, so that each
    point's rounds are spread over the run; each row keeps its round with the lowest median (the
    least disturbed moment of a shared machine) and records the rounds' spread. The CSV rows
    are replaced at the end (atomically); until then they hold the first round."""
    rounds: dict[tuple, list[dict]] = {p.key(): [_timing(row)] for p, row in timed}
    t0 = time.perf_counter()
    for r in range(2, cfg.rounds + 1):
        for p, _ in timed:
            try:
                rounds[p.key()].append(_timing(retime(p, cfg)))
            except Exception as exc:  # the first round stands; say why this one is missing
                log(f"  round {r}: {p.describe()}: {type(exc).__name__}: {exc}")
        log(f"timing round {r} of {cfg.rounds}: {len(timed)} CPU points timed again "
            f"({_fmt_seconds(time.perf_counter() - t0)} so far)")
    for p, row in timed:
        found = rounds[p.key()]
        medians = [t["time_ms_median"] for t in found]
        row.update(min(found, key=lambda t: t["time_ms_median"]), time_rounds=len(found),
                   time_rounds_spread=(max(medians) - min(medians)) / min(medians))
        _note_unstable(row, cfg)
        _add_predictions(row, p)
    _, on_disk = results.read_raw(csv_path)
    new = {p.key(): row for p, row in timed}
    rows = [{c: results.cell_text(v) for c, v in new[results.row_key(r)].items()}
            if results.row_key(r) in new else r for r in on_disk]
    results.Writer(csv_path, rows, rewrite=True).close()


def _one_round_rows(keep: list[dict], points: list[Point], cfg, log) -> list[tuple[Point, dict]]:
    """The kept CPU rows that an earlier run timed once where ``measure.rounds`` asks for more:
    a run stopped before its extra rounds (they come after every point) wrote them with its
    first round. They join this run's rounds (``_more_rounds``), their timings as numbers."""
    if not (cfg.time and cfg.rounds > 1):
        return []
    by_key = {p.key(): p for p in points}
    out = []
    for r in keep:
        p = by_key.get(results.row_key(r))
        if (p is None or p.device != "cpu" or ring.is_ring(p) or r.get("status") != "ok"
                or not r.get("time_ms_median") or (r.get("time_rounds") or "1") != "1"):
            continue
        out.append((p, {c: results.parse_value(c, v) for c, v in r.items()}))
    if out:
        log(f"  {len(out)} row{'s' * (len(out) != 1)} of an earlier run timed once "
            f"(measure.rounds={cfg.rounds}): timed again with this run's rounds")
    return out


def _timing(row: dict) -> dict:
    return {c: row.get(c) for c in ("repeats", "time_ms_median", "time_ms_min", "time_ms_p20",
                                    "time_ms_p80", "time_spread", "threads")}


def _measure_hbm_batch(batch: list[Point], cfg, hbm_many) -> list:
    """One ncu process for the batch: an NcuBytes or an exception (its message the note) per
    point. Whatever goes wrong becomes the points' notes; only KeyboardInterrupt propagates."""
    try:
        found = list(hbm_many([p.to_json() for p in batch], cfg.ncu_timeout_s))
    except Exception as exc:          # _apply_hbm turns it into each row's note
        return [exc for _ in batch]
    if len(found) != len(batch):
        return [RuntimeError(f"hbm_bytes unavailable: ncu gave {len(found)} results for "
                             f"{len(batch)} points") for _ in batch]
    return found


def _apply_hbm(row: dict, result) -> None:
    """Put one point's DRAM bytes (NcuBytes) in its row, or, for an exception, its message as the
    note; then the rates they imply at the measured time and the predicted bytes."""
    if isinstance(result, BaseException):
        note = str(result) if str(result).startswith("hbm_bytes") else \
            f"hbm_bytes unavailable: {type(result).__name__}: {result}"
        row["note"] = note[:300]
        return
    row.update(hbm_bytes_read=result.bytes_read, hbm_bytes_written=result.bytes_written,
               hbm_bytes=result.bytes_total, hbm_kernels=len(result.kernels))
    ms = row.get("time_ms_median")
    if ms:
        row["hbm_gbps"] = row["hbm_bytes"] / (ms * 1e-3) / 1e9
    if row.get("pred_bytes"):
        row["hbm_pred_ratio"] = row["hbm_bytes"] / row["pred_bytes"]


def _add_predictions(row: dict, p: Point) -> None:
    """Predicted bytes and FLOPs, and the rates they imply at the measured time."""
    try:
        t = predicted(p)
    except Exception as exc:
        row["note"] = (row.get("note") or "") + f" (no prediction: {exc})"
        return
    held = decode.held_bytes(p) if p.cache else layouts.held_bytes(p)
    row.update(pred_bytes_read=t.bytes_read, pred_bytes_written=t.bytes_written,
               pred_bytes=t.bytes_total, flops=int(round(t.flops)), **held)
    notes = decode.model_notes(p) if p.cache else layouts.model_notes(p)
    if row.get("peak_mem_bytes") is not None and row.get("peak_total_bytes") is None \
            and not p.cache:
        row["peak_total_bytes"] = row["peak_mem_bytes"] + _input_bytes(p)
    if row.get("status") == "ok":        # a failed ring row's note is the failure alone
        notes = notes + ring.model_notes(p)
    for text in variants.model_notes(p) + notes:
        if text not in (row.get("note") or ""):
            _add_note(row, text)
    ms = row.get("time_ms_median")
    if ms:
        row["tflops"] = t.flops / (ms * 1e-3) / 1e12
        row["gbps"] = t.bytes_total / (ms * 1e-3) / 1e9
        row["tflops_per_gpu"] = row["tflops"] / (p.world_size or 1)


def _input_bytes(p: Point) -> int:
    """Bytes of the arrays ``measure.make_inputs`` hands a (non-KV-cache) point's call."""
    from .hostmem import _itemsize
    e = _itemsize(p.dtype)
    return sum(math.prod(s) * e for s in layouts.input_shapes(p).values())


def _short_result(row: dict) -> str:
    if row["status"] != "ok":
        note = row.get("note") or ""
        return f"{row['status']}" + (f" ({note[:120]})" if note else "")
    parts = []
    if row.get("time_ms_median") is not None:
        parts.append(f"{row['time_ms_median']:.3g} ms")
        if row.get("cache") and row.get("gbps"):
            parts.append(f"{row['gbps']:.3g} GB/s")
        elif row.get("tflops"):
            parts.append(f"{row['tflops']:.3g} TFLOP/s")
            if row.get("world_size"):
                parts.append(f"{row['tflops_per_gpu']:.3g} per GPU")
        if row.get("comm_hidden") is not None:
            parts.append(f"comm {row['ring_comm_ms']:.3g} ms, {row['comm_hidden']:.0%} hidden")
    if row.get("cache_bytes") is not None:
        parts.append(f"cache {human_bytes(row['cache_bytes'])} "
                     f"(waste {row['cache_waste']:.1%})")
    if row.get("peak_mem_bytes") is not None:
        parts.append(f"peak {human_bytes(row['peak_mem_bytes'])}")
    if row.get("error_rel") is not None:
        parts.append(f"err {row['error_rel']:.2g}")
    if row.get("hbm_bytes") is not None:
        parts.append(f"hbm {human_bytes(row['hbm_bytes'])}")
    if row.get("note"):
        parts.append(f"({row['note']})")
    return ", ".join(parts) or "ok"


__all__ = ["run", "RunSummary", "predicted", "default_out_dir"]
