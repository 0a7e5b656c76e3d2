// cuflash: FlashAttention forward on CUDA cores (every dtype, every head_dim multiple of 8).
// Read beside cuflash/twin.py (forward) and kernels_cu/flash_bwd.cu: same names, same loops.
//
// Versions (measured on the H200; details and predictions in NOTES.md):
//   v1  one Q tile per block, K/V tiles loaded (converted to Acc) into shared memory, S in
//       registers (DotTile), P through shared memory, O in registers (OuterAcc).
//
// Grid: (ceil(T / BLOCK_M), batch). Block: NT threads. Dynamic shared memory: smem_bytes, laid
// out as below and budgeted by cuflash/gpu/plan.py (KernelSpec.smem_bytes).
#pragma once
#include "simt_tiles.cuh"

namespace cuflash {

// T: storage type of q, k, v, out. Acc: float (double for float64 inputs). DP: head dim rounded
// up to a multiple of 32 (columns d..DP are zero). CAUSAL: query i sees key j iff j <= i + S - T.
template <typename T, typename Acc, int DP, int BLOCK_M, int BLOCK_N, int NT, bool CAUSAL>
__device__ __forceinline__ void flash_fwd_simt(
    const T* __restrict__ q,    // (batch, T_len, d)
    const T* __restrict__ k,    // (batch, S_len, d)
    const T* __restrict__ v,    // (batch, S_len, d)
    T* __restrict__ out,        // (batch, T_len, d)
    Acc* __restrict__ lse,      // (batch, T_len), natural log
    int T_len, int S_len, int d, Acc scale_log2, int smem_bytes) {
    constexpr int VEC = 16 / sizeof(Acc);
    constexpr int LD = DP + VEC;          // row stride of the Q, K, V tiles
    constexpr int LDP = BLOCK_N + VEC;    // row stride of the P tile
    constexpr int kSmem = (BLOCK_M * LD + 2 * BLOCK_N * LD + BLOCK_M * LDP + 2 * BLOCK_M) * sizeof(Acc);
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Acc* sQ = reinterpret_cast<Acc*>(smem_raw);   // BLOCK_M × LD
    Acc* sK = sQ + BLOCK_M * LD;                  // BLOCK_N × LD
    Acc* sV = sK + BLOCK_N * LD;                  // BLOCK_N × LD
    Acc* sP = sV + BLOCK_N * LD;                  // BLOCK_M × LDP
    Acc* s_alpha = sP + BLOCK_M * LDP;            // BLOCK_M: rescale of each row this step
    Acc* s_l = s_alpha + BLOCK_M;                 // BLOCK_M: final row sums
    if (kSmem > smem_bytes) __trap();             // host and kernel disagree on the layout

    // Heaviest causal tiles (last query rows) first.
    const int i0 = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int b = blockIdx.y;
    const int rows_q = min(BLOCK_M, T_len - i0);
    q += (size_t(b) * T_len + i0) * d;
    out += (size_t(b) * T_len + i0) * d;
    lse += size_t(b) * T_len + i0;
    k += size_t(b) * S_len * d;
    v += size_t(b) * S_len * d;
    const int diag = S_len - T_len;  // query i sees key j iff j <= i + diag

    zero_smem<NT>(smem_raw, kSmem);
    __syncthreads();
    load_tile<T, Acc, BLOCK_M, LD, NT>(sQ, q, rows_q, d);

    DotTile<Acc, BLOCK_M, BLOCK_N, DP, NT> S;   // S = Q Kᵀ of one tile pair
    OuterAcc<Acc, BLOCK_M, DP, NT> O;           // unnormalized output
    O.zero();
    Acc m[S.TR], l[S.TR];                       // running max (log2 units) and sum per row
#pragma unroll
    for (int i = 0; i < S.TR; ++i) { m[i] = -Num<Acc>::inf(); l[i] = Acc(0); }

    const int kv_end = CAUSAL ? min(S_len, max(0, i0 + rows_q + diag)) : S_len;
    for (int j0 = 0; j0 < kv_end; j0 += BLOCK_N) {
        __syncthreads();  // the previous step is done reading sK, sV, sP
        load_tile<T, Acc, BLOCK_N, LD, NT>(sK, k + size_t(j0) * d, min(BLOCK_N, S_len - j0), d);
        load_tile<T, Acc, BLOCK_N, LD, NT>(sV, v + size_t(j0) * d, min(BLOCK_N, S_len - j0), d);
        __syncthreads();

        // -- S_ij = Q_i K_jᵀ · scale · log2(e); -inf past the sequence end and above the diagonal
        S.template compute<LD, LD>(sQ, sK);
        const bool mask = j0 + BLOCK_N > S_len || (CAUSAL && j0 + BLOCK_N - 1 > i0 + diag);
#pragma unroll
        for (int i = 0; i < S.TR; ++i) {
            Acc row_max = -Num<Acc>::inf();
#pragma unroll
            for (int j = 0; j < S.TN; ++j) {
                Acc s = S.c[i][j] * scale_log2;
                const int key = j0 + S.col(j);
                if (mask && (key >= S_len || (CAUSAL && key > i0 + S.row(i) + diag))) s = -Num<Acc>::inf();
                S.c[i][j] = s;
                row_max = Num<Acc>::max(row_max, s);
            }
            // -- update m and l; a row that has seen no key yet keeps m = -inf and uses 0 instead
            const Acc m_new = Num<Acc>::max(m[i], S.row_max(row_max));
            const Acc m_safe = m_new == -Num<Acc>::inf() ? Acc(0) : m_new;
            const Acc alpha = Num<Acc>::exp2(m[i] - m_safe);
            Acc row_sum = Acc(0);
#pragma unroll
            for (int j = 0; j < S.TN; ++j) {
                const Acc p = Num<Acc>::exp2(S.c[i][j] - m_safe);  // P_ij
                row_sum += p;
                sP[S.row(i) * LDP + S.col(j)] = round_to<T>(p);
            }
            l[i] = alpha * l[i] + S.row_sum(row_sum);
            m[i] = m_new;
            if (S.tx == 0) s_alpha[S.row(i)] = alpha;
        }
        __syncthreads();

        // -- O_i = diag(alpha) O_i + P_ij V_j
        O.scale_rows(s_alpha);
        O.template accumulate<false, LDP, LD, BLOCK_N>(sP, sV);
    }

    // -- O_i = O_i / l, lse_i = (m + log2 l) · ln 2; rows that saw no key: O = 0, lse = -inf
    if (S.tx == 0) {
#pragma unroll
        for (int i = 0; i < S.TR; ++i) {
            s_l[S.row(i)] = l[i];
            if (S.row(i) < rows_q)
                lse[S.row(i)] = l[i] == Acc(0) ? -Num<Acc>::inf()
                                               : (m[i] + Num<Acc>::log2(l[i])) * Acc(kLn2);
        }
    }
    __syncthreads();
    O.store(out, rows_q, d, [&](int r) { return s_l[r] == Acc(0) ? Acc(0) : Acc(1) / s_l[r]; });
}

}  // namespace cuflash
