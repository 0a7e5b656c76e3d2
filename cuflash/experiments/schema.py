"""Experiment files: YAML in, validated frozen dataclasses out.

An experiment file declares what to sweep (``axes``), what to run at each point (``methods``), what
to record (``measure``) and what to draw (``plots``). Every key has a default; a file holds only
what differs. Anything unknown, mistyped or impossible is a :class:`SchemaError` naming the file,
the key path (``methods[1].grid.block_m``) and the valid choices, raised before anything runs::

    name: tile_ablation            # default: the file's stem; results go to results/<name>/
    device: auto                   # auto | gpu | cpu
    axes:                          # one sweep (a mapping), or a list of named sweeps
      seq_len: [1024, 2048]        # an int or a list of ints
      kv_len: seq_len              # 'seq_len' (default) or ints
      head_dim: [64, 128]
      batch: 1                     # ints, or {tokens: 16384} for batch = tokens // seq_len
      heads: 8                     # ints, or {model_dim: 2048} for heads = model_dim // head_dim
      dtype: float16               # float16 | bfloat16 | float32 | float64
      precision: [ieee, tf32, highest]   # float32's products (null: the dtype's default)
      causal: false
      pass: [forward, backward]    # forward | backward | both
      window: [null, [255, 0]]     # sliding windows [left, right] (-1 or null: unbounded)
      softcap: [null, 30.0]        # scores c·tanh(s/c)
      alibi: [false, true]         # ALiBi, slopes 2^(-8k/H) per head (variants.alibi_slopes)
      mask: [null, {kind: documents, lengths: [512, 2048]}]   # a named custom mask
      group: [1, 4, heads]         # GQA: kv heads = heads / group ('heads': MQA)
      varlen: [null, {lengths: [512, 2048, 256x4]}]   # packed batches of mixed lengths
      cache: [contiguous, paged]   # a KV-cache sweep: decode steps (seq_len = Tq, kv_len = S)
      page_size: [16, 256]         # tokens per page of the paged cache
      cache_lengths: [null, {fractions: [1, 0.5, 0.01x4]}]   # each sequence ceil(f·S) tokens
    methods:
      - naive
      - name: flash
        grid: {block_m: [64, 128], num_warps: 4}   # or a list of such grids (their union)
        deterministic: false
      - {name: torch_sdpa, backends: [flash, cudnn]}
      - {name: flash, label: flash_padded, layout: padded}   # documents as a padded batch
      - {name: flash, label: flash_mat, layout: materialized}   # K/V repeated per query head
      - read_ceiling               # KV-cache sweeps: a read-only pass over the step's K+V bytes
      - {name: ring, world_size: 2, slicing: zigzag, launch: processes}   # context parallel
    measure: {repeats: 10, warmup: 3, error_heads: 1}   # error_heads: the oracle on 1 head
    plots:
      - {x: seq_len, y: peak_mem_bytes, logx: true, logy: true, col: pass}
      - {x: seq_len, y: tflops_per_gpu, ratio_panel: {denominator: flash, target: 0.9}}
      - {kind: scatter, x: tflops, y: error_rel, hue: precision, style: method, logy: true}

A plot's ``kind``: ``line`` (default), ``scatter`` (one marker per row, no lines; no ratio,
ratio_panel, slope, identity or value) or ``heatmap`` (``value`` in cells over x × y).

``axes`` as a list: each entry is one sweep, named by its key ``sweep`` (a column of the
results), with its own shapes and variants; the experiment's points are the union of the
sweeps' points. A point two sweeps share is measured in each (its rows differ in ``sweep``).
``precision`` is the ``precision=`` of ``cuflash.precision`` (how float32's two products are
computed; the kernel family of the default forward tile follows it): only float32 has a choice,
so a sweep with a precision other than null has dtype float32 alone (put the other dtypes in a
sweep of their own, with precision null). naive, flash and twin take it (a backward point: the
forward that makes its residuals; the backward has none); torch_sdpa, ring and read_ceiling
have no such argument, so their points have none (one row, not one per precision), and
KV-cache sweeps take none (attention_with_kvcache runs float32 on the CUDA cores).
The variant axes and the padded layout are defined in ``cuflash.experiments.variants``; GQA's
group, varlen batches and the materialized layout in ``cuflash.experiments.layouts``; KV-cache
sweeps (``cache``, ``page_size``, ``cache_lengths``, the method ``read_ceiling``) in
``cuflash.experiments.decode``; the method ``ring`` (ring attention over ``world_size`` worker
processes, or simulated ranks) and its options in ``cuflash.experiments.ring``.
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import re
from pathlib import Path
from typing import Any

import yaml

from .. import device
from .. import kvcache as kvcache_mod
from .._xp import BFLOAT16_HINT, DTYPE_NAMES, DTYPES
from ..checks import KERNEL_HEAD_DIMS
from ..precision import PRECISIONS, of_family
from ..tile import KERNELS, NUM_STAGES, NUM_WARPS, TileConfig, default_tile
from . import decode as decode_mod
from . import layouts as layouts_mod
from . import ring as ring_mod
from . import variants as variants_mod

DEVICES = ("auto", "gpu", "cpu")
METHODS = ("naive", "flash", "twin", "torch_sdpa", decode_mod.CEILING, ring_mod.METHOD)
PASSES = ("forward", "backward", "both")
TORCH_BACKENDS = ("flash", "cudnn", "efficient", "math")
TILE_FIELDS = ("block_m", "block_n", "num_warps", "num_stages", "kernel")
TILE_CHOICES = {"block_m": (16, 32, 64, 128, 256), "block_n": (16, 32, 64, 128, 256),
                "num_warps": NUM_WARPS, "num_stages": NUM_STAGES, "kernel": KERNELS}
PLOT_KINDS = ("line", "heatmap", "scatter")
#: Opt-in shared memory per block and architecture assumed when no GPU is visible (device.py).
DEFAULT_SMEM_LIMIT = device.assumed().smem_per_block
DEFAULT_ARCH = device.DEFAULT_ARCH

# -- CSV columns, by what produces them (``results.COLUMNS`` orders them) -------------------------
VARIANT_COLUMNS = variants_mod.VARIANT_COLUMNS
LAYOUT_COLUMNS = layouts_mod.LAYOUT_COLUMNS
CACHE_AXIS_COLUMNS = decode_mod.AXIS_COLUMNS
AXIS_COLUMNS = (("seq_len", "kv_len", "head_dim", "batch", "heads", "dtype", "precision",
                 "causal", "pass")
                + VARIANT_COLUMNS + LAYOUT_COLUMNS + CACHE_AXIS_COLUMNS + ("sweep",))
METHOD_COLUMNS = ("method", "method_name", "backend", "tile", "kernel", "block_m", "block_n",
                  "num_warps", "num_stages", "deterministic", "layout") + ring_mod.KEY_COLUMNS
ALWAYS_COLUMNS = (("status", "note", "device", "device_name", "run", "timestamp",
                   "pred_bytes_read", "pred_bytes_written", "pred_bytes", "flops")
                  + layouts_mod.HELD_COLUMNS)
#: tflops_per_gpu: tflops / world_size (ring rows), tflops (the rest: one device).
TIME_COLUMNS = ("repeats", "time_ms_median", "time_ms_min", "time_ms_p20", "time_ms_p80",
                "time_spread", "time_rounds", "time_rounds_spread", "threads", "tflops", "gbps",
                "tflops_per_gpu")
#: peak_total_bytes: the peak in use, inputs included (peak_mem_bytes + the inputs' bytes; a
#: ring row: the largest rank's).
MEMORY_COLUMNS = ("peak_mem_bytes", "peak_total_bytes")
ERROR_COLUMNS = ("error_rel",)
HBM_COLUMNS = ("hbm_bytes_read", "hbm_bytes_written", "hbm_bytes", "hbm_pred_ratio",
               "hbm_kernels")
HBM_TIME_COLUMNS = ("hbm_gbps",)
#: KV-cache points only: measured from the arrays allocated, and counted (``decode``).
CACHE_COLUMNS = decode_mod.MEASURED_COLUMNS + decode_mod.PREDICTED_COLUMNS
#: Ring points only: compute-only, comm-only, serial times and what they say (``ring``).
RING_COLUMNS = ring_mod.MEASURED_COLUMNS
#: The columns whose cells are numbers (results.parse_value types them; a line or scatter plot's
#: y must be one of them) and booleans.
INT_COLUMNS = frozenset({
    "seq_len", "kv_len", "head_dim", "batch", "heads", "block_m", "block_n", "num_warps",
    "num_stages", "run", "repeats", "threads", "time_rounds", "peak_mem_bytes", "pred_bytes",
    "pred_bytes_read", "pred_bytes_written", "flops", "hbm_bytes", "hbm_bytes_read",
    "hbm_bytes_written", "hbm_kernels", "group", "kv_heads", "kv_bytes", "qkv_bytes",
    "page_size", "cache_bytes", "cache_tokens", "cache_slots", "cache_pages",
    "pred_cache_bytes", "world_size", "peak_total_bytes"})
FLOAT_COLUMNS = frozenset({
    "time_ms_median", "time_ms_min", "time_ms_p20", "time_ms_p80", "time_spread",
    "time_rounds_spread", "tflops", "gbps", "error_rel", "hbm_gbps", "hbm_pred_ratio",
    "softcap", "cache_waste", "pred_cache_waste", "tflops_per_gpu", "ring_compute_ms",
    "ring_comm_ms", "ring_serial_ms", "comm_exposed_ms", "comm_hidden", "rank_spread"})
BOOL_COLUMNS = frozenset({"causal", "deterministic", "alibi"})


class SchemaError(ValueError):
    """A bad experiment file: the message names the file, the key path and what would be valid."""

    def __init__(self, source: str, path: str, message: str):
        self.source, self.path = source, path
        super().__init__(f"{source}: {path or '<top level>'}: {message}")


def library_tile(head_dim: int, dtype: str, backward: bool, smem_limit: int | None,
                 causal: bool = False, deterministic: bool = True,
                 precision: str | None = None, staged: bool = False,
                 **fields) -> TileConfig:
    """The library's default tile for (head_dim, dtype, pass, causal, dQ mode) on a device with
    ``smem_limit`` bytes of shared memory per block (None: no device), with ``fields`` replaced.
    ``precision``: float32's precision (``cuflash.precision``; None: the default), whose kernel
    family the tile is of, forward or backward. ``staged``: as ``default_tile``'s (a dense batch
    where the TF32 wgmma forward pays)."""
    tile = default_tile(head_dim, dtype, backward=backward, causal=causal,
                        deterministic=deterministic, smem_limit=smem_limit,
                        arch=None if smem_limit is None else device_arch(), precision=precision,
                        staged=staged)
    return tile.replace(**fields) if fields else tile


# -- the dataclasses ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Axes:
    """What is swept. Every combination is one point (per method variant)."""

    seq_len: tuple[int, ...] = (1024,)
    kv_len: tuple[int | str, ...] = ("seq_len",)
    """Key lengths: ints, or 'seq_len' for S = T."""
    head_dim: tuple[int, ...] = (64,)
    batch: tuple[int, ...] = (1,)
    batch_tokens: int | None = None
    """When set, batch = batch_tokens // seq_len (``batch: {tokens: N}``) and ``batch`` is unused."""
    heads: tuple[int, ...] = (8,)
    heads_model_dim: int | None = None
    """When set, heads = heads_model_dim // head_dim (``heads: {model_dim: N}``)."""
    dtype: tuple[str, ...] = ("float16",)
    precision: tuple[str | None, ...] = (None,)
    """float32's precisions ('ieee', 'tf32', 'highest': ``cuflash.precision``); None: the
    dtype's default (the only value of a sweep with a dtype other than float32)."""
    causal: tuple[bool, ...] = (False,)
    passes: tuple[str, ...] = ("forward",)
    window: tuple[tuple | None, ...] = (None,)
    """Sliding windows (left, right), None for an unbounded side; None: no window."""
    softcap: tuple[float | None, ...] = (None,)
    alibi: tuple[bool, ...] = (False,)
    mask: tuple[str | None, ...] = (None,)
    """Named custom masks by their text (``variants.Documents.text``); None: no mask_mod."""
    group: tuple[int | str, ...] = (1,)
    """GQA group sizes G (kv heads = heads / G): ints, or 'heads' for MQA (``layouts``)."""
    varlen: tuple[str | None, ...] = (None,)
    """Varlen mixes by their text (``layouts.varlen_text``); None: a dense batch."""
    cache: tuple[str, ...] = ()
    """KV-cache layouts ('contiguous', 'paged'; ``decode``); empty: not a KV-cache sweep."""
    page_size: tuple[int, ...] = (decode_mod.DEFAULT_PAGE_SIZE,)
    """Tokens per page of the paged cache (powers of two >= 16)."""
    cache_lengths: tuple[str | None, ...] = (None,)
    """Mixes of sequence lengths by their text (``decode.mix_text``: fractions of kv_len);
    None: every sequence holds kv_len tokens."""
    name: str | None = None
    """The sweep's name (``sweep`` in a list of sweeps; the ``sweep`` column)."""

    def documents(self) -> bool:
        """Whether some point of this sweep has a documents mask."""
        return any(m is not None for m in self.mask)

    def batches(self, seq_len: int) -> tuple[int, ...]:
        return (self.batch_tokens // seq_len,) if self.batch_tokens else self.batch

    def heads_for(self, head_dim: int) -> tuple[int, ...]:
        return (self.heads_model_dim // head_dim,) if self.heads_model_dim else self.heads

    def groups(self, heads: int) -> tuple[int, ...]:
        """Group sizes at ``heads`` query heads ('heads' resolved)."""
        return layouts_mod.groups(self.group, heads)

    def kv_lens(self, seq_len: int) -> tuple[int, ...]:
        return tuple(dict.fromkeys(seq_len if s == "seq_len" else s for s in self.kv_len))

    def caches(self) -> tuple[tuple[str | None, int | None], ...]:
        """(cache, page_size) of every cache layout of the sweep: one per page size paged,
        (None, None) for a sweep that is not a KV-cache sweep."""
        if not self.cache:
            return ((None, None),)
        return tuple((c, p) for c in self.cache
                     for p in (self.page_size if c == "paged" else (None,)))


@dataclasses.dataclass(frozen=True)
class Method:
    """One entry of ``methods``: what runs, and the variants it expands into."""

    name: str
    """'naive', 'flash', 'twin', 'torch_sdpa' or 'read_ceiling' (KV-cache sweeps only)."""
    label: str
    """Name in results and legends (default: the method's name; torch_sdpa: 'torch_<backend>')."""
    tiles: tuple[tuple[tuple[str, Any], ...] | None, ...] = (None,)
    """Partial TileConfigs (field, value) pairs, filled from ``default_tile``; None = the default."""
    deterministic: tuple[bool, ...] = (True,)
    """dQ modes of the backward (the library's default: True)."""
    backends: tuple[str, ...] = ()
    passes: tuple[str, ...] | None = None
    """Restrict this method to some of the swept passes (None: all of them)."""
    layout: str = "packed"
    """'padded': run each documents mask's documents, or each varlen mix's sequences, as a
    padded causal batch instead (``variants``, ``layouts``); such a method has points only where
    the mask is documents or varlen is set, and causal is true. 'materialized': K/V repeated
    per query head (``layouts``); points only where group > 1."""
    ring: Any = None
    """``ring_mod.Options`` of a ring entry (world_size, slicing, launch, ...); None otherwise."""

    def labels(self) -> tuple[str, ...]:
        """Row labels this entry produces (one per torch backend, else one)."""
        if self.name == "torch_sdpa":
            return tuple(f"{self.label}_{b}" for b in self.backends)
        return (self.label,)


@dataclasses.dataclass(frozen=True)
class Measure:
    """What is recorded at each point and how."""

    repeats: int = 10
    """Timed calls (median, p20 and p80 are reported)."""
    warmup: int = 3
    """Untimed calls before timing (compilation, caches, allocator)."""
    max_seconds: float = 10.0
    """Stop timing a point after this many seconds (at least one timed call)."""
    threads: int = 1
    """CPU points: BLAS threads NumPy may use (pinned with threadpoolctl; recorded per row)."""
    stable_spread: float = 0.05
    """CPU points: time in batches of at least ``repeats`` calls until the medians of the last
    three batches are within this relative spread ((max - min) / median), or ``max_seconds``."""
    rounds: int = 1
    """CPU points: after the sweep, time each point again, round-robin, until it has this many
    timings spread over the run; its row keeps the one with the lowest median (on a shared
    machine, the least disturbed moment) and ``time_rounds_spread``, how much they differed."""
    time: bool = True
    memory: bool = True
    error: bool = True
    error_limit: int = 2 ** 24
    """Largest batch·heads·T·S for which the float64 oracle is run; above it error_rel is blank
    (with ``error_heads``: the sample's heads·T·S)."""
    error_heads: int = 0
    """> 0: the float64 oracle (on the host) checks only the first error_heads query heads
    (whole GQA groups) of the first batch entry, so that error_rel is measured at batch·heads
    too large for its T x S matrices; 0: the whole problem. Packed varlen batches, KV-cache
    steps and ring points are checked whole (``measure.error_sample``)."""
    hbm_bytes: bool = False
    """Measure DRAM bytes with Nsight Compute (one ncu process per batch of up to 20 points; GPU
    only; rows without ncu say so in their note)."""
    ncu_timeout_s: float = 600.0
    seed: int = 0
    oom_skip: bool = True
    """After a method runs out of memory, record larger sizes of it as 'oom-skipped' untried."""

    def columns(self) -> tuple[str, ...]:
        """Measurement columns this configuration fills."""
        cols = ALWAYS_COLUMNS
        if self.time:
            cols += TIME_COLUMNS
        if self.memory:
            cols += MEMORY_COLUMNS
        if self.error:
            cols += ERROR_COLUMNS
        if self.hbm_bytes:
            cols += HBM_COLUMNS + (HBM_TIME_COLUMNS if self.time else ())
        return cols


@dataclasses.dataclass(frozen=True)
class Plot:
    """One figure drawn from the results."""

    x: str
    y: str
    """Column on the vertical axis (a heatmap's rows)."""
    kind: str = "line"
    """line (series joined along x), scatter (one marker per row, hue and style as a line
    plot's, no lines) or heatmap (cells of ``value`` over x × y)."""
    hue: str | None = "method"
    style: str | None = None
    col: tuple[str, ...] = ()
    """Facets: one panel per combination of these columns' values."""
    value: tuple[str, ...] = ()
    """Heatmap only: the column(s) written in the cells, one panel each, side by side."""
    logx: bool = False
    logy: bool = False
    filter: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    """Keep rows whose column equals the value (or one of the values)."""
    title: str = ""
    name: str = ""
    """File name (without .png); default from the index, y and x."""
    ratio_numerator: str | tuple | None = None
    """Plot (the baseline's y) / (each row's y) (e.g. a speedup). The baseline: a method label,
    matched on the axis columns; or (column, value) pairs (``ratio: {numerator: {window:
    null}}``): the row with those values and every other key column the same (same method,
    tile, shapes and other variants), e.g. the same attention without a window."""
    ratio_denominator: str | tuple | None = None
    """Plot (each row's y) / (the baseline's y), the baseline as for ratio_numerator."""
    panel_numerator: str | None = None
    """``ratio_panel: {numerator: LABEL}``: under each panel of y, a second one with (the
    baseline method's y) / (each row's y), matched on the axis columns."""
    panel_denominator: str | None = None
    """``ratio_panel: {denominator: LABEL}``: the second panel shows (row's y) / (baseline's y)."""
    panel_target: float | None = None
    """``ratio_panel: {..., target: 0.9}``: a dashed line at that ratio in the second panel."""
    slope: bool = True
    """Annotate the least-squares slope of each line on log-log axes."""
    identity: bool = False
    """Draw y = x (e.g. measured against predicted bytes)."""


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A validated experiment file."""

    name: str
    source: str
    description: str = ""
    device: str = "auto"
    sweeps: tuple[Axes, ...] = (Axes(),)
    """What is swept: one Axes per sweep (``axes`` as a mapping: one)."""
    methods: tuple[Method, ...] = ()
    measure: Measure = Measure()
    plots: tuple[Plot, ...] = ()
    raw: Any = dataclasses.field(default=None, compare=False, repr=False)
    """The mapping it was read from, after ``--set`` overrides (stored beside the results)."""

    @property
    def axes(self) -> Axes:
        """The axes of an experiment with one sweep."""
        if len(self.sweeps) != 1:
            raise AttributeError(f"{self.source} has {len(self.sweeps)} sweeps; use .sweeps")
        return self.sweeps[0]

    def labels(self) -> tuple[str, ...]:
        return tuple(lab for m in self.methods for lab in m.labels())

    def kv_cache(self) -> bool:
        """Whether some sweep is a KV-cache sweep (``decode``)."""
        return any(ax.cache for ax in self.sweeps)

    def ring(self) -> bool:
        """Whether some method is ring attention (``ring``)."""
        return any(m.name == ring_mod.METHOD for m in self.methods)

    def columns(self) -> tuple[str, ...]:
        """Every column the results of this experiment can hold values in."""
        return (AXIS_COLUMNS + METHOD_COLUMNS + self.measure.columns()
                + (CACHE_COLUMNS if self.kv_cache() else ())
                + (RING_COLUMNS if self.ring() and self.measure.time else ()))


# -- reading one value ----------------------------------------------------------------------------

class _Reader:
    """Validation helpers that know the file name, so every error can name it and the key path."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, message: str):
        raise SchemaError(self.source, path, message)

    def mapping(self, value, path: str, keys) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping with keys from {sorted(keys)}, "
                            f"got {_show(value)}")
        for key in value:
            if key not in keys:
                where = f"{path}.{key}" if path else str(key)
                self.fail(where, f"unknown key {key!r}; valid keys: {sorted(keys)}")
        return value

    def as_list(self, value, path: str) -> list:
        if isinstance(value, (list, tuple)):
            if not value:
                self.fail(path, "the list is empty; give at least one value")
            return list(value)
        return [value]

    def ints(self, value, path: str, minimum: int = 1, choices=None) -> tuple[int, ...]:
        out = []
        for i, v in enumerate(self.as_list(value, path)):
            where = f"{path}[{i}]" if isinstance(value, (list, tuple)) else path
            if not _is_int(v):
                self.fail(where, f"expected an integer{_choices_text(choices)}, got {_show(v)}")
            if choices is not None and v not in choices:
                self.fail(where, f"{v} is not valid; valid: {list(choices)}")
            if v < minimum:
                self.fail(where, f"{v} must be >= {minimum}")
            out.append(int(v))
        return tuple(out)

    def int_(self, value, path: str, minimum: int = 0) -> int:
        if not _is_int(value):
            self.fail(path, f"expected an integer >= {minimum}, got {_show(value)}")
        if value < minimum:
            self.fail(path, f"{value} must be >= {minimum}")
        return int(value)

    def number(self, value, path: str, minimum: float = 0.0) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value):
            self.fail(path, f"expected a finite number > {minimum}, got {_show(value)}")
        if value <= minimum:
            self.fail(path, f"{value} must be > {minimum}")
        return float(value)

    def bool_(self, value, path: str) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {_show(value)}")
        return value

    def bools(self, value, path: str) -> tuple[bool, ...]:
        vals = self.as_list(value, path)
        for i, v in enumerate(vals):
            if not isinstance(v, bool):
                where = f"{path}[{i}]" if isinstance(value, (list, tuple)) else path
                self.fail(where, f"expected true or false, got {_show(v)}")
        return tuple(dict.fromkeys(vals))

    def choice(self, value, path: str, choices) -> str:
        if not isinstance(value, str) or value not in choices:
            self.fail(path, f"{_show(value)} is not valid; valid: {list(choices)}")
        return value

    def choices(self, value, path: str, choices) -> tuple[str, ...]:
        vals = self.as_list(value, path)
        for i, v in enumerate(vals):
            where = f"{path}[{i}]" if isinstance(value, (list, tuple)) else path
            self.choice(v, where, choices)
        return tuple(dict.fromkeys(vals))

    def string(self, value, path: str) -> str:
        if not isinstance(value, str):
            self.fail(path, f"expected a string, got {_show(value)}")
        return value

    def component(self, value, path: str, why: str) -> str:
        """A string that is one safe path component: letters, digits and _ . -, starting with a
        letter, digit or _ (so never '.', '..', a hidden file or an option)."""
        value = self.string(value, path)
        if not _COMPONENT.fullmatch(value):
            self.fail(path, f"{value!r} must be letters, digits and _ . - only, starting with a "
                            f"letter, digit or _ ({why})")
        return value


_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _show(v) -> str:
    text = repr(v)   # a whole file read as one string (`cuflash run /etc/passwd`) is cut short
    return f"{text if len(text) <= 80 else text[:76] + ' ...'} ({type(v).__name__})"


def _yaml_error(exc) -> str:
    """PyYAML's error in one line: where (line, column), what, and in what it was."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(exc).split())
    text = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    ctx, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if ctx:
        text += f" ({ctx}" + (f" from line {cmark.line + 1}, column {cmark.column + 1}"
                              if cmark is not None else "") + ")"
    return text


def _choices_text(choices) -> str:
    return f" from {list(choices)}" if choices is not None else ""


# -- sections -------------------------------------------------------------------------------------

_TOP_KEYS = ("name", "description", "device", "axes", "methods", "measure", "plots")
_AXES_KEYS = ("seq_len", "kv_len", "head_dim", "batch", "heads", "dtype", "precision", "causal",
              "pass", "window", "softcap", "alibi", "mask", "group", "varlen", "cache",
              "page_size", "cache_lengths", "sweep")
_METHOD_KEYS = {"naive": ("name", "label", "pass", "layout"),
                "flash": ("name", "label", "pass", "grid", "deterministic", "layout"),
                "twin": ("name", "label", "pass", "grid", "deterministic", "layout"),
                "torch_sdpa": ("name", "label", "pass", "backends", "layout"),
                decode_mod.CEILING: ("name", "label", "pass"),
                ring_mod.METHOD: ("name", "label", "pass", "world_size", "slicing", "launch",
                                  "split", "serial", "timeout_s")}
_MASK_KEYS = {"documents": ("kind", "lengths")}
_VARLEN_KEYS = ("lengths",)
_CACHE_LENGTHS_KEYS = ("fractions",)
_MEASURE_KEYS = tuple(f.name for f in dataclasses.fields(Measure))
#: Plot keys a scatter plot (unordered points, no lines) refuses, and why.
_SCATTER_NO = {
    "ratio": "a scatter plot has no ratio; it draws each row's y against its x "
             "(use kind: line for a ratio to a baseline)",
    "ratio_panel": "a scatter plot has no ratio panel (use kind: line)",
    "slope": "a scatter plot has no fitted slope: its points are not a line (use kind: line)",
    "identity": "a scatter plot has no y = x line (use kind: line)",
    "value": "'value' is for kind: heatmap; a scatter plot draws 'y'",
}
_PLOT_KEYS = ("x", "y", "kind", "hue", "style", "col", "value", "logx", "logy", "filter", "title",
              "name", "ratio", "ratio_panel", "slope", "identity")


def _sweeps(r: _Reader, raw) -> tuple[Axes, ...]:
    """``axes``: one mapping (one sweep) or a list of named sweeps."""
    if not isinstance(raw, list):
        return (_axes(r, raw, "axes"),)
    if not raw:
        r.fail("axes", "the list of sweeps is empty; give at least one mapping of axes")
    sweeps, seen = [], {}
    for i, entry in enumerate(raw):
        path = f"axes[{i}]"
        if not isinstance(entry, dict):
            r.fail(path, f"expected a mapping of axes (a sweep), got {_show(entry)}")
        if len(raw) > 1 and "sweep" not in entry:
            r.fail(path, "a list of sweeps names each one: add 'sweep: NAME' (the results' "
                         "'sweep' column)")
        ax = _axes(r, entry, path)
        if ax.name in seen:
            r.fail(f"{path}.sweep", f"sweep {ax.name!r} is also the name of axes[{seen[ax.name]}]"
                                    f"; give each sweep its own name")
        seen[ax.name] = i
        sweeps.append(ax)
    return tuple(sweeps)


def _window(r: _Reader, value, path: str):
    """One window: null, or a pair [left, right] of ints >= 0, -1 or null for unbounded."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        r.fail(path, f"expected a pair [left, right] (ints >= 0; -1 or null: unbounded) or null "
                     f"for no window, got {_show(value)}; one window alone is written as a "
                     f"list of one pair, e.g. window: [[255, 0]]")
    pair = []
    for k, w in enumerate(value):
        where = f"{path}[{k}]"
        if w is None or w == -1 and _is_int(w):
            pair.append(None)
        elif not _is_int(w) or w < -1:
            r.fail(where, f"expected an int >= 0, or -1 or null for unbounded "
                          f"({'left' if k == 0 else 'right'}), got {_show(w)}")
        else:
            pair.append(int(w))
    if pair == [None, None]:
        r.fail(path, f"{_show(value)} is unbounded on both sides, which is no window: write null")
    return tuple(pair)


def _softcap(r: _Reader, value, path: str):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        r.fail(path, f"expected a finite number > 0 (the cap c of c·tanh(s/c)) or null for none, "
                     f"got {_show(value)}")
    return float(value)


def _precision(r: _Reader, value, path: str):
    """One precision: null (the dtype's default) or one of ``cuflash.precision.PRECISIONS``."""
    if value is None or (isinstance(value, str) and value in PRECISIONS):
        return value
    r.fail(path, f"{_show(value)} is not a precision; valid: {list(PRECISIONS)} (how float32's "
                 f"products are computed, cuflash.precision) or null for the dtype's default")


def _mask(r: _Reader, value, path: str):
    """A named custom mask: null, or {kind: documents, lengths: [...]}; its text
    (``variants.Documents.text``)."""
    if value is None:
        return None
    if not isinstance(value, dict) or "kind" not in value:
        r.fail(path, f"expected null or a mapping with 'kind' from {list(_MASK_KEYS)}, e.g. "
                     f"{{kind: documents, lengths: [512, 2048]}}, got {_show(value)}")
    kind = r.choice(value["kind"], f"{path}.kind", tuple(_MASK_KEYS))
    r.mapping(value, path, _MASK_KEYS[kind])
    if "lengths" not in value:
        r.fail(path, "documents need 'lengths': the document lengths packed in turn into each "
                     "row of seq_len tokens, e.g. lengths: [512, 2048, 256]")
    lengths = r.ints(value["lengths"], f"{path}.lengths")
    return variants_mod.Documents(lengths).text()


def _varlen(r: _Reader, value, path: str):
    """A varlen mix: null, or {lengths: [...]} (ints, or 'LxN' for N sequences of L tokens); its
    text (``layouts.varlen_text``)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        r.fail(path, f"expected null (a dense batch) or a mapping {{lengths: [...]}}, e.g. "
                     f"{{lengths: [512, 2048, 256x4]}}, got {_show(value)}")
    r.mapping(value, path, _VARLEN_KEYS)
    if "lengths" not in value:
        r.fail(path, "a varlen mix needs 'lengths': the sequence lengths packed in turn into "
                     "each row of seq_len tokens (ints, or 'LxN' for N sequences of L)")
    items = r.as_list(value["lengths"], f"{path}.lengths")
    for i, item in enumerate(items):
        try:
            layouts_mod.expand([item])
        except ValueError as exc:
            where = f"{path}.lengths[{i}]" if isinstance(value["lengths"], list) \
                else f"{path}.lengths"
            r.fail(where, str(exc).partition(": ")[2])
    try:   # each item passed alone; together they may make too many sequences
        return layouts_mod.varlen_text(layouts_mod.expand(items))
    except ValueError as exc:
        r.fail(f"{path}.lengths", str(exc))


def _cache_lengths(r: _Reader, value, path: str):
    """A mix of sequence lengths: null, or {fractions: [...]} (numbers in (0, 1], 'p/q', or
    'FxN' for N sequences of fraction F; the first 1); its text (``decode.mix_text``)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        r.fail(path, f"expected null (every sequence holds kv_len tokens) or a mapping "
                     f"{{fractions: [...]}}, e.g. {{fractions: [1, 0.5, 0.01x4]}}, got "
                     f"{_show(value)}")
    r.mapping(value, path, _CACHE_LENGTHS_KEYS)
    if "fractions" not in value:
        r.fail(path, "a mix needs 'fractions': each sequence's length as a fraction of kv_len, "
                     "in turn over the batch (the first 1), e.g. fractions: [1, 0.5, 0.01x4]")
    raw = value["fractions"]
    items = r.as_list(raw, f"{path}.fractions")
    for i, item in enumerate(items):
        try:
            decode_mod.expand([1] + [item] if i else [item])
        except ValueError as exc:
            where = f"{path}.fractions[{i}]" if isinstance(raw, list) else f"{path}.fractions"
            text = str(exc)
            r.fail(where, text.partition(": ")[2] if text.startswith("item ") else text)
    try:   # each item passed alone; together they may make too many sequences
        return decode_mod.mix_text(decode_mod.expand(items))
    except ValueError as exc:
        r.fail(f"{path}.fractions", str(exc))


def _group(r: _Reader, value, path: str):
    """A group size: an int >= 1, or 'heads' (MQA)."""
    if value == layouts_mod.MQA:
        return value
    if not _is_int(value) or value < 1:
        r.fail(path, f"expected a group size G >= 1 (kv heads = heads / G) or "
                     f"{layouts_mod.MQA!r} (MQA: one kv head), got {_show(value)}")
    return int(value)


def _variant_list(r: _Reader, raw, key: str, path: str, one, pair_items: bool = False) -> tuple:
    """A variant axis: one value or a list of them, each read by ``one(r, value, path)``.
    ``pair_items``: a value is itself a list (a window), so the axis must be a list of them."""
    val = raw[key]
    where = f"{path}.{key}"
    if isinstance(val, list) and (not pair_items or not val or any(
            v is None or isinstance(v, (list, tuple)) for v in val)):
        if not val:
            r.fail(where, "the list is empty; give at least one value (null: no variant)")
        out = [one(r, v, f"{where}[{i}]") for i, v in enumerate(val)]
    elif pair_items and isinstance(val, list):
        out = [one(r, v, f"{where}[{i}]") for i, v in enumerate(val)]   # fails at item 0
    else:
        out = [one(r, val, where)]
    return tuple(dict.fromkeys(out))


def _axes(r: _Reader, raw, path: str = "axes") -> Axes:
    raw = r.mapping(raw, path, _AXES_KEYS)
    kw: dict[str, Any] = {}
    if "sweep" in raw:
        kw["name"] = r.component(raw["sweep"], f"{path}.sweep", "it names a sweep in the results")
    if "seq_len" in raw:
        kw["seq_len"] = tuple(sorted(set(r.ints(raw["seq_len"], f"{path}.seq_len"))))
    if "kv_len" in raw:
        kv = []
        val = raw["kv_len"]
        for i, v in enumerate(r.as_list(val, f"{path}.kv_len")):
            where = f"{path}.kv_len[{i}]" if isinstance(val, list) else f"{path}.kv_len"
            if v == "seq_len":
                kv.append("seq_len")
            elif _is_int(v) and v >= 1:
                kv.append(int(v))
            else:
                r.fail(where, f"expected a positive integer or 'seq_len', got {_show(v)}")
        kw["kv_len"] = tuple(dict.fromkeys(kv))
    if "head_dim" in raw:
        kw["head_dim"] = r.ints(raw["head_dim"], f"{path}.head_dim", choices=KERNEL_HEAD_DIMS)
    if "batch" in raw:
        if isinstance(raw["batch"], dict):
            m = r.mapping(raw["batch"], f"{path}.batch", ("tokens",))
            if "tokens" not in m:
                r.fail(f"{path}.batch", "a mapping here needs 'tokens' (batch = tokens // seq_len)")
            kw["batch_tokens"] = r.int_(m["tokens"], f"{path}.batch.tokens", minimum=1)
        else:
            kw["batch"] = r.ints(raw["batch"], f"{path}.batch")
    if "heads" in raw:
        if isinstance(raw["heads"], dict):
            m = r.mapping(raw["heads"], f"{path}.heads", ("model_dim",))
            if "model_dim" not in m:
                r.fail(f"{path}.heads", "a mapping here needs 'model_dim' "
                                        "(heads = model_dim // head_dim)")
            kw["heads_model_dim"] = r.int_(m["model_dim"], f"{path}.heads.model_dim", minimum=1)
        else:
            kw["heads"] = r.ints(raw["heads"], f"{path}.heads")
    if "dtype" in raw:
        kw["dtype"] = r.choices(raw["dtype"], f"{path}.dtype", DTYPE_NAMES)
        if "bfloat16" in kw["dtype"] and "bfloat16" not in DTYPES:
            r.fail(f"{path}.dtype", BFLOAT16_HINT)
    if "precision" in raw:
        kw["precision"] = _variant_list(r, raw, "precision", path, _precision)
    if "causal" in raw:
        kw["causal"] = r.bools(raw["causal"], f"{path}.causal")
    if "pass" in raw:
        kw["passes"] = r.choices(raw["pass"], f"{path}.pass", PASSES)
    if "window" in raw:
        kw["window"] = _variant_list(r, raw, "window", path, _window, pair_items=True)
    if "softcap" in raw:
        kw["softcap"] = _variant_list(r, raw, "softcap", path, _softcap)
    if "alibi" in raw:
        kw["alibi"] = r.bools(raw["alibi"], f"{path}.alibi")
    if "mask" in raw:
        kw["mask"] = _variant_list(r, raw, "mask", path, _mask)
    if "group" in raw:
        kw["group"] = _variant_list(r, raw, "group", path, _group)
    if "varlen" in raw:
        kw["varlen"] = _variant_list(r, raw, "varlen", path, _varlen)
    if "cache" in raw:
        kw["cache"] = r.choices(raw["cache"], f"{path}.cache", decode_mod.CACHES)
    if "page_size" in raw:
        kw["page_size"] = tuple(dict.fromkeys(r.ints(raw["page_size"], f"{path}.page_size")))
    if "cache_lengths" in raw:
        kw["cache_lengths"] = _variant_list(r, raw, "cache_lengths", path, _cache_lengths)
    axes = Axes(**kw)
    _check_cache_axes(r, axes, raw, path)         # first: a KV-cache sweep reads some axes anew
    for T in axes.seq_len:
        if axes.batch_tokens and (axes.batch_tokens % T or axes.batch_tokens < T):
            r.fail(f"{path}.batch.tokens", f"tokens={axes.batch_tokens} is not a multiple of "
                                           f"seq_len={T}; batch = tokens // seq_len must be exact")
    for d in axes.head_dim:
        if axes.heads_model_dim and (axes.heads_model_dim % d or axes.heads_model_dim < d):
            r.fail(f"{path}.heads.model_dim", f"model_dim={axes.heads_model_dim} is not a "
                                              f"multiple of head_dim={d}")
    if axes.documents() and any(s != "seq_len" for s in axes.kv_len):
        r.fail(f"{path}.mask", f"documents are packed into rows of seq_len tokens and need "
                               f"kv_len: seq_len, got kv_len {list(axes.kv_len)}")
    _check_layout_axes(r, axes, path)
    _check_precision_axes(r, axes, path)
    return axes


def _check_precision_axes(r: _Reader, axes: Axes, path: str) -> None:
    """A precision other than null is float32's: such a sweep has dtype float32 alone (the
    cross-product would hold points no call can run)."""
    chosen = [p for p in axes.precision if p is not None]
    others = [d for d in axes.dtype if d != "float32"]
    if chosen and others:
        r.fail(f"{path}.precision", f"precision {chosen} applies to float32 only, and this "
                                    f"sweep's dtype has {others} (one precision each: leave it "
                                    f"null); sweep float32 with its precisions and the other "
                                    f"dtypes with precision: null in two sweeps (axes as a list "
                                    f"of sweeps, each with 'sweep: NAME')")


def _check_layout_axes(r: _Reader, axes: Axes, path: str) -> None:
    """Every group size divides every heads value it meets; varlen mixes fill rows of seq_len
    tokens (kv_len: seq_len) and take no documents mask (attention_varlen has no mask_mod)."""
    for i, g in enumerate(axes.group):
        if g == layouts_mod.MQA:
            continue
        where = f"{path}.group[{i}]" if len(axes.group) > 1 else f"{path}.group"
        for d in axes.head_dim:
            for h in axes.heads_for(d):
                if h % g:
                    r.fail(where, f"group {g} does not divide heads={h} (head_dim={d}): "
                                  f"kv heads = heads / group must be whole")
    if any(v is not None for v in axes.varlen):
        if any(s != "seq_len" for s in axes.kv_len):
            r.fail(f"{path}.varlen", f"varlen mixes are packed into rows of seq_len tokens (keys "
                                     f"= queries per sequence) and need kv_len: seq_len, got "
                                     f"kv_len {list(axes.kv_len)}")
        if axes.documents():
            r.fail(f"{path}.varlen", "varlen and a documents mask in one sweep: attention_varlen "
                                     "takes no mask_mod; put them in two sweeps")


def _check_cache_axes(r: _Reader, axes: Axes, raw: dict, path: str) -> None:
    """A KV-cache sweep (``cache``) is forward decode steps of attention_with_kvcache: explicit
    context lengths (kv_len ints), every sequence at least Tq = seq_len tokens, pages of a power
    of two >= 16 tokens, none of the variants, layouts or precisions it does not take here;
    page_size and cache_lengths belong to such sweeps (page_size to one with the paged
    layout)."""
    if not axes.cache:
        for key in ("page_size", "cache_lengths"):
            if key in raw:
                r.fail(f"{path}.{key}", f"{key} is an axis of KV-cache sweeps: add "
                                        f"cache: [contiguous, paged] (or one of them)")
        return
    if "page_size" in raw and "paged" not in axes.cache:
        r.fail(f"{path}.page_size", f"page_size is the paged cache's; this sweep's cache is "
                                    f"{list(axes.cache)}: add paged, or drop page_size")
    for i, p in enumerate(axes.page_size):
        if p < kvcache_mod.MIN_PAGE_SIZE or p & (p - 1):
            where = (f"{path}.page_size[{i}]" if isinstance(raw.get("page_size"), list)
                     else f"{path}.page_size")
            r.fail(where, f"{p} tokens per page: pages hold a power of two >= "
                          f"{kvcache_mod.MIN_PAGE_SIZE} tokens (16, 32, 64, ...)")
    if axes.passes != ("forward",):
        r.fail(f"{path}.pass", f"a KV-cache step is a forward pass; got {list(axes.passes)}: "
                               f"use pass: forward (the default)")
    if "kv_len" not in raw or any(s == "seq_len" for s in axes.kv_len):
        r.fail(f"{path}.kv_len", "a KV-cache sweep needs the context lengths S as ints "
                                 "(kv_len: [4096, 65536]); seq_len is Tq, the queries per "
                                 "sequence")
    if axes.batch_tokens:
        r.fail(f"{path}.batch", "batch: {tokens: N} divides by seq_len, which is Tq in a "
                                "KV-cache sweep; give the batch sizes as ints")
    if axes.precision != (None,):
        r.fail(f"{path}.precision", "attention_with_kvcache takes no precision (its float32 "
                                    "runs on the CUDA cores): leave precision null in a sweep "
                                    "with cache, and sweep it in one without")
    unwired = [k for k, default in (("window", (None,)), ("softcap", (None,)),
                                    ("alibi", (False,)), ("mask", (None,)), ("varlen", (None,)))
               if getattr(axes, k) != default]
    if unwired:
        r.fail(f"{path}.{unwired[0]}", f"{unwired[0]} is not wired into KV-cache sweeps (the "
                                       f"decode points run plain causal or non-causal steps); "
                                       f"put it in a sweep without cache")
    for i, mix in enumerate(axes.cache_lengths):
        fr = decode_mod.parse_mix(mix)
        for T in axes.seq_len:
            for S in axes.kv_lens(T):
                shortest = min(decode_mod.sequence_lengths(S, len(fr), mix)) if fr else S
                if shortest < T:
                    where = (f"{path}.cache_lengths[{i}]" if fr and len(axes.cache_lengths) > 1
                             else f"{path}.cache_lengths" if fr else f"{path}.kv_len")
                    r.fail(where, f"at kv_len={S} the shortest sequence holds {shortest} "
                                  f"tokens, fewer than the seq_len = Tq = {T} queries the step "
                                  f"appends; every sequence needs at least Tq tokens")


def _grid(r: _Reader, raw, path: str, fields) -> tuple[tuple[tuple[str, Any], ...], ...]:
    """Partial tiles of one grid mapping (the cartesian product of its lists)."""
    raw = r.mapping(raw, path, fields)
    if not raw:
        r.fail(path, f"an empty grid; give lists for some of {list(fields)}")
    axes = []
    for field in fields:
        if field not in raw:
            continue
        where = f"{path}.{field}"
        if field == "kernel":
            vals = r.choices(raw[field], where, KERNELS)
        else:
            vals = r.ints(raw[field], where, choices=TILE_CHOICES[field])
        axes.append([(field, v) for v in dict.fromkeys(vals)])
    return tuple(tuple(combo) for combo in itertools.product(*axes))


def _method(r: _Reader, raw, i: int, sweeps: tuple[Axes, ...]) -> Method:
    path = f"methods[{i}]"
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict):
        r.fail(path, f"expected a method name from {list(METHODS)} or a mapping with 'name', "
                     f"got {_show(raw)}")
    if "name" not in raw:
        r.fail(path, f"missing 'name'; valid names: {list(METHODS)}")
    name = r.choice(raw["name"], f"{path}.name", METHODS)
    r.mapping(raw, path, _METHOD_KEYS[name])
    cache_sweeps = [ax for ax in sweeps if ax.cache]
    if name == decode_mod.CEILING and not cache_sweeps:
        r.fail(f"{path}.name", "read_ceiling reads the K+V bytes of a KV-cache step: it needs a "
                               "sweep with cache: [contiguous, paged] (or one of them)")
    if name == "torch_sdpa" and len(cache_sweeps) == len(sweeps):
        r.fail(f"{path}.name", "torch_sdpa has no KV-cache step in these experiments; every "
                               "sweep here has 'cache': put torch in a sweep without it")
    if name == ring_mod.METHOD and len(cache_sweeps) == len(sweeps):
        r.fail(f"{path}.name", "ring attention has no KV-cache step; every sweep here has "
                               "'cache': put the ring in a sweep without it")
    if "grid" in raw and cache_sweeps:
        r.fail(f"{path}.grid", "attention_with_kvcache picks its own tiles, so a grid would "
                               "change nothing at KV-cache points; measure tiles in a file "
                               "without KV-cache sweeps")
    kw: dict[str, Any] = {"name": name,
                          "label": "torch" if name == "torch_sdpa" else name}
    if "label" in raw:
        label = r.string(raw["label"], f"{path}.label")
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", label):
            r.fail(f"{path}.label", f"{label!r} must be letters, digits and _ . + - only")
        kw["label"] = label
    if "pass" in raw:
        kw["passes"] = r.choices(raw["pass"], f"{path}.pass", PASSES)
        swept = tuple(dict.fromkeys(p for ax in sweeps for p in ax.passes))
        extra = set(kw["passes"]) - set(swept)
        if extra:
            r.fail(f"{path}.pass", f"{sorted(extra)} not in axes.pass {list(swept)}")
    if "layout" in raw:
        kw["layout"] = r.choice(raw["layout"], f"{path}.layout", layouts_mod.LAYOUTS)
        if kw["layout"] == "padded" and not any(
                (ax.documents() or any(v is not None for v in ax.varlen)) and True in ax.causal
                for ax in sweeps):
            r.fail(f"{path}.layout", "'padded' runs the documents of a documents mask, or the "
                                     "sequences of a varlen mix, as a padded causal batch: it "
                                     "needs a sweep with mask: {kind: documents, ...} or varlen: "
                                     "{lengths: [...]}, and causal: true (the pads are hidden "
                                     "from the real queries by the causal mask only)")
        if kw["layout"] == "materialized":
            if name == "torch_sdpa":
                r.fail(f"{path}.layout", "'materialized' is cuflash's K/V-per-query-head "
                                         "baseline; torch_sdpa reads GQA in place (enable_gqa)")
            if not any(g != 1 for ax in sweeps for g in ax.group if not ax.cache):
                r.fail(f"{path}.layout", "'materialized' repeats K/V per query head: it needs a "
                                         "sweep with group > 1 (e.g. group: [1, 4, heads]) and "
                                         "no 'cache' (KV-cache steps read K/V in place)")
    if "grid" in raw:
        fields = TILE_FIELDS if name == "flash" else ("block_m", "block_n")
        grids = raw["grid"]
        tiles = []
        if isinstance(grids, list):
            if not grids:
                r.fail(f"{path}.grid", "the list of grids is empty")
            for j, g in enumerate(grids):
                tiles += _grid(r, g, f"{path}.grid[{j}]", fields)
        else:
            tiles += _grid(r, grids, f"{path}.grid", fields)
        kw["tiles"] = tuple(dict.fromkeys(tiles))
    if "deterministic" in raw:
        kw["deterministic"] = r.bools(raw["deterministic"], f"{path}.deterministic")
    if name == ring_mod.METHOD:
        kw["ring"] = _ring_options(r, raw, path)
    if name == "torch_sdpa":
        kw["backends"] = (r.choices(raw["backends"], f"{path}.backends", TORCH_BACKENDS)
                          if "backends" in raw else TORCH_BACKENDS)
    return Method(**kw)


def _ring_options(r: _Reader, raw: dict, path: str):
    """The options of a ring entry (``ring_mod.Options``): world_size (int >= 1), slicing
    (zigzag | contiguous), launch (processes | simulated), split and serial (bools),
    timeout_s (seconds > 0)."""
    kw: dict[str, Any] = {}
    if "world_size" in raw:
        kw["world_size"] = r.int_(raw["world_size"], f"{path}.world_size", minimum=1)
    if "slicing" in raw:
        kw["slicing"] = r.choice(raw["slicing"], f"{path}.slicing", ring_mod.SLICINGS)
    if "launch" in raw:
        kw["launch"] = r.choice(raw["launch"], f"{path}.launch", ring_mod.LAUNCHES)
    for key in ("split", "serial"):
        if key in raw:
            kw[key] = r.bool_(raw[key], f"{path}.{key}")
    if "timeout_s" in raw:
        kw["timeout_s"] = r.number(raw["timeout_s"], f"{path}.timeout_s")
    return ring_mod.Options(**kw)


def _check_ring_axes(r: _Reader, method: Method, i: int, sweeps: tuple[Axes, ...],
                     raw_axes) -> None:
    """Every sweep a ring entry runs in poses one sequence its ranks can split
    (``ring_mod.axes_problems``): the first problem is the error, at the sweep's key."""
    for j, ax in enumerate(sweeps):
        problems = ring_mod.axes_problems(ax, method.ring)
        if problems:
            key, why = problems[0]
            where = f"axes[{j}]" if isinstance(raw_axes, list) else "axes"
            r.fail(f"{where}.{key}", f"methods[{i}] ({method.label}): {why}")


def _check_tiles(r: _Reader, method: Method, i: int, axes: Axes, smem_limit: int) -> None:
    """Every tile of a flash/twin grid must make a TileConfig (and, for flash, pass
    ``cuflash.gpu.plan.check_tile``) at every head_dim, dtype, precision and pass of ``axes``
    (one sweep; ``build`` checks each); a grid's kernel must compute float32 in the sweep's
    precision (``cuflash.precision.of_family``: 'simt' is 'ieee', 'tf32' 'tf32', 'tf32x3'
    'highest')."""
    if method.tiles == (None,):
        return
    grid_path = f"methods[{i}].grid"
    check = None
    if method.name == "flash":
        from ..gpu.plan import check_tile as check
    passes = method.passes or axes.passes
    for partial in method.tiles:
        for d in axes.head_dim:
            for dt in axes.dtype:
                for p in passes:
                    for backward in {"forward": (False,), "backward": (True,),
                                     "both": (False, True)}[p]:
                        for prec in (None,) if backward else axes.precision:
                            _check_tile(r, grid_path, partial, check, d, dt, backward, prec,
                                        smem_limit)


def _check_tile(r: _Reader, grid_path: str, partial, check, d: int, dt: str, backward: bool,
                prec: str | None, smem_limit: int) -> None:
    """One grid tile at one (head_dim, dtype, pass, precision): see ``_check_tiles``."""
    fields = dict(partial)
    which = "backward" if backward else "forward"
    given = ", ".join(f"{k}={v}" for k, v in partial)
    where = f"head_dim={d}, dtype={dt}" + (f", precision={prec}" if prec else "")
    if prec is not None and "kernel" in fields and of_family(fields["kernel"]) != prec:
        own = of_family(fields["kernel"])
        r.fail(grid_path, f"tile {{{given}}} computes float32 as precision={own!r}, not the "
                          f"sweep's precision={prec!r}: leave 'kernel' out of the grid (each "
                          f"precision's own family is taken) or sweep precision: {own}")
    try:
        tile = library_tile(d, dt, backward, smem_limit, precision=prec, **fields)
        if check is not None:
            check(tile, d, dt, backward=backward, smem_limit=smem_limit, arch=device_arch())
    except ValueError as exc:
        r.fail(grid_path,
               f"tile {{{given}}} cannot run the {which} pass at {where} (smem limit "
               f"{smem_limit} bytes): {exc}. Remove it from the grid or split the grid into a "
               f"list of valid grids")


def _measure(r: _Reader, raw) -> Measure:
    raw = r.mapping(raw, "measure", _MEASURE_KEYS)
    kw: dict[str, Any] = {}
    for key, val in raw.items():
        path = f"measure.{key}"
        if key in ("repeats", "threads", "rounds"):
            kw[key] = r.int_(val, path, minimum=1)
        elif key in ("warmup", "seed", "error_heads"):
            kw[key] = r.int_(val, path, minimum=0)
        elif key == "error_limit":
            kw[key] = r.int_(val, path, minimum=1)
        elif key in ("max_seconds", "ncu_timeout_s", "stable_spread"):
            kw[key] = r.number(val, path)
        else:
            kw[key] = r.bool_(val, path)
    return Measure(**kw)


#: Plot filter columns whose values a sweep lists (Axes fields): a filter value none of the
#: sweeps has selects nothing, so it is an error (a typo like 'forwad')
_SWEPT_FILTERS = {"seq_len": "seq_len", "head_dim": "head_dim", "dtype": "dtype",
                  "pass": "passes", "causal": "causal", "precision": "precision",
                  "sweep": "name", "cache": "cache", "softcap": "softcap", "alibi": "alibi"}


def _as_tuple(v) -> tuple:
    """An Axes field's values (a sweep's name is one value)."""
    return v if isinstance(v, tuple) else (v,)


def _plot(r: _Reader, raw, i: int, columns: tuple[str, ...], labels: tuple[str, ...],
          methods: tuple[Method, ...], sweeps: tuple = ()) -> Plot:
    path = f"plots[{i}]"
    raw = r.mapping(raw, path, _PLOT_KEYS)
    if not raw:
        r.fail(path, "a plot needs at least 'x' and 'y'")

    def column(key):
        val = raw[key]
        if not isinstance(val, str) or val not in columns:
            r.fail(f"{path}.{key}", f"{_show(val)} is not a column these measurements produce; "
                                    f"valid: {list(columns)}")
        return val

    for key in ("x", "y"):
        if key not in raw:
            r.fail(path, f"missing {key!r} (a column from {list(columns)})")
    kw: dict[str, Any] = {"x": column("x"), "y": column("y")}
    if "kind" in raw:
        kw["kind"] = r.choice(raw["kind"], f"{path}.kind", PLOT_KINDS)
    heat = kw.get("kind") == "heatmap"
    if not heat and kw["y"] not in INT_COLUMNS | FLOAT_COLUMNS:
        r.fail(f"{path}.y", f"{kw['y']!r} is not a numeric column; a {kw.get('kind', 'line')} "
                            f"plot draws numbers (e.g. time_ms_median, tflops, peak_mem_bytes)")
    if kw.get("kind") == "scatter":
        for key, why in _SCATTER_NO.items():
            if key in raw:
                r.fail(f"{path}.{key}", why)
    for key in ("hue", "style"):
        if key in raw:
            if heat:
                r.fail(f"{path}.{key}", f"a heatmap has no {key}; facet with 'col' instead")
            kw[key] = None if raw[key] is None else column(key)
    if heat:
        kw["hue"] = None
    for key in ("col", "value"):
        if key in raw:
            vals = r.as_list(raw[key], f"{path}.{key}")
            for j, v in enumerate(vals):
                if not isinstance(v, str) or v not in columns:
                    where = f"{path}.{key}[{j}]" if isinstance(raw[key], list) else f"{path}.{key}"
                    r.fail(where, f"{_show(v)} is not a column these measurements produce; "
                                  f"valid: {list(columns)}")
            kw[key] = tuple(vals)
    if heat:
        for j, v in enumerate(kw.get("value", ())):
            if v not in INT_COLUMNS | FLOAT_COLUMNS:
                where = f"{path}.value[{j}]" if isinstance(raw["value"], list) else f"{path}.value"
                r.fail(where, f"{v!r} is not a numeric column; a heatmap writes numbers in its "
                              f"cells (e.g. time_ms_median, tflops)")
    if heat and not kw.get("value"):
        r.fail(f"{path}.value", f"a heatmap needs 'value': the column(s) written in its cells, "
                                f"from {list(columns)}")
    if not heat and "value" in raw:
        r.fail(f"{path}.value", "'value' is for kind: heatmap; a line plot draws 'y'")
    for key in ("logx", "logy", "slope", "identity"):
        if key in raw:
            kw[key] = r.bool_(raw[key], f"{path}.{key}")
    for key, axis in (("logx", "x"), ("logy", "y")):
        if kw.get(key) and kw[axis] not in INT_COLUMNS | FLOAT_COLUMNS:
            r.fail(f"{path}.{key}", f"{axis}={kw[axis]!r} is not a numeric column: it has no "
                                    f"log scale")
    for key in ("title", "name"):
        if key in raw:
            kw[key] = r.string(raw[key], f"{path}.{key}")
    if "name" in kw:
        r.component(kw["name"], f"{path}.name", "it names the PNG file")
    if "filter" in raw:
        filt = r.mapping(raw["filter"], f"{path}.filter", columns)
        kw["filter"] = tuple((c, tuple(r.as_list(v, f"{path}.filter.{c}")))
                             for c, v in filt.items())
        for c, vals in kw["filter"]:
            if c == "method":
                for v in vals:
                    if v not in labels:
                        r.fail(f"{path}.filter.method", f"{v!r} is not a method label of this "
                                                        f"experiment; valid: {list(labels)}")
            elif c in _SWEPT_FILTERS and sweeps:
                swept = {x for ax in sweeps for x in _as_tuple(getattr(ax, _SWEPT_FILTERS[c]))}
                for v in vals:
                    if v not in swept or (isinstance(v, bool) != any(isinstance(x, bool)
                                                                      for x in swept)):
                        r.fail(f"{path}.filter.{c}", f"{_show(v)} is not a value of {c} in "
                                                     f"this experiment's sweeps; they have "
                                                     f"{sorted(swept, key=repr)}")
    if "ratio_panel" in raw:
        if heat:
            r.fail(f"{path}.ratio_panel", "a heatmap has no ratio panel")
        if "ratio" in raw:
            r.fail(f"{path}.ratio_panel", "give either 'ratio' (the plot is the ratio) or "
                                          "'ratio_panel' (y, and the ratio in a panel below)")
        where = f"{path}.ratio_panel"
        panel = r.mapping(raw["ratio_panel"], where, ("numerator", "denominator", "target"))
        sides = [k for k in ("numerator", "denominator") if k in panel]
        if len(sides) != 1:
            r.fail(where, "give exactly one of 'numerator' (baseline / row) or 'denominator' "
                          "(row / baseline): a method label")
        label = panel[sides[0]]
        if label not in labels:
            r.fail(f"{where}.{sides[0]}", f"{_show(label)} is not a method label of this "
                                          f"experiment; valid: {list(labels)}")
        kw[f"panel_{sides[0]}"] = label
        if "target" in panel:
            kw["panel_target"] = r.number(panel["target"], f"{where}.target")
    if "ratio" in raw:
        rat = r.mapping(raw["ratio"], f"{path}.ratio", ("numerator", "denominator"))
        if len(rat) != 1:
            r.fail(f"{path}.ratio", "give exactly one of 'numerator' (baseline / row, e.g. a "
                                    "speedup) or 'denominator' (row / baseline)")
        (which, label), = rat.items()
        if isinstance(label, dict):
            from .points import KEY_COLUMNS
            where = f"{path}.ratio.{which}"
            if not label:
                r.fail(where, "an empty baseline; give the columns that tell the baseline rows "
                              "apart, e.g. {window: null}")
            valid = [k for k in KEY_COLUMNS if k not in ("method", "backend")]
            for c, v in label.items():
                if c not in valid:
                    r.fail(f"{where}.{c}", f"{_show(c)} is not a column a baseline can differ "
                                           f"in; valid: {valid} (a method baseline is given by "
                                           f"its label)")
                if isinstance(v, (list, dict)):
                    r.fail(f"{where}.{c}", f"expected one value, got {_show(v)}")
            kw[f"ratio_{which}"] = tuple(label.items())
            return Plot(**kw)
        if label not in labels:
            r.fail(f"{path}.ratio.{which}", f"{_show(label)} is not a method label of this "
                                            f"experiment; valid: {list(labels)}")
        owner = next(m for m in methods if label in m.labels())
        if len(owner.tiles) > 1 or len(owner.deterministic) > 1:
            r.fail(f"{path}.ratio.{which}", f"method {label!r} has several tiles or "
                                            f"deterministic values, so it is not one baseline "
                                            f"per point; give it its own entry with one tile")
        kw[f"ratio_{which}"] = label
    return Plot(**kw)


def build(raw, source: str = "<experiment>", *, default_name: str = "experiment",
          smem_limit: int | None = DEFAULT_SMEM_LIMIT) -> Experiment:
    """Validate a parsed experiment mapping. ``smem_limit=None`` skips the kernel tile checks
    (used when only plotting)."""
    r = _Reader(source)
    raw_top = r.mapping(raw, "", _TOP_KEYS)
    if "name" not in raw_top:   # the file's name: made one safe component ('my exp' -> 'my_exp')
        default_name = re.sub(r"[^A-Za-z0-9_.-]+", "_", default_name).lstrip(".-") or "experiment"
    name = r.component(raw_top.get("name", default_name), "name", "it names the results folder")
    description = r.string(raw_top.get("description", ""), "description")
    device = r.choice(raw_top.get("device", "auto"), "device", DEVICES)
    sweeps = _sweeps(r, raw_top.get("axes"))
    raw_methods = raw_top.get("methods", ["naive", "flash"])
    if not isinstance(raw_methods, list) or not raw_methods:
        r.fail("methods", f"expected a non-empty list of methods from {list(METHODS)}, "
                          f"got {_show(raw_methods)}")
    methods = tuple(_method(r, m, i, sweeps) for i, m in enumerate(raw_methods))
    seen: dict[str, int] = {}
    for i, m in enumerate(methods):
        for lab in m.labels():
            if lab in seen:
                r.fail(f"methods[{i}].label", f"label {lab!r} is also used by "
                                              f"methods[{seen[lab]}]; give each entry its own label")
            seen[lab] = i
        if smem_limit is not None:
            for axes in sweeps:
                _check_tiles(r, m, i, axes, smem_limit)
        if m.ring is not None:
            _check_ring_axes(r, m, i, sweeps, raw_top.get("axes"))
    measure = _measure(r, raw_top.get("measure"))
    exp = Experiment(name=name, source=source, description=description, device=device,
                     sweeps=sweeps, methods=methods, measure=measure)
    raw_plots = raw_top.get("plots", [])
    if not isinstance(raw_plots, list):
        r.fail("plots", f"expected a list of plots, got {_show(raw_plots)}")
    plots = tuple(_plot(r, p, i, exp.columns(), exp.labels(), methods, exp.sweeps)
                  for i, p in enumerate(raw_plots))
    named: dict[str, int] = {}
    for i, plot in enumerate(plots):
        if plot.name in named:
            r.fail(f"plots[{i}].name", f"{plot.name!r} names plots[{named[plot.name]}] too: "
                                       f"each plot writes <name>.png, so one would overwrite "
                                       f"the other")
        if plot.name:
            named[plot.name] = i
    return dataclasses.replace(exp, plots=plots, raw=copy.deepcopy(raw_top))


# -- --set overrides ------------------------------------------------------------------------------

_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)")


def parse_override(text: str) -> tuple[list, Any]:
    """``'axes.seq_len=[256,512]'`` -> (['axes', 'seq_len'], [256, 512]); the value is YAML."""
    if "=" not in text:
        raise ValueError(f"--set {text!r}: expected KEY.PATH=VALUE, e.g. axes.seq_len=[256,512]")
    key, _, value = text.partition("=")
    steps: list = []
    for part in key.strip().split("."):
        m = _STEP.fullmatch(part)
        if not m:
            raise ValueError(f"--set {text!r}: bad key path {key!r}; use names, dots and [index], "
                             f"e.g. methods[1].grid.block_m")
        steps.append(m.group(1))
        steps += [int(i) for i in re.findall(r"\[(\d+)\]", m.group(2))]
    try:
        parsed = yaml.load(value, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise ValueError(f"--set {text!r}: the value is not valid YAML: {_yaml_error(exc)}") \
            from None
    return steps, parsed


def apply_overrides(raw, overrides) -> dict:
    """A copy of ``raw`` with each ``KEY.PATH=VALUE`` override set (missing mappings are made)."""
    out = copy.deepcopy(raw) if raw is not None else {}
    for text in overrides:
        steps, value = parse_override(text)
        node = out
        for depth, step in enumerate(steps):
            last = depth == len(steps) - 1
            where = _path_text(steps[:depth + 1])
            if isinstance(step, int):
                if not isinstance(node, list) or step >= len(node):
                    raise ValueError(f"--set {text!r}: {where} does not exist "
                                     f"({_path_text(steps[:depth])} has "
                                     f"{len(node) if isinstance(node, list) else 'no'} items)")
                if last:
                    node[step] = value
                else:
                    if isinstance(node[step], str):  # 'naive' shorthand -> {name: naive}
                        node[step] = {"name": node[step]}
                    node = node[step]
            else:
                if not isinstance(node, dict):
                    raise ValueError(f"--set {text!r}: {_path_text(steps[:depth]) or 'the file'} "
                                     f"is not a mapping ({type(node).__name__}), cannot set "
                                     f"{step!r} in it")
                if last:
                    node[step] = value
                else:
                    node = node.setdefault(step, {} if not isinstance(steps[depth + 1], int)
                                           else [])
    return out


def _path_text(steps) -> str:
    text = ""
    for s in steps:
        text += f"[{s}]" if isinstance(s, int) else (f".{s}" if text else s)
    return text


# -- loading --------------------------------------------------------------------------------------

def device_arch() -> str:
    """'sm_XY' of the current GPU, or DEFAULT_ARCH without one (the GPU the defaults assume)."""
    return device.visible().arch


def device_smem_limit() -> int:
    """Opt-in shared memory per block of the current GPU, or DEFAULT_SMEM_LIMIT without one."""
    return device.visible().smem_per_block


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one
    silently: an edited file could lose half its methods)."""


def _unique_mapping(loader, node, deep=False):
    """The mapping's keys as written, each once (two on one line too); keys merged in by
    ``<<: *anchor`` are not its own, and its own override them, as YAML says (construct_mapping
    merges them first)."""
    seen: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
            seen[key] = line
        except TypeError:      # an unhashable key: construct_mapping says so
            continue
        if first is not None:
            where = f"line {line}" if first == line else f"lines {first} and {line}"
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {key!r} is given twice in one mapping ({where}); give it "
                            f"once", key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load(path, overrides=(), *, smem_limit: int | None | str = "device") -> Experiment:
    """Read, override and validate an experiment file. ``smem_limit='device'`` (default) checks
    tiles against the visible GPU (232448 bytes without one); None skips the tile checks."""
    path = Path(path)
    source = str(path) + (" (with --set " + ", ".join(overrides) + ")" if overrides else "")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SchemaError(str(path), "", f"cannot read the file: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise SchemaError(str(path), "", f"not UTF-8 text: byte {exc.object[exc.start]:#04x} "
                                         f"on line {line}") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise SchemaError(str(path), "", f"not valid YAML: {_yaml_error(exc)}") from None
    if raw is None:
        raise SchemaError(str(path), "", "the file is empty (or only comments); an experiment "
                                         "needs at least 'axes' or 'methods', e.g. "
                                         "axes: {seq_len: [256, 512]}")
    try:
        raw = apply_overrides(raw, overrides)
    except ValueError as exc:
        raise SchemaError(source, "--set", str(exc)) from None
    if smem_limit == "device":
        smem_limit = device_smem_limit()
    stem = path.stem if path.name != "experiment.yaml" else path.parent.name
    return build(raw, source, default_name=stem, smem_limit=smem_limit)


def tile_grid_points(path) -> list[tuple]:
    """(dtype, head_dim, tile, causal, backward, deterministic) of every flash kernel launch an
    experiment file makes on a GPU (sm_90 shared-memory limit), without duplicates: what
    ``cuflash.gpu.precompile`` compiles ahead of time besides the defaults."""
    from .points import enumerate_points
    exp = load(path, smem_limit=DEFAULT_SMEM_LIMIT)
    launches: dict[tuple, None] = {}
    for p in enumerate_points(exp, "gpu", smem_limit=DEFAULT_SMEM_LIMIT):
        if p.method_name != "flash":
            continue
        if p.fwd_tile is not None:
            launches[(p.dtype, p.head_dim, p.fwd_tile, p.causal, False, True)] = None
        if p.bwd_tile is not None:
            det = bool(p.deterministic)
            launches[(p.dtype, p.head_dim, p.bwd_tile, p.causal, True, det)] = None
    return list(launches)
