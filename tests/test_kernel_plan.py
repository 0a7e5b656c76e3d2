"""CPU checks of the kernel plan for the Hopper (wgmma) forward: generated wrappers in sync with
their generator, the tile rules and refusals, the default choice per architecture, and an NVRTC
compile for sm_90a with no register spills (no GPU needed)."""
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from cuflash import TileConfig, default_tile
from cuflash.tile import default_backward
from cuflash.gpu import build, plan

from helpers import skip_without_nvrtc

KERNELS = Path(__file__).resolve().parents[1] / "kernels_cu"
HOPPER = plan.SMEM_LIMIT["sm_90"]
WG = TileConfig(128, 128, 8, 3, "wgmma")


def test_wgmma_header_is_what_the_generator_writes():
    spec = importlib.util.spec_from_file_location("gen_wgmma", KERNELS / "gen_wgmma.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (KERNELS / "wgmma.cuh").read_text() == gen.render(), \
        "kernels_cu/wgmma.cuh is stale: run python kernels_cu/gen_wgmma.py"


# A generic lambda: a lambda whose parameter list names `auto`
GENERIC_LAMBDA = re.compile(r"\]\s*(?:__device__\s*)?\([^)]*\bauto\b")


def generic_lambdas(folder: Path) -> list[str]:
    """file:line of each generic lambda in the kernel sources under `folder`."""
    return [f"{p.name}:{i}" for p in sorted(folder.glob("*.cu*"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if GENERIC_LAMBDA.search(line)]


def test_no_generic_lambdas_in_kernels(tmp_path):
    """NVRTC 13.0, the GPU machines' (CuPy 14.2 on cupy-cuda13x), refuses a generic lambda in
    device code ("a function without execution space annotations is considered a host
    function"); NVRTC 13.2 and 13.5 build it, so a compile gate on a newer NVRTC cannot see it
    (NOTES.md, call 250: every 16-bit wgmma backward failed to build on the GPU; setup.cfg now
    pins 13.0, v90). A functor with a member template does the same job."""
    assert not generic_lambdas(KERNELS), \
        f"generic lambdas, refused by NVRTC 13.0: {generic_lambdas(KERNELS)}"
    (tmp_path / "k.cuh").write_text("auto probs = [&](auto pass) { run<pass.value>(); };\n"
                                    "auto f = [&](const auto& x, int n) {};\nauto g = [&](int n) {};\n")
    assert generic_lambdas(tmp_path) == ["k.cuh:1", "k.cuh:2"]


def test_wgmma_spec_layout():
    (spec,) = plan.specs_for("float16", 72, WG, variant=False, backward=False)
    assert spec.head_dim == 128          # padded to whole 64-element panels
    assert spec.arch == "sm_90a"
    assert spec.smem_bytes() == (128 + 3 * 2 * 128) * 128 * 2 + 1024
    assert spec.name == "cuflash_wgmma_fwd_f16_d128_m128_n128_w8_s3"
    plan.validate(spec, HOPPER, "sm_90")


@pytest.mark.parametrize("tile,arch,match", [
    (WG, "sm_80", "runs only on sm_90"),
    (WG, "sm_100", "runs only on sm_90"),
    (TileConfig(64, 128, 16, 3, "wgmma"), "sm_90", "64 rows per warpgroup"),
    (TileConfig(64, 256, 8, 3, "wgmma"), "sm_90", "do not fit twice"),   # one consumer: v68
    (TileConfig(128, 128, 12, 1, "wgmma"), "sm_90", "2 to 4 stages"),
    (TileConfig(128, 128, 8, 2, "wgmma"), "sm_90", "3 or 4 stages"),
])
def test_wgmma_refusals(tile, arch, match):
    with pytest.raises(ValueError, match=match):
        plan.check_tile(tile, 64, "bfloat16", smem_limit=HOPPER, arch=arch)


def test_wgmma_backward_is_deterministic_only_and_16_bit():
    with pytest.raises(ValueError, match="dQ in their own pass"):
        plan.specs_for("float16", 64, WG, variant=True, backward=True, deterministic=False)
    dkdv, dq = plan.specs_for("float16", 64, TileConfig(64, 128, 8, 2, "wgmma"), variant=True,
                              backward=True)
    assert (dkdv.role, dkdv.tile.num_warps, dq.role, dq.tile.num_warps) == ("bwd_dkdv", 8,
                                                                           "bwd_dq", 4)
    assert dkdv.smem_bytes() == (2 * 128 + 2 * 2 * 64) * 64 * 2 + 2 * 2 * 64 * 4 + 1024
    assert dq.smem_bytes() == (2 * 64 + 2 * 2 * 128) * 64 * 2 + 1024
    with pytest.raises(ValueError, match="64 keys per warpgroup"):
        plan.check_tile(TileConfig(64, 256, 8, 2, "wgmma"), 64, "float16", backward=True,
                        smem_limit=HOPPER, arch="sm_90")
    # 16·num_warps = block_n + 64: a producer warpgroup beside block_n / 64 consumers, two of
    # them (12 warps) or, at d <= 64, one (8 warps: two blocks a multiprocessor, NOTES v66)
    one = TileConfig(64, 64, 8, 2, "wgmma")
    plan.check_tile(one, 64, "float16", backward=True, smem_limit=HOPPER, arch="sm_90")
    for det in (True, False):
        specs = plan.specs_for("float16", 64, one, plan.Variant("causal"), True, det)
        assert [s.min_blocks() for s in specs] == [2] * len(specs)
        assert all("__launch_bounds__(256, 2)" in build.source(s) for s in specs)
    with pytest.raises(ValueError, match="one consumer warpgroup .num_warps = 8. takes head "
                                         "dims up to 64"):
        plan.check_tile(one, 128, "float16", backward=True, smem_limit=HOPPER, arch="sm_90")
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        plan.specs_for("float32", 64, WG, variant=False, backward=False)


@pytest.mark.parametrize("tile,d,backward,match", [
    (TileConfig(32, 128, 12, 2, "wgmma"), 128, True, "streams block_m = 32 rows a step, and "
                                                      "takes 64"),
    (TileConfig(16, 128, 12, 2, "wgmma"), 64, True, "streams block_m = 16 rows a step, and "
                                                    "takes 64"),
    (TileConfig(256, 16, 16, 3, "wgmma"), 256, False, "num_warps = 16 leaves 128 registers"),
], ids=["ws-bwd-m32", "ws-bwd-m16", "fwd-16-warps-d256"])
def test_wgmma_tiles_that_do_not_compile_are_refused(tile, d, backward, match):
    """Accepted before, then failed to compile (fuzz, session 38): a warp-specialized backward
    whose dQ kernel (the tile transposed) streams 16 or 32 keys in tma.cuh's 64-row boxes (a
    static_assert), and 16 warps at d > 192 (ptxas C7602: 128 registers a thread)."""
    with pytest.raises(ValueError, match=match):
        plan.check_tile(tile, d, "float16", backward=backward, smem_limit=HOPPER, arch="sm_90")
    # the shapes beside them still pass: 64-query ws backward, 16 warps at d = 192 (spills only)
    plan.check_tile(TileConfig(64, 128, 12, 2, "wgmma"), 128, "float16", backward=True,
                    smem_limit=HOPPER, arch="sm_90")
    plan.check_tile(TileConfig(256, 16, 16, 3, "wgmma"), 192, "float16", smem_limit=HOPPER,
                    arch="sm_90")


def test_wgmma_tile_that_does_not_fit_is_refused():
    big = TileConfig(128, 256, 8, 3, "wgmma")   # (128 + 6·256)·256·2 bytes at d = 256
    with pytest.raises(ValueError, match=r"needs \d+ bytes of shared memory"):
        plan.check_tile(big, 256, "float16", smem_limit=HOPPER, arch="sm_90")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_default_tiles_per_architecture(dtype, causal):
    fwd90 = default_tile(128, dtype, causal=causal, smem_limit=HOPPER, arch="sm_90")
    assert fwd90.kernel == "wgmma"
    bwd90 = default_tile(128, dtype, backward=True, causal=causal, smem_limit=HOPPER, arch="sm_90")
    assert bwd90.kernel == "wgmma"
    # d <= 128: the warp-specialized backward (a producer warpgroup and two consumers)
    for d in (64, 128):
        ws = default_tile(d, dtype, backward=True, causal=causal, smem_limit=HOPPER, arch="sm_90")
        assert (ws.block_m, ws.block_n, ws.num_warps) == (64, 128, 12)
        assert all(s.warp_specialized for s in plan.specs_for(dtype, d, ws, causal, True))
    # deterministic=False: the same tile, run deterministically (its atomic dQ measured slower,
    # v20); before Hopper the mma atomic-dQ tile
    for d in (64, 128):
        tile, det = default_backward(d, dtype, causal=causal, deterministic=False,
                                     smem_limit=HOPPER, arch="sm_90")
        assert (tile, det) == (default_tile(d, dtype, backward=True, causal=causal,
                                            smem_limit=HOPPER, arch="sm_90"), True)
        tile, det = default_backward(d, dtype, causal=causal, deterministic=False,
                                     smem_limit=plan.SMEM_LIMIT["sm_80"], arch="sm_80")
        assert (tile.kernel, det) == ("mma", False)
    assert default_backward(128, dtype, deterministic=True, smem_limit=HOPPER,
                            arch="sm_90")[1] is True
    for arch in ("sm_80", "sm_89", "sm_100"):
        limit = plan.SMEM_LIMIT.get(arch, HOPPER)
        assert default_tile(128, dtype, causal=causal, smem_limit=limit, arch=arch).kernel == "mma"
    # no device (the CPU twin): never a Hopper-only tile
    assert default_tile(128, dtype, causal=causal).kernel == "mma"
    # float32: 'highest' (3xTF32) by default, the CUDA cores when asked ('ieee') or before sm_80
    assert default_tile(128, np.float32, smem_limit=HOPPER, arch="sm_90").kernel == "tf32x3"
    assert default_tile(128, np.float32, smem_limit=HOPPER, arch="sm_90",
                        precision="ieee").kernel == "simt"
    assert default_tile(128, np.float32, smem_limit=plan.SMEM_LIMIT["sm_86"],
                        arch="sm_75").kernel == "simt"
    # the backward too (flash_bwd_tf32.cu, d <= 128); wider heads and 'ieee' on the CUDA cores
    assert default_tile(128, np.float32, backward=True, smem_limit=HOPPER,
                        arch="sm_90").kernel == "tf32x3"
    assert default_tile(160, np.float32, backward=True, smem_limit=HOPPER,
                        arch="sm_90").kernel == "simt"
    assert default_tile(128, np.float32, backward=True, smem_limit=HOPPER, arch="sm_90",
                        precision="ieee").kernel == "simt"


def test_wgmma_compiles_for_sm90a_without_spills_or_serialized_products():
    """The 8-warp and the warp-specialized forwards and the default backward: no spill, and
    ptxas does not serialize their wgmma (until v16 it did the 8-warp forward's: NOTES v16)."""
    skip_without_nvrtc()
    specs = []
    for causal in (False, True):
        specs += plan.specs_for("bfloat16", 128, WG, variant=causal, backward=False)
        specs += plan.specs_for("float16", 128, default_tile(128, "float16", causal=causal,
                                smem_limit=HOPPER, arch="sm_90"), causal, False)
        specs += plan.specs_for("float16", 128, default_tile(128, "float16", backward=True,
                                causal=causal, smem_limit=HOPPER, arch="sm_90"), causal, True)
    assert any(s.warp_specialized for s in specs)
    for spec in specs:
        rep = build.compile_offline(build.source(spec), spec.name, spec.arch, spec.smem_bytes())
        assert rep.registers is not None and rep.registers <= 255
        assert rep.spills == 0, f"{spec.name} spills {rep.spills} bytes"
        assert not rep.serialized, f"{spec.name}: ptxas serialized its wgmma"


def test_compile_report_reads_wgmma_serialization():
    log = ("ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are "
           "serialized due to non wgmma instructions reading accumulator registers of  a wgmma "
           "between start and end of the pipeline stage in the function 'k'\n"
           "ptxas info    : Function properties for k\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 211 registers, used 1 barriers\n")
    rep = build._parse_ptxas(log, "k", "sm_90a", 0)
    assert rep.serialized and rep.registers == 211 and rep.spills == 0
    assert not build._parse_ptxas(log.split("\n", 1)[1], "k", "sm_90a", 0).serialized


def test_kernel_getters_are_cached():
    """Every launch asks build for its kernel: the getters must return the compiled function
    from a cache, not rebuild the source (reading kernels_cu/ costs ~0.6 ms per call: a
    backward lost that much per call when a decorator slid off get_preprocess)."""
    from cuflash.gpu import build
    for name in ("get_kernel", "get_tile_lists", "get_preprocess", "get_tf32_stage", "_module"):
        assert hasattr(getattr(build, name), "cache_info"), f"build.{name} is not cached"


def test_tensor_map_shapes():
    """tma.map_shape: the copy engine's dims (innermost first) and byte strides of a (sequences,
    heads, rows, d) array, or None where it cannot read it (a stride of 0 or not a multiple of 16
    bytes, an empty axis); an axis of one element takes the next inner span as its stride."""
    from cuflash.gpu import tma
    assert tma.map_shape((2, 4, 100, 128), [51200, 12800, 128], 2) == \
        ((128, 100, 4, 2), (256, 25600, 102400))
    assert tma.map_shape((1, 4, 100, 128), [0, 12800, 128], 2) == \
        ((128, 100, 4, 1), (256, 25600, 102400))
    assert tma.map_shape((2, 4, 100, 128), [0, 12800, 128], 2) is None      # broadcast batch
    assert tma.map_shape((2, 4, 100, 72), [29600, 7400, 74], 2) is None     # 148-byte rows
    assert tma.map_shape((2, 0, 100, 128), [0, 12800, 128], 2) is None      # no heads
    # (B, T, H, d) views: rows H·d apart, heads d apart
    assert tma.map_shape((2, 4, 100, 64), [25600, 64, 256], 2) == \
        ((64, 100, 4, 2), (512, 128, 51200))
    # float32 (the atomic-dQ kernel's dq_accum): rows of 64 floats, 256 bytes
    assert tma.map_shape((2, 4, 100, 64), [25600, 6400, 64], 4) == \
        ((64, 100, 4, 2), (256, 25600, 102400))


def test_tensor_map_boxes():
    """A map's box is 128 bytes of columns (the 128-byte swizzle's span) × its rows: 64 columns
    of 16-bit elements, 32 of float32 (a map may name its own dtype), with the driver's type
    codes (FLOAT16 6, BFLOAT16 9, FLOAT32 7); nothing is encoded until write (no GPU here)."""
    from cuflash.gpu import tma
    maps = tma.TileMaps("bfloat16", [((2, 4, 100, 128), [51200, 12800, 128], 64),
                                     ((2, 4, 100, 128), [51200, 12800, 128], 64, "float32")])
    (t0, _, _, box0), (t1, dims1, st1, box1) = maps.args
    assert (t0, tuple(box0)) == (9, (64, 64, 1, 1))
    assert (t1, tuple(box1), tuple(dims1), tuple(st1)) == \
        (7, (32, 64, 1, 1), (128, 100, 4, 2), (512, 51200, 204800))
    assert tma.no_maps(5) == {"tma": [0] * 80, "tma_loads": 0}


def test_forward_params_hold_tensor_maps_first():
    """FwdParams starts with its three tensor maps (params.cuh TensorMap, 64-byte aligned), so the
    struct is 64-byte aligned and a multiple of 64 bytes; params.py places every field after them
    as C++ does (the size check of _layout)."""
    from cuflash.gpu import params
    for dtype in ("float16", "float32", "float64"):
        layout = params.layout("fwd", dtype)
        first = layout.fields[0]
        assert (first.name, first.offset, first.count) == ("tma", 0, 48)
        assert layout.offset("tma_loads") == 384 and layout.size % 64 == 0
    with pytest.raises(KeyError, match="no field 'nope'"):
        params.layout("fwd", "float16").offset("nope")


@pytest.mark.parametrize("role", ["fwd", "bwd"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_word_slots_write_what_pack_writes(role, dtype):
    """The forward's per-call path (ops.ForwardLaunch) writes each address into the packed
    struct as a 64-bit word at Layout.word_slots: for every pointer field, the bytes must be
    those Layout.pack gives for the same address (a wrong slot would hand a kernel another
    field's pointer)."""
    import ctypes
    from cuflash.gpu import params
    layout = params.layout(role, dtype)
    base = {f.name: [0] * f.count if f.count > 1 else None if f.kind == "Q" else 0
            for f in layout.fields}
    template = layout.pack(base).tobytes()
    slots = layout.word_slots
    assert len(slots) >= 10 and len(set(slots.values())) == len(slots)
    for n, (name, slot) in enumerate(sorted(slots.items())):
        addr = 0x7F00_0000_0000 + 256 * (n + 1) + 16
        words = (ctypes.c_uint64 * (len(template) // 8)).from_buffer_copy(template)
        words[slot] = addr
        assert bytes(words) == layout.pack(dict(base, **{name: addr})).tobytes(), name


# -- the float64 tensor-core kernels (dmma) ---------------------------------------------------

DM = TileConfig(64, 32, 4, 2, "dmma")


def test_dmma_spec_layout():
    """Names, template arguments and shared memory come from the C++ (rows of d + 2 doubles:
    (64 + 2·2·32)·130·8 bytes at d = 128)."""
    (spec,) = plan.specs_for("float64", 128, DM, variant=True, backward=False)
    assert spec.name == "cuflash_dmma_fwd_f64_d128_m64_n32_w4_s2_causal"
    assert build.kernel_type(spec).startswith("cuflash::FwdDmma<double, 128, 64, 32, 128, 2, ")
    assert spec.arch is None                      # the device's own architecture
    assert spec.smem_bytes() == (64 + 2 * 2 * 32) * 130 * 8
    dkdv, dq = plan.specs_for("float64", 128, TileConfig(32, 64, 8, 1, "dmma"), True, True)
    assert build.kernel_type(dkdv).startswith("cuflash::DkdvDmma<double, 128, 32, 64, 256, 1, ")
    assert dq.tile.num_warps == 4                 # 8 query rows per warp: block_m / 8 warps
    assert dkdv.smem_bytes() == (2 * 64 + 2 * 32) * 130 * 8 + 2 * 32 * 8


@pytest.mark.parametrize("tile,dtype,backward,arch,match", [
    (DM, "float32", False, "sm_90", "needs float64"),
    (DM, "float16", True, "sm_90", "needs float64"),
    (TileConfig(64, 32, 2, 2, "dmma"), "float64", False, "sm_90", "8 or 16 rows per warp"),
    (TileConfig(64, 64, 2, 2, "dmma"), "float64", True, "sm_90", "8 or 16 keys per warp"),
    (TileConfig(64, 32, 4, 3, "dmma"), "float64", False, "sm_90", "1 or 2 stages"),
    (DM, "float64", False, "sm_75", "needs sm_80"),
    (TileConfig(128, 128, 8, 2, "dmma"), "float64", False, "sm_90", r"needs \d+ bytes"),
])
def test_dmma_refusals(tile, dtype, backward, arch, match):
    with pytest.raises(ValueError, match=match):
        plan.check_tile(tile, 128, dtype, backward=backward,
                        smem_limit=plan.SMEM_LIMIT.get(arch, HOPPER), arch=arch)


def test_dmma_backward_is_deterministic_only():
    with pytest.raises(ValueError, match="dQ in its own pass"):
        plan.specs_for("float64", 64, TileConfig(32, 32, 4, 2, "dmma"), True, True,
                       deterministic=False)


@pytest.mark.parametrize("causal", [False, True])
def test_float64_default_tiles_per_architecture(causal):
    """float64 takes the dmma kernels where float64 tensor cores run at full rate (sm_80,
    sm_90) and d <= 128, every tile fitting the GPU; simt elsewhere, for atomic dQ, for wider
    heads and without a device (the CPU twin)."""
    for arch in ("sm_90", "sm_80"):
        limit = plan.SMEM_LIMIT[arch]
        for d in (16, 40, 64, 96, 128):
            for backward in (False, True):
                tile = default_tile(d, "float64", backward=backward, causal=causal,
                                    smem_limit=limit, arch=arch)
                assert tile.kernel == "dmma", (arch, d, backward, tile)
                plan.check_tile(tile, d, "float64", backward=backward, smem_limit=limit,
                                arch=arch)
            atomic = default_tile(d, "float64", backward=True, deterministic=False,
                                  causal=causal, smem_limit=limit, arch=arch)
            assert atomic.kernel == "simt"
        assert default_tile(256, "float64", causal=causal, smem_limit=limit, arch=arch).kernel \
            == "simt"
    for arch in ("sm_86", "sm_89"):
        assert default_tile(64, "float64", causal=causal, smem_limit=plan.SMEM_LIMIT[arch],
                            arch=arch).kernel == "simt"
    assert default_tile(64, "float64", causal=causal).kernel == "simt"
    assert default_tile(64, "float32", smem_limit=HOPPER, arch="sm_90",
                        precision="ieee").kernel == "simt"


def test_float64_head_dims_on_99_kb_gpus_as_documented():
    """float64 on sm_86 / sm_89 (99 KB of shared memory a block): head dims up to 224 forward and
    160 backward, as `attention`'s docstring says; wider ones a ValueError saying no tile fits
    (fuzz, session 38: the docstring said 1 to 256)."""
    import cuflash
    doc = cuflash.attention.__doc__
    assert "sm_86 and sm_89: d up to 224 forward, 160 backward" in " ".join(doc.split())
    for arch in ("sm_86", "sm_89"):
        limit = plan.SMEM_LIMIT[arch]
        for backward, most in ((False, 224), (True, 160)):
            default_tile(most, "float64", backward=backward, smem_limit=limit, arch=arch)
            with pytest.raises(ValueError, match=rf"no tile fits head_dim={most + 8}, "
                                                 rf"dtype=float64 in {limit} bytes"):
                default_tile(most + 8, "float64", backward=backward, smem_limit=limit, arch=arch)


def test_dmma_compiles_without_spills():
    """The d = 128 defaults on sm_90 (m16n8k16 products) and the d = 64 forward on sm_80
    (m8n8k4): no spills (`python -m cuflash compile` checks every default)."""
    skip_without_nvrtc()
    cases = []
    for backward in (False, True):
        tile = default_tile(128, "float64", backward=backward, smem_limit=HOPPER, arch="sm_90")
        cases += [(s, "sm_90") for s in plan.specs_for("float64", 128, tile, False, backward)]
    tile = default_tile(64, "float64", smem_limit=plan.SMEM_LIMIT["sm_80"], arch="sm_80")
    cases += [(s, "sm_80") for s in plan.specs_for("float64", 64, tile, True, False)]
    for spec, arch in cases:
        assert spec.family == "dmma"
        rep = build.compile_offline(build.source(spec), spec.name, arch, spec.smem_bytes())
        assert rep.registers is not None and rep.registers <= 255
        assert rep.spills == 0, f"{spec.name} spills {rep.spills} bytes on {arch}"


def test_warp_specialized_forward_tiles():
    """12 warps at block_m = 128: a producer warpgroup and two consumers (flash_fwd_wgmma_ws.cu);
    split-KV and KV caches take the first 8-warp tile of the head dim instead."""
    ws = TileConfig(128, 128, 12, 2, "wgmma")
    assert ws.warp_specialized and not WG.warp_specialized
    assert not TileConfig(128, 128, 12, 2, "mma").warp_specialized   # only wgmma has a producer
    (spec,) = plan.specs_for("float16", 128, ws, variant=False, backward=False)
    assert spec.warp_specialized and spec.threads() == 384 and spec.min_blocks() == 1
    assert "FwdWgmmaWs<" in build.kernel_type(spec)
    assert not plan.specs_for("float16", 128, WG, variant=False, backward=False)[0].warp_specialized
    assert plan.without_producer(ws, 128) == TileConfig(128, 128, 8, 3, "wgmma")
    assert plan.without_producer(TileConfig(128, 64, 12, 2, "wgmma"), 256) == \
        TileConfig(128, 32, 8, 3, "wgmma")
    assert plan.without_producer(WG, 128) == WG
    split = plan.KernelSpec("fwd", "float16", 128, ws, plan.Variant("causal", split=True))
    with pytest.raises(ValueError, match="neither split-KV nor a KV cache"):
        plan.validate(split)


def test_spill_check_covers_the_register_tight_variants():
    """`cuflash compile --fail-on-spills` checks every warp-specialized forward also with window,
    softcap and ALiBi: their consumers' registers are fixed by setmaxnreg, and the causal ALiBi
    one spilled where the plain kernels did not (NOTES v17). The forward of three consumer
    warpgroups runs no softcap (refused by the plan): ALiBi and windows only."""
    from cuflash.gpu.precompile import default_specs
    specs = default_specs("sm_90")
    names = {s.name for s in specs}
    ws = [s for s in specs if s.warp_specialized and s.variant == plan.Variant.of(s.causal)]
    assert ws, "the sm_90 defaults have warp-specialized forwards"
    assert any(plan.copy_engine_only(s.tile) for s in ws), "the d <= 64 three-consumer default"
    for s in ws:
        three = plan.copy_engine_only(s.tile)
        for mask in ("dense", "causal", "window"):
            for mods in (dict(softcap=True), dict(alibi=True), dict(softcap=True, alibi=True)):
                v = plan.Variant(mask, **mods)
                name = f"{s.name.split('_causal')[0]}{v.suffix()}"
                assert (name in names) != (three and v.softcap), (s.name, v)
    assert not any(s.warp_specialized for s in default_specs("sm_80"))


def test_compile_gate_reports_split_kv_kernels():
    """`cuflash compile` also builds the split-KV forward kernels of cuflash.attention(num_splits)
    (precompile.split_specs: the default tile of a batch that is not dense in one pass, the
    warp-specialized ones given way to the 8-warp wgmma tile as ops.forward runs them; plain,
    softcap, ALiBi, both) and reports them without failing --fail-on-spills: under NVRTC 13.0 the
    8-warp d = 64 ALiBi ones spill 8-32 bytes (NOTES v100)."""
    import io
    from cuflash.gpu import precompile
    specs = precompile.split_specs("sm_90")
    names = {s.name for s in specs}
    assert all(s.variant.split and s.role == "fwd" and not s.warp_specialized for s in specs)
    one = "cuflash_wgmma_fwd_f16_d64_m128_n64_w8_s4_causal_alibi_split"
    assert one in names and any("_f64_d256_" in n for n in names)
    assert {len([s for s in specs if s.dtype == dt]) for dt in ("float16", "float64")} == {24}
    skip_without_nvrtc()
    out = io.StringIO()
    rc = precompile.run("sm_90", True, 1, include_experiments=False, out=out, match=f"^{one}$")
    rows = [ln for ln in out.getvalue().splitlines() if ln.startswith("cuflash_")]
    assert rc == 0 and len(rows) == 1 and rows[0].startswith(one) and "<-" not in rows[0], rows
    assert "1 split-KV forward" in out.getvalue()
    spills = int(rows[0].split()[2])   # 8 under NVRTC 13.0 (setup.cfg's pin)
    assert ("(1 split-KV forward kernels spill: reported only)" in out.getvalue()) == (spills > 0)


def test_warp_specialized_dkdv_specs():
    """A dK/dV tile with a producer warpgroup (block_n = 16·num_warps - 64 = 128 keys on two
    consumer warpgroups) runs flash_bwd_wgmma_ws.cu, 2 to 4 stages; its dQ pass takes the tile
    transposed (128 queries on two consumer warpgroups), warp-specialized too."""
    from cuflash.gpu import build
    ws = TileConfig(64, 128, 12, 3, "wgmma")
    dkdv, dq = plan.specs_for("float16", 64, ws, variant=True, backward=True)
    assert dkdv.warp_specialized and dq.warp_specialized
    assert build.kernel_type(dkdv).startswith("cuflash::DkdvWgmmaWs<__half, 64, 64, 128, 384, 3,")
    assert build.kernel_type(dq).startswith("cuflash::DqWgmmaWs<__half, 64, 128, 64, 384, 3,")
    # K, V resident (128 rows); Q, dO in 3 stages (64 rows); lse2 and D; 7 mbarriers; alignment
    assert dkdv.smem_bytes() == (2 * 128 + 2 * 3 * 64) * 64 * 2 + 2 * 3 * 64 * 4 + 7 * 8 + 1024
    # Q, dO resident (128 rows); K, V in 3 stages (64 rows); 7 mbarriers; alignment
    assert dq.smem_bytes() == (2 * 128 + 2 * 3 * 64) * 64 * 2 + 7 * 8 + 1024
    plan.check_tile(ws, 128, "bfloat16", backward=True, smem_limit=HOPPER, arch="sm_90")
    with pytest.raises(ValueError, match="2 to 4 stages"):
        plan.check_tile(TileConfig(64, 128, 12, 1, "wgmma"), 64, "float16", backward=True,
                        smem_limit=HOPPER, arch="sm_90")


def test_packed_variants_name_and_type():
    """The three ways a kernel finds its sequences (kernels_cu/seq.cuh, PackKind): dense, packed
    (cu_seqlens_q and cu_seqlens_k), packed self-attention (one array: same_lens)."""
    dense, packed, self_ = (plan.Variant("causal"), plan.Variant("causal", packed=True),
                            plan.Variant("causal", packed=True, same_lens=True))
    assert [v.suffix() for v in (dense, packed, self_)] == [
        "_causal", "_causal_varlen", "_causal_varlen_self"]
    assert [v.cpp().split(", ")[3] for v in (dense, packed, self_)] == [
        "cuflash::kUnpacked", "cuflash::kPacked", "cuflash::kPackedSelf"]
    assert len({dense, packed, self_}) == 3   # three kernels, cached apart
    with pytest.raises(ValueError, match="same_lens=True needs packed=True"):
        plan.Variant("causal", same_lens=True)


def test_skip_unless_tile_fits(monkeypatch):
    """helpers.skip_unless_tile_fits, which the GPU kernel tests skip by: a tile the device
    cannot run skips (naming why), one it can run does not, each asked pass checked."""
    import helpers
    from cuflash.gpu import ops
    monkeypatch.setattr(ops, "device_arch", lambda: "sm_80")
    monkeypatch.setattr(ops, "smem_limit", lambda: plan.SMEM_LIMIT["sm_80"])
    helpers.skip_unless_tile_fits(TileConfig(64, 64, 4, 1, "mma"), 64, "float16",
                                  passes=("bwd", "fwd"))
    with pytest.raises(pytest.skip.Exception, match="tile not valid here"):
        helpers.skip_unless_tile_fits(TileConfig(128, 64, 8, 2, "wgmma_tf32"), 64, np.float32)
    with pytest.raises(pytest.skip.Exception, match="tile not valid here"):   # forward-only
        helpers.skip_unless_tile_fits(TileConfig(128, 64, 8, 2, "wgmma_tf32"), 64, "float32",
                                      passes=("bwd",))


def test_two_blocks_only_where_registers_allow():
    """A non-warp-specialized wgmma forward runs two blocks a multiprocessor where its shared
    memory fits twice and its threads keep 128 registers there (8 warps at most): a 16-warp
    tile at two blocks got 64 registers, spilled 1 KB and had its wgmma serialized (fuzzing,
    session 39). The listed d = 64 tiles keep theirs."""
    for t in (TileConfig(256, 64, 16, 3, "wgmma"), TileConfig(256, 32, 16, 4, "wgmma")):
        spec, = plan.specs_for("float16", 64, t, plan.Variant("dense"), False)
        assert spec.min_blocks() == 1, t
        assert "__launch_bounds__(512, 1)" in build.source(spec)
    from cuflash.tile import wgmma_forward_tiles
    eight = [t for t in wgmma_forward_tiles(64) if not t.warp_specialized]
    assert eight and all(t.num_warps == 8 for t in eight)
    for t in eight:
        spec, = plan.specs_for("float16", 64, t, plan.Variant("dense"), False)
        assert spec.min_blocks() == 2, t


def test_mma_needs_sm80_and_older_gpus_take_the_cuda_cores():
    """mma.sync .f16 / .bf16 and cp.async need sm_80: the plan refuses the mma family on sm_75
    (as it does tf32 and dmma there), and the 16-bit defaults fall back to the CUDA-core tiles
    (they compiled to ptxas's "Feature 'cp.async' requires .target sm_80" before)."""
    with pytest.raises(ValueError, match="cp.async needs sm_80 or later, this GPU is sm_75"):
        plan.check_tile(TileConfig(64, 32, 4, 1, "mma"), 64, "float16", smem_limit=65536,
                        arch="sm_75")
    for dtype in ("float16", "bfloat16"):
        assert default_tile(64, dtype, smem_limit=65536, arch="sm_75").kernel == "simt"
        tile, _ = default_backward(64, dtype, smem_limit=65536, arch="sm_75")
        assert tile.kernel == "simt"
        assert default_tile(64, dtype, smem_limit=plan.SMEM_LIMIT["sm_80"],
                            arch="sm_80").kernel == "mma"


def test_wgmma_backward_tiles_that_spill_are_refused():
    """The 16-bit wgmma backward above d = 128 (a warp's dK and dV beside Sᵀ and dPᵀ) and a
    warp-specialized dK/dV tile streaming more than 64 queries a step compiled, but spilled
    0.5-13 KB with their wgmma serialized (fuzzing, session 39): the plan refuses them, naming
    why, and the defaults never took them."""
    for t, d, match in ((TileConfig(64, 64, 4, 1, "wgmma"), 224, "takes head dims up to 128"),
                        (TileConfig(64, 128, 8, 2, "wgmma"), 160, "takes head dims up to 128"),
                        (TileConfig(128, 128, 12, 2, "wgmma"), 64, "block_m = 128 rows a step, and "
                                                                   "takes 64"),
                        (TileConfig(256, 128, 12, 2, "wgmma"), 64, "block_m = 256 rows a step, and "
                                                                   "takes 64")):
        with pytest.raises(ValueError, match=match):
            plan.check_tile(t, d, "float16", backward=True, smem_limit=HOPPER, arch="sm_90")
    for d in (64, 128):
        tile, _ = default_backward(d, "float16", smem_limit=HOPPER, arch="sm_90")
        plan.check_tile(tile, d, "float16", backward=True, smem_limit=HOPPER, arch="sm_90")
    assert default_backward(160, "float16", smem_limit=HOPPER, arch="sm_90")[0].kernel == "simt"


def test_one_consumer_16_bit_backward_compiles_in_half_the_registers():
    """NVRTC, sm_90a: the 16-bit warp-specialized backward on one consumer warpgroup at d = 64
    (dK/dV with its dQ pass, and with atomic dQ) launches at 128 registers a thread for two
    blocks and spills nothing (at d = 128 it spilled 0.1-1.6 KB: refused there)."""
    skip_without_nvrtc()
    one = TileConfig(64, 64, 8, 2, "wgmma")
    specs = plan.specs_for("float16", 64, one, plan.Variant("causal"), True, True) + \
        plan.specs_for("float16", 64, one, plan.Variant("causal"), True, False)
    for spec in specs:
        rep = build.compile_offline(build.source(spec), spec.name, spec.arch, spec.smem_bytes())
        assert rep.registers == 128, (spec.name, rep.registers)
        assert rep.spills == 0 and not rep.serialized, (spec.name, rep.spills)


def test_one_consumer_16_bit_forward_compiles_in_half_the_registers():
    """NVRTC, sm_90a: the 16-bit warp-specialized forward on one consumer warpgroup (block_m =
    64, 8 warps; NOTES v68) launches at 128 registers a thread for two blocks and spills nothing
    at its largest tiles, with the heaviest score paths (window with softcap, with and without
    ALiBi); at 48 producer registers its producer had spilled 72-160 bytes, at 168 consumer
    registers the window + softcap consumer 28."""
    skip_without_nvrtc()
    heavy = plan.Variant("window", softcap=True, alibi=True)
    specs = [s for d, t in ((64, TileConfig(64, 128, 8, 2, "wgmma")),
                            (128, TileConfig(64, 64, 8, 2, "wgmma")))
             for v in (plan.Variant("causal"), plan.Variant("window", softcap=True), heavy)
             for s in plan.specs_for("float16", d, t, v, False, True)]
    for spec in specs:
        assert spec.min_blocks() == 2, spec.name
        rep = build.compile_offline(build.source(spec), spec.name, spec.arch, spec.smem_bytes())
        assert rep.registers == 128, (spec.name, rep.registers)
        assert rep.spills == 0 and not rep.serialized, (spec.name, rep.spills)


def test_three_consumer_16_bit_forward_compiles_without_spills():
    """NVRTC, sm_90a: the forward of three consumer warpgroups (block_m = 192, 16 warps; NOTES
    v89) at 128 registers a thread, 160 a consumer, spills nothing causal and with a window and
    ALiBi (its heaviest score path: softcap it refuses); at 152 its consumers spilled 96-164
    bytes and had their wgmma serialized."""
    skip_without_nvrtc()
    t = TileConfig(192, 128, 16, 2, "wgmma")
    for v in (plan.Variant("causal"), plan.Variant("window", alibi=True)):
        spec, = plan.specs_for("bfloat16", 64, t, v, False)
        assert spec.min_blocks() == 1
        rep = build.compile_offline(build.source(spec), spec.name, spec.arch, spec.smem_bytes())
        assert rep.registers == 128, (spec.name, rep.registers)
        assert rep.spills == 0 and not rep.serialized, (spec.name, rep.spills)


def test_one_consumer_16_bit_forward_refused_where_two_blocks_do_not_fit():
    """The 8-warp (one consumer warpgroup) 16-bit forward runs two blocks a multiprocessor: a
    tile whose shared memory does not fit twice is refused, naming why, and so are head dims
    above 128 and 64-row tiles on 12 warps."""
    ok = TileConfig(64, 64, 8, 2, "wgmma")
    plan.check_tile(ok, 128, "float16", smem_limit=HOPPER, arch="sm_90")
    for t, d, match in ((TileConfig(64, 128, 8, 2, "wgmma"), 128, "do not fit twice"),
                        (TileConfig(64, 64, 8, 3, "wgmma"), 128, "do not fit twice"),
                        (ok, 192, "at head dims up\\s+to\\s+128\\s+one"),
                        (TileConfig(64, 64, 12, 2, "wgmma"), 64, "num_warps")):
        with pytest.raises(ValueError, match=match):
            plan.check_tile(t, d, "float16", smem_limit=HOPPER, arch="sm_90")


def test_one_consumer_defaults_at_short_heads():
    """v69, v89: on Hopper the 16-bit forward at d <= 64 defaults to the warp-specialized tile of
    three consumer warpgroups (192 × 128 × 16), or of one (64 × 128 × 8, two blocks a
    multiprocessor) for short causal lengths (``short``); wider heads keep the 12-warp
    128 × 128; the backward takes 64 × 64 × 8 first only for a short dense batch
    (wgmma_one_consumer_pays: d <= 64, neither length above WGMMA_BWD_ONE_CONSUMER_MAX_LEN, of
    the causal mask or not), and before Hopper nothing changes."""
    from cuflash.tile import WGMMA_BWD_ONE_CONSUMER_MAX_LEN as LENS, wgmma_one_consumer_pays
    kw = dict(smem_limit=HOPPER, arch="sm_90")
    for dt in ("float16", "bfloat16"):
        for d in (16, 40, 64):
            assert default_tile(d, dt, **kw) == TileConfig(192, 128, 16, 2, "wgmma")
            assert default_tile(d, dt, short=True, **kw) == TileConfig(64, 128, 8, 2, "wgmma")
            assert default_backward(d, dt, short=True, **kw)[0] == TileConfig(64, 64, 8, 2, "wgmma")
            assert default_backward(d, dt, **kw)[0] == TileConfig(64, 128, 12, 2, "wgmma")
        for d in (72, 128):
            assert default_tile(d, dt, **kw) == TileConfig(128, 128, 12, 2, "wgmma")
            assert default_backward(d, dt, short=True, **kw)[0] == \
                TileConfig(64, 128, 12, 2, "wgmma")
    assert default_tile(64, "float16", smem_limit=101376, arch="sm_80").kernel == "mma"
    assert default_backward(64, "float16", short=True, smem_limit=101376,
                            arch="sm_80")[0].kernel == "mma"
    assert LENS[True] > LENS[False]   # a causal block streams half as far
    for causal, L in LENS.items():
        assert wgmma_one_consumer_pays(64, L, L, causal, True)
        assert wgmma_one_consumer_pays(1, 1, 1, causal, True)
        assert not wgmma_one_consumer_pays(64, L + 1, 64, causal, True)
        assert not wgmma_one_consumer_pays(64, 64, L + 1, causal, True)
        assert not wgmma_one_consumer_pays(65, 1024, 1024, causal, True)
    # the forward's (calls 253, 254): causal up to 4096, else up to 1024
    assert wgmma_one_consumer_pays(64, 4096, 4096, True, False)
    assert not wgmma_one_consumer_pays(64, 4097, 100, True, False)
    assert not wgmma_one_consumer_pays(64, 100, 4097, True, False)
    assert wgmma_one_consumer_pays(64, 1024, 1024, False, False)
    assert not wgmma_one_consumer_pays(64, 1025, 1, False, False)
    assert not wgmma_one_consumer_pays(72, 64, 64, True, False)


def test_three_consumer_forward_tile():
    """v89: block_m = 192 is the warp-specialized wgmma forward of three consumer warpgroups
    (16 warps), at head dims up to 64; its producer loads by the copy engine only, so the plan
    refuses packed batches and softcap (whose consumers spilled), naming why, and a run the
    copy engine cannot read takes the one-consumer tile (plan.without_tensor_maps)."""
    t = TileConfig(192, 128, 16, 2, "wgmma")
    assert t.warp_specialized and plan.copy_engine_only(t)
    assert not plan.copy_engine_only(TileConfig(128, 128, 12, 2, "wgmma"))
    for bad in (dict(kernel="mma", num_warps=16), dict(num_warps=12), dict(kernel="wgmma_tf32")):
        with pytest.raises(ValueError, match="block_m=192 is the warp-specialized"):
            TileConfig(**{**dict(block_m=192, block_n=128, num_warps=16, num_stages=2,
                                 kernel="wgmma"), **bad})
    with pytest.raises(ValueError, match="or 192"):
        TileConfig(96, 64, 8, 2, "wgmma")
    with pytest.raises(ValueError, match="power of two"):
        TileConfig(64, 192, 16, 2, "wgmma")
    plan.check_tile(t, 64, "bfloat16", smem_limit=HOPPER, arch="sm_90")
    with pytest.raises(ValueError, match="at head dims up to 64 three"):
        plan.check_tile(t, 72, "float16", smem_limit=HOPPER, arch="sm_90")
    spec, = plan.specs_for("float16", 64, t, plan.Variant("window", alibi=True), False)
    assert spec.threads() == 512 and spec.min_blocks() == 1
    for v in (plan.Variant("causal", softcap=True), plan.Variant("dense", packed=True)):
        spec, = plan.specs_for("float16", 64, t, v, False)
        with pytest.raises(ValueError, match="unpacked batches without softcap"):
            plan.validate(spec, HOPPER, "sm_90")
    assert plan.without_tensor_maps(t, 64) == TileConfig(64, 128, 8, 2, "wgmma")
    assert plan.without_tensor_maps(TileConfig(128, 128, 12, 2, "wgmma"), 64) == \
        TileConfig(128, 128, 12, 2, "wgmma")
    assert plan.without_producer(t, 64).num_warps == 8


def test_api_takes_three_consumers_for_dense_forwards_only(monkeypatch):
    """The forward's default asks for the one-consumer tile (short) for short causal lengths,
    softcap and batches that are not dense (split-KV, packed), the three-consumer tile else."""
    from cuflash import api
    seen = []
    monkeypatch.setattr(api, "default_tile", lambda *a, **kw: seen.append(kw["short"]))
    monkeypatch.setattr(api, "_device", lambda p: (64, dict(smem_limit=HOPPER, arch="sm_90")))
    P = lambda **kw: type("P", (), {**dict(T=8192, S=8192, causal=False, softcap=None,
                                           dtype="float16"), **kw})
    for p, dense, short in ((P(), True, False), (P(causal=True), True, False),
                            (P(causal=True, T=4096, S=4096), True, True),
                            (P(T=64, S=64), True, True), (P(T=2048, S=900), True, False),
                            (P(softcap=30.0), True, True),
                            (P(), False, True)):
        seen.clear()
        api._default(p, None, dense)
        assert seen == [short], (p.__dict__, dense)


def test_api_asks_for_one_consumer_backward_only_for_short_dense_batches(monkeypatch):
    """The API's side of v69: attention_backward of a dense float16 batch at d <= 64 takes the
    one-consumer tile when neither length passes WGMMA_BWD_ONE_CONSUMER_MAX_LEN (causal: the
    longer limit), the 12-warp tile past it, and a packed batch (dense=False) never. NumPy arrays
    on a device the API is told about (sm_90): no GPU needed."""
    from cuflash import api, checks
    from cuflash.tile import WGMMA_BWD_ONE_CONSUMER_MAX_LEN as LENS
    monkeypatch.setattr(api, "_device",
                        lambda p: (p.kernel_d, dict(smem_limit=HOPPER, arch="sm_90")))
    one, twelve = TileConfig(64, 64, 8, 2, "wgmma"), TileConfig(64, 128, 12, 2, "wgmma")
    for causal, L in LENS.items():
        for d, T, S, want in ((64, L, L, one), (48, L, 8, one), (64, L + 1, L, twelve),
                              (64, L, L + 1, twelve), (96, 8, 8, twelve)):
            q = np.zeros((1, 1, T, d), np.float16)
            k = np.zeros((1, 1, S, d), np.float16)
            p = checks.check_qkv(q, k, k, causal=causal, scale=None)
            assert api._backward_choice(p, None, True, dense=True)[0] == want, (causal, d, T, S)
            assert api._backward_choice(p, None, True)[0] == twelve, (causal, d, T, S)
