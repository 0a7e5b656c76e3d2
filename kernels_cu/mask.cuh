// cuflash: which keys each query sees, at the level of tiles and of elements. The rule and the
// names are cuflash/mask.py's (read them side by side):
//
//   query i (0 <= i < T) sees key j (0 <= j < S) iff  i + diag - left <= j <= i + diag + right,
//   diag = S - T (bottom-right aligned), left/right = kUnbounded for an open side;
//   causal is right = 0; a custom mask_mod (MOD::kActive) may hide more.
//
// Kernels ask: which key tiles does a query tile visit (key_tiles), which query tiles see a key
// tile (query_tiles), does a tile need the per-element rule at all (needs_mask: tiles in the
// band's interior skip it), and the rule itself (visible). With a mask_mod the tiles come from
// lists that TileLists (below) builds before the kernel runs: tiles the mask_mod hides whole are
// not visited, tiles it shows whole skip the per-element rule (FlexAttention's block mask).
#pragma once
#include "seq.cuh"

namespace cuflash {

// No custom mask: every pair the band admits is visible.
struct NoMaskMod {
    static constexpr bool kActive = false;
    template <class P>
    __device__ __forceinline__ static bool visible(const P&, int, int, int, int) { return true; }
};

// The mask kinds a kernel is compiled for: no band, causal (left open, right = 0: the bounds are
// compile-time facts) and a general window (bounds read at run time).
enum MaskKind { kDense = 0, kCausal = 1, kWindow = 2 };

// Where a forward's keys come from: k and v as given (every sequence S_len keys), a KV cache
// whose sequence b holds seqused_k[b] keys, or a paged cache (block_table; params.cuh).
enum CacheKind { kNoCache = 0, kCache = 1, kPagedCache = 2 };

// The features a kernel is compiled with. MASK: a MaskKind. SOFTCAP: scores become c·tanh(s / c).
// ALIBI: scores lose slope·|i + diag - j|. PACKED: a PackKind, whether and how sequence lengths
// come from cu_seqlens (seq.cuh). MOD: a custom mask_mod (cuflash/mask_mod.py). SPLIT: the
// forward's split-KV (params.cuh, block.cuh QueryBlock). CACHE: a CacheKind (the forward's).
// CLUSTER: split-KV's splits (CLUSTER = num_splits) as the blocks of a thread-block cluster
// (sm_90; 1: none), which merge through their shared memory (split_combine.cuh,
// finish_cluster_split).
template <int MASK_, bool SOFTCAP_, bool ALIBI_, int PACKED_ = kUnpacked, class MOD_ = NoMaskMod,
          bool SPLIT_ = false, int CACHE_ = kNoCache, int CLUSTER_ = 1>
struct Variant {
    static constexpr int MASK = MASK_;
    static constexpr bool BAND = MASK_ != kDense, SOFTCAP = SOFTCAP_, ALIBI = ALIBI_;
    static constexpr bool SPLIT = SPLIT_;
    static constexpr int PACKED = PACKED_, CACHE = CACHE_, CLUSTER = CLUSTER_;
    static_assert(CLUSTER_ == 1 || (SPLIT_ && CLUSTER_ <= 8 && (CLUSTER_ & (CLUSTER_ - 1)) == 0),
                  "clusters of 2, 4 or 8 blocks, for split-KV");
    using Mod = MOD_;
};
using Dense = Variant<kDense, false, false>;

// The tiles one block visits: t = 0..n-1 starts at begin + t·block, or at list[t] >> 1 tiles
// when a mask_mod's list is there (its low bit: the tile is partial).
struct TileIter {
    int begin, n;
    const int* list;
    __device__ __forceinline__ int start(int t, int block) const {
        return list ? (list[t] >> 1) * block : begin + t * block;
    }
};

template <class V, class P>
struct Mask {
    const P& p;
    int b, h;        // sequence and query head (a mask_mod's b and h)
    int T_len, S_len, diag, left, right;

    __device__ __forceinline__ Mask(const P& params, const Seq& seq)
        : p(params), b(seq.b), h(seq.h), T_len(seq.T_len), S_len(seq.S_len),
          diag(seq.S_len - seq.T_len),
          left(V::MASK == kWindow ? params.window_left : kUnbounded),
          right(V::MASK == kCausal ? 0 : V::MASK == kWindow ? params.window_right : kUnbounded) {}

    // Whether a side of the band is tested: a compile-time fact of the kind. A window's open side
    // holds kUnbounded (2^30, params.cuh), which hides nothing from sequences shorter than 2^29
    // and keeps every bound below 2^31 in magnitude, so the window's rule is the same two
    // compares on every element (testing the side at run time had ptxas branch per element: the
    // window's cut tiles cost ~2.3 unmasked ones; NOTES v15).
    __device__ __forceinline__ bool has_left() const { return V::MASK == kWindow; }
    __device__ __forceinline__ bool has_right() const { return V::MASK != kDense; }

    // [lo, hi): the keys some query of rows [i0, i1) sees (rows past T count; lo >= hi: none)
    __device__ __forceinline__ int key_lo(int i0) const {
        return has_left() ? max(0, i0 + diag - left) : 0;
    }
    __device__ __forceinline__ int key_hi(int i1) const {
        return has_right() ? min(S_len, max(0, i1 + diag + right)) : S_len;
    }
    // First key tile (a multiple of block_n) and one past the last key the rows [i0, i1) visit:
    // key tiles run j0 = key_begin, key_begin + block_n, ... while j0 < key_end.
    __device__ __forceinline__ int key_begin(int i0, int block_n) const {
        return (key_lo(i0) / block_n) * block_n;
    }
    __device__ __forceinline__ int key_end(int i0, int i1) const {
        const int lo = key_lo(i0), hi = key_hi(i1);
        return hi > lo ? hi : 0;
    }
    // The same for the queries that see a key of rows [j0, j1)
    __device__ __forceinline__ int query_lo(int j0) const {
        return has_right() ? max(0, j0 - diag - right) : 0;
    }
    __device__ __forceinline__ int query_hi(int j1) const {
        return has_left() ? min(T_len, max(0, j1 - diag + left)) : T_len;
    }
    __device__ __forceinline__ int query_begin(int j0, int block_m) const {
        return (query_lo(j0) / block_m) * block_m;
    }
    __device__ __forceinline__ int query_end(int j0, int j1) const {
        const int lo = query_lo(j0), hi = query_hi(j1);
        return hi > lo ? hi : 0;
    }

    // The key tiles that query rows [i0, i1) visit (the query tile with index `outer`)
    __device__ __forceinline__ TileIter key_tiles(int i0, int i1, int block_n, int outer) const {
        if constexpr (V::Mod::kActive) return listed(outer);
        const int b = key_begin(i0, block_n), e = key_end(i0, i1);
        return TileIter{b, e > b ? (e - b + block_n - 1) / block_n : 0, nullptr};
    }
    // The query tiles that see a key of rows [j0, j1) (the key tile with index `outer`)
    __device__ __forceinline__ TileIter query_tiles(int j0, int j1, int block_m, int outer) const {
        if constexpr (V::Mod::kActive) return listed(outer);
        const int b = query_begin(j0, block_m), e = query_end(j0, j1);
        return TileIter{b, e > b ? (e - b + block_m - 1) / block_m : 0, nullptr};
    }
    __device__ __forceinline__ TileIter listed(int outer) const {
        const long long row = (long long)(p.mm_batched ? b * p.heads + h : 0) * p.mm_count_stride + outer;
        return TileIter{0, p.mm_count[row], p.mm_index + row * p.mm_inner};
    }
    // Whether tile t of `it` (rows [i0, i1) × keys [j0, j1), nominal extents) needs the
    // per-element rule
    __device__ __forceinline__ bool needs_mask(const TileIter& it, int t, int i0, int i1, int j0,
                                               int j1) const {
        if constexpr (V::Mod::kActive) return it.list[t] & 1;
        return tile_needs_mask(i0, i1, j0, j1);
    }

    // Whether some pair of rows [i0, i1) × keys [j0, j1) (nominal tile extents) is hidden.
    __device__ __forceinline__ bool tile_needs_mask(int i0, int i1, int j0, int j1) const {
        if (V::Mod::kActive || j1 > S_len || i1 > T_len) return true;
        if (has_right() && j1 - 1 > i0 + diag + right) return true;
        if (has_left() && j0 < i1 - 1 + diag - left) return true;
        return false;
    }

    // Whether query i sees key j (i < T_len; rows past the end are never stored, and the
    // backward's have P = 0 through lse = +inf, so only a mask_mod, which may index arrays by i,
    // is kept from them).
    __device__ __forceinline__ bool visible(int i, int j) const {
        bool ok = j < S_len;                            // one predicate, no branch per bound
        if (has_right()) ok &= j <= i + diag + right;
        if (has_left()) ok &= j >= i + diag - left;
        if constexpr (V::Mod::kActive) ok = ok && i < T_len && V::Mod::visible(p, b, h, i, j);
        return ok;
    }
};

// Builds a mask_mod's tile lists for a kernel with BLOCK_M × BLOCK_N tiles: one block per outer
// tile (query tiles; key tiles when BY_KEYS, for the dK/dV kernel) and batch entry (one when the
// lists are shared), evaluating every pair of every inner tile the band admits. Grid:
// (outer tiles, (sequence, query head) pairs of the lists); 256 threads. Not for packed batches.
template <class V, class P, int BLOCK_M, int BLOCK_N, bool BY_KEYS>
struct TileLists {
    static constexpr int kThreads = 256;
    static __device__ __forceinline__ void run(const P& p) {
        const int outer = blockIdx.x, bz = blockIdx.y;
        const Mask<V, P> mask(p, Seq::of<false>(p, bz / p.heads, bz % p.heads));
        const int o0 = outer * (BY_KEYS ? BLOCK_N : BLOCK_M);
        const int o1 = o0 + (BY_KEYS ? BLOCK_N : BLOCK_M);
        const int inner = BY_KEYS ? BLOCK_M : BLOCK_N;
        const int b = BY_KEYS ? mask.query_begin(o0, BLOCK_M) : mask.key_begin(o0, BLOCK_N);
        const int e = BY_KEYS ? mask.query_end(o0, o1) : mask.key_end(o0, o1);
        const long long row = (long long)bz * p.mm_count_stride + outer;
        int n = 0;
        for (int x0 = b; x0 < e; x0 += inner) {
            int seen = 0, hidden = 0;
            for (int c = threadIdx.x; c < BLOCK_M * BLOCK_N; c += kThreads) {
                const int r = c / BLOCK_N, col = c % BLOCK_N;
                const int i = BY_KEYS ? x0 + r : o0 + r, j = BY_KEYS ? o0 + col : x0 + col;
                if (mask.visible(i, j)) seen = 1; else hidden = 1;
            }
            seen = __syncthreads_or(seen);
            hidden = __syncthreads_or(hidden);
            if (seen) {
                if (threadIdx.x == 0) p.mm_index[row * p.mm_inner + n] = ((x0 / inner) << 1) | hidden;
                ++n;
            }
        }
        if (threadIdx.x == 0) p.mm_count[row] = n;
    }
};

}  // namespace cuflash
