"""The IO model's counts written out by hand, independently of the code that computes them
(iomodel.py walks the tiles through cuflash.mask; the twin walks the same tiles and counts its
bytes, test_twin_io.py): closed forms for dense and causal tiles, the naive passes listed one by
one from naive.py, and each constant of the L2-aware model pinned by a case where it decides
the answer, on both sides (fits in L2 / does not)."""
import math

import pytest

from cuflash import TileConfig, iomodel

E, A = 2, 4      # float16 inputs, float32 lse / D


# -- tiled counts in closed form --------------------------------------------------------------------

@pytest.mark.parametrize("T,S,bm,bn", [(1000, 700, 64, 64), (257, 1031, 128, 32), (64, 64, 64, 64),
                                       (100, 1, 16, 16)])
def test_dense_forward_closed_form(T, S, bm, bn):
    """Dense: Q once, K and V once per query tile (ceil(T / bm) times), O and lse once."""
    B, d = 3, 64
    got = iomodel.flash_forward(B, T, S, d, "float16", False, TileConfig(bm, bn))
    assert got.bytes_read == B * (T * d * E + 2 * math.ceil(T / bm) * S * d * E)
    assert got.bytes_written == B * (T * d * E + T * A)


@pytest.mark.parametrize("n_tiles", [1, 2, 7, 32])
def test_causal_square_forward_closed_form(n_tiles):
    """Causal, T = S = n·b with b × b tiles: query tile i reads key tiles 0..i, so K and V rows
    read are b · n(n+1)/2 each."""
    b, d = 64, 32
    T = n_tiles * b
    got = iomodel.flash_forward(1, T, T, d, "float16", True, TileConfig(b, b))
    assert got.bytes_read == T * d * E + 2 * b * n_tiles * (n_tiles + 1) // 2 * d * E


def test_causal_bottom_right_forward_closed_form():
    """Causal with S = T + 64 (bottom-right: query i sees keys 0..i+64) and 64 × 64 tiles: query
    tile i reads key tiles 0..i+1; with T = S - 64 = 4 · 64: 2 + 3 + 4 + 5 = 14 tiles."""
    got = iomodel.flash_forward(1, 256, 320, 16, "float16", True, TileConfig(64, 64))
    assert got.bytes_read == 256 * 16 * E + 2 * 14 * 64 * 16 * E
    # S = T - 64: the first 64 queries see no key, the others as for T = S = 192
    got = iomodel.flash_forward(1, 256, 192, 16, "float16", True, TileConfig(64, 64))
    assert got.bytes_read == 256 * 16 * E + 2 * (1 + 2 + 3) * 64 * 16 * E


def test_causal_square_backward_closed_form():
    """Causal T = S = n·b, deterministic: the dK/dV pass streams query tiles j..n-1 past key tile
    j (n(n+1)/2 tile visits of Q, dO, lse, D), the dQ pass key tiles 0..i past query tile i."""
    n, b, d = 5, 32, 64
    T = n * b
    visits = n * (n + 1) // 2
    got = iomodel.flash_backward(2, T, T, d, "float16", True, TileConfig(b, b))
    read = (2 * T * d * E                                         # preprocess: dO, O
            + 2 * T * d * E + visits * b * (2 * d * E + 2 * A)    # dK/dV: K, V; Q, dO, lse, D
            + T * (2 * d * E + 2 * A) + 2 * visits * b * d * E)  # dQ: Q, dO, lse, D; K, V
    written = T * A + 2 * T * d * E + T * d * E                   # D; dK, dV; dQ
    assert (got.bytes_read, got.bytes_written) == (2 * read, 2 * written)


# -- naive: the passes of naive.py, one by one ----------------------------------------------------

def _naive_forward_passes(f32_copies, masked):
    """(reads, writes) of the T×S matrix by naive_attention, from naive.py's steps."""
    steps = [(0, 1),           # s = q @ kᵀ: writes S
             (1, 1),           # s *= scale
             (1, 0),           # m = max(s)
             (1, 1),           # s -= m
             (1, 1),           # p = exp(s)
             (1, 0),           # l = sum(p)
             (1, 1),           # p /= l
             (1, 0)]           # out = p @ v: reads P
    if masked:
        steps.append((1, 1))   # s = where(mask, s, -inf)
    r, w = map(sum, zip(*steps))
    # 16-bit: each of the two products touching T×S goes through float32 copies: the GEMM's
    # float32 output or input (2 units instead of 1) plus a conversion (read 2 + write 1, or
    # read 1 + write 2): +2 reads and +2 writes per product
    return (r + 4, w + 4) if f32_copies else (r, w)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("causal", [False, True])
def test_naive_forward_counts_every_pass(dtype, causal):
    B, T, S, d = 3, 300, 200, 64
    e = 4 if dtype == "float32" else 2
    r, w = _naive_forward_passes(dtype != "float32", causal)
    got = iomodel.naive_forward(B, T, S, d, dtype, causal)
    mask_bytes = T * S if causal else 0                     # the bool mask, read once
    assert got.bytes_read == B * ((T + 2 * S) * d * e + r * T * S * e + mask_bytes)
    assert got.bytes_written == B * (w * T * S * e + T * d * e)
    if dtype != "float32" and not causal:
        assert (r, w) == (11, 9)                            # README: 11 reads, 9 writes


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("causal", [False, True])
def test_naive_backward_counts_every_pass(dtype, causal):
    B, T, S, d = 2, 300, 200, 64
    e = 4 if dtype == "float32" else 2
    f32 = dtype != "float32"
    r, w = _naive_forward_passes(False, causal)
    r, w = r - 1, w                       # P is recomputed; the forward's P @ v is not done
    if f32:
        r, w = r + 2, w + 2               # ... but its q @ kᵀ runs through float32
    steps = [(1, 0),                      # dv = Pᵀ @ dout
             (0, 1),                      # dp = dout @ vᵀ
             (2, 1), (1, 0),              # p * dp, then its row sum D
             (1, 1),                      # dp -= D
             (2, 1),                      # dp *= p
             (1, 1),                      # dp *= scale
             (1, 0), (1, 0)]              # dq = dS @ k, dk = dSᵀ @ q
    br, bw = map(sum, zip(*steps))
    if f32:
        br, bw = br + 4 * 2, bw + 4 * 2   # four products touch a T×S matrix
    got = iomodel.naive_backward(B, T, S, d, dtype, causal)
    mask_bytes = T * S if causal else 0
    operands = (T + S) * d * e + 3 * T * d * e + 2 * S * d * e   # q, k; dout ×2, q; v, k
    assert got.bytes_read == B * ((r + br) * T * S * e + operands + mask_bytes)
    assert got.bytes_written == B * ((w + bw) * T * S * e + T * d * e + 2 * S * d * e)


# -- the L2-aware model's constants, each where it decides ------------------------------------------

FWD_TILE = TileConfig(128, 64, 8, 3, "wgmma")


def _fits_forward(T, S):
    plain = iomodel.flash_forward(8, T, S, 128, "float16", False, FWD_TILE)
    dram = iomodel.flash_forward_dram(8, T, S, 128, "float16", False, FWD_TILE)
    return dram.bytes_read < plain.bytes_read


def test_l2_bytes_is_50_mb():
    """T = 16384: 128 query tiles per head, so RESIDENT_BLOCKS = 264 blocks span 3 heads. Their
    K and V: 3 · 2 · S · 128 · 2 bytes: 49.9 MB at S = 32512 (fits 50 MB), 50.3 MB at S = 32768
    (does not: every re-read reaches DRAM, the plain count)."""
    assert iomodel.L2_BYTES == 50 * 10**6
    assert _fits_forward(16384, 32512)
    assert not _fits_forward(16384, 32768)
    assert iomodel.flash_forward_dram(8, 16384, 32768, 128, "float16", False, FWD_TILE) == \
        iomodel.flash_forward(8, 16384, 32768, 128, "float16", False, FWD_TILE)


def test_resident_blocks_is_264():
    """S = 32768 (16.8 MB of K and V per head): 2 heads fit the L2, 3 do not. With 132 query
    tiles per head (T = 16896) 264 resident blocks span 2 heads (fits); with 128 (T = 16384) they
    span 3 (does not). So the number is in (256, 264]: 132 SMs × 2 blocks."""
    assert iomodel.RESIDENT_BLOCKS == 264
    assert _fits_forward(16896, 32768)
    assert not _fits_forward(16384, 32768)


def test_backward_l2_rule_both_sides():
    """The dQ kernel's K/V per head (2·S·d·e) and the dK/dV kernel's Q, dO, lse, D per head
    (T·(2·d·e + 2·a)), at T = S = 32768, d = 128: 16.8 MB and 17.3 MB; 256 query tiles and 512
    key tiles per head, so 264 blocks span 2 and 1 heads: both fit. At d = 256 (33.6 MB per
    head, 2 heads in the dQ kernel) the dQ kernel does not fit and the dK/dV kernel does."""
    tile = TileConfig(128, 64, 4, 2, "mma")
    B, T = 8, 32768
    plain = iomodel.flash_backward(B, T, T, 128, "float16", False, tile)
    both = iomodel.flash_backward_dram(B, T, T, 128, "float16", False, tile)
    once = B * (2 * T * 128 * E + 2 * (2 * T * 128 * E + T * (2 * 128 * E + 2 * A)))
    assert both.bytes_read == once < plain.bytes_read
    plain = iomodel.flash_backward(B, T, T, 256, "float16", False, tile)
    half = iomodel.flash_backward_dram(B, T, T, 256, "float16", False, tile)
    kv_stream = 2 * math.ceil(T / 128) * T * 256 * E          # dQ kernel: K, V per query tile
    assert half.bytes_read == B * (2 * T * 256 * E + 2 * T * 256 * E + T * (2 * 256 * E + 2 * A)
                                   + T * (2 * 256 * E + 2 * A) + kv_stream)
    assert half.bytes_read < plain.bytes_read
