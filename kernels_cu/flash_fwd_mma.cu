// cuflash: FlashAttention forward on tensor cores (float16 / bfloat16), mma.sync m16n8k16.
// The algorithm is flash_fwd.cu's (and cuflash/twin.py's); this file keeps S, P and O in
// registers: each warp owns 16·MT query rows, so row max and row sum need only the 4 lanes of a
// quad, and P goes from the S accumulators straight into the A operand of P·V.
//
// Versions (measured on the H200; predictions and results in NOTES.md):
//   v1  cp.async K/V ring (STAGES 1 or 2), Q fragments re-read from shared memory per K/V tile
//       with ldmatrix, V through ldmatrix.trans, exp2 with scale·log2(e) folded into one FFMA,
//       1/l deferred to the end, causal tiles above the diagonal skipped, heavy tiles first.
//   v2  P packed to 16-bit A fragments right after the softmax (the float S registers die
//       before P·V), which lets 128-row tiles (MT = 2) fit at d = 128 without spills.
//
// Grid: (ceil(T / BLOCK_M), batch). Block: NT = 32·warps threads, BLOCK_M = 16·MT·warps.
#pragma once
#include "mma.cuh"

namespace cuflash {

template <typename T, typename Acc, int DP, int BLOCK_M, int BLOCK_N, int NT, bool CAUSAL, int STAGES>
__device__ __forceinline__ void flash_fwd_mma(
    const T* __restrict__ q,    // (batch, T_len, d)
    const T* __restrict__ k,    // (batch, S_len, d)
    const T* __restrict__ v,    // (batch, S_len, d)
    T* __restrict__ out,        // (batch, T_len, d)
    float* __restrict__ lse,    // (batch, T_len), natural log
    int T_len, int S_len, int d, float scale_log2, int smem_bytes) {
    constexpr int NW = NT / 32;
    constexpr int MT = BLOCK_M / (16 * NW);  // 16-row m-tiles per warp
    constexpr int NS = BLOCK_N / 8;          // 8-column n-tiles of S
    constexpr int NO = DP / 8;               // 8-column n-tiles of O
    constexpr int LDS = DP + 8;              // row stride (elements) of every tile: +16 bytes
    constexpr int kSmem = (BLOCK_M + STAGES * 2 * BLOCK_N) * LDS * int(sizeof(T));
    static_assert(MT >= 1 && BLOCK_M == 16 * MT * NW, "BLOCK_M must be 16·MT·warps");
    static_assert(BLOCK_N % 16 == 0 && DP % 16 == 0, "tiles must be multiples of 16");
    static_assert(STAGES == 1 || STAGES == 2, "1 or 2 stages");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* sQ = reinterpret_cast<T*>(smem_raw);  // BLOCK_M × LDS, later this warp's O rows
    T* sK = sQ + BLOCK_M * LDS;              // STAGES × BLOCK_N × LDS
    T* sV = sK + STAGES * BLOCK_N * LDS;     // STAGES × BLOCK_N × LDS
    if (kSmem > smem_bytes) __trap();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t4 = lane & 3;   // fragment row group and column pair
    const int i0 = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;  // heaviest causal tiles first
    const int b = blockIdx.y;
    const int rows_q = min(BLOCK_M, T_len - i0);
    const int wrow = warp * 16 * MT;          // this warp's first row in the tile
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
        cp_async_tile<BLOCK_N, DP, LDS, NT>(sK + stage * BLOCK_N * LDS, k + size_t(j0) * d, rows, d);
        cp_async_tile<BLOCK_N, DP, LDS, NT>(sV + stage * BLOCK_N * LDS, v + size_t(j0) * d, rows, d);
    };
    cp_async_tile<BLOCK_M, DP, LDS, NT>(sQ, q, rows_q, d);
    if (n_tiles > 0) load_kv(0, 0);
    cp_async_commit();

    float o[MT][NO][4];      // unnormalized O rows (g, g+8) of each m-tile
    float m[MT][2], l[MT][2];  // running max (raw score units) and this thread's partial row sum
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int n = 0; n < NO; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mt][n][e] = 0.f;
        m[mt][0] = m[mt][1] = -Num<float>::inf();
        l[mt][0] = l[mt][1] = 0.f;
    }

    for (int tile = 0; tile < n_tiles; ++tile) {
        const int j0 = tile * BLOCK_N;
        const int stage = STAGES == 2 ? tile & 1 : 0;
        if constexpr (STAGES == 2) {
            if (tile + 1 < n_tiles) load_kv(tile + 1, (tile + 1) & 1);  // prefetch the next tile
            cp_async_commit();
            cp_async_wait<1>();    // everything but the prefetch has landed
        } else {
            if (tile > 0) { load_kv(tile, 0); cp_async_commit(); }
            cp_async_wait<0>();
        }
        __syncthreads();
        const T* Ks = sK + stage * BLOCK_N * LDS;
        const T* Vs = sV + stage * BLOCK_N * LDS;

        // -- S = Q_i K_jᵀ (raw scores)
        float s[MT][NS][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NS; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            unsigned a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], frag_a_addr<LDS>(sQ, wrow + mt * 16, kk * 16, lane));
#pragma unroll
            for (int nn = 0; nn < BLOCK_N / 16; ++nn) {
                unsigned bk[4];
                ldmatrix_x4(bk, frag_b_addr<LDS>(Ks, nn * 16, kk * 16, lane));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma16816<T>(s[mt][2 * nn], a[mt], bk[0], bk[1]);
                    mma16816<T>(s[mt][2 * nn + 1], a[mt], bk[2], bk[3]);
                }
            }
        }

        // -- -inf past the sequence end and above the diagonal
        if (j0 + BLOCK_N > S_len || (CAUSAL && j0 + BLOCK_N - 1 > i0 + diag)) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int n = 0; n < NS; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int key = j0 + n * 8 + 2 * t4 + (e & 1);
                        const int query = i0 + wrow + mt * 16 + g + (e >> 1) * 8;
                        if (key >= S_len || (CAUSAL && key > query + diag)) s[mt][n][e] = -Num<float>::inf();
                    }
        }

        // -- update m and l, P = 2^(S·scale·log2 e - m·scale·log2 e), rescale O by alpha
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {   // h = 0: row g, h = 1: row g + 8
                float mx = m[mt][h];
#pragma unroll
                for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * h], s[mt][n][2 * h + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_scaled = mx == -Num<float>::inf() ? 0.f : mx * scale_log2;
                const float alpha = exp2f(m[mt][h] * scale_log2 - m_scaled);
                m[mt][h] = mx;
                float row_sum = 0.f;
#pragma unroll
                for (int n = 0; n < NS; ++n)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float p = exp2f(fmaf(s[mt][n][2 * h + e], scale_log2, -m_scaled));
                        s[mt][n][2 * h + e] = p;
                        row_sum += p;
                    }
                l[mt][h] = l[mt][h] * alpha + row_sum;
#pragma unroll
                for (int n = 0; n < NO; ++n) {
                    o[mt][n][2 * h] *= alpha;
                    o[mt][n][2 * h + 1] *= alpha;
                }
            }
        }

        // -- P rounded to T and packed as A fragments now, so the float S registers die here
        unsigned pa[MT][BLOCK_N / 16][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kk = 0; kk < BLOCK_N / 16; ++kk) c_to_a<T>(pa[mt][kk], s[mt][2 * kk], s[mt][2 * kk + 1]);

        // -- O += P V_j
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
#pragma unroll
            for (int dd = 0; dd < DP / 16; ++dd) {
                unsigned bv[4];
                ldmatrix_x4_trans(bv, frag_a_addr<LDS>(Vs, kk * 16, dd * 16, lane));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma16816<T>(o[mt][2 * dd], pa[mt][kk], bv[0], bv[1]);
                    mma16816<T>(o[mt][2 * dd + 1], pa[mt][kk], bv[2], bv[3]);
                }
            }
        }
        __syncthreads();  // all warps are done with this stage before it is refilled
    }
    cp_async_wait<0>();
    __syncthreads();  // with no K/V tile at all, other threads' Q copies may still be landing

    // -- O = O / l, lse = (m·scale·log2 e + log2 l)·ln 2; rows that saw no key: O = 0, lse = -inf
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float sum = l[mt][h];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = sum == 0.f ? 0.f : 1.f / sum;
            const int r = wrow + mt * 16 + g + h * 8;
            if (t4 == 0 && r < rows_q)
                lse[r] = sum == 0.f ? -Num<float>::inf()
                                    : (m[mt][h] * scale_log2 + log2f(sum)) * float(kLn2);
#pragma unroll
            for (int n = 0; n < NO; ++n) {
                // this warp's own Q rows are free now: stage O there for 16-byte stores
                *reinterpret_cast<unsigned*>(sQ + r * LDS + n * 8 + 2 * t4) =
                    pack2<T>(o[mt][n][2 * h] * inv, o[mt][n][2 * h + 1] * inv);
            }
        }
    }
    __syncwarp();
    constexpr int CPR = DP / 8;
#pragma unroll
    for (int c = lane; c < 16 * MT * CPR; c += 32) {
        const int r = wrow + c / CPR, col = (c % CPR) * 8;
        if (r < rows_q && col < d)
            *reinterpret_cast<uint4*>(out + size_t(r) * d + col) =
                *reinterpret_cast<const uint4*>(sQ + r * LDS + col);
    }
}

}  // namespace cuflash
