"""``python -m cuflash compile``: build every kernel specialization with NVRTC, no GPU needed.

It compiles what the defaults can pick for the chosen architecture (every dtype × supported
head_dim × causal × pass, deduplicated: specializations are per padded head_dim; the
warp-specialized forward also with window, softcap and ALiBi: ``register_tight_variants``), plus the
TileConfigs the shipped experiments name, the KV-cache decode kernels attention_with_kvcache's
defaults pick (``decode_specs``) and the split-KV forward kernels (``split_specs``, reported only),
and prints registers, spills and shared memory of each.
Exit status: 1 on a compile error, 2 with ``--fail-on-spills`` when a default kernel spills or
ptxas serialized its wgmma (CompileReport.serialized).
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import concurrent.futures as cf
import os
import sys
from pathlib import Path

from .._xp import DTYPES
from ..checks import SUPPORTED_HEAD_DIMS
from ..tile import (F16_SCALED_DEFAULT_MAX_D, F16_SPLIT, WGMMA_TF32_MAX_D, WGMMA_TF32_WIDE_D,
                    default_backward, default_tile, f16_scaled_tiles, wgmma_f16x3_tiles,
                    wgmma_tf32_tiles, wgmma_tf32_wide_tiles)
from . import build, plan


def default_specs(arch: str) -> list[plan.KernelSpec]:
    """Every specialization the defaults can pick on a GPU of this architecture."""
    limit = plan.SMEM_LIMIT[arch]
    specs = {}
    for dt in DTYPES:
        for d in SUPPORTED_HEAD_DIMS:
            for backward in (False, True):
                for causal in (False, True):
                    # short: tile.wgmma_one_consumer_pays's lengths, either pass
                    for det, short in itertools.product(
                            (True, False) if backward else (True,), (False, True)):
                        try:
                            if backward:
                                tile, det = default_backward(d, dt, causal=causal, arch=arch,
                                                             deterministic=det, smem_limit=limit,
                                                             short=short)
                            else:
                                tile = default_tile(d, dt, causal=causal, arch=arch,
                                                    smem_limit=limit, short=short)
                        except ValueError:
                            continue   # nothing fits this GPU (the library says so at call time)
                        for s in plan.specs_for(dt, d, tile, causal, backward, det):
                            specs[s.name] = s
    # float32's precision='tf32' on mma.sync (its default, 'highest', is in the loop above)
    for prec in ("tf32",):
        for d in SUPPORTED_HEAD_DIMS:
            for causal in (False, True):
                try:
                    tile = default_tile(d, "float32", causal=causal, arch=arch, smem_limit=limit,
                                        precision=prec)
                except ValueError:
                    continue
                for s in plan.specs_for("float32", d, tile, causal, False):
                    specs[s.name] = s
    # ... and its forward on Hopper's warpgroup tensor cores (kernel='wgmma_tf32'), the default
    # of dense batches where tile.wgmma_tf32_pays: the first tile of each head dim it takes
    if arch == "sm_90":
        for d in SUPPORTED_HEAD_DIMS:
            if d > WGMMA_TF32_WIDE_D:
                continue
            first = (wgmma_tf32_tiles(d) if d <= WGMMA_TF32_MAX_D else wgmma_tf32_wide_tiles(d))[0]
            for causal in (False, True):
                for s in plan.specs_for("float32", d, first, causal, False):
                    specs[s.name] = s
    # ... and 'highest' as three float16 products (kernel='wgmma_f16x3'), its default on sm_90
    # for dense batches where tile.float32_wgmma_pays: the first forward and backward tiles;
    # 'tf32''s backward as one (kernel='wgmma_f16x1'), and its forward (opt-in: compiled to
    # keep it building without spills)
    if arch == "sm_90":
        for d in SUPPORTED_HEAD_DIMS:
            for kernel, backward in itertools.product(F16_SPLIT, (False, True)):
                tiles = wgmma_f16x3_tiles(d, backward, kernel)
                for causal in ((False, True) if tiles else ()):
                    for s in plan.specs_for("float32", d, tiles[0], causal, backward):
                        specs[s.name] = s
        # ... and 'tf32''s backward on the 16-bit pair itself (kernel='wgmma_f16s', v71), its
        # default there at d <= F16_SCALED_DEFAULT_MAX_D: the first tile, long and short batches
        # (the deterministic pair, which deterministic=False takes too: default_dq_deterministic)
        for d, short, causal in itertools.product(SUPPORTED_HEAD_DIMS, (False, True),
                                                  (False, True)):
            if d <= F16_SCALED_DEFAULT_MAX_D:
                first = f16_scaled_tiles(d, short)[0]
                for s in plan.specs_for("float32", d, first, causal, True):
                    specs[s.name] = s
    for s in list(specs.values()):
        for v in register_tight_variants(s):
            vs = dataclasses.replace(s, variant=v)
            specs[vs.name] = vs
    return list(specs.values())


#: Score modifiers a register-tight kernel is also compiled with (softcap, ALiBi, both)
_MODIFIERS = (dict(softcap=True), dict(alibi=True), dict(softcap=True, alibi=True))


def register_tight_variants(spec: plan.KernelSpec) -> list[plan.Variant]:
    """The variants of a default kernel whose registers are fixed by hand, so that a spill there
    fails the check too: the warp-specialized forward's consumers get a set register count
    (setmaxnreg, flash_fwd_wgmma_ws.cu), and its causal ALiBi kernel spilled 8 bytes at 208
    (NOTES v17) where the plain kernels did not. Dense, causal and window masks, each with softcap,
    ALiBi and both."""
    if not spec.warp_specialized or spec.variant != plan.Variant.of(spec.causal):
        return []
    variants = [plan.Variant(mask, **mods) for mask in ("dense", "causal", "window")
                for mods in _MODIFIERS] + [plan.Variant("window")]
    if plan.copy_engine_only(spec.tile):   # the variants it runs (the plan refuses the others)
        variants = [v for v in variants if plan.copy_engine_only_runs(v)]
    return variants


#: head dims whose decode kernels the gate compiles: the benchmarks' and the widest, which has the
#: most registers and shared memory (every kernel head dim's set would add ~2500 kernels)
DECODE_HEAD_DIMS = (128, 256)


def decode_specs(arch: str) -> list[plan.KernelSpec]:
    """The kernels attention_with_kvcache's defaults pick (kvcache._tile_for, causal, the
    library's own split rule) at DECODE_HEAD_DIMS, every dtype: over a contiguous cache and over
    pages (of 64 tokens or more, and of 16 and 32: the 16-row tile's key warps each read 16 keys
    of one page, the 32-row tile takes a page's keys); up to 16 and more than 16 query rows a
    tile; rings of 2 and 3 stages; unsplit, split-KV merged through L2
    and, where plan.cluster_spec takes one on this architecture, in a cluster of
    DECODE_CLUSTER blocks (its size is one template constant: 8 stands for 2 and 4). The 16-bit
    kernels (the decode benchmarks' path) fail ``--fail-on-spills``; float32's and float64's,
    which reuse the dense forward's tile, are reported only (``run``)."""
    from ..kvcache import DECODE_CLUSTER, _tile_for
    limit = plan.SMEM_LIMIT[arch]
    specs = {}
    for dt, d, rows, stages, page in itertools.product(DTYPES, DECODE_HEAD_DIMS, (1, 32), (2, 3),
                                                       (0, 16, 32, 64)):
        tile = _tile_for(dt, d, rows, None, page, arch, limit, stages)
        if tile is None:
            continue
        tile = plan.without_producer(tile, d)   # as ops.ForwardLaunch runs a cache
        for split in (False, True):
            v = plan.Variant("causal", split=split, cache="paged" if page else "cache")
            for s in plan.specs_for(dt, d, tile, v, False):
                specs[s.name] = s
                if split:   # as ops.ForwardLaunch takes a cluster (8 stands for 2 and 4)
                    c = plan.cluster_spec(s, DECODE_CLUSTER, arch, DECODE_CLUSTER, limit)
                    specs[c.name] = c
    return list(specs.values())


#: head dims whose split-KV forward kernels (cuflash.attention's num_splits) the gate compiles:
#: the benchmarks' and the widest
SPLIT_HEAD_DIMS = (64, 128, 256)


def split_specs(arch: str) -> list[plan.KernelSpec]:
    """The split-KV forward kernels of ``cuflash.attention(num_splits=...)`` at SPLIT_HEAD_DIMS,
    every dtype: the default forward tile of a batch that is not dense in one pass (on sm_90 the
    16-bit warp-specialized tiles give way to the 8-warp wgmma tile: plan.without_producer, as
    ops.forward runs them), dense and causal, plain, with softcap, ALiBi and both. Reported by
    ``run``, not held by ``--fail-on-spills`` (NOTES v100: under NVRTC 13.0 five spill 8-32 bytes
    on sm_90 and four on sm_80)."""
    limit = plan.SMEM_LIMIT[arch]
    specs = {}
    for dt, d, causal in itertools.product(DTYPES, SPLIT_HEAD_DIMS, (False, True)):
        try:
            tile = default_tile(d, dt, causal=causal, arch=arch, smem_limit=limit, short=True)
        except ValueError:
            continue
        tile = plan.without_producer(tile, d)
        for mods in ({},) + _MODIFIERS:
            v = plan.Variant("causal" if causal else "dense", split=True, **mods)
            for s in plan.specs_for(dt, d, tile, v, False):
                specs[s.name] = s
    return list(specs.values())


def experiment_specs(root: Path | None = None) -> list[plan.KernelSpec]:
    """Specializations named by the TileConfig grids of the shipped experiments/*.yaml."""
    try:
        from ..experiments.schema import tile_grid_points
    except ImportError:
        return []
    root = root or Path(__file__).resolve().parents[2] / "experiments"
    specs = {}
    for path in sorted(root.glob("*.yaml")):
        for dt, d, tile, causal, backward, det in tile_grid_points(path):
            for s in plan.specs_for(dt, d, tile, causal, backward, det):
                specs[s.name] = s
    return list(specs.values())


def _compile(args):
    spec, arch, src = args
    try:
        # a family built for its own architecture (wgmma: sm_90a) is compiled for that one
        return spec, build.compile_offline(src, spec.name, spec.arch or arch,
                                           spec.smem_bytes()), None
    except RuntimeError as exc:
        return spec, None, str(exc)


def run(arch: str, fail_on_spills: bool, jobs: int, include_experiments: bool = True,
        out=sys.stdout, match: str | None = None) -> int:
    """Compile (``match``: only the kernels whose name the regular expression searches, and not
    the backward's preprocess) and report; the exit status of ``cuflash compile``."""
    import re
    keep = (lambda s: True) if match is None else (lambda s: re.search(match, s.name))
    decode = [s for s in decode_specs(arch) if keep(s)]
    defaults = [s for s in default_specs(arch) if keep(s)] + decode
    names = {s.name for s in defaults}
    # what --fail-on-spills holds to: every default but float32's and float64's decode kernels
    # (and not the split-KV forward kernels below, reported only)
    strict = names - {s.name for s in decode if s.dtype not in ("float16", "bfloat16")}
    split = [s for s in split_specs(arch) if keep(s) and s.name not in names]
    split_names = {s.name for s in split}
    names |= split_names
    extra = [s for s in (experiment_specs() if include_experiments else [])
             if s.name not in names and keep(s)]
    todo = [(s, arch, build.source(s)) for s in defaults + split + extra]
    failures, spilled, serialized, split_spills = [], [], [], []
    print(f"compiling {len(todo)} kernels for {arch} ({len(defaults)} default, {len(split)} "
          f"split-KV forward, {len(extra)} from experiments) with {jobs} processes", file=out)
    print(f"{'kernel':64} {'regs':>4} {'spill':>6} {'stack':>5} {'smem':>7}", file=out)
    with cf.ProcessPoolExecutor(max_workers=jobs) as pool:
        for spec, rep, err in pool.map(_compile, todo):
            if err:
                failures.append(err)
                print(f"{spec.name:64} FAILED", file=out)
                continue
            flag = ""
            if rep.spills and spec.name in split_names:
                split_spills.append(spec.name)
            if rep.spills and spec.name in strict:
                spilled.append(spec.name)
                flag = "  <- spills (default)"
            if rep.serialized and spec.name in strict:
                serialized.append(spec.name)
                flag += "  <- wgmma serialized (default)"
            print(f"{spec.name:64} {rep.registers:>4} {rep.spills:>6} {rep.stack_bytes:>5} "
                  f"{spec.smem_bytes():>7}{flag}", file=out)
    for dt, packed in itertools.product(DTYPES, (False, True)) if match is None else ():
        try:
            build.compile_offline(build.preprocess_source(dt, packed),
                                  build.preprocess_name(dt, packed), arch)
        except RuntimeError as exc:
            failures.append(str(exc))
    if arch == "sm_90":   # the TF32 wgmma forward's staging of K and Vᵀ, both widths
        for max_d in build.TF32_STAGE_DIMS:
            try:
                build.compile_offline(build.tf32_stage_source(max_d),
                                      build.tf32_stage_name(max_d), arch)
            except RuntimeError as exc:
                failures.append(str(exc))
        for stage in build.f16x3_stage_kernels():   # the float16-product kernels' splits
            try:
                build.compile_offline(build.f16x3_stage_source(*stage),
                                      build.f16x3_stage_name(*stage), arch)
            except RuntimeError as exc:
                failures.append(str(exc))
        try:   # 'wgmma_f16s''s float16 copies (f16_scaled.py)
            build.compile_offline(build.f16_copy_source(), build.F16_COPY_NAME, arch)
        except RuntimeError as exc:
            failures.append(str(exc))
    for f in failures:
        print(f, file=out)
    print(f"{len(todo) - len(failures)} compiled, {len(failures)} failed, "
          f"{len(spilled)} default kernels spill, {len(serialized)} have their wgmma serialized"
          + (f" ({len(split_spills)} split-KV forward kernels spill: reported only)"
             if split_spills else ""), file=out)
    if failures:
        return 1
    if fail_on_spills and (spilled or serialized):
        return 2
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="cuflash compile", description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90", choices=sorted(plan.SMEM_LIMIT),
                    help="target architecture (default sm_90)")
    ap.add_argument("--fail-on-spills", action="store_true",
                    help="exit 2 if a kernel the defaults pick spills registers or has its "
                         "wgmma serialized by ptxas")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="compiler processes (default: CPU count)")
    ap.add_argument("--no-experiments", action="store_true",
                    help="only the defaults, not the experiments' tile grids")
    ap.add_argument("--match", metavar="REGEX",
                    help="only the kernels whose name this searches, e.g. 'tf32x3_bwd' (the "
                         "registers and spills of one family after an edit)")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs={args.jobs}: give at least 1 compiler process")
    if args.match is not None:
        import re
        try:
            re.compile(args.match)
        except re.error as exc:
            ap.error(f"--match={args.match!r} is not a regular expression: {exc}")
    return run(args.arch, args.fail_on_spills, args.jobs, not args.no_experiments, match=args.match)


if __name__ == "__main__":
    sys.exit(main())
