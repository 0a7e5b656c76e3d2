"""What ``cuflash demo`` prints after its run: naive against the tiled method, from the rows.

A table of peak memory and median time per pass and T, then what the numbers show, in sentences
built from them: the fitted log-log slopes of peak memory (and between the two largest T), and
whether the tiled method was faster or slower than naive, at which T. Nothing here is asserted
in advance: on the CPU, the single-threaded twin (a loop of small NumPy products) is usually
slower than naive (a few large BLAS products), and the summary then says so.
"""
from __future__ import annotations

import numpy as np

from .results import human_bytes


def pair(rows: list[dict]) -> tuple[str, dict] | None:
    """(label of the tiled method, {(pass, T, method): row}) for naive against the first other
    method of the rows, or None without such a pair."""
    labels = list(dict.fromkeys(r["method"] for r in rows))
    if "naive" not in labels or len(labels) < 2:
        return None
    other = next(lab for lab in labels if lab != "naive")
    cell = {}
    for r in rows:
        if r["method"] in ("naive", other):
            cell.setdefault((r["pass"], r["seq_len"], r["method"]), r)
    return other, cell


def _ok(r, col) -> bool:
    return r is not None and r["status"] == "ok" and r.get(col) is not None


def _passes(cell) -> list[str]:
    return sorted({k[0] for k in cell}, key=lambda p: (p != "forward", p))


def table(rows: list[dict]) -> str:
    """Peak memory and median time of naive and the tiled method, per pass and T."""
    found = pair(rows)
    if found is None:
        return "(no naive-vs-tiled pair in these results)"
    other, cell = found

    def mem(r):
        if r is None:
            return "-"
        return human_bytes(r["peak_mem_bytes"]) if _ok(r, "peak_mem_bytes") else (
            "-" if r["status"] == "ok" else r["status"])

    def ms(r):
        if r is None:
            return "-"
        return f"{r['time_ms_median']:.3g}" if _ok(r, "time_ms_median") else (
            "-" if r["status"] == "ok" else r["status"])

    def ratio(a, b, col):
        if not (_ok(a, col) and _ok(b, col)) or not b[col]:
            return "-"
        x = a[col] / b[col]
        return f"{x:,.0f}x" if x >= 100 else f"{x:.3g}x"

    head = (f"{'pass':<9}{'T':>7}  {'naive peak':>11} {other + ' peak':>12} "
            f"{'naive/' + other:>12}  {'naive ms':>9} {other + ' ms':>10} {other + '/naive':>12}")
    lines = [f"peak memory above the inputs (naive/{other}: how many times more naive needs) "
             f"and median time ({other}/naive: how many times longer {other} takes):",
             head, "-" * len(head)]
    for pass_ in _passes(cell):
        for T in sorted({k[1] for k in cell if k[0] == pass_}):
            a, b = cell.get((pass_, T, "naive")), cell.get((pass_, T, other))
            lines.append(f"{pass_:<9}{T:>7}  {mem(a):>11} {mem(b):>12} "
                         f"{ratio(a, b, 'peak_mem_bytes'):>12}  {ms(a):>9} {ms(b):>10} "
                         f"{ratio(b, a, 'time_ms_median'):>12}")
    return "\n".join(lines)


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log y against log x (None with fewer than two distinct x)."""
    pts = [(x, y) for x, y in points if x > 0 and y > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    return float(np.polyfit(np.log([x for x, _ in pts]), np.log([y for _, y in pts]), 1)[0])


def _series(cell, pass_, method, col):
    return sorted((T, r[col]) for (p, T, m), r in cell.items()
                  if p == pass_ and m == method and _ok(r, col))


def findings(rows: list[dict]) -> list[str]:
    """Sentences saying what the rows show about memory and time, naive against the tiled
    method; each number in them is computed here from the rows."""
    found = pair(rows)
    if found is None:
        return []
    other, cell = found
    out = []
    mem_parts = []
    for pass_ in _passes(cell):
        parts = []
        for m in ("naive", other):
            pts = _series(cell, pass_, m, "peak_mem_bytes")
            s_all, s_top = slope(pts), slope(pts[-2:])
            if s_all is not None:
                parts.append(f"{m} {s_all:.2f} (last two T: {s_top:.2f})")
        if parts:
            ts = [T for T, _ in _series(cell, pass_, "naive", "peak_mem_bytes")]
            mem_parts.append(f"{pass_} over T={min(ts)}..{max(ts)}: " + ", ".join(parts))
    if mem_parts:
        out.append("peak memory, fitted log-log slope (2 = grows as T², 1 = as T): "
                   + "; ".join(mem_parts) + ".")
    faster, slower = [], []
    for (pass_, T, m), b in cell.items():
        a = cell.get((pass_, T, "naive"))
        if m == other and _ok(a, "time_ms_median") and _ok(b, "time_ms_median"):
            ratio = b["time_ms_median"] / a["time_ms_median"]
            (faster if ratio < 1 else slower).append((pass_, T, ratio))
    if faster or slower:
        threads = sorted({r.get("threads") for r in rows if r.get("threads")})
        where = (f" (CPU, BLAS pinned to {', '.join(map(str, threads))} thread"
                 f"{'s' * (threads != [1])})" if threads else "")
        if not faster:
            lo, hi = min(r for *_, r in slower), max(r for *_, r in slower)
            out.append(f"time{where}: {other} was slower than naive at every pass and T measured, "
                       f"taking {lo:.2g}-{hi:.2g}x naive's time.")
        elif not slower:
            lo, hi = min(1 / r for *_, r in faster), max(1 / r for *_, r in faster)
            out.append(f"time{where}: {other} was faster than naive at every pass and T "
                       f"measured, {lo:.2g}-{hi:.2g}x.")
        else:
            f_txt = ", ".join(f"{p} T={T}" for p, T, _ in sorted(faster))
            out.append(f"time{where}: {other} was faster than naive at {f_txt}, and slower at "
                       f"the other {len(slower)} pass/T pairs.")
        if threads and not faster:
            out.append(f"On the CPU the lesson is memory, not time: the {other} runs a Python "
                       f"loop of small NumPy products against naive's few large ones. The time "
                       f"advantage is a GPU measurement (README: Results on an NVIDIA H200).")
    spreads = [r["time_rounds_spread"] for r in rows if r.get("time_rounds_spread") is not None]
    if spreads:
        n = max(r.get("time_rounds") or 0 for r in rows)
        out.append(f"Each time is the lowest median of {n} timing rounds spread over the run; "
                   f"the rounds of one point differed by up to {max(spreads):.0%} (median "
                   f"{float(np.median(spreads)):.0%}): that is how much this machine's load "
                   f"moved CPU timings while the demo ran.")
    unstable = [r for r in rows if r.get("time_spread") is not None and r.get("note")
                and "not stable" in r["note"]]
    if unstable:
        out.append(f"{len(unstable)} timing{'s' * (len(unstable) != 1)} did not settle within "
                   f"max_seconds (see the note column): treat them as rough.")
    return out


def report(rows: list[dict]) -> str:
    """The table and the findings, as printed by ``cuflash demo``."""
    lines = [table(rows)]
    lines += [""] + findings(rows) if findings(rows) else []
    return "\n".join(lines)


__all__ = ["table", "findings", "report", "slope"]
