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
from ..precision import PRODUCTS
from ..tile import F16_SPLIT, x3_forward_shapes
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


# The C++ kernel struct of each (role, family) and the file that defines it.
_KERNELS = {
    ("fwd", "simt"): ("FwdSimt", "flash_fwd.cu"),
    ("fwd", "mma"): ("FwdMma", "flash_fwd_mma.cu"),
    ("fwd", "wgmma"): ("FwdWgmma", "flash_fwd_wgmma.cu"),
    ("fwd", "wgmma_ws"): ("FwdWgmmaWs", "flash_fwd_wgmma_ws.cu"),
    ("bwd_dkdv", "simt"): ("DkdvSimt", "flash_bwd.cu"),
    ("bwd_dkdv", "mma"): ("DkdvMma", "flash_bwd_mma.cu"),
    ("bwd_dkdv", "wgmma"): ("DkdvWgmma", "flash_bwd_wgmma.cu"),
    ("bwd_dkdv", "wgmma_ws"): ("DkdvWgmmaWs", "flash_bwd_wgmma_ws.cu"),
    ("bwd_dq", "simt"): ("DqSimt", "flash_bwd.cu"),
    ("bwd_dq", "mma"): ("DqMma", "flash_bwd_mma.cu"),
    ("bwd_dq", "wgmma"): ("DqWgmma", "flash_bwd_wgmma.cu"),
    ("bwd_dq", "wgmma_ws"): ("DqWgmmaWs", "flash_bwd_wgmma_ws.cu"),
    ("fwd", "dmma"): ("FwdDmma", "flash_fwd_dmma.cu"),
    ("bwd_dkdv", "dmma"): ("DkdvDmma", "flash_bwd_dmma.cu"),
    ("bwd_dq", "dmma"): ("DqDmma", "flash_bwd_dmma.cu"),
    ("fwd", "tf32"): ("FwdMma", "flash_fwd_mma.cu"),     # with Tf32Products<1>
    ("fwd", "tf32x3"): ("FwdMma", "flash_fwd_mma.cu"),   # with Tf32Products<3>
    ("bwd_dkdv", "tf32"): ("DkdvTf32", "flash_bwd_tf32.cu"),
    ("bwd_dkdv", "tf32x3"): ("DkdvTf32", "flash_bwd_tf32.cu"),
    ("bwd_dq", "tf32"): ("DqMma", "flash_bwd_mma.cu"),     # with Tf32Products<1>
    ("bwd_dq", "tf32x3"): ("DqMma", "flash_bwd_mma.cu"),   # with Tf32Products<3>
    ("fwd", "wgmma_tf32"): ("FwdWgmmaTf32", "flash_fwd_wgmma_tf32.cu"),
    ("fwd", "wgmma_f16x3"): ("FwdWgmmaX3", "flash_fwd_wgmma_x3.cu"),
    ("bwd_dkdv", "wgmma_f16x3"): ("DkdvWgmmaX3", "flash_bwd_wgmma_x3.cu"),
    ("bwd_dq", "wgmma_f16x3"): ("DqWgmmaX3", "flash_bwd_wgmma_x3.cu"),
    ("fwd", "wgmma_f16x1"): ("FwdWgmmaX3", "flash_fwd_wgmma_x3.cu"),        # with F16Products<1>
    ("bwd_dkdv", "wgmma_f16x1"): ("DkdvWgmmaX3", "flash_bwd_wgmma_x3.cu"),
    ("bwd_dq", "wgmma_f16x1"): ("DqWgmmaX3", "flash_bwd_wgmma_x3.cu"),
}


def _kernel_key(spec: KernelSpec) -> tuple[str, str]:
    if spec.family in F16_SPLIT:   # warp-specialized, its own kernels
        return (spec.role, spec.family)
    return (spec.role, "wgmma_ws" if spec.warp_specialized else spec.family)


def kernel_type(spec: KernelSpec) -> str:
    """The C++ kernel struct of one specialization, e.g.
    ``cuflash::FwdMma<__half, 128, 128, 32, 128, 2, cuflash::Variant<false, false, false>>``:
    its template parameters are the kernel's (simt: no stages; dK/dV of simt, mma and the
    warp-specialized wgmma kernel: the dQ mode; the TF32 families and 'wgmma_f16x1': their
    products last)."""
    t, fam = spec.tile, spec.family
    struct, _ = _KERNELS[_kernel_key(spec)]
    args = [spec.ctype, spec.head_dim, t.block_m, t.block_n, spec.threads()]
    if fam != "simt":
        args.append(t.num_stages)
    if spec.role == "bwd_dkdv" and (fam in ("simt", "mma") or
                                    (fam == "wgmma" and spec.warp_specialized)):
        args.append(str(spec.atomic_dq).lower())
    args.append(spec.variant.cpp())
    if spec.float_grads:   # float32 gradients (params.cuh, G): the warp-specialized pair only
        if not spec.warp_specialized or fam != "wgmma":
            raise ValueError(f"{spec.name}: float32 gradients come from the 16-bit "
                             f"warp-specialized backward only")
        args.append("float")
    if fam in PRODUCTS:   # float32 on TF32 tensor cores: the products of a precision (tf32.cuh)
        args.append(f"cuflash::Tf32Products<{PRODUCTS[fam]}>")
    if F16_SPLIT.get(fam, 3) != 3:   # float16 products of split rows (f16x3.cuh; 3: the default)
        args.append(f"cuflash::F16Products<{F16_SPLIT[fam]}>")
    return f"cuflash::{struct}<{', '.join(map(str, args))}>"


def _params_type(spec: KernelSpec) -> str:
    if spec.role == "fwd":
        return f"cuflash::FwdParams<{spec.ctype}, {_acc(spec.dtype)}>"
    grads = ", float" if spec.float_grads else ""
    return f"cuflash::BwdParams<{spec.ctype}, {_acc(spec.dtype)}{grads}>"


_EXPANDED: dict = {}


def _expanded(path: str) -> tuple[str, str]:
    """expand(path) and its sha256, kept while no file of kernels_cu/ changes (their names and
    modification times are the key): ``smem_bytes`` asks once per specialization, and ``cuflash
    compile``'s default_specs ~13000 times (expanding and hashing each time took 3 minutes)."""
    import hashlib
    folder = kernel_dir()
    with os.scandir(folder) as it:
        stamp = tuple(sorted((e.name, e.stat().st_mtime_ns) for e in it))
    key = (str(folder), path)
    hit = _EXPANDED.get(key)
    if hit is None or hit[0] != stamp:
        text = expand(path)
        hit = _EXPANDED[key] = (stamp, text, hashlib.sha256(text.encode()).hexdigest())
    return hit[1], hit[2]


def _sources(spec: KernelSpec) -> tuple[str, str, str]:
    """The kernel's expanded sources, their sha256, and its mask_mod's C++ (defines
    cuflash::MaskMod_<key>; '' without one)."""
    _, path = _KERNELS[_kernel_key(spec)]
    text, digest = _expanded(path)
    return text, digest, f"\n{spec.variant.mod_src}\n" if spec.variant.mod_key else ""


def _body(spec: KernelSpec) -> str:
    """The kernel's sources and, when it has one, its mask_mod's C++ (before any instantiation)."""
    text, _, mod = _sources(spec)
    return text + mod


def tile_lists_name(spec: KernelSpec) -> str:
    """Entry point that builds a mask_mod kernel's tile lists (kernels_cu/mask.cuh, TileLists)."""
    return f"{spec.name}_tiles"


def source(spec: KernelSpec) -> str:
    """The whole translation unit of one specialization: the kernel struct's sources and an
    ``extern "C"`` entry point named after the spec that takes the pass's parameter struct (and,
    with a mask_mod, the entry point that builds its tile lists for this kernel's tiles)."""
    P = _params_type(spec)
    bounds = f"__launch_bounds__({spec.threads()}, {spec.min_blocks()})"
    if spec.variant.cluster > 1:   # split-KV's clusters (kernels_cu/block.cuh, QueryBlock)
        bounds = f"__cluster_dims__({spec.variant.cluster}, 1, 1) {bounds}"
    entry = (f'extern "C" __global__ void {bounds} '
             f"{spec.name}(const __grid_constant__ {P} p) {{\n"
             f"    {kernel_type(spec)}::run(p);\n}}\n")
    if spec.variant.mod_key:
        t = spec.tile
        lists = (f"cuflash::TileLists<{spec.variant.cpp()}, {P}, {t.block_m}, {t.block_n}, "
                 f"{'true' if spec.role == 'bwd_dkdv' else 'false'}>")
        entry += (f'extern "C" __global__ void __launch_bounds__(256) {tile_lists_name(spec)}('
                  f"const __grid_constant__ {P} p) {{\n    {lists}::run(p);\n}}\n")
    return f"// {spec.name}\n{_body(spec)}\n{entry}"


#: Query rows per block of the backward's preprocess (bwd_preprocess.cuh: 256 threads, 8 lanes
#: per row).
PREPROCESS_ROWS = 32


def preprocess_name(dtype: str, packed: bool = False) -> str:
    return f"cuflash_bwd_preprocess_{_SHORT[dtype]}{'_varlen' if packed else ''}"


def preprocess_source(dtype: str, packed: bool = False) -> str:
    """The backward's preprocess (D = rowsum(dO ∘ O)) for equal-length or packed batches."""
    T, name = _CTYPE[dtype], preprocess_name(dtype, packed)
    entry = (f'extern "C" __global__ void __launch_bounds__(256) {name}('
             f"const __grid_constant__ cuflash::BwdParams<{T}, {_acc(dtype)}> p) {{\n"
             f"    cuflash::BwdPreprocess<{T}, {'true' if packed else 'false'}, {PREPROCESS_ROWS}>::run(p);\n}}\n")
    return f"// {name}\n{expand('bwd_preprocess.cuh')}\n{entry}"


def _stage_entry(name: str, threads: int, stage: str) -> str:
    """The entry of a staging kernel (stage_pair.cuh): two float32 arrays a, b with strides
    [sequence, head, row] in elements, heads, S, S_pad, D, and the two outputs; the launch passes
    them in this order (tf32_stage.staged_run, f16x3_stage.stage_pair)."""
    return (f'extern "C" __global__ void __launch_bounds__({threads}) {name}('
            f"const float* a, const float* b, long long as0, long long as1, long long as2, "
            f"long long bs0, long long bs1, long long bs2, int heads, int S, int S_pad, int D, "
            f"float* a_out, float* b_out) {{\n"
            f"    {stage}::run(cuflash::StagePair{{a, b, as0, as1, as2, bs0, bs1, bs2, heads, S, "
            f"S_pad, D}}, a_out, b_out);\n}}\n")


#: 'wgmma_f16s''s float16 copies and their maxima (f16_copy.cuh): entries, threads a block
F16_COPY_NAME, F16_ABSMAX_NAME, F16_COPY_THREADS = "cuflash_f16s_copy4", "cuflash_f16s_absmax4", 256


def f16_copy_source() -> str:
    """y = float16(x · s) and max |x| of contiguous float32 arrays, four floats a thread
    (f16_copy.cuh): one module, two entries."""
    lb = f'extern "C" __global__ void __launch_bounds__({F16_COPY_THREADS}) '
    entry = (f"{lb}{F16_COPY_NAME}(const float4* x, float s, uint2* y, long long n4) {{\n"
             f"    cuflash::scaled_copy4(x, s, y, n4);\n}}\n"
             f"{lb}{F16_ABSMAX_NAME}(const float4* x, long long n4, int* m) {{\n"
             f"    cuflash::absmax4(x, n4, m);\n}}\n")
    return f"// {F16_COPY_NAME}\n{expand('f16_copy.cuh')}\n{entry}"


#: Keys per block of the TF32 wgmma forward's staging (tf32_stage.cuh) and the head dims it
#: stages: one kernel up to each of TF32_STAGE_DIMS, a call taking the narrowest that holds its
#: head dim (a thread's loads wait in registers, KEYS · max_d / threads of each of k and v: the
#: narrow kernels keep more blocks a multiprocessor; NOTES v58). TF32_STAGE_MAX_D is
#: tile.WGMMA_TF32_MAX_D, TF32_STAGE_WIDE_D tile.WGMMA_TF32_WIDE_D.
TF32_STAGE_KEYS, TF32_STAGE_MAX_D, TF32_STAGE_THREADS = 32, 128, 256
TF32_STAGE_WIDE_D = 256
TF32_STAGE_DIMS = (64, TF32_STAGE_MAX_D, TF32_STAGE_WIDE_D)
TF32_STAGE_NAME = "cuflash_tf32_stage"


def tf32_stage_dim(d: int) -> int:
    """The max_d of the staging kernel that stages head dim d: the narrowest of TF32_STAGE_DIMS
    that holds it."""
    for max_d in TF32_STAGE_DIMS:
        if d <= max_d:
            return max_d
    raise ValueError(f"the TF32 wgmma forward stages head dims up to {TF32_STAGE_DIMS[-1]}; "
                     f"got d={d}")


def tf32_stage_name(max_d: int = TF32_STAGE_MAX_D) -> str:
    return TF32_STAGE_NAME if max_d == TF32_STAGE_MAX_D else f"{TF32_STAGE_NAME}_d{max_d}"


def tf32_stage_source(max_d: int = TF32_STAGE_MAX_D) -> str:
    """K rounded and Vᵀ rounded and reordered for the TF32 wgmma forward (tf32_stage.cuh), head
    dims up to max_d."""
    name = tf32_stage_name(max_d)
    entry = _stage_entry(name, TF32_STAGE_THREADS,
                         f"cuflash::Tf32Stage<{TF32_STAGE_KEYS}, {max_d}, {TF32_STAGE_THREADS}>")
    return f"// {name}\n{expand('tf32_stage.cuh')}\n{entry}"


#: The float16-product kernels' staging (f16x3_stage.cuh): the forward's K (per row) and V (per
#: key tile of block_n), one kernel per (block_n, padded head dim) of the forward's tiles; the
#: backward's pairs (q, dout and k, v) per row, F16X3_STAGE_ROWS rows a block, one kernel per
#: padded head dim; each with lo parts ('highest') or without ('tf32'). F16X3_STAGE_THREADS
#: threads a block.
F16X3_STAGE_ROWS = 64
F16X3_STAGE_ROW_DIMS = (64, 128)
F16X3_STAGE_SHAPES = frozenset((n, dp) for dp in F16X3_STAGE_ROW_DIMS for k in F16_SPLIT
                               for n in x3_forward_shapes(dp, k)[0])
F16X3_STAGE_THREADS = 256


def f16x3_stage_name(rows: int, dp: int, b_tile: bool = True, lo: bool = True) -> str:
    return f"cuflash_f16x3_stage_{'n' if b_tile else 'rows'}{rows}_d{dp}{'' if lo else '_hi'}"


def f16x3_stage_source(rows: int, dp: int, b_tile: bool = True, lo: bool = True) -> str:
    """Two float32 arrays split into float16 hi (and lo) rows with their inverse scales for the
    float16-product kernels (f16x3_stage.cuh): blocks of `rows` rows, padded head dim dp; b_tile:
    the second array scaled per block of rows (the forward's V), else per row as the first; lo:
    with the lo parts ('highest'), else hi alone ('tf32')."""
    name = f16x3_stage_name(rows, dp, b_tile, lo)
    entry = _stage_entry(name, F16X3_STAGE_THREADS,
                         f"cuflash::X3Stage<{rows}, {dp}, {F16X3_STAGE_THREADS}, "
                         f"{'true' if b_tile else 'false'}, {'true' if lo else 'false'}>")
    return f"// {name}\n{expand('f16x3_stage.cuh')}\n{entry}"


def f16x3_stage_kernels():
    """(rows, dp, b_tile, lo) of every staging kernel (precompile builds them all)."""
    shapes = [(n, dp, True) for n, dp in F16X3_STAGE_SHAPES] + \
        [(F16X3_STAGE_ROWS, dp, False) for dp in F16X3_STAGE_ROW_DIMS]
    return sorted((*shape, lo) for shape in shapes for lo in (True, False))


# -- facts read from C++ through NVRTC, no device needed --------------------------------------

_GLOBAL = re.compile(r"\.global\s+\.align\s+\d+\s+\.(\w+)\s+(\w+)(?:\[(\d*)\])?\s*=\s*"
                     r"(\{[^}]*\}|-?\d+)\s*;")


def ptx_globals(src: str, name: str) -> dict:
    """The initialized ``__device__`` globals of a translation unit, compiled to PTX by NVRTC
    for a virtual architecture (no GPU needed): name -> int, or bytes for an array (PTX writes
    arrays as .b8 bytes, little-endian)."""
    from cupy_backends.cuda.libs import nvrtc
    prog = nvrtc.createProgram(src, f"{name}.cu", [], [])
    try:
        nvrtc.compileProgram(prog, list(options(("-arch=compute_80",))))
    except Exception as exc:
        raise RuntimeError(f"{name}: NVRTC failed:\n{nvrtc.getProgramLog(prog)}") from exc
    ptx = nvrtc.getPTX(prog)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    out = {}
    for _, var, size, init in _GLOBAL.findall(ptx):
        if init.startswith("{"):   # trailing zeros may be left out of the initializer
            raw = bytes(int(x) & 0xFF for x in init.strip("{}").split(",") if x.strip())
            out[var] = raw.ljust(int(size or len(raw)), b"\0")
        else:
            out[var] = int(init)
    return out


_SMEM: dict = {}


def smem_bytes(spec: KernelSpec) -> int:
    """Dynamic shared memory of a specialization: ``kSmemBytes`` of its C++ kernel struct, the
    one place that says it. Read through NVRTC (about 0.1 s), then kept in memory and on disk
    (keyed by the sources, so an edit of a kernel is a new key)."""
    import hashlib
    import json
    ktype = kernel_type(spec)
    text, digest, mod = _sources(spec)
    key = hashlib.sha256(f"{ktype}\0{digest}\0{mod}".encode()).hexdigest()[:24]
    if key in _SMEM:
        return _SMEM[key]
    path = cache_dir() / "smem" / f"{key}.json"
    try:
        _SMEM[key] = int(json.loads(path.read_text())["bytes"])
        return _SMEM[key]
    except (OSError, ValueError, KeyError):
        pass
    src = f"{text}{mod}\nextern \"C\" __device__ int cuflash_smem_bytes = {ktype}::kSmemBytes;\n"
    value = ptx_globals(src, f"smem_{spec.name}")["cuflash_smem_bytes"]
    _SMEM[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"name": spec.name, "bytes": value}))
        os.replace(tmp, path)
    except OSError:
        pass   # a read-only cache only costs the next process a recompile
    return value


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
def get_tile_lists(spec: KernelSpec, device_id: int):
    """The entry point that builds a mask_mod kernel's tile lists (same module as the kernel)."""
    get_kernel(spec, device_id)
    if spec.arch is None:
        mod = _module(source(spec), device_id)
    else:
        mod = _module_from_cubin(str(cubin_for_arch(source(spec), spec.name, spec.arch)),
                                 device_id)
    return mod.get_function(tile_lists_name(spec))


@functools.lru_cache(maxsize=None)
def get_f16_copy(device_id: int, name: str = F16_COPY_NAME):
    return _module(f16_copy_source(), device_id).get_function(name)


@functools.lru_cache(maxsize=None)
def get_f16x3_stage(device_id: int, rows: int, dp: int, b_tile: bool = True, lo: bool = True):
    return _module(f16x3_stage_source(rows, dp, b_tile, lo), device_id).get_function(
        f16x3_stage_name(rows, dp, b_tile, lo))


@functools.lru_cache(maxsize=None)
def get_tf32_stage(device_id: int, max_d: int = TF32_STAGE_MAX_D):
    return _module(tf32_stage_source(max_d), device_id).get_function(tf32_stage_name(max_d))


@functools.lru_cache(maxsize=None)
def get_preprocess(dtype: str, device_id: int, packed: bool = False):
    return _module(preprocess_source(dtype, packed), device_id).get_function(
        preprocess_name(dtype, packed))


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

    @property
    def serialized(self) -> bool:
        """Whether ptxas serialized this kernel's wgmma (messages C7510-C7520, "Potential
        Performance Loss: wgmma.mma_async instructions are serialized ..."): it then waits for
        each product before the next, and nothing overlaps the tensor cores (NOTES v16: the
        8-warp forward ran so until v16)."""
        return "wgmma.mma_async instructions are serialized" in self.log


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
    m = re.search(rf"Function properties for {re.escape(name)}\s*$", log, re.M)
    section = log[m.start():] if m else log
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
