// cuflash: what one block of a kernel works on, set up the same way in every family (after
// FlashAttention-3's block.h): its sequence and head (seq.cuh), its tile of rows, the mask and
// score modifier of that sequence (mask.cuh, score.cuh), the tiles it streams and the rows
// they come from.
//
//   GridTile    the order blocks start in: which tile and grid row a block takes
//   QueryBlock  forward and dQ kernels: a tile of BLOCK_M queries; grid (query tiles, reversed
//               so that the heaviest causal tiles start first; sequences·heads)
//   KeyBlock    dK/dV kernels: a tile of BLOCK_N keys and a chunk of a kv head's query heads
//               (GroupHead: one of them); grid (key tiles, chunks·sequences·kv heads)
#pragma once
#include "mask.cuh"
#include "score.cuh"

namespace cuflash {

// The keys of sequence b of a KV cache: its cached tokens and this call's appended ones, clamped
// to the capacity (params.cuh)
template <class P>
__device__ __forceinline__ int cache_keys(const P& p, int b) {
    return max(0, min(p.seqused_k[b] + p.seqused_add, p.S_len));
}

// The tile (along grid x) and grid row a block works on. The host launches a grid of (tiles,
// rows) (params.cuh, batch_index) and blocks start in launch order, so the order decides the
// tail of a causal pass, whose tiles differ in cost: tile-major, every row's tile 0 (the
// heaviest) before any row's tile 1 (FlashAttention-3's longest-first order), within sections
// of rows taken one after the other. A section holds about one wave of blocks (`wave`: the
// kernel's resident blocks; a row of a wave's tiles or more is a section alone, each row's
// tiles in turn), at most the rows whose streamed operands fit in L2 together (`l2_rows`:
// p.sched_rows), cut about even (a short last section would leave its long tiles for the end).
// cuflash/tile.py, section_of, is the same rule. `groups` such grids of `rows` rows follow one
// another (the dK/dV kernels' ranks: group g's row r is grid row g·rows + r). Blocks past the
// grid (its last z may run past the rows) take the last tile and are not in_grid. nx, bx: the
// grid's x extent and this block's x (gridDim.x and blockIdx.x, or for a grid of clusters along
// x the cluster's: QueryBlock).
struct GridTile {
    int x, row;
    bool in_grid;

    __device__ __forceinline__ GridTile(int rows, int groups, int l2_rows, int wave,
                                        int nx_ = gridDim.x, int bx = blockIdx.x) {
        const long long nx = nx_, per_group = rows * nx;
        const int most = max(1, min(l2_rows, (int)(wave / nx)));
        const int sections = (rows + most - 1) / most, section = (rows + sections - 1) / sections;
        long long L = (long long)batch_index() * nx + bx;
        in_grid = L < per_group * groups;
        if (!in_grid) L = per_group * groups - 1;
        const int g = (int)(L / per_group);
        const long long r = L - g * per_group;         // place in this group's tile-major order
        const int first = (int)(r / (section * nx)) * section;   // the section's first row
        const int n = min(section, rows - first);                // its rows
        const long long at = r - first * nx;
        x = (int)(at / n);
        row = g * rows + first + (int)(at % n);
    }
};

// The (sequence, query head) of grid row `row` = b·heads + a; with a KV cache the sequence's
// keys are cache_keys. GQA: place a holds query head (a mod kv heads)·group + a / kv heads, so
// neighbouring rows, and the rows of one GridTile section, read different kv heads as MHA's do
// (one kv head's G heads side by side had a section's blocks stream the same K/V lines in step:
// NOTES v15). Without GQA the head is a.
template <class V, class P>
__device__ __forceinline__ Seq locate_head(const P& p, int row) {
    const int a = row % p.heads, kv_heads = p.heads / p.group;
    Seq s = Seq::of<V::PACKED>(p, row / p.heads, (a % kv_heads) * p.group + a / kv_heads);
    if constexpr (V::CACHE != kNoCache) s.S_len = cache_keys(p, s.b);
    return s;
}

template <int BLOCK_M, class V, class P, typename Acc>
struct QueryBlock {
    GridTile at;               // grid x (split-KV: split · tiles_x + tile) and row b·heads + a
    Seq seq;
    int split;                 // split-KV: this block's share of the key tiles (0 without)
    int i0, rows;              // first query of the tile, queries in it (<= BLOCK_M)
    bool active;               // false past the batch or past the sequence's end: return at once
    Mask<V, P> mask;
    ScoreMod<V, P> score;
    // Key tiles come in key order, each BLOCK_N after the last (all but a mask_mod's tile lists)
    static constexpr bool kInOrder = !V::Mod::kActive;
    static constexpr bool kPaged = V::CACHE == kPagedCache;
    static constexpr bool kCache = V::CACHE != kNoCache;

    // grid x: query tiles (reversed) of split 0, then of split 1, ... (V::SPLIT; one split else).
    // Clusters (V::CLUSTER = C = num_splits): the C blocks of a cluster, side by side along x,
    // are the splits of one query tile, and the clusters are laid out as blocks are without
    // split-KV (cluster x' takes query tile x'; its block of rank s, split s).
    static constexpr bool kSplit = V::SPLIT;
    static constexpr int kCluster = V::CLUSTER;
    __device__ __forceinline__ explicit QueryBlock(const P& p)
        : at(p.batch * p.heads, 1, p.sched_rows, p.wave_q / kCluster, gridDim.x / kCluster,
             blockIdx.x / kCluster),
          seq(locate_head<V>(p, at.row)),
          split(V::SPLIT ? (kCluster > 1 ? cluster_rank() : at.x / tiles_x(p)) : 0),
          i0((tiles_x(p) - 1 - (V::SPLIT ? at.x % tiles_x(p) : at.x)) * BLOCK_M),
          rows(min(BLOCK_M, seq.T_len - i0)), active(at.in_grid && i0 < seq.T_len),
          mask(p, seq), score(p, seq) {}

    // The key tiles this query tile visits, and whether tile t of them needs the per-element rule
    static __device__ __forceinline__ int tiles_x(const P& p) {
        return V::SPLIT ? gridDim.x / p.num_splits : gridDim.x;
    }
    // This block's rank in its cluster (0 without clusters)
    static __device__ __forceinline__ int cluster_rank() { return blockIdx.x % kCluster; }
    template <int BLOCK_N>
    __device__ __forceinline__ TileIter key_tiles() const {
        const TileIter all = mask.key_tiles(i0, i0 + BLOCK_M, BLOCK_N, i0 / BLOCK_M);
        if constexpr (V::SPLIT) return split_share(all, BLOCK_N);
        return all;
    }
    // Split-KV (params.cuh): tiles [first, first + count) of a list of n go to split s:
    // ceil(n / splits) each, in order (cuflash/mask.py, split_share, is the same rule)
    __device__ __forceinline__ TileIter split_share(const TileIter& all, int block_n) const {
        const int per = (all.n + mask.p.num_splits - 1) / mask.p.num_splits;
        const int first = min(all.n, split * per);
        return TileIter{all.begin + first * block_n, min(per, all.n - first),
                        all.list ? all.list + first : nullptr};
    }
    // Where this block's lse goes: lse, or its split's row of lse_accum
    __device__ __forceinline__ Acc* lse_dst(const P& p) const {
        if constexpr (V::SPLIT) return p.lse_accum + split * p.split_rows;
        return p.lse;
    }
    // Split-KV: row r of the tile in this split's out_accum (d floats per row)
    __device__ __forceinline__ Acc* out_accum_row(const P& p, int r) const {
        return p.out_accum + (split * p.split_rows + seq.row(i0 + r)) * p.d;
    }
    template <int BLOCK_N>
    __device__ __forceinline__ bool needs_mask(const TileIter& kv, int t, int j0) const {
        return mask.needs_mask(kv, t, i0, i0 + BLOCK_M, j0, j0 + BLOCK_N);
    }
};

// A key tile and a chunk of p.group_chunk query heads of one kv head's group (C heads; the group
// of G is G / C chunks, its ranks). The block walks its heads (GroupHead) summing dK/dV in
// registers; with more than one rank the epilogue sums the ranks' blocks of the tile in a fixed
// order (epilogue.cuh, store_dkdv). C = G: one block per kv head and key tile, no accumulators;
// C = 1: one block per query head, as many blocks as MHA.
template <int BLOCK_N, class V, class P>
struct KeyBlock {
    GridTile at;               // key tile, and grid row rank·(batch·kv heads) + b·kv heads + hk
    Seq seq;                   // the chunk's first query head seq.h, its kv head seq.hk
    int j0, rows;              // first key of the tile, keys in it
    int rank, ranks;           // this chunk's place in the group, chunks per group
    bool active;

    // Ranks one after the other (GridTile's groups): the blocks of one key tile whose turns
    // follow each other launch batch·kv heads·key tiles blocks apart, so the earlier has mostly
    // finished by the time the later one needs its sum.
    __device__ __forceinline__ explicit KeyBlock(const P& p)
        : at(pairs(p), p.group / p.group_chunk, p.sched_rows, p.wave_k), seq(locate(p, at.row)),
          j0(at.x * BLOCK_N), rows(min(BLOCK_N, seq.S_len - j0)), rank(at.row / pairs(p)),
          ranks(p.group / p.group_chunk), active(at.in_grid && j0 < seq.S_len) {}

    static __device__ __forceinline__ int pairs(const P& p) { return p.batch * (p.heads / p.group); }
    static __device__ __forceinline__ Seq locate(const P& p, int row) {
        const int kv_heads = p.heads / p.group, r = row / pairs(p), bk = row % pairs(p);
        return Seq::of<V::PACKED>(p, bk / kv_heads, (bk % kv_heads) * p.group + r * p.group_chunk);
    }
    // The counter that orders the ranks' blocks of this key tile (one per sequence, kv head and
    // key tile: gridDim.x of them per (sequence, kv head))
    __device__ __forceinline__ int* group_counter(const P& p) const {
        return p.dkdv_sem + ((long long)seq.b * (p.heads / p.group) + seq.hk) * gridDim.x + at.x;
    }
};

// Query head c of a KeyBlock's chunk: its sequence, mask and score modifier, the query tiles that
// see the key tile, and whether tile t of them needs the per-element rule.
template <int BLOCK_M, int BLOCK_N, class V, class P, typename Acc>
struct GroupHead {
    Seq seq;
    Mask<V, P> mask;
    ScoreMod<V, P> score;
    TileIter tiles;
    int j0;

    __device__ __forceinline__ GroupHead(const P& p, const KeyBlock<BLOCK_N, V, P>& kb, int c)
        : seq(kb.seq.with_head(p, kb.seq.h + c)), mask(p, seq), score(p, seq),
          tiles(mask.query_tiles(kb.j0, kb.j0 + BLOCK_N, BLOCK_M, kb.j0 / BLOCK_N)), j0(kb.j0) {}

    __device__ __forceinline__ bool needs_mask(int t, int i0) const {
        return mask.needs_mask(tiles, t, i0, i0 + BLOCK_M, j0, j0 + BLOCK_N);
    }
};

// Each query tile t of each query head of a key block's group chunk (Head: its GroupHead), in
// the order the warp-specialized dK/dV kernels stream them: body(head, t, n), n counting the
// tiles over the heads (their ring slot)
template <class Head, class P, class KB, class Body>
__device__ __forceinline__ void for_each_group_tile(const P& p, const KB& kb, Body&& body) {
    int n = 0;
    for (int c = 0; c < p.group_chunk; ++c) {
        const Head head(p, kb, c);
        for (int t = 0; t < head.tiles.n; ++t, ++n) body(head, t, n);
    }
}

}  // namespace cuflash
