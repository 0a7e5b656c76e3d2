"""The IO model of the float32 tensor-core kernels, which read staged rows (iomodel.staged_row_bytes:
gpu/tf32_stage.py, gpu/f16x3_stage.py), and of the backward's dQ kernel on its own tile
(gpu/plan.py dq_tile). Worked cases, each count written out from the kernels' loops: a staging
pass reads each staged operand once and writes its rows padded to whole tiles; the kernels then
read staged rows of whole tiles. CPU only."""
from __future__ import annotations

import pytest

from cuflash import TileConfig, iomodel
from cuflash.experiments import runner, schema
from cuflash.experiments.points import enumerate_points

from test_experiments import REPO

X1_FWD = TileConfig(128, 64, 12, 2, "wgmma_f16x1")
X3_FWD = TileConfig(128, 64, 12, 2, "wgmma_f16x3")
TF32_FWD = TileConfig(128, 64, 12, 2, "wgmma_tf32")
X1_BWD_128 = TileConfig(32, 128, 12, 2, "wgmma_f16x1")   # 'tf32''s default backward at d = 128
WS_BWD = TileConfig(64, 128, 12, 2, "wgmma")             # float16's default backward (sm_90)


@pytest.mark.parametrize("kernel, d, row", [
    ("wgmma_tf32", 128, 128 * 4),       # K rows / Vᵀ columns of d TF32 values in float32
    ("wgmma_tf32", 72, 72 * 4),
    ("wgmma_f16x3", 128, (128 + 4) * 4),   # hi and lo: 2·128 halves, then 4 floats (inverse)
    ("wgmma_f16x3", 80, (128 + 4) * 4),    # d padded to 128
    ("wgmma_f16x1", 128, (64 + 4) * 4),    # hi alone: 128 halves = 64 floats
    ("wgmma_f16x1", 64, (32 + 4) * 4),
    ("mma", 128, None), ("wgmma", 128, None), ("tf32", 128, None), ("dmma", 64, None),
])
def test_staged_row_bytes(kernel, d, row):
    assert iomodel.staged_row_bytes(kernel, d) == row


def test_x1_forward_reads_staged_rows_of_the_tiles_it_visits():
    B, T, d, row = 2, 256, 128, 272
    got = iomodel.flash_forward(B, T, T, d, "float32", False, X1_FWD)
    q = T * d * 4
    kv = 2 * (2 * T) * row           # K and V: 2 query tiles, each all 256 keys
    staging_read, staging_written = 2 * T * d * 4, 2 * T * row
    assert got.bytes_read == B * (q + kv + staging_read)
    assert got.bytes_written == B * (T * d * 4 + T * 4 + staging_written)
    assert got.flops == iomodel.attention_flops(B, T, T, d, False)


def test_staged_forward_pads_keys_to_whole_tiles():
    T, S, d, row = 100, 150, 64, (64 + 4) * 4
    got = iomodel.flash_forward(1, T, S, d, "float32", False, X3_FWD)
    # one query tile; key tiles at 0, 64, 128, each read whole (192 rows), as staged (192 rows)
    assert got.bytes_read == T * d * 4 + 2 * 192 * row + 2 * S * d * 4
    assert got.bytes_written == T * d * 4 + T * 4 + 2 * 192 * row
    tf32 = iomodel.flash_forward(1, T, T, d, "float32", False, TF32_FWD)
    assert tf32.bytes_read == T * d * 4 + 2 * 128 * d * 4 + 2 * T * d * 4
    assert tf32.bytes_written == T * d * 4 + T * 4 + 2 * 128 * d * 4


def test_causal_staged_forward_skips_the_tiles_the_mask_hides():
    T, d, row = 256, 128, 272
    got = iomodel.flash_forward(1, T, T, d, "float32", True, X1_FWD)
    # query tile 0 visits key tiles 0, 1; query tile 1 visits all four: 6 tiles of 64 rows
    assert got.bytes_read == T * d * 4 + 2 * 6 * 64 * row + 2 * T * d * 4


def test_x1_backward_worked_case():
    T, d, row, a = 256, 128, 272, 4
    # the dQ kernel: 128 queries by 64 keys (x3_dq_block_n for x1 at d = 128); staged rows
    # padded to lcm(32, 128) queries and lcm(128, 64) keys
    assert iomodel._dq_tile(X1_BWD_128, d).block_m == 128
    assert iomodel._dq_tile(X1_BWD_128, d).block_n == 64
    got = iomodel.flash_backward(1, T, T, d, "float32", False, X1_BWD_128)
    read = [2 * T * d * 4,                 # preprocess: dO and O as given
            2 * T * row,                   # dK/dV kernel: K, V once
            2 * 2 * T * row,               # Q, dO: 2 key tiles, each every query row
            2 * T * 2 * a,                 # lse, D for them
            2 * T * row + T * 2 * a,       # dQ kernel: Q, dO, lse, D once
            2 * 2 * T * row,               # K, V: 2 query tiles, each every key row
            4 * T * d * 4]                 # staging: q, dout, k, v read as given
    written = [T * a, 2 * T * d * 4, T * d * 4,   # D; dK, dV; dQ
               4 * T * row]                        # staged rows
    assert got.bytes_read == sum(read)
    assert got.bytes_written == sum(written)
    # the float16-product pair has no atomic dQ: deterministic=False counts the same
    assert iomodel.flash_backward(1, T, T, d, "float32", False, X1_BWD_128,
                                  deterministic=False) == got


def test_the_dq_pass_runs_on_the_dq_kernels_tile():
    """float16's warp-specialized backward: its dQ kernel takes the dK/dV tile transposed (128
    queries, 64 keys), so K and V are read once per 128 queries, not per 64."""
    T, d, e, a = 1024, 128, 2, 4
    got = iomodel.flash_backward(1, T, T, d, "float16", False, WS_BWD)
    read = (2 * T * d * e                  # preprocess
            + 2 * T * d * e                # K, V once
            + (T // 128) * T * (2 * d * e + 2 * a)   # Q, dO, lse, D per key tile of 128
            + T * (2 * d * e + 2 * a)      # dQ kernel: Q, dO, lse, D once
            + (T // 128) * 2 * T * d * e)  # K, V per query tile of 128
    assert got.bytes_read == read


def test_l2_models_of_staged_kernels_read_each_staged_row_once():
    B, T, d, row, a = 2, 256, 128, 272, 4
    fwd = iomodel.flash_forward_dram(B, T, T, d, "float32", False, X1_FWD)
    plain = iomodel.flash_forward(B, T, T, d, "float32", False, X1_FWD)
    assert fwd.bytes_read == B * (T * d * 4 + 2 * T * row + 2 * T * d * 4)
    assert fwd.bytes_written == plain.bytes_written
    bwd = iomodel.flash_backward_dram(1, T, T, d, "float32", False, X1_BWD_128)
    read = (2 * T * d * 4                       # preprocess
            + 2 * T * row + 2 * T * row + T * 2 * a   # dK/dV: K, V; Q, dO, lse, D once
            + 2 * T * row + T * 2 * a + 2 * T * row   # dQ: Q, dO, lse, D; K, V once
            + 4 * T * d * 4)                    # staging reads
    assert bwd.bytes_read == read
    assert bwd.bytes_written == \
        iomodel.flash_backward(1, T, T, d, "float32", False, X1_BWD_128).bytes_written


def test_precision_points_predict_their_staging():
    """The runner's prediction of a float32 point follows its kernel: precision.yaml's 'highest'
    forward at d = 128 (wgmma_f16x3, 128 × 64) writes O, lse and the staged K and V."""
    exp = schema.load(REPO / "experiments" / "precision.yaml", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    pts = [p for p in enumerate_points(exp, "gpu", smem_limit=schema.DEFAULT_SMEM_LIMIT)
           if p.method == "flash" and p.precision == "highest" and p.pass_ == "forward"
           and p.head_dim == 128 and p.seq_len == 4096 and not p.causal]
    assert len(pts) == 1
    p = pts[0]
    assert p.fwd_tile.kernel == "wgmma_f16x3" and p.fwd_tile.block_n == 64
    bh, T, d = p.batch * p.heads, 4096, 128
    staged = 2 * T * (128 + 4) * 4
    assert runner.predicted(p).bytes_written == bh * (T * d * 4 + T * 4 + staged)


def test_warp_specialized_tiles_default_to_one_block_a_multiprocessor():
    """The L2 models' blocks in flight: 2 a multiprocessor (RESIDENT_BLOCKS) unless the tile is
    warp-specialized (its producer and consumers take the register file: one). At d = 128,
    T = 8192, 8 heads, the x3 forward's 64 query tiles a head (sections of 2 heads): 132 blocks
    span 4 heads (34.6 MB of staged K and V: within the 50 MB L2), 264 would span 6 (51.9 MB:
    the rule falls back to the plain model)."""
    assert iomodel._heads_in_flight(8, 64, 132, 2) == 4
    assert iomodel._heads_in_flight(8, 64, 264, 2) == 6
    assert iomodel._l2_rows(8192, 8192, 128, 4, iomodel.L2_BYTES) == 2
    assert iomodel.resident_blocks_of(X3_FWD) == 132
    assert iomodel.resident_blocks_of(TileConfig(128, 64, 8, 3, "wgmma")) == 264
    assert iomodel.resident_blocks_of(X1_BWD_128, backward=True) == 132
    assert iomodel.resident_blocks_of(X1_BWD_128) == 264      # not a forward ws tile
    args = (8, 8192, 8192, 128, "float32", False, X3_FWD)
    default = iomodel.flash_forward_dram(*args)
    assert default == iomodel.flash_forward_dram(*args, resident_blocks=132)
    assert default.bytes_read < iomodel.flash_forward(*args).bytes_read / 10
    assert iomodel.flash_forward_dram(*args, resident_blocks=264) == iomodel.flash_forward(*args)


def test_the_float32_io_experiment_runs_the_staged_kernels():
    """experiments/io_bytes_float32.yaml: 24 points (2 T × 2 d × 3 precisions × 2 passes), each
    with ncu's bytes; 'tf32' and 'highest' on the staged kernels (the terms it checks; 'tf32''s
    backward at d = 64 on 'wgmma_f16s''s copies), 'ieee' on the CUDA-core kernels (none)."""
    exp = schema.load(REPO / "experiments" / "io_bytes_float32.yaml",
                      smem_limit=schema.DEFAULT_SMEM_LIMIT)
    assert exp.measure.hbm_bytes
    pts = enumerate_points(exp, "gpu", smem_limit=schema.DEFAULT_SMEM_LIMIT)
    assert len(pts) == 24
    for p in pts:
        tile = p.bwd_tile if p.pass_ == "backward" else p.fwd_tile
        assert iomodel.stages_operands(tile.kernel) == (p.precision != "ieee"), p.describe()
