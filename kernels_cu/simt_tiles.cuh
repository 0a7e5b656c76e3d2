// cuflash: tile operations of the CUDA-core (SIMT) kernels, so that flash_fwd.cu and
// flash_bwd.cu read as the algorithm. Every tile lives in shared memory as Acc (float, or double
// for float64 inputs), rows padded by one 16-byte vector so that consecutive rows start in
// different banks. The thread mappings here are mirrored by cuflash/gpu/plan.py (validity checks).
#pragma once
#include "common.cuh"

namespace cuflash {

// Load rows [0, rows_valid) of a ROWS × d tile of T (global, row stride ld) into shared memory as
// Acc (row stride LD). Rows past rows_valid become 0: finite, so 0·x never makes a NaN, and a
// key row of zeros is masked anyway. Columns d..LD-1 are left alone (zeroed once at kernel start).
// row_ptr(r): where row r starts (load_tile: g + r·ld; a KV cache's appended keys: elsewhere).
template <typename T, typename Acc, int ROWS, int LD, int NT, class RowPtr>
__device__ __forceinline__ void load_tile_rows(Acc* s, RowPtr&& row_ptr, int rows_valid, int d) {
    constexpr int E = 16 / sizeof(T);  // elements per 16-byte load; d % 8 == 0, so d % E == 0
    const int chunks = d / E;
    for (int c = threadIdx.x; c < ROWS * chunks; c += NT) {
        const int r = c / chunks;
        const int col = (c - r * chunks) * E;
        Acc vals[E];
        if (r < rows_valid) {
            load16<T, Acc>(row_ptr(r) + col, vals);
        } else {
#pragma unroll
            for (int e = 0; e < E; ++e) vals[e] = Acc(0);
        }
#pragma unroll
        for (int e = 0; e < E; ++e) s[r * LD + col + e] = vals[e];
    }
}

template <typename T, typename Acc, int ROWS, int LD, int NT>
__device__ __forceinline__ void load_tile(Acc* s, const T* g, int rows_valid, int d, int ld) {
    load_tile_rows<T, Acc, ROWS, LD, NT>(s, [&](int r) { return g + size_t(r) * ld; }, rows_valid,
                                         d);
}

// The CUDA-core kernels' tile loader (pipeline.cuh, stage_kv / stage_q): load_tile, converting to
// Acc as it loads.
template <typename Acc, int LD, int NT>
struct SimtTiles {
    // Whether a thread's chunks of a tile follow one stepped pointer (Chunks)
    template <int ROWS>
    static constexpr bool kStepped = false;
    template <int ROWS, typename T>
    static __device__ __forceinline__ const T* thread_src(const T* g, int) { return g; }
    template <int ROWS, typename T>
    static __device__ __forceinline__ void load_from(Acc* s, const T* g, const T*, int rows, int d,
                                                     int ld) {
        load_tile<T, Acc, ROWS, LD, NT>(s, g, rows, d, ld);
    }
    // Rows from row_ptr(r) (pipeline.cuh, a tile holding a KV cache's appended keys)
    template <int ROWS, typename T, class RowPtr>
    static __device__ __forceinline__ void load_rows(Acc* s, RowPtr&& row_ptr, const T*, int rows,
                                                     int d) {
        load_tile_rows<T, Acc, ROWS, LD, NT>(s, row_ptr, rows, d);
    }
};

// Load `rows_valid` entries of a per-row vector, filling the rest of ROWS with `fill`.
template <typename Acc, int ROWS, int NT, typename F>
__device__ __forceinline__ void load_rows(Acc* s, int rows_valid, Acc fill, F value_of) {
    for (int r = threadIdx.x; r < ROWS; r += NT) s[r] = r < rows_valid ? value_of(r) : fill;
}

// C = A Bᵀ for a BR × BC tile: A is BR × DP (row stride LDA), B is BC × DP (row stride LDB),
// both in shared memory; C stays in registers. Thread (ty, tx) owns rows ty·TR + i (i < TR) and
// the strided columns tx + j·CT (j < TN, TN = 4 unless the tile is too small for NT threads), so
// the CT threads sharing a row are CT consecutive lanes of one warp and row reductions are
// warp shuffles.
template <typename Acc, int BR, int BC, int DP, int NT>
struct DotTile {
    static constexpr int VEC = 16 / sizeof(Acc);
    static constexpr int TN = BR * BC / NT >= 4 ? 4 : BR * BC / NT;  // columns per thread
    static constexpr int CT = BC / TN;   // threads per row group
    static constexpr int RT = NT / CT;   // row groups
    static constexpr int TR = BR / RT;   // rows per thread
    static_assert(TN >= 1 && CT <= 32 && (CT & (CT - 1)) == 0, "BC/TN must be a power of two <= 32");
    static_assert(NT % CT == 0 && BR % RT == 0 && TR >= 1, "BR x BC tile does not split over NT threads");
    static_assert(DP % VEC == 0, "head dim must be a multiple of the vector width");

    Acc c[TR][TN];
    int ty, tx;

    __device__ __forceinline__ DotTile() : ty(threadIdx.x / CT), tx(threadIdx.x % CT) {}
    __device__ __forceinline__ int row(int i) const { return ty * TR + i; }
    __device__ __forceinline__ int col(int j) const { return tx + j * CT; }

    template <int LDA, int LDB>
    __device__ __forceinline__ void compute(const Acc* A, const Acc* B) {
#pragma unroll
        for (int i = 0; i < TR; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) c[i][j] = Acc(0);
#pragma unroll 4
        for (int k = 0; k < DP; k += VEC) {
            Acc a[TR][VEC], b[TN][VEC];
#pragma unroll
            for (int i = 0; i < TR; ++i) lds16(A + row(i) * LDA + k, a[i]);
#pragma unroll
            for (int j = 0; j < TN; ++j) lds16(B + col(j) * LDB + k, b[j]);
#pragma unroll
            for (int i = 0; i < TR; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
#pragma unroll
                    for (int e = 0; e < VEC; ++e) c[i][j] += a[i][e] * b[j][e];
        }
    }
};

// O += P X for a BR × DP accumulator in registers: P(r, n) and X (N × DP, row stride LDX) in
// shared memory, P(r, n) = P[r·LDP + n], or P[n·LDP + r] when TRANS_P (Pᵀ is what is stored).
// Thread (ty, tx) owns rows ty·TR + i and the 16-byte column chunks (tx + j·CTX)·VEC, j < J.
template <typename Acc, int BR, int DP, int NT>
struct OuterAcc {
    static constexpr int VEC = 16 / sizeof(Acc);
    static constexpr int CTX = (DP / VEC) % 16 == 0 ? 16 : 8;  // column threads
    static constexpr int RT = NT / CTX;                        // row groups
    static constexpr int TR = BR / RT;                         // rows per thread
    static constexpr int J = DP / VEC / CTX;                   // column chunks per thread
    static_assert((DP / VEC) % CTX == 0, "head dim does not split into column chunks");
    static_assert(NT % CTX == 0 && BR % RT == 0 && TR >= 1, "BR x DP tile does not split over NT threads");

    Acc o[TR][J * VEC];
    int ty, tx;

    __device__ __forceinline__ OuterAcc() : ty(threadIdx.x / CTX), tx(threadIdx.x % CTX) {}
    __device__ __forceinline__ int row(int i) const { return ty * TR + i; }
    __device__ __forceinline__ int col(int j) const { return (tx + j * CTX) * VEC; }

    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < TR; ++i)
#pragma unroll
            for (int c = 0; c < J * VEC; ++c) o[i][c] = Acc(0);
    }

    // t = P X over this thread's column chunks j0 .. j0 + JN - 1, summed from zero over N
    template <bool TRANS_P, int LDP, int LDX, int N, int JN>
    __device__ __forceinline__ void sum_cols(const Acc* P, const Acc* X, int j0, Acc (&t)[TR][JN * VEC]) const {
#pragma unroll
        for (int i = 0; i < TR; ++i)
#pragma unroll
            for (int c = 0; c < JN * VEC; ++c) t[i][c] = Acc(0);
#pragma unroll 2
        for (int n = 0; n < N; ++n) {
            Acc p[TR], x[JN][VEC];
#pragma unroll
            for (int i = 0; i < TR; ++i) p[i] = TRANS_P ? P[n * LDP + row(i)] : P[row(i) * LDP + n];
#pragma unroll
            for (int j = 0; j < JN; ++j) lds16(X + n * LDX + col(j0 + j), x[j]);
#pragma unroll
            for (int i = 0; i < TR; ++i)
#pragma unroll
                for (int j = 0; j < JN; ++j)
#pragma unroll
                    for (int e = 0; e < VEC; ++e) t[i][j * VEC + e] += p[i] * x[j][e];
        }
    }

    // o = P X (one tile's sum)
    template <bool TRANS_P, int LDP, int LDX, int N>
    __device__ __forceinline__ void set_tile(const Acc* P, const Acc* X) {
        sum_cols<TRANS_P, LDP, LDX, N, J>(P, X, 0, o);
    }

    // column chunks of one add_tile pass (P is read from shared memory once per pass): all J
    // while the tile sum takes <= 64 registers, else at most 32 where o itself is larger (float64
    // at d = 256 spilled 64 B with 64)
    static constexpr int kSumBytes = TR * J * VEC * int(sizeof(Acc)) > 256 ? 128 : 256;
    __host__ __device__ static constexpr int chunk(int jc) {
        return jc > 1 && (TR * jc * VEC * int(sizeof(Acc)) > kSumBytes || J % jc) ? chunk(jc - 1) : jc;
    }
    static constexpr int JC = chunk(J);

    // o = diag(f) o + P X; f = nullptr: o += P X. This tile's N products are summed from zero
    // first and added to o once: a running sum fed one product at a time is an FFMA chain over
    // every key (or query) the block visits, whose rounding grows with its length (at
    // T = S = 16384, out, dk and dv read 2-4.5x naive float32's error, NOTES v25); tile sums
    // of N terms added S / N times keep it at naive's, as the twin's per-tile matmuls and the
    // tensor-core kernels' per-tile sums (tf32.cuh) do.
    template <bool TRANS_P, int LDP, int LDX, int N>
    __device__ __forceinline__ void add_tile(const Acc* P, const Acc* X, const Acc* f = nullptr) {
#pragma unroll
        for (int j0 = 0; j0 < J; j0 += JC) {
            Acc t[TR][JC * VEC];
            sum_cols<TRANS_P, LDP, LDX, N, JC>(P, X, j0, t);
#pragma unroll
            for (int i = 0; i < TR; ++i) {
                const Acc s = f ? f[row(i)] : Acc(1);
#pragma unroll
                for (int c = 0; c < JC * VEC; ++c) {
                    Acc& y = o[i][j0 * VEC + c];
                    y = f ? fma(y, s, t[i][c]) : y + t[i][c];
                }
            }
        }
    }

    // g[r][c] = o[r][c] · factor(r) for rows r < rows_valid and columns c < d (row stride ld).
    // f(row, column, value) for each of this thread's elements
    template <class F>
    __device__ __forceinline__ void each(F&& f) const {
#pragma unroll
        for (int i = 0; i < TR; ++i)
#pragma unroll
            for (int j = 0; j < J; ++j)
#pragma unroll
                for (int e = 0; e < VEC; ++e) f(row(i), col(j) + e, o[i][j * VEC + e]);
    }
    template <typename T, typename F>
    __device__ __forceinline__ void store(T* g, int rows_valid, int d, int ld, F factor) const {
#pragma unroll
        for (int i = 0; i < TR; ++i) {
            if (row(i) >= rows_valid) continue;
            const Acc f = factor(row(i));
#pragma unroll
            for (int j = 0; j < J; ++j)
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const int c = col(j) + e;
                    if (c < d) g[size_t(row(i)) * ld + c] = Store<T>::from(o[i][j * VEC + e] * f);
                }
        }
    }

    // g[r][c] += o[r][c] · factor with atomics (the dQ accumulator of the backward).
    __device__ __forceinline__ void atomic_add(Acc* g, int rows_valid, int d, Acc factor) const {
#pragma unroll
        for (int i = 0; i < TR; ++i) {
            if (row(i) >= rows_valid) continue;
#pragma unroll
            for (int j = 0; j < J; ++j)
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const int c = col(j) + e;
                    if (c < d) atomicAdd(g + size_t(row(i)) * d + c, o[i][j * VEC + e] * factor);
                }
        }
    }
};

// Zero `bytes` of shared memory (multiple of 16) with 16-byte stores.
template <int NT>
__device__ __forceinline__ void zero_smem(void* s, int bytes) {
    uint4* p = reinterpret_cast<uint4*>(s);
    for (int x = threadIdx.x; x < bytes / 16; x += NT) p[x] = make_uint4(0, 0, 0, 0);
}

}  // namespace cuflash
