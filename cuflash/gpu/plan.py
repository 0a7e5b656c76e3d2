"""What a kernel launch needs, decided on the host: specialization, name, shared memory, grid.

One :class:`KernelSpec` is one compiled specialization: kernel family and role, dtype, padded
head_dim, TileConfig, variant (mask kind, softcap, ALiBi, mask_mod), dQ mode. Its name says all of
that, so profiles and compile reports read plainly (``cuflash_simt_fwd_f16_d128_m64_n64_w8_s1_causal``).
The shared-memory budget is the kernel's own (its C++ layout, read through NVRTC by
``build.smem_bytes``); the validity rules of each family's thread mapping are checked here.
"""
from __future__ import annotations

import dataclasses
import math


from .. import device
from .._xp import accum_dtype, dtype_name, resolve_dtype
from ..precision import PRODUCTS, of_family
from ..tile import (F16_SCALED, F16_SPLIT, TF32_BWD_MAX_D, WGMMA_F16X3_BWD_MAX_D, WGMMA_F16X3_MAX_D, WGMMA_TF32_MAX_D,
                    WGMMA_TF32_WIDE_D, TileConfig, x3_backward_block_m, x3_backward_stages, x3_dq_block_n,
                    x3_forward_shapes,
                    check_dtype, wgmma_forward_tiles)

ROLES = ("fwd", "bwd_dkdv", "bwd_dq")
_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
_CTYPE = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double"}

#: Opt-in shared memory per block by compute capability (bytes), for checks without a device
#: (cuflash/device.py, ASSUMED).
SMEM_LIMIT = {arch: dev.smem_per_block for arch, dev in device.ASSUMED.items()}


#: 'tf32x3' compiles head dims above this for 256: at 192 and 224 every tile of 64 query rows
#: spills a few bytes (NVRTC 13.0: 4-16 B, sm_80 and sm_90; 255 registers), at 256 64 × 32 does not
TF32X3_WIDE = 160


def head_dim_pad(d: int, family: str) -> int:
    """Head dim the kernel is compiled for: d rounded up to a multiple of 32 (the extra columns are
    zero), so one specialization serves up to four head dims; 64 for 'wgmma', whose swizzled
    shared-memory panels are 64 elements (128 bytes) wide; 256 for 'tf32x3' above
    TF32X3_WIDE; 192 or 256 for 'wgmma_tf32' above WGMMA_TF32_MAX_D (tile.WGMMA_TF32_WIDE_D)."""
    if family == "tf32x3" and d > TF32X3_WIDE:
        return 256
    if family == "wgmma_tf32" and WGMMA_TF32_MAX_D < d <= WGMMA_TF32_WIDE_D:
        return 192 if d <= 192 else 256   # wgmma's widths above 128 (wgmma.cuh)
    unit = 64 if family in ("wgmma", *F16_SPLIT) else 32
    return unit * math.ceil(d / unit)


#: Architecture each kernel family is compiled for; None = the device's own (CuPy chooses).
#: wgmma exists only on sm_90a, whose code runs on compute capability 9.0 devices alone.
FAMILY_ARCH = {"simt": None, "mma": None, "wgmma": "sm_90a", "dmma": None, "tf32": None,
               "tf32x3": None, "wgmma_tf32": "sm_90a",
               **dict.fromkeys((*F16_SPLIT, F16_SCALED), "sm_90a")}

#: The oldest architecture each family runs on (mma.sync m16n8k16, m16n8k8 .tf32 and m8n8k4 .f64:
#: sm_80)
FAMILY_MIN_SM = {"simt": 0, "mma": 80, "wgmma": 90, "dmma": 80, "tf32": 80, "tf32x3": 80,
                 "wgmma_tf32": 90, **dict.fromkeys((*F16_SPLIT, F16_SCALED), 90)}
#: What the sm_80 families need it for (validate; the Hopper families build for sm_90a itself)
_SM80_NEEDS = {"mma": "mma.sync .f16 / .bf16 and cp.async", "dmma": "mma.sync .f64",
               "tf32": "mma.sync .tf32", "tf32x3": "mma.sync .tf32"}

#: The float32 forwards on Hopper's warpgroup tensor cores -> the family that runs the rest of
#: their precision (its backward, KV caches, packed batches, split-KV): they run dense batches in
#: one pass only (_validate_float32_wgmma, specs_for, ops._forward)
FLOAT32_WGMMA_FORWARDS = {"wgmma_tf32": "tf32", "wgmma_f16x3": "tf32x3", "wgmma_f16x1": "tf32"}

#: Those of them with a backward too, of dense batches in one pass (the deterministic pair:
#: flash_bwd_wgmma_x3.cu)
FLOAT32_WGMMA_BACKWARDS = tuple(F16_SPLIT)


#: Variant.cache -> the C++ CacheKind (kernels_cu/mask.cuh)
_CACHE_KINDS = {"": "cuflash::kNoCache", "cache": "cuflash::kCache",
                "paged": "cuflash::kPagedCache"}
#: Variant.cluster: split-KV's blocks per thread-block cluster (1: none; kernels_cu/mask.cuh)
SPLIT_CLUSTERS = (1, 2, 4, 8)


@dataclasses.dataclass(frozen=True)
class Variant:
    """What a kernel is compiled for beyond its tile: the mask's kind (the band's bounds are
    run-time values), the score modifiers, a custom mask_mod (its key and C++ source), whether
    the batch is packed (sequence lengths read from cu_seqlens: kernels_cu/seq.cuh), for the
    forward, split-KV and a KV cache ('cache': sequence b holds seqused_k[b] keys; 'paged': in
    pages through block_table; kernels_cu/params.cuh), and whether a packed batch's keys share the
    queries' offsets (``same_lens``: cu_seqlens_k is cu_seqlens_q, self-attention; the kernels
    read one array and each sequence's diagonal is the main one at compile time)."""

    mask: str = "dense"          # 'dense', 'causal' or 'window'
    softcap: bool = False
    alibi: bool = False
    mod_key: str | None = None   # MaskMod.key()
    mod_src: str | None = dataclasses.field(default=None, compare=False, repr=False)
    packed: bool = False
    split: bool = False
    cache: str = ""              # '', 'cache' or 'paged'
    same_lens: bool = False      # packed, cu_seqlens_k is cu_seqlens_q
    cluster: int = 1             # split-KV's splits in clusters of this many blocks (sm_90)

    def __post_init__(self):
        if self.same_lens and not self.packed:
            raise ValueError("Variant.same_lens=True needs packed=True (it says where a packed "
                             "batch's keys start)")
        if self.mask not in ("dense", "causal", "window"):
            raise ValueError(f"Variant.mask={self.mask!r} must be 'dense', 'causal' or 'window'")
        if self.cache not in _CACHE_KINDS:
            raise ValueError(f"Variant.cache={self.cache!r} must be one of {list(_CACHE_KINDS)}")
        if self.cluster not in SPLIT_CLUSTERS or (self.cluster > 1 and not self.split):
            raise ValueError(f"Variant.cluster={self.cluster!r} must be one of {SPLIT_CLUSTERS}, "
                             f"and more than 1 only with split=True (split-KV's splits)")

    @classmethod
    def of(cls, v) -> "Variant":
        """A Variant from a Variant or a bool (causal or dense)."""
        return v if isinstance(v, cls) else cls("causal" if v else "dense")

    def suffix(self) -> str:
        """What a kernel name says about the variant: '', '_causal', '_window_softcap', ..."""
        out = "" if self.mask == "dense" else f"_{self.mask}"
        out += "_softcap" if self.softcap else ""
        out += "_alibi" if self.alibi else ""
        out += ("_varlen_self" if self.same_lens else "_varlen") if self.packed else ""
        out += "_split" if self.split else ""
        out += f"_c{self.cluster}" if self.cluster > 1 else ""
        out += {"": "", "cache": "_kvcache", "paged": "_paged"}[self.cache]
        return out + (f"_mm{self.mod_key}" if self.mod_key else "")

    def cpp(self) -> str:
        """The C++ Variant type (kernels_cu/mask.cuh)."""
        mod = f"cuflash::MaskMod_{self.mod_key}" if self.mod_key else "cuflash::NoMaskMod"
        b = lambda x: "true" if x else "false"
        kind = {"dense": "cuflash::kDense", "causal": "cuflash::kCausal",
                "window": "cuflash::kWindow"}[self.mask]
        split = f", {b(self.split)}" if self.split or self.cache or self.cluster > 1 else ""
        cache = f", {_CACHE_KINDS[self.cache]}" if self.cache or self.cluster > 1 else ""
        cache += f", {self.cluster}" if self.cluster > 1 else ""
        pack = ("cuflash::kUnpacked" if not self.packed else
                "cuflash::kPackedSelf" if self.same_lens else "cuflash::kPacked")
        return (f"cuflash::Variant<{kind}, {b(self.softcap)}, {b(self.alibi)}, "
                f"{pack}, {mod}{split}{cache}>")


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """One compiled kernel specialization."""

    role: str            # 'fwd', 'bwd_dkdv' or 'bwd_dq'
    dtype: str           # 'float16', 'bfloat16', 'float32', 'float64'
    head_dim: int        # compiled (padded) head dim
    tile: TileConfig
    variant: Variant = Variant()
    atomic_dq: bool = False   # bwd_dkdv only: also accumulate dQ with atomics
    #: the backward's gradients in float32 instead of dtype (tile.F16_SCALED: the 16-bit
    #: warp-specialized pair on float16 copies of float32 inputs; params.cuh, G)
    float_grads: bool = False

    @property
    def family(self) -> str:
        return self.tile.kernel

    @property
    def causal(self) -> bool:
        return self.variant.mask != "dense"

    @property
    def vec(self) -> int:
        """Accumulator elements per 16-byte shared-memory vector (4 floats, 2 doubles)."""
        return 16 // accum_dtype(resolve_dtype(self.dtype)).itemsize

    @property
    def name(self) -> str:
        t = self.tile
        name = (f"cuflash_{t.kernel}_{self.role}_{_SHORT[self.dtype]}_d{self.head_dim}"
                f"_m{t.block_m}_n{t.block_n}_w{t.num_warps}_s{t.num_stages}")
        if self.float_grads:
            name += "_g32"
        name += self.variant.suffix()
        if self.role == "bwd_dkdv" and self.atomic_dq:
            name += "_atomicdq"
        return name

    @property
    def warp_specialized(self) -> bool:
        """A wgmma kernel with a producer warpgroup beside its consumer warpgroups: the forward
        and the dQ kernel with block_m / 64 of them (kernels_cu/flash_fwd_wgmma_ws.cu,
        flash_bwd_wgmma_ws.cu; block_m = 16·num_warps - 64), the dK/dV kernel with block_n / 64
        (flash_bwd_wgmma_ws.cu; block_n = 16·num_warps - 64)."""
        if self.role in ("fwd", "bwd_dq"):
            return self.tile.warp_specialized
        return self.tile.warp_specialized_dkdv

    @property
    def reads_tensor_maps(self) -> bool:
        """Whether the kernel's producer asks the copy engine for its tiles where the run can be
        mapped (ops builds the tensor maps): the 16-bit warp-specialized kernels. The float32
        ones (FLOAT32_WGMMA_FORWARDS) copy by cp.async and round or split what lands."""
        return self.warp_specialized and self.family not in FLOAT32_WGMMA_FORWARDS

    @property
    def arch(self) -> str | None:
        """The architecture this spec must be compiled for, or None for the device's own."""
        return FAMILY_ARCH[self.family]

    @property
    def ctype(self) -> str:
        return _CTYPE[self.dtype]

    def smem_bytes(self) -> int:
        """Dynamic shared memory of the kernel: its C++ layout's kSmemBytes (NVRTC, cached)."""
        from . import build
        return build.smem_bytes(self)

    def threads(self) -> int:
        return self.tile.num_threads

    def min_blocks(self) -> int:
        """Blocks per SM the kernel is compiled to fit (``__launch_bounds__``'s second argument):
        a warp-specialized kernel's by ``TileConfig.blocks_per_sm`` (2 for a tile of one
        consumer warpgroup); else 2 for a wgmma forward whose shared memory leaves room
        for two (the d <= 64 tiles, chosen at two blocks per SM by the tile ablation) and whose
        threads keep 128 registers there (65536 / (2 · threads): 8 warps at most; a 16-warp
        tile at 64 spilled 1 KB and had its wgmma serialized); 1 otherwise."""
        if self.warp_specialized:
            return self.tile.blocks_per_sm(backward=self.role == "bwd_dkdv")
        if self.family == "wgmma" and self.role == "fwd" and \
                self.threads() <= 256 and self.tile.block_n + self.head_dim <= 128 and \
                device.assumed("sm_90").blocks_per_sm(self.smem_bytes()) >= 2:
            return 2   # S and O take (block_n + head_dim) / 2 registers per thread: <= 64
        return 1


# -- SIMT thread mappings (kernels_cu/simt_tiles.cuh): validity of a tile for one role ----------

def _dot_tile_ok(rows, cols, nt):
    """DotTile<rows, cols>: TN = min(4, rows·cols/nt) strided columns per thread, cols/TN
    threads per row group (a power of two <= 32)."""
    tn = min(4, rows * cols // nt)
    if tn < 1:
        return f"a {rows}×{cols} score tile has fewer elements than {nt} threads"
    ct = cols // tn
    if ct > 32 or nt % ct or ct & (ct - 1):
        return f"{cols} columns need cols/{tn} <= 32 threads per row group dividing {nt} threads"
    rt = nt // ct
    if rows % rt:
        return f"{rows} rows do not split over {rt} row groups ({nt} threads, {ct} per row)"
    return None


def _outer_ok(rows, dp, vec, nt):
    """OuterAcc<rows, dp>: CTX column threads of `vec`-wide chunks, rows split over the rest."""
    ctx = 16 if (dp // vec) % 16 == 0 else 8
    rt = nt // ctx
    if nt % ctx or rows % rt:
        return f"{rows} rows × {dp} cols do not split over {nt} threads ({ctx} per row)"
    return None


def validate(spec: KernelSpec, smem_limit: int | None = None, arch: str | None = None) -> None:
    """Raise ValueError naming the tile, head_dim and the reason if the spec cannot run (on a GPU
    of architecture `arch`, e.g. 'sm_90', with `smem_limit` bytes of shared memory per block)."""
    t, dp = spec.tile, spec.head_dim
    where = f"TileConfig {t.short()} for head_dim={dp}, dtype={spec.dtype} ({spec.role})"
    try:
        check_dtype(t, spec.dtype)     # the family's dtypes (tile.FAMILY_DTYPES)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if spec.arch is not None and arch is not None and arch.rstrip("a") != spec.arch.rstrip("a"):
        raise ValueError(f"{where}: kernel={t.kernel!r} runs only on {spec.arch.rstrip('a')} "
                         f"GPUs (Hopper), this one is {arch}")
    if spec.family in _SM80_NEEDS and arch is not None and \
            _sm(arch) < FAMILY_MIN_SM[spec.family]:
        raise ValueError(f"{where}: {_SM80_NEEDS[spec.family]} needs "
                         f"sm_{FAMILY_MIN_SM[spec.family]} or later, this GPU is {arch}")
    if spec.family == "simt":
        nt, vec, bm, bn = t.num_threads, spec.vec, t.block_m, t.block_n
        if t.num_stages != 1:
            raise ValueError(f"{where}: the simt kernels are single-stage; use num_stages=1")
        dot = {"fwd": (bm, bn), "bwd_dkdv": (bn, bm), "bwd_dq": (bm, bn)}[spec.role]
        outers = {"fwd": [bm], "bwd_dkdv": [bn] + ([bm] if spec.atomic_dq else []),
                  "bwd_dq": [bm]}[spec.role]
        problems = [_dot_tile_ok(*dot, nt)] + [_outer_ok(r, dp, vec, nt) for r in outers]
        problems = [p for p in problems if p]
        if problems:
            raise ValueError(f"{where}: {'; '.join(problems)}")
    elif spec.family == "dmma":
        _validate_dmma(spec, where, arch)
    elif spec.family in PRODUCTS:
        _validate_tf32(spec, where, arch)
    elif spec.family == "wgmma_tf32":
        _validate_wgmma_tf32(spec, where)
    elif spec.family in F16_SPLIT:
        _validate_wgmma_f16x3(spec, where)
    else:
        if spec.family == "wgmma":
            _validate_wgmma(spec, where)
        else:
            _validate_mma(spec, where)
    if spec.variant.cluster > 1:
        problem = _cluster_problem(spec.family, spec.head_dim, arch)
        if problem:
            raise ValueError(f"{where}: split-KV in clusters of {spec.variant.cluster} blocks: "
                             f"{problem}")
    if smem_limit is not None and spec.smem_bytes() > smem_limit:
        raise ValueError(f"{where}: needs {spec.smem_bytes()} bytes of shared memory per block, "
                         f"the device allows {smem_limit}")


#: The families whose forward merges split-KV in thread-block clusters: the 16-bit mma kernel
#: (flash_fwd_mma.cu), which the decode steps run (NOTES v91). The TF32 kernels on the same
#: source compile with clusters but no path runs them so (float32 decodes on the CUDA cores):
#: not offered until a GPU test does.
CLUSTER_FAMILIES = ("mma",)


def _cluster_problem(family: str, head_dim: int, arch: str | None) -> str | None:
    """Why a forward of `family` cannot merge split-KV in clusters (None: it can)."""
    if family not in CLUSTER_FAMILIES:
        return f"kernel={family!r} merges its splits through L2 (clusters: {CLUSTER_FAMILIES})"
    if arch is not None and _sm(arch) < 90:
        return f"thread-block clusters need sm_90 or later, this GPU is {arch}"
    if head_dim % 4:
        return f"the merge reads 4-column chunks: head_dim={head_dim} is not a multiple of 4"
    return None


def split_cluster(family: str, head_dim: int, num_splits: int, arch: str, most: int) -> int:
    """Blocks per thread-block cluster for a forward of `num_splits` splits: num_splits itself
    where one cluster of at most `most` blocks holds them (2, 4 or 8) and the family, head dim
    and architecture allow clusters, else 1 (the splits merge through L2,
    kernels_cu/split_combine.cuh). Clusters of 8 holding 8 of 16-128 splits, their partials
    then merged through L2, measured 0.94-1.08x the L2 merge alone: not taken (NOTES v91)."""
    if num_splits not in SPLIT_CLUSTERS[1:] or num_splits > most or \
            _cluster_problem(family, head_dim, arch):
        return 1
    return num_splits


def cluster_spec(spec: KernelSpec, num_splits: int, arch: str, most: int,
                 smem_limit: int) -> KernelSpec:
    """`spec` (a split-KV forward of `num_splits` splits merging through L2) as the kernel whose
    splits merge in one thread-block cluster, where split_cluster offers one and that kernel's
    shared memory (the cluster's partials, rows x (head_dim + 8) floats and an lse a row, on top
    of spec's) fits smem_limit; else spec itself. (A 32-row tile at head_dim 256 with 3 stages
    fits alone, 213008 bytes on sm_90, but not with its partials: 246928.)"""
    c = split_cluster(spec.family, spec.head_dim, num_splits, arch, most)
    if c == 1:
        return spec
    clustered = dataclasses.replace(spec, variant=dataclasses.replace(spec.variant, cluster=c))
    return clustered if clustered.smem_bytes() <= smem_limit else spec


def _validate_float32_wgmma(spec: KernelSpec, where: str) -> None:
    """What every float32 wgmma kernel asks (FLOAT32_WGMMA_FORWARDS): float32 inputs, the
    forward (or a backward where FLOAT32_WGMMA_BACKWARDS has one), a dense batch in one pass."""
    kernel, prec, v = spec.tile.kernel, of_family(spec.tile.kernel), spec.variant
    alt = FLOAT32_WGMMA_FORWARDS[kernel]
    if spec.role != "fwd" and kernel not in FLOAT32_WGMMA_BACKWARDS:
        raise ValueError(f"{where}: kernel={kernel!r} is a forward kernel; the backward of "
                         f"precision={prec!r} runs kernel={alt!r}")
    if v.split or v.cache or v.packed:
        raise ValueError(f"{where}: kernel={kernel!r} runs neither split-KV, a KV cache nor a "
                         f"packed batch (kernel={alt!r} does)")


def _validate_wgmma_tf32(spec: KernelSpec, where: str) -> None:
    """flash_fwd_wgmma_tf32.cu: float32 read as TF32 by wgmma, a forward of dense batches."""
    t = spec.tile
    _validate_float32_wgmma(spec, where)
    if t.warp_specialized:   # flash_fwd_wgmma_ws.cu: a producer and two consumer warpgroups
        if t.block_m != 128:
            raise ValueError(f"{where}: the warp-specialized TF32 forward has two consumer "
                             f"warpgroups: block_m = 128, num_warps = 12")
        if not 2 <= t.num_stages <= 4:
            raise ValueError(f"{where}: the warp-specialized TF32 forward needs 2 to 4 stages")
    elif t.num_warps % 4 or t.block_m != 16 * t.num_warps:
        raise ValueError(f"{where}: block_m must be 64 rows per warpgroup of 4 warps "
                         f"(block_m = 16·num_warps, num_warps a multiple of 4; or a producer "
                         f"warpgroup more: block_m = 128, num_warps = 12)")
    elif t.num_stages not in (2, 3):
        raise ValueError(f"{where}: the TF32 wgmma forward uses 2 stages (S_j, then P_j V_j) or 3 "
                         f"(S_j beside P_(j-1) V_(j-1)), tile j+1 loading meanwhile")
    if t.block_n % 32:
        raise ValueError(f"{where}: block_n must be a multiple of 32 (128-byte panels of float32)")
    if spec.head_dim > WGMMA_TF32_WIDE_D:
        raise ValueError(f"{where}: the TF32 wgmma forward takes head dims up to "
                         f"{WGMMA_TF32_WIDE_D}")
    if spec.head_dim > WGMMA_TF32_MAX_D and (t.warp_specialized or t.block_n != 32):
        raise ValueError(f"{where}: above head dim {WGMMA_TF32_MAX_D} the TF32 wgmma forward runs "
                         f"its 4- and 8-warp kernel with key tiles of 32 (tile.wgmma_tf32_wide_tiles)")


def _validate_wgmma_f16x3(spec: KernelSpec, where: str) -> None:
    """flash_fwd_wgmma_x3.cu, flash_bwd_wgmma_x3.cu: float32 as float16 products of split rows
    (tile.F16_SPLIT: 'highest' three a pair, 'tf32' one), warp-specialized kernels of dense
    batches (the backward: d <= 128, its deterministic pair)."""
    t, k = spec.tile, spec.family
    _validate_float32_wgmma(spec, where)
    if spec.role != "fwd":
        _validate_wgmma_f16x3_backward(spec, where)
        return
    block_ns, stages = x3_forward_shapes(spec.head_dim, k)
    if not t.warp_specialized or t.num_stages not in stages:
        raise ValueError(f"{where}: kernel={k!r} is warp-specialized: block_m = 128 on "
                         f"num_warps = 12 (or 64 on 8, two blocks a multiprocessor), "
                         f"num_stages = {_either(stages)}")
    if t.block_n not in block_ns:
        raise ValueError(f"{where}: kernel={k!r} takes block_n = {_either(sorted(block_ns))} "
                         f"at d = {spec.head_dim} (tile.x3_forward_shapes: a consumer's registers)")
    if spec.head_dim > WGMMA_F16X3_MAX_D:
        raise ValueError(f"{where}: kernel={k!r} takes head dims up to "
                         f"{WGMMA_F16X3_MAX_D}")
    _check_two_blocks(spec, where)


def _validate_wgmma_f16x3_backward(spec: KernelSpec, where: str) -> None:
    t, k = spec.tile, spec.family
    if spec.atomic_dq:
        raise ValueError(f"{where}: {_f16x3_atomic(k)}")
    if spec.head_dim > WGMMA_F16X3_BWD_MAX_D:
        raise ValueError(f"{where}: kernel={k!r}'s backward takes head dims up to "
                         f"{WGMMA_F16X3_BWD_MAX_D} (its registers hold dK and dV beside the "
                         f"sums; kernel={FLOAT32_WGMMA_FORWARDS[k]!r} is its precision's backward "
                         f"of wider heads)")
    m = x3_backward_block_m(spec.head_dim)   # 64 at d <= 64, 32 above
    stages = x3_backward_stages(spec.head_dim, k)
    said = _either(stages) + " stages"
    if spec.role == "bwd_dkdv":
        if not t.warp_specialized_dkdv or t.block_m != m:
            raise ValueError(f"{where}: kernel={k!r}'s dK/dV kernel at d = "
                             f"{spec.head_dim} is warp-specialized: block_m = {m}, block_n = 128 "
                             f"on num_warps = 12 (or 64 on 8, two blocks a multiprocessor; its dQ "
                             f"kernel takes the tile transposed)")
        if t.num_stages not in stages:
            raise ValueError(f"{where}: kernel={k!r}'s dK/dV kernel at d = "
                             f"{spec.head_dim} takes {said}")
    elif not t.warp_specialized or \
            t.block_n != x3_dq_block_n(spec.head_dim, k) or t.num_stages not in stages:
        raise ValueError(f"{where}: kernel={k!r}'s dQ kernel at d = {spec.head_dim} takes "
                         f"the dK/dV tile transposed: block_m = 128 on num_warps = 12 (or 64 on "
                         f"8), block_n = {x3_dq_block_n(spec.head_dim, k)}, {said}")
    _check_two_blocks(spec, where)


def _check_two_blocks(spec: KernelSpec, where: str) -> None:
    """A warp-specialized kernel of one consumer warpgroup is compiled for two blocks a
    multiprocessor (TileConfig.blocks_per_sm): refused where two blocks' shared memory does not
    fit the assumed sm_90 device (it would run one, its producer starved of registers for
    nothing)."""
    if spec.min_blocks() == 2 and device.assumed("sm_90").blocks_per_sm(spec.smem_bytes()) < 2:
        raise ValueError(f"{where}: kernel={spec.family!r} on {spec.tile.num_warps} warps runs "
                         f"two blocks a multiprocessor, and this tile's {spec.smem_bytes()} bytes "
                         f"of shared memory do not fit twice (fewer stages or keys, or 12 warps)")


def _either(values) -> str:
    """'2', '2 or 3', '32, 64 or 128'."""
    *rest, last = map(str, values)
    return f"{', '.join(rest)} or {last}" if rest else last


def _f16x3_atomic(kernel: str) -> str:
    """Why a float16-product backward (tile.F16_SPLIT) refuses deterministic=False."""
    return (f"kernel={kernel!r}'s backward computes dQ in its own pass: use deterministic=True "
            f"(or kernel='simt' / 'mma' tiles for atomic dQ)")

_WGMMA_ATOMIC = ("the 4-warp and 8-warp wgmma backwards compute dQ in their own pass; use "
                 "deterministic=True, a warp-specialized tile (block_n = 128, num_warps = 12: "
                 "dQ by atomics in the dK/dV kernel) or a kernel='mma' tile for atomic dQ")


def _validate_wgmma(spec: KernelSpec, where: str) -> None:
    t = spec.tile
    if spec.atomic_dq and not (spec.role == "bwd_dkdv" and spec.warp_specialized):
        raise ValueError(f"{where}: {_WGMMA_ATOMIC}")
    if spec.atomic_dq and t.block_m != 64:
        raise ValueError(f"{where}: the warp-specialized dK/dV kernel adds dQ by atomics with "
                         f"block_m = 64 queries per step")
    if t.num_warps % 4:
        raise ValueError(f"{where}: num_warps must be a multiple of 4 (warpgroups)")
    if spec.role != "fwd" and spec.warp_specialized:
        # flash_bwd_wgmma_ws.cu: 128 keys (dK/dV) or queries (dQ) on two consumer warpgroups
        # (12 warps), or 64 on one (8 warps; warp_specialized leaves no other power of two)
        kernel = "dK/dV" if spec.role == "bwd_dkdv" else "dQ"
        if t.num_warps == 8 and spec.head_dim > 64:
            # one consumer warpgroup, two blocks: 208 registers a consumer (barrier.cuh,
            # RegisterSplit); at d = 128 its dK/dV kernels spilled 0.6-1.6 KB, wgmma serialized
            raise ValueError(f"{where}: the warp-specialized {kernel} kernel on one consumer "
                             f"warpgroup (num_warps = 8) takes head dims up to 64 (wider, its "
                             f"consumers' registers spill)")
        if not 2 <= t.num_stages <= 4:
            raise ValueError(f"{where}: the warp-specialized {kernel} kernel needs 2 to 4 stages")
        # its producer copies the streamed side (dK/dV: query tiles; dQ: key tiles, the
        # dK/dV tile's block_m transposed) in boxes of 64 rows (tma.cuh's whole boxes)
        streamed, side = ((t.block_m, "block_m") if spec.role == "bwd_dkdv" else
                          (t.block_n, "block_n"))
        if streamed != 64:
            # boxes of 64 rows; and more a step spill (the consumers' Sᵀ and dPᵀ or S and dP
            # grow with it: about 0.9 KB at 128, 13 KB at 256; fuzzing, session 39)
            raise ValueError(f"{where}: the warp-specialized {kernel} kernel streams "
                             f"{side} = {streamed} rows a step, and takes 64 (one box of 64; "
                             f"more spill its consumers' registers): the pair's dK/dV tile "
                             f"takes block_m = 64 (its dQ kernel takes the tile transposed)")
        _check_two_blocks(spec, where)
    elif spec.role == "bwd_dkdv":
        if t.block_n != 16 * t.num_warps:
            raise ValueError(f"{where}: block_n must be 64 keys per warpgroup of 4 warps "
                             f"(block_n = 16·num_warps; or a producer warpgroup more: "
                             f"block_n = 16·num_warps - 64)")
    elif spec.warp_specialized:
        v = spec.variant
        if v.split or v.cache:
            raise ValueError(f"{where}: the warp-specialized forward (block_m = 16·num_warps - 64) "
                             f"runs neither split-KV nor a KV cache; use block_m = 16·num_warps")
        if t.block_m != 128 and not (t.block_m == 64 and spec.head_dim <= 128) and \
                not (t.block_m == 192 and spec.head_dim <= 64):
            # flash_fwd_wgmma_ws.cu: two consumer warpgroups taking turns (12 warps), or one
            # (8 warps) run two blocks a multiprocessor (TileConfig.blocks_per_sm) at d <= 128:
            # compiled clean at d = 64 and 128 on 176 consumer registers; wider, O alone takes
            # d / 2 of them (not compiled: refused). Three (16 warps) at d <= 64, on 160
            # registers a consumer thread (v89)
            raise ValueError(f"{where}: the warp-specialized forward has two consumer "
                             f"warpgroups (block_m = 128, num_warps = 12), at head dims up to "
                             f"128 one (block_m = 64, num_warps = 8), or at head dims up to 64 "
                             f"three (block_m = 192, num_warps = 16)")
        if copy_engine_only(t) and not copy_engine_only_runs(v):
            raise ValueError(f"{where}: the forward of three consumer warpgroups (block_m = "
                             f"192) runs unpacked batches without softcap (its producer has room "
                             f"for the copy engine's loads only, its consumers none for softcap); "
                             f"take block_m = 64, num_warps = 8")
        if t.num_stages < 2:
            raise ValueError(f"{where}: the warp-specialized forward needs 2 to 4 stages")
        _check_two_blocks(spec, where)
    elif t.block_m != 16 * t.num_warps:
        raise ValueError(f"{where}: block_m must be 64 rows per warpgroup of 4 warps "
                         f"(block_m = 16·num_warps, num_warps a multiple of 4; a forward may "
                         f"add a producer warpgroup: block_m = 16·num_warps - 64)")
    elif spec.role == "fwd" and t.num_stages < 3:
        raise ValueError(f"{where}: the wgmma forward needs 3 or 4 stages (K/V buffers: tile "
                         f"j+1 loads while tiles j and j-1 are read)")
    if spec.role != "fwd" and not spec.warp_specialized and t.num_stages > 2:
        raise ValueError(f"{where}: the wgmma backward kernels use 1 or 2 stages")
    if spec.role != "fwd" and spec.head_dim > 128:
        # a warp's dK and dV (2·16·d floats) beside Sᵀ and dPᵀ: 0.5-9 KB of spills at d = 136-256
        # (NVRTC 13, sm_90; fuzzing, session 39). The default backward there is the CUDA cores'.
        raise ValueError(f"{where}: the wgmma backward takes head dims up to 128 (wider, its "
                         f"consumers' dK and dV spill registers); leave tile=None for the "
                         f"CUDA-core backward")
    if spec.head_dim > 256:
        raise ValueError(f"{where}: head_dim above 256 does not fit one wgmma (n <= 256)")
    if t.num_warps > 12 and spec.head_dim > 192:
        # 512 threads leave 128 registers a thread, fewer than ptxas needs for a wgmma of
        # n = head_dim > 192 and its accumulators (C7602)
        raise ValueError(f"{where}: num_warps = {t.num_warps} leaves 128 registers a thread, "
                         f"too few at head_dim {spec.head_dim} (> 192): use 12 warps or fewer")


def copy_engine_only(tile: TileConfig) -> bool:
    """Whether a forward tile's producer loads by the copy engine only (tensor maps, made by
    the host for every launch of it; flash_fwd_wgmma_ws.cu, kTmaOnly): the warp-specialized
    forward of three consumer warpgroups, block_m = 192, whose producer keeps 32 registers."""
    return tile.warp_specialized and tile.block_m == 192


def copy_engine_only_runs(variant: Variant) -> bool:
    """Whether a copy_engine_only tile runs this variant: an unpacked batch (packed ones have no
    tensor maps) without softcap (it spilled the consumers' 160 registers 52-356 bytes, NVRTC
    13.0; v89). The plan refuses the others (_validate_wgmma), the compile gate skips them
    (precompile.register_tight_variants) and the default does not take the tile for them
    (api._default)."""
    return not variant.packed and not variant.softcap


def without_tensor_maps(tile: TileConfig, head_dim: int) -> TileConfig:
    """What a forward runs in place of a copy_engine_only tile where the copy engine cannot read
    the arrays (tma.map_shape: a broadcast axis, a stride that is not a multiple of 16 bytes):
    the forward's tile of one consumer warpgroup for this (padded) head_dim. Other tiles as
    they are."""
    if not copy_engine_only(tile):
        return tile
    return wgmma_forward_tiles(head_dim, short=True)[0]


def without_producer(tile: TileConfig, head_dim: int) -> TileConfig:
    """What split-KV and KV caches run in place of a warp-specialized forward tile (which has
    neither): the library's first 8-warp wgmma forward tile for this (padded) head_dim. Other
    tiles as they are."""
    if not tile.warp_specialized:
        return tile
    return next(t for t in wgmma_forward_tiles(head_dim) if not t.warp_specialized)


def _sm(arch: str) -> int:
    """The number of 'sm_XY' (90 for 'sm_90a')."""
    return int(arch.rstrip("a").split("_")[1])


def _validate_dmma(spec: KernelSpec, where: str, arch: str | None) -> None:
    """flash_fwd_dmma.cu, flash_bwd_dmma.cu: warps own 8-row m-tiles (mma.sync m8n8k4 .f64)."""
    t = spec.tile
    if spec.atomic_dq:
        raise ValueError(f"{where}: the dmma backward computes dQ in its own pass; use "
                         f"deterministic=True (or a simt tile for atomic dQ)")
    if spec.role in ("fwd", "bwd_dq"):
        # each warp owns 8·MT query rows, MT in {1, 2}
        mt, rem = divmod(t.block_m, 8 * t.num_warps)
        if rem or mt not in (1, 2):
            raise ValueError(f"{where}: block_m must be 8 or 16 rows per warp "
                             f"(8·num_warps or 16·num_warps)")
    else:
        # each warp owns 8·MK keys of the resident K/V tile, MK in {1, 2}
        mk, rem = divmod(t.block_n, 8 * t.num_warps)
        if rem or mk not in (1, 2):
            raise ValueError(f"{where}: block_n must be 8 or 16 keys per warp "
                             f"(8·num_warps or 16·num_warps)")
        if t.block_m > 128:
            raise ValueError(f"{where}: block_m must be at most 128")
    if t.num_stages > 2:
        raise ValueError(f"{where}: the dmma kernels use 1 or 2 stages")


_TF32_ATOMIC = ("the TF32 backward computes dQ in its own pass; use deterministic=True or a "
                "simt tile for atomic dQ")


def _validate_tf32(spec: KernelSpec, where: str, arch: str | None) -> None:
    """The TF32 families: flash_fwd_mma.cu and flash_bwd_tf32.cu with Tf32Products (float32),
    whose warps own 16·MT query rows (forward, dQ) or 16 keys (dK/dV) as the 16-bit mma
    kernels'; the backward has no atomic-dQ mode and heads of at most TF32_BWD_MAX_D."""
    if spec.role != "fwd" and spec.head_dim > TF32_BWD_MAX_D:
        raise ValueError(f"{where}: the TF32 backward takes head dims up to {TF32_BWD_MAX_D} "
                         f"(dK and dV of a warp's 16 keys live in its registers); wider heads "
                         f"run the float32 backward on CUDA cores (precision='ieee')")
    if spec.atomic_dq:
        raise ValueError(f"{where}: {_TF32_ATOMIC}")
    t = spec.tile
    if spec.role == "bwd_dkdv" and (spec.head_dim > 64 or t.block_n == 8 * t.num_warps):
        # a pair of warps per 16 keys (flash_bwd_tf32.cu): one computes Sᵀ and dV, the other
        # dPᵀ and dK; above d = 64 the only way (one warp's dK and dV would not fit)
        if t.block_n != 8 * t.num_warps or t.num_warps % 2:
            above = " at head dims above 64" if spec.head_dim > 64 else ""
            raise ValueError(f"{where}: block_n must be 8·num_warps with an even num_warps "
                             f"(a pair of warps per 16 keys){above}")
        if t.block_m % 16 or t.block_m > 128:
            raise ValueError(f"{where}: block_m must be a multiple of 16, at most 128")
        if t.num_stages > 2:
            raise ValueError(f"{where}: the mma backward kernels use 1 or 2 stages")
        return
    _validate_mma(spec, where)


def _validate_mma(spec: KernelSpec, where: str) -> None:
    t = spec.tile
    if spec.role == "fwd" and forward_key_warps(t) > 1:
        # Warps split each tile's keys (flash_fwd_mma.cu v10): every warp takes the 16 or 32
        # rows and block_n / num_warps keys, a multiple of 16.
        if t.block_n % (16 * t.num_warps):
            raise ValueError(f"{where}: with block_m={t.block_m} and {t.num_warps} warps the "
                             f"warps split the keys: block_n must be a multiple of "
                             f"16·num_warps = {16 * t.num_warps}")
    elif spec.role == "fwd" or spec.role == "bwd_dq":
        # Each warp owns 16·MT query rows, MT in {1, 2}.
        mt, rem = divmod(t.block_m, 16 * t.num_warps)
        if rem or mt not in (1, 2):
            raise ValueError(f"{where}: block_m must be 16 or 32 rows per warp "
                             f"(16·num_warps or 32·num_warps)")
        if t.block_n % 16:
            raise ValueError(f"{where}: block_n must be a multiple of 16")
    else:
        # Each warp owns 16 keys of the resident K/V tile.
        if t.block_n != 16 * t.num_warps:
            raise ValueError(f"{where}: block_n must be 16·num_warps (one warp per 16 keys)")
        if t.block_m % 16 or t.block_m > 128:
            raise ValueError(f"{where}: block_m must be a multiple of 16, at most 128")
    if t.num_stages > 2 and spec.role != "fwd":
        raise ValueError(f"{where}: the mma backward kernels use 1 or 2 stages")


def forward_key_warps(tile: TileConfig) -> int:
    """How many warps split each key tile of a forward tile: all of them where an mma-family
    forward tile has 16 or 32 rows and more warps than its rows fill (flash_fwd_mma.cu v10,
    mma.cuh MmaShape::KW; _validate_mma's rule), else 1."""
    if (tile.kernel == "mma" or tile.kernel in PRODUCTS) and tile.block_m in (16, 32) and \
            tile.block_m < 16 * tile.num_warps:
        return tile.num_warps
    return 1


def page_rows(tile: TileConfig) -> int:
    """The rows of a K/V tile that one copy reads from one page of a paged cache
    (kernels_cu/seq.cuh, PagedRows): a key-split forward tile's warp's share (each warp stages its
    own keys: mma.cuh KeySliceTiles), else the whole tile's block_n. A pool's pages must be a
    multiple of it."""
    return tile.block_n // forward_key_warps(tile)


def dq_tile(tile: TileConfig, head_dim: int) -> TileConfig:
    """The tile of the deterministic backward's dQ kernel beside the dK/dV kernel's ``tile``."""
    if tile.kernel in PRODUCTS:
        # the TF32 dQ kernel takes the dK/dV tile transposed (16 query rows per warp of the
        # same warps, block_m keys per step): its float32 Q, dO and K/V tiles fill shared
        # memory fast, and block_m queries would leave 2 warps per block at d = 128
        return tile.replace(block_m=tile.block_n, block_n=tile.block_m,
                            num_warps=tile.block_n // 16)
    if tile.warp_specialized_dkdv:
        # a warp-specialized dK/dV tile (block_n keys on block_n / 64 consumer warpgroups):
        # the dQ kernel takes it transposed, block_n queries on as many consumers, also
        # warp-specialized (flash_bwd_wgmma_ws.cu); the float16-product families' key tile by
        # their own rule (x1: 64 keys at d = 128)
        dq = tile.replace(block_m=tile.block_n, block_n=tile.block_m)
        if tile.kernel in F16_SPLIT:
            dq = dq.replace(block_n=x3_dq_block_n(head_dim, tile.kernel))
        return dq
    if (tile.kernel == "mma" and tile.block_m < 16 * tile.num_warps) or (
            tile.kernel == "wgmma" and tile.block_m in (64, 128, 256)):
        # the dQ kernel gives each warp 16 query rows (wgmma: exactly 16, 64 per warpgroup):
        # its warp count follows block_m
        return tile.replace(num_warps=tile.block_m // 16)
    if tile.kernel == "dmma" and tile.block_m < 8 * tile.num_warps:
        return tile.replace(num_warps=tile.block_m // 8)   # 8 query rows per warp
    return tile


def specs_for(dtype, head_dim: int, tile: TileConfig, variant, backward: bool,
              deterministic: bool = True):
    """The kernel specs one pass launches (the forward: one; the backward: one or two).
    ``variant``: a :class:`Variant`, or a bool (causal or dense)."""
    variant = Variant.of(variant)
    name = dtype_name(dtype)
    if tile.kernel == F16_SCALED:
        return _f16_scaled_specs(name, head_dim, tile, variant, backward, deterministic)
    if tile.kernel in FLOAT32_WGMMA_FORWARDS:
        prec, alt = of_family(tile.kernel), FLOAT32_WGMMA_FORWARDS[tile.kernel]
        if tile.kernel in FLOAT32_WGMMA_BACKWARDS and name != "float32":
            raise ValueError(f"TileConfig.kernel={tile.kernel!r} is float32's forward and "
                             f"backward of precision={prec!r}: float32 inputs only, got {name}")
        if name != "float32" or (backward and tile.kernel not in FLOAT32_WGMMA_BACKWARDS):
            raise ValueError(f"TileConfig.kernel={tile.kernel!r} is float32's forward of "
                             f"precision={prec!r} ({'a backward' if backward else name + ' inputs'} "
                             f"asked for): the backward of precision={prec!r} runs kernel={alt!r}")
    check_dtype(tile, name)   # every family's dtypes (tile.FAMILY_DTYPES)
    if tile.kernel in PRODUCTS and backward and not deterministic:
        raise ValueError(f"TileConfig {tile.short()}: {_TF32_ATOMIC}")
    if tile.kernel == "wgmma" and backward and not deterministic and \
            not tile.warp_specialized_dkdv:
        raise ValueError(f"TileConfig {tile.short()}: {_WGMMA_ATOMIC}")
    if tile.kernel in FLOAT32_WGMMA_BACKWARDS and backward and not deterministic:
        raise ValueError(f"TileConfig {tile.short()}: {_f16x3_atomic(tile.kernel)}")
    if tile.kernel == "dmma" and backward and not deterministic:
        raise ValueError(f"TileConfig {tile.short()}: the dmma backward computes dQ in its own "
                         f"pass; use deterministic=True or a simt tile for atomic dQ")
    dp = head_dim_pad(head_dim, tile.kernel)
    if not backward:
        return [KernelSpec("fwd", name, dp, tile, variant)]
    if deterministic:
        dq = dq_tile(tile, head_dim)
        return [KernelSpec("bwd_dkdv", name, dp, tile, variant, False),
                KernelSpec("bwd_dq", name, dp, dq, variant)]
    return [KernelSpec("bwd_dkdv", name, dp, tile, variant, True)]


def _f16_scaled_specs(name: str, head_dim: int, tile: TileConfig, variant: Variant,
                      backward: bool, deterministic: bool) -> list[KernelSpec]:
    """specs_for of a tile.F16_SCALED tile: float32's backward of precision 'tf32' as the
    16-bit warp-specialized pair of the same tile ('wgmma', float16) on float16 copies, writing
    float32 gradients (cuflash/gpu/f16_scaled.py)."""
    if name != "float32" or not backward:
        raise ValueError(f"TileConfig.kernel={F16_SCALED!r} is float32's backward of "
                         f"precision='tf32' ({'float32' if name == 'float32' else name} "
                         f"{'forward' if not backward else 'backward'} asked for): float32 "
                         f"backwards only")
    t16 = tile.replace(kernel="wgmma")
    if not t16.warp_specialized_dkdv:
        raise ValueError(f"TileConfig {tile.short()}: kernel={F16_SCALED!r} runs the "
                         f"warp-specialized 16-bit backward only (block_n = 16·num_warps - 64)")
    return [dataclasses.replace(s, float_grads=True)
            for s in specs_for("float16", head_dim, t16, variant, True, deterministic)]


def check_tile(tile: TileConfig, head_dim: int, dtype, *, backward=False, smem_limit=None,
               arch=None):
    """Raise ValueError if `tile` cannot run this pass (thread mapping, shared memory, arch)."""
    # the wgmma, dmma and TF32 backwards: only their deterministic pair is checked (the dmma, TF32
    # and 4- and 8-warp wgmma ones have no atomic-dQ mode; the warp-specialized dK/dV kernel's, which
    # takes 32 KB more shared memory, is checked when deterministic=False asks for it)
    for det in ((True, False) if backward and tile.kernel in ("simt", "mma") else (True,)):
        for spec in specs_for(dtype, head_dim, tile, False, backward, det):
            validate(spec, smem_limit, arch)
