"""The results CSV: one row per measurement, appended and flushed as the run goes.

Column names carry their units (``time_ms_median``, ``peak_mem_bytes``, ``tflops`` = TFLOP/s,
``gbps`` = GB/s of predicted bytes). ``status`` is 'ok', 'oom', 'oom-skipped', 'unavailable' or
'error'; ``note`` says why. Reading converts the text back to numbers and booleans.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from .files import atomic_write_text
from .points import BASE_KEY_COLUMNS, KEY_COLUMNS, fmt, key_text
from .schema import (ALWAYS_COLUMNS, AXIS_COLUMNS, BOOL_COLUMNS, CACHE_COLUMNS, ERROR_COLUMNS,
                     FLOAT_COLUMNS, HBM_COLUMNS, HBM_TIME_COLUMNS, INT_COLUMNS, MEMORY_COLUMNS,
                     METHOD_COLUMNS, RING_COLUMNS, TIME_COLUMNS)

COLUMNS = tuple(dict.fromkeys(
    ("status",) + METHOD_COLUMNS[:2] + AXIS_COLUMNS + METHOD_COLUMNS[2:] + TIME_COLUMNS
    + MEMORY_COLUMNS + ERROR_COLUMNS + ("pred_bytes", "pred_bytes_read", "pred_bytes_written",
                                       "flops", "kv_bytes", "qkv_bytes")
    + CACHE_COLUMNS + RING_COLUMNS + HBM_COLUMNS + HBM_TIME_COLUMNS
    + ALWAYS_COLUMNS))

STATUSES = ("ok", "oom", "oom-skipped", "unavailable", "error")
#: Typed value of a column that is blank or missing (files from before the column existed).
_DEFAULTS = {"alibi": False}


#: Columns without which a file is not a results CSV of this package (the variant columns came
#: later: files without them are read with their defaults).
REQUIRED_COLUMNS = ("status",) + BASE_KEY_COLUMNS


def parse_value(column: str, text: str | None):
    """The typed value of one CSV cell (None for blank, or the column's default); ValueError for
    a number that is not."""
    if text is None or text == "":
        return _DEFAULTS.get(column)
    if column in BOOL_COLUMNS:
        return {"true": True, "false": False}.get(text.lower(), text)
    try:
        if column in INT_COLUMNS:
            try:
                return int(text)
            except ValueError:
                return float(text)
        if column in FLOAT_COLUMNS:
            return float(text)
    except ValueError:
        raise ValueError(f"{column}={text!r} is not a number") from None
    return text


def read_rows(path) -> list[dict]:
    """Complete rows of a results CSV as dicts of typed values (a torn last line is dropped).
    ValueError naming the row and column for a cell that should be a number and is not."""
    rows = []
    for i, row in enumerate(read_raw(path)[1], 2):
        try:
            typed = {c: parse_value(c, v) for c, v in row.items()}
            rows.append({**{c: v for c, v in _DEFAULTS.items() if c not in typed}, **typed})
        except ValueError as exc:
            raise ValueError(f"{path}: line {i}: {exc}") from None
    return rows


def read_raw(path, torn: list | None = None) -> tuple[list[str], list[dict]]:
    """(header, complete rows as text). Missing or empty file: ([], []). ValueError for a file
    that is not a results CSV (``check_header``) or not text. ``torn``: a list that receives
    the rows with too few or too many cells (a run killed mid-line, a hand edit), as text rows
    with their cells in order (``set_aside`` writes them)."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return [], []
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            check_header(header, path)
            rows = []
            for r in reader:
                if None not in r.values() and None not in r:
                    rows.append(r)
                elif torn is not None:
                    extra = r.pop(None, [])
                    torn.append({**{c: v for c, v in r.items() if v is not None},
                                 EXTRA_CELLS: ",".join(extra)})
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"{path} is not a results CSV: {exc}") from None
    return header, rows


#: The column of ``set_aside``'s file that says why a row was set aside, and the one that holds
#: a torn row's cells past the header's
SET_ASIDE_WHY, EXTRA_CELLS = "set_aside_why", "extra_cells"


def set_aside(path, header: list[str], rows: list[dict]) -> None:
    """Append ``rows`` (text rows of a results CSV with a ``SET_ASIDE_WHY`` cell) to the CSV
    ``path`` beside it, header first when new: rows a resume does not keep are never deleted."""
    path = Path(path)
    cols = list(header) + [c for c in (EXTRA_CELLS, SET_ASIDE_WHY) if c not in header]
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in cols})


def check_header(header: list[str], path) -> None:
    """ValueError unless ``header`` has every column of ``REQUIRED_COLUMNS``."""
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ValueError(f"{path} is not a cuflash results CSV: it has no column "
                         f"{', '.join(missing)} (its first line: {','.join(header)[:80]!r})")


def read_for_plot(path) -> list[dict]:
    """Typed rows of a results CSV that has some; ValueError saying what is wrong otherwise
    (empty file, header only, not a results CSV)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no results file {path}")
    if path.stat().st_size == 0:
        raise ValueError(f"{path} is empty: nothing to plot")
    rows = read_rows(path)
    if not rows:
        raise ValueError(f"{path} has a header and no complete rows: nothing to plot")
    return rows


def row_key(row: dict) -> tuple[str, ...]:
    """The identifying columns of a text row, comparable with ``Point.key()`` (a column the file
    lacks: its default, ``points.KEY_DEFAULTS``)."""
    return tuple(key_text(row, c) for c in KEY_COLUMNS)


class Writer:
    """Appends rows to the CSV, flushing each, so an interrupted run keeps what it measured."""

    def __init__(self, path, keep_rows: list[dict] | None = None, rewrite: bool = False):
        """Open ``path`` for appending. ``rewrite``: first replace its contents with ``keep_rows``
        (used when resuming drops error rows or torn lines, or the columns changed)."""
        self.path = Path(path)
        exists = self.path.exists() and self.path.stat().st_size > 0
        if rewrite or not exists:
            text = io.StringIO()
            w = csv.DictWriter(text, fieldnames=COLUMNS, extrasaction="ignore")
            w.writeheader()
            for r in keep_rows or []:
                w.writerow({c: r.get(c, "") for c in COLUMNS})
            atomic_write_text(self.path, text.getvalue())
        self._file = self.path.open("a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS, extrasaction="ignore")

    def write(self, row: dict) -> None:
        self._writer.writerow({c: cell_text(row.get(c)) for c in COLUMNS})
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def cell_text(value) -> str:
    """How one value is written in the CSV (floats to 6 significant digits, NaN blank)."""
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


class Cells(dict):
    """A report table's cells, ``cells[key][role] = row`` (text rows or typed ones), that notice
    a row falling on a cell already taken by a row of other identifying columns
    (``points.KEY_COLUMNS``): an axis the table does not key on (causal in a varlen table, heads
    in a GQA one) varied in the run, and the table shows one of those rows (the first, or with
    first=False the last). ``note()`` says which columns varied, under the table."""

    def __init__(self):
        super().__init__()
        self.varied: dict[str, set] = {}

    def put(self, key, role, row, first: bool = True) -> None:
        cell = self.setdefault(key, {})
        old = cell.get(role)
        if old is not None:
            for c in KEY_COLUMNS:
                if c == "sweep":   # one problem in two sweeps: the same measurement twice
                    continue
                a, b = cell_text(old.get(c)), cell_text(row.get(c))
                if a != b:
                    self.varied.setdefault(c, set()).update({a or "–", b or "–"})
            if first:
                return
        cell[role] = row

    def note(self) -> str:
        if not self.varied:
            return ""
        cols = "; ".join(f"{c} ({', '.join(sorted(v))})" for c, v in sorted(self.varied.items()))
        return (f"\n\nNote: rows that share a line of this table differ in {cols}, which it does "
                f"not key on: one of them is shown. Split the sweep (or filter the CSV) to see "
                f"the others.")

