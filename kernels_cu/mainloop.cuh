// cuflash: the shared parts every attention kernel is composed of, in one include: which rows a
// block works on (seq.cuh, block.cuh), which scores it sees (mask.cuh, score.cuh), the softmax
// (softmax.cuh), the staging of streamed tiles (pipeline.cuh) and the epilogues (epilogue.cuh);
// and the dK/dV kernels' loop over their query heads and query tiles (for_each_query_tile).
#pragma once
#include "block.cuh"
#include "epilogue.cuh"
#include "pipeline.cuh"
#include "softmax.cuh"
#include "split_combine.cuh"

namespace cuflash {

// The query side of one dK/dV step in shared memory: Q and dO of BLOCK_M queries (rows staged by
// the kernel's Tiles), and their lse·log2 e and D
template <typename T, typename Acc>
struct StagedQuery {
    T* q;
    T* dout;
    Acc* lse2;
    Acc* D;
};

// The forward and dQ kernels' key tiles: those a QueryBlock visits (key_tiles<BLOCK_N>), K and V
// streamed (kv_stream, Tiles) into a KVRing through a Pipe (CpAsyncPipeline, SyncPipeline).
// A kernel's loop reads
//     auto keys = key_tiles<BLOCK_N, Tiles, Pipe>(blk, p, sm.kv);
//     ...copies of the resident tiles (Q, dO: they ride in the first group)...; keys.prologue();
//     for (t = 0; t < keys.n(); ++t) {
//         j0 = keys.start(t); stage = keys.acquire(t); ...tile t in ring stage `stage`...;
//         keys.release(); }
//     keys.drain();   (cp.async: every copy landed, every thread past the ring)
template <int BLOCK_N, class Tiles, class Pipe, class Block, class P, class Ring>
struct KeyTiles {
    using Stream = decltype(kv_stream<BLOCK_N, Tiles>(*(const Block*)nullptr, *(const P*)nullptr,
                                                      *(const TileIter*)nullptr));
    const Block& blk;
    Ring& ring;
    const TileIter kv;
    Pipe pipe;
    Stream kvs;

    __device__ __forceinline__ KeyTiles(const Block& b, const P& p, Ring& r)
        : blk(b), ring(r), kv(b.template key_tiles<BLOCK_N>()), pipe{kv.n},
          kvs(kv_stream<BLOCK_N, Tiles>(b, p, kv)) {}

    __device__ __forceinline__ int n() const { return pipe.n; }
    // The first key of tile t, and whether the tile needs the per-element rule
    __device__ __forceinline__ int start(int t) const { return kv.start(t, BLOCK_N); }
    __device__ __forceinline__ bool needs_mask(int t, int j0) const {
        return blk.template needs_mask<BLOCK_N>(kv, t, j0);
    }
    // Tile t into ring stage `stage` (the pipeline's load)
    __device__ __forceinline__ void load(int t, int stage) {
        kvs.load(ring.k[stage], ring.v[stage], t);
    }
    __device__ __forceinline__ void prologue() {
        pipe.prologue([&](int t, int stage) { load(t, stage); });
    }
    __device__ __forceinline__ int acquire(int t) {
        return pipe.acquire(t, [&](int tt, int stage) { load(tt, stage); });
    }
    __device__ __forceinline__ void release() { pipe.release(); }
    __device__ __forceinline__ void drain() { pipe.drain(); }
};
template <int BLOCK_N, class Tiles, class Pipe, class Block, class P, class Ring>
__device__ __forceinline__ KeyTiles<BLOCK_N, Tiles, Pipe, Block, P, Ring> key_tiles(
    const Block& blk, const P& p, Ring& ring) {
    return KeyTiles<BLOCK_N, Tiles, Pipe, Block, P, Ring>(blk, p, ring);
}

// The dQ kernels' start: the first key tiles' loads issued (Pipe, Tiles' layout) with the
// block's rows of Q and dO behind them, in one group of loads; returns the key tiles.
template <int BLOCK_M, int BLOCK_N, class Tiles, class Pipe, class Block, class P, class S>
__device__ __forceinline__ auto start_dq_tile(const Block& blk, const P& p, S& sm) {
    auto keys = key_tiles<BLOCK_N, Tiles, Pipe>(blk, p, sm.kv);
    load_query_rows<BLOCK_M, Tiles>(sm.q, blk, p.q, p.q_stride, p.d);
    load_query_rows<BLOCK_M, Tiles>(sm.dout, blk, p.dout, p.dout_stride, p.d);
    keys.prologue();
    return keys;
}

// The dQ tensor-core kernels' statistics of one warp's query rows: lse·log2 e (lse_log2) and D of
// rows wrow + 8k + g of the QueryBlock's tile from i0, k < R, where g = lane / 4 (the rows of the
// lane's C fragments: m-tile k for dmma, k = 2·m-tile + h for the 16-row m-tiles of mma and
// wgmma). A row past the tile takes +inf and 0, so that its P is 0.
template <int R, typename Acc, class P, class QB>
__device__ __forceinline__ void dq_row_stats(Acc (&lse2)[R], Acc (&D)[R], const P& p,
                                             const QB& blk, int i0, int wrow, int g) {
#pragma unroll
    for (int k = 0; k < R; ++k) {
        const int r = wrow + 8 * k + g;
        lse2[k] = lse_log2(r < blk.rows ? p.lse[blk.seq.row(i0 + r)] : Acc(0), r < blk.rows);
        D[k] = r < blk.rows ? p.D[blk.seq.row(i0 + r)] : Acc(0);
    }
}

// The opening of every kernel whose block owns one tile of rows: the forward and dQ kernels (Block
// = a QueryBlock) and the dK/dV kernels (a KeyBlock) of the simt, mma and dmma families. K derives
// from TileKernel<K> and writes body(p, block, sm) in place of run: nothing runs for a tile that
// holds no row, else body gets the block and the kernel's shared memory (K::Smem at an
// ALIGN-byte boundary: smem_as). The 8-warp wgmma kernels take it too, with ALIGN 1024.
// kSmemBytes, the bytes the host launches K with (K::kSmemBytes: cuflash/gpu/build.py), is
// smem_budget<K::Smem, ALIGN>; it is defined below the class, as NVRTC reads a constexpr
// member's initializer with the class, where K is still incomplete.
template <class K, unsigned SMEM_ALIGN = 16>
struct TileKernel {
    static const int kSmemBytes;

    template <class P>
    static __device__ __forceinline__ void run(const P& p) {
        const typename K::Block block(p);
        if (!block.active) return;
        K::body(p, block, smem_as<typename K::Smem, SMEM_ALIGN>(K::kSmemBytes));
    }
};
template <class K, unsigned SMEM_ALIGN>
const int TileKernel<K, SMEM_ALIGN>::kSmemBytes = smem_budget<typename K::Smem, SMEM_ALIGN>();

// The dK/dV kernels' loop: each query head of a KeyBlock's chunk (GroupHead `Head`), and each
// query tile of that head that sees the key tile, staged (stage_q, NT threads, Tiles) into ring
// buffer `buf` = buffers(buf), a StagedQuery, through a Pipe (CpAsyncPipeline, SyncPipeline);
// body(head, t, i0, staged) computes on tile t (first query i0).
template <int BLOCK_M, int NT, class Tiles, class Head, class Pipe, class P, class KB,
          class Buffers, class Body>
__device__ __forceinline__ void for_each_query_tile(const P& p, const KB& kb, Buffers&& buffers,
                                                    Body&& body) {
    for (int c = 0; c < p.group_chunk; ++c) {   // this block's query heads of the group
        const Head head(p, kb, c);
        const TileIter& qt = head.tiles;       // the query tiles that see this key tile
        Pipe pipe{qt.n};
        auto load_q = [&](int t, int buf) {
            const auto s = buffers(buf);
            stage_q<BLOCK_M, NT, Tiles>(s.q, s.dout, s.lse2, s.D, p, head.seq, qt.start(t, BLOCK_M));
        };
        pipe.prologue(load_q);
        for (int t = 0; t < pipe.n; ++t) {
            const int buf = pipe.acquire(t, load_q);
            body(head, t, qt.start(t, BLOCK_M), buffers(buf));
            pipe.release();
        }
        pipe.drain();
    }
}

// The dK/dV tensor-core kernels' Pᵀ and dSᵀ (softmax.cuh, bwd_probs) of one warp's 16 keys from
// key j × BLOCK_M queries from i0 (tile t of the head's list), in C fragments (rows r = keys
// g / g + 8, elements e = queries): st holds Sᵀ and becomes Pᵀ, dpt holds dPᵀ and becomes dSᵀ.
// lse2, Ds: the queries' lse·log2 e and D.
template <int BLOCK_M, class Head, class Exp>
__device__ __forceinline__ void key_tile_probs_f(float (&st)[BLOCK_M / 8][4],
                                                 float (&dpt)[BLOCK_M / 8][4], const Head& head,
                                                 int t, int i0, int j, int lane, const float* lse2,
                                                 const float* Ds, Exp exp2) {
    const int g = lane >> 2, t4 = lane & 3;
    auto ql = [&](int e) { return (e >> 1) * 8 + 2 * t4 + (e & 1); };   // query within the tile
    bwd_probs<float, 2, BLOCK_M / 4>(
        [&](int r, int e) -> float& { return st[e >> 1][2 * r + (e & 1)]; },
        [&](int r, int e) -> float& { return dpt[e >> 1][2 * r + (e & 1)]; },
        [&](int r, int e, int& i, int& jj) { i = i0 + ql(e); jj = j + g + r * 8; },
        [&](int, int e) { return lse2[ql(e)]; }, [&](int, int e) { return Ds[ql(e)]; },
        head.mask, head.score, head.needs_mask(t, i0), exp2);
}

// key_tile_probs_f, then both rounded to T as A fragments (k = queries) in pa and sa, so that the
// float accumulators die before the next products (the 16-bit kernels)
template <typename T, int BLOCK_M, class Head, class Exp>
__device__ __forceinline__ void key_tile_probs(float (&st)[BLOCK_M / 8][4],
                                               float (&dpt)[BLOCK_M / 8][4],
                                               unsigned (&pa)[BLOCK_M / 16][4],
                                               unsigned (&sa)[BLOCK_M / 16][4], const Head& head,
                                               int t, int i0, int j, int lane, const float* lse2,
                                               const float* Ds, Exp exp2) {
    key_tile_probs_f<BLOCK_M>(st, dpt, head, t, i0, j, lane, lse2, Ds, exp2);
#pragma unroll
    for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
        c_to_a<T>(pa[kk], st[2 * kk], st[2 * kk + 1]);
        c_to_a<T>(sa[kk], dpt[2 * kk], dpt[2 * kk + 1]);
    }
}

// The dQ tensor-core kernels' P and dS (bwd_probs) of one warp's 16·MT query rows (from row
// wrow of the tile from i0) × the NS 8-key n-tiles of a key tile from j0, in C fragments (rows
// r = 2·mt + h: query i0 + wrow + 16·mt + 8·h + g): s holds S and becomes P, dp holds dP and
// becomes dS. lse2, Dr: the rows' lse·log2 e and D (dq_row_stats); mask, score: the block's
// (a QueryBlock's); needs_mask: the tile's (KeyTiles::needs_mask). The mma dQ kernel (MT m-tiles
// a warp) and the wgmma dQ step (MT = 1) both take it.
template <int MT, int NS, class Mask, class Score, class Exp>
__device__ __forceinline__ void query_tile_probs(float (&s)[MT][NS][4], float (&dp)[MT][NS][4],
                                                 const Mask& mask, const Score& score,
                                                 bool needs_mask, int i0, int wrow, int j0,
                                                 int lane, const float (&lse2)[2 * MT],
                                                 const float (&Dr)[2 * MT], Exp exp2) {
    const int g = lane >> 2, t4 = lane & 3;
    bwd_probs<float, 2 * MT, 2 * NS>(
        [&](int r, int e) -> float& { return s[r >> 1][e >> 1][2 * (r & 1) + (e & 1)]; },
        [&](int r, int e) -> float& { return dp[r >> 1][e >> 1][2 * (r & 1) + (e & 1)]; },
        [&](int r, int e, int& i, int& j) {
            i = i0 + wrow + (r >> 1) * 16 + g + (r & 1) * 8;
            j = j0 + (e >> 1) * 8 + 2 * t4 + (e & 1);
        },
        [&](int r, int) { return lse2[r]; }, [&](int r, int) { return Dr[r]; }, mask, score,
        needs_mask, exp2);
}

}  // namespace cuflash

