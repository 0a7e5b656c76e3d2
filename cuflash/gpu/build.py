"""Runtime compilation of the kernels in ``kernels_cu/`` through NVRTC.

Each specialization becomes one small translation unit: the kernel sources with their local
``#include "..."`` lines expanded in place (so CuPy's on-disk cache, keyed on the source text,
sees every edit), followed by an ``extern "C"`` entry point whose name says what it is. Modules
are built with ``cupy.RawModule`` and cached per device in memory; CuPy caches cubins on disk.
Without a GPU, :func:`compile_offline` runs NVRTC directly for a chosen architecture and reports
registers, spills and shared memory (``python -m cuflash compile``).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path

from .._xp import accum_dtype, resolve_dtype
from .plan import _CTYPE, _SHORT, KernelSpec

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


def kernel_dir() -> Path:
    """The folder of the CUDA sources: ``kernels_cu/`` beside the package in a source tree or
    editable install, ``cuflash/kernels_cu/`` in an installed wheel."""
    here = Path(__file__).resolve().parent.parent
    for cand in (here.parent / "kernels_cu", here / "kernels_cu"):
        if (cand / "common.cuh").is_file():
            return cand
    raise FileNotFoundError(f"kernels_cu/ not found beside {here}; is the package installed whole?")


def expand(name: str, seen=None) -> str:
    """The text of kernels_cu/<name> with local includes expanded once each (#pragma once)."""
    seen = set() if seen is None else seen
    if name in seen:
        return ""
    seen.add(name)
    text = (kernel_dir() / name).read_text()
    text = text.replace("#pragma once", "")
    return _INCLUDE.sub(lambda m: expand(m.group(1), seen), text)


def _acc(dtype: str) -> str:
    """C++ accumulator type of a dtype: double for float64, float otherwise."""
    return "double" if accum_dtype(resolve_dtype(dtype)).itemsize == 8 else "float"


# Per role: source file stem, kernel parameters and arguments after the common (q, k, v) ones.
# {T} is the storage type, {A} the accumulator type.
_ROLES = {
    "fwd": ("flash_fwd", "{T}* out, {A}* lse, int T_len, int S_len, int d, {A} scale_log2",
            "out, lse, T_len, S_len, d, scale_log2"),
    "bwd_dkdv": ("flash_bwd", "const {T}* dout, const {A}* lse, const {A}* D, {T}* dk, {T}* dv, "
                 "{A}* dq_accum, int T_len, int S_len, int d, {A} scale, {A} scale_log2",
                 "dout, lse, D, dk, dv, dq_accum, T_len, S_len, d, scale, scale_log2"),
    "bwd_dq": ("flash_bwd", "const {T}* dout, const {A}* lse, const {A}* D, {T}* dq, int T_len, "
               "int S_len, int d, {A} scale, {A} scale_log2",
               "dout, lse, D, dq, T_len, S_len, d, scale, scale_log2"),
}


def _entry(spec: KernelSpec) -> tuple[str, str]:
    """(source file, extern "C" entry point) of one specialization."""
    t, T, acc, nt, fam = spec.tile, spec.ctype, _acc(spec.dtype), spec.threads(), spec.family
    stem, params, args = _ROLES[spec.role]
    tmpl = [T, acc, spec.head_dim, t.block_m, t.block_n, nt, str(spec.causal).lower()]
    if spec.role == "bwd_dkdv":
        tmpl.append(str(spec.atomic_dq).lower())
    if fam in ("mma", "wgmma"):
        tmpl.append(t.num_stages)
    fn = f"cuflash::flash_{spec.role}_{fam}<{', '.join(map(str, tmpl))}>"
    params = (f"const {T}* q, const {T}* k, const {T}* v, "
              + params.format(T=T, A=acc) + ", int smem_bytes")
    src = f"{stem}.cu" if fam == "simt" else f"{stem}_{fam}.cu"
    entry = (f'extern "C" __global__ void __launch_bounds__({nt}, 1) {spec.name}({params}) {{\n'
             f"    {fn}(q, k, v, {args}, smem_bytes);\n}}\n")
    return src, entry


def preprocess_name(dtype: str) -> str:
    return f"cuflash_bwd_preprocess_{_SHORT[dtype]}"


def _preprocess_entry(dtype: str) -> str:
    T, acc = _CTYPE[dtype], _acc(dtype)
    return (f'extern "C" __global__ void __launch_bounds__(256) {preprocess_name(dtype)}('
            f"const {T}* out, const {T}* dout, {acc}* D, long long rows, int d) {{\n"
            f"    cuflash::flash_bwd_preprocess<{T}, {acc}>(out, dout, D, rows, d);\n}}\n")


def source(spec: KernelSpec) -> str:
    """The whole translation unit of one specialization."""
    src, entry = _entry(spec)
    return f"// {spec.name}\n{expand(src)}\n{entry}"


def preprocess_source(dtype: str) -> str:
    return f"// {preprocess_name(dtype)}\n{expand('flash_bwd.cu')}\n{_preprocess_entry(dtype)}"


def cuda_include_dir() -> str | None:
    """Folder holding cuda_fp16.h: from CUDA wheels (cuda-pathfinder) or a CUDA install."""
    try:
        from cuda import pathfinder
        found = pathfinder.find_nvidia_header_directory("cudart")
        if found:
            return str(found)
    except Exception:
        pass
    for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda_fp16.h").is_file():
            return str(Path(root) / "include")
    return None


def options(extra=()) -> tuple:
    """NVRTC options: the CUDA headers' folder when found (NVRTC's default dialect is C++17;
    CuPy adds its own -arch for the device and -ftz=true)."""
    opts = []
    inc = cuda_include_dir()
    if inc:
        opts.append(f"-I{inc}")
    return tuple(opts) + tuple(extra)


# -- on a device -------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _module(src: str, device_id: int):
    import cupy as cp
    with cp.cuda.Device(device_id):
        return cp.RawModule(code=src, options=options(), backend="nvrtc")


def cache_dir() -> Path:
    """Where cubins built for a named architecture are kept: $CUFLASH_CACHE_DIR, else
    ~/.cache/cuflash (CuPy's own cache keeps the rest)."""
    return Path(os.environ.get("CUFLASH_CACHE_DIR") or Path.home() / ".cache" / "cuflash")


def cubin_for_arch(src: str, name: str, arch: str) -> Path:
    """A cubin of `src` built by NVRTC for `arch` (e.g. 'sm_90a'), cached on disk by the hash of
    the source, options and NVRTC version. CuPy's RawModule(code=...) appends the device's own
    -arch (sm_90), which would reject wgmma; so these are built here and loaded by path."""
    import hashlib
    from cupy_backends.cuda.libs import nvrtc
    opts = list(options((f"-arch={arch}",)))
    key = hashlib.sha256("\0".join([src, *opts, str(nvrtc.getVersion())]).encode()).hexdigest()
    path = cache_dir() / f"{name}-{key[:20]}.cubin"
    if path.is_file():
        return path
    prog = nvrtc.createProgram(src, f"{name}.cu", [], [])
    try:
        nvrtc.compileProgram(prog, opts)
    except Exception as exc:
        raise RuntimeError(f"{name} failed to compile for {arch}:\n"
                           f"{nvrtc.getProgramLog(prog)}") from exc
    cubin = nvrtc.getCUBIN(prog)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(cubin)
    os.replace(tmp, path)        # atomic: parallel test workers never read half a file
    return path


@functools.lru_cache(maxsize=None)
def _module_from_cubin(path: str, device_id: int):
    import cupy as cp
    with cp.cuda.Device(device_id):
        return cp.RawModule(path=path)


@functools.lru_cache(maxsize=None)
def get_kernel(spec: KernelSpec, device_id: int):
    """The compiled kernel of `spec` on a device, with its dynamic shared-memory limit raised."""
    import cupy as cp
    if spec.arch is None:
        mod = _module(source(spec), device_id)
    else:
        mod = _module_from_cubin(str(cubin_for_arch(source(spec), spec.name, spec.arch)),
                                 device_id)
    kern = mod.get_function(spec.name)
    smem = spec.smem_bytes()
    if smem > 48 * 1024:
        with cp.cuda.Device(device_id):
            kern.max_dynamic_shared_size_bytes = smem
    return kern


@functools.lru_cache(maxsize=None)
def get_preprocess(dtype: str, device_id: int):
    return _module(preprocess_source(dtype), device_id).get_function(preprocess_name(dtype))


# -- without a device ------------------------------------------------------------------------

@dataclasses.dataclass
class CompileReport:
    """What ptxas said about one entry point."""

    name: str
    arch: str
    registers: int | None
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    smem_static: int
    smem_dynamic: int
    log: str

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


def compile_offline(src: str, name: str, arch: str, smem_dynamic: int = 0) -> CompileReport:
    """Compile with NVRTC for `arch` (e.g. 'sm_90'), no device needed; raise RuntimeError with the
    log on a compile error."""
    from cupy_backends.cuda.libs import nvrtc
    prog = nvrtc.createProgram(src, f"{name}.cu", [], [])
    opts = list(options((f"-arch={arch}", "--ptxas-options=-v")))
    try:
        nvrtc.compileProgram(prog, opts)
        log = nvrtc.getProgramLog(prog)
    except Exception as exc:
        log = nvrtc.getProgramLog(prog)
        raise RuntimeError(f"{name} failed to compile for {arch}:\n{log}") from exc
    return _parse_ptxas(log, name, arch, smem_dynamic)


def _parse_ptxas(log: str, name: str, arch: str, smem_dynamic: int) -> CompileReport:
    section = log[log.find(f"Function properties for {name}"):] if name in log else log
    def num(pattern, default=0):
        m = re.search(pattern, section)
        return int(m.group(1)) if m else default
    return CompileReport(
        name=name, arch=arch,
        registers=num(r"Used (\d+) registers", None),
        spill_stores=num(r"(\d+) bytes spill stores"),
        spill_loads=num(r"(\d+) bytes spill loads"),
        stack_bytes=num(r"(\d+) bytes stack frame"),
        smem_static=num(r"(\d+) bytes smem"),
        smem_dynamic=smem_dynamic, log=log)
