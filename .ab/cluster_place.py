"""NOTES v106: where the hardware places thread-block clusters of a decode-sized grid. A probe
kernel of 128 threads compiled with __cluster_dims__(C, 1, 1) for C = 1, 2, 4, 8, launched as 128
blocks (the grid of a 4 x 8 or 8 x 8 decode step on 132 SMs) with a given dynamic shared memory,
each block spinning ~100 µs and recording %smid: how many SMs the grid uses and the most blocks
on one SM. Blocks of ~111 KB fit two to an SM; if the cluster scheduler packs two of a cluster
onto one SM while other SMs idle, a bandwidth-bound step slows.   python3 .ab/cluster_place.py"""
import collections

import cupy as cp

SRC = r"""
extern "C" __global__ void __cluster_dims__(CL, 1, 1) probe(int* smid, long long spin) {
    extern __shared__ char s[];
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    if (threadIdx.x == 0) smid[blockIdx.x] = id;
    long long t0 = clock64();
    while (clock64() - t0 < spin) {}
    s[threadIdx.x] = 1;
}"""
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {sms} SMs")
for blocks in (128, 132):
    for smem in (60 * 1024, 111 * 1024, 140 * 1024):
        for C in (1, 2, 4, 8):
            if blocks % C:
                continue
            mod = cp.RawModule(code=SRC.replace("CL", str(C)), options=("-arch=sm_90a",))
            k = mod.get_function("probe")
            k.max_dynamic_shared_size_bytes = smem
            out = cp.full(blocks, -1, dtype=cp.int32)
            k((blocks,), (128,), (out, cp.int64(200_000)), shared_mem=smem)
            cp.cuda.Device().synchronize()
            ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
            ev0.record()
            k((blocks,), (128,), (out, cp.int64(200_000)), shared_mem=smem)
            ev1.record()
            ev1.synchronize()
            ms = cp.cuda.get_elapsed_time(ev0, ev1)
            per = collections.Counter(out.get().tolist())
            print(f"blocks={blocks} smem={smem // 1024:3d}KB cluster={C}: {len(per):3d} SMs used, "
                  f"most blocks on one SM {max(per.values())}, {ms * 1e3:7.1f} us "
                  f"(one spin ~{200_000 / 1.98e3:.0f} us at 1.98 GHz)", flush=True)
