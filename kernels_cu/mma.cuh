// cuflash: tensor-core building blocks (sm_80+): cp.async, ldmatrix, mma.sync m16n8k16.
//
// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), for lane
// l with g = l / 4 and t = l % 4:
//   A (16×16, row-major), 4 regs of 2 elements: a0 = (g, 2t..2t+1), a1 = (g+8, 2t..),
//       a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16×8, "col": element (k, n) with k fastest), 2 regs: b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//   C (16×8 float), 4 values: c0, c1 = (g, 2t..2t+1), c2, c3 = (g+8, 2t..2t+1)
// So the C fragments of two adjacent n-tiles are, element for element, the A fragment of one
// k-step: the softmax output P feeds the next product without leaving registers.
#pragma once
#include "common.cuh"

namespace cuflash {

// 16 bytes global -> shared, asynchronously; zero-filled when !valid (no global read then).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
                 "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Four 8×8 b16 matrices from shared memory; lane l gives the row address of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* smem) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(smem)));
}

// c += a · b for one 16×8×16 product with float accumulators (T: __half or __nv_bfloat16).
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#define CUFLASH_MMA16816(ty)                                                                   \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ty "." ty                            \
                 ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"       \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                              \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
    CUFLASH_PTX16(T, CUFLASH_MMA16816);
#undef CUFLASH_MMA16816
}

// f(mt, h, r) for each row a lane holds of MT m-tiles of C fragments from tile row wrow: row
// r = wrow + 16·mt + g + 8h holds elements 2h and 2h + 1 of each n-tile (see the header).
template <int MT, class F>
__device__ __forceinline__ void for_each_frag_row(int wrow, int lane, F&& f) {
    const int g = lane >> 2;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) f(mt, h, wrow + mt * 16 + g + h * 8);
}

// Two floats rounded to T and packed into one register, lo in the low half.
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<__half>(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
}
template <> __device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
}

// Two floats to dst[0], dst[1] in T (16-bit: rounded and packed into one 4-byte store)
template <typename T>
__device__ __forceinline__ void store2(T* dst, float lo, float hi) {
    if constexpr (sizeof(T) == 4)
        *reinterpret_cast<float2*>(dst) = make_float2(lo, hi);
    else
        *reinterpret_cast<unsigned*>(dst) = pack2<T>(lo, hi);
}

// The A fragment of k-step kk from the C fragments of n-tiles 2kk and 2kk+1 (see the header).
// Every value of an array of C fragments set to 0 (an accumulator before its first product)
template <int N>
__device__ __forceinline__ void zero_fragments(float (&c)[N][4]) {
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[n][e] = 0.f;
}
// c += x, value by value (a sum kept outside the tensor core's accumulator)
template <int N>
__device__ __forceinline__ void add_fragments(float (&c)[N][4], const float (&x)[N][4]) {
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[n][e] += x[n][e];
}

template <typename T>
__device__ __forceinline__ void c_to_a(unsigned (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
    a[0] = pack2<T>(c0[0], c0[1]);
    a[1] = pack2<T>(c0[2], c0[3]);
    a[2] = pack2<T>(c1[0], c1[1]);
    a[3] = pack2<T>(c1[2], c1[3]);
}

// Where element (r, c) of a 16-bit tile in rows of LDS elements lies. ldmatrix reads the 16-byte
// chunks of 8 rows at once, which must lie in distinct banks: rows padded by 16 bytes
// (LDS ≡ 8 mod 64, the backward's DP + 8) shift each row by 4 banks; unpadded rows of a multiple
// of 128 bytes (LDS % 64 == 0, HalfProducts' SWIZZLE) take chunk index XOR row % 8 (a
// 128-byte swizzle). The swizzle also keeps each 128 bytes of a row that cp.async copies in one
// 128-byte line of shared memory: into padded rows, cp.async asks L2 for 1.5x the sectors and
// reads 5-7% slower (NOTES v28, calls 106-110), which memory-bound kernels (decode steps) feel;
// the swizzle's addresses cost registers, which compute-bound ones feel. A tile's base pointer
// may move by whole groups of 8 rows only. The swizzle's chunks are 8 elements: the float32 and
// float64 tiles (RowMajor too) have strides that are never a multiple of 64 (static_asserts at
// FwdMma and DmmaShape).
template <int LDS>
__device__ __forceinline__ int tile_at(int r, int c) {
    if constexpr (LDS % 64 == 0) return r * LDS + (((c >> 3) ^ (r & 7)) << 3) + (c & 7);
    else return r * LDS + c;
}

// Shared-memory addresses for ldmatrix, tiles stored row-major in rows of LDS elements (tile_at).
// A fragment (16 rows × 16 k) at (r0, k0); also B fragments of two n-tiles through .trans
// when the stored rows are k (V in P·V: rows = keys, cols = head dim).
template <int LDS, typename T>
__device__ __forceinline__ const T* frag_a_addr(const T* s, int r0, int k0, int lane) {
    return s + tile_at<LDS>(r0 + (lane & 7) + ((lane >> 3) & 1) * 8, k0 + (lane >> 4) * 8);
}
// B fragments of two n-tiles (n0..n0+15) × one k-step (k0..k0+15) when the stored rows are n
// (K in Q·Kᵀ: rows = keys, cols = head dim): regs 0, 1 -> n-tile n0, regs 2, 3 -> n-tile n0+8.
template <int LDS, typename T>
__device__ __forceinline__ const T* frag_b_addr(const T* s, int n0, int k0, int lane) {
    return s + tile_at<LDS>(n0 + (lane & 7) + (lane >> 4) * 8, k0 + ((lane >> 3) & 1) * 8);
}

// C fragments (MT m-tiles × 2·KK n-tiles of 8 columns) rounded to T and packed as the A fragments
// of a product over those columns (KK k-steps of 16): P before P·V, dS before dS·K.
template <typename T, int MT, int KK>
__device__ __forceinline__ void c_to_a_tile(unsigned (&a)[MT][KK][4], const float (&c)[MT][2 * KK][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < KK; ++kk) c_to_a<T>(a[mt][kk], c[mt][2 * kk], c[mt][2 * kk + 1]);
}

// acc += a · B, B a (16·KK) × DP tile in shared memory (row stride LDS; its rows are the product's
// k), read transposed by ldmatrix: O += P·V in the forward, dQ += dS·K in the dQ kernel.
template <typename T, int MT, int KK, int DP, int LDS>
__device__ __forceinline__ void mma_rows(float (&acc)[MT][DP / 8][4], const unsigned (&a)[MT][KK][4],
                                         const T* B, int lane) {
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) {
#pragma unroll
        for (int dd = 0; dd < DP / 16; ++dd) {
            unsigned b[4];
            ldmatrix_x4_trans(b, frag_a_addr<LDS>(B, kk * 16, dd * 16, lane));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma16816<T>(acc[mt][2 * dd], a[mt][kk], b[0], b[1]);
                mma16816<T>(acc[mt][2 * dd + 1], a[mt][kk], b[2], b[3]);
            }
        }
    }
}

// The forward's two products on 16-bit tensor cores (flash_fwd_mma.cu takes its products from
// a policy; tf32.cuh's Tf32Products is the float32 one): tiles in rows of kLds<DP> elements, Q·Kᵀ
// through ldmatrix, P rounded to T and packed as A fragments right after the softmax (the float S
// registers die before P·V, mma_rows).
template <typename T>
struct HalfProducts {
    // row stride of the tiles (tile_at): SWIZZLE (and rows a multiple of 128 bytes) unpadded and
    // swizzled, else padded by 16 bytes
    template <int DP, bool SWIZZLE = false>
    static constexpr int kLds = SWIZZLE && DP % 64 == 0 ? DP : DP + 8;

    // s[mt][n] += Q_mt · K_nᵀ over DP columns: Q rows wrow + 16·mt.., K rows wkey + 8·n.. of
    // tiles in rows of LDS elements
    template <int MT, int WN, int DP, int LDS>
    static __device__ __forceinline__ void scores(float (&s)[MT][WN / 8][4], const T* Qs, int wrow,
                                                  const T* Ks, int wkey, int lane) {
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            unsigned a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], frag_a_addr<LDS>(Qs, wrow + mt * 16, kk * 16, lane));
#pragma unroll
            for (int nn = 0; nn < WN / 16; ++nn) {
                unsigned bk[4];
                ldmatrix_x4(bk, frag_b_addr<LDS>(Ks, wkey + nn * 16, kk * 16, lane));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma16816<T>(s[mt][2 * nn], a[mt], bk[0], bk[1]);
                    mma16816<T>(s[mt][2 * nn + 1], a[mt], bk[2], bk[3]);
                }
            }
        }
    }

    // o[mt] += P_mt · V: P the softmax's output in s (C fragments), V rows of LDS elements from
    // this warp's first key
    template <int MT, int WN, int DP, int LDS>
    static __device__ __forceinline__ void add_pv(float (&o)[MT][DP / 8][4],
                                                  const float (&s)[MT][WN / 8][4], const T* Vs,
                                                  int lane) {
        unsigned pa[MT][WN / 16][4];
        c_to_a_tile<T>(pa, s);
        mma_rows<T, MT, WN / 16, DP, LDS>(o, pa, Vs, lane);
    }
};

// The 16-byte chunks each thread copies of a ROWS × DP tile (NT threads) of elements EPC to a
// chunk (8: 16-bit elements; 2: doubles, the dmma kernels). When NT is a multiple of the chunks
// per row (STEPPED), a thread's column stays put and its row moves NT / CPR rows per chunk: one
// source pointer, stepped (thread_src gives it for a tile at g), so that a loop of tile loads
// holds no per-chunk offsets in registers. LANE: the NT = 32 threads are one warp's lanes, which
// copy a tile of the warp's own (KeySliceTiles).
template <int ROWS, int DP, int NT, int EPC = 8, bool LANE = false>
struct Chunks {
    static_assert(!LANE || NT == 32, "a warp's own tile: its 32 lanes");
    static constexpr int CPR = DP / EPC, N = ROWS * CPR;
    static constexpr bool STEPPED = NT % CPR == 0 && N % NT == 0;
    // (unsigned, as threadIdx.x: r0 and col divide by powers of two without a sign fix-up; an
    // int here cost the sm_80 128 x 32 x 4 ALiBi split kernels 16 more spilled bytes)
    static __device__ __forceinline__ unsigned tid() { return LANE ? threadIdx.x % 32 : threadIdx.x; }
    static __device__ __forceinline__ int r0() { return tid() / CPR; }
    static __device__ __forceinline__ int col() { return (tid() % CPR) * EPC; }
    template <typename T>
    static __device__ __forceinline__ const T* thread_src(const T* g, int ld) {
        return STEPPED ? g + size_t(r0()) * ld + col() : g;
    }
    // Each chunk of a tile whose rows >= rows_valid and columns >= d are zero-filled:
    // copy(row, column, source or `any` when not valid, valid); src is thread_src of the tile.
    // UNROLLED: the loop of a layout that is not STEPPED unrolled (the wgmma loaders) or not (the
    // mma loaders, whose odd head dims would otherwise hold a dozen addresses at once).
    template <bool UNROLLED, typename T, class Copy>
    static __device__ __forceinline__ void each(const T* src, const T* any, int rows_valid, int d,
                                                int ld, Copy&& copy) {
        if constexpr (STEPPED) {
            const int r0_ = r0(), c = col();
            const size_t step = size_t(NT / CPR) * ld;
#pragma unroll
            for (int i = 0; i < N / NT; ++i, src += step) {
                const int r = r0_ + i * (NT / CPR);
                const bool valid = r < rows_valid && c < d;
                copy(r, c, valid ? src : any, valid);
            }
        } else if constexpr (UNROLLED) {
#pragma unroll
            for (int i = 0; i < (N + NT - 1) / NT; ++i) {
                const int ch = tid() + i * NT;
                if (N % NT == 0 || ch < N) chunk(ch, src, any, rows_valid, d, ld, copy);
            }
        } else {
            for (int ch = tid(); ch < N; ch += NT) chunk(ch, src, any, rows_valid, d, ld, copy);
        }
    }
    // Each chunk with its row's own start, row_ptr(r) (rows that do not follow one stride)
    template <typename T, class RowPtr, class Copy>
    static __device__ __forceinline__ void each_row(RowPtr&& row_ptr, const T* any, int rows_valid,
                                                    int d, Copy&& copy) {
        for (int ch = tid(); ch < N; ch += NT) {
            const int r = ch / CPR, c = (ch % CPR) * EPC;
            const bool valid = r < rows_valid && c < d;
            copy(r, c, valid ? row_ptr(r) + c : any, valid);
        }
    }
    template <typename T, class Copy>
    static __device__ __forceinline__ void chunk(int ch, const T* src, const T* any, int rows_valid,
                                                 int d, int ld, Copy&& copy) {
        const int r = ch / CPR, c = (ch % CPR) * EPC;
        const bool valid = r < rows_valid && c < d;
        copy(r, c, valid ? src + size_t(r) * ld + c : any, valid);
    }
};

// Chunks' copy(r, c, source, valid) of a ROWS-row tile by cp.async into s at Layout's place for
// row r0 + r (r0: the first row a loader copies: 0, or a key warp's share, KeySliceTiles)
template <int ROWS, class Layout, typename T>
struct CpAsyncChunks {
    T* s;
    int r0;
    __device__ __forceinline__ void operator()(int r, int c, const T* g, bool ok) const {
        cp_async16(s + Layout::template at<ROWS>(r0 + r, c), g, ok);
    }
};
template <int ROWS, class Layout, typename T>
__device__ __forceinline__ CpAsyncChunks<ROWS, Layout, T> cp_async_chunks(T* s, int r0 = 0) {
    return {s, r0};
}

// A tile loader by cp.async (pipeline.cuh: KVStream, stage_q, load_tile_at): each 16-byte chunk
// of a ROWS × DP tile (global row stride ld elements, this thread's first source
// thread_src(tile, ld)) to shared-memory element Layout::at<ROWS>(row, column); rows >= rows and
// columns >= d are zero-filled (`any`: an address of the array for the chunks that read nothing).
// Layout::kUnrolled: Chunks::each's loop unrolled where a thread's chunks do not follow one pointer.
// EPC: elements per 16-byte chunk (8 for 16-bit elements, 2 for doubles).
template <int DP, int NT, class Layout, int EPC = 8>
struct CpAsyncTiles {
    // Whether a thread's chunks of a tile follow one stepped pointer (Chunks)
    template <int ROWS>
    static constexpr bool kStepped = Chunks<ROWS, DP, NT, EPC>::STEPPED;
    template <int ROWS, typename T>
    static __device__ __forceinline__ const T* thread_src(const T* g, int ld) {
        return Chunks<ROWS, DP, NT, EPC>::thread_src(g, ld);
    }
    template <int ROWS, typename T>
    static __device__ __forceinline__ void load_from(T* s, const T* src, const T* any, int rows,
                                                     int d, int ld) {
        static_assert(sizeof(T) * EPC == 16, "EPC elements of T make one 16-byte chunk");
        Chunks<ROWS, DP, NT, EPC>::template each<Layout::kUnrolled>(
            src, any, rows, d, ld, cp_async_chunks<ROWS, Layout>(s));
    }
    template <int ROWS, typename T>
    static __device__ __forceinline__ void load(T* s, const T* g, int rows, int d, int ld) {
        load_from<ROWS>(s, thread_src<ROWS>(g, ld), g, rows, d, ld);
    }
    // Rows from row_ptr(r) (pipeline.cuh, a tile holding a KV cache's appended keys)
    template <int ROWS, typename T, class RowPtr>
    static __device__ __forceinline__ void load_rows(T* s, RowPtr&& row_ptr, const T* any, int rows,
                                                     int d) {
        Chunks<ROWS, DP, NT, EPC>::each_row(row_ptr, any, rows, d,
                                            cp_async_chunks<ROWS, Layout>(s));
    }
};

// The key-split kernels' K/V loader (flash_fwd_mma.cu v11, MmaShape::KVTiles): of each ROWS-row
// tile, warp w of the KW copies only its own ROWS / KW rows (the keys it computes on), by its 32
// lanes, to where CpAsyncTiles would put them (Layout), so that no warp waits for another between
// tiles (CpAsyncPipeline's WARP_LOCAL). The same calls as CpAsyncTiles: a source from
// thread_src is this warp's, `rows` counts the whole tile's valid rows; and load_at, for tiles
// whose rows follow one stride only within each warp's share (a paged cache's pages of 16 or 32
// keys: pipeline.cuh KVStream), where each warp finds its own rows' start.
template <int DP, int KW, class Layout, int EPC = 8>
struct KeySliceTiles {
    static constexpr bool kSliced = true;   // (pipeline.cuh, SlicedTiles)
    template <int ROWS>
    using Slice = Chunks<ROWS / KW, DP, 32, EPC, true>;
    template <int ROWS>
    static constexpr bool kStepped = Slice<ROWS>::STEPPED;
    template <int ROWS>
    static __device__ __forceinline__ int first_row() { return threadIdx.x / 32 * (ROWS / KW); }
    template <int ROWS, typename T>
    static __device__ __forceinline__ const T* thread_src(const T* g, int ld) {
        return Slice<ROWS>::thread_src(g + size_t(first_row<ROWS>()) * ld, ld);
    }
    template <int ROWS, typename T>
    static __device__ __forceinline__ void load_from(T* s, const T* src, const T* any, int rows,
                                                     int d, int ld) {
        static_assert(ROWS % (16 * KW) == 0 && sizeof(T) * EPC == 16, "16 rows a warp at least");
        const int w0 = first_row<ROWS>();
        Slice<ROWS>::template each<Layout::kUnrolled>(src, any, rows - w0, d, ld,
                                                      cp_async_chunks<ROWS, Layout>(s, w0));
    }
    // This warp's rows from at(first row) on, at ld from each other (at(r): where row r of the
    // tile starts; asked only for a row below `rows`, the tile's valid rows)
    template <int ROWS, typename T, class At>
    static __device__ __forceinline__ void load_at(T* s, At&& at, int rows, int d, int ld) {
        const int w0 = first_row<ROWS>();
        const T* g = at(w0 < rows ? w0 : 0);
        Slice<ROWS>::template each<Layout::kUnrolled>(Slice<ROWS>::thread_src(g, ld), g, rows - w0,
                                                      d, ld, cp_async_chunks<ROWS, Layout>(s, w0));
    }
    template <int ROWS, typename T, class RowPtr>
    static __device__ __forceinline__ void load_rows(T* s, RowPtr&& row_ptr, const T* any, int rows,
                                                     int d) {
        const int w0 = first_row<ROWS>();
        Slice<ROWS>::each_row([&](int r) { return row_ptr(w0 + r); }, any, rows - w0, d,
                              cp_async_chunks<ROWS, Layout>(s, w0));
    }
};

// Rows of LDS elements (the mma kernels' tiles: padded or swizzled against bank conflicts,
// tile_at)
template <int LDS>
struct RowMajor {
    static constexpr bool kUnrolled = false;   // odd head dims would hold a dozen addresses at once
    template <int ROWS>
    static __device__ __forceinline__ int at(int r, int c) { return tile_at<LDS>(r, c); }
};

// The mma kernels' tile loader.
template <int DP, int LDS, int NT>
using MmaTiles = CpAsyncTiles<DP, NT, RowMajor<LDS>>;

// The query-tile shape of the mma forward and dQ kernels (flash_fwd_mma.cu FwdMma, flash_bwd_mma.cu
// DqMma), as DmmaShape is the dmma kernels': BLOCK_M query rows dealt to the NW = NT / 32 warps in
// 16-row m-tiles (MT a warp); with KEY_SPLIT and fewer rows than 16 a warp, the KW = NW warps
// each take every row and WN = BLOCK_N / KW keys of a tile instead. DP head columns; every tile
// staged (Tiles, 16-byte copies) in rows of LDS elements, Products' row stride (SWIZZLE: a KV
// cache's unpadded swizzled 16-bit rows, mma.cuh tile_at). Each kernel names its one MmaShape
// Shape and takes these from it.
template <typename T, int DP, int BLOCK_M, int BLOCK_N, int NT, class Products,
          bool KEY_SPLIT = false, bool SWIZZLE = false>
struct MmaShape {
    static constexpr int NW = NT / 32;
    static constexpr int KW = KEY_SPLIT && BLOCK_M < 16 * NW ? NW : 1;   // warps splitting keys
    static constexpr int MT = BLOCK_M / (16 * (NW / KW));   // 16-row m-tiles per warp
    static constexpr int WN = BLOCK_N / KW;                 // keys of a tile per warp
    static constexpr int NS = WN / 8;                       // 8-column n-tiles of S
    static constexpr int NO = DP / 8;                       // 8-column n-tiles of O / dQ
    static constexpr int LDS = Products::template kLds<DP, SWIZZLE>;
    static_assert(sizeof(T) == 2 || LDS % 64 != 0, "mma.cuh tile_at swizzles 16-bit rows only");
    static_assert(MT >= 1 && BLOCK_M == 16 * MT * (NW / KW),
                  "BLOCK_M must be 16·MT·warps, or 16·MT when the warps split the keys");
    static_assert(WN % 16 == 0 && DP % 16 == 0, "tiles must be multiples of 16 (per warp)");
    using Tiles = CpAsyncTiles<DP, NT, RowMajor<LDS>, 16 / sizeof(T)>;   // staging (pipeline.cuh)
    // K and V: with the keys split, each warp stages its own keys of a tile
    using KVTiles = Pick<(KW > 1), KeySliceTiles<DP, KW, RowMajor<LDS>, 16 / sizeof(T)>, Tiles>;
};

// cp.async of a ROWS × DP tile into rows of LDS elements (MmaTiles' load)
template <int ROWS, int DP, int LDS, int NT, typename T>
__device__ __forceinline__ void cp_async_tile(T* s, const T* g, int rows_valid, int d, int ld) {
    MmaTiles<DP, LDS, NT>::template load<ROWS>(s, g, rows_valid, d, ld);
}

}  // namespace cuflash
