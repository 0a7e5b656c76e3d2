"""One decode step (B = 64, Hkv = 8, Hq = 32, S = 32768, float16, d = 128, contiguous, v27's rule:
unsplit, 3 stages) and the read kernel over the same K/V bytes, for ncu (issue 14: where the
last 7-9% of the read kernel's bandwidth goes). Run under
ncu --kernel-name regex:'mma_fwd|read_ceiling' --launch-skip 1 ... python3 .ab/decode_ncu.py"""
import cupy as cp

from cuflash import kvcache
from cuflash.experiments.readbw import DeviceRead

B, Hkv, S, d = 64, 8, 32768, 128
kv = cp.random.standard_normal((2, B, Hkv, S, d), dtype=cp.float32).astype(cp.float16)
q = cp.random.standard_normal((B, 4 * Hkv, 1, d), dtype=cp.float32).astype(cp.float16)
lens = cp.full((B,), S, dtype=cp.int32)
reader = DeviceRead(kv.view(cp.uint32).reshape(-1))
for _ in range(2):
    kvcache.attention_with_kvcache(q, kv[0], kv[1], cache_seqlens=lens, validate=False)
    reader.launch()
cp.cuda.Device().synchronize()
print("done", kv.nbytes / 2**30, "GiB")
