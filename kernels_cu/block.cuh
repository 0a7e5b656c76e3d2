// cuflash: what one block of a kernel works on, set up the same way in every family (after
// FlashAttention-3's block.h): its sequence and head (seq.cuh), its tile of rows, the mask and
// score modifier of that sequence (mask.cuh, score.cuh), the tiles it streams and the rows
// they come from.
//
//   QueryBlock  forward and dQ kernels: a tile of BLOCK_M queries; grid (query tiles, reversed
//               so that the heaviest causal tiles start first; sequences·heads)
//   KeyBlock    dK/dV kernels: a tile of BLOCK_N keys and one query head; grid (key tiles,
//               sequences·heads); a kv head's dK/dV is the sum of its G query heads' blocks
#pragma once
#include "mask.cuh"
#include "score.cuh"

namespace cuflash {

// The (sequence, query head) of grid row batch_index() = b·heads + h (the grid's last row may run
// past the batch: such blocks locate the last pair and are not active)
template <bool PACKED, class P>
__device__ __forceinline__ Seq locate_head(const P& p) {
    const int bz = min(batch_index(), p.batch * p.heads - 1);
    return Seq::of<PACKED>(p, bz / p.heads, bz % p.heads);
}

template <int BLOCK_M, class V, class P, typename Acc>
struct QueryBlock {
    Seq seq;
    int i0, rows;              // first query of the tile, queries in it (<= BLOCK_M)
    bool active;               // false past the batch or past the sequence's end: return at once
    Mask<V, P> mask;
    ScoreMod<V, Acc> score;
    // Key tiles come in key order, each BLOCK_N after the last (all but a mask_mod's tile lists)
    static constexpr bool kInOrder = !V::Mod::kActive;

    __device__ __forceinline__ explicit QueryBlock(const P& p)
        : seq(locate_head<V::PACKED>(p)), i0((gridDim.x - 1 - blockIdx.x) * BLOCK_M),
          rows(min(BLOCK_M, seq.T_len - i0)),
          active(batch_index() < p.batch * p.heads && i0 < seq.T_len),
          mask(p, seq), score(p, seq) {}

    // The key tiles this query tile visits, and whether tile t of them needs the per-element rule
    template <int BLOCK_N>
    __device__ __forceinline__ TileIter key_tiles() const {
        return mask.key_tiles(i0, i0 + BLOCK_M, BLOCK_N, i0 / BLOCK_M);
    }
    template <int BLOCK_N>
    __device__ __forceinline__ bool needs_mask(const TileIter& kv, int t, int j0) const {
        return mask.needs_mask(kv, t, i0, i0 + BLOCK_M, j0, j0 + BLOCK_N);
    }
};

// A key tile and one query head (grid rows as QueryBlock's): the query tiles of that head that
// see the tile. The G query heads of a kv head are G blocks, whose dK/dV the epilogue sums in a
// fixed order (epilogue.cuh, store_dkdv); group_rank() is this head's place in its group.
template <int BLOCK_M, int BLOCK_N, class V, class P, typename Acc>
struct KeyBlock {
    Seq seq;                   // the query head seq.h, its kv head seq.hk
    int j0, rows;              // first key of the tile, keys in it
    bool active;
    Mask<V, P> mask;
    ScoreMod<V, Acc> score;

    __device__ __forceinline__ explicit KeyBlock(const P& p)
        : seq(locate_head<V::PACKED>(p)), j0(blockIdx.x * BLOCK_N),
          rows(min(BLOCK_N, seq.S_len - j0)),
          active(batch_index() < p.batch * p.heads && j0 < seq.S_len), mask(p, seq),
          score(p, seq) {}

    // The query tiles that see this key tile, and whether tile t of them needs the per-element rule
    __device__ __forceinline__ TileIter query_tiles() const {
        return mask.query_tiles(j0, j0 + BLOCK_N, BLOCK_M, j0 / BLOCK_N);
    }
    __device__ __forceinline__ bool needs_mask(const TileIter& qt, int t, int i0) const {
        return mask.needs_mask(qt, t, i0, i0 + BLOCK_M, j0, j0 + BLOCK_N);
    }
    __device__ __forceinline__ int group_rank(const P& p) const { return seq.h % p.group; }
    // The counter that orders the group's blocks of this key tile (one per sequence, kv head and
    // key tile: gridDim.x of them per (sequence, kv head))
    __device__ __forceinline__ int* group_counter(const P& p) const {
        return p.dkdv_sem + ((long long)seq.b * (p.heads / p.group) + seq.hk) * gridDim.x + blockIdx.x;
    }
};

}  // namespace cuflash
