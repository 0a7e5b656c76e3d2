"""Figures from a results CSV: lines (with fitted log-log slopes and OOM marks), scatters (one
marker per row, e.g. error against speed; drawn by ``draw_line``'s facets, colours and markers)
and heatmaps.

Only the rows are read (``results.read_rows``) and the plot specs of the experiment, so a CSV and
its ``experiment.yaml`` are enough to redraw everything. Matplotlib is used through its Agg canvas
(no pyplot, no display, no global backend change). PNGs are written beside the CSV.
"""
from __future__ import annotations

import dataclasses
import math
import re
import textwrap
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib import colors as mcolors
from matplotlib import ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..precision import PRECISIONS
from .points import KEY_COLUMNS
from .results import human_bytes
from .schema import AXIS_COLUMNS, PASSES, VARIANT_COLUMNS, Plot
from .variants import parse_window

#: Axis labels, with units.
LABELS = {
    "seq_len": "sequence length T (queries)", "kv_len": "key length S", "head_dim": "head dim d",
    "batch": "batch", "heads": "heads", "dtype": "dtype", "causal": "causal", "pass": "pass",
    "precision": "float32 precision (cuflash.precision)",
    "method": "method", "block_m": "block_m (query rows per tile)",
    "block_n": "block_n (key rows per tile)", "num_warps": "warps per block",
    "num_stages": "pipeline stages",
    "time_ms_median": "time (ms, median)", "time_ms_p20": "time (ms, 20th percentile)",
    "time_ms_p80": "time (ms, 80th percentile)", "tflops": "throughput (TFLOP/s)",
    "gbps": "predicted bytes / time (GB/s)", "peak_mem_bytes": "peak memory above inputs",
    "error_rel": "max relative error vs float64 oracle", "pred_bytes": "predicted DRAM bytes",
    "pred_bytes_read": "predicted DRAM bytes read",
    "pred_bytes_written": "predicted DRAM bytes written",
    "flops": "FLOPs", "hbm_bytes": "measured DRAM bytes (ncu)",
    "hbm_bytes_read": "measured DRAM bytes read (ncu)",
    "hbm_bytes_written": "measured DRAM bytes written (ncu)", "hbm_gbps": "measured DRAM GB/s",
    "hbm_pred_ratio": "measured / predicted DRAM bytes", "repeats": "timed calls",
    "window": "sliding window (left,right; -1: unbounded)", "softcap": "softcap c",
    "alibi": "ALiBi", "mask": "custom mask", "sweep": "sweep", "layout": "layout",
    "group": "GQA group G (query heads per kv head)", "kv_heads": "kv heads Hkv",
    "varlen": "varlen mix (sequence lengths in turn)",
    "kv_bytes": "K and V bytes held", "qkv_bytes": "q, K and V bytes held",
    "cache": "KV cache layout", "page_size": "page size (tokens)",
    "cache_lengths": "sequence lengths (fractions of S)",
    "cache_bytes": "KV cache bytes allocated (measured)",
    "cache_tokens": "tokens in the KV cache", "cache_slots": "token slots allocated",
    "cache_pages": "pages in use", "cache_waste": "KV cache waste (1 - tokens / slots)",
    "pred_cache_bytes": "KV cache bytes (kvcache.cache_waste)",
    "pred_cache_waste": "KV cache waste (kvcache.cache_waste)",
    "world_size": "ranks (GPUs)", "slicing": "ring slicing", "launch": "ring launch",
    "tflops_per_gpu": "throughput per GPU (TFLOP/s)",
    "peak_total_bytes": "peak memory in use per GPU (inputs included)",
    "ring_compute_ms": "ring, compute only (ms)", "ring_comm_ms": "ring, communication only (ms)",
    "ring_serial_ms": "ring without overlap (ms)",
    "comm_exposed_ms": "ring time above its kernels alone (ms)",
    "comm_hidden": "communication hidden (1 - exposed / comm-only)",
    "rank_spread": "spread of the ranks' median times",
}
BYTE_COLUMNS = {"peak_mem_bytes", "pred_bytes", "pred_bytes_read", "pred_bytes_written",
                "hbm_bytes", "hbm_bytes_read", "hbm_bytes_written", "kv_bytes", "qkv_bytes",
                "cache_bytes", "pred_cache_bytes", "peak_total_bytes"}
POW2_COLUMNS = {"seq_len", "kv_len", "head_dim", "block_m", "block_n", "num_warps", "batch",
                "heads", "group", "kv_heads", "page_size", "world_size"}
#: Columns that may split a line or a heatmap cell when the plot does not fix them (in order).
SPLIT_COLUMNS = AXIS_COLUMNS + ("method", "tile", "kernel", "block_m", "block_n", "num_warps",
                                "num_stages", "deterministic", "backend", "layout",
                                "world_size", "slicing", "launch", "device_name")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINESTYLES = ("-", "--", ":", "-.")


def label(column: str) -> str:
    return LABELS.get(column, column)


def short_int(v) -> str:
    """256, 1k, 128k for powers-of-two sizes; plain numbers otherwise."""
    if isinstance(v, (int, np.integer)) and v >= 1024 and v % 1024 == 0:
        return f"{v // 1024}k"
    if isinstance(v, float) and v.is_integer():
        return short_int(int(v))
    return str(v)


def fmt_value(column: str, v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if column in BYTE_COLUMNS:
        return human_bytes(v)
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


#: Columns a legend names with their value ('window=255,0', 'group=4', 'varlen=none').
NAMED_COLUMNS = VARIANT_COLUMNS + ("group", "kv_heads", "varlen", "page_size", "cache_lengths",
                                   "world_size", "precision")
#: How a blank cell of a named column is shown, where not 'none' (precision: the dtype's own).
_BLANK_TEXT = {"precision": "default"}


def _facet_text(keys, values) -> str:
    return ", ".join(f"{k}={_none(v, k)}" if k in NAMED_COLUMNS else f"{k}={v}"
                     for k, v in zip(keys, values))


def _none(v, column: str | None = None):
    """A variant column's value as shown: 'none' for no variant ('default' for no precision)."""
    return _BLANK_TEXT.get(column, "none") if v is None else v


def series_text(column: str, value) -> str:
    """A line's name in the legend from one series column: the value ('flash'), or for a variant
    or layout column 'window=255,0' / 'window=none' / 'group=4'."""
    return f"{column}={_none(value, column)}" if column in NAMED_COLUMNS else str(value)


def _baseline_text(base) -> str:
    """A ratio's baseline as text: a method label, or 'window=none, alibi=False'."""
    if isinstance(base, tuple):
        return ", ".join(f"{c}={_none(v)}" for c, v in base)
    return base


# -- row selection --------------------------------------------------------------------------------

def select(rows: list[dict], plot: Plot) -> list[dict]:
    """Rows passing the plot's filter."""
    out = rows
    for col, vals in plot.filter:
        out = [r for r in out if r.get(col) in vals]
    return out


def with_ratio(rows: list[dict], plot: Plot) -> list[dict]:
    """Rows whose y is replaced by the ratio to the baseline method at the same point.

    numerator=B: y := y(B) / y(row) (a speedup when y is a time); denominator=B: y := y(row) / y(B).
    B is a method label (matched on the axis columns; on all but ``precision`` when B's rows have
    none, as torch_sdpa's: one baseline for every precision) or (column, value) pairs (the row
    with those values and the same values in every other key column: same method, tile, shapes
    and other variants; but for the tile when the pairs fix ``precision``, whose kernel family
    decides the default tile). The baseline's own rows are dropped; rows with no baseline at
    their point too."""
    base = plot.ratio_numerator or plot.ratio_denominator
    if base is None:
        return rows
    if isinstance(base, tuple):
        fixed = dict(base)
        # a precision baseline runs its own kernel family: its default tile is another one
        match = [c for c in KEY_COLUMNS if c not in fixed
                 and not (c == "tile" and "precision" in fixed)]

        def is_base(r):
            return all(r.get(c) == v for c, v in fixed.items())
    else:
        def is_base(r):
            return r.get("method") == base

        match = AXIS_COLUMNS
        if all(r.get("precision") is None for r in rows if is_base(r)):
            match = tuple(c for c in AXIS_COLUMNS if c != "precision")

    def at(r):
        return tuple(r.get(c) for c in match)

    ref = {at(r): r[plot.y] for r in rows
           if is_base(r) and r.get("status") == "ok" and r.get(plot.y)}
    out = []
    for r in rows:
        if is_base(r) or r.get("status") != "ok" or not r.get(plot.y):
            continue
        b = ref.get(at(r))
        if b is None:
            continue
        out.append(dict(r, **{plot.y: b / r[plot.y] if plot.ratio_numerator else r[plot.y] / b}))
    return out


def ratio_label(plot: Plot) -> str:
    if isinstance(plot.ratio_numerator or plot.ratio_denominator, tuple):
        base = _baseline_text(plot.ratio_numerator or plot.ratio_denominator)
        if plot.ratio_numerator:
            return f"{label(plot.y)}: ({base}) / row"
        return f"{label(plot.y)}: row / ({base})"
    if plot.ratio_numerator and plot.y.startswith("time_ms"):
        return f"speedup over {plot.ratio_numerator} ({plot.ratio_numerator} time / time)"
    if plot.ratio_numerator:
        return f"{label(plot.y)}: {plot.ratio_numerator} / method"
    if plot.ratio_denominator:
        return f"{label(plot.y)}: method / {plot.ratio_denominator}"
    return label(plot.y)


def split_columns(rows: list[dict], fixed: set, cell) -> list[str]:
    """Columns to add to ``cell(row)`` so no two ok rows share a cell (e.g. x value of one line)."""
    extra: list[str] = []
    for col in SPLIT_COLUMNS:
        if col in fixed:
            continue
        groups: dict = {}
        for r in rows:
            groups.setdefault((cell(r), tuple(r.get(c) for c in extra)), []).append(r)
        if all(len(g) == 1 for g in groups.values()):
            break
        if any(len({r.get(col) for r in g}) > 1 for g in groups.values()):
            extra.append(col)
    return extra


def _rank(column: str, value, order: dict):
    """Sort key of one value: methods in experiment order, passes in pipeline order, precisions
    as ``cuflash.precision.PRECISIONS`` lists them, windows by their sizes, None last,
    everything else by value."""
    if column == "method" and value in order:
        return (0, order[value])
    if column == "pass" and value in PASSES:
        return (0, PASSES.index(value))
    if column == "precision" and value in PRECISIONS:
        return (0, PRECISIONS.index(value))
    if column == "window" and isinstance(value, str):
        try:
            return (0, tuple(-1 if w is None else w for w in parse_window(value)))
        except ValueError:
            pass
    return (1 if value is None else 0, value)


def _sorted_unique(values, columns=None, order: dict | None = None):
    """Distinct values (or tuples of the values of ``columns``) in a reader-friendly order.
    ``order`` maps method labels to their rank (their order in the experiment)."""
    vals = list(dict.fromkeys(values))
    if columns is None:
        key = lambda v: (v is None, v)                                            # noqa: E731
    else:
        key = lambda t: tuple(_rank(c, v, order or {}) for c, v in zip(columns, t))  # noqa: E731
    try:
        return sorted(vals, key=key)
    except TypeError:
        return sorted(vals, key=str)


def _method_order(rows: list[dict]) -> dict:
    return {m: i for i, m in enumerate(dict.fromkeys(r.get("method") for r in rows))}


# -- axes formatting ------------------------------------------------------------------------------

def _format_axis(ax, which: str, column: str, log: bool, values) -> None:
    axis = ax.xaxis if which == "x" else ax.yaxis
    setter = ax.set_xscale if which == "x" else ax.set_yscale
    if log:
        setter("log", base=2 if column in POW2_COLUMNS else 10)
    if column in BYTE_COLUMNS:
        axis.set_major_formatter(ticker.FuncFormatter(
            lambda v, _: human_bytes(v) if v > 0 else "0"))
        if log:
            axis.set_minor_formatter(ticker.NullFormatter())
    elif column in POW2_COLUMNS:
        vals = sorted({v for v in values if v is not None})
        if vals and len(vals) <= 14:
            axis.set_major_locator(ticker.FixedLocator(vals))
            axis.set_minor_locator(ticker.NullLocator())
        axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: short_int(int(v))
                                                      if v >= 1 else f"{v:g}"))
    elif log:
        # matplotlib labels every minor tick of a log axis spanning a decade or two ("3×10^1",
        # "4×10^1", ...), and the labels run into each other: there, only 2 and 5 of each decade
        # (plain numbers); over more decades, the decades alone
        pos = [v for v in values if isinstance(v, (int, float)) and v > 0]
        if pos and max(pos) >= 10 * min(pos):
            few = max(pos) < 100 * min(pos)
            axis.set_minor_formatter(ticker.FuncFormatter(
                lambda v, _: f"{v:g}" if few and _leading_digit(v) in (2, 5) else ""))


def _leading_digit(v: float) -> int:
    """The first significant digit of v > 0 (2 for 0.02, 200 and 250)."""
    return int(f"{v:e}"[0])


# -- line plots -----------------------------------------------------------------------------------

def _fit_slope(xs, ys):
    """(slope, intercept) of log y against log x, least squares; None with < 2 usable points."""
    pts = [(x, y) for x, y in zip(xs, ys) if x and y and x > 0 and y > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    lx, ly = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    slope, intercept = np.polyfit(lx, ly, 1)
    return float(slope), float(intercept)


def _panel_plot(plot: Plot) -> Plot | None:
    """The ratio plot of a line plot's ratio panel (``ratio_panel``), or None without one."""
    if not (plot.panel_numerator or plot.panel_denominator):
        return None
    return dataclasses.replace(plot, ratio_numerator=plot.panel_numerator,
                               ratio_denominator=plot.panel_denominator)


def draw_line(rows: list[dict], plot: Plot, path: Path, env: dict | None = None) -> Path:
    """Lines of y against x per series and facet, OOM marks, and with ``ratio_panel`` a panel
    under each facet with the ratio to a baseline method (``with_ratio``).

    ``kind: scatter`` takes the same facets, colours (hue), markers (style) and legend, but draws
    one marker per ok row and nothing joining them; a series is its hue and style alone (points
    may share an x). Rows not drawn (OOM, error, unavailable, or no x or y) are counted in a note
    in the corner of their facet."""
    scatter = plot.kind == "scatter"
    is_ratio = bool(plot.ratio_numerator or plot.ratio_denominator)
    # a ratio's baseline is looked up among all rows, so the filter need not keep it
    ok = [r for r in select(with_ratio(rows, plot), plot)
          if r.get("status") == "ok" and r.get(plot.y) is not None and r.get(plot.x) is not None]
    rplot = _panel_plot(plot)
    panel_rows = [] if rplot is None else [
        r for r in select(with_ratio(rows, rplot), plot)
        if r.get("status") == "ok" and r.get(plot.y) is not None and r.get(plot.x) is not None]
    rows = select(rows, plot)
    ooms = [] if is_ratio or scatter else [r for r in rows if r.get("status") == "oom"]
    # a scatter marks no failure at a point: its rows without a point are counted in a note
    drawn = {id(r) for r in ok}
    undrawn = [r for r in rows if id(r) not in drawn] if scatter else []
    series_cols = [c for c in (plot.hue, plot.style) if c]
    fixed = {plot.x, *series_cols, *plot.col, *(c for c, _ in plot.filter)}
    extra = [] if scatter else split_columns(
        ok, fixed, lambda r: (tuple(r.get(c) for c in plot.col),
                              tuple(r.get(c) for c in series_cols), r.get(plot.x)))
    key_cols = series_cols + extra
    order = _method_order(rows)
    present = ok + ooms + undrawn
    facets = _sorted_unique((tuple(r.get(c) for c in plot.col) for r in present),
                            plot.col, order) or [()]
    hues = ([h for (h,) in _sorted_unique(((r.get(plot.hue),) for r in present),
                                           (plot.hue,), order)] if plot.hue else [None])
    styles = ([s for (s,) in _sorted_unique(((r.get(plot.style),) for r in present),
                                             (plot.style,), order)] if plot.style else [None])
    cycle = [c["color"] for c in matplotlib.rcParams["axes.prop_cycle"]]
    color = {h: cycle[i % len(cycle)] for i, h in enumerate(hues)}
    ncols = min(len(facets), 3)
    nrows = math.ceil(len(facets) / ncols)
    if rplot is None:
        fig = Figure(figsize=(6.0 * ncols, 4.6 * nrows + 0.6), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
        panels = [None] * len(axes)
    else:                       # each facet over its ratio panel, the two sharing x
        fig = Figure(figsize=(6.0 * ncols, 6.4 * nrows + 0.6), layout="constrained")
        FigureCanvasAgg(fig)
        grid = fig.subplots(2 * nrows, ncols, squeeze=False,
                            gridspec_kw={"height_ratios": [3, 1.4] * nrows})
        axes, panels = grid[0::2].ravel(), grid[1::2].ravel()
        for ax, panel in zip(axes, panels):
            panel.sharex(ax)
    gpu_mem = (_gpu_memory(env, rows) if plot.y in ("peak_mem_bytes", "peak_total_bytes")
               and not is_ratio else None)
    for ax, panel, facet in zip(axes, panels, facets):
        in_facet = [r for r in ok if tuple(r.get(c) for c in plot.col) == facet]
        oom_facet = [r for r in ooms if tuple(r.get(c) for c in plot.col) == facet]
        keys = _sorted_unique((tuple(r.get(c) for c in key_cols) for r in in_facet + oom_facet),
                              key_cols, order)
        for key in keys:
            kv = dict(zip(key_cols, key))
            pts = sorted((r for r in in_facet if tuple(r.get(c) for c in key_cols) == key),
                         key=lambda r: r[plot.x])
            hue = kv.get(plot.hue) if plot.hue else None
            sty = styles.index(kv.get(plot.style)) if plot.style else 0
            name = " ".join(series_text(c, kv[c]) for c in series_cols) or plot.y
            shown = [(c, kv[c]) for c in extra if kv[c] is not None]
            if shown:
                name += " (" + _facet_text(*zip(*shown)) + ")"
            xs = [r[plot.x] for r in pts]
            ys = [r[plot.y] for r in pts]
            fit = (_fit_slope(xs, ys) if plot.logx and plot.logy and plot.slope and not scatter
                   else None)
            if fit is not None:
                name += f"  slope {fit[0]:.2f}"
            colour = color.get(hue, cycle[0])
            if pts and scatter:
                ax.scatter(xs, ys, color=colour, marker=_MARKERS[sty % len(_MARKERS)], s=25,
                           label=name)
            elif pts:
                ax.plot(xs, ys, color=colour, linestyle=_LINESTYLES[sty % len(_LINESTYLES)],
                        marker=_MARKERS[sty % len(_MARKERS)], markersize=5, label=name)
                band = plot.y == "time_ms_median" and not is_ratio and all(
                    r.get("time_ms_p20") is not None and r.get("time_ms_p80") is not None
                    for r in pts)
                if band:
                    ax.fill_between(xs, [r["time_ms_p20"] for r in pts],
                                    [r["time_ms_p80"] for r in pts], color=colour, alpha=0.15,
                                    linewidth=0)
            failed = [r for r in oom_facet if tuple(r.get(c) for c in key_cols) == key
                      and r.get(plot.x) is not None]
            if failed:
                _mark_oom(ax, failed, plot, pts, fit, colour, with_label=not pts, name=name,
                          max_x=max(r[plot.x] for r in in_facet + oom_facet))
        if gpu_mem:
            ax.axhline(gpu_mem, color="0.4", linestyle="--", linewidth=1,
                       label=f"GPU memory ({human_bytes(gpu_mem)})")
        if plot.identity:
            lo, hi = _limits([r[plot.x] for r in in_facet] + [r[plot.y] for r in in_facet])
            if lo is not None:
                ax.plot([lo, hi], [lo, hi], color="0.5", linestyle=":", linewidth=1,
                        label="y = x")
        _format_axis(ax, "x", plot.x, plot.logx, [r.get(plot.x) for r in in_facet + oom_facet])
        _format_axis(ax, "y", "ratio" if is_ratio else plot.y, plot.logy,
                     [r.get(plot.y) for r in in_facet])
        ax.set_xlabel(label(plot.x))
        ax.set_ylabel(ratio_label(plot) if is_ratio else label(plot.y))
        if plot.col:
            ax.set_title(_facet_text(plot.col, facet), fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        if is_ratio:
            ax.axhline(1.0, color="0.6", linewidth=0.8)
        missing = [r for r in undrawn if tuple(r.get(c) for c in plot.col) == facet]
        if missing:
            ax.text(0.99, 0.01, _undrawn_note(missing, plot), transform=ax.transAxes,
                    ha="right", va="bottom", fontsize=7, color="0.4")
        if not in_facet and not oom_facet:
            ax.text(0.5, 0.5, "no successful measurements", transform=ax.transAxes,
                    ha="center", va="center", color="0.5")
        elif ax.get_legend_handles_labels()[0]:
            many = len(ax.get_legend_handles_labels()[0]) > 8
            ax.legend(fontsize=7 if many else 8, ncol=2 if many else 1)
        if panel is not None:
            mine = [r for r in panel_rows if tuple(r.get(c) for c in plot.col) == facet]
            _ratio_panel(panel, ax, mine, plot, rplot, key_cols, series_cols, extra, order,
                         styles, color, cycle)
    for ax, panel in zip(axes[len(facets):], panels[len(facets):]):
        ax.set_visible(False)
        if panel is not None:
            panel.set_visible(False)
    _suptitle(fig, title_of(plot, rows))
    fig.savefig(path, dpi=110)
    return path


def _undrawn_note(rows: list[dict], plot: Plot) -> str:
    """'not drawn: 2 oom, 1 unavailable, 1 no error_rel': a scatter's rows without a point."""
    def why(r):
        if r.get("status") != "ok":
            return r.get("status") or "no status"
        return f"no {plot.y}" if r.get(plot.y) is None else f"no {plot.x}"

    counts: dict = {}
    for r in rows:
        counts[why(r)] = counts.get(why(r), 0) + 1
    return "not drawn: " + ", ".join(f"{n} {w}" for w, n in sorted(counts.items()))


def _ratio_panel(panel, ax, rows, plot: Plot, rplot: Plot, key_cols, series_cols, extra, order,
                 styles, color, cycle) -> None:
    """The ratio of each series to the baseline at each x, in the panel under ``ax`` (same
    colours and line styles as above), with lines at 1 and at the target."""
    keys = _sorted_unique((tuple(r.get(c) for c in key_cols) for r in rows), key_cols, order)
    for key in keys:
        kv = dict(zip(key_cols, key))
        pts = sorted((r for r in rows if tuple(r.get(c) for c in key_cols) == key),
                     key=lambda r: r[plot.x])
        sty = styles.index(kv.get(plot.style)) if plot.style else 0
        name = " ".join(series_text(c, kv[c]) for c in series_cols) or plot.y
        shown = [(c, kv[c]) for c in extra if kv[c] is not None]
        if shown:
            name += " (" + _facet_text(*zip(*shown)) + ")"
        panel.plot([r[plot.x] for r in pts], [r[plot.y] for r in pts],
                   color=color.get(kv.get(plot.hue) if plot.hue else None, cycle[0]),
                   linestyle=_LINESTYLES[sty % len(_LINESTYLES)],
                   marker=_MARKERS[sty % len(_MARKERS)], markersize=5, label=name)
        for r in pts:
            panel.annotate(f"{r[plot.y]:.2f}", (r[plot.x], r[plot.y]), xytext=(0, 5),
                           textcoords="offset points", ha="center", fontsize=7)
    panel.axhline(1.0, color="0.6", linewidth=0.8)
    if plot.panel_target is not None:
        panel.axhline(plot.panel_target, color="tab:red", linestyle="--", linewidth=1,
                      label=f"target {plot.panel_target:g}")
    base = plot.panel_numerator or plot.panel_denominator
    panel.set_ylabel(f"{base} / method" if plot.panel_numerator else f"method / {base}",
                     fontsize=9)
    panel.set_xlabel(label(plot.x))
    ax.set_xlabel("")
    ax.tick_params(labelbottom=False)
    panel.grid(True, which="major", alpha=0.3)
    if not rows:
        panel.text(0.5, 0.5, f"no ratio: no {base} row at the same point", ha="center",
                   va="center", transform=panel.transAxes, color="0.5", fontsize=8)
    if panel.get_legend_handles_labels()[0]:
        panel.legend(fontsize=7)


def _suptitle(fig, text: str) -> None:
    """The figure title, wrapped to the figure's width."""
    width = max(40, int(fig.get_figwidth() * 11))
    fig.suptitle("\n".join(textwrap.wrap(text, width)))


def _limits(values):
    vals = [v for v in values if v is not None and v > 0]
    return (min(vals), max(vals)) if vals else (None, None)


def _gpu_memory(env: dict | None, rows: list[dict]) -> int | None:
    """Total memory of the GPU the rows ran on (from env.json), for a reference line."""
    if not env or not any(r.get("device") == "gpu" for r in rows):
        return None
    mems = [e.get("gpu_mem_bytes") for e in env.get("runs", []) if e.get("gpu_mem_bytes")]
    return max(mems) if mems else None


def _mark_oom(ax, failed, plot: Plot, pts, fit, color, with_label: bool, name: str,
              max_x) -> None:
    """An × at the first size that ran out of memory, where the fitted line says it would be."""
    r = min(failed, key=lambda r: r[plot.x])
    x = r[plot.x]
    if fit is not None:
        y = math.exp(fit[1] + fit[0] * math.log(x))
    elif pts:
        y = pts[-1][plot.y]
    else:
        y = None
    if y is None:          # nothing ran: put the mark on the bottom edge
        ax.plot([x], [0.02], transform=ax.get_xaxis_transform(), marker="x", color=color,
                markersize=11, markeredgewidth=2.5, linestyle="none",
                label=f"{name}: out of memory" if with_label else None)
        ax.annotate(f"OOM at {plot.x}={short_int(x)}", (x, 0.02),
                    xycoords=("data", "axes fraction"), xytext=(6, 8),
                    textcoords="offset points", fontsize=8, color=color)
        return
    ax.plot([x], [y], marker="x", color=color, markersize=11, markeredgewidth=2.5,
            linestyle="none")
    if pts:
        ax.plot([pts[-1][plot.x], x], [pts[-1][plot.y], y], color=color, linestyle=":",
                linewidth=1)
    note = f"OOM at {plot.x}={short_int(x)}" + (
        f"\n(would need ~{human_bytes(y)})" if fit is not None and plot.y in BYTE_COLUMNS else "")
    # below and to the right of the ×, away from the line coming from the lower left; at the
    # right edge of the data, below and to the left
    right = any(r[plot.x] > x for r in pts) or x < max_x
    ax.annotate(note, (x, y), xytext=(8, -10) if right else (-10, -30),
                textcoords="offset points", fontsize=8, color=color,
                ha="left" if right else "right", va="top")


#: Settings a title names when every plotted row shares one value (and the plot does not vary
#: them): how to write each.
_SETTINGS = (("head_dim", "d={}"), ("heads", "heads={}"), ("batch", "batch={}"),
             ("dtype", "{}"), ("precision", "precision={}"), ("causal", "causal={}"),
             ("window", "window={}"),
             ("softcap", "softcap={}"), ("alibi", "ALiBi={}"), ("mask", "{}"),
             ("group", "G={}"), ("varlen", "varlen {}"),
             ("threads", "BLAS threads={}"), ("device_name", "{}"))
#: Values that mean "no variant" (a title does not name them): per column, besides None.
_PLAIN = {"alibi": ({False},), "group": ({1},)}


def fixed_settings(rows: list[dict], plot: Plot) -> str:
    """'d=64, heads=8, float16, NVIDIA H200': the settings shared by every row plotted that the
    plot does not put on an axis, a facet, a series or its filter."""
    varied = {plot.x, plot.y, plot.hue, plot.style, *plot.col, *(c for c, _ in plot.filter)}
    parts = []
    for col, form in _SETTINGS:
        values = {r.get(col) for r in rows}
        if col in VARIANT_COLUMNS or col in _PLAIN or col in ("varlen", "precision"):
            # named only when every row has it (None, no ALiBi, G = 1: no variant)
            if values == {None} or values in _PLAIN.get(col, ()):
                continue
        else:
            values -= {None}
        if col not in varied and len(values) == 1:
            parts.append(form.format(values.pop()))
    return ", ".join(parts)


def title_of(plot: Plot, rows: list[dict]) -> str:
    """The figure's title: the plot's own, or what is drawn against what with the fixed settings
    of the rows; log-log lines with slopes say that the legend's slopes are fitted."""
    if plot.title:
        text = plot.title
    else:
        text = f"{ratio_label(plot)} vs {label(plot.x)}" if plot.kind != "heatmap" else (
            f"{', '.join(label(v) for v in plot.value)} over {plot.x} × {plot.y}")
        if plot.filter:
            text += "  [" + ", ".join(f"{c}={'|'.join(map(str, v))}"
                                      for c, v in plot.filter) + "]"
        fixed = fixed_settings(select(rows, plot), plot)
        if fixed:
            text += f" ({fixed})"
    if plot.kind == "line" and plot.logx and plot.logy and plot.slope:
        text += "; legend: least-squares slope of log y on log x"
    return text


# -- heatmaps -------------------------------------------------------------------------------------

def draw_heatmap(rows: list[dict], plot: Plot, path: Path, env: dict | None = None) -> Path:
    rows = select(rows, plot)
    cell_rows = [r for r in rows if r.get(plot.x) is not None and r.get(plot.y) is not None]
    ok = [r for r in cell_rows if r.get("status") == "ok"]
    fixed = {plot.x, plot.y, *plot.col, *(c for c, _ in plot.filter)}
    extra = split_columns(ok, fixed, lambda r: (tuple(r.get(c) for c in plot.col),
                                                r.get(plot.x), r.get(plot.y)))
    facet_cols = list(plot.col) + extra
    facets = _sorted_unique((tuple(r.get(c) for c in facet_cols) for r in cell_rows),
                            facet_cols, _method_order(rows)) or [()]
    by_facet = {f: [r for r in cell_rows if tuple(r.get(c) for c in facet_cols) == f]
                for f in facets}
    # each panel shows only the x and y values its facet has (a grid need not be rectangular)
    axes_values = {f: (_sorted_unique(r[plot.x] for r in rs), _sorted_unique(r[plot.y] for r in rs))
                   for f, rs in by_facet.items()}
    nv = len(plot.value)
    w = max(3.2, 0.85 * max((len(x) for x, _ in axes_values.values()), default=1) + 2.4)
    h = max(2.6, 0.55 * max((len(y) for _, y in axes_values.values()), default=1) + 1.6)
    fig = Figure(figsize=(w * nv, h * len(facets) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(facets), nv, squeeze=False)
    for fi, facet in enumerate(facets):
        in_facet = by_facet[facet]
        xs, ys = axes_values[facet]
        for vi, value in enumerate(plot.value):
            ax = axes[fi][vi]
            grid = np.full((len(ys), len(xs)), np.nan)
            status = {}
            for r in in_facet:
                i, j = ys.index(r[plot.y]), xs.index(r[plot.x])
                if r.get("status") == "ok" and r.get(value) is not None:
                    grid[i, j] = r[value]
                else:
                    status[(i, j)] = r.get("status") or "?"
            _heat_panel(ax, grid, status, value, xs, ys)
            ax.set_xlabel(label(plot.x))
            ax.set_ylabel(label(plot.y))
            head = label(value)
            if facet_cols:
                head = f"{head}\n{_facet_text(facet_cols, facet)}"
            ax.set_title(head, fontsize=10)
    _suptitle(fig, title_of(plot, rows))
    fig.savefig(path, dpi=110)
    return path


def _heat_panel(ax, grid, status, value, xs, ys) -> None:
    finite = grid[np.isfinite(grid)]
    norm = None
    if finite.size and finite.min() > 0 and finite.max() / finite.min() > 10:
        norm = mcolors.LogNorm(finite.min(), finite.max())
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.92")
    im = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap=cmap,
                   norm=norm)
    cbar = ax.figure.colorbar(im, ax=ax, shrink=0.9)
    if value in BYTE_COLUMNS:
        cbar.ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: human_bytes(v)))
    ax.set_xticks(range(len(xs)), [short_int(x) for x in xs])
    ax.set_yticks(range(len(ys)), [short_int(y) for y in ys])
    for i in range(len(ys)):
        for j in range(len(xs)):
            v = grid[i, j]
            if np.isfinite(v):
                rgba = im.cmap(im.norm(v))
                lum = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2]
                ax.text(j, i, fmt_value(value, float(v)), ha="center", va="center", fontsize=8,
                        color="black" if lum > 0.5 else "white")
            elif (i, j) in status:
                ax.text(j, i, status[(i, j)], ha="center", va="center", fontsize=8, color="0.3")


# -- all plots ------------------------------------------------------------------------------------

def plot_path(out_dir: Path, plot: Plot, index: int) -> Path:
    """``<name>.png``, or ``<index>_<y or values>_vs_<x>[_ratio_<baseline>].png``."""
    if plot.name:
        return Path(out_dir) / f"{plot.name}.png"
    what = "_".join(plot.value) if plot.kind == "heatmap" else plot.y
    base = plot.ratio_numerator or plot.ratio_denominator
    if isinstance(base, tuple):
        base = re.sub(r"[^A-Za-z0-9_.-]+", "-", "_".join(f"{c}-{_none(v)}" for c, v in base))
    return Path(out_dir) / (f"{index:02d}_{what}_vs_{plot.x}" + (f"_ratio_{base}" if base else "")
                            + ".png")


def unfit(rows: list[dict], plot: Plot) -> str | None:
    """Why ``plot`` would draw nothing from ``rows`` (a CSV of another experiment, say): no row
    its filter keeps, or none of those with a value of a column it draws (x, y, a heatmap's
    values); None where it draws."""
    kept = select(rows, plot)
    if not kept:
        return "no row passes its filter" if plot.filter else "the results hold no row"
    empty = [c for c in dict.fromkeys((plot.x, plot.y, *plot.value))
             if all(r.get(c) is None for r in kept)]
    if empty:
        return f"no row has a value of {', '.join(map(repr, empty))}"
    return None


def draw_all(rows: list[dict], plots, out_dir, env: dict | None = None,
             where: str = "the results") -> tuple[list[Path], list[str]]:
    """Draw every plot of an experiment from its rows (files keep their plot's index):
    (the PNG paths, what was not drawn and why). A plot that would draw nothing (``unfit``) is
    not drawn, and one whose drawing fails does not stop the others; ``where`` names the rows'
    file in those lines."""
    paths, problems = [], []
    for i, plot in enumerate(plots):
        name = f"plot {plot.name or i} ({plot.y} vs {plot.x})"
        why = unfit(rows, plot)
        if why:   # an empty PNG would say nothing
            problems.append(f"{name} not drawn: {why} ({where})")
            continue
        draw = draw_heatmap if plot.kind == "heatmap" else draw_line   # line and scatter
        try:
            paths.append(draw(rows, plot, plot_path(out_dir, plot, i), env))
        except Exception as exc:   # the rows are safe in the CSV: say it, draw the others
            problems.append(f"{name} failed: {type(exc).__name__}: {exc}")
    return paths, problems


__all__ = ["draw_all", "unfit", "draw_line", "draw_heatmap", "select", "with_ratio", "label"]
