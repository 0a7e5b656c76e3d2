"""Tile sizes: the one place that says how attention is cut into blocks, and the defaults.

The CPU twin reads block_m and block_n; the CUDA kernels read every field. Kernel-specific
limits (shared memory, warp layout) are checked in ``cuflash.gpu.plan`` where the device is known.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .device import DEFAULT_ARCH, is_hopper
from ._xp import dtype_name
from .precision import FAMILY, PRODUCTS, STANDS_IN, check as _check_precision

KERNELS = ("simt", "mma", "wgmma", "dmma", "tf32", "tf32x3", "wgmma_tf32", "wgmma_f16x3",
           "wgmma_f16x1", "wgmma_f16s")

#: float32 on Hopper's 16-bit warpgroup tensor cores, each row scaled by a power of two and split
#: into float16 parts (kernels_cu/f16x3.cuh, F16Products): kernel family -> float16 products a
#: pair of operands. 'wgmma_f16x3': precision 'highest' (three: float32's accuracy, NOTES.md
#: v44-v54); 'wgmma_f16x1': precision 'tf32' (one product of 11-bit significands, as a TF32
#: product: v55-v56). Same kernels, tiles and rules.
F16_SPLIT = {"wgmma_f16x3": 3, "wgmma_f16x1": 1}
#: float32 backward of precision 'tf32' on the 16-bit warp-specialized kernels themselves
#: ('wgmma' tiles), run on float16 copies of q, k, v, dout and out, each scaled by one power of
#: two, writing float32 gradients (cuflash/gpu/f16_scaled.py; NOTES.md v70-v71)
F16_SCALED = "wgmma_f16s"
#: The input dtypes each kernel family takes (on any GPU; the CPU twin holds tiles to it too, so
#: that a tile that runs there runs on a GPU): the CUDA cores every dtype, the 16-bit tensor-core
#: families float16 and bfloat16, dmma float64, and float32's tensor-core families float32
FAMILY_DTYPES = {"simt": ("float16", "bfloat16", "float32", "float64"),
                 "mma": ("float16", "bfloat16"), "wgmma": ("float16", "bfloat16"),
                 "dmma": ("float64",), **{k: ("float32",) for k in
                                          ("tf32", "tf32x3", "wgmma_tf32", *F16_SPLIT,
                                           F16_SCALED)}}
#: TileConfig's allowed warps (12: the warp-specialized wgmma forward) and stages
NUM_WARPS = (1, 2, 4, 8, 12, 16)
NUM_STAGES = (1, 2, 3, 4)

#: The widest head dim the float64 defaults take the dmma kernels for (measured up to 128)
DMMA_DEFAULT_MAX_D = 128


def _is_pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


def section_rows(row_bytes: int, l2_bytes: int) -> int:
    """The most grid rows that a section of the kernels' block order may hold for the L2 (the
    kernels' ``sched_rows``): as many rows as half the L2 holds of the operands each row's blocks
    stream (``row_bytes``: K and V of a head for the forward and dQ, Q and dO for dK/dV), so
    that those still come from L2 after the first block of the row has read them."""
    return max(1, (l2_bytes // 2) // max(1, row_bytes))


def section_of(rows: int, tiles: int, l2_rows: int, wave: int) -> int:
    """The rows of each section of the order the kernels' blocks start in (kernels_cu/block.cuh,
    GridTile, the same rule): tile-major within a section, so that every row's heaviest causal
    tile starts before any row's lighter ones. A section holds about one wave of blocks
    (``wave``: the kernel's resident blocks; ``tiles`` per row), at most ``l2_rows``
    (section_rows), at least one row, and the sections are cut about even (a short last section
    would leave its long tiles for the end)."""
    most = max(1, min(l2_rows, wave // max(1, tiles)))
    sections = -(-max(rows, 1) // most)
    return -(-max(rows, 1) // sections)


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """How one attention pass is tiled.

    The forward keeps a ``block_m × d`` tile of Q resident and streams ``block_n × d`` tiles of K
    and V past it; the backward keeps a ``block_n × d`` tile of K and V resident and streams
    ``block_m × d`` tiles of Q, dO (and lse, D) past it. Names match the kernels and the CPU twin.
    """

    block_m: int = 64
    """Query rows per tile (rows of Q, O, lse held by one thread block). Power of two, 16..256,
    or 192: the warp-specialized wgmma forward's three consumer warpgroups (16 warps, d <= 64;
    ``wgmma_forward_tiles``)."""

    block_n: int = 64
    """Key rows per tile (rows of K and V streamed per step). Power of two, 16..256."""

    num_warps: int = 4
    """Warps per thread block (32 threads each): 1, 2, 4, 8, 12 or 16 (12: the warp-specialized
    wgmma forward, one producer and two consumer warpgroups; 16 with block_m = 192: three)."""

    num_stages: int = 2
    """Shared-memory buffers for the streamed tiles (1 = load then compute; 2 = double buffering
    with cp.async, loading tile j+1 while computing tile j). 1..4."""

    kernel: str = "simt"
    """Kernel family: 'simt' (CUDA cores, every dtype and head_dim), 'mma' (tensor cores through
    mma.sync, float16/bfloat16, sm_80 and later), 'wgmma' (Hopper's warpgroup tensor cores,
    float16/bfloat16, sm_90 only: block_m = 16·num_warps, 64 rows per 4 warps; a forward tile
    with block_m = 16·num_warps - 64 runs the warp-specialized kernel, whose first warpgroup
    only loads) or
    'dmma' (float64 tensor cores through mma.sync m8n8k4, float64 only, sm_80 and later;
    deterministic backward only), 'tf32' and 'tf32x3' (float32 forward on TF32 tensor cores
    through mma.sync m16n8k8, sm_80 and later: precision='tf32' and 'highest',
    ``cuflash.precision``; the warp layout of 'mma'), 'wgmma_tf32' (float32 forward of
    precision='tf32' on Hopper's warpgroup tensor cores, sm_90 only, the default of dense
    batches where ``wgmma_tf32_pays``: block_n and the head dim multiples of 32; block_m =
    16·num_warps with 2 or 3 stages, or the warp-specialized shape, block_m = 128 on 12 warps
    with 2 to 4 stages; ``wgmma_tf32_tiles``), 'wgmma_f16x3' (float32 forward of
    precision='highest' on Hopper's 16-bit warpgroup tensor cores, three float16 products of
    operands split in two, sm_90 only, dense batches, 'highest''s default there where
    ``float32_wgmma_pays``: the warp-specialized shape, block_m = 128 on 12 warps, 2 stages; NOTES.md v44-v45; as a
    backward tile, d <= 128, deterministic: the warp-specialized dK/dV shape, block_m = 64
    (d <= 64) or 32, block_n = 128 on 12 warps, 2 or 3 stages, whose dQ pass takes it
    transposed; v46, v54), 'wgmma_f16x1' (the same kernels with one float16 product a pair:
    precision='tf32'; v56), 'wgmma_f16s' (float32 backward of precision='tf32' on the 16-bit
    warp-specialized backward, 'wgmma''s tiles, on float16 copies scaled by one power of two a
    tensor: F16_SCALED; v71)."""

    def __post_init__(self):
        for name in ("block_m", "block_n"):
            val = getattr(self, name)
            if not isinstance(val, (int, np.integer)) or isinstance(val, bool) or \
                    not (_is_pow2(val) or (name == "block_m" and val == 192)) \
                    or not 16 <= val <= 256:
                raise ValueError(f"TileConfig.{name}={val!r} must be a power of two in 16..256"
                                 + (" (or 192, the warp-specialized wgmma forward's three "
                                    "consumer warpgroups)" if name == "block_m" else ""))
        for name, allowed in (("num_warps", NUM_WARPS), ("num_stages", NUM_STAGES)):
            val = getattr(self, name)   # an int, not 4.0 or np.array(4) (== would take them)
            if not isinstance(val, (int, np.integer)) or isinstance(val, bool) \
                    or val not in allowed:
                raise ValueError(f"TileConfig.{name}={val!r} must be one of "
                                 f"{', '.join(map(str, allowed))}")
        for name in ("block_m", "block_n", "num_warps", "num_stages"):   # NumPy ints as ints
            object.__setattr__(self, name, int(getattr(self, name)))
        if self.kernel not in KERNELS:
            raise ValueError(f"TileConfig.kernel={self.kernel!r} must be one of {KERNELS}")
        if self.block_m == 192 and (self.kernel, self.num_warps) != ("wgmma", 16):
            raise ValueError(f"TileConfig.block_m=192 is the warp-specialized wgmma forward's "
                             f"three consumer warpgroups: kernel='wgmma' and num_warps=16, got "
                             f"kernel={self.kernel!r}, num_warps={self.num_warps}")

    @property
    def num_threads(self) -> int:
        return 32 * self.num_warps

    @property
    def warp_specialized(self) -> bool:
        """A wgmma tile (16-bit, or float32 as TF32: 'wgmma_tf32') with a producer warpgroup
        beside its block_m / 64 consumer warpgroups: block_m = 16·num_warps - 64 (the forward's
        flash_fwd_wgmma_ws.cu)."""
        return self.kernel in ("wgmma", "wgmma_tf32", *F16_SPLIT, F16_SCALED) and \
            16 * self.num_warps == self.block_m + 64

    @property
    def warp_specialized_dkdv(self) -> bool:
        """As a backward tile: a wgmma dK/dV kernel with a producer warpgroup beside its
        block_n / 64 consumer warpgroups, block_n = 16·num_warps - 64 (flash_bwd_wgmma_ws.cu;
        its dQ pass takes the tile transposed)."""
        return self.kernel in ("wgmma", *F16_SPLIT, F16_SCALED) and \
            16 * self.num_warps == self.block_n + 64

    def blocks_per_sm(self, backward: bool = False) -> int:
        """Blocks a multiprocessor the kernel of this tile is compiled to hold (its
        ``__launch_bounds__``): 2 for a warp-specialized tile of one consumer warpgroup (8
        warps: block_m = 64 as a forward tile, block_n = 64 as a dK/dV tile; the plan takes
        such tiles for the float16-product families, F16_SPLIT, and the 16-bit backward at
        d <= 64), so that one block's start and
        stores overlap the other's products (NOTES v64; kernels_cu/barrier.cuh, RegisterSplit,
        splits the registers by the same rule); else 1 here (plan.KernelSpec.min_blocks also
        runs some wgmma forwards two a multiprocessor)."""
        ws = self.warp_specialized_dkdv if backward else self.warp_specialized
        return 2 if ws and self.num_warps == 8 else 1

    def replace(self, **changes) -> "TileConfig":
        return dataclasses.replace(self, **changes)

    def short(self) -> str:
        """A compact label, e.g. 'mma_m128_n64_w4_s2'."""
        return (f"{self.kernel}_m{self.block_m}_n{self.block_n}"
                f"_w{self.num_warps}_s{self.num_stages}")


def mma_capable(head_dim: int, dtype) -> bool:
    """Whether the tensor-core kernels cover this head_dim and dtype (every supported head_dim:
    the kernels pad it to a multiple of 32 with zeros)."""
    return dtype_name(dtype) in FAMILY_DTYPES["mma"]


def dmma_capable(head_dim: int, dtype) -> bool:
    """Whether the float64 tensor-core kernels ('dmma') cover this head_dim and dtype: float64,
    every supported head_dim (padded to a multiple of 32 with zeros)."""
    return dtype_name(dtype) in FAMILY_DTYPES["dmma"]


def has_fp64_tensor_cores(arch: str) -> bool:
    """sm_80 (A100) and sm_90 (H100/H200): the GPUs whose float64 tensor cores run at twice the
    float64 CUDA-core rate (sm_86/sm_89 run mma.sync .f64 too, at a small fraction of that)."""
    return arch.rstrip("a") in ("sm_80", "sm_90")


def _dmma_tiles(head_dim: int, backward: bool, hopper: bool = False) -> list[TileConfig]:
    """Tiles of the float64 tensor-core kernels, preferred first (flash_fwd_dmma.cu,
    flash_bwd_dmma.cu). Rows of d + 2 doubles: at d = 128 a 64-row tile is 66.5 KB, so the
    forward holds a 64 × 32 pair of tiles with two K/V stages (one block per SM) and the
    backward 32-row query tiles against 64 keys; d = 64 fits 128 × 64 with two K/V stages. Before Hopper
    (163 KB per block) the later, smaller entries fit. Forward and dQ: each warp owns 8·MT query
    rows (MT = block_m / (8·num_warps), 1 or 2; MT = 2 takes m16n8k16 on sm_90); dK/dV: each
    warp owns 8·MK keys (MK = block_n / (8·num_warps)); the dQ kernel takes block_m / 8 warps
    when block_m < 8·num_warps. NVRTC 13.0, sm_90a: 128 × 32 (8 warps, 1 stage) and 64 × 32
    (4 warps, 1 stage) spill 228-280 B at d = 128 (O alone is 128 registers at MT = 2), so
    neither is a candidate there. H200, T = 4096, B·H = 64, not causal (NOTES.md v11,
    tools/bench_f64.py --tiles; TFLOP/s): forward d = 64: 128 × 64 / 8 warps / 2 stages 29.4,
    64 × 64 / 8 warps 29.1, 32 × 32 28.5, 64 × 64 / 4 warps / 1 stage 26.3, 2 stages 17.0;
    d = 128: 64 × 32 with 8 warps (MT = 1, m8n8k4) 21.8 and 4 warps (MT = 2, 255 registers, 20 B
    of spill under NVRTC 13.5) 21.6, 64 × 16 19.5. Backward d = 64: 17.9-18.3 for every tile;
    d = 128: 32 × 64 / 8 warps / 1 stage 16.4, 32 × 32 14.9, 16 × 32 10.0."""
    if not backward:
        if head_dim <= 64:
            return [TileConfig(128, 64, 8, 2, "dmma"), TileConfig(64, 64, 4, 1, "dmma"),
                    TileConfig(32, 32, 4, 1, "dmma")]
        if head_dim <= 128:
            # sm_90: 16 query rows a warp (m16n8k16) on 16-key tiles: 128 x 16 / 8 warps /
            # 2 stages 1.37-1.48x the 8-row 64 x 32 at d = 128 on the H100, 64 x 16 / 4 warps /
            # 1 stage (100 KB, two blocks an SM) 1.23-1.31x (NOTES.md v74, v76)
            return ([TileConfig(128, 16, 8, 2, "dmma"), TileConfig(64, 16, 4, 1, "dmma")]
                    if hopper else []) + [
                TileConfig(64, 32, 8, 2, "dmma"), TileConfig(64, 32, 4, 2, "dmma"),
                TileConfig(64, 16, 4, 2, "dmma"), TileConfig(32, 32, 4, 1, "dmma")]
        return [TileConfig(32, 16, 4, 2, "dmma"), TileConfig(32, 16, 4, 1, "dmma")]
    if head_dim <= 64:
        return [TileConfig(64, 64, 8, 2, "dmma"), TileConfig(32, 32, 4, 2, "dmma"),
                TileConfig(32, 32, 4, 1, "dmma")]
    if head_dim <= 128:
        return [TileConfig(32, 64, 8, 1, "dmma"), TileConfig(32, 32, 4, 2, "dmma"),
                TileConfig(16, 32, 4, 2, "dmma"), TileConfig(16, 16, 2, 1, "dmma")]
    return [TileConfig(16, 16, 2, 1, "dmma")]


def tf32_tiles(head_dim: int, family: str) -> list[TileConfig]:
    """Forward tiles of the float32 TF32 kernels (``family`` 'tf32' or 'tf32x3'; flash_fwd_mma.cu
    with Tf32Products), preferred first. Tiles are float32 rows of d + 4 (a 64-row tile at
    d = 128 is 33 KB). H200, float32, T = 4096, FlashAttention's shapes, non-causal
    (tools/bench_f32.py --tiles, NOTES.md v22, call 74), TFLOP/s: 'tf32' d = 64: 128 × 64 with 4
    warps (32 query rows per warp) 145, with 8 warps 108; d = 128: 128 × 64 × 8 warps 115, 128 × 32
    × 4 warps 110, 64 × 32 × 4 warps 99; d = 256: 128 × 16 × 8 warps 93, 64 × 16 68. 'tf32x3' keeps
    16 rows per warp: 32 (128 × 64 × 4 warps) spill under its per-k-step sums (tf32.cuh); its
    order is from call 76 (NOTES.md v22). Before Hopper (163 KB of shared memory) the later
    entries fit."""
    if family == "tf32":
        if head_dim <= 64:
            tiles = [(128, 64, 4, 2), (128, 64, 8, 2), (64, 32, 4, 2), (32, 32, 2, 1)]
        elif head_dim <= 128:
            tiles = [(128, 64, 8, 2), (128, 32, 4, 2), (64, 32, 4, 2), (32, 32, 2, 1)]
        else:
            tiles = [(128, 16, 8, 2), (64, 16, 4, 2), (32, 16, 2, 1)]
    elif head_dim <= 64:
        tiles = [(128, 64, 8, 2), (64, 32, 4, 2), (32, 32, 2, 1)]
    elif head_dim <= 96:    # 128 × 64 spills 8 B at d = 96 (sm_80)
        tiles = [(128, 32, 8, 2), (64, 32, 4, 2), (32, 32, 2, 1)]
    elif head_dim <= 128:   # 128 × 64 × 8 spills 8 B under NVRTC 13.0 (sm_90); 64 × 32 × 4
        # ran within 1% of it, 128 × 32 × 8 2-5% slower (H100, call 256, NOTES v90)
        tiles = [(64, 32, 4, 2), (32, 32, 2, 1)]
    elif head_dim <= 160:   # 64 × 32 spills 8 B at d = 160 (sm_80); above, padded to 256
        tiles = [(64, 16, 4, 2), (32, 16, 2, 1)]
    else:
        tiles = [(64, 32, 4, 2), (64, 32, 4, 1), (32, 16, 2, 1)]
    return [TileConfig(*t, family) for t in tiles]


#: The widest head dim of the TF32 wgmma forward (flash_fwd_wgmma_tf32.cu): at 128, Q and two
#: stages of 64 keys take 192 KB of shared memory in float32
WGMMA_TF32_MAX_D = 128

#: The widest head dim of the three-float16-product forward (flash_fwd_wgmma_x3.cu, 'highest' on
#: sm_90): at 128, Q's hi and lo (64 KB) and two stages of K's and V's hi and lo at 64 keys
#: (128 KB) take 199 KB of shared memory (the rows staged once per call: f16x3_stage.cuh)
WGMMA_F16X3_MAX_D = 128

#: The widest head dim of its backward (flash_bwd_wgmma_x3.cu): a dK/dV consumer thread holds dK
#: and dV (d / 2 floats each) beside Sᵀ, dPᵀ and a fresh k-step sum of each; at d = 128 the
#: totals take 128 of its 224 registers, so its query tiles are 32 wide and the tile's dV and
#: dK are summed a product and a 64-column panel at a time (NOTES v45-v46, v54)
WGMMA_F16X3_BWD_MAX_D = 128


#: Keys from which the three-float16-product kernels are 'highest''s default on sm_90 (dense
#: batches in one pass). At T = 4096 and 16384 (call 165, NOTES.md v48; H200, FlashAttention's
#: shapes) the forward ran 1.7-2.0x the mma.sync 'highest' (3xTF32) at d = 64 and 128 and the
#: backward 2.5-2.7x at d = 64; at T = 512 / 1024 / 2048 (call 166, `tools/bench_f32.py --x3
#: --no-torch`) the forward 1.56-1.82x / 1.63-1.87x / 1.67-1.92x and the backward 1.83-2.17x /
#: 2.17-2.38x / 2.35-2.48x. Shorter lengths were not measured.
WGMMA_F16X3_MIN_KEYS = 512

#: Head dims from which 'tf32''s default forward on sm_90 is the one-float16-product kernel
#: ('wgmma_f16x1', up to WGMMA_F16X3_MAX_D) rather than the TF32 wgmma kernel: call 178 (H200,
#: before its rows lost their lo parts, NOTES.md v56) 1.07-1.11x at d = 128 and 0.85-0.92x at
#: d = 64; call 185 (v59) measured it after v58's staging.
WGMMA_F16X1_FWD_MIN_D = 97


def x1_forward_default(head_dim: int) -> "TileConfig | None":
    """'tf32''s default forward on sm_90 where one float16 product ('wgmma_f16x1') outruns the
    TF32 wgmma kernel, or None: from WGMMA_F16X1_FWD_MIN_D to 128 its first tile (v59), and
    where both kernels run 64 columns (d = 57-64: the TF32 kernel's k-steps of 8 pad 57 to 64 as
    the staged rows do) the 128-key tile: 1.020-1.088x, median 1.030, against the TF32 kernel
    in call 193's A/B (H100, d = 64, T = 2048 / 16384, causal and not, 2 rounds; NOTES.md v62)."""
    from .checks import kernel_head_dim   # (checks imports this module)
    tiles = wgmma_f16x3_tiles(head_dim, False, "wgmma_f16x1")
    if WGMMA_F16X1_FWD_MIN_D <= head_dim <= WGMMA_F16X3_MAX_D:
        return tiles[0]
    if kernel_head_dim(head_dim) == 64:
        return next(t for t in tiles if t.block_n == 128 and t.num_stages == 2)
    return None


def x3_backward_block_m(head_dim: int) -> int:
    """The x3 dK/dV kernel's query tile (its dQ kernel's key tile): 64 at d <= 64, 32 above (a
    consumer thread's registers: WGMMA_F16X3_BWD_MAX_D)."""
    return 64 if head_dim <= 64 else 32


def x3_backward_stages(head_dim: int, kernel: str = "wgmma_f16x3") -> tuple[int, ...]:
    """Stages of a float16-product backward tile: 2 or 3 with 64-query tiles (d <= 64; within 1%
    of each other, call 165); with 32-query tiles above, 2 for 'wgmma_f16x3' (shared memory
    holds no third beside its lo tiles), 2 or 3 for 'wgmma_f16x1' (no lo tiles: NOTES v57)."""
    return (2, 3) if x3_backward_block_m(head_dim) == 64 or kernel == "wgmma_f16x1" else (2,)


def x3_dq_block_n(head_dim: int, kernel: str = "wgmma_f16x3") -> int:
    """The key tile of a float16-product dQ kernel: the dK/dV kernel's query tile transposed
    (x3_backward_block_m), but 64 at every head dim for 'wgmma_f16x1' (its consumers hold no lo
    parts nor fresh sums; its dK/dV kernel spilled at 64 queries, d = 128: NOTES v57)."""
    return 64 if kernel == "wgmma_f16x1" else x3_backward_block_m(head_dim)


def wgmma_f16x3_pays(head_dim: int, seq_len_k: int, backward: bool = False) -> bool:
    """Whether the default of precision='highest' on sm_90 takes the three-float16-product kernel
    (flash_fwd_wgmma_x3.cu; with ``backward``, flash_bwd_wgmma_x3.cu's pair) for a dense batch in
    one pass: head dims up to WGMMA_F16X3_MAX_D (the backward's WGMMA_F16X3_BWD_MAX_D), from
    WGMMA_F16X3_MIN_KEYS keys on."""
    widest = WGMMA_F16X3_BWD_MAX_D if backward else WGMMA_F16X3_MAX_D
    return head_dim <= widest and seq_len_k >= WGMMA_F16X3_MIN_KEYS


def wgmma_f16x3_tiles(head_dim: int, backward: bool = False,
                      kernel: str = "wgmma_f16x3", num_warps: int = 12) -> list[TileConfig]:
    """Tiles of the float16-product kernels (``kernel``: a family of F16_SPLIT, their tiles
    alike), preferred first: the forward 128 × 64 (1.15-1.20x the 128 × 32 at T = 4096 / 16384,
    call 165) and 128 × 32; the backward x3_backward_block_m × 128 at each of
    x3_backward_stages. Empty where the head dim is too wide. ``num_warps=8``: the same shapes
    on one consumer warpgroup (forward block_m = 64, backward block_n = 64), run two blocks a
    multiprocessor (``TileConfig.blocks_per_sm``, NOTES v64); opt-in by name, and refused by
    the plan where two blocks' shared memory does not fit."""
    if kernel not in F16_SPLIT:
        raise ValueError(f"kernel={kernel!r}: the float16-product families are "
                         f"{', '.join(map(repr, F16_SPLIT))}")
    if num_warps not in (8, 12):
        raise ValueError(f"num_warps={num_warps!r}: a float16-product tile has one producer "
                         f"and one or two consumer warpgroups (8 or 12 warps)")
    rows = 16 * num_warps - 64   # the consumers' rows: queries forward, keys in dK/dV
    if backward:
        if head_dim > WGMMA_F16X3_BWD_MAX_D:
            return []
        return [TileConfig(x3_backward_block_m(head_dim), rows, num_warps, s, kernel)
                for s in x3_backward_stages(head_dim, kernel)]
    if head_dim > WGMMA_F16X3_MAX_D:
        return []
    block_ns, stages = x3_forward_shapes(head_dim, kernel)
    return [TileConfig(rows, n, num_warps, s, kernel) for s in stages for n in block_ns]


def x3_forward_shapes(head_dim: int, kernel: str = "wgmma_f16x3") -> tuple[tuple, tuple]:
    """(block_n's, num_stages') a float16-product forward tile takes (block_m = 128 on 12
    warps): 'wgmma_f16x3' 64 or 32 keys on 2 stages (its fresh k-step sums hold three copies of
    S in registers; Q's, K's and V's hi and lo tiles fill shared memory); 'wgmma_f16x1' holds
    no lo tiles of K and V and chains S's k16 steps (NOTES v61): 3 stages too, and 128 keys at
    d <= 64 (where S, O, O's tile sum and P fit a consumer's registers)."""
    if kernel == "wgmma_f16x1":
        return ((64, 32, 128) if head_dim <= 64 else (64, 32)), (2, 3)
    return (64, 32), (2,)


def float32_wgmma_pays(precision: str, head_dim: int, seq_len_k: int,
                       backward: bool = False) -> bool:
    """Whether float32's ``precision`` takes its Hopper warpgroup kernel by default for a dense
    batch in one pass (``tile_candidates(staged=True)``): 'tf32' the TF32 wgmma forward
    (``wgmma_tf32_pays``) and the one-float16-product backward ('wgmma_f16x1', by
    ``wgmma_f16x3_pays``'s rule), 'highest' the three-float16-product kernels
    (``wgmma_f16x3_pays``)."""
    if precision == "tf32":
        return wgmma_f16x3_pays(head_dim, seq_len_k, True) if backward else \
            wgmma_tf32_pays(head_dim, seq_len_k)
    if precision == "highest":
        return wgmma_f16x3_pays(head_dim, seq_len_k, backward)
    return False


#: Keys from which the TF32 wgmma forward is the default at d <= 64: below, its staging pass (one
#: read of k and v, one write of K and Vᵀ) may weigh more than its faster products. H200, float32,
#: FlashAttention's shapes, wgmma_tf32 / the mma 'tf32' kernel, non-causal / causal: the 8-warp
#: kernel (call 148, NOTES.md v37) d = 64 T = 1024 0.96 / 0.84, 2048 1.09 / 1.01; the
#: warp-specialized one (call 156, NOTES.md v42) d = 64 T = 1024 1.26 / 1.03, 4096 1.76 / 1.60;
#: shorter lengths were not measured.
WGMMA_TF32_MIN_KEYS = 1024


def wgmma_tf32_pays(head_dim: int, seq_len_k: int) -> bool:
    """Whether the default forward of precision='tf32' on sm_90 takes the TF32 wgmma kernel for
    a dense batch in one pass (``tile_candidates(staged=True)``): head dims up to
    WGMMA_TF32_MAX_D, at d <= 64 from WGMMA_TF32_MIN_KEYS keys on; wider heads up to
    WGMMA_TF32_WIDE_D from WGMMA_TF32_WIDE_MIN_KEYS keys on (``wgmma_tf32_wide_tiles``)."""
    if head_dim > WGMMA_TF32_MAX_D:
        return head_dim <= WGMMA_TF32_WIDE_D and seq_len_k >= WGMMA_TF32_WIDE_MIN_KEYS
    return head_dim > 64 or seq_len_k >= WGMMA_TF32_MIN_KEYS


#: Head dims above WGMMA_TF32_MAX_D that the 4-warp TF32 wgmma forward takes: one warpgroup of 64
#: query rows, key tiles of 32, 2 stages, the head dim padded to wgmma's next width, 192 or 256
#: (shared memory 148480 / 197632 bytes; NVRTC: no spill, dense, causal and window + softcap +
#: ALiBi; NOTES v46, v47)
WGMMA_TF32_WIDE_D = 256

#: Keys from which the wide tile is 'tf32''s default (128 < d <= WGMMA_TF32_WIDE_D): H200, d = 256,
#: T = 4096 / 16384, FlashAttention's shapes (call 166, NOTES.md v48): 154.6-183.6 TFLOP/s, 1.81-1.95x
#: the mma.sync 'tf32' kernel and 3.77-4.89x torch's efficient float32; shorter lengths (where the
#: staging pass weighs more) were not measured.
WGMMA_TF32_WIDE_MIN_KEYS = 4096


def wgmma_tf32_wide_tiles(head_dim: int) -> list[TileConfig]:
    """The TF32 wgmma forward's tiles at WGMMA_TF32_MAX_D < head_dim <= WGMMA_TF32_WIDE_D
    (flash_fwd_wgmma_tf32.cu's 4-warp kernel; the default where ``wgmma_tf32_pays``)."""
    if not WGMMA_TF32_MAX_D < head_dim <= WGMMA_TF32_WIDE_D:
        raise ValueError(f"the wide TF32 wgmma tiles take head dims {WGMMA_TF32_MAX_D + 1} to "
                         f"{WGMMA_TF32_WIDE_D}, got {head_dim}")
    return [TileConfig(64, 32, 4, 2, "wgmma_tf32")]


def wgmma_tf32_tiles(head_dim: int) -> list[TileConfig]:
    """Forward tiles of the TF32 wgmma kernel (flash_fwd_wgmma_tf32.cu, precision='tf32' on
    sm_90: the default of dense batches where ``wgmma_tf32_pays``), preferred first. 12 warps,
    block_m = 128: a producer warpgroup and two consumers (flash_fwd_wgmma_ws.cu, S_j beside
    P_(j-1) V_(j-1), no block-wide barrier); 4 or 8 warps (flash_fwd_wgmma_tf32.cu): warpgroups
    of 64 query rows, 2 stages (S_j, then P_j V_j) or 3 (S_j beside P_(j-1) V_(j-1)). Shared
    memory in float32: Q 512·d bytes at 128 rows, a stage 2 · 4 · block_n · d: at d = 128 two
    stages of 64 keys fit beside Q (192 KB), three only of 32 keys or beside 64 rows; at d = 64
    two or three of 128 keys (160 / 224 KB).
    H200, FlashAttention's shapes, TFLOP/s (tools/bench_f32.py --wgmma, NOTES.md v42, call 156),
    T = 4096 / 16384 non-causal: d = 64 128 × 128 × 12 252.7 / 279.1, 128 × 64 × 12 × 3
    226.5 / 242.4, the 8-warp 128 × 128 220.2 / 245.8; d = 128 128 × 64 × 12 290.8 / 327.8,
    128 × 32 × 12 × 3 225.7 / 237.2, the 8-warp 128 × 64 246.8 / 272.4. The 8-warp tiles at
    T = 4096 (call 145, NOTES.md v36): d = 64 128 × 64 156.0, 64 × 64 151.5, 3 stages
    160.0 / 142.8; d = 128 64 × 64 129.9, 128 × 32 156.6, 3 stages 128.4 / 147.8."""
    if head_dim > WGMMA_TF32_MAX_D:
        raise ValueError(f"the TF32 wgmma forward takes head dims up to {WGMMA_TF32_MAX_D}, got "
                         f"{head_dim}")
    if head_dim <= 64:
        ws = [(128, 128, 12, 2), (128, 64, 12, 3)]
        tiles = [(128, 128, 8, 2), (128, 64, 8, 2), (64, 64, 4, 2), (128, 128, 8, 3),
                 (128, 64, 8, 3)]
    else:
        ws = [(128, 64, 12, 2), (128, 32, 12, 3)]
        tiles = [(128, 64, 8, 2), (64, 64, 4, 2), (128, 32, 8, 2), (64, 64, 4, 3),
                 (128, 32, 8, 3)]
    # At 96 columns (64 < d <= 96) a row is 24 chunks, which 128 producer threads do not step
    # through: the warp-specialized producer computes every copy's address and spills 600+
    # bytes (NOTES.md v42), so the 8-warp kernel stays first there
    tiles = tiles + ws if 64 < head_dim <= 96 else ws + tiles
    return [TileConfig(*t, "wgmma_tf32") for t in tiles]


#: The widest head dim of the TF32 backward (flash_bwd_tf32.cu): a warp keeps dK and dV of its 16
#: keys in registers, 128 floats per thread at d = 128
TF32_BWD_MAX_D = 128


def tf32_backward_tiles(head_dim: int, family: str) -> list[TileConfig]:
    """Backward tiles of the float32 TF32 kernels (``family`` 'tf32' or 'tf32x3';
    flash_bwd_tf32.cu), preferred first, head dims up to TF32_BWD_MAX_D: block_m queries per step
    of the dK/dV kernel (and query rows of the dQ kernel, 16 per warp), block_n = 16 keys per
    warp, or 16 per pair of warps (block_n = 8 · warps: one computes Sᵀ and dV, the other dPᵀ
    and dK; above d = 64 the only way). The dQ kernel takes the tile transposed
    (plan.specs_for). A solo dK/dV warp holds dK and dV of its keys (d / 2 floats per thread)
    beside Sᵀ and dPᵀ (block_m / 2) and P's split operands (block_m at 'tf32x3'): 64 queries per
    step spilled 216 bytes at d = 64 (causal, sm_90), 32 do not; a pair holds half of that.
    H200, 'highest' (tf32x3), T = 4096, non-causal (tools/bench_f32.py --pass bwd --tiles, calls
    138 and 141, three runs, NOTES.md v35): d = 64 the pair 64 × 64 × 8 warps 29.9 TFLOP/s
    against the solo 32 × 64 × 4 28.5; d = 128 32 × 64 × 8 with one stage 26.3-26.5 against two
    24.6-24.8. 'tf32' (call 147): d = 64 32 × 64 × 4 83.1-83.9, 1 stage 83.7, 8 warps 76.1; d = 128
    the pair with one stage 66.7 against two 61.6-61.8."""
    if head_dim > TF32_BWD_MAX_D:
        raise ValueError(f"the TF32 backward takes head dims up to {TF32_BWD_MAX_D}, got "
                         f"{head_dim}")
    three = family == "tf32x3"
    if head_dim <= 64:
        tiles = [(64, 64, 8, 2)] * three + [(32, 64, 4, 2), (32, 64, 4, 1), (32, 32, 2, 1)]
    else:   # a pair of warps per 16 keys (flash_bwd_tf32.cu)
        tiles = [(32, 64, 8, 1), (32, 64, 8, 2), (32, 32, 4, 1)]
    return [TileConfig(*t, family) for t in tiles]


def wgmma_forward_tiles(head_dim: int, short: bool = False) -> list[TileConfig]:
    """Forward tiles of the wgmma kernels, preferred first. d <= 128: the warp-specialized kernel
    (12 warps: a producer warpgroup and two consumers, flash_fwd_wgmma_ws.cu), 128 × 128 with 2
    K/V stages; H200, float16, FlashAttention's shapes, T = 2048..16384 (v16, NOTES.md,
    tools/bench_fwd_tiles.py): d = 128 434-544 TFLOP/s non-causal and 309-541 causal against
    334-403 and 263-389 for the 8-warp 128 × 128 × 3; 3 stages 0-8% slower, 128 × 64 × 4 stages
    10-20% slower; d = 64 321-396 / 233-400 against 299-369 / 231-359. Split-KV and KV caches
    take the first 8-warp tile here (plan.without_producer).
    The 8-warp kernel, tile_ablation.yaml (v4): d = 64: 128×64 with 4 K/V buffers 373, 3 buffers
    362, 128×128 290 (166 registers: one block of 8 warps per SM, against two at 128×64 with
    112), 64×64 (4 warps) 331. d = 128: 128×128 3 buffers 402, 128×64 347–356, 64×64 346.
    d in 193..256: the warp-specialized kernel with 64 keys per step (O alone is 128 registers of a
    consumer's 208): d = 256, float16, T = 4096 / 16384 (call 47): 501 / 552 non-causal and
    379 / 514 causal against 317 / 349 and 245 / 309 for the 8-warp 128 × 32 × 3, and
    393-399 / 322-376 for a warp-specialized 128 × 32 × 3.
    d <= 64 since v69: the warp-specialized kernel with one consumer warpgroup (8 warps, 64 × 128,
    2 stages), two blocks a multiprocessor (TileConfig.blocks_per_sm), so that one block's start
    and stores run beside the other's products: H100, float16 / bfloat16, FlashAttention's
    shapes, T = 2048..16384 (call 205, NOTES v68, tools/bench_fwd_tiles.py, cuDNN in the same
    run): 1.02-1.07× the 12-warp 128 × 128 × 2 in all 16 cells, 0.85-1.00× cuDNN against
    0.82-0.96×. At d = 128 its 64 × 64 tile (128 keys do not fit twice) ran 0.83-0.90×.
    d <= 64 since v89, unless ``short`` (``wgmma_one_consumer_pays``, backward=False: neither
    length above 4096 causal, 1024 not): three consumer warpgroups, 192 × 128 × 16 warps, 2 stages
    (FlashAttention-3's d = 64 tile; consumers 160 registers, the producer 32, copy-engine loads
    only: gpu.plan.copy_engine_only): H100, float16 / bfloat16, d = 32 and 64, T = 1024..16384
    (calls 253, 254, NOTES v89, tools/bench_fwd_tiles.py, cuDNN in the same run) 1.05-1.18× the
    one-consumer tile non-causal from T = 2048; causal from 8192 0.96-1.04× at d = 64, 1.06-1.13×
    at d = 32; but 0.83-1.00× causal up to 4096 and 0.95-0.99× non-causal at 1024, where the
    one-consumer tile stays first (WGMMA_FWD_ONE_CONSUMER_MAX_LEN). Softcap and packed batches
    keep it too (the plan refuses them on three consumers)."""
    if head_dim <= 64:
        three = [] if short else [TileConfig(192, 128, 16, 2, "wgmma")]
        return three + [TileConfig(64, 128, 8, 2, "wgmma"), TileConfig(128, 128, 12, 2, "wgmma"),
                        TileConfig(128, 64, 8, 4, "wgmma"), TileConfig(128, 64, 8, 3, "wgmma")]
    if head_dim <= 128:
        return [TileConfig(128, 128, 12, 2, "wgmma"), TileConfig(128, 128, 8, 3, "wgmma"),
                TileConfig(128, 64, 8, 3, "wgmma")]
    if head_dim <= 192:   # the warp-specialized 128 x 64 spills 392-480 bytes at d = 192
        return [TileConfig(128, 32, 8, 3, "wgmma")]
    return [TileConfig(128, 64, 12, 2, "wgmma"), TileConfig(128, 32, 8, 3, "wgmma")]


#: Longest sequence (queries or keys), causal and not, for which the 16-bit backward at d <= 64
#: takes the tile of one consumer warpgroup, 64 × 64 × 8 warps, two blocks a multiprocessor
#: (``short`` in ``tile_candidates``; NOTES v66, v69). Against the 12-warp 64 × 128 × 2 in the
#: same run, float16 / bfloat16, FlashAttention's shapes (tools/bench_fwd_tiles.py --pass bwd on an
#: H100, calls 202 and 205; tools/ab_speed.py on an H200, call 206): T = 1024 1.07-1.11×, 2048
#: 1.05-1.09×, 4096 1.03-1.07×; T = 8192 causal 1.04-1.08× but non-causal 0.96-1.01×; 16384
#: 0.95-1.03×.
WGMMA_BWD_ONE_CONSUMER_MAX_LEN = {True: 8192, False: 4096}

#: The forward's: longest sequence for which the 16-bit forward at d <= 64 keeps the tile of one
#: consumer warpgroup (64 × 128 × 8) ahead of three (192 × 128 × 16). H100, float16 / bfloat16,
#: d = 32 and 64 (calls 253, 254; NOTES v89): causal T = 1024..4096 ran 1.00-1.21× faster on
#: one, 8192 0.94-1.00×, 16384 0.88-1.04×; non-causal T = 1024 1.01-1.05×, 2048..16384
#: 0.85-0.95×.
WGMMA_FWD_ONE_CONSUMER_MAX_LEN = {True: 4096, False: 1024}


def wgmma_one_consumer_pays(head_dim: int, seq_len_q: int, seq_len_k: int, causal: bool,
                            backward: bool) -> bool:
    """Whether the 16-bit pass (``backward`` or the forward) on Hopper takes the tile of one
    consumer warpgroup by default (``tile_candidates(short=True)``) for these lengths: d <= 64
    and neither length above WGMMA_BWD_ONE_CONSUMER_MAX_LEN[causal] (the backward: of a dense
    batch, ``api._backward_choice``) or WGMMA_FWD_ONE_CONSUMER_MAX_LEN[causal] (the forward, of
    which a causal block's stream is half as long). Shorter streams leave a larger share of
    each block to its start and stores, which a second block a multiprocessor overlaps."""
    lens = WGMMA_BWD_ONE_CONSUMER_MAX_LEN if backward else WGMMA_FWD_ONE_CONSUMER_MAX_LEN
    return head_dim <= 64 and max(seq_len_q, seq_len_k) <= lens[bool(causal)]


def _wgmma_backward_tiles(head_dim: int, short: bool = False) -> list[TileConfig]:
    """Backward tiles of the wgmma kernels, preferred first: block_m queries per step of the
    dK/dV kernel (and query rows of the dQ kernel), block_n keys per dK/dV block (and keys per
    step of the dQ kernel). At d = 128 the dK/dV kernel holds dK and dV (128 registers per
    thread) beside Sᵀ and dPᵀ: only 64 queries per step fit in 255 registers.
    tile_ablation.yaml on the H200 (v5, NOTES.md; float16, T = 8192, TFLOP/s): 64×64 with 4
    warps and 2 stages 290 (d = 64) and 346 (d = 128); 1 stage 288 / 323; 64×128 with 8 warps
    282 / 313. d <= 128: the warp-specialized kernels first (12 warps: a producer warpgroup
    streaming query tiles (dK/dV) or key tiles (dQ) and two consumer warpgroups,
    flash_bwd_wgmma_ws.cu), dK/dV 64 × 128 and dQ 128 × 64 with 2 stages: float16, T = 4096 and
    16384 (v19, NOTES.md, tools/bench_fwd_tiles.py --pass bwd): 301-353 TFLOP/s at d = 64 and
    340-429 at d = 128 against 261-291 and 299-349 for 64 × 64 × 4 (0.81-0.91 of cuDNN against
    0.67-0.80); 3 stages within 3%. ``short`` (``wgmma_one_consumer_pays``): at d <= 64 the tile
    of one consumer warpgroup first, 64 × 64 × 8 warps, two blocks a multiprocessor."""
    first = [TileConfig(64, 64, 8, 2, "wgmma")] if short and head_dim <= 64 else []
    return first + [TileConfig(64, 128, 12, 2, "wgmma"), TileConfig(64, 64, 4, 2, "wgmma")]


#: The widest head dim whose 'tf32' backward takes F16_SCALED by default: every head dim the
#: 16-bit pair takes from v72, when its dQ kernel stages its float32 rows through Q's rows in
#: two halves (at d = 128 storing them from the fragments spilled 16 B; NOTES.md v71, v72)
F16_SCALED_DEFAULT_MAX_D = 128


def f16_scaled_tiles(head_dim: int, short: bool = False) -> list[TileConfig]:
    """Tiles of F16_SCALED, preferred first: the 16-bit backward's warp-specialized tiles
    (_wgmma_backward_tiles; ``short`` as there)."""
    return [t.replace(kernel=F16_SCALED) for t in _wgmma_backward_tiles(head_dim, short)
            if t.warp_specialized_dkdv]


def check_dtype(tile: "TileConfig", dtype) -> None:
    """ValueError when ``tile``'s kernel family does not take ``dtype`` inputs (FAMILY_DTYPES)."""
    name = dtype_name(dtype)
    if name not in FAMILY_DTYPES[tile.kernel]:
        raise ValueError(f"TileConfig.kernel={tile.kernel!r} needs "
                         f"{' or '.join(FAMILY_DTYPES[tile.kernel])} inputs only; these are {name} "
                         f"(tile={tile.short()}; leave tile=None for the dtype's default)")


def tile_candidates(head_dim: int, dtype, *, backward: bool = False, causal: bool = False,
                    deterministic: bool = True, hopper: bool = True,
                    wgmma: bool = False, dmma: bool = False,
                    precision: str | None = None, staged: bool = False,
                    short: bool = False) -> list[TileConfig]:
    """Tiles for (head_dim, dtype, pass), preferred first; ``default_tile`` takes the first that
    fits the device. The reason for each first choice sits beside it; the measurements are
    experiments/tile_ablation.yaml on the H200 (NOTES.md, v2): float16, T = 8192, FA shapes.
    No default may spill registers (``python -m cuflash compile --fail-on-spills``).
    ``dmma``: the GPU has float64 tensor cores (has_fp64_tensor_cores). ``precision``: float32's
    (``cuflash.precision``; None: its default): the forward of 'tf32' takes the TF32 kernels'
    tiles alone (nothing else computes it), of 'highest' those first, then the CUDA-core tiles
    (as accurate: GPUs before sm_80); the backward likewise, at head dims up to TF32_BWD_MAX_D
    (wider: 'highest' on the CUDA cores, 'tf32' refused). ``staged``: the problem is a dense
    batch in one pass where float32's warpgroup kernel pays (``float32_wgmma_pays``; none of them
    runs packed batches, KV caches or split-KV), and with ``wgmma`` its tiles come first: 'tf32'
    the TF32 wgmma forward (d <= WGMMA_TF32_WIDE_D; it stages K and Vᵀ first) and the
    one-float16-product backward ('wgmma_f16x1', d <= WGMMA_F16X3_BWD_MAX_D), 'highest' the
    three-float16-product forward (d <= WGMMA_F16X3_MAX_D) and backward (d <=
    WGMMA_F16X3_BWD_MAX_D). ``short``: sequences short enough that the 16-bit pass's tile of
    one consumer warpgroup pays (``wgmma_one_consumer_pays`` of this pass; the backward's of a
    dense batch): at d <= 64 the forward then keeps its one-consumer tile ahead of three
    consumers, the backward takes its one-consumer tile first.
    """
    name = dtype_name(dtype)
    prec = _check_precision(precision, dtype)
    if prec == "tf32" and backward and head_dim > TF32_BWD_MAX_D:
        raise ValueError(f"precision='tf32': the TF32 backward takes head dims up to "
                         f"{TF32_BWD_MAX_D}, got {head_dim}; wider heads run the float32 "
                         f"backward on the CUDA cores (precision='ieee' or 'highest')")
    if prec in ("tf32", "highest"):
        tiles = (tf32_tiles(head_dim, FAMILY[prec]) if not backward else
                 tf32_backward_tiles(head_dim, FAMILY[prec]) if head_dim <= TF32_BWD_MAX_D
                 else [])
        if prec == "tf32" and wgmma and staged and backward:
            # float32 as one float16 product of power-of-two-scaled rows (TF32's 11-bit
            # significands) on Hopper's 16-bit warpgroup tensor cores (NOTES.md v56)
            tiles = wgmma_f16x3_tiles(head_dim, True, "wgmma_f16x1") + tiles
            if head_dim <= F16_SCALED_DEFAULT_MAX_D:
                # ahead of them, the 16-bit backward itself on copies scaled per tensor (v71)
                tiles = f16_scaled_tiles(head_dim, short) + tiles
        if prec == "tf32" and wgmma and staged and not backward and \
                head_dim <= WGMMA_TF32_WIDE_D:
            # float32 as TF32 on Hopper's warpgroup tensor cores: 1.1-1.8x the mma.sync kernel
            # where wgmma_tf32_pays (NOTES.md v36, v37), 1.8-1.95x at d = 256 (v48)
            tiles = (wgmma_tf32_tiles(head_dim) if head_dim <= WGMMA_TF32_MAX_D else
                     wgmma_tf32_wide_tiles(head_dim)) + tiles
            x1 = x1_forward_default(head_dim)
            if x1 is not None:
                # one float16 product of staged hi-only rows ahead of them (NOTES.md v59, v62)
                tiles = [x1] + tiles
        if prec == "highest" and wgmma and staged:
            # float32 at float32's accuracy as three float16 products on Hopper's warpgroup tensor
            # cores: forward 1.7-2.0x, backward 2.5-2.7x the mma.sync 3xTF32 kernels (call 165,
            # NOTES.md v48); the d = 128 backward (32-query tiles) 3.9-4.2x (call 177, v54)
            tiles = wgmma_f16x3_tiles(head_dim, backward) + tiles
        if prec in STANDS_IN:
            tiles += tile_candidates(head_dim, dtype, backward=backward, causal=causal,
                                     deterministic=deterministic, hopper=hopper,
                                     precision=STANDS_IN[prec])
        return tiles
    if dmma and dmma_capable(head_dim, dtype) and head_dim <= DMMA_DEFAULT_MAX_D and \
            (deterministic or not backward):
        # float64 on tensor cores (mma.sync m8n8k4): measured faster than the simt kernels at
        # d = 64 and 128 on the H200 (NOTES.md, v11); no atomic-dQ mode, so
        # deterministic=False stays on simt. Wider heads stay on simt (not measured).
        return _dmma_tiles(head_dim, backward, hopper) + tile_candidates(
            head_dim, dtype, backward=backward, causal=causal, deterministic=deterministic,
            hopper=hopper)
    if mma_capable(head_dim, dtype) and not (backward and head_dim > 128):
        if wgmma and not backward:
            # Forward on Hopper (sm_90): warpgroup tensor cores, 64 query rows per warpgroup,
            # Q and K read by wgmma straight from swizzled shared memory (flash_fwd_wgmma.cu).
            return wgmma_forward_tiles(head_dim, short) + tile_candidates(
                head_dim, dtype, causal=causal, hopper=hopper)
        if wgmma:
            # Backward on Hopper: dK/dV with 64 keys per warpgroup and a separate dQ pass
            # (flash_bwd_wgmma.cu, flash_bwd_wgmma_ws.cu); deterministic=False too, whose
            # default runs them deterministically (default_backward)
            return _wgmma_backward_tiles(head_dim, short) + tile_candidates(
                head_dim, dtype, backward=True, causal=causal, hopper=hopper)
        if not backward:
            # Forward, tensor cores. Each warp owns 16·MT query rows and keeps S (16·MT × block_n)
            # and O (16·MT × d) in registers; with MT = 2 each K/V fragment read from shared
            # memory feeds two mma's.
            # d <= 64: 128 × 128 ran at 284 TFLOP/s against 262 for 128 × 64 (v2), but since the
            #   shared mainloop (v6) it spills 24 B on sm_80 and sm_90, causal or not (255
            #   registers; 128 × 64: 222-224, no spill), so 128 × 64 is the default.
            # d <= 128: 128 × 32, 254 TFLOP/s. 128 × 64 ran faster (280–284) but spills 292 B.
            # d > 128: O alone is 128 registers at MT = 1; block_n = 32 keeps S small.
            if head_dim <= 64:
                first = TileConfig(128, 64, 4, 2, "mma")
            elif head_dim <= 128:
                first = TileConfig(128, 32, 4, 2, "mma")
            else:
                first = TileConfig(64, 32, 4, 2, "mma")
            # GPUs before sm_80 (no mma.sync .f16, no cp.async): the CUDA-core tiles after them
            return [first, TileConfig(64, 32, 4, 1, "mma"), TileConfig(32, 32, 2, 1, "mma")] + \
                _simt_tiles(head_dim, name, backward, deterministic)
        # Backward, tensor cores: one warp per 16 keys of the resident K/V tile holds dK and dV
        # (2 × 16 × d floats) and Sᵀ, dPᵀ (2 × 16 × block_m). Deterministic (separate dQ pass):
        # 64 × 64, 4 warps, 1 stage: 167 TFLOP/s at d=64, 201 at d=128 in the v2 ablation
        # (8e491c3, NOTES.md), ahead of every atomic-dQ tile there. The committed rerun
        # (b3e769d, `report tiles docs/results/tile_ablation/results.csv`) has it at 163.4 and
        # 197.7: at d = 64 level with the best atomic tile (163.6) and behind deterministic
        # 64 × 128 (166.8); at d = 128 ahead of every atomic tile (171.1). Atomic dQ: 128 keys
        # per block (8 warps) halve the atomics per key: 160 (d=64) and 177 (d=128) TFLOP/s in v2. Larger d falls back to the CUDA-core kernels.
        # Before Hopper, ptxas spills 20 B in the 64 × 64 dK/dV kernel at d = 128 (sm_80):
        # those GPUs take 32 queries per step there (242 registers).
        first = (TileConfig(64, 64, 4, 1, "mma") if deterministic
                 else TileConfig(64, 128, 8, 2, "mma"))
        if deterministic and head_dim > 64 and not hopper:
            first = TileConfig(32, 64, 4, 1, "mma")
        return [first, TileConfig(32, 64, 4, 2, "mma"), TileConfig(32, 64, 4, 1, "mma"),
                TileConfig(32, 32, 2, 1, "mma")] + _simt_tiles(head_dim, name, backward,
                                                               deterministic)
    return _simt_tiles(head_dim, name, backward, deterministic)


def _simt_tiles(head_dim: int, name: str, backward: bool, deterministic: bool) -> list:
    """The CUDA-core tiles of tile_candidates, preferred first."""
    # CUDA-core (SIMT) path: every dtype and head_dim. Tiles hold float (double for float64)
    # copies in shared memory (Q, K, V and P tiles: about (block_m + 2·block_n)·d·4 bytes), so
    # wide rows (float64, or d > 128) take smaller tiles to fit 227 KB, and smaller GPUs
    # (sm_86/sm_89: 99 KB) take the later entries.
    wide = name == "float64" or head_dim > 128
    very_wide = name == "float64" and head_dim > 128
    if not backward:
        first = ([TileConfig(32, 32, 4, 1)] if very_wide else
                 [TileConfig(32, 64, 4, 1)] if wide else [TileConfig(64, 64, 8, 1)])
        return first + [TileConfig(32, 32, 4, 1), TileConfig(16, 32, 4, 1), TileConfig(16, 16, 4, 1),
                         TileConfig(16, 16, 2, 1)]
    first = ([TileConfig(16, 16, 4, 1)] if very_wide else
             [TileConfig(32, 32, 4, 1)] if wide else [TileConfig(32, 64, 4, 1)])
    if wide and not very_wide and name == "float64" and not deterministic:
        # ptxas spills in the causal 32 × 32 float64 dK/dV kernel with atomic dQ at d = 128
        # (255 registers, since the kernels walk GQA groups): 20 B for sm_80, and for sm_90 too
        # from NVRTC 13.5 (88 B; 13.0 did not): 16 queries per step there (243-250 registers)
        first = [TileConfig(16, 32, 4, 1)]
    return first + [TileConfig(32, 32, 4, 1), TileConfig(16, 16, 2, 1), TileConfig(16, 16, 1, 1)]


def default_tile(head_dim: int, dtype, *, backward: bool = False, causal: bool = False,
                 deterministic: bool = True, smem_limit: int | None = None,
                 arch: str | None = None, precision: str | None = None,
                 staged: bool = False, short: bool = False) -> TileConfig:
    """The tile used when ``tile=None``: the first of ``tile_candidates`` that the kernels accept
    within ``smem_limit`` bytes of shared memory per block on a GPU of architecture ``arch``
    ('sm_90', ...; Hopper-only kernels are considered only when it says sm_90, the float64
    tensor-core kernels only when it says sm_80 or sm_90). With no limit: the first candidate
    without either (the CPU twin reads only block_m, block_n). ``precision``: float32's
    (``cuflash.precision``, None its default 'highest': the TF32 kernels' tiles first).
    ``staged``: as ``tile_candidates``' (the caller's problem is a dense batch in one pass where
    ``float32_wgmma_pays``); ``short``: as ``tile_candidates``' (where ``wgmma_one_consumer_pays``)."""
    return _default_tile(int(head_dim), dtype_name(dtype), bool(backward), bool(causal),
                         bool(deterministic), smem_limit, arch, precision, bool(staged),
                         bool(short))


def default_backward(head_dim: int, dtype, *, causal: bool = False, deterministic: bool = True,
                     smem_limit: int | None = None, arch: str | None = None,
                     precision: str | None = None, staged: bool = False,
                     short: bool = False) -> tuple[TileConfig, bool]:
    """The backward that ``tile=None`` runs: (``default_tile(..., backward=True)``, whether dQ
    takes its own deterministic pass). deterministic=False permits dQ by atomics in the dK/dV
    kernel; the default takes them only where they measured faster than the deterministic pair,
    so on Hopper (wgmma tiles) it runs the deterministic pair: the warp-specialized kernel's
    atomic dQ (reductions by the copy engine, dQ's product split at d = 128) ran at 0.99-1.07× of
    it at d = 64 and 0.87-1.00× at d = 128 (v32, NOTES.md; float16, T = 4096 and 16384), and the
    mma atomic tile that deterministic=False took before at 0.43-0.51×.
    An explicit warp-specialized tile with deterministic=False runs the atomic kernel. The TF32
    backward (float32, ``precision`` 'tf32' or 'highest') has no atomic mode: it runs its pair.
    ``precision`` and ``staged``: float32's, as in ``default_tile`` (the three-float16-product
    pair of 'highest' on sm_90, deterministic only, where ``float32_wgmma_pays``); ``short``: the
    16-bit tile of one consumer warpgroup first where ``wgmma_one_consumer_pays``."""
    tile = default_tile(head_dim, dtype, backward=True, causal=causal,
                        deterministic=deterministic, smem_limit=smem_limit, arch=arch,
                        precision=precision, staged=staged, short=short)
    return tile, default_dq_deterministic(tile, deterministic)


def default_dq_deterministic(tile: TileConfig, deterministic: bool) -> bool:
    """Whether the default backward on ``tile`` (``default_backward``'s choice) takes the
    deterministic dQ pass when ``deterministic`` is asked: always for True; for False on the wgmma
    tiles (measured faster than their atomic dQ, or they have none) and the TF32 tiles (none)."""
    return bool(deterministic) or tile.kernel in ("wgmma", F16_SCALED, *F16_SPLIT, *PRODUCTS)


@functools.lru_cache(maxsize=None)
def _default_tile(head_dim, dtype, backward, causal, deterministic, smem_limit, arch,
                  precision=None, staged=False, short=False):
    # cached: every attention call without a tile asks, and the checks below are not free
    known = smem_limit is not None and arch is not None   # a real (or assumed) device
    cands = tile_candidates(head_dim, dtype, backward=backward, causal=causal,
                            deterministic=deterministic,
                            hopper=is_hopper(arch or DEFAULT_ARCH),
                            wgmma=known and is_hopper(arch),
                            dmma=known and has_fp64_tensor_cores(arch), precision=precision,
                            staged=staged, short=short)
    if smem_limit is None:
        return cands[0]
    from .gpu.plan import check_tile  # the kernels' constraints live with the kernels
    errors = []
    for cand in cands:
        try:
            check_tile(cand, head_dim, dtype, backward=backward, smem_limit=smem_limit, arch=arch)
            return cand
        except ValueError as exc:
            errors.append(str(exc))
    raise ValueError(f"no tile fits head_dim={head_dim}, dtype={dtype_name(dtype)} in "
                     f"{smem_limit} bytes of shared memory:\n" + "\n".join(errors))
