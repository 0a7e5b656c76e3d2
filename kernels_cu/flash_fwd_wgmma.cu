// cuflash: FlashAttention forward on Hopper's warpgroup tensor cores (sm_90a), float16 / bfloat16.
// The algorithm is flash_fwd_mma.cu's (and cuflash/twin.py's) with the products on wgmma:
// each warpgroup (4 warps) owns 64 query rows; S = Q Kᵀ reads Q and K straight from shared
// memory (wgmma_ss), O += P V takes P from registers and V from shared memory (wgmma_rs), so
// there is no ldmatrix at all. The softmax is flash_fwd_mma.cu's with MT = 1: the wgmma
// accumulator of a warp is the mma.m16n8k16 C fragment layout (wgmma.cuh).
//
// Shared-memory tiles use the 128-byte swizzle that wgmma reads (PTX ISA, "Shared Memory Matrix
// Layout"): a tile of ROWS × DP elements is DP / 64 panels of ROWS rows × 128 bytes; the 16-byte
// chunk c of row r sits at chunk c ^ (r % 8). Panels start on 1024-byte boundaries.
//   Q (A of S = Q Kᵀ) and K (B of it) are "K-major" (head dim contiguous): a k-step of 16 moves
//   the descriptor's start by 32 bytes inside the panel; 8-row groups are 1024 bytes apart.
//   V (B of O = P V) is "MN-major" (head dim contiguous, keys are k): a k-step of 16 keys moves
//   by 2048 bytes; the panels (64 head-dim columns each) are BLOCK_N·128 bytes apart (LBO).
//
// Versions (predictions and results in NOTES.md):
//   v3  first wgmma version: cp.async K/V ring (STAGES 1 or 2) issued by every thread, one
//       product group in flight per warpgroup, the two warpgroups of a block overlap each
//       other's softmax and products only through the warp schedulers.
//   v4  softmax of tile j overlaps the product P_{j-1} V_{j-1} inside each warpgroup (both
//       products of a step issued together, FlashAttention-3's intra-warpgroup pipelining);
//       a ring of 3 or 4 K/V buffers; exp2 as ex2.approx.
//
// Grid: (ceil(T / BLOCK_M), batch). Block: NT = 32·warps threads, BLOCK_M = 16·warps.
#pragma once
#include "mma.cuh"
#include "wgmma.cuh"

namespace cuflash {

// Element offset of (r, col) in a 128-byte-swizzled tile of ROWS rows (see the header).
template <int ROWS>
__device__ __forceinline__ int sw128(int r, int col) {
    return (col >> 6) * (ROWS * 64) + r * 64 + ((((col >> 3) & 7) ^ (r & 7)) << 3) + (col & 7);
}

// cp.async of a ROWS × DP tile (global row stride d) into the swizzled layout; rows >= rows_valid
// and columns >= d are zero-filled.
template <int ROWS, int DP, int NT, typename T>
__device__ __forceinline__ void cp_async_tile_sw128(T* s, const T* g, int rows_valid, int d) {
    constexpr int CPR = DP / 8, N = ROWS * CPR;
#pragma unroll
    for (int i = 0; i < (N + NT - 1) / NT; ++i) {
        const int c = threadIdx.x + i * NT;
        if (N % NT == 0 || c < N) {
            const int r = c / CPR, col = (c % CPR) * 8;
            const bool valid = r < rows_valid && col < d;
            cp_async16(s + sw128<ROWS>(r, col), valid ? g + size_t(r) * d + col : g, valid);
        }
    }
}

// wgmma shared-memory descriptor, 128-byte swizzle: start address, leading-dimension byte offset
// (only read for MN-major operands wider than one panel), stride byte offset 1024 (8 rows).
__device__ __forceinline__ unsigned long long sw128_desc(const void* p, unsigned lbo_bytes) {
    const unsigned long long a = smem_addr(p);
    return ((a & 0x3FFFF) >> 4) | (static_cast<unsigned long long>((lbo_bytes >> 4) & 0x3FFF) << 16) |
           (static_cast<unsigned long long>(1024 >> 4) << 32) | (1ull << 62);
}

template <typename T, typename Acc, int DP, int BLOCK_M, int BLOCK_N, int NT, bool CAUSAL, int STAGES>
__device__ __forceinline__ void flash_fwd_wgmma(
    const T* __restrict__ q,    // (batch, T_len, d)
    const T* __restrict__ k,    // (batch, S_len, d)
    const T* __restrict__ v,    // (batch, S_len, d)
    T* __restrict__ out,        // (batch, T_len, d)
    float* __restrict__ lse,    // (batch, T_len), natural log
    int T_len, int S_len, int d, float scale_log2, int smem_bytes) {
    constexpr int NW = NT / 32;
    constexpr int NS = BLOCK_N / 8;          // 8-column n-tiles of S
    constexpr int NO = DP / 8;               // 8-column n-tiles of O
    constexpr int kSmem = (BLOCK_M + STAGES * 2 * BLOCK_N) * DP * int(sizeof(T)) + 1024;
    static_assert(NW % 4 == 0 && BLOCK_M == 16 * NW, "BLOCK_M must be 64 rows per warpgroup");
    static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 256 && DP % 64 == 0 && DP <= 256, "tile sizes");
    static_assert(STAGES == 3 || STAGES == 4, "3 or 4 K/V buffers (one being loaded, two read)");
    using MMA_S = Wgmma<BLOCK_N, T>;
    using MMA_O = Wgmma<DP, T>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    if (kSmem > smem_bytes) __trap();
    // 1024-byte alignment of every panel (the swizzle pattern repeats every 8 rows of 128 bytes)
    T* sQ = reinterpret_cast<T*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));
    T* sK = sQ + BLOCK_M * DP;               // STAGES × BLOCK_N × DP
    T* sV = sK + STAGES * BLOCK_N * DP;      // STAGES × BLOCK_N × DP

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t4 = lane & 3;   // fragment row group and column pair
    const int wg = warp / 4;                  // warpgroup: query rows 64·wg .. 64·wg + 63
    const int i0 = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;  // heaviest causal tiles first
    const int b = blockIdx.y;
    const int rows_q = min(BLOCK_M, T_len - i0);
    const int wrow = warp * 16;               // this warp's first row in the tile
    q += (size_t(b) * T_len + i0) * d;
    out += (size_t(b) * T_len + i0) * d;
    lse += size_t(b) * T_len + i0;
    k += size_t(b) * S_len * d;
    v += size_t(b) * S_len * d;
    const int diag = S_len - T_len;           // query i sees key j iff j <= i + diag
    const int kv_end = CAUSAL ? min(S_len, max(0, i0 + rows_q + diag)) : S_len;
    const int n_tiles = (kv_end + BLOCK_N - 1) / BLOCK_N;

    auto load_kv = [&](int tile, int stage) {
        const int j0 = tile * BLOCK_N, rows = min(BLOCK_N, S_len - j0);
        cp_async_tile_sw128<BLOCK_N, DP, NT>(sK + stage * BLOCK_N * DP, k + size_t(j0) * d, rows, d);
        cp_async_tile_sw128<BLOCK_N, DP, NT>(sV + stage * BLOCK_N * DP, v + size_t(j0) * d, rows, d);
    };
    // Ring of STAGES K/V buffers, tile t in stage t % STAGES. Tile j + AHEAD is loaded while tile
    // j is computed: its stage last held tile j - 2, whose V the product P_{j-2} V_{j-2} read in
    // step j - 1 (tile j - 1's V is still being read during step j).
    constexpr int AHEAD = STAGES - 2;
    cp_async_tile_sw128<BLOCK_M, DP, NT>(sQ, q, rows_q, d);
#pragma unroll
    for (int t = 0; t < AHEAD; ++t) {   // cp.async group t holds tile t (group 0 also Q)
        if (t < n_tiles) load_kv(t, t);
        cp_async_commit();
    }

    float o[NO][4];          // unnormalized O rows (g, g+8) of this warp
    float m[2], l[2];        // running max (raw score units) and this thread's partial row sum
#pragma unroll
    for (int n = 0; n < NO; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
    m[0] = m[1] = -Num<float>::inf();
    l[0] = l[1] = 0.f;
    const T* sQw = sQ + wg * 64 * 64;         // this warpgroup's 64 rows of panel 0
    unsigned pa[BLOCK_N / 16][4];             // P_{j-1} as A fragments, read by the product in flight

    // Step j: S_j = Q K_jᵀ and O += P_{j-1} V_{j-1} run on the tensor cores together; the
    // softmax of S_j (exp2, the slow part) overlaps the second product; then O is rescaled.
    for (int j = 0; j < n_tiles; ++j) {
        const int j0 = j * BLOCK_N;
        cp_async_wait<AHEAD - 1>();  // tile j (cp.async group j) has landed
        fence_proxy_async();         // this thread's cp.async data, visible to wgmma after the barrier
        __syncthreads();
        if (j + AHEAD < n_tiles) load_kv(j + AHEAD, (j + AHEAD) % STAGES);
        cp_async_commit();           // one group per step, empty or not: the count stays exact
        const T* Ks = sK + (j % STAGES) * BLOCK_N * DP;
        const T* Vp = sV + ((j + STAGES - 1) % STAGES) * BLOCK_N * DP;   // V_{j-1}

        // -- issue S_j = Q_i K_jᵀ (DP / 16 k-steps, 32 bytes each inside a panel), then P V
        float s[NS][4];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk)
            MMA_S::ss(s, sw128_desc(sQw + (kk >> 2) * BLOCK_M * 64 + (kk & 3) * 16, 0),
                      sw128_desc(Ks + (kk >> 2) * BLOCK_N * 64 + (kk & 3) * 16, 0), kk > 0);
        wgmma_commit();
        if (j > 0) {
#pragma unroll
            for (int kk = 0; kk < BLOCK_N / 16; ++kk)   // 16 keys (2048 bytes of V) per k-step
                MMA_O::template rs<1>(o, pa[kk], sw128_desc(Vp + kk * 16 * 64, BLOCK_N * 128), 1);
            wgmma_commit();
            wgmma_wait<1>();         // S_j is done; P_{j-1} V_{j-1} may still run
        } else {
            wgmma_wait<0>();
        }
        wgmma_fence_regs(s);

        // -- -inf past the sequence end and above the diagonal
        if (j0 + BLOCK_N > S_len || (CAUSAL && j0 + BLOCK_N - 1 > i0 + diag)) {
#pragma unroll
            for (int n = 0; n < NS; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = j0 + n * 8 + 2 * t4 + (e & 1);
                    const int query = i0 + wrow + g + (e >> 1) * 8;
                    if (key >= S_len || (CAUSAL && key > query + diag)) s[n][e] = -Num<float>::inf();
                }
        }

        // -- new m; P = 2^(S·scale·log2 e - m·scale·log2 e); alpha rescales the old l and O
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {   // h = 0: row g, h = 1: row g + 8
            float mx = m[h];
#pragma unroll
            for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_scaled = mx == -Num<float>::inf() ? 0.f : mx * scale_log2;
            alpha[h] = ex2_approx(m[h] * scale_log2 - m_scaled);
            m[h] = mx;
            float row_sum = 0.f;
#pragma unroll
            for (int n = 0; n < NS; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float p = ex2_approx(fmaf(s[n][2 * h + e], scale_log2, -m_scaled));
                    s[n][2 * h + e] = p;
                    row_sum += p;
                }
            l[h] = l[h] * alpha[h] + row_sum;
        }
        // -- P_j rounded to T as A fragments, held apart from pa until P_{j-1} V_{j-1} is done
        unsigned pn[BLOCK_N / 16][4];
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) c_to_a<T>(pn[kk], s[2 * kk], s[2 * kk + 1]);
        if (j > 0) {
            wgmma_wait<0>();
            wgmma_fence_regs(o);
            wgmma_keep_regs(pa);     // pa was read by the product that just finished
        }
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[0];
            o[n][2] *= alpha[1];
            o[n][3] *= alpha[1];
        }
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk)
#pragma unroll
            for (int e = 0; e < 4; ++e) pa[kk][e] = pn[kk][e];
    }
    if (n_tiles > 0) {               // the last product, O += P_{n-1} V_{n-1}
        const T* Vp = sV + ((n_tiles - 1) % STAGES) * BLOCK_N * DP;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk)
            MMA_O::template rs<1>(o, pa[kk], sw128_desc(Vp + kk * 16 * 64, BLOCK_N * 128), 1);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_regs(o);
        wgmma_keep_regs(pa);
    }
    cp_async_wait<0>();
    __syncthreads();  // every warpgroup is done with sQ (and with no K/V tile, Q copies landed)

    // -- O = O / l, lse = (m·scale·log2 e + log2 l)·ln 2; rows that saw no key: O = 0, lse = -inf
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = l[h];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const float inv = sum == 0.f ? 0.f : 1.f / sum;
        const int r = wrow + g + h * 8;
        if (t4 == 0 && r < rows_q)
            lse[r] = sum == 0.f ? -Num<float>::inf() : (m[h] * scale_log2 + log2f(sum)) * float(kLn2);
#pragma unroll
        for (int n = 0; n < NO; ++n)   // this warp's own Q rows are free now: stage O there
            *reinterpret_cast<unsigned*>(sQ + sw128<BLOCK_M>(r, n * 8 + 2 * t4)) =
                pack2<T>(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
    }
    __syncwarp();
    constexpr int CPR = DP / 8;
#pragma unroll
    for (int c = lane; c < 16 * CPR; c += 32) {
        const int r = wrow + c / CPR, col = (c % CPR) * 8;
        if (r < rows_q && col < d)
            *reinterpret_cast<uint4*>(out + size_t(r) * d + col) =
                *reinterpret_cast<const uint4*>(sQ + sw128<BLOCK_M>(r, col));
    }
}

}  // namespace cuflash
