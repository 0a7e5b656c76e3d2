// cuflash: FlashAttention backward on tensor cores (float16 / bfloat16), mma.sync m16n8k16.
// The algorithm is flash_bwd.cu's (and cuflash/twin.py's); here every product is a tensor-core
// product and the score tiles never leave registers except dSᵀ for the dQ product.
//
//   bwd_dkdv_mma  one K/V tile resident (warp w owns keys 16w..16w+15), Q/dO tiles streamed
//                 through a cp.async ring: Sᵀ = K Qᵀ and dPᵀ = V dOᵀ in registers,
//                 Pᵀ = 2^(Sᵀ·scale·log2 e - lse·log2 e), dSᵀ = Pᵀ ∘ (dPᵀ - D),
//                 dV += Pᵀ dO and dK += dSᵀ Q from registers (C fragments reused as A);
//                 atomic mode: dSᵀ to shared memory, dQ_i += dS K_j, float atomics to dq_accum.
//   bwd_dq_mma    (deterministic mode) one Q tile resident (warp owns 16·MT queries), K/V tiles
//                 streamed: S, dP, dS in registers, dQ += dS K_j; fixed summation order.
// D = rowsum(dO ∘ O) comes from flash_bwd_preprocess (flash_bwd.cu).
//
// Versions (predictions and results in NOTES.md):
//   v1  as above; K and V fragments re-read from shared memory for each Q tile.
//   v2  Pᵀ and dSᵀ packed to 16-bit A fragments right after they are computed (float
//       accumulators die early); dSᵀ stored from the packed fragments.
#pragma once
#include "mma.cuh"
#include "flash_bwd.cu"

namespace cuflash {

template <typename T, typename Acc, int DP, int BLOCK_M, int BLOCK_N, int NT, bool CAUSAL, bool ATOMIC_DQ, int STAGES>
__device__ __forceinline__ void flash_bwd_dkdv_mma(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ dout,       // (batch, T_len, d)
    const float* __restrict__ lse,    // (batch, T_len), natural log
    const float* __restrict__ D,      // (batch, T_len)
    T* __restrict__ dk, T* __restrict__ dv,   // (batch, S_len, d)
    float* __restrict__ dq_accum,     // (batch, T_len, d), zeroed; used when ATOMIC_DQ
    int T_len, int S_len, int d, float scale, float scale_log2, int smem_bytes) {
    constexpr int NW = NT / 32;
    constexpr int MS = BLOCK_M / 8;     // 8-query n-tiles of Sᵀ
    constexpr int NO = DP / 8;          // 8-column n-tiles of dK, dV, dQ
    constexpr int LDS = DP + 8;         // row stride of Q, K, V, dO tiles
    constexpr int LDT = BLOCK_M + 8;    // row stride of the dSᵀ tile
    constexpr int QM = BLOCK_M / 16;    // dQ product: 16-query m-tiles ...
    constexpr int QC = DP / 32;         // ... times 32-column chunks of d, dealt to the warps
    constexpr int kSmem = (2 * BLOCK_N * LDS + STAGES * 2 * BLOCK_M * LDS + BLOCK_N * LDT) * int(sizeof(T))
                          + STAGES * 2 * BLOCK_M * int(sizeof(float));
    static_assert(BLOCK_N == 16 * NW, "one warp per 16 keys");
    static_assert(BLOCK_M % 16 == 0 && DP % 16 == 0, "tiles must be multiples of 16");
    static_assert(STAGES == 1 || STAGES == 2, "1 or 2 stages");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* sK = reinterpret_cast<T*>(smem_raw);       // BLOCK_N × LDS
    T* sV = sK + BLOCK_N * LDS;                   // BLOCK_N × LDS
    T* sQ = sV + BLOCK_N * LDS;                   // STAGES × BLOCK_M × LDS
    T* sdO = sQ + STAGES * BLOCK_M * LDS;         // STAGES × BLOCK_M × LDS
    T* sdSt = sdO + STAGES * BLOCK_M * LDS;       // BLOCK_N × LDT: dSᵀ (atomic mode)
    float* s_lse = reinterpret_cast<float*>(sdSt + BLOCK_N * LDT);  // STAGES × BLOCK_M: lse·log2 e
    float* s_D = s_lse + STAGES * BLOCK_M;                          // STAGES × BLOCK_M
    if (kSmem > smem_bytes) __trap();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t4 = lane & 3;
    const int j0 = blockIdx.x * BLOCK_N;          // first blocks see the most queries
    const int b = blockIdx.y;
    const int rows_kv = min(BLOCK_N, S_len - j0);
    const int diag = S_len - T_len;
    const int wkey = warp * 16;                   // this warp's first key in the tile
    q += size_t(b) * T_len * d;
    dout += size_t(b) * T_len * d;
    lse += size_t(b) * T_len;
    D += size_t(b) * T_len;
    dq_accum += size_t(b) * T_len * d;
    k += (size_t(b) * S_len + j0) * d;
    v += (size_t(b) * S_len + j0) * d;
    dk += (size_t(b) * S_len + j0) * d;
    dv += (size_t(b) * S_len + j0) * d;

    const int i_begin = CAUSAL ? (max(0, j0 - diag) / BLOCK_M) * BLOCK_M : 0;
    const int n_tiles = i_begin < T_len ? (T_len - i_begin + BLOCK_M - 1) / BLOCK_M : 0;

    auto load_q = [&](int tile, int stage) {
        const int i0 = i_begin + tile * BLOCK_M, rows = min(BLOCK_M, T_len - i0);
        cp_async_tile<BLOCK_M, DP, LDS, NT>(sQ + stage * BLOCK_M * LDS, q + size_t(i0) * d, rows, d);
        cp_async_tile<BLOCK_M, DP, LDS, NT>(sdO + stage * BLOCK_M * LDS, dout + size_t(i0) * d, rows, d);
        for (int r = threadIdx.x; r < BLOCK_M; r += NT) {
            const float x = r < rows ? lse[i0 + r] : -Num<float>::inf();
            s_lse[stage * BLOCK_M + r] = x == -Num<float>::inf() ? Num<float>::inf() : x * float(kLog2e);
            s_D[stage * BLOCK_M + r] = r < rows ? D[i0 + r] : 0.f;
        }
    };
    cp_async_tile<BLOCK_N, DP, LDS, NT>(sK, k, rows_kv, d);
    cp_async_tile<BLOCK_N, DP, LDS, NT>(sV, v, rows_kv, d);
    if (n_tiles > 0) load_q(0, 0);
    cp_async_commit();

    float dK[NO][4], dV[NO][4];   // rows wkey + g and wkey + g + 8
#pragma unroll
    for (int n = 0; n < NO; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dK[n][e] = dV[n][e] = 0.f;

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
        __syncthreads();
        const T* Qs = sQ + stage * BLOCK_M * LDS;
        const T* dOs = sdO + stage * BLOCK_M * LDS;
        const float* lse2 = s_lse + stage * BLOCK_M;
        const float* Ds = s_D + stage * BLOCK_M;

        // -- Sᵀ = K_j Q_iᵀ and dPᵀ = V_j dO_iᵀ for this warp's 16 keys
        float st[MS][4], dpt[MS][4];
#pragma unroll
        for (int n = 0; n < MS; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            unsigned ak[4], av[4];
            ldmatrix_x4(ak, frag_a_addr<LDS>(sK, wkey, kk * 16, lane));
            ldmatrix_x4(av, frag_a_addr<LDS>(sV, wkey, kk * 16, lane));
#pragma unroll
            for (int nn = 0; nn < BLOCK_M / 16; ++nn) {
                unsigned bq[4], bo[4];
                ldmatrix_x4(bq, frag_b_addr<LDS>(Qs, nn * 16, kk * 16, lane));
                ldmatrix_x4(bo, frag_b_addr<LDS>(dOs, nn * 16, kk * 16, lane));
                mma16816<T>(st[2 * nn], ak, bq[0], bq[1]);
                mma16816<T>(st[2 * nn + 1], ak, bq[2], bq[3]);
                mma16816<T>(dpt[2 * nn], av, bo[0], bo[1]);
                mma16816<T>(dpt[2 * nn + 1], av, bo[2], bo[3]);
            }
        }

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
                const float p = hidden ? 0.f : exp2f(fmaf(st[n][e], scale_log2, -lse2[ql]));
                st[n][e] = p;
                dpt[n][e] = p * (dpt[n][e] - Ds[ql]);
            }

        // -- Pᵀ and dSᵀ rounded to T and packed as A fragments now (k = queries), so the float
        //    accumulators die before the next products
        unsigned pa[BLOCK_M / 16][4], sa[BLOCK_M / 16][4];
#pragma unroll
        for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
            c_to_a<T>(pa[kk], st[2 * kk], st[2 * kk + 1]);
            c_to_a<T>(sa[kk], dpt[2 * kk], dpt[2 * kk + 1]);
        }
        if constexpr (ATOMIC_DQ) {
            // dSᵀ to shared memory for the dQ product (A fragment regs: rows g / g+8, queries
            // 16kk + 2t and 16kk + 8 + 2t)
#pragma unroll
            for (int kk = 0; kk < BLOCK_M / 16; ++kk)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    *reinterpret_cast<unsigned*>(sdSt + (wkey + g + (r & 1) * 8) * LDT + kk * 16 +
                                                 (r >> 1) * 8 + 2 * t4) = sa[kk][r];
        }

        // -- dV_j += P_ijᵀ dO_i, dK_j += dS_ijᵀ Q_i (k = queries)
#pragma unroll
        for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
#pragma unroll
            for (int dd = 0; dd < DP / 16; ++dd) {
                unsigned bo[4], bq[4];
                ldmatrix_x4_trans(bo, frag_a_addr<LDS>(dOs, kk * 16, dd * 16, lane));
                ldmatrix_x4_trans(bq, frag_a_addr<LDS>(Qs, kk * 16, dd * 16, lane));
                mma16816<T>(dV[2 * dd], pa[kk], bo[0], bo[1]);
                mma16816<T>(dV[2 * dd + 1], pa[kk], bo[2], bo[3]);
                mma16816<T>(dK[2 * dd], sa[kk], bq[0], bq[1]);
                mma16816<T>(dK[2 * dd + 1], sa[kk], bq[2], bq[3]);
            }
        }

        if constexpr (ATOMIC_DQ) {
            // -- dQ_i += dS_ij K_j · scale, summed over key tiles with float atomics
            __syncthreads();
            // work items: (16-query m-tile, 32-column chunk of d), dealt round-robin to warps
            for (int item = warp; item < QM * QC; item += NW) {
                const int q0 = (item / QC) * 16, c0 = (item % QC) * 32;
                float dq[4][4];
#pragma unroll
                for (int n = 0; n < 4; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) dq[n][e] = 0.f;
#pragma unroll
                for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
                    unsigned a[4];   // dS (rows = queries, k = keys) from the stored dSᵀ
                    ldmatrix_x4_trans(a, frag_b_addr<LDT>(sdSt, kk * 16, q0, lane));
#pragma unroll
                    for (int dd = 0; dd < 2; ++dd) {
                        unsigned bk[4];
                        ldmatrix_x4_trans(bk, frag_a_addr<LDS>(sK, kk * 16, c0 + dd * 16, lane));
                        mma16816<T>(dq[2 * dd], a, bk[0], bk[1]);
                        mma16816<T>(dq[2 * dd + 1], a, bk[2], bk[3]);
                    }
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = i0 + q0 + g + h * 8;
                    if (r >= T_len) continue;
#pragma unroll
                    for (int n = 0; n < 4; ++n) {
                        const int c = c0 + n * 8 + 2 * t4;
                        if (c < d) {
                            atomicAdd(dq_accum + size_t(r) * d + c, dq[n][2 * h] * scale);
                            atomicAdd(dq_accum + size_t(r) * d + c + 1, dq[n][2 * h + 1] * scale);
                        }
                    }
                }
            }
        }
        __syncthreads();  // all warps are done with this stage (and dSᵀ) before they are refilled
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

// Deterministic dQ: one Q tile resident (warp owns 16·MT query rows), K/V tiles streamed.
template <typename T, typename Acc, int DP, int BLOCK_M, int BLOCK_N, int NT, bool CAUSAL, int STAGES>
__device__ __forceinline__ void flash_bwd_dq_mma(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ D,
    T* __restrict__ dq,               // (batch, T_len, d)
    int T_len, int S_len, int d, float scale, float scale_log2, int smem_bytes) {
    constexpr int NW = NT / 32;
    constexpr int MT = BLOCK_M / (16 * NW);
    constexpr int NS = BLOCK_N / 8;
    constexpr int NO = DP / 8;
    constexpr int LDS = DP + 8;
    constexpr int kSmem = (2 * BLOCK_M + STAGES * 2 * BLOCK_N) * LDS * int(sizeof(T));
    static_assert(MT >= 1 && BLOCK_M == 16 * MT * NW, "BLOCK_M must be 16·MT·warps");
    static_assert(BLOCK_N % 16 == 0 && DP % 16 == 0, "tiles must be multiples of 16");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* sQ = reinterpret_cast<T*>(smem_raw);   // BLOCK_M × LDS, later this warp's dQ rows
    T* sdO = sQ + BLOCK_M * LDS;              // BLOCK_M × LDS
    T* sK = sdO + BLOCK_M * LDS;              // STAGES × BLOCK_N × LDS
    T* sV = sK + STAGES * BLOCK_N * LDS;      // STAGES × BLOCK_N × LDS
    if (kSmem > smem_bytes) __trap();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t4 = lane & 3;
    const int i0 = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int b = blockIdx.y;
    const int rows_q = min(BLOCK_M, T_len - i0);
    const int wrow = warp * 16 * MT;
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
        cp_async_tile<BLOCK_N, DP, LDS, NT>(sK + stage * BLOCK_N * LDS, k + size_t(j0) * d, rows, d);
        cp_async_tile<BLOCK_N, DP, LDS, NT>(sV + stage * BLOCK_N * LDS, v + size_t(j0) * d, rows, d);
    };
    cp_async_tile<BLOCK_M, DP, LDS, NT>(sQ, q, rows_q, d);
    cp_async_tile<BLOCK_M, DP, LDS, NT>(sdO, dout, rows_q, d);
    if (n_tiles > 0) load_kv(0, 0);
    cp_async_commit();

    float lse2[MT][2], Dr[MT][2], dQ[MT][NO][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = wrow + mt * 16 + g + h * 8;
            const float x = r < rows_q ? lse[r] : -Num<float>::inf();
            lse2[mt][h] = x == -Num<float>::inf() ? Num<float>::inf() : x * float(kLog2e);
            Dr[mt][h] = r < rows_q ? D[r] : 0.f;
        }
#pragma unroll
        for (int n = 0; n < NO; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) dQ[mt][n][e] = 0.f;
    }

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
        __syncthreads();
        const T* Ks = sK + stage * BLOCK_N * LDS;
        const T* Vs = sV + stage * BLOCK_N * LDS;

        // -- S = Q_i K_jᵀ, dP = dO_i V_jᵀ
        float s[MT][NS][4], dp[MT][NS][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NS; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][n][e] = dp[mt][n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            unsigned aq[MT][4], ao[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                ldmatrix_x4(aq[mt], frag_a_addr<LDS>(sQ, wrow + mt * 16, kk * 16, lane));
                ldmatrix_x4(ao[mt], frag_a_addr<LDS>(sdO, wrow + mt * 16, kk * 16, lane));
            }
#pragma unroll
            for (int nn = 0; nn < BLOCK_N / 16; ++nn) {
                unsigned bk[4], bv[4];
                ldmatrix_x4(bk, frag_b_addr<LDS>(Ks, nn * 16, kk * 16, lane));
                ldmatrix_x4(bv, frag_b_addr<LDS>(Vs, nn * 16, kk * 16, lane));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma16816<T>(s[mt][2 * nn], aq[mt], bk[0], bk[1]);
                    mma16816<T>(s[mt][2 * nn + 1], aq[mt], bk[2], bk[3]);
                    mma16816<T>(dp[mt][2 * nn], ao[mt], bv[0], bv[1]);
                    mma16816<T>(dp[mt][2 * nn + 1], ao[mt], bv[2], bv[3]);
                }
            }
        }

        // -- dS = P ∘ (dP - D), P = 2^(S·scale·log2 e - lse·log2 e); 0 where hidden
        const bool mask = j0 + BLOCK_N > S_len || (CAUSAL && j0 + BLOCK_N - 1 > i0 + diag);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int n = 0; n < NS; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int h = e >> 1;
                    const int key = j0 + n * 8 + 2 * t4 + (e & 1);
                    const int query = i0 + wrow + mt * 16 + g + h * 8;
                    const bool hidden = mask && (key >= S_len || (CAUSAL && key > query + diag));
                    const float p = hidden ? 0.f : exp2f(fmaf(s[mt][n][e], scale_log2, -lse2[mt][h]));
                    dp[mt][n][e] = p * (dp[mt][n][e] - Dr[mt][h]);
                }

        // -- dS rounded to T and packed as A fragments (k = keys); dQ_i += dS_ij K_j
        unsigned sa[MT][BLOCK_N / 16][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kk = 0; kk < BLOCK_N / 16; ++kk) c_to_a<T>(sa[mt][kk], dp[mt][2 * kk], dp[mt][2 * kk + 1]);
#pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
#pragma unroll
            for (int dd = 0; dd < DP / 16; ++dd) {
                unsigned bk[4];
                ldmatrix_x4_trans(bk, frag_a_addr<LDS>(Ks, kk * 16, dd * 16, lane));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma16816<T>(dQ[mt][2 * dd], sa[mt][kk], bk[0], bk[1]);
                    mma16816<T>(dQ[mt][2 * dd + 1], sa[mt][kk], bk[2], bk[3]);
                }
            }
        }
        __syncthreads();
    }
    cp_async_wait<0>();
    __syncthreads();

    // -- dQ_i = scale · Σ_j dS_ij K_j, staged in this warp's own Q rows for 16-byte stores
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = wrow + mt * 16 + g + h * 8;
#pragma unroll
            for (int n = 0; n < NO; ++n)
                *reinterpret_cast<unsigned*>(sQ + r * LDS + n * 8 + 2 * t4) =
                    pack2<T>(dQ[mt][n][2 * h] * scale, dQ[mt][n][2 * h + 1] * scale);
        }
    __syncwarp();
    constexpr int CPR = DP / 8;
    for (int c = lane; c < 16 * MT * CPR; c += 32) {
        const int r = wrow + c / CPR, col = (c % CPR) * 8;
        if (r < rows_q && col < d)
            *reinterpret_cast<uint4*>(dq + size_t(r) * d + col) = *reinterpret_cast<const uint4*>(sQ + r * LDS + col);
    }
}

}  // namespace cuflash
