// cuflash: which sequence and head a block works on, how many queries and keys that sequence has,
// and where its rows live: the one place that knows about packed batches (cu_seqlens),
// grouped-query attention and strided arrays.
//
// Element (sequence b, head h, row i, column c) of a q-shaped array X (q, out, dout, dq) is at
//     X + b·X_stride[0] + h·X_stride[1] + (q0 + i)·X_stride[2] + c,
// q0 = cu_seqlens_q[b] in a packed batch (whose X_stride[0] is 0), else 0. k-shaped arrays (k, v,
// dk, dv) take the kv head hk = h / group and k0 in their place. cuflash's own per-query arrays
// (lse, D, and dq_accum's rows of d) hold (b, h, i) at b·lse_stride[0] + h·lse_stride[1] + q0 + i.
//
// Grid rows: batch_index() is b·heads + a in the forward and dQ kernels, a's query head
// interleaving the kv heads under GQA (block.cuh, locate_head); the dK/dV kernels order them by
// rank in the GQA group first (KeyBlock::locate).
#pragma once
#include "params.cuh"

namespace cuflash {

// A run of rows: row r at base + r·ld (ld in elements).
template <class X>
struct Rows {
    using Elem = X;
    static constexpr bool kContiguous = true;   // row r + 1 follows row r at ld, for every r
    static constexpr bool kAppends = false;     // (pipeline.cuh, WithAppended)
    X* base;
    int ld;
    __device__ __forceinline__ X* at(int r) const { return base + size_t(r) * ld; }
};

// The rows of one (sequence, kv head) of a paged KV cache: row r is row r mod 2^shift of page
// table[r >> shift] (clamped to the pool's pages 0..pages - 1), pages page_stride elements apart
// (params.cuh). Rows r .. r + n - 1 follow each other at ld when they share a page (the kernels'
// copies keep to one page: the host keeps pages a multiple of the rows one copy reads, a tile's
// block_n or a key-split warp's share of it: cuflash/gpu/plan.py, page_rows).
template <class X>
struct PagedRows {
    using Elem = X;
    static constexpr bool kContiguous = false;
    static constexpr bool kAppends = false;
    X* base;                 // the kv head's rows in page 0
    const int* table;        // the sequence's pages
    long long page_stride;
    int ld, shift, pages;
    __device__ __forceinline__ X* at(int r) const {
        const unsigned page = min(unsigned(table[r >> shift]), unsigned(pages - 1));
        return base + page * page_stride + size_t(r & ((1 << shift) - 1)) * ld;
    }
};

// How a kernel finds its sequences (a compile-time fact, plan.Variant.packed / same_lens):
// kUnpacked, every sequence T_len queries and S_len keys at offset 0; kPacked, offsets and lengths
// from cu_seqlens_q and cu_seqlens_k; kPackedSelf, the keys' offsets are the queries'
// (cu_seqlens_k is cu_seqlens_q: packed self-attention), so each sequence's causal diagonal is
// the main one at compile time. Measured (NOTES v23): with the diagonal S_len - T_len read from
// cu_seqlens the Hopper causal forward ran 5% slower on the same work, its tensor-core waits
// longer with the same instructions; folded to 0 it runs as the dense kernel does.
enum PackKind { kUnpacked = 0, kPacked = 1, kPackedSelf = 2 };

struct Seq {
    int b, h, hk;        // sequence, query head, kv head
    int T_len, S_len;    // this sequence's queries and keys
    int q0, k0;          // its first query and key row (packed batches; 0 otherwise)
    long long lse0;      // where its (b, h) rows start in lse, D and dq_accum

    // Sequence b, query head h; PACKED a PackKind (a compile-time fact, so that kernels of equal
    // lengths keep nothing of this in registers that the parameters do not hold)
    template <int PACKED, class P>
    static __device__ __forceinline__ Seq of(const P& p, int b, int h) {
        Seq s;
        s.b = b;
        s.h = h;
        s.hk = h / p.group;
        if constexpr (PACKED != kUnpacked) {
            s.q0 = p.cu_seqlens_q[b];
            s.T_len = p.cu_seqlens_q[b + 1] - s.q0;
            if constexpr (PACKED == kPackedSelf) {
                s.k0 = s.q0;
                s.S_len = s.T_len;
            } else {
                s.k0 = p.cu_seqlens_k[b];
                s.S_len = p.cu_seqlens_k[b + 1] - s.k0;
            }
        } else {
            s.q0 = s.k0 = 0;
            s.T_len = p.T_len;
            s.S_len = p.S_len;
        }
        s.lse0 = b * p.lse_stride[0] + h * p.lse_stride[1] + s.q0;
        return s;
    }

    // The same sequence and kv head, query head h2 of the group
    template <class P>
    __device__ __forceinline__ Seq with_head(const P& p, int h2) const {
        Seq s = *this;
        s.lse0 += (long long)(h2 - h) * p.lse_stride[1];
        s.h = h2;
        return s;
    }

    // Row i of a q-shaped array; row j of a k-shaped array; the index of query i in lse and D
    template <class X>
    __device__ __forceinline__ X* q_row(X* x, const Strides& s, int i) const {
        return x + (b * s[0] + h * s[1] + (long long)(q0 + i) * s[2]);
    }
    template <class X>
    __device__ __forceinline__ X* k_row(X* x, const Strides& s, int j) const {
        return x + (b * s[0] + hk * s[1] + (long long)(k0 + j) * s[2]);
    }
    __device__ __forceinline__ long long row(int i) const { return lse0 + i; }
    // The rows of (this sequence, query head) of a q-shaped array; of its kv head of a k-shaped one
    template <class X>
    __device__ __forceinline__ Rows<X> q_rows(X* x, const Strides& s) const {
        return Rows<X>{q_row(x, s, 0), int(s[2])};
    }
    template <class X>
    __device__ __forceinline__ Rows<X> k_rows(X* x, const Strides& s) const {
        return Rows<X>{k_row(x, s, 0), int(s[2])};
    }
    // The same of a paged cache x (pages, kv heads, page rows, d): the sequence's page list from
    // the forward's block_table
    template <class X, class P>
    __device__ __forceinline__ PagedRows<X> paged_rows(X* x, const Strides& s, const P& p) const {
        return PagedRows<X>{x + hk * s[1], p.block_table + (long long)b * p.table_stride, s[0],
                            int(s[2]), p.page_shift, p.num_pages};
    }
};

}  // namespace cuflash
