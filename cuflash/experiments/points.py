"""Points: one measurement each. An experiment expands into an ordered list of them.

A point fixes the shapes (seq_len T, kv_len S, head_dim d, batch, heads), the dtype and float32's
precision (of the methods that take one: :func:`takes_precision`), causal, the
attention variant (window, softcap, alibi, mask: ``variants``), the layout axes (GQA group,
varlen mix: ``layouts``), the KV cache of a decode step (cache, page_size, cache_lengths:
``decode``; there T is Tq and S the context), the pass, the method variant (tile,
deterministic, torch backend, layout; a ring's ranks, slicing and launch: ``ring``) and its
sweep. Its ``key`` is what a results row is matched on when a run resumes.
"""
from __future__ import annotations

import dataclasses
import json

from ..mask import Mask
from ..checks import kernel_head_dim
from ..precision import check as check_precision
from ..tile import TileConfig, default_dq_deterministic, float32_wgmma_pays
from . import decode, layouts, ring, variants
from .schema import BOOL_COLUMNS, INT_COLUMNS, Experiment, device_smem_limit, library_tile

#: Columns every results CSV has (files of every version); a file without one is not a results CSV.
BASE_KEY_COLUMNS = ("method", "backend", "tile", "deterministic", "seq_len", "kv_len",
                    "head_dim", "batch", "heads", "dtype", "causal", "pass")
#: Columns that identify a point; a results row with the same values is the same point. Rows of
#: files written before a column existed lack it and match its default (``KEY_DEFAULTS``).
KEY_COLUMNS = (BASE_KEY_COLUMNS + ("precision",) + variants.VARIANT_COLUMNS
               + layouts.LAYOUT_KEY_COLUMNS
               + decode.AXIS_COLUMNS + ("sweep",) + ring.KEY_COLUMNS)
#: Methods whose calls take ``precision=`` (``cuflash.precision``); the others' points have
#: none whatever the axis says (torch_sdpa: its own backends; ring_attention and
#: attention_with_kvcache: no such argument).
PRECISION_METHODS = ("naive", "flash", "twin")
#: Key text of a column when its cell is blank or missing (otherwise '').
KEY_DEFAULTS = {"alibi": "false", "group": "1"}


def fmt(value) -> str:
    """How a value is written in the CSV (and compared on resume): '' for None, YAML booleans,
    floats to 6 significant digits (as ``results.cell_text`` writes them)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e15 else repr(value)
    return str(value)


def takes_precision(method_name: str, pass_: str) -> bool:
    """Whether a method's point depends on float32's precision: naive, flash and twin in every
    pass (a backward point: the backward's products, and the forward that makes its
    residuals)."""
    return method_name in PRECISION_METHODS


def key_text(row: dict, column: str) -> str:
    """The key text of one column of a text row (blank or missing: the column's default), as
    ``Point.key()`` writes it: a spreadsheet's re-save (TRUE, FALSE, 64.0, spaces around a cell)
    still names the point it measured."""
    text = (row.get(column) or "").strip() or KEY_DEFAULTS.get(column, "")
    if column in BOOL_COLUMNS and text.lower() in ("true", "false"):
        return text.lower()
    if column in INT_COLUMNS:
        try:
            x = float(text)
        except ValueError:
            return text
        if x.is_integer() and abs(x) < 2 ** 53:
            return str(int(x))
    return text


@dataclasses.dataclass(frozen=True)
class Point:
    """One measurement: method variant × shapes × dtype × causal × pass."""

    method: str            # label, e.g. 'flash' or 'torch_cudnn'
    method_name: str       # 'naive', 'flash', 'twin', 'torch_sdpa' or 'read_ceiling'
    backend: str           # torch backend ('flash', 'cudnn', 'efficient', 'math') or ''
    seq_len: int
    kv_len: int
    head_dim: int
    batch: int
    heads: int
    dtype: str
    causal: bool
    pass_: str             # 'forward', 'backward' or 'both'
    device: str            # where it runs: 'gpu' or 'cpu'
    fwd_tile: TileConfig | None = None   # flash/twin: tile of the forward call (if measured)
    bwd_tile: TileConfig | None = None   # flash/twin: tile of the backward call (if measured)
    deterministic: bool | None = None    # flash/twin backward only
    window: tuple | None = None          # (left, right), None for an unbounded side
    softcap: float | None = None
    alibi: bool = False                  # slopes variants.alibi_slopes(heads)
    mask: str | None = None              # a named mask's text, e.g. 'documents(512,2048)'
    layout: str | None = None            # 'padded' or 'materialized' (layouts); None: as it is
    sweep: str | None = None             # the sweep (axes list entry) it belongs to
    group: int = 1                       # GQA: kv heads = heads / group (layouts)
    varlen: str | None = None            # a varlen mix's text, e.g. '512,2048,256x4' (layouts)
    cache: str | None = None             # KV-cache step: 'contiguous' or 'paged' (decode)
    page_size: int | None = None         # tokens per page of a paged cache
    cache_lengths: str | None = None     # a mix of fractions of kv_len, e.g. '1,0.5,0.01x4'
    world_size: int | None = None        # ring: ranks (GPUs) the sequence is split over
    slicing: str | None = None           # ring: 'zigzag' or 'contiguous'
    launch: str | None = None            # ring: 'processes' (one per GPU) or 'simulated'
    ring_split: bool | None = None       # ring: also time compute-only and comm-only
    ring_serial: bool | None = None      # ring: also time the ring without overlap
    ring_timeout_s: float | None = None  # ring: seconds its workers may take
    precision: str | None = None         # float32's products: 'ieee', 'tf32', 'highest'
                                         # (cuflash.precision); None: the dtype's default

    @property
    def bh(self) -> int:
        """batch · heads: the flattened batch the kernels and the IO model see."""
        return self.batch * self.heads

    @property
    def scores(self) -> int:
        """batch · heads · T · S of the point's problem (the size OOM skipping compares)."""
        return self.bh * self.seq_len * self.kv_len

    @property
    def kv_heads(self) -> int:
        """Hkv = heads / group."""
        return layouts.kv_heads(self)

    @property
    def run_shape(self) -> tuple[int, int, int, int]:
        """(batch, heads, T, S) of the arrays the call runs on (``layouts.run_shape``: the
        point's own, the padded batch, or a packed batch's rows; a KV-cache step's (B, Hq, Tq,
        longest sequence))."""
        return decode.run_shape(self) if self.cache else layouts.run_shape(self)

    @property
    def run_scores(self) -> int:
        """Entries of the score matrices of what runs (what naive and the oracle materialize;
        a packed varlen batch: each sequence's; a KV-cache step: Hq · Tq · its tokens)."""
        return decode.run_scores(self) if self.cache else layouts.run_scores(self)

    @property
    def runs_twin(self) -> bool:
        """Whether the CPU twin runs this point: method twin, or flash on the CPU (NumPy arrays),
        which reads only block_m and block_n of its tiles."""
        return self.method_name == "twin" or (self.method_name == "flash" and self.device == "cpu")

    def tiles_used(self) -> tuple[TileConfig, ...]:
        return tuple(t for t in (self.fwd_tile, self.bwd_tile) if t is not None)

    def tile_label(self) -> str:
        """'mma_m128_n64_w4_s2' (one tile), 'fwd … / bwd …' (two) or '' (none); twin: 'm64_n64'."""
        def short(t):
            return f"m{t.block_m}_n{t.block_n}" if self.runs_twin else t.short()
        tiles = self.tiles_used()
        if not tiles:
            return ""
        if len(tiles) == 1 or short(tiles[0]) == short(tiles[1]):
            return short(tiles[0])
        return f"fwd {short(tiles[0])} / bwd {short(tiles[1])}"

    def columns(self) -> dict:
        """The point's own CSV columns (axes and method)."""
        tiles = self.tiles_used()
        one = tiles[0] if tiles and len({t for t in tiles}) == 1 else None
        twin = self.runs_twin
        return {
            "method": self.method, "method_name": self.method_name, "backend": self.backend,
            "tile": self.tile_label(),
            "kernel": one.kernel if one and not twin else None,
            "block_m": one.block_m if one else None, "block_n": one.block_n if one else None,
            "num_warps": one.num_warps if one and not twin else None,
            "num_stages": one.num_stages if one and not twin else None,
            "deterministic": self.deterministic,
            "seq_len": self.seq_len, "kv_len": self.kv_len, "head_dim": self.head_dim,
            "batch": self.batch, "heads": self.heads, "dtype": self.dtype,
            "precision": self.precision, "causal": self.causal,
            "pass": self.pass_, "device": self.device,
            "window": variants.window_text(self.window), "softcap": self.softcap,
            "alibi": self.alibi, "mask": self.mask, "layout": self.layout, "sweep": self.sweep,
            "group": self.group, "kv_heads": self.kv_heads, "varlen": self.varlen,
            "cache": self.cache, "page_size": self.page_size,
            "cache_lengths": self.cache_lengths,
            "world_size": self.world_size, "slicing": self.slicing, "launch": self.launch,
        }

    def key(self) -> tuple[str, ...]:
        cols = self.columns()
        return tuple(fmt(cols[c]) for c in KEY_COLUMNS)

    def oom_group(self) -> tuple[str, ...]:
        """The key without the sizes that grow along a sweep (for skipping after an OOM)."""
        cols = self.columns()
        return tuple(fmt(cols[c]) for c in KEY_COLUMNS if c not in ("seq_len", "kv_len", "batch"))

    def describe(self) -> str:
        text = (f"{self.method} {self.pass_} T={self.seq_len}"
                + (f" S={self.kv_len}" if self.kv_len != self.seq_len else "")
                + f" d={self.head_dim} b={self.batch} h={self.heads} {self.dtype}"
                + (f" precision={self.precision}" if self.precision else "")
                + (" causal" if self.causal else "") + variants.describe(self)
                + layouts.describe(self) + decode.describe(self) + ring.describe(self))
        if self.method_name in ("flash", "twin") and self.tiles_used():
            text += " [" + ("twin " if self.method_name == "flash" and self.runs_twin else "")
            text += f"{self.tile_label()}" + (
                f", det={fmt(self.deterministic)}]" if self.deterministic is not None else "]")
        return text

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        for k in ("fwd_tile", "bwd_tile"):
            d[k] = dataclasses.asdict(getattr(self, k)) if getattr(self, k) else None
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Point":
        d = json.loads(text)
        for k in ("fwd_tile", "bwd_tile"):
            d[k] = TileConfig(**d[k]) if d[k] else None
        if d.get("window") is not None:
            d["window"] = tuple(d["window"])
        return cls(**d)


def point_of_row(row: dict) -> Point:
    """The point a results row measured (a text row, as ``csv.DictReader`` reads it), without
    its tiles: enough for its shapes, variant and mask (``Point.run_shape``,
    ``variants.model_mask``, ``layouts.flops``). Rows of files from before the variant and
    layout columns read as no variant, group 1 and no varlen."""
    t = lambda c: key_text(row, c)                                              # noqa: E731
    return Point(t("method"), t("method_name"), t("backend"), int(row["seq_len"]),
                 int(row["kv_len"]), int(row["head_dim"]), int(row["batch"]), int(row["heads"]),
                 t("dtype"), t("causal") == "true", t("pass"), t("device") or "gpu",
                 deterministic={"true": True, "false": False}.get(t("deterministic")),
                 window=variants.parse_window(t("window")),
                 softcap=float(t("softcap")) if t("softcap") else None,
                 alibi=t("alibi") == "true", mask=t("mask") or None,
                 layout=t("layout") or None, sweep=t("sweep") or None,
                 group=int(t("group")), varlen=t("varlen") or None,
                 cache=t("cache") or None,
                 page_size=int(t("page_size")) if t("page_size") else None,
                 cache_lengths=t("cache_lengths") or None,
                 world_size=int(t("world_size")) if t("world_size") else None,
                 slicing=t("slicing") or None, launch=t("launch") or None,
                 precision=t("precision") or None)


def resolve_device(exp: Experiment) -> str:
    """'gpu' or 'cpu': where naive and flash run for this experiment."""
    if exp.device != "auto":
        return exp.device
    from .._xp import gpu_available
    return "gpu" if gpu_available() else "cpu"


def _staged(dense: bool, dtype: str, precision: str | None, d: int, S: int) -> tuple[bool, bool]:
    """(forward, backward): whether cuflash.attention's default takes float32's Hopper warpgroup
    kernels at a point, by the API's rule (a dense batch, ``dense``, where
    ``tile.float32_wgmma_pays`` at the kernels' head dim; ``precision`` None: float32's default)."""
    if not dense or dtype != "float32":
        return False, False
    prec, D = check_precision(precision, dtype), kernel_head_dim(d)
    return float32_wgmma_pays(prec, D, S), float32_wgmma_pays(prec, D, S, backward=True)


def _variants(method, d: int, dtype: str, pass_: str, causal: bool, smem_limit: int | None,
              precision: str | None = None, staged: tuple[bool, bool] = (False, False)):
    """(backend, fwd_tile, bwd_tile, deterministic) for one method entry at one (d, dtype, pass).
    Tile fields a grid leaves out are the library's defaults for a device with ``smem_limit``;
    both passes' are those of float32's ``precision`` (its kernel family: a default tile of
    another family would decide the precision itself, ``cuflash.attention``). ``staged``:
    ``_staged``'s (forward, backward), as cuflash.attention's default decides."""
    if method.name in ("naive", decode.CEILING):
        yield "", None, None, None
    elif method.name == ring.METHOD:      # the local calls pick their tiles; dQ deterministic
        yield "", None, None, (True if pass_ in ("backward", "both") else None)
    elif method.name == "torch_sdpa":
        for b in method.backends:
            yield b, None, None, None
    else:
        fwd = pass_ in ("forward", "both")
        bwd = pass_ in ("backward", "both")
        for partial in method.tiles:
            fields = dict(partial or ())
            ft = (library_tile(d, dtype, False, smem_limit, causal, precision=precision,
                               staged=staged[0], **fields) if fwd else None)
            for det in (method.deterministic if bwd else (None,)):
                bt = (library_tile(d, dtype, True, smem_limit, causal, det,
                                   precision=precision, staged=staged[1], **fields)
                      if bwd else None)
                if bwd and not fields:   # the library's default backward: its dQ mode too
                    det = default_dq_deterministic(bt, det)
                yield "", ft, bt, det


def _attention_variants(ax, causal: bool):
    """(window, softcap, alibi, mask) of every attention variant a sweep crosses, and the band's
    causal (which picks the default tiles, as the library does)."""
    for window in ax.window:
        for softcap in ax.softcap:
            for alibi in ax.alibi:
                for mask in ax.mask:
                    yield (window, softcap, alibi, mask), Mask.make(causal, window).causal


def enumerate_points(exp: Experiment, device: str | None = None,
                     smem_limit: int | None | str = "device") -> list[Point]:
    """Every point of the experiment, in run order: sweep by sweep; per configuration, T
    ascending, then methods (so an interrupted run has every method at the smaller sizes, and
    OOM skipping sees sizes grow). Duplicates (e.g. deterministic on a forward pass, or the
    point of a method without precision at each precision: :func:`takes_precision`) are dropped.
    A method with a ``layout`` has points only where it applies (``layouts.applies``: padded
    where the mask is documents or varlen is set, and causal; materialized where group > 1).
    KV-cache sweeps cross their caches (each page size of the paged one) and length mixes; there
    read_ceiling has points, torch_sdpa and layout methods none, and flash and twin no tiles
    (``decode.applies``: attention_with_kvcache picks them)."""
    device = device or resolve_device(exp)
    if smem_limit == "device":
        smem_limit = device_smem_limit() if device == "gpu" else None
    seen, points = set(), []
    for ax in exp.sweeps:
        for pass_ in ax.passes:
            for dtype, precision in _dtypes(ax):
                for d in ax.head_dim:
                    for causal in ax.causal:
                        for var, tiled_causal in _attention_variants(ax, causal):
                            for heads in ax.heads_for(d):
                                for lay in _layouts(ax, heads):
                                    for T in ax.seq_len:
                                        for S in ax.kv_lens(T):
                                            for batch in ax.batches(T):
                                                _add_points(points, seen, exp, ax, device,
                                                            smem_limit, pass_, dtype, d, causal,
                                                            tiled_causal, var, lay, heads, T, S,
                                                            batch, precision)
    return points


def _dtypes(ax):
    """(dtype, precision) of every dtype a sweep crosses with its precisions (the schema allows
    precisions other than None with float32 only)."""
    for dtype in ax.dtype:
        for precision in ax.precision:
            yield dtype, precision


def _layouts(ax, heads: int):
    """(group, varlen, cache, page_size, cache_lengths) of every layout a sweep crosses at
    ``heads`` query heads."""
    for group in ax.groups(heads):
        for varlen in ax.varlen:
            for cache, page_size in ax.caches():
                for mix in ax.cache_lengths:
                    yield group, varlen, cache, page_size, mix


def _add_points(points, seen, exp, ax, device, smem_limit, pass_, dtype, d, causal,
                tiled_causal, var, lay, heads, T, S, batch, precision=None) -> None:
    """The points of every method at one configuration (``precision``: of the methods that take
    one, :func:`takes_precision`; the others' points have None)."""
    window, softcap, alibi, mask = var
    group, varlen, cache, page_size, mix = lay
    for m in exp.methods:
        if m.passes is not None and pass_ not in m.passes:
            continue
        if not decode.applies(m.name, m.layout, cache):
            continue
        if cache is None and not layouts.applies(m.layout, causal, mask, varlen, group):
            continue
        where = "cpu" if m.name == "twin" else "gpu" if m.name == "torch_sdpa" else device
        extra = {}
        if m.ring is not None:           # processes: one GPU each, wherever the run is
            where = "gpu" if m.ring.launch == "processes" else device
            extra = m.ring.point_fields()
        prec = precision if takes_precision(m.name, pass_) else None
        found = (_variants(m, d, dtype, pass_, tiled_causal,
                           None if m.name == "twin" else smem_limit, prec,
                           staged=_staged(varlen is None, dtype, prec, d, S))
                 if cache is None else [("", None, None, None)])
        for backend, ft, bt, det in found:
            label = f"{m.label}_{backend}" if backend else m.label
            p = Point(label, m.name, backend, T, S, d, batch, heads, dtype, causal, pass_, where,
                      ft, bt, det, window=window, softcap=softcap, alibi=alibi, mask=mask,
                      layout=None if m.layout == "packed" else m.layout, sweep=ax.name,
                      group=group, varlen=varlen, cache=cache, page_size=page_size,
                      cache_lengths=mix, precision=prec, **extra)
            if p.key() not in seen:
                seen.add(p.key())
                points.append(p)
