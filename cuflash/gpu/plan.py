"""What a kernel launch needs, decided on the host: specialization, name, shared memory, grid.

One :class:`KernelSpec` is one compiled specialization: kernel family and role, dtype, padded
head_dim, TileConfig, causal, dQ mode. Its name says all of that, so profiles and compile reports
read plainly (``cuflash_simt_fwd_f16_d128_m64_n64_w8_s1_causal``). The shared-memory budget is
computed here, one term per buffer, mirroring the kernels' layout; the kernels check it at entry.
"""
from __future__ import annotations

import dataclasses
import math


from .._xp import accum_dtype, dtype_name, resolve_dtype
from ..tile import TileConfig, mma_capable

ROLES = ("fwd", "bwd_dkdv", "bwd_dq")
_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
_CTYPE = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double"}

#: Opt-in shared memory per block by compute capability (bytes), for checks without a device.
SMEM_LIMIT = {"sm_80": 166912, "sm_86": 101376, "sm_89": 101376, "sm_90": 232448,
              "sm_90a": 232448}


def head_dim_pad(d: int, family: str) -> int:
    """Head dim the kernel is compiled for: d rounded up to a multiple of 32 (the extra columns are
    zero), so one specialization serves up to four head dims; 64 for 'wgmma', whose swizzled
    shared-memory panels are 64 elements (128 bytes) wide."""
    unit = 64 if family == "wgmma" else 32
    return unit * math.ceil(d / unit)


#: Architecture each kernel family is compiled for; None = the device's own (CuPy chooses).
#: wgmma exists only on sm_90a, whose code runs on compute capability 9.0 devices alone.
FAMILY_ARCH = {"simt": None, "mma": None, "wgmma": "sm_90a"}


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """One compiled kernel specialization."""

    role: str            # 'fwd', 'bwd_dkdv' or 'bwd_dq'
    dtype: str           # 'float16', 'bfloat16', 'float32', 'float64'
    head_dim: int        # compiled (padded) head dim
    tile: TileConfig
    causal: bool
    atomic_dq: bool = False   # bwd_dkdv only: also accumulate dQ with atomics

    @property
    def family(self) -> str:
        return self.tile.kernel

    @property
    def vec(self) -> int:
        """Accumulator elements per 16-byte shared-memory vector (4 floats, 2 doubles)."""
        return 16 // accum_dtype(resolve_dtype(self.dtype)).itemsize

    @property
    def name(self) -> str:
        t = self.tile
        name = (f"cuflash_{t.kernel}_{self.role}_{_SHORT[self.dtype]}_d{self.head_dim}"
                f"_m{t.block_m}_n{t.block_n}_w{t.num_warps}_s{t.num_stages}")
        if self.causal:
            name += "_causal"
        if self.role == "bwd_dkdv" and self.atomic_dq:
            name += "_atomicdq"
        return name

    @property
    def arch(self) -> str | None:
        """The architecture this spec must be compiled for, or None for the device's own."""
        return FAMILY_ARCH[self.family]

    @property
    def ctype(self) -> str:
        return _CTYPE[self.dtype]

    def smem_bytes(self) -> int:
        """Dynamic shared memory of the kernel, one term per buffer (see the kernel files)."""
        t, dp = self.tile, self.head_dim
        bm, bn = t.block_m, t.block_n
        if self.family == "simt":
            a = 16 // self.vec                       # accumulator bytes: 4 (float) or 8 (double)
            row = (dp + self.vec) * a                # one padded row of a Q/K/V/dO tile
            if self.role == "fwd":
                return (bm * row              # sQ: the resident query tile
                        + 2 * bn * row        # sK, sV: the streamed key/value tiles
                        + bm * (bn + self.vec) * a   # sP: probabilities of one tile pair
                        + 2 * bm * a)         # s_alpha, s_l: per-row rescale factor and sum
            if self.role == "bwd_dkdv":
                return (2 * bn * row          # sK, sV: the resident key/value tile
                        + 2 * bm * row        # sQ, sdO: the streamed query tile and its dO
                        + 2 * bn * (bm + self.vec) * a   # sPt, sdSt: Pᵀ and dSᵀ of one tile pair
                        + 2 * bm * a)         # s_lse, s_D: per-query lse (log2 units) and D
            return (2 * bm * row              # sQ, sdO: the resident query tile and its dO
                    + 2 * bn * row            # sK, sV: the streamed key/value tiles
                    + bm * (bn + self.vec) * a    # sdS: dS of one tile pair
                    + 2 * bm * a)             # s_lse, s_D
        if self.family == "wgmma":
            # 16-bit tiles in 128-byte swizzled panels, no padding, plus 1024 bytes so the
            # kernel can align the first panel to 1024 bytes (flash_*_wgmma.cu)
            st = t.num_stages
            if self.role == "fwd":
                return (bm + st * 2 * bn) * dp * 2 + 1024        # sQ; K and V ring buffers
            if self.role == "bwd_dkdv":
                return ((2 * bn + st * 2 * bm) * dp * 2          # sK, sV resident; Q, dO ring
                        + st * 2 * bm * 4 + 1024)                # s_lse, s_D per stage (float)
            return (2 * bm + st * 2 * bn) * dp * 2 + 1024        # sQ, sdO resident; K, V ring
        # mma: 16-bit tiles with rows padded by 8 elements (16 bytes) against bank conflicts
        row = (dp + 8) * 2
        st = t.num_stages
        if self.role == "fwd":
            return bm * row + st * 2 * bn * row          # sQ; K and V ring buffers
        if self.role == "bwd_dkdv":
            return (2 * bn * row                         # sK, sV resident
                    + st * 2 * bm * row                  # sQ, sdO ring buffers
                    + bn * (bm + 8) * 2                  # sdSt (for the dQ product, atomic mode)
                    + st * 2 * bm * 4)                   # s_lse, s_D per stage (float)
        return (2 * bm * row + st * 2 * bn * row)        # sQ, sdO resident; K, V ring buffers

    def threads(self) -> int:
        return self.tile.num_threads


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
    if spec.arch is not None and arch is not None and arch.rstrip("a") != spec.arch.rstrip("a"):
        raise ValueError(f"{where}: kernel={t.kernel!r} runs only on {spec.arch.rstrip('a')} "
                         f"GPUs (Hopper), this one is {arch}")
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
    else:
        if spec.dtype not in ("float16", "bfloat16"):
            raise ValueError(f"{where}: the mma kernels need float16 or bfloat16 inputs")
        if spec.family == "wgmma":
            _validate_wgmma(spec, where)
        else:
            _validate_mma(spec, where)
    if smem_limit is not None and spec.smem_bytes() > smem_limit:
        raise ValueError(f"{where}: needs {spec.smem_bytes()} bytes of shared memory per block, "
                         f"the device allows {smem_limit}")


def _validate_wgmma(spec: KernelSpec, where: str) -> None:
    t = spec.tile
    if spec.atomic_dq:
        raise ValueError(f"{where}: the wgmma backward computes dQ in its own pass; use "
                         f"deterministic=True (or a kernel='mma' tile for atomic dQ)")
    if t.num_warps % 4:
        raise ValueError(f"{where}: num_warps must be a multiple of 4 (warpgroups)")
    if spec.role == "bwd_dkdv":
        if t.block_n != 16 * t.num_warps:
            raise ValueError(f"{where}: block_n must be 64 keys per warpgroup of 4 warps "
                             f"(block_n = 16·num_warps)")
    elif t.block_m != 16 * t.num_warps:
        raise ValueError(f"{where}: block_m must be 64 rows per warpgroup of 4 warps "
                         f"(block_m = 16·num_warps, num_warps a multiple of 4)")
    if spec.role == "fwd" and t.num_stages < 3:
        raise ValueError(f"{where}: the wgmma forward needs 3 or 4 stages (K/V buffers: tile "
                         f"j+1 loads while tiles j and j-1 are read)")
    if spec.role != "fwd" and t.num_stages > 2:
        raise ValueError(f"{where}: the wgmma backward kernels use 1 or 2 stages")
    if spec.head_dim > 256:
        raise ValueError(f"{where}: head_dim above 256 does not fit one wgmma (n <= 256)")


def _validate_mma(spec: KernelSpec, where: str) -> None:
    t = spec.tile
    if spec.role == "fwd" or spec.role == "bwd_dq":
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
    if t.num_stages > 2:
        raise ValueError(f"{where}: the mma kernels use 1 or 2 stages")


def specs_for(dtype, head_dim: int, tile: TileConfig, causal: bool, backward: bool,
              deterministic: bool = True):
    """The kernel specs one pass launches (the forward: one; the backward: one or two)."""
    name = dtype_name(dtype)
    if tile.kernel in ("mma", "wgmma") and not mma_capable(head_dim, dtype):
        raise ValueError(f"TileConfig.kernel={tile.kernel!r} needs float16 or bfloat16 inputs, "
                         f"got {name}")
    if tile.kernel == "wgmma" and backward and not deterministic:
        raise ValueError(f"TileConfig {tile.short()}: the wgmma backward computes dQ in its own "
                         f"pass; use deterministic=True or a kernel='mma' tile for atomic dQ")
    dp = head_dim_pad(head_dim, tile.kernel)
    if not backward:
        return [KernelSpec("fwd", name, dp, tile, causal)]
    if deterministic:
        dq_tile = tile
        if (tile.kernel == "mma" and tile.block_m < 16 * tile.num_warps) or (
                tile.kernel == "wgmma" and tile.block_m in (64, 128, 256)):
            # the dQ kernel gives each warp 16 query rows (wgmma: exactly 16, 64 per warpgroup):
            # its warp count follows block_m
            dq_tile = tile.replace(num_warps=tile.block_m // 16)
        return [KernelSpec("bwd_dkdv", name, dp, tile, causal, False),
                KernelSpec("bwd_dq", name, dp, dq_tile, causal)]
    return [KernelSpec("bwd_dkdv", name, dp, tile, causal, True)]


def check_tile(tile: TileConfig, head_dim: int, dtype, *, backward=False, smem_limit=None,
               arch=None):
    """Raise ValueError if `tile` cannot run this pass (thread mapping, shared memory, arch)."""
    # the wgmma backward has no atomic-dQ mode: only its deterministic pair is checked
    for det in ((True, False) if backward and tile.kernel != "wgmma" else (True,)):
        for spec in specs_for(dtype, head_dim, tile, False, backward, det):
            validate(spec, smem_limit, arch)
