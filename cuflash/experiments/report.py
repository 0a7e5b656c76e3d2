"""Markdown tables for the README from results CSVs.

    python -m cuflash.experiments.report speed docs/results/speed_vs_length/results.csv
    python -m cuflash.experiments.report io docs/results/io_bytes/results.csv
    python -m cuflash.experiments.report naive docs/results/float32_vs_naive/results.csv
    python -m cuflash.experiments.report slopes docs/results/memory_vs_length/results.csv [MIN_T]
    python -m cuflash.experiments.report ratios docs/results/io_bytes/results.csv
    python -m cuflash.experiments.report tiles docs/results/tile_ablation/results.csv
    python -m cuflash.experiments.report variants results/variants/results.csv
    python -m cuflash.experiments.report gqa results/gqa/results.csv
    python -m cuflash.experiments.report varlen results/varlen/results.csv
    python -m cuflash.experiments.report kv_cache results/kv_cache/results.csv
    python -m cuflash.experiments.report ring results/ring/results.csv
    python -m cuflash.experiments.report precision results/precision/results.csv
    python -m cuflash.experiments.report precision_summary results/precision/results.csv

``speed``: TFLOP/s of cuflash's flash, torch SDPA's flash (FlashAttention-2) and cuDNN backends
per (pass, d, dtype, causal, T), with the ratios, all from rows of one run.
``naive``: flash against naive time at each point of a run that measured both.
``slopes``: least-squares slopes of log(peak memory) and log(time) against log(T) per method and
pass (``report slopes PATH [MIN_T]``: only points with T >= MIN_T).
``tiles``: TFLOP/s of every tile of a tile_ablation run (``report tiles PATH``).
``ratios``: measured / modelled DRAM reads and writes per method, pass and d at T >= 2048 (naive
against the plain model, flash against the L2-aware one), and how many MB the measured writes
fall short of the model.
``io``: the DRAM bytes Nsight Compute counted against the plain IO model (every re-read reaches
DRAM: ``iomodel.predict``) and, for flash, the L2-aware models (``iomodel.flash_forward_dram``,
``iomodel.flash_backward_dram``); naive's 'L2 model' column repeats the plain model.
``io`` and ``ratios`` model each row under its own mask and shapes (window, documents, padded:
``variants.model_mask``, ``Point.run_shape``).
``variants``: the three tables of experiments/variants.yaml (its sweeps 'windows', 'scores' and
'documents'): sliding windows' TFLOP/s against dense causal, softcap and ALiBi time over plain,
packed documents against padded.
``gqa``: experiments/gqa.yaml: per (pass, T, G) the K/V held and the time of GQA read in place,
K/V materialised per query head and torch SDPA (enable_gqa), with peak memory.
``varlen``: experiments/varlen.yaml: per (pass, d, mix, tokens) packed against padded: time,
useful TFLOP/s, the saving and the bytes each layout holds.
``kv_cache``: experiments/kv_cache.yaml (``decode``): two tables. The cache per point: tokens,
the bytes allocated (measured) against ``kv_cache_bytes`` of the tokens, the waste measured
(and counted by ``cache_waste``), and the peak memory of one step above the cache, flash (or
twin) and naive. The decode step per point: time and K+V bytes read per second
(``decode_step_bytes`` / time) of flash and naive, the read ceiling measured in the same run,
and flash / ceiling.
``ring``: experiments/ring.yaml (``ring``): per (sweep, causal, window, T) the single-GPU row
and each ring method's: time, TFLOP/s per GPU, ring / single, compute-only and comm-only time,
the ring's time above its kernels and the share of communication hidden, peak memory per GPU;
then per method the largest T that ran and the first T that ran out of memory.
``precision``: experiments/precision.yaml: per (pass, d, causal, T), each dtype and float32
precision of the tiled method (flash, or twin on the CPU): TFLOP/s and error against the float64
oracle, naive's error at the same precision (where the run has naive), and torch SDPA's
efficient backend at the same point and dtype (torch has no precision axis), with cuflash /
torch (and torch's math path, where the run has it). A blank precision is the dtype's default
(``cuflash.precision.check``). ``precision_summary``: the same folded over causal and T, a line
per (pass, dtype, precision): ranges of TFLOP/s and of the ratio to torch per head dim (torch's
efficient kernel, or its math path for a dtype the efficient one lacks: float64) and of the error.
(``io`` and ``ratios`` model a packed varlen row as one row of its tokens: they are for the
experiments that measure DRAM bytes, which these two do not.)
"""
from __future__ import annotations

import csv
import sys

from .. import iomodel
from ..tile import TileConfig
from . import variants
from .results import Cells
from .points import point_of_row


def _tile(row):
    if not row.get("block_m"):
        return None
    return TileConfig(int(row["block_m"]), int(row["block_n"]), int(row["num_warps"]),
                      int(row["num_stages"]), row["kernel"])


def rows_of(path):
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("status") == "ok" and row.get("hbm_bytes"):
                yield row


def model_args(row):
    """(batch, T, S, d, dtype, mask) of the IO model for a results row: the arrays that ran
    (``Point.run_shape``) under the row's mask (``variants.model_mask``)."""
    p = point_of_row(row)
    b, h, T, S = p.run_shape
    return (b * h, T, S, p.head_dim, p.dtype, variants.model_mask(p))


def dram_model(method, pass_, args, tile, deterministic):
    """The L2-aware model of a flash pass (``iomodel.flash_forward_dram``,
    ``iomodel.flash_backward_dram``, their sum for 'both'); None for naive."""
    if method != "flash":
        return None
    fwd = bwd = None
    if pass_ in ("forward", "both"):
        fwd = iomodel.flash_forward_dram(*args, tile)
    if pass_ in ("backward", "both"):
        bwd = iomodel.flash_backward_dram(*args, tile, deterministic)
    return bwd if fwd is None else (fwd if bwd is None else fwd + bwd)


def io_table(path) -> str:
    head = ("| method | pass | d | T | measured read / write (MB) | plain model read (MB) | "
            "L2 model read (MB) | read: measured / model |")
    lines = [head, "|" + " --- |" * 8]
    for r in rows_of(path):
        args = model_args(r)
        tile = _tile(r)
        method = "naive" if r["method_name"] == "naive" else "flash"
        det = r.get("deterministic", "") != "false"
        plain = iomodel.predict(method, r["pass"], *args, tile=tile, deterministic=det)
        l2 = dram_model(method, r["pass"], args, tile, det) or plain
        read, written = float(r["hbm_bytes_read"]), float(r["hbm_bytes_written"])
        label = r["method"] + (f" {tile.short()}" if tile else "")
        lines.append(f"| {label} | {r['pass']} | {r['head_dim']} | {r['seq_len']} | "
                     f"{read / 1e6:,.1f} / {written / 1e6:,.1f} | {plain.bytes_read / 1e6:,.1f} | "
                     f"{l2.bytes_read / 1e6:,.1f} | {read / l2.bytes_read:.2f} |")
    return "\n".join(lines)


_PASS_ORDER = {"forward": 0, "backward": 1}


def _grouped(path, needed):
    """{(pass, d, dtype, causal, T): {method: row}} over the ok rows that have column `needed`,
    keys sorted forward before backward."""
    cells = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("status") == "ok" and r.get(needed):
                key = (r["pass"], int(r["head_dim"]), r["dtype"], r["causal"], int(r["seq_len"]))
                cells.setdefault(key, {})[r["method"]] = r
    return {k: cells[k] for k in sorted(cells, key=lambda k: (_PASS_ORDER.get(k[0], 2),) + k[1:])}


def speed_table(path) -> str:
    """flash vs torch_flash vs torch_cudnn TFLOP/s, one line per (pass, d, dtype, causal, T)."""
    lines = ["| pass | d | dtype | causal | T | cuflash | FA2 (torch flash) | cuflash / FA2 | "
             "cuDNN | cuflash / cuDNN | naive | tile |", "|" + " --- |" * 12]
    for key, rows in _grouped(path, "tflops").items():
        if not {"flash", "torch_flash"} <= set(rows):
            continue
        c = {m: float(r["tflops"]) for m, r in rows.items()}
        fl = rows["flash"]
        tile = fl["tile"] + ("" if fl["pass"] == "forward" else f", det={fl['deterministic']}")
        fa, cu, nv = c["torch_flash"], c.get("torch_cudnn"), c.get("naive")
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | {c['flash']:.0f} | "
            f"{fa:.0f} | {c['flash'] / fa:.2f} | " + (f"{cu:.0f} | {c['flash'] / cu:.2f} | "
                                                       if cu else "– | – | ")
            + (f"{nv:.1f} | " if nv else "– | ") + f"{tile} |")
    return "\n".join(lines)


def naive_table(path) -> str:
    """flash vs naive time per (pass, d, dtype, T): the speedup over the materialized path."""
    lines = ["| pass | d | dtype | causal | T | naive ms (TFLOP/s) | flash ms (TFLOP/s) | "
             "speedup | tile |", "|" + " --- |" * 9]
    for key, rows in _grouped(path, "time_ms_median").items():
        if {"naive", "flash"} <= set(rows):
            n, f = rows["naive"], rows["flash"]
            tn, tf = float(n["time_ms_median"]), float(f["time_ms_median"])
            lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | "
                         f"{tn:.2f} ({float(n['tflops']):.1f}) | {tf:.2f} "
                         f"({float(f['tflops']):.1f}) | {tn / tf:.1f}× | {f['tile']} |")
    return "\n".join(lines)


def slopes_table(path, min_T=0) -> str:
    """Fitted log-log slopes of peak memory and median time against T, per (method, pass)."""
    import numpy as np
    pts = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("status") == "ok" and int(r["seq_len"]) >= int(min_T):
                pts.setdefault((r["method"], r["pass"]), []).append(r)
    lines = ["| method | pass | T | points | memory slope | time slope |", "|" + " --- |" * 6]
    for (method, pass_), rows in sorted(pts.items(), key=lambda kv: (kv[0][1] != "forward", kv[0])):
        rows.sort(key=lambda r: int(r["seq_len"]))   # a resumed run appends smaller T last
        T = np.log([float(r["seq_len"]) for r in rows])

        def slope(col):
            y = [float(r[col]) for r in rows if r.get(col)]
            return f"{np.polyfit(T, np.log(y), 1)[0]:.2f}" if len(y) == len(T) > 1 else "–"
        lines.append(f"| {method} | {pass_} | {rows[0]['seq_len']}–{rows[-1]['seq_len']} | "
                     f"{len(rows)} | {slope('peak_mem_bytes')} | {slope('time_ms_median')} |")
    return "\n".join(lines)


def ratios_table(path, min_T=2048) -> str:
    """measured / model, reads and writes, min–max per (method, pass, d) at T >= min_T."""
    cells = {}
    for r in rows_of(path):
        if int(r["seq_len"]) < int(min_T):
            continue
        args = model_args(r)
        method = "naive" if r["method_name"] == "naive" else "flash"
        det = r.get("deterministic", "") != "false"
        tile = _tile(r)
        model = (dram_model(method, r["pass"], args, tile, det)
                 or iomodel.predict(method, r["pass"], *args, tile=tile, deterministic=det))
        read, written = float(r["hbm_bytes_read"]), float(r["hbm_bytes_written"])
        c = cells.setdefault((method, r["pass"], int(r["head_dim"])), [[], [], []])
        c[0].append(read / model.bytes_read)
        c[1].append(written / model.bytes_written)
        c[2].append((model.bytes_written - written) / 1e6)
    lines = [f"| method | pass | d | points (T >= {min_T}) | read: measured / model | "
             "write: measured / model | write shortfall (MB) |", "|" + " --- |" * 7]
    for (method, pass_, d), (rd, wr, short) in sorted(
            cells.items(), key=lambda kv: (kv[0][0], kv[0][1] != "forward", kv[0][2])):
        lines.append(f"| {method} | {pass_} | {d} | {len(rd)} | {min(rd):.2f}–{max(rd):.2f} | "
                     f"{min(wr):.2f}–{max(wr):.2f} | {min(short):,.1f}–{max(short):,.1f} |")
    return "\n".join(lines)


def tiles_table(path) -> str:
    """TFLOP/s of every tile of a tile_ablation run, per (pass, d, deterministic), fastest first."""
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("status") == "ok" and r.get("tflops"):
                rows.append(r)
    rows.sort(key=lambda r: (_PASS_ORDER.get(r["pass"], 2), int(r["head_dim"]),
                             r.get("deterministic", ""), -float(r["tflops"])))
    lines = ["| pass | d | deterministic | tile | TFLOP/s |", "|" + " --- |" * 5]
    lines += [f"| {r['pass']} | {r['head_dim']} | {r.get('deterministic') or '–'} | {r['tile']} | "
              f"{float(r['tflops']):.1f} |" for r in rows]
    return "\n".join(lines)


def _ok_rows(path, sweep):
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f)
                if r.get("status") == "ok" and r.get("sweep") == sweep and r.get("time_ms_median")]


def _f(r, col):
    return float(r[col]) if r is not None and r.get(col) else None


def _num(x, fmt="{:.3g}"):
    return "–" if x is None else fmt.format(x)


def _bytes(r):
    x = _f(r, "hbm_bytes")
    return "–" if x is None else f"{x / 1e6:,.1f}"


def _ORDER(key):
    """Sort key of a (pass, ...) tuple: forward before backward, then the rest."""
    return (_PASS_ORDER.get(key[0], 2),) + tuple(key[1:])


def _tiled(path) -> str:
    """The tiled method of a variants run: 'flash' on the GPU, 'twin' on the CPU."""
    with open(path, newline="") as f:
        names = {r.get("method_name") for r in csv.DictReader(f)}
    return "flash" if "flash" in names else "twin"


def _role(r, tiled):
    """'packed', 'padded' (the tiled method), 'torch_padded' or None for a row of a variants run."""
    padded = r.get("layout") == "padded"
    if r.get("method_name") == tiled:
        return "padded" if padded else "packed"
    if r.get("method_name") == "torch_sdpa" and padded:
        return "torch_padded"
    return None


def windows_table(path, method=None) -> str:
    """TFLOP/s (visible scores only) of each sliding window and of dense causal at the same
    (pass, d, T), with the ratio, and the measured DRAM bytes."""
    method = method or _tiled(path)
    cells = Cells()
    for r in _ok_rows(path, "windows"):
        if r["method_name"] == method and r.get("layout") != "padded":
            key = (r["pass"], int(r["head_dim"]), int(r["seq_len"]))
            cells.put(key, r.get("window") or "", r, first=False)
    windows = sorted({w for c in cells.values() for w in c if w},
                     key=lambda w: int(w.split(",")[0]))
    head = ["pass", "d", "T", "causal TFLOP/s"] + [f"window {w}: TFLOP/s (/ causal)"
                                                   for w in windows]
    head += ["DRAM MB causal"] + [f"DRAM MB {w}" for w in windows]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key in sorted(cells, key=_ORDER):
        c = cells[key]
        base = _f(c.get(""), "tflops")
        row = [key[0], str(key[1]), str(key[2]), _num(base)]
        for w in windows:
            t = _f(c.get(w), "tflops")
            row.append("–" if t is None else f"{t:.3g}" + (f" ({t / base:.2f})" if base else ""))
        row += [_bytes(c.get(""))] + [_bytes(c.get(w)) for w in windows]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + cells.note()


def scores_table(path, method=None) -> str:
    """Median time of plain attention and the time of softcap, ALiBi and both over it."""
    method = method or _tiled(path)
    cells = Cells()
    for r in _ok_rows(path, "scores"):
        if r["method_name"] == method and r.get("layout") != "padded":
            key = (r["pass"], int(r["head_dim"]), r["causal"], int(r["seq_len"]))
            which = (("softcap" if r.get("softcap") else "")
                     + ("+" if r.get("softcap") and r.get("alibi") == "true" else "")
                     + ("alibi" if r.get("alibi") == "true" else "")) or "plain"
            cells.put(key, which, r, first=False)
    kinds = ("softcap", "alibi", "softcap+alibi")
    head = ["pass", "d", "causal", "T", "plain ms"] + [f"{k}: ms (/ plain)" for k in kinds]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key in sorted(cells, key=_ORDER):
        c = cells[key]
        base = _f(c.get("plain"), "time_ms_median")
        row = [key[0], str(key[1]), key[2], str(key[3]), _num(base, "{:.3f}")]
        for k in kinds:
            t = _f(c.get(k), "time_ms_median")
            row.append("–" if t is None else f"{t:.3f}" + (f" ({t / base:.2f})" if base else ""))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + cells.note()


def documents_table(path) -> str:
    """Packed documents (mask_mod) against the same documents padded, and the whole row causal:
    median time, useful TFLOP/s (both count the real tokens' visible scores), the saving
    (padded / packed) and measured DRAM bytes."""
    tiled = _tiled(path)
    packed, padded, torch_padded = "packed", "padded", "torch_padded"
    cells = Cells()
    for r in _ok_rows(path, "documents"):
        key = (r["pass"], int(r["head_dim"]), r.get("mask") or "", int(r["seq_len"]))
        role = _role(r, tiled)
        if role is not None:
            cells.put(key, role, r)
    whole = {(k[0], k[1], k[3]): c.get(packed) for k, c in cells.items() if not k[2]}
    head = ["pass", "d", "documents", "T", "row causal ms", "packed ms (TFLOP/s)",
            "padded ms (TFLOP/s)", "padded / packed time", "torch padded ms",
            "DRAM MB packed / padded"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key in sorted((k for k in cells if k[2]), key=_ORDER):
        c = cells[key]
        pk, pd, tp = c.get(packed), c.get(padded), c.get(torch_padded)
        tk, td = _f(pk, "time_ms_median"), _f(pd, "time_ms_median")

        def cell(r):
            t = _f(r, "time_ms_median")
            return "–" if t is None else f"{t:.3f} ({_num(_f(r, 'tflops'))})"
        lines.append("| " + " | ".join([
            key[0], str(key[1]), key[2], str(key[3]),
            _num(_f(whole.get((key[0], key[1], key[3])), "time_ms_median"), "{:.3f}"),
            cell(pk), cell(pd), "–" if not (tk and td) else f"{td / tk:.2f}",
            _num(_f(tp, "time_ms_median"), "{:.3f}"), f"{_bytes(pk)} / {_bytes(pd)}"]) + " |")
    return "\n".join(lines) + cells.note()


def _all_ok(path):
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("status") == "ok"
                and r.get("time_ms_median")]


def _mb(r, col):
    x = _f(r, col)
    return "–" if x is None else f"{x / 1e6:,.1f}"


def gqa_table(path) -> str:
    """GQA in place against K/V materialised and torch SDPA (enable_gqa), per (pass, T, G):
    K/V MB held, median ms (TFLOP/s), materialised time / in-place time, peak MB."""
    tiled = _tiled(path)
    cells = Cells()
    for r in _all_ok(path):
        key = (r["pass"], int(r["seq_len"]), int(r.get("group") or 1))
        if r["method_name"] == tiled:
            role = "mat" if r.get("layout") == "materialized" else "inplace"
        elif r["method_name"] == "torch_sdpa":
            role = f"torch_{r['backend']}"
        else:
            continue
        cells.put(key, role, r, first=False)
    head = ["pass", "T", "G", "Hkv", "K/V MB in place / materialised", "in place ms (TFLOP/s)",
            "materialised ms (/ in place)", "torch flash ms", "torch cuDNN ms",
            "peak MB in place / materialised"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key in sorted(cells, key=_ORDER):
        c = cells[key]
        ip, mat = c.get("inplace"), c.get("mat")
        t_ip, t_mat = _f(ip, "time_ms_median"), _f(mat, "time_ms_median")
        any_row = next(iter(c.values()))
        lines.append("| " + " | ".join([
            key[0], str(key[1]), str(key[2]), any_row.get("kv_heads") or "–",
            f"{_mb(ip, 'kv_bytes')} / {_mb(mat, 'kv_bytes')}",
            "–" if t_ip is None else f"{t_ip:.3f} ({_num(_f(ip, 'tflops'))})",
            "–" if t_mat is None else f"{t_mat:.3f}" + (f" ({t_mat / t_ip:.2f})" if t_ip else ""),
            _num(_f(c.get("torch_flash"), "time_ms_median"), "{:.3f}"),
            _num(_f(c.get("torch_cudnn"), "time_ms_median"), "{:.3f}"),
            f"{_mb(ip, 'peak_mem_bytes')} / {_mb(mat, 'peak_mem_bytes')}"]) + " |")
    return "\n".join(lines) + cells.note()


def varlen_table(path) -> str:
    """Packed varlen batches against the same batch padded, per (pass, d, mix, tokens): median
    ms (useful TFLOP/s: both count the real tokens' visible scores), padded / packed time, torch
    on the padded batch, and the q, K, V bytes each layout holds."""
    tiled = _tiled(path)
    cells = Cells()
    for r in _all_ok(path):
        if not r.get("varlen"):
            continue
        key = (r["pass"], int(r["head_dim"]), r["varlen"], int(r["seq_len"]))
        role = _role(r, tiled)
        if role is not None:
            cells.put(key, role, r)
    head = ["pass", "d", "mix", "tokens", "packed ms (TFLOP/s)", "padded ms (TFLOP/s)",
            "padded / packed time", "torch padded ms", "q,K,V MB packed / padded"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key in sorted(cells, key=_ORDER):
        c = cells[key]
        pk, pd = c.get("packed"), c.get("padded")
        tk, td = _f(pk, "time_ms_median"), _f(pd, "time_ms_median")

        def cell(r):
            t = _f(r, "time_ms_median")
            return "–" if t is None else f"{t:.3f} ({_num(_f(r, 'tflops'))})"
        lines.append("| " + " | ".join([
            key[0], str(key[1]), key[2], str(key[3]), cell(pk), cell(pd),
            "–" if not (tk and td) else f"{td / tk:.2f}",
            _num(_f(c.get("torch_padded"), "time_ms_median"), "{:.3f}"),
            f"{_mb(pk, 'qkv_bytes')} / {_mb(pd, 'qkv_bytes')}"]) + " |")
    return "\n".join(lines) + cells.note()


def _size(r, col) -> str:
    """A byte count as '57.3 kB' / '2.15 GB' ('–' when missing)."""
    from .results import human_bytes
    x = _f(r, col)
    return "–" if x is None else human_bytes(x)


def _cache_cells(path):
    """(tiled method, {(cache, page_size, lengths, Tq, B, Hq, Hkv, S): {role: row}}, note) over
    the ok rows of KV-cache points; roles: 'tiled' (flash, or twin on the CPU), 'naive',
    'ceiling'; note: Cells.note."""
    tiled = _tiled(path)
    cells = Cells()
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("status") != "ok" or not r.get("cache"):
                continue
            role = {tiled: "tiled", "naive": "naive", "read_ceiling": "ceiling"}.get(
                r["method_name"])
            if role is None:
                continue
            key = (r["cache"], int(r["page_size"]) if r.get("page_size") else 0,
                   r.get("cache_lengths") or "", int(r["seq_len"]), int(r["batch"]),
                   int(r["heads"]), int(r["kv_heads"]), int(r["kv_len"]))
            cells.put(key, role, r)
    order = lambda k: (k[2], k[3], k[4], -k[6], k[7], k[0], k[1])          # noqa: E731
    return tiled, {k: cells[k] for k in sorted(cells, key=order)}, cells.note()


def _layout_text(key) -> str:
    return "contiguous" if key[0] == "contiguous" else f"paged {key[1]}"


def kv_cache_table(path) -> str:
    """The cache held per KV-cache point, then the decode step's time and bandwidth."""
    tiled, cells, note = _cache_cells(path)
    head = ["cache", "lengths", "Tq", "B", "Hq / Hkv", "S", "tokens", "cache bytes measured",
            "kv_cache_bytes", "measured / kv_cache_bytes", "waste measured (counted)",
            f"step peak {tiled} / naive"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key, c in cells.items():
        r = c.get("tiled") or c.get("naive")
        if r is None or not r.get("cache_bytes"):
            continue
        held, need = _f(r, "cache_bytes"), _f(r, "kv_bytes")
        lines.append("| " + " | ".join([
            _layout_text(key), key[2] or "uniform", str(key[3]), str(key[4]),
            f"{key[5]} / {key[6]}", str(key[7]), r["cache_tokens"], _size(r, "cache_bytes"),
            _size(r, "kv_bytes"), f"{held / need:.3f}" if need else "–",
            f"{_f(r, 'cache_waste'):.1%} ({_f(r, 'pred_cache_waste'):.1%})",
            f"{_size(c.get('tiled'), 'peak_mem_bytes')} / "
            f"{_size(c.get('naive'), 'peak_mem_bytes')}",
        ]) + " |")
    head = ["cache", "lengths", "Tq", "B", "Hq / Hkv", "S", "K+V bytes", f"{tiled} ms (GB/s)",
            "naive ms (GB/s)", "read ceiling GB/s", f"{tiled} / ceiling"]
    second = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key, c in cells.items():
        fl, nv, ce = c.get("tiled"), c.get("naive"), c.get("ceiling")

        def cell(r):
            t = _f(r, "time_ms_median")
            return "–" if t is None else f"{t:.3f} ({_num(_f(r, 'gbps'))})"
        bw, top = _f(fl, "gbps"), _f(ce, "gbps")
        any_row = fl or nv or ce
        second.append("| " + " | ".join([
            _layout_text(key), key[2] or "uniform", str(key[3]), str(key[4]),
            f"{key[5]} / {key[6]}", str(key[7]), _size(any_row, "kv_bytes"), cell(fl), cell(nv),
            _num(top), f"{bw / top:.2f}" if bw and top else "–"]) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(second) + note


def ring_table(path) -> str:
    """The tables of a ring run (``ring.table``)."""
    from .ring import table
    return table(path)


_DTYPE_ORDER = ("float32", "float16", "bfloat16", "float64")


def _precision_text(r) -> str:
    """The row's precision: as swept, or the dtype's default ('highest (default)', 'native')."""
    from ..precision import check
    if r.get("precision"):
        return r["precision"]
    found = check(None, r["dtype"])
    return f"{found} (default)" if r["dtype"] == "float32" else found


def _precision_rank(r) -> tuple:
    from ..precision import PRECISIONS
    dt, prec = r["dtype"], r.get("precision") or ""
    return (_DTYPE_ORDER.index(dt) if dt in _DTYPE_ORDER else len(_DTYPE_ORDER), dt,
            PRECISIONS.index(prec) if prec in PRECISIONS else len(PRECISIONS))


def _precision_cells(path):
    """precision_table's cells: (tiled method name, mine, naive, torch efficient, torch math,
    the Cells), mine and naive keyed (pass, d, causal, T) + _precision_rank, torch's rows
    (pass, d, causal, T, dtype)."""
    tiled = _tiled(path)
    cells = Cells()
    for r in _all_ok(path):
        at = (r["pass"], int(r["head_dim"]), r["causal"], int(r["seq_len"]))
        if r["method_name"] == tiled and r.get("layout") in (None, ""):
            cells.put(at + _precision_rank(r), "mine", r, first=False)
        elif r["method_name"] == "naive":
            cells.put(at + _precision_rank(r), "naive", r, first=False)
        elif r["method_name"] == "torch_sdpa" and r.get("backend") in ("efficient", "math"):
            cells.put(at + (r["dtype"],), r["backend"], r, first=False)
    roles = ({k: c[role] for k, c in cells.items() if role in c}
             for role in ("mine", "naive", "efficient", "math"))
    return (tiled, *roles, cells)


def precision_table(path) -> str:
    """Speed and error of each dtype and float32 precision, one line per (pass, d, causal, T,
    dtype, precision) of the tiled method: TFLOP/s, error_rel, naive's error_rel at the same
    precision, torch efficient's TFLOP/s and error_rel at the same (pass, d, causal, T, dtype)
    and the TFLOP/s ratio, torch math's TFLOP/s and the ratio to it (the reference for float64,
    where torch's efficient kernel has none; naive's and each torch backend's columns only when
    the run has such rows), and the tile."""
    tiled, mine, naive, torch, math_, cells = _precision_cells(path)
    head = ["pass", "d", "causal", "T", "dtype", "precision", f"{tiled} TFLOP/s", "error"]
    head += ["naive error"] if naive else []
    head += ["torch efficient TFLOP/s", "torch efficient error",
             f"{tiled} / torch efficient"] if torch else []
    head += ["torch math TFLOP/s", f"{tiled} / torch math"] if math_ else []
    head += ["tile"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key in sorted(mine, key=_ORDER):
        r = mine[key]
        mt = _f(r, "tflops")
        row = [key[0], str(key[1]), key[2], str(key[3]), r["dtype"], _precision_text(r),
               _num(mt), _num(_f(r, "error_rel"), "{:.2g}")]
        if naive:
            row.append(_num(_f(naive.get(key), "error_rel"), "{:.2g}"))
        if torch:
            t = torch.get(key[:4] + (r["dtype"],))
            tt = _f(t, "tflops")
            row += [_num(tt), _num(_f(t, "error_rel"), "{:.2g}"),
                    f"{mt / tt:.2f}" if mt and tt else "–"]
        if math_:
            tm = _f(math_.get(key[:4] + (r["dtype"],)), "tflops")
            row += [_num(tm), f"{mt / tm:.2f}" if mt and tm else "–"]
        row.append(r.get("tile") or "–")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + cells.note()


def _span(values, fmt) -> str:
    """'lo–hi' of the values (one value once), '–' when there are none."""
    if not values:
        return "–"
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def precision_summary(path) -> str:
    """precision_table folded over causal and T, one line per (pass, dtype, precision): the
    range of the tiled method's TFLOP/s at each head dim, of its ratio to torch at each head dim
    (torch's efficient kernel where it ran the dtype, else its math path: float64), and of its
    error against the float64 oracle (every head dim). The reference each line took is named."""
    tiled, mine, _, torch, math_, cells = _precision_cells(path)
    dims = sorted({k[1] for k in mine})
    groups: dict = {}
    for key in sorted(mine, key=_ORDER):
        r = mine[key]
        g = groups.setdefault((key[0],) + key[4:], {"row": r, "tf": {}, "x": {}, "err": [],
                                                    "ref": set()})
        mt = _f(r, "tflops")
        if mt:
            g["tf"].setdefault(key[1], []).append(mt)
        # torch's efficient kernel where it ran this dtype, its math path only where it did not
        at = key[:4] + (r["dtype"],)
        name, ref = ("efficient", torch) if at in torch else ("math", math_)
        tt = _f(ref.get(at), "tflops")
        if mt and tt:
            g["x"].setdefault(key[1], []).append(mt / tt)
            g["ref"].add(name)
        e = _f(r, "error_rel")
        if e is not None:
            g["err"].append(e)
    ds = " / ".join(str(d) for d in dims)
    lines = [f"| pass | dtype, precision | {tiled} TFLOP/s d = {ds} | / torch d = {ds} "
             "| torch | error |", "|" + " --- |" * 6]
    for (pass_, *_), g in groups.items():
        r = g["row"]
        lines.append("| " + " | ".join([
            pass_, f"{r['dtype']} {_precision_text(r)}",
            " / ".join(_span(g["tf"].get(d, []), "{:.3g}") for d in dims),
            " / ".join(_span(g["x"].get(d, []), "{:.2f}") for d in dims),
            ", ".join(sorted(g["ref"])) or "–", _span(g["err"], "{:.2g}")]) + " |")
    return "\n".join(lines) + cells.note()


def variants_tables(path) -> str:
    """The three tables of a variants run (sweeps 'windows', 'scores', 'documents')."""
    return "\n\n".join([windows_table(path), scores_table(path), documents_table(path)])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    tables = {"speed": speed_table, "io": io_table, "naive": naive_table,
              "slopes": slopes_table, "ratios": ratios_table, "tiles": tiles_table,
              "variants": variants_tables, "gqa": gqa_table, "varlen": varlen_table,
              "kv_cache": kv_cache_table, "ring": ring_table, "precision": precision_table,
              "precision_summary": precision_summary}
    extra = len(argv) == 3 and argv[0] in ("slopes", "ratios")
    if not (len(argv) == 2 or extra) or argv[0] not in tables:
        print(__doc__, file=sys.stderr)
        return 2
    name = f"report {argv[0]}"
    if extra and not argv[2].lstrip("-").isdigit():
        print(f"{name}: min_T={argv[2]!r} must be an int (the smallest T the table takes)",
              file=sys.stderr)
        return 2
    try:
        text = tables[argv[0]](*argv[1:])
    except OSError as exc:
        print(f"{name}: cannot read {argv[1]}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyError as exc:
        print(f"{name}: {argv[1]} has no column {exc.args[0]!r}, which this table reads",
              file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"{name}: {argv[1]}: a cell this table reads is not what it should be ({exc})",
              file=sys.stderr)
        return 2
    print(text)
    if not _data_lines(text):
        print(f"{name}: no row of {argv[1]} fits this table (its method, status or columns)",
              file=sys.stderr)
    return 0


def _data_lines(text: str) -> list[str]:
    """A markdown table text's rows other than headers (a line followed by a | --- | line)
    and separators."""
    lines = text.splitlines()
    sep = lambda line: line.startswith("|") and set(line) <= set("|-: ")
    return [line for i, line in enumerate(lines) if line.startswith("|") and not sep(line)
            and not (i + 1 < len(lines) and sep(lines[i + 1]))]


if __name__ == "__main__":
    sys.exit(main())
