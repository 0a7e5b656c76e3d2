// cuflash: FlashAttention backward on Hopper's warpgroup tensor cores (sm_90a), float16 /
// bfloat16, deterministic dQ (a separate pass, as flash_bwd_mma.cu's bwd_dq_mma). The algorithm
// is flash_bwd_mma.cu's (and cuflash/twin.py's); the shared-memory layout, descriptors and
// accumulator fragments are flash_fwd_wgmma.cu's (128-byte swizzled panels of 64 columns).
//
//   bwd_dkdv_wgmma  one K/V tile resident, warpgroup g owns keys 64g..64g+63; Q/dO tiles of
//                   BLOCK_M queries streamed through a cp.async ring. Sᵀ = K Qᵀ and dPᵀ = V dOᵀ
//                   from shared memory (both K-major), Pᵀ = 2^(Sᵀ·scale·log2 e - lse·log2 e),
//                   dSᵀ = Pᵀ ∘ (dPᵀ - D) in registers, then dV += Pᵀ dO and dK += dSᵀ Q with Pᵀ,
//                   dSᵀ as register A operands and dO, Q read N-major (like V in the forward).
//   bwd_dq_wgmma    one Q/dO tile resident, warpgroup g owns queries 64g..; K/V streamed:
//                   S = Q Kᵀ, dP = dO Vᵀ, dS = P ∘ (dP - D), dQ += dS K (K read N-major).
// D = rowsum(dO ∘ O) comes from flash_bwd_preprocess (flash_bwd.cu).
//
// Versions (predictions and results in NOTES.md):
//   v5  first wgmma backward: both products of a phase issued as one group, no overlap of the
//       exponentials with the products inside a warpgroup.
#pragma once
#include "flash_fwd_wgmma.cu"
#include "flash_bwd.cu"

namespace cuflash {

template <typename T, typename Acc, int DP, int BLOCK_M, int BLOCK_N, int NT, bool CAUSAL, bool ATOMIC_DQ, int STAGES>
__device__ __forceinline__ void flash_bwd_dkdv_wgmma(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ dout,       // (batch, T_len, d)
    const float* __restrict__ lse,    // (batch, T_len), natural log
    const float* __restrict__ D,      // (batch, T_len)
    T* __restrict__ dk, T* __restrict__ dv,   // (batch, S_len, d)
    float* __restrict__ dq_accum,     // unused: dQ comes from bwd_dq_wgmma
    int T_len, int S_len, int d, float scale, float scale_log2, int smem_bytes) {
    constexpr int NW = NT / 32;
    constexpr int MS = BLOCK_M / 8;     // 8-query n-tiles of Sᵀ
    constexpr int NO = DP / 8;          // 8-column n-tiles of dK, dV
    constexpr int kSmem = (2 * BLOCK_N + STAGES * 2 * BLOCK_M) * DP * int(sizeof(T))
                          + STAGES * 2 * BLOCK_M * int(sizeof(float)) + 1024;
    static_assert(!ATOMIC_DQ, "the wgmma backward computes dQ in its own pass");
    static_assert(NW % 4 == 0 && BLOCK_N == 16 * NW, "64 keys per warpgroup");
    static_assert(BLOCK_M % 16 == 0 && BLOCK_M <= 256 && DP % 64 == 0 && DP <= 256, "tile sizes");
    static_assert(STAGES == 1 || STAGES == 2, "1 or 2 stages");
    using MMA_S = Wgmma<BLOCK_M, T>;    // Sᵀ, dPᵀ: 64 keys × BLOCK_M queries per warpgroup
    using MMA_O = Wgmma<DP, T>;         // dK, dV: 64 keys × DP
    extern __shared__ __align__(16) unsigned char smem_raw[];
    if (kSmem > smem_bytes) __trap();
    T* sK = reinterpret_cast<T*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));
    T* sV = sK + BLOCK_N * DP;                    // BLOCK_N × DP
    T* sQ = sV + BLOCK_N * DP;                    // STAGES × BLOCK_M × DP
    T* sdO = sQ + STAGES * BLOCK_M * DP;          // STAGES × BLOCK_M × DP
    float* s_lse = reinterpret_cast<float*>(sdO + STAGES * BLOCK_M * DP);  // STAGES × BLOCK_M: lse·log2 e
    float* s_D = s_lse + STAGES * BLOCK_M;                                 // STAGES × BLOCK_M

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t4 = lane & 3;
    const int wg = warp / 4;
    const int j0 = blockIdx.x * BLOCK_N;          // first blocks see the most queries
    const int b = blockIdx.y;
    const int rows_kv = min(BLOCK_N, S_len - j0);
    const int diag = S_len - T_len;
    const int wkey = warp * 16;                   // this warp's first key in the tile
    q += size_t(b) * T_len * d;
    dout += size_t(b) * T_len * d;
    lse += size_t(b) * T_len;
    D += size_t(b) * T_len;
    k += (size_t(b) * S_len + j0) * d;
    v += (size_t(b) * S_len + j0) * d;
    dk += (size_t(b) * S_len + j0) * d;
    dv += (size_t(b) * S_len + j0) * d;

    const int i_begin = CAUSAL ? (max(0, j0 - diag) / BLOCK_M) * BLOCK_M : 0;
    const int n_tiles = i_begin < T_len ? (T_len - i_begin + BLOCK_M - 1) / BLOCK_M : 0;

    auto load_q = [&](int tile, int stage) {
        const int i0 = i_begin + tile * BLOCK_M, rows = min(BLOCK_M, T_len - i0);
        cp_async_tile_sw128<BLOCK_M, DP, NT>(sQ + stage * BLOCK_M * DP, q + size_t(i0) * d, rows, d);
        cp_async_tile_sw128<BLOCK_M, DP, NT>(sdO + stage * BLOCK_M * DP, dout + size_t(i0) * d, rows, d);
        for (int r = threadIdx.x; r < BLOCK_M; r += NT) {
            const float x = r < rows ? lse[i0 + r] : -Num<float>::inf();
            s_lse[stage * BLOCK_M + r] = x == -Num<float>::inf() ? Num<float>::inf() : x * float(kLog2e);
            s_D[stage * BLOCK_M + r] = r < rows ? D[i0 + r] : 0.f;
        }
    };
    cp_async_tile_sw128<BLOCK_N, DP, NT>(sK, k, rows_kv, d);
    cp_async_tile_sw128<BLOCK_N, DP, NT>(sV, v, rows_kv, d);
    if (n_tiles > 0) load_q(0, 0);
    cp_async_commit();

    float dK[NO][4], dV[NO][4];   // keys wkey + g and wkey + g + 8
#pragma unroll
    for (int n = 0; n < NO; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dK[n][e] = dV[n][e] = 0.f;
    const T* sKw = sK + wg * 64 * 64;             // this warpgroup's 64 keys of panel 0
    const T* sVw = sV + wg * 64 * 64;

    for (int tile = 0; tile < n_tiles; ++tile) {
        const int i0 = i_begin + tile * BLOCK_M;
        const int stage = STAGES == 2 ? tile & 1 : 0;
        if constexpr (STAGES == 2) {
            if (tile + 1 < n_tiles) load_q(tile + 1, (tile + 1) & 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            if (tile > 0) { load_q(tile, 0); cp_async_commit(); }
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        const T* Qs = sQ + stage * BLOCK_M * DP;
        const T* dOs = sdO + stage * BLOCK_M * DP;
        const float* lse2 = s_lse + stage * BLOCK_M;
        const float* Ds = s_D + stage * BLOCK_M;

        // -- Sᵀ = K_j Q_iᵀ and dPᵀ = V_j dO_iᵀ for this warpgroup's 64 keys (one group)
        float st[MS][4], dpt[MS][4];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            const int off = (kk & 3) * 16;
            MMA_S::ss(st, sw128_desc(sKw + (kk >> 2) * BLOCK_N * 64 + off, 0),
                      sw128_desc(Qs + (kk >> 2) * BLOCK_M * 64 + off, 0), kk > 0);
            MMA_S::ss(dpt, sw128_desc(sVw + (kk >> 2) * BLOCK_N * 64 + off, 0),
                      sw128_desc(dOs + (kk >> 2) * BLOCK_M * 64 + off, 0), kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_regs(st);
        wgmma_fence_regs(dpt);

        // -- Pᵀ = 2^(Sᵀ·scale·log2 e - lse·log2 e), dSᵀ = Pᵀ ∘ (dPᵀ - D); 0 where hidden
        const bool mask = j0 + BLOCK_N > S_len || i0 + BLOCK_M > T_len ||
                          (CAUSAL && j0 + BLOCK_N - 1 > i0 + diag);
#pragma unroll
        for (int n = 0; n < MS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int ql = n * 8 + 2 * t4 + (e & 1);          // query within the tile
                const int key = j0 + wkey + g + (e >> 1) * 8;
                const bool hidden = mask && (key >= S_len || i0 + ql >= T_len ||
                                             (CAUSAL && key > i0 + ql + diag));
                const float p = hidden ? 0.f : ex2_approx(fmaf(st[n][e], scale_log2, -lse2[ql]));
                st[n][e] = p;
                dpt[n][e] = p * (dpt[n][e] - Ds[ql]);
            }

        // -- Pᵀ, dSᵀ as A fragments (k = queries); dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i with
        //    dO and Q read N-major: 16 queries (2048 bytes) per k-step, panels BLOCK_M·128 apart
        unsigned pa[BLOCK_M / 16][4], sa[BLOCK_M / 16][4];
#pragma unroll
        for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
            c_to_a<T>(pa[kk], st[2 * kk], st[2 * kk + 1]);
            c_to_a<T>(sa[kk], dpt[2 * kk], dpt[2 * kk + 1]);
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
            MMA_O::template rs<1>(dV, pa[kk], sw128_desc(dOs + kk * 16 * 64, BLOCK_M * 128), 1);
            MMA_O::template rs<1>(dK, sa[kk], sw128_desc(Qs + kk * 16 * 64, BLOCK_M * 128), 1);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_regs(dV);
        wgmma_fence_regs(dK);
        wgmma_keep_regs(pa);
        wgmma_keep_regs(sa);
        __syncthreads();  // every warpgroup is done with this stage before it is refilled
    }
    cp_async_wait<0>();

    // -- dK_j = scale · Σ_i dS_ijᵀ Q_i, dV_j = Σ_i P_ijᵀ dO_i (zero if no query sees the tile)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = wkey + g + h * 8;
        if (r >= rows_kv) continue;
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            const int c = n * 8 + 2 * t4;
            if (c < d) {
                *reinterpret_cast<unsigned*>(dk + size_t(r) * d + c) =
                    pack2<T>(dK[n][2 * h] * scale, dK[n][2 * h + 1] * scale);
                *reinterpret_cast<unsigned*>(dv + size_t(r) * d + c) = pack2<T>(dV[n][2 * h], dV[n][2 * h + 1]);
            }
        }
    }
}

// Deterministic dQ: one Q/dO tile resident (warpgroup g owns queries 64g..), K/V streamed.
template <typename T, typename Acc, int DP, int BLOCK_M, int BLOCK_N, int NT, bool CAUSAL, int STAGES>
__device__ __forceinline__ void flash_bwd_dq_wgmma(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ D,
    T* __restrict__ dq,               // (batch, T_len, d)
    int T_len, int S_len, int d, float scale, float scale_log2, int smem_bytes) {
    constexpr int NW = NT / 32;
    constexpr int NS = BLOCK_N / 8;
    constexpr int NO = DP / 8;
    constexpr int kSmem = (2 * BLOCK_M + STAGES * 2 * BLOCK_N) * DP * int(sizeof(T)) + 1024;
    static_assert(NW % 4 == 0 && BLOCK_M == 16 * NW, "64 queries per warpgroup");
    static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 256 && DP % 64 == 0 && DP <= 256, "tile sizes");
    static_assert(STAGES == 1 || STAGES == 2, "1 or 2 stages");
    using MMA_S = Wgmma<BLOCK_N, T>;
    using MMA_O = Wgmma<DP, T>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    if (kSmem > smem_bytes) __trap();
    T* sQ = reinterpret_cast<T*>(smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023));
    T* sdO = sQ + BLOCK_M * DP;               // BLOCK_M × DP
    T* sK = sdO + BLOCK_M * DP;               // STAGES × BLOCK_N × DP
    T* sV = sK + STAGES * BLOCK_N * DP;       // STAGES × BLOCK_N × DP

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t4 = lane & 3;
    const int wg = warp / 4;
    const int i0 = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int b = blockIdx.y;
    const int rows_q = min(BLOCK_M, T_len - i0);
    const int wrow = warp * 16;
    q += (size_t(b) * T_len + i0) * d;
    dout += (size_t(b) * T_len + i0) * d;
    dq += (size_t(b) * T_len + i0) * d;
    lse += size_t(b) * T_len + i0;
    D += size_t(b) * T_len + i0;
    k += size_t(b) * S_len * d;
    v += size_t(b) * S_len * d;
    const int diag = S_len - T_len;
    const int kv_end = CAUSAL ? min(S_len, max(0, i0 + rows_q + diag)) : S_len;
    const int n_tiles = (kv_end + BLOCK_N - 1) / BLOCK_N;

    auto load_kv = [&](int tile, int stage) {
        const int j0 = tile * BLOCK_N, rows = min(BLOCK_N, S_len - j0);
        cp_async_tile_sw128<BLOCK_N, DP, NT>(sK + stage * BLOCK_N * DP, k + size_t(j0) * d, rows, d);
        cp_async_tile_sw128<BLOCK_N, DP, NT>(sV + stage * BLOCK_N * DP, v + size_t(j0) * d, rows, d);
    };
    cp_async_tile_sw128<BLOCK_M, DP, NT>(sQ, q, rows_q, d);
    cp_async_tile_sw128<BLOCK_M, DP, NT>(sdO, dout, rows_q, d);
    if (n_tiles > 0) load_kv(0, 0);
    cp_async_commit();

    float lse2[2], Dr[2], dQ[NO][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = wrow + g + h * 8;
        const float x = r < rows_q ? lse[r] : -Num<float>::inf();
        lse2[h] = x == -Num<float>::inf() ? Num<float>::inf() : x * float(kLog2e);
        Dr[h] = r < rows_q ? D[r] : 0.f;
    }
#pragma unroll
    for (int n = 0; n < NO; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dQ[n][e] = 0.f;
    const T* sQw = sQ + wg * 64 * 64;
    const T* sdOw = sdO + wg * 64 * 64;

    for (int tile = 0; tile < n_tiles; ++tile) {
        const int j0 = tile * BLOCK_N;
        const int stage = STAGES == 2 ? tile & 1 : 0;
        if constexpr (STAGES == 2) {
            if (tile + 1 < n_tiles) load_kv(tile + 1, (tile + 1) & 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            if (tile > 0) { load_kv(tile, 0); cp_async_commit(); }
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        const T* Ks = sK + stage * BLOCK_N * DP;
        const T* Vs = sV + stage * BLOCK_N * DP;

        // -- S = Q_i K_jᵀ, dP = dO_i V_jᵀ (one group)
        float s[NS][4], dp[NS][4];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            const int off = (kk & 3) * 16;
            MMA_S::ss(s, sw128_desc(sQw + (kk >> 2) * BLOCK_M * 64 + off, 0),
                      sw128_desc(Ks + (kk >> 2) * BLOCK_N * 64 + off, 0), kk > 0);
            MMA_S::ss(dp, sw128_desc(sdOw + (kk >> 2) * BLOCK_M * 64 + off, 0),
                      sw128_desc(Vs + (kk >> 2) * BLOCK_N * 64 + off, 0), kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_regs(s);
        wgmma_fence_regs(dp);

        // -- dS = P ∘ (dP - D), P = 2^(S·scale·log2 e - lse·log2 e); 0 where hidden
        const bool mask = j0 + BLOCK_N > S_len || (CAUSAL && j0 + BLOCK_N - 1 > i0 + diag);
#pragma unroll
        for (int n = 0; n < NS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int h = e >> 1;
                const int key = j0 + n * 8 + 2 * t4 + (e & 1);
                const int query = i0 + wrow + g + h * 8;
                const bool hidden = mask && (key >= S_len || (CAUSAL && key > query + diag));
                const float p = hidden ? 0.f : ex2_approx(fmaf(s[n][e], scale_log2, -lse2[h]));
                dp[n][e] = p * (dp[n][e] - Dr[h]);
            }

        // -- dS as A fragments (k = keys); dQ_i += dS_ij K_j with K read N-major
        unsigned sa[BLOCK_N / 16][4];
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) c_to_a<T>(sa[kk], dp[2 * kk], dp[2 * kk + 1]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk)
            MMA_O::template rs<1>(dQ, sa[kk], sw128_desc(Ks + kk * 16 * 64, BLOCK_N * 128), 1);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_regs(dQ);
        wgmma_keep_regs(sa);
        __syncthreads();
    }
    cp_async_wait<0>();
    __syncthreads();

    // -- dQ_i = scale · Σ_j dS_ij K_j, staged in this warp's own Q rows for 16-byte stores
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = wrow + g + h * 8;
#pragma unroll
        for (int n = 0; n < NO; ++n)
            *reinterpret_cast<unsigned*>(sQ + sw128<BLOCK_M>(r, n * 8 + 2 * t4)) =
                pack2<T>(dQ[n][2 * h] * scale, dQ[n][2 * h + 1] * scale);
    }
    __syncwarp();
    constexpr int CPR = DP / 8;
#pragma unroll
    for (int c = lane; c < 16 * CPR; c += 32) {
        const int r = wrow + c / CPR, col = (c % CPR) * 8;
        if (r < rows_q && col < d)
            *reinterpret_cast<uint4*>(dq + size_t(r) * d + col) =
                *reinterpret_cast<const uint4*>(sQ + sw128<BLOCK_M>(r, col));
    }
}

}  // namespace cuflash
