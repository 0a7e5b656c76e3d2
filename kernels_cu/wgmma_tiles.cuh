// cuflash: shared-memory tiles as Hopper's wgmma reads them (sm_90a), used by the wgmma forward
// and backward. A tile of ROWS × DP 16-bit elements is DP / 64 panels of ROWS rows × 128 bytes
// (float32 read as TF32: DP / 32 panels, flash_fwd_wgmma_tf32.cu)
// with the 128-byte swizzle (PTX ISA, "Shared Memory Matrix Layout"): the 16-byte chunk c of row
// r sits at chunk c ^ (r % 8). Panels start on 1024-byte boundaries.
//   "K-major" operands (head dim contiguous and the product's k): a k-step of 16 moves the
//   descriptor's start by 32 bytes inside a panel; 8-row groups are 1024 bytes apart.
//   "MN-major" operands (head dim contiguous but the product's n, rows are k): a k-step of 16
//   rows moves by 2048 bytes; panels (64 columns each) are ROWS·128 bytes apart (LBO).
#pragma once
#include "mma.cuh"
#include "wgmma.cuh"

namespace cuflash {

// Element offset of (r, col) in a 128-byte-swizzled tile of ROWS rows of BYTES-byte elements
// (panels of 128 / BYTES columns, 16-byte chunks of 16 / BYTES elements)
template <int ROWS, int BYTES = 2>
__device__ __forceinline__ int sw128(int r, int col) {
    static_assert(BYTES == 2 || BYTES == 4, "16-bit or 32-bit elements");
    constexpr int LP = BYTES == 2 ? 6 : 5, LE = BYTES == 2 ? 3 : 2;   // log2 P, log2 E
    return (col >> LP) * (ROWS << LP) + r * (1 << LP) + ((((col >> LE) & 7) ^ (r & 7)) << LE) +
           (col & ((1 << LE) - 1));
}

// The 128-byte-swizzled layout of BYTES-byte elements as CpAsyncTiles (mma.cuh) fills it
template <int BYTES>
struct Swizzle128Of {
    static constexpr bool kUnrolled = true;
    template <int ROWS>
    static __device__ __forceinline__ int at(int r, int c) { return sw128<ROWS, BYTES>(r, c); }
};
using Swizzle128 = Swizzle128Of<2>;

// The wgmma kernels' tile loader, of BYTES-byte elements (16 / BYTES a 16-byte chunk): 16-bit,
// and float32 (the TF32 forwards: SwizzledTiles<DP, NT, sizeof(float)>)
template <int DP, int NT, int BYTES = 2>
using SwizzledTiles = CpAsyncTiles<DP, NT, Swizzle128Of<BYTES>, 16 / BYTES>;

// The shape of a wgmma kernel without warp specialization: NT / 128 warpgroups, each owning 64 of
// the tile's ROWS resident rows (queries; keys for dK/dV), every thread staging tiles (Tiles).
// (The warp-specialized kernels: barrier.cuh, WarpSpecialized.)
template <int DP, int ROWS, int NT>
struct WgmmaShape {
    static constexpr int NW = NT / 32;
    static_assert(NW % 4 == 0 && ROWS == 16 * NW, "64 resident rows per warpgroup of 4 warps");
    using Tiles = SwizzledTiles<DP, NT>;   // how a tile is staged (pipeline.cuh)
};

// wgmma shared-memory descriptor, 128-byte swizzle: start address, leading-dimension byte offset
// (only read for MN-major operands wider than one panel), stride byte offset 1024 (8 rows).
__device__ __forceinline__ unsigned long long sw128_desc(const void* p, unsigned lbo_bytes) {
    const unsigned long long a = smem_addr(p);
    return ((a & 0x3FFFF) >> 4) | (static_cast<unsigned long long>((lbo_bytes >> 4) & 0x3FFF) << 16) |
           (static_cast<unsigned long long>(1024 >> 4) << 32) | (1ull << 62);
}

// The descriptor of the tile at `desc`'s address moved on by `bytes` (a multiple of 16): its
// address field (bits 0-13, the byte address / 16) plus bytes / 16. No carry leaves the field,
// since shared memory ends below 256 KB. So a product loop's descriptors are one descriptor of the
// tile, computed once, plus constants (the k-steps' offsets), not one address conversion each.
__device__ __forceinline__ unsigned long long desc_plus(unsigned long long desc, int bytes) {
    return desc + static_cast<unsigned long long>(bytes >> 4);
}

// Descriptor of k-step kk of a K-major tile of ROWS rows starting at row pointer `s` (panel kk / 4,
// 32 bytes per step inside it: 16 elements of 16 bits, 8 of TF32).
template <int ROWS, typename T>
__device__ __forceinline__ unsigned long long kmajor_desc(const T* s, int kk) {
    constexpr int P = 128 / int(sizeof(T)), K = 32 / int(sizeof(T));
    return desc_plus(sw128_desc(s, 0), ((kk >> 2) * ROWS * P + (kk & 3) * K) * int(sizeof(T)));
}

// Descriptor of k-step kk (16 rows) of an MN-major tile of ROWS rows.
template <int ROWS, typename T>
__device__ __forceinline__ unsigned long long mnmajor_desc(const T* s, int kk) {
    return desc_plus(sw128_desc(s, ROWS * 128), kk * 16 * 64 * int(sizeof(T)));
}

// Four 8 × 8 blocks of 16-bit elements (an m16n8k16 A fragment's registers r[0..3]) stored
// transposed: lane l gives the address of row l % 8 of block l / 8, and that row receives the
// block's column l % 8 (stmatrix, sm_90)
__device__ __forceinline__ void stmatrix_x4_trans(void* smem, const unsigned (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
                 ::"r"(smem_addr(smem)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

// g[0] += a, g[1] += b in one vector reduction (8-byte aligned global float pair; sm_90)
__device__ __forceinline__ void red_add_v2(float* g, float a, float b) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(g), "f"(a), "f"(b) : "memory");
}

}  // namespace cuflash
