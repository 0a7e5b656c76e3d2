"""The gate of the GPU tools in this folder (bench_*, ab_*, host_profile): without a CUDA GPU
visible to CuPy, one line and exit status 2, not a CUDA traceback from the first allocation;
``--help`` still prints the tool's usage.

    if __name__ == "__main__":
        sys.exit(gpu_tool.run(main))
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def run(main, argv: list[str] | None = None):
    """``main()``'s result, or 2 with one line on stderr where no GPU is visible."""
    argv = sys.argv[1:] if argv is None else argv
    if importlib.util.find_spec("cuflash") is None:
        # a checkout not installed (the GPU machine): this checkout's package, after any on
        # PYTHONPATH (an arm's tree there still wins); without it ab_speed.py stopped at the
        # import below (session 46, call 235)
        sys.path.append(str(Path(__file__).resolve().parents[1]))
    if not {"-h", "--help"} & set(argv):
        from cuflash._xp import gpu_available
        if not gpu_available():
            print(f"{Path(sys.argv[0]).name}: needs a CUDA GPU visible to CuPy, and there is "
                  f"none here", file=sys.stderr)
            return 2
    return main()
