"""The environment a run measured in, recorded once per run in ``env.json`` beside the results.

``env.json`` holds ``{"experiment": name, "runs": [env, ...]}``: a resumed run appends its own
environment, and each results row's ``run`` column is the index of the environment it was
measured in (so rows from two machines are never confused).
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Callable

import numpy as np

from .._xp import cupy_module, gpu_available
from . import files

REPO = Path(__file__).resolve().parents[2]


def _run(cmd, cwd=None) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _git() -> dict:
    if os.environ.get("CUFLASH_GIT_COMMIT"):
        # a copy of the tree on a remote GPU machine (its .git, if any, may be stale): the caller
        # says which commit the tree is
        return {"git_commit": os.environ["CUFLASH_GIT_COMMIT"], "git_dirty": None}
    commit = _run(["git", "rev-parse", "HEAD"], cwd=REPO)
    if commit is None:
        return {"git_commit": None, "git_dirty": None}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO)
    return {"git_commit": commit, "git_dirty": bool(status)}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _torch_version() -> str | None:
    """torch's version without importing it (slow), from the installed distribution's metadata."""
    if "torch" in sys.modules:
        return getattr(sys.modules["torch"], "__version__", None)
    return _version("torch")


def gpu_info() -> dict:
    """Name, memory, shared-memory limit, driver and CUDA versions of GPU 0 (empty without one)."""
    if not gpu_available():
        return {}
    cp = cupy_module()
    rt = cp.cuda.runtime
    props = rt.getDeviceProperties(0)
    name = props["name"]
    info = {
        "gpu_name": name.decode() if isinstance(name, bytes) else str(name),
        "gpu_count": rt.getDeviceCount(),
        "gpu_mem_bytes": int(props["totalGlobalMem"]),
        "gpu_compute_capability": f"{props['major']}.{props['minor']}",
        "gpu_sm_count": int(props["multiProcessorCount"]),
        "gpu_smem_optin_bytes": int(props.get("sharedMemPerBlockOptin", 0)),
        "cuda_driver_api_version": rt.driverGetVersion(),
        "cuda_runtime_version": rt.runtimeGetVersion(),
    }
    smi = shutil.which("nvidia-smi")
    if smi:
        drv = _run([smi, "--query-gpu=driver_version", "--format=csv,noheader"])
        info["driver_version"] = drv.splitlines()[0] if drv else None
    return info


def collect(device: str) -> dict:
    """Everything worth knowing about where a run measured (JSON-serializable)."""
    from .. import __version__
    cp = cupy_module()
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "device": device,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "cuflash_version": __version__,
        **_git(),
        "numpy_version": np.__version__,
        "cupy_version": getattr(cp, "__version__", None) if cp is not None else None,
        "torch_version": _torch_version(),
        "matplotlib_version": _version("matplotlib"),
    }
    env.update(gpu_info())
    env["blas"] = blas_info()
    return env


def blas_info() -> list[dict]:
    """The BLAS libraries NumPy loaded (threadpoolctl): library, version, threading layer and
    the default thread count (CPU points run with ``measure.threads`` instead, per row)."""
    from threadpoolctl import threadpool_info
    keep = ("internal_api", "version", "num_threads", "threading_layer", "architecture")
    return [{k: lib.get(k) for k in keep} for lib in threadpool_info()
            if lib.get("user_api") == "blas"]


def summary_line(env: dict) -> str:
    """One line naming where a benchmark ran (``collect``'s dict): date, device, driver and
    CUDA runtime versions, CuPy, torch and the commit (``+`` when the tree had changes)."""
    commit = env.get("git_commit")
    parts = [str(env.get("date")), device_name(env)]
    if env.get("driver_version"):
        parts.append(f"driver {env['driver_version']}")
    if env.get("cuda_runtime_version"):
        parts.append(f"CUDA runtime {env['cuda_runtime_version']}")
    parts += [f"CuPy {env.get('cupy_version')}", f"torch {env.get('torch_version')}",
              "cuflash " + (commit[:10] + ("+" if env.get("git_dirty") else "") if commit
                            else "(no commit)")]
    return ", ".join(parts)


def device_name(env: dict) -> str:
    """A short name for the device column: the GPU's name, or 'cpu (<n> cores)'."""
    if env.get("device") == "gpu" and env.get("gpu_name"):
        return env["gpu_name"]
    return f"cpu ({env.get('cpu_count')} cores)"


def record(out_dir: Path, experiment: str, env: dict, log: Callable[[str], None] = print) -> int:
    """Append ``env`` to ``out_dir/env.json``; returns its run index.

    An env.json that cannot be read is kept aside (``files.keep_aside``, said through ``log``),
    never overwritten: the history it holds stays on disk."""
    path = Path(out_dir) / "env.json"
    data = {"experiment": experiment, "runs": []}
    if path.exists():
        try:
            old = json.loads(path.read_text())
            if not (isinstance(old, dict) and isinstance(old.get("runs"), list)):
                raise ValueError("not a cuflash env.json (no list of runs)")
            data = old
        except (ValueError, UnicodeDecodeError) as exc:   # JSONDecodeError is a ValueError
            aside = files.keep_aside(path)
            log(f"warning: {path} could not be read ({type(exc).__name__}: {exc}); kept it as "
                f"{aside.name} and started a new env.json (run numbers restart at 0)")
    env = dict(env, run=len(data["runs"]))
    data["runs"].append(env)
    files.atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    return env["run"]


def load(out_dir: Path) -> dict:
    """The ``env.json`` of a results folder, or an empty record."""
    path = Path(out_dir) / "env.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {"runs": []}
