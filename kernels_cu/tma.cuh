// cuflash: tile loads by the Tensor Memory Accelerator, the copy engine of sm_90. A tensor map
// (params.cuh TensorMap, built on the host by cuflash/gpu/tma.py) describes one (sequences, heads,
// rows, d) array of 16-bit elements; one thread asks for a box of 64 columns × ROWS rows of one
// (sequence, head), which lands in shared memory 128-byte swizzled (the layout wgmma reads,
// wgmma_tiles.cuh: a panel of a tile) with every element outside the array zero (rows past the
// sequence's end, columns past d), and counts its bytes on an mbarrier (complete_tx). One
// instruction per panel replaces a warpgroup's cp.async copies and their address arithmetic.
#pragma once
#include "barrier.cuh"
#include "params.cuh"

namespace cuflash {

// The copy engine's read of a tensor map ahead of its first copy
__device__ __forceinline__ void tma_prefetch(const TensorMap& map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&map))
                 : "memory");
}

// Columns col.. (64 of them) of rows row.. (the map's box) of (sequence seq, head head) into the
// 1024-byte aligned panel at dst, counted on bar
__device__ __forceinline__ void tma_load_panel(void* dst, const TensorMap& map, int col, int row,
                                               int head, int seq, Mbarrier& bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(col), "r"(row), "r"(head), "r"(seq),
        "r"(smem_addr(&bar.word))
        : "memory");
}

// The bytes of a ROWS × DP tile: what its copies count on their barrier
template <int ROWS, int DP, typename T>
__device__ __forceinline__ constexpr unsigned tile_bytes() {
    return ROWS * DP * sizeof(T);
}

// A ROWS × DP tile (DP / 64 panels, wgmma_tiles.cuh) from row `row` of (seq, head), in boxes of
// BOX rows (the map's box: the forward's maps take a tile's rows at once, the backward's 64 at
// a time, so that one map serves its tiles of 64 and of 128 rows), counted on bar. The caller
// announces the bytes (Mbarrier::arrive_expect_tx) once for all the copies of a phase.
template <int ROWS, int DP, int BOX = ROWS, typename T>
__device__ __forceinline__ void tma_copy_tile(T* s, const TensorMap& map, int row, int head,
                                              int seq, Mbarrier& bar) {
    static_assert(ROWS % BOX == 0 && BOX % 8 == 0, "whole boxes of whole swizzle atoms");
#pragma unroll
    for (int c = 0; c < DP / 64; ++c)
#pragma unroll
        for (int b = 0; b < ROWS / BOX; ++b)
            tma_load_panel(s + c * ROWS * 64 + b * BOX * 64, map, c * 64, row + b * BOX, head, seq,
                           bar);
}

// Two tiles of ROWS rows from the same row of (seq, head) of two maps (K and V, Q and dO), their
// bytes announced together: the calling thread's arrival on bar
template <int ROWS, int DP, int BOX = ROWS, typename T>
__device__ __forceinline__ void tma_load_pair(T* a, const TensorMap& map_a, T* b,
                                              const TensorMap& map_b, int row, int head, int seq,
                                              Mbarrier& bar) {
    bar.arrive_expect_tx(2 * tile_bytes<ROWS, DP, T>());
    tma_copy_tile<ROWS, DP, BOX>(a, map_a, row, head, seq, bar);
    tma_copy_tile<ROWS, DP, BOX>(b, map_b, row, head, seq, bar);
}

// One tile's copies and their announcement: the calling thread's arrival on bar
template <int ROWS, int DP, int BOX = ROWS, typename T>
__device__ __forceinline__ void tma_load_tile(T* s, const TensorMap& map, int row, int head,
                                              int seq, Mbarrier& bar) {
    bar.arrive_expect_tx(tile_bytes<ROWS, DP, T>());
    tma_copy_tile<ROWS, DP, BOX>(s, map, row, head, seq, bar);
}

// -- The copy engine's reductions into global memory (the atomic-dQ kernel's float dQ). A map of
//    a float array in boxes of 32 columns (128 bytes) × ROWS rows reads its box from shared
//    memory 128-byte swizzled: float (row, col) of the box at byte sw128_f32(row, col).
__device__ __forceinline__ int sw128_f32(int row, int col) {
    return row * 128 + ((((col >> 2) ^ row) & 7) << 4) + (col & 3) * 4;
}

// Adds the box at src (shared memory) into the map's array at columns col.., rows row.. of
// (sequence seq, head head); elements outside the array are skipped. Asynchronous: src may be
// written again once this thread's bulk_wait_read has passed the group it was committed in.
__device__ __forceinline__ void tma_reduce_add(const TensorMap& map, const void* src, int col,
                                               int row, int head, int seq) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"
        " [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(reinterpret_cast<unsigned long long>(&map)),
        "r"(col), "r"(row), "r"(head), "r"(seq), "r"(smem_addr(src))
        : "memory");
}
__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// This thread's bulk groups but the newest N have read their shared memory
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// ... and have completed
template <int N>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace cuflash
