// cuflash: staging of the streamed tiles (K/V in the forward and dQ kernels, Q/dO in the dK/dV
// kernels), written once. Both pipelines have the same shape, so a kernel's loop reads
//     pipe.prologue(load);
//     for (t = 0; t < n; ++t) { stage = pipe.acquire(t, load); ...compute on stage...; pipe.release(); }
//     pipe.drain();
// and a Tensor-Memory-Accelerator producer can later take the place of the copies behind it.
#pragma once
#include "mma.cuh"
#include "seq.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace cuflash {

// What fills a stage: rows [x0, x0 + ROWS) of the streamed arrays (those below the sequence's
// length; the rest zero) through a family's tile loader (mma.cuh MmaTiles, wgmma_tiles.cuh
// SwizzledTiles, simt_tiles.cuh SimtTiles): Tiles::thread_src<ROWS>(tile, ld) is where this thread's
// first chunk of a tile comes from, Tiles::load_from<ROWS>(smem, that, any, rows, d, ld) copies it.
//   KVStream  K and V tiles (the forward and dQ kernels)
//   stage_q   a Q and a dO tile, and lse·log2 e and D of their queries (the dK/dV kernels)
template <int ROWS, class Tiles, class S, typename T>
__device__ __forceinline__ void load_tile_at(S* s, const T* tile, int rows, int d, int ld) {
    Tiles::template load_from<ROWS>(s, Tiles::template thread_src<ROWS>(tile, ld), tile, rows, d, ld);
}

// A block's resident tiles (rows past the sequence's end zero): rows i0.. of q or dout, a
// QueryBlock's BLOCK_M queries, and rows j0.. of k or v, a KeyBlock's BLOCK_N keys
template <int ROWS, class Tiles, class S, class Block, typename T>
__device__ __forceinline__ void load_query_rows(S* s, const Block& blk, const T* x,
                                                const Strides& st, int d) {
    load_tile_at<ROWS, Tiles>(s, blk.seq.q_row(x, st, blk.i0), blk.rows, d, int(st[2]));
}
template <int ROWS, class Tiles, class S, class Block, typename T>
__device__ __forceinline__ void load_key_rows(S* s, const Block& kb, const T* x, const Strides& st,
                                              int d) {
    load_tile_at<ROWS, Tiles>(s, kb.seq.k_row(x, st, kb.j0), kb.rows, d, int(st[2]));
}

// A ring of STAGES K/V tile buffers of SIZE elements in shared memory (a kernel's Smem member):
// tile t of a KVStream in stage t % STAGES (the CUDA-core kernels: one stage)
template <typename S, int STAGES, int SIZE>
struct KVRing {
    S k[STAGES][SIZE];   // ring of K tiles
    S v[STAGES][SIZE];   // ring of V tiles
};

// The tensor-core kernels' shared-memory layouts, every tile in rows of LD elements (wgmma:
// LD = DP, 16-bit panels first, each a multiple of 1024 bytes). A kernel's Smem is one of these,
// or derives from one to add its own parts after them.
//   FwdTiles   the forward's: the resident query tile and a ring of STAGES K/V tiles
//   DqTiles    the dQ kernels': the resident Q and dO tiles and a ring of STAGES K/V tiles
//   DkdvTiles  the dK/dV kernels': the resident K and V tiles and a ring of STAGES query tiles
//              (Q, dO, and lse·log2 e and D of their queries in Acc)
template <typename T, int LD, int BLOCK_M, int BLOCK_N, int STAGES>
struct FwdTiles {
    T q[BLOCK_M * LD];                 // resident Q tile; later each warp's O rows
    KVRing<T, STAGES, BLOCK_N * LD> kv;
};
template <typename T, int LD, int BLOCK_M, int BLOCK_N, int STAGES>
struct DqTiles {
    T q[BLOCK_M * LD];                 // resident Q tile; later each warp's dQ rows
    T dout[BLOCK_M * LD];              // resident dO tile
    KVRing<T, STAGES, BLOCK_N * LD> kv;
};
template <typename T, int LD, int BLOCK_M, int BLOCK_N, int STAGES, typename Acc = float>
struct DkdvTiles {
    T k[BLOCK_N * LD];                 // resident K tile
    T v[BLOCK_N * LD];                 // resident V tile
    T q[STAGES][BLOCK_M * LD];         // ring of Q tiles
    T dout[STAGES][BLOCK_M * LD];      // ring of dO tiles
    Acc lse2[STAGES][BLOCK_M];         // lse·log2 e of the streamed queries
    Acc D[STAGES][BLOCK_M];
};

// Whether a loader copies each warp's own rows of a tile (mma.cuh KeySliceTiles::kSliced)
template <class Tiles, class = void>
struct SlicedTiles {
    static constexpr bool value = false;
};
template <class Tiles>
struct SlicedTiles<Tiles, decltype(void(Tiles::kSliced))> {
    static constexpr bool value = Tiles::kSliced;
};

// The K/V tiles of a TileIter, loaded in the order t = 0, 1, 2, ... (the pipelines' order).
// IN_ORDER (every mask but a mask_mod's tile lists) and a loader whose chunks follow one stepped
// pointer per thread: tile t + 1 starts ROWS rows after tile t, so each thread keeps its two
// source pointers and steps them, and the loop holds no stride products (under a two-blocks-per-SM
// register cap ptxas otherwise reloads and recomputes them each step). Otherwise (and for a paged
// cache's rows, R = PagedRows: each tile within one page, or with a loader of each warp's own rows
// (SlicedTiles) each warp's share within one page) each tile's address is computed when it loads
// (two pointers held across the loop would only cost registers).
template <int ROWS, class Tiles, bool IN_ORDER, class R>
struct KVStream {
    using T = typename R::Elem;
    static constexpr bool STEP = IN_ORDER && R::kContiguous && Tiles::template kStepped<ROWS>;
    R k, v;
    TileIter tiles;
    int len, d;
    T* k_next;   // this thread's source in the next tile (STEP)
    T* v_next;

    __device__ __forceinline__ KVStream(const R& k_, const R& v_, const TileIter& it, int len_,
                                        int d_)
        : k(k_), v(v_), tiles(it), len(len_), d(d_) {
        if constexpr (STEP) {
            const int j = it.start(0, ROWS);
            k_next = Tiles::template thread_src<ROWS>(k.at(j), k.ld);
            v_next = Tiles::template thread_src<ROWS>(v.at(j), v.ld);
        }
    }

    // Tile t into (sk, sv); called for t = 0, 1, 2, ... in turn. between() runs after K's copies
    // are issued and before V's (a warp-specialized producer signals K's buffer there).
    template <class S>
    __device__ __forceinline__ void load(S* sk, S* sv, int t) {
        load(sk, sv, t, [] {});
    }
    template <class S, class Between>
    __device__ __forceinline__ void load(S* sk, S* sv, int t, Between&& between) {
        const int j0 = tiles.start(t, ROWS), rows = min(ROWS, len - j0);
        if constexpr (R::kAppends) {
            if (k.mixed(j0, rows)) {   // holds keys this launch appends: row by row
                Tiles::template load_rows<ROWS>(sk, [&](int r) { return k.row(j0 + r); }, k.fresh,
                                                rows, d);
                between();
                Tiles::template load_rows<ROWS>(sv, [&](int r) { return v.row(j0 + r); }, v.fresh,
                                                rows, d);
                return;
            }
        }
        if constexpr (STEP) {
            Tiles::template load_from<ROWS>(sk, k_next, k.base, rows, d, k.ld);
            between();
            Tiles::template load_from<ROWS>(sv, v_next, v.base, rows, d, v.ld);
            k_next += size_t(ROWS) * k.ld;
            v_next += size_t(ROWS) * v.ld;
        } else if constexpr (SlicedTiles<Tiles>::value) {   // each warp finds its own rows
            Tiles::template load_at<ROWS>(sk, [&](int r) { return k.at(j0 + r); }, rows, d, k.ld);
            between();
            Tiles::template load_at<ROWS>(sv, [&](int r) { return v.at(j0 + r); }, rows, d, v.ld);
        } else {
            load_tile_at<ROWS, Tiles>(sk, k.at(j0), rows, d, k.ld);
            between();
            load_tile_at<ROWS, Tiles>(sv, v.at(j0), rows, d, v.ld);
        }
    }
};

// The rows of one (sequence, kv head) of a KV cache in a launch that appends keys (params.cuh:
// k_new, v_new): rows below `old` in the cache (R: Rows or PagedRows), rows old.. in the launch's
// new keys (fresh, row stride fresh_ld; null when this launch appends nothing). A tile that holds
// new keys is loaded row by row (KVStream::load); the others as R's.
template <class R>
struct WithAppended {
    using Elem = typename R::Elem;
    static constexpr bool kContiguous = false, kAppends = true;
    R cache;
    const Elem* fresh;
    long long fresh_ld;
    int old, ld;
    __device__ __forceinline__ Elem* at(int r) const { return cache.at(r); }
    __device__ __forceinline__ const Elem* row(int r) const {
        return r < old ? cache.at(r) : fresh + (r - old) * fresh_ld;
    }
    __device__ __forceinline__ bool mixed(int j0, int rows) const {
        return fresh != nullptr && j0 + rows > old;
    }
};

// A KV-cache launch that appends (p.k_new not null): the keys and values it appends, rows
// old .. S_len - 1 of the sequence (S_len: cache_keys, clamped to the capacity), are written into
// the cache by one block per (sequence, kv head): split 0 of the last query tile of the group's
// first query head. The other blocks of the launch read them from k_new and v_new (WithAppended),
// never from these cache rows, so the copy races with nothing; later launches find them there.
template <class Block, class P, class R>
__device__ __forceinline__ void write_appended(const Block& blk, const P& p, const R& k_rows,
                                               const R& v_rows, int old) {
    using T = typename P::Elem;
    constexpr int E = 16 / sizeof(T);
    if (blk.split != 0 || blk.i0 + blk.rows < blk.seq.T_len || blk.seq.h % p.group) return;
    const int n = blk.seq.S_len - old, chunks = p.d / E;
    const Seq& s = blk.seq;
    const T* kn = p.k_new + s.b * p.k_new_stride[0] + s.hk * p.k_new_stride[1];
    const T* vn = p.v_new + s.b * p.v_new_stride[0] + s.hk * p.v_new_stride[1];
    for (int i = threadIdx.x; i < n * chunks; i += blockDim.x) {
        const int t = i / chunks, c = (i % chunks) * E;
        // the cache is the caller's (writable) array, read through the kernels' const pointers
        *reinterpret_cast<uint4*>(const_cast<T*>(k_rows.at(old + t)) + c) =
            *reinterpret_cast<const uint4*>(kn + t * p.k_new_stride[2] + c);
        *reinterpret_cast<uint4*>(const_cast<T*>(v_rows.at(old + t)) + c) =
            *reinterpret_cast<const uint4*>(vn + t * p.v_new_stride[2] + c);
    }
}

template <class Block, class P, class R>
__device__ __forceinline__ WithAppended<R> with_appended(const Block& blk, const P& p, const R& rows,
                                                         const typename P::Elem* fresh,
                                                         const Strides& st, int old) {
    return WithAppended<R>{rows,
                           fresh ? fresh + blk.seq.b * st[0] + blk.seq.hk * st[1] : nullptr,
                           st[2], old, rows.ld};
}

// The K/V stream of a query block (block.cuh) over its key tiles `it`: the rows of its kv head,
// or of a KV cache (Block::kCache; paged: Block::kPaged), whose launch may append keys
// (write_appended, WithAppended)
template <int ROWS, class Tiles, bool IN_ORDER, class R>
__device__ __forceinline__ KVStream<ROWS, Tiles, IN_ORDER, R> make_kv_stream(
    const R& k, const R& v, const TileIter& it, int len, int d) {
    return KVStream<ROWS, Tiles, IN_ORDER, R>(k, v, it, len, d);
}
template <int ROWS, class Tiles, class Block, class P, class R>
__device__ __forceinline__ auto cache_stream(const Block& blk, const P& p, const TileIter& it,
                                             const R& k_rows, const R& v_rows) {
    const int old = max(0, min(p.seqused_k[blk.seq.b], blk.seq.S_len));
    if (p.k_new != nullptr) write_appended(blk, p, k_rows, v_rows, old);
    return make_kv_stream<ROWS, Tiles, Block::kInOrder>(
        with_appended(blk, p, k_rows, p.k_new, p.k_new_stride, old),
        with_appended(blk, p, v_rows, p.v_new, p.v_new_stride, old), it, blk.seq.S_len, p.d);
}
template <int ROWS, class Tiles, class Block, class P>
__device__ __forceinline__ auto kv_stream(const Block& blk, const P& p, const TileIter& it) {
    if constexpr (Block::kPaged)
        return cache_stream<ROWS, Tiles>(blk, p, it, blk.seq.paged_rows(p.k, p.k_stride, p),
                                         blk.seq.paged_rows(p.v, p.v_stride, p));
    else if constexpr (Block::kCache)
        return cache_stream<ROWS, Tiles>(blk, p, it, blk.seq.k_rows(p.k, p.k_stride),
                                         blk.seq.k_rows(p.v, p.v_stride));
    else
        return make_kv_stream<ROWS, Tiles, Block::kInOrder>(
            blk.seq.k_rows(p.k, p.k_stride), blk.seq.k_rows(p.v, p.v_stride), it, blk.seq.S_len,
            p.d);
}

// lse·log2 e and D of query rows i0.. (0 past the sequence's end), by NT threads' stores
template <int ROWS, int NT, typename Acc, class P>
__device__ __forceinline__ void stage_q_stats(Acc* lse2, Acc* D, const P& p, const Seq& seq,
                                              int i0) {
    const int rows = min(ROWS, seq.T_len - i0);
    for (int r = threadIdx.x; r < ROWS; r += NT) {
        lse2[r] = lse_log2(r < rows ? p.lse[seq.row(i0 + r)] : Acc(0), r < rows);
        D[r] = r < rows ? p.D[seq.row(i0 + r)] : Acc(0);
    }
}

template <int ROWS, int NT, class Tiles, class S, typename Acc, class P>
__device__ __forceinline__ void stage_q(S* sq, S* sdo, Acc* lse2, Acc* D, const P& p,
                                        const Seq& seq, int i0) {
    const int rows = min(ROWS, seq.T_len - i0), d = p.d;
    load_tile_at<ROWS, Tiles>(sq, seq.q_row(p.q, p.q_stride, i0), rows, d, int(p.q_stride[2]));
    load_tile_at<ROWS, Tiles>(sdo, seq.q_row(p.dout, p.dout_stride, i0), rows, d,
                              int(p.dout_stride[2]));
    stage_q_stats<ROWS, NT>(lse2, D, p, seq, i0);
}

// Ring of STAGES shared-memory buffers filled by cp.async from every thread: tile t lives in
// stage t % STAGES, and tiles t+1 .. t+AHEAD are in flight while tile t is computed. A stage is
// refilled AHEAD steps after its tile was acquired, so AHEAD = STAGES - 1 when a step is done
// with its tile by its end (the default), STAGES - 2 when step t still reads tile t - 1 (the
// wgmma forward's P_{t-1}·V_{t-1}); AHEAD = 0 is one buffer, loaded at the top of each step.
// ASYNC_PROXY: the tiles are read by wgmma (the async proxy), so each thread fences its copies.
// WARP_LOCAL: each warp copies only the part of a tile it reads (mma.cuh KeySliceTiles), so after
// tile 0 (whose group also holds the block's resident tile) a warp waits for its own lanes alone.
// load(tile, stage) issues one tile's copies; every step commits one group, empty or not, so
// the wait counts stay exact.
template <int STAGES, int AHEAD = STAGES - 1, bool ASYNC_PROXY = false, bool WARP_LOCAL = false>
struct CpAsyncPipeline {
    static_assert(AHEAD >= 0 && AHEAD < STAGES, "0 <= AHEAD < STAGES");
    int n;   // tiles this block streams

    // Groups 0..AHEAD-1 hold tiles 0..AHEAD-1; copies the caller issued before (a resident tile)
    // ride in group 0 (or in a group of their own when AHEAD = 0).
    template <class Load>
    __device__ __forceinline__ void prologue(Load&& load) {
#pragma unroll
        for (int t = 0; t < AHEAD; ++t) {
            if (t < n) load(t, t);
            cp_async_commit();
        }
        if constexpr (AHEAD == 0) cp_async_commit();
    }

    // Tile t has landed and every thread sees it; tile t + AHEAD starts loading. Returns t's stage.
    template <class Load>
    __device__ __forceinline__ int acquire(int t, Load&& load) {
        if constexpr (AHEAD == 0) {
            load(t, 0);
            cp_async_commit();
            cp_async_wait<0>();
        } else {
            cp_async_wait<AHEAD - 1>();
        }
        if constexpr (ASYNC_PROXY) fence_proxy_async();
        if constexpr (WARP_LOCAL) {
            if (t > 0)
                __syncwarp();
            else
                __syncthreads();
        } else {
            __syncthreads();
        }
        if constexpr (AHEAD > 0) {
            if (t + AHEAD < n) load(t + AHEAD, (t + AHEAD) % STAGES);
            cp_async_commit();
        }
        return t % STAGES;
    }

    // End of a step: with one buffer, every thread is done with it before the next acquire.
    __device__ __forceinline__ void release() {
        if constexpr (AHEAD == 0) {
            if constexpr (WARP_LOCAL)
                __syncwarp();
            else
                __syncthreads();
        }
    }

    // After the loop: every copy has landed (also the resident tile's when n = 0) and every
    // thread is past its last read of the ring.
    __device__ __forceinline__ void drain() {
        cp_async_wait<0>();
        __syncthreads();
    }
};

// One buffer loaded synchronously (the CUDA-core kernels convert tiles to Acc as they load them).
struct SyncPipeline {
    int n;
    template <class Load> __device__ __forceinline__ void prologue(Load&&) {}
    template <class Load>
    __device__ __forceinline__ int acquire(int t, Load&& load) {
        __syncthreads();   // every thread is done with the previous tile
        load(t, 0);
        __syncthreads();
        return 0;
    }
    __device__ __forceinline__ void release() {}
    __device__ __forceinline__ void drain() { __syncthreads(); }
};

}  // namespace cuflash
