"""The results CSV: one row per measurement, appended and flushed as the run goes.

Column names carry their units (``time_ms_median``, ``peak_mem_bytes``, ``tflops`` = TFLOP/s,
``gbps`` = GB/s of predicted bytes). ``status`` is 'ok', 'oom', 'oom-skipped', 'unavailable' or
'error'; ``note`` says why. Reading converts the text back to numbers and booleans.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from .points import KEY_COLUMNS, fmt
from .schema import (ALWAYS_COLUMNS, AXIS_COLUMNS, ERROR_COLUMNS, HBM_COLUMNS, HBM_TIME_COLUMNS,
                     MEMORY_COLUMNS, METHOD_COLUMNS, TIME_COLUMNS)

COLUMNS = tuple(dict.fromkeys(
    ("status",) + METHOD_COLUMNS[:2] + AXIS_COLUMNS + METHOD_COLUMNS[2:] + TIME_COLUMNS
    + MEMORY_COLUMNS + ERROR_COLUMNS + ("pred_bytes", "pred_bytes_read", "pred_bytes_written",
                                       "flops") + HBM_COLUMNS + HBM_TIME_COLUMNS
    + ALWAYS_COLUMNS))

STATUSES = ("ok", "oom", "oom-skipped", "unavailable", "error")
_INT = {"seq_len", "kv_len", "head_dim", "batch", "heads", "block_m", "block_n", "num_warps",
        "num_stages", "run", "repeats", "peak_mem_bytes", "pred_bytes", "pred_bytes_read",
        "pred_bytes_written", "flops", "hbm_bytes", "hbm_bytes_read", "hbm_bytes_written",
        "hbm_kernels"}
_FLOAT = {"time_ms_median", "time_ms_p20", "time_ms_p80", "tflops", "gbps", "error_rel",
          "hbm_gbps", "hbm_pred_ratio"}
_BOOL = {"causal", "deterministic"}


def parse_value(column: str, text: str | None):
    """The typed value of one CSV cell (None for blank)."""
    if text is None or text == "":
        return None
    if column in _BOOL:
        return {"true": True, "false": False}.get(text.lower(), text)
    if column in _INT:
        try:
            return int(text)
        except ValueError:
            return float(text)
    if column in _FLOAT:
        return float(text)
    return text


def read_rows(path) -> list[dict]:
    """Complete rows of a results CSV as dicts of typed values (a torn last line is dropped)."""
    return [{c: parse_value(c, v) for c, v in row.items()} for row in read_raw(path)[1]]


def read_raw(path) -> tuple[list[str], list[dict]]:
    """(header, complete rows as text). Missing file: ([], [])."""
    path = Path(path)
    if not path.exists():
        return [], []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        rows = [r for r in reader if None not in r.values() and None not in r]
    return header, rows


def row_key(row: dict) -> tuple[str, ...]:
    """The identifying columns of a text row, comparable with ``Point.key()``."""
    return tuple(row.get(c) or "" for c in KEY_COLUMNS)


class Writer:
    """Appends rows to the CSV, flushing each, so an interrupted run keeps what it measured."""

    def __init__(self, path, keep_rows: list[dict] | None = None, rewrite: bool = False):
        """Open ``path`` for appending. ``rewrite``: first replace its contents with ``keep_rows``
        (used when resuming drops error rows or torn lines, or the columns changed)."""
        self.path = Path(path)
        exists = self.path.exists() and self.path.stat().st_size > 0
        if rewrite or not exists:
            tmp = self.path.with_suffix(".csv.tmp")
            with tmp.open("w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
                w.writeheader()
                for r in keep_rows or []:
                    w.writerow({c: r.get(c, "") for c in COLUMNS})
            tmp.replace(self.path)
        self._file = self.path.open("a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS, extrasaction="ignore")

    def write(self, row: dict) -> None:
        self._writer.writerow({c: _cell(row.get(c)) for c in COLUMNS})
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _cell(value) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.6g}" if abs(value) < 1e15 else repr(value)
    return fmt(value)


def human_bytes(n) -> str:
    """'1.5 GB' style (powers of 1000, as GPU memory is quoted)."""
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    raise AssertionError("unreachable")
