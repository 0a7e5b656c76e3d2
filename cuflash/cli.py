"""The ``cuflash`` command: run experiments, redraw their plots, a demo, and kernel compilation.

    cuflash run experiments/memory_vs_length.yaml [--out DIR] [--set axes.seq_len=[256,512]]
    cuflash plot results/memory_vs_length/results.csv [--config FILE]
    cuflash demo
    cuflash compile [--arch sm_90] [--fail-on-spills]

Also ``python -m cuflash ...``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"


def experiments_dir() -> Path:
    """The repository's experiments/ folder (cuflash/../experiments), or a clear error."""
    if not EXPERIMENTS_DIR.is_dir():
        raise FileNotFoundError(
            f"no experiments folder at {EXPERIMENTS_DIR}: the shipped experiment files live in "
            f"the cuflash repository (experiments/*.yaml next to the cuflash package); run from a "
            f"checkout, or pass an experiment file's path to 'cuflash run'")
    return EXPERIMENTS_DIR


def find_experiment(name: str) -> Path:
    """A path as given, or a shipped experiment by name ('cpu_quick' or 'cpu_quick.yaml')."""
    path = Path(name)
    if path.exists():
        return path
    if path.parent == Path("."):
        folder = experiments_dir()
        for cand in (folder / name, folder / f"{name}.yaml"):
            if cand.exists():
                return cand
        shipped = sorted(p.stem for p in folder.glob("*.yaml"))
        raise FileNotFoundError(f"no experiment {name!r}: not a file, and not one of the shipped "
                                f"experiments in {folder}: {shipped}")
    raise FileNotFoundError(f"no experiment file {name!r}")


# -- subcommands -----------------------------------------------------------------------------------

def cmd_run(args) -> int:
    from .experiments import runner, schema
    from .experiments.points import enumerate_points, resolve_device
    exp = schema.load(find_experiment(args.experiment), args.set or ())
    if args.dry_run:
        if args.out is not None:   # what a run would refuse, without making the folder
            from .experiments.files import check_folder
            check_folder(args.out, "--out")
        points = enumerate_points(exp)
        runner.check_plots(exp, points)
        print(f"{exp.name}: {len(points)} points on {resolve_device(exp)}")
        for p in points:
            print("  " + p.describe())
        return 0
    summary = runner.run(exp, _out_dir(args.out))
    _report(summary)
    return 0


def _out_dir(out):
    """``--out`` made and checked (``files.prepare_folder``), or None for the default folder."""
    from .experiments.files import prepare_folder
    return None if out is None else prepare_folder(out, "--out")


def _report(summary) -> None:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary.statuses.items())) or "nothing new"
    print(f"\nmeasured {summary.measured} points ({counts}); "
          f"{summary.skipped} were already in the results")
    print(f"results: {summary.csv}")
    for p in summary.plots:
        print(f"plot:    {p}")
    if summary.plot_error:
        print(f"plots failed: {summary.plot_error}")


def cmd_plot(args) -> int:
    from .experiments import env as envmod
    from .experiments import results, schema
    from .experiments.plots import draw_all
    from .experiments.runner import SPEC_YAML
    csv_path = Path(args.results)
    rows = results.read_for_plot(csv_path)
    spec = Path(args.config) if args.config else csv_path.parent / SPEC_YAML
    if not spec.is_file():
        raise FileNotFoundError(f"no plot specification: {spec} does not exist; pass the "
                                f"experiment file with --config FILE")
    exp = schema.load(spec, smem_limit=None)
    if not exp.plots:
        print(f"{spec} declares no plots")
        return 0
    out = _out_dir(args.out) or csv_path.parent
    paths, problems = draw_all(rows, exp.plots, out, envmod.load(csv_path.parent), csv_path)
    for p in paths:
        print(f"plot: {p}")
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


def cmd_demo(args) -> int:
    from ._xp import gpu_available
    from .experiments import demo, results, runner, schema
    name = "memory_vs_length" if gpu_available() else "cpu_quick"
    path = experiments_dir() / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"the demo experiment {path} is missing from {experiments_dir()}")
    where = "a GPU is visible" if name == "memory_vs_length" else "no GPU is visible: CPU twin"
    print(f"cuflash demo: {where}; running {path}")
    exp = schema.load(path)
    summary = runner.run(exp, _out_dir(args.out))
    print()
    print(demo.report(results.read_rows(summary.csv)))
    _report(summary)
    return 0


def cmd_compile(args, extra) -> int:
    from ._xp import BFLOAT16_HINT, bfloat16
    if bfloat16 is None:
        print(f"cuflash compile: it builds the bfloat16 kernels too, and {BFLOAT16_HINT}",
              file=sys.stderr)
        return 2
    try:
        from .gpu import precompile
    except ImportError as exc:
        print(f"cuflash compile: the kernel precompiler (cuflash.gpu.precompile) is not "
              f"available: {exc}", file=sys.stderr)
        return 2
    argv = (["--arch", args.arch] if args.arch else []) + \
           (["--fail-on-spills"] if args.fail_on_spills else []) + list(extra)
    return int(precompile.main(argv) or 0)


# -- parser ----------------------------------------------------------------------------------------

def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cuflash", description="Exact FlashAttention from NumPy-style Python: experiments "
                                    "and kernel tools.")
    from . import __version__
    parser.add_argument("--version", action="version", version=f"cuflash {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("run", help="run an experiment file, append results, draw its plots",
                       description="Measure every point of an experiment (one CSV row each, "
                                   "flushed as it goes), then draw its plots. Rerunning with the "
                                   "same output folder resumes where it stopped.")
    p.add_argument("experiment", help="experiment YAML file, or the name of a shipped one "
                                      "(e.g. cpu_quick)")
    p.add_argument("--out", metavar="DIR", help="results folder (default: results/<name>/)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a key of the file with a YAML value, e.g. "
                        "--set axes.seq_len=[256,512] or --set methods[1].grid.block_m=[64]; "
                        "repeatable")
    p.add_argument("--dry-run", action="store_true",
                   help="validate and list the points without measuring")

    p = sub.add_parser("plot", help="redraw the plots of a results CSV",
                       description="Draw the plots declared by the experiment stored beside the "
                                   "CSV (experiment.yaml), or by --config.")
    p.add_argument("results", help="results CSV written by 'cuflash run'")
    p.add_argument("--config", metavar="FILE",
                   help="experiment file whose 'plots' to draw (default: experiment.yaml "
                        "beside the CSV)")
    p.add_argument("--out", metavar="DIR", help="folder for the PNGs (default: beside the CSV)")

    p = sub.add_parser("demo", help="naive vs flash memory and time (GPU) or the CPU twin",
                       description="Run experiments/memory_vs_length.yaml when a GPU is visible, "
                                   "else experiments/cpu_quick.yaml; print a naive-vs-tiled "
                                   "table and where the CSV and plots are.")
    p.add_argument("--out", metavar="DIR", help="results folder (default: results/<name>/)")

    p = sub.add_parser("compile", help="compile every kernel specialization with NVRTC",
                       description="Compile the CUDA kernels ahead of time (no GPU needed) and "
                                   "report registers, spills and shared memory; other options "
                                   "are passed to cuflash.gpu.precompile.")
    p.add_argument("--arch", help="target architecture, e.g. sm_80 or sm_90")
    p.add_argument("--fail-on-spills", action="store_true",
                   help="exit non-zero when a kernel spills registers to local memory")
    return parser


def main(argv=None) -> int:
    """Entry point of the ``cuflash`` console script; returns the exit code."""
    from .experiments.schema import SchemaError
    parser = make_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if extra and args.command != "compile":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command == "compile":
            return cmd_compile(args, extra)
        return {"run": cmd_run, "plot": cmd_plot, "demo": cmd_demo}[args.command](args)
    except SchemaError as exc:
        print(f"cuflash {args.command}: invalid experiment: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:   # output piped into head & co.
        return 0
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"cuflash {args.command}: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ncuflash {args.command}: interrupted; rerun the same command to resume",
              file=sys.stderr)
        return 130


def _one_line(exc: BaseException) -> str:
    """An exception as one line: an OSError's reason and file name, anything else its message."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
