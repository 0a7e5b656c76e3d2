// cuflash: FlashAttention backward on CUDA cores (every dtype, every head_dim multiple of 8).
// Read beside cuflash/twin.py (backward) and kernels_cu/flash_fwd.cu: same names, same loops.
// P is never stored: each tile pair recomputes S = Q Kᵀ and P = 2^(S·scale·log2 e - lse·log2 e).
//
// Three kernels, launched in this order:
//   bwd_preprocess  D_i = rowsum(dO_i ∘ O_i)                        grid (ceil(batch·T / 8))
//   bwd_dkdv        one K/V tile resident, Q/dO tiles streamed:
//                   dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i (and, in atomic mode, dQ_i += dS_ij K_j
//                   with float atomics into dq_accum)             grid (ceil(S / BLOCK_N), batch)
//   bwd_dq          (deterministic mode) one Q tile resident, K/V tiles streamed:
//                   dQ_i = Σ_j dS_ij K_j in a fixed order           grid (ceil(T / BLOCK_M), batch)
// with dS_ij = P_ij ∘ (dP_ij - D_i), dP_ij = dO_i V_jᵀ.
//
// Versions (details and predictions in NOTES.md):
//   v1  SIMT tiles as in flash_fwd.cu v1; Pᵀ and dSᵀ pass through shared memory.
#pragma once
#include "simt_tiles.cuh"

namespace cuflash {

// D_i = Σ_c dO[i][c] · O[i][c], one warp per row, in Acc. Shared by the SIMT and mma backward.
template <typename T, typename Acc>
__device__ __forceinline__ void flash_bwd_preprocess(const T* __restrict__ out,
                                                     const T* __restrict__ dout,
                                                     Acc* __restrict__ D, long long rows, int d) {
    constexpr int E = 16 / sizeof(T);
    const long long r = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    Acc acc = Acc(0);
    for (int c = lane * E; c < d; c += 32 * E) {
        Acc o[E], g[E];
        load16<T, Acc>(out + r * d + c, o);
        load16<T, Acc>(dout + r * d + c, g);
#pragma unroll
        for (int e = 0; e < E; ++e) acc += o[e] * g[e];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) D[r] = acc;
}

// One K/V tile (BLOCK_N keys) per block; rows of the score tile are keys: Sᵀ = K Qᵀ.
template <typename T, typename Acc, int DP, int BLOCK_M, int BLOCK_N, int NT, bool CAUSAL, bool ATOMIC_DQ>
__device__ __forceinline__ void flash_bwd_dkdv_simt(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ dout,      // (batch, T_len, d)
    const Acc* __restrict__ lse,     // (batch, T_len), natural log, from the forward
    const Acc* __restrict__ D,       // (batch, T_len), from bwd_preprocess
    T* __restrict__ dk, T* __restrict__ dv,   // (batch, S_len, d)
    Acc* __restrict__ dq_accum,      // (batch, T_len, d), zeroed; used when ATOMIC_DQ
    int T_len, int S_len, int d, Acc scale, Acc scale_log2, int smem_bytes) {
    constexpr int VEC = 16 / sizeof(Acc);
    constexpr int LD = DP + VEC;          // row stride of the Q, K, V, dO tiles
    constexpr int LDQ = BLOCK_M + VEC;    // row stride of the Pᵀ and dSᵀ tiles
    constexpr int kSmem = (2 * BLOCK_N * LD + 2 * BLOCK_M * LD + 2 * BLOCK_N * LDQ + 2 * BLOCK_M) * sizeof(Acc);
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Acc* sK = reinterpret_cast<Acc*>(smem_raw);  // BLOCK_N × LD
    Acc* sV = sK + BLOCK_N * LD;                 // BLOCK_N × LD
    Acc* sQ = sV + BLOCK_N * LD;                 // BLOCK_M × LD
    Acc* sdO = sQ + BLOCK_M * LD;                // BLOCK_M × LD
    Acc* sPt = sdO + BLOCK_M * LD;               // BLOCK_N × LDQ: Pᵀ of one tile pair
    Acc* sdSt = sPt + BLOCK_N * LDQ;             // BLOCK_N × LDQ: dSᵀ
    Acc* s_lse = sdSt + BLOCK_N * LDQ;           // BLOCK_M: lse·log2 e (+inf: row saw no key)
    Acc* s_D = s_lse + BLOCK_M;                  // BLOCK_M
    if (kSmem > smem_bytes) __trap();

    const int j0 = blockIdx.x * BLOCK_N;         // first blocks see the most queries
    const int b = blockIdx.y;
    const int rows_kv = min(BLOCK_N, S_len - j0);
    const int diag = S_len - T_len;              // query i sees key j iff j <= i + diag
    q += size_t(b) * T_len * d;
    dout += size_t(b) * T_len * d;
    lse += size_t(b) * T_len;
    D += size_t(b) * T_len;
    dq_accum += size_t(b) * T_len * d;
    k += (size_t(b) * S_len + j0) * d;
    v += (size_t(b) * S_len + j0) * d;
    dk += (size_t(b) * S_len + j0) * d;
    dv += (size_t(b) * S_len + j0) * d;

    zero_smem<NT>(smem_raw, kSmem);
    __syncthreads();
    load_tile<T, Acc, BLOCK_N, LD, NT>(sK, k, rows_kv, d);
    load_tile<T, Acc, BLOCK_N, LD, NT>(sV, v, rows_kv, d);

    DotTile<Acc, BLOCK_N, BLOCK_M, DP, NT> St, dPt;  // Sᵀ = K Qᵀ, dPᵀ = V dOᵀ
    OuterAcc<Acc, BLOCK_N, DP, NT> dK, dV;
    dK.zero();
    dV.zero();

    // First query tile (on the block_m grid) with a row that sees key j0.
    const int i_begin = CAUSAL ? (max(0, j0 - diag) / BLOCK_M) * BLOCK_M : 0;
    for (int i0 = i_begin; i0 < T_len; i0 += BLOCK_M) {
        const int rows_q = min(BLOCK_M, T_len - i0);
        __syncthreads();  // the previous step is done reading sQ, sdO, sPt, sdSt, s_lse, s_D
        load_tile<T, Acc, BLOCK_M, LD, NT>(sQ, q + size_t(i0) * d, rows_q, d);
        load_tile<T, Acc, BLOCK_M, LD, NT>(sdO, dout + size_t(i0) * d, rows_q, d);
        load_rows<Acc, BLOCK_M, NT>(s_lse, rows_q, Num<Acc>::inf(), [&](int r) {
            const Acc x = lse[i0 + r];
            return x == -Num<Acc>::inf() ? Num<Acc>::inf() : x * Acc(kLog2e);
        });
        load_rows<Acc, BLOCK_M, NT>(s_D, rows_q, Acc(0), [&](int r) { return D[i0 + r]; });
        __syncthreads();

        // -- recompute Sᵀ = K_j Q_iᵀ and dPᵀ = V_j dO_iᵀ
        St.template compute<LD, LD>(sK, sQ);
        dPt.template compute<LD, LD>(sV, sdO);
        // -- Pᵀ = 2^(Sᵀ·scale·log2 e - lse·log2 e), dSᵀ = Pᵀ ∘ (dPᵀ - D); 0 where masked
        const bool mask = j0 + BLOCK_N > S_len || i0 + BLOCK_M > T_len ||
                          (CAUSAL && j0 + BLOCK_N - 1 > i0 + diag);
#pragma unroll
        for (int i = 0; i < St.TR; ++i) {
#pragma unroll
            for (int j = 0; j < St.TN; ++j) {
                const int key = j0 + St.row(i), query = i0 + St.col(j);
                const bool hidden = mask && (key >= S_len || query >= T_len ||
                                             (CAUSAL && key > query + diag));
                const Acc p = hidden ? Acc(0)
                                     : Num<Acc>::exp2(St.c[i][j] * scale_log2 - s_lse[St.col(j)]);
                const Acc ds = p * (dPt.c[i][j] - s_D[St.col(j)]);
                sPt[St.row(i) * LDQ + St.col(j)] = round_to<T>(p);
                sdSt[St.row(i) * LDQ + St.col(j)] = round_to<T>(ds);
            }
        }
        __syncthreads();

        // -- dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i
        dV.template accumulate<false, LDQ, LD, BLOCK_M>(sPt, sdO);
        dK.template accumulate<false, LDQ, LD, BLOCK_M>(sdSt, sQ);
        if constexpr (ATOMIC_DQ) {
            // -- dQ_i += dS_ij K_j · scale, summed over key tiles by atomics
            OuterAcc<Acc, BLOCK_M, DP, NT> dQ;
            dQ.zero();
            dQ.template accumulate<true, LDQ, LD, BLOCK_N>(sdSt, sK);
            dQ.atomic_add(dq_accum + size_t(i0) * d, rows_q, d, scale);
        }
    }
    // -- dK_j = scale · Σ_i dS_ijᵀ Q_i; dV_j = Σ_i P_ijᵀ dO_i (zero if no query sees the tile)
    dK.store(dk, rows_kv, d, [&](int) { return scale; });
    dV.store(dv, rows_kv, d, [&](int) { return Acc(1); });
}

// Deterministic dQ: one Q tile per block, K/V tiles streamed in order, as the forward.
template <typename T, typename Acc, int DP, int BLOCK_M, int BLOCK_N, int NT, bool CAUSAL>
__device__ __forceinline__ void flash_bwd_dq_simt(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ dout, const Acc* __restrict__ lse, const Acc* __restrict__ D,
    T* __restrict__ dq,              // (batch, T_len, d)
    int T_len, int S_len, int d, Acc scale, Acc scale_log2, int smem_bytes) {
    constexpr int VEC = 16 / sizeof(Acc);
    constexpr int LD = DP + VEC;
    constexpr int LDP = BLOCK_N + VEC;
    constexpr int kSmem = (2 * BLOCK_M * LD + 2 * BLOCK_N * LD + BLOCK_M * LDP + 2 * BLOCK_M) * sizeof(Acc);
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Acc* sQ = reinterpret_cast<Acc*>(smem_raw);  // BLOCK_M × LD
    Acc* sdO = sQ + BLOCK_M * LD;                // BLOCK_M × LD
    Acc* sK = sdO + BLOCK_M * LD;                // BLOCK_N × LD
    Acc* sV = sK + BLOCK_N * LD;                 // BLOCK_N × LD
    Acc* sdS = sV + BLOCK_N * LD;                // BLOCK_M × LDP
    Acc* s_lse = sdS + BLOCK_M * LDP;            // BLOCK_M
    Acc* s_D = s_lse + BLOCK_M;                  // BLOCK_M
    if (kSmem > smem_bytes) __trap();

    const int i0 = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int b = blockIdx.y;
    const int rows_q = min(BLOCK_M, T_len - i0);
    const int diag = S_len - T_len;
    q += (size_t(b) * T_len + i0) * d;
    dout += (size_t(b) * T_len + i0) * d;
    dq += (size_t(b) * T_len + i0) * d;
    lse += size_t(b) * T_len + i0;
    D += size_t(b) * T_len + i0;
    k += size_t(b) * S_len * d;
    v += size_t(b) * S_len * d;

    zero_smem<NT>(smem_raw, kSmem);
    __syncthreads();
    load_tile<T, Acc, BLOCK_M, LD, NT>(sQ, q, rows_q, d);
    load_tile<T, Acc, BLOCK_M, LD, NT>(sdO, dout, rows_q, d);
    load_rows<Acc, BLOCK_M, NT>(s_lse, rows_q, Num<Acc>::inf(), [&](int r) {
        const Acc x = lse[r];
        return x == -Num<Acc>::inf() ? Num<Acc>::inf() : x * Acc(kLog2e);
    });
    load_rows<Acc, BLOCK_M, NT>(s_D, rows_q, Acc(0), [&](int r) { return D[r]; });

    DotTile<Acc, BLOCK_M, BLOCK_N, DP, NT> S, dP;
    OuterAcc<Acc, BLOCK_M, DP, NT> dQ;
    dQ.zero();
    const int kv_end = CAUSAL ? min(S_len, max(0, i0 + rows_q + diag)) : S_len;
    for (int j0 = 0; j0 < kv_end; j0 += BLOCK_N) {
        __syncthreads();
        load_tile<T, Acc, BLOCK_N, LD, NT>(sK, k + size_t(j0) * d, min(BLOCK_N, S_len - j0), d);
        load_tile<T, Acc, BLOCK_N, LD, NT>(sV, v + size_t(j0) * d, min(BLOCK_N, S_len - j0), d);
        __syncthreads();

        // -- recompute S = Q_i K_jᵀ, dP = dO_i V_jᵀ, then dS = P ∘ (dP - D)
        S.template compute<LD, LD>(sQ, sK);
        dP.template compute<LD, LD>(sdO, sV);
        const bool mask = j0 + BLOCK_N > S_len || (CAUSAL && j0 + BLOCK_N - 1 > i0 + diag);
#pragma unroll
        for (int i = 0; i < S.TR; ++i) {
#pragma unroll
            for (int j = 0; j < S.TN; ++j) {
                const int key = j0 + S.col(j);
                const bool hidden = mask && (key >= S_len || (CAUSAL && key > i0 + S.row(i) + diag));
                const Acc p = hidden ? Acc(0)
                                     : Num<Acc>::exp2(S.c[i][j] * scale_log2 - s_lse[S.row(i)]);
                sdS[S.row(i) * LDP + S.col(j)] = round_to<T>(p * (dP.c[i][j] - s_D[S.row(i)]));
            }
        }
        __syncthreads();
        // -- dQ_i += dS_ij K_j
        dQ.template accumulate<false, LDP, LD, BLOCK_N>(sdS, sK);
    }
    dQ.store(dq, rows_q, d, [&](int) { return scale; });
}

}  // namespace cuflash
