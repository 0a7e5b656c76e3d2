"""tools/bench_kvcache.py's decode-cell inputs (_step_inputs, shared by the bench tool and the
decode A/B scripts in .ab/) on NumPy standing in for CuPy, no GPU: d5c61ba moved the helper
out of main() without numpy, and the next GPU call's two A/B scripts died on a NameError
(call 262)."""
import sys
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import bench_kvcache  # noqa: E402


def _numpy_as_cupy():
    rng = np.random.default_rng(0)
    random = types.SimpleNamespace(
        standard_normal=lambda shape, dtype: rng.standard_normal(shape).astype(dtype))
    return types.SimpleNamespace(asarray=np.asarray, empty=np.empty, full=np.full,
                                 float16=np.float16, float32=np.float32, int32=np.int32,
                                 random=random)


def test_step_inputs_cycle_past_the_footprint():
    cp, rng = _numpy_as_cupy(), np.random.default_rng(1)
    B, Hkv, S, d, G = 2, 3, 64, 16, 4
    copies, qs, bufs, lens = bench_kvcache._step_inputs(cp, rng, B, Hkv, S, d, G, footprint_mb=1)
    kv_bytes = 2 * B * Hkv * S * d * 2
    assert copies == len(bufs) and copies * kv_bytes >= 2 ** 20 > (copies - 1) * kv_bytes
    assert len(qs) == 4 and all(q.shape == (B, G * Hkv, 1, d) and q.dtype == np.float16
                                for q in qs)
    assert all(b.shape == (2, B, Hkv, S, d) and b.dtype == np.float16 for b in bufs)
    assert np.isfinite(bufs[0]).all() and bufs[0].std() > 0.5   # filled, not left empty
    assert lens.dtype == np.int32 and lens.tolist() == [S, S]


def test_paged_pool_read_through_block_table_is_the_cache():
    """_paged scatters each sequence's pages (a sequence at a time, no second copy of the whole
    cache): gathering pool[block_table[b]] back in order gives the cache exactly, and every page
    of the pool is used once."""
    cp, rng = _numpy_as_cupy(), np.random.default_rng(2)
    B, Hkv, S, d, page = 3, 2, 64, 8, 16
    k = rng.standard_normal((B, Hkv, S, d)).astype(np.float16)
    v = rng.standard_normal((B, Hkv, S, d)).astype(np.float16)
    pk, pv, table = bench_kvcache._paged(cp, k, v, page, rng)
    per = S // page
    assert pk.shape == (B * per, Hkv, page, d) and table.shape == (B, per)
    assert sorted(table.reshape(-1).tolist()) == list(range(B * per))
    for pool, x in ((pk, k), (pv, v)):
        back = pool[table].transpose(0, 2, 1, 3, 4).reshape(B, Hkv, S, d)   # (B, per, Hkv, page, d)
        assert np.array_equal(back, x)
