"""Issue 14, call 107: is the decode kernel's load instruction (cp.async.cg, LDGSTS.BYPASS) what
reads 1.5x the L2 sectors and 0.89x the read kernel's bandwidth (NOTES v27, call 106)?

Five kernels read the same bytes (the size of call 106's decode step, 8.59 GB), each block its
own contiguous region in tiles of 32 KiB (a decode block's K + V tile of 64 keys at d = 128,
float16), 128 threads, a 3-stage ring of 96 KiB in shared memory (2 blocks per SM), like the
decode kernel; each XORs what it read so nothing can be skipped:
  cg     cp.async.cg 16 B per thread (LDGSTS.BYPASS: the decode kernel's copies)
  ca     cp.async.ca 16 B (LDGSTS through L1)
  cg256  cp.async.cg with the .L2::256B prefetch hint
  cgz    cp.async.cg's src-size form (zero-fill; cuflash's cp_async16 through v27), size 16
  cgp    cp.async.cg under a predicate (always true)
  cgsel  plain cp.async.cg where valid, the src-size-0 form where not (always valid here)
  cgpad  cgz into rows padded to 272 bytes in shared memory (the mma kernels' LDS = d + 8)
  cgswz  cgz into unpadded rows, chunk index XOR row % 8 (a 128-byte swizzle)
  bulk   cp.async.bulk (the TMA unit's 1-D bulk copy), one 32 KiB copy per tile, mbarrier
  bulkrow  cp.async.bulk per 256-byte row (128 rows per tile, lanes of warp 0 issue them)
  ldg    __ldg 16 B per thread into registers, 16 in flight (no shared memory)
and the read kernel (readbw.py: grid-stride __ldg) as the reference.

    python .ab/load_probe.py [--reps 5] [--only NAME]
"""
import argparse
import statistics

import cupy as cp

SRC = r"""
#define TILE 32768
#define STAGES 3
#define NT 128
#define CHUNKS (TILE / 16 / NT)

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ unsigned xor4(uint4 a) { return a.x ^ a.y ^ a.z ^ a.w; }

template <int KIND>
__device__ __forceinline__ void copy16(unsigned dst, const char* src, bool ok) {
    if (KIND == 0)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
    else if (KIND == 1)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
    else if (KIND == 2)
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
    else if (KIND == 3)   // src-size form (zero-fill), as cuflash's cp_async16 through v27
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0));
    else if (KIND == 4)   // plain copy under a predicate
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n@p cp.async.cg.shared.global [%0], [%1], 16;\n}\n"
                     ::"r"(dst), "l"(src), "r"(int(ok)));
    else                  // plain copy when ok, the zero-fill form (reading nothing) when not
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\n"
                     "@p cp.async.cg.shared.global [%0], [%1], 16;\n"
                     "@!p cp.async.cg.shared.global [%0], [%1], 16, 0;\n}\n"
                     ::"r"(dst), "l"(src), "r"(int(ok)));
}

// cp.async ring: each thread copies CHUNKS 16-byte chunks per tile (thread i: chunks i, i + NT,
// ..., a warp's instruction 512 contiguous bytes) and XORs the chunks it copied once they land
// where chunk ch (16 bytes) of a tile of 256-byte rows lands in its stage: LAYOUT 0 as in global
// memory, 1 rows padded to 272 bytes (the mma kernels' LDS = d + 8 at d = 128), 2 rows of 256
// bytes with the chunk index XOR row % 8 (a 128-byte swizzle)
#define ROWB 256
template <int LAYOUT>
__device__ __forceinline__ int dst_off(int ch) {
    const int row = ch / (ROWB / 16), col = ch % (ROWB / 16);
    if (LAYOUT == 1) return row * (ROWB + 16) + col * 16;
    if (LAYOUT == 2) return row * ROWB + ((col ^ (row & 7)) * 16);
    return ch * 16;
}
#define STAGE_BYTES (TILE / ROWB * (ROWB + 16))

template <int KIND, int LAYOUT = 0>
__device__ void ring_cpasync(const char* base, long long ntiles, unsigned* out) {
    const long long limit = ntiles * TILE;
    extern __shared__ __align__(1024) char sm[];
    const int tid = threadIdx.x;
    unsigned acc = 0;
    auto issue = [&](long long t) {
        if (t < ntiles) {
            const char* src = base + t * TILE;
            char* dst = sm + (t % STAGES) * STAGE_BYTES;
#pragma unroll
            for (int c = 0; c < CHUNKS; ++c)   // ok: always true, but not known to the compiler
                copy16<KIND>(smem_u32(dst + dst_off<LAYOUT>(c * NT + tid)), src + (c * NT + tid) * 16,
                             t * TILE + (c * NT + tid) * 16 < limit);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    for (int t = 0; t < STAGES - 1; ++t) issue(t);
    for (long long t = 0; t < ntiles; ++t) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads();
        issue(t + STAGES - 1);
        const char* s = sm + (t % STAGES) * STAGE_BYTES;
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) acc ^= xor4(*reinterpret_cast<const uint4*>(s + dst_off<LAYOUT>(c * NT + tid)));
    }
    atomicXor(out, acc);
}

extern "C" __global__ void __launch_bounds__(NT) probe_cgpad(const char* x, long long ntiles, unsigned* out) {
    ring_cpasync<3, 1>(x + blockIdx.x * ntiles * TILE, ntiles, out);
}
extern "C" __global__ void __launch_bounds__(NT) probe_cgswz(const char* x, long long ntiles, unsigned* out) {
    ring_cpasync<3, 2>(x + blockIdx.x * ntiles * TILE, ntiles, out);
}

extern "C" __global__ void __launch_bounds__(NT) probe_cg(const char* x, long long ntiles, unsigned* out) {
    ring_cpasync<0>(x + blockIdx.x * ntiles * TILE, ntiles, out);
}
extern "C" __global__ void __launch_bounds__(NT) probe_ca(const char* x, long long ntiles, unsigned* out) {
    ring_cpasync<1>(x + blockIdx.x * ntiles * TILE, ntiles, out);
}
extern "C" __global__ void __launch_bounds__(NT) probe_cg256(const char* x, long long ntiles, unsigned* out) {
    ring_cpasync<2>(x + blockIdx.x * ntiles * TILE, ntiles, out);
}
extern "C" __global__ void __launch_bounds__(NT) probe_cgz(const char* x, long long ntiles, unsigned* out) {
    ring_cpasync<3>(x + blockIdx.x * ntiles * TILE, ntiles, out);
}
extern "C" __global__ void __launch_bounds__(NT) probe_cgp(const char* x, long long ntiles, unsigned* out) {
    ring_cpasync<4>(x + blockIdx.x * ntiles * TILE, ntiles, out);
}
extern "C" __global__ void __launch_bounds__(NT) probe_cgsel(const char* x, long long ntiles, unsigned* out) {
    ring_cpasync<5>(x + blockIdx.x * ntiles * TILE, ntiles, out);
}

__device__ __forceinline__ void mbar_init(unsigned long long* b, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned long long* b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* b, int parity) {
    asm volatile("{\n.reg .pred done;\nW_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra W_%=;\n}\n" ::"r"(smem_u32(b)), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk(unsigned dst, const char* src, unsigned bytes, unsigned long long* b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(smem_u32(b)) : "memory");
}

// TMA bulk ring: ROWS copies per tile (1: the whole tile; 128: a 256-byte row each, issued by
// warp 0's lanes), completion counted in bytes on the stage's mbarrier
template <int ROWS>
__device__ void ring_bulk(const char* base, long long ntiles, unsigned* out) {
    extern __shared__ __align__(1024) char sm[];
    __shared__ __align__(8) unsigned long long full[STAGES];
    const int tid = threadIdx.x;
    if (tid == 0)
        for (int s = 0; s < STAGES; ++s) mbar_init(&full[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    __syncthreads();
    unsigned acc = 0;
    auto issue = [&](long long t) {
        if (t >= ntiles || tid >= 32) return;
        const int s = t % STAGES;
        if (tid == 0) {
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            mbar_expect(&full[s], TILE);
        }
        __syncwarp();
        const char* src = base + t * TILE;
        char* dst = sm + s * TILE;
        if (ROWS == 1) {
            if (tid == 0) bulk(smem_u32(dst), src, TILE, &full[s]);
        } else {
            constexpr int RB = TILE / ROWS;
            for (int r = tid; r < ROWS; r += 32) bulk(smem_u32(dst + r * RB), src + r * RB, RB, &full[s]);
        }
    };
    for (int t = 0; t < STAGES - 1; ++t) issue(t);
    for (long long t = 0; t < ntiles; ++t) {
        mbar_wait(&full[t % STAGES], (t / STAGES) & 1);
        __syncthreads();          // every thread is done with tile t - 1's stage
        issue(t + STAGES - 1);
        const char* s = sm + (t % STAGES) * TILE;
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) acc ^= xor4(*reinterpret_cast<const uint4*>(s + (c * NT + tid) * 16));
    }
    atomicXor(out, acc);
}
extern "C" __global__ void __launch_bounds__(NT) probe_bulk(const char* x, long long ntiles, unsigned* out) {
    ring_bulk<1>(x + blockIdx.x * ntiles * TILE, ntiles, out);
}
extern "C" __global__ void __launch_bounds__(NT) probe_bulkrow(const char* x, long long ntiles, unsigned* out) {
    ring_bulk<128>(x + blockIdx.x * ntiles * TILE, ntiles, out);
}

// registers only: each thread __ldg's its CHUNKS chunks of a tile, all in flight, then XORs
extern "C" __global__ void __launch_bounds__(NT) probe_ldg(const char* x, long long ntiles, unsigned* out) {
    const char* base = x + blockIdx.x * ntiles * TILE;
    unsigned acc = 0;
    for (long long t = 0; t < ntiles; ++t) {
        uint4 r[CHUNKS];
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) r[c] = __ldg(reinterpret_cast<const uint4*>(base + t * TILE + (c * NT + threadIdx.x) * 16));
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) acc ^= xor4(r[c]);
    }
    atomicXor(out, acc);
}
"""

NAMES = ["cg", "ca", "cg256", "cgz", "cgp", "cgsel", "cgpad", "cgswz", "bulk", "bulkrow", "ldg"]
TILE, STAGES, NT = 32768, 3, 128
SMEM = STAGES * TILE // 256 * 272   # the padded layout's stages (the others use less of it)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="")
    ap.add_argument("--gb", type=float, default=8.59)
    a = ap.parse_args()
    from cuflash.experiments.readbw import DeviceRead
    mod = cp.RawModule(code=SRC, options=("--std=c++17", "-arch=sm_90a"))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    blocks = 2 * sms                           # one wave: 2 blocks per SM, all resident
    ntiles = int(a.gb * 1e9) // (TILE * blocks)
    nbytes = ntiles * TILE * blocks
    x = cp.random.randint(0, 2**31, size=nbytes // 4, dtype=cp.int64).astype(cp.uint32)
    reader = DeviceRead(x)
    want = reader.xor(reader.launch())
    names = [n for n in NAMES if not a.only or n in a.only.split(",")]
    kernels = {}
    for n in names:
        k = mod.get_function("probe_" + n)
        k.max_dynamic_shared_size_bytes = SMEM
        kernels[n] = k
    out = cp.zeros(1, cp.uint32)

    def run(n):
        if n == "read":
            reader.launch()
            return
        kernels[n]((blocks,), (NT,), (x, cp.int64(ntiles), out), shared_mem=SMEM)

    for n in names:   # correctness: each kernel's XOR is the array's
        out.fill(0)
        run(n)
        got = int(out.get()[0])
        print(f"{n:8s} xor {'ok' if got == want else f'WRONG {got:#x} != {want:#x}'}")
    times = {n: [] for n in ["read"] + names}
    for _ in range(a.reps):
        for n in ["read"] + names:
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            run(n)
            e1.record()
            e1.synchronize()
            times[n].append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
    print(f"{nbytes / 1e9:.2f} GB, {blocks} blocks x {ntiles} tiles of {TILE} B, {cp.cuda.Device().attributes['MultiProcessorCount']} SMs")
    base = statistics.median(times["read"])
    for n, ts in times.items():
        m = statistics.median(ts)
        print(f"{n:8s} {nbytes / m / 1e12:6.3f} TB/s  {m * 1e3:8.3f} ms  x{base / m:5.3f} of read  (spread {min(ts)*1e3:.3f}-{max(ts)*1e3:.3f})")


if __name__ == "__main__":
    main()
