// cuflash: what one block of a kernel works on, set up the same way in every family (after
// FlashAttention-3's block.h): its sequence and head (seq.cuh), its tile of rows, the mask and
// score modifier of that sequence (mask.cuh, score.cuh), the tiles it streams and the rows
// they come from.
//
//   QueryBlock  forward and dQ kernels: a tile of BLOCK_M queries; grid (query tiles, reversed
//               so that the heaviest causal tiles start first; sequences·heads)
//   KeyBlock    dK/dV kernels: a tile of BLOCK_N keys of one kv head; grid (key tiles,
//               sequences·kv heads); the kernel walks the group's query heads (head())
#pragma once
#include "mask.cuh"
#include "score.cuh"

namespace cuflash {

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
        : seq(locate(p)), i0((gridDim.x - 1 - blockIdx.x) * BLOCK_M),
          rows(min(BLOCK_M, seq.T_len - i0)),
          active(batch_index() < p.batch * p.heads && i0 < seq.T_len),
          mask(p, seq), score(p, seq) {}

    // (the grid's last row may run past the batch: such blocks locate the last pair, unused)
    static __device__ __forceinline__ Seq locate(const P& p) {
        const int bz = min(batch_index(), p.batch * p.heads - 1);
        return Seq::of<V::PACKED>(p, bz / p.heads, bz % p.heads);
    }

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

template <int BLOCK_N, class V, class P>
struct KeyBlock {
    Seq seq;                   // seq.h: the group's first query head
    int j0, rows;              // first key of the tile, keys in it
    bool active;

    __device__ __forceinline__ explicit KeyBlock(const P& p)
        : seq(locate(p)), j0(blockIdx.x * BLOCK_N), rows(min(BLOCK_N, seq.S_len - j0)),
          active(batch_index() < p.batch * (p.heads / p.group) && j0 < seq.S_len) {}

    static __device__ __forceinline__ Seq locate(const P& p) {
        const int kv_heads = p.heads / p.group;
        const int bz = min(batch_index(), p.batch * kv_heads - 1);
        return Seq::of<V::PACKED>(p, bz / kv_heads, (bz % kv_heads) * p.group);
    }
};

// One query head of a KeyBlock's group: its sequence, mask and score modifier, the query tiles
// that see the key tile, and whether tile t of them needs the per-element rule.
template <int BLOCK_M, int BLOCK_N, class V, class P, typename Acc>
struct GroupHead {
    Seq seq;
    Mask<V, P> mask;
    ScoreMod<V, Acc> score;
    TileIter tiles;
    int j0;

    __device__ __forceinline__ GroupHead(const P& p, const KeyBlock<BLOCK_N, V, P>& kb, int gh)
        : seq(kb.seq.with_head(p, kb.seq.h + gh)), mask(p, seq), score(p, seq),
          tiles(mask.query_tiles(kb.j0, kb.j0 + BLOCK_N, BLOCK_M, kb.j0 / BLOCK_N)), j0(kb.j0) {}

    __device__ __forceinline__ bool needs_mask(int t, int i0) const {
        return mask.needs_mask(tiles, t, i0, i0 + BLOCK_M, j0, j0 + BLOCK_N);
    }
};

}  // namespace cuflash
