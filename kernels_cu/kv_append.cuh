// cuflash: a decode step's append (attention_with_kvcache's k_new, v_new; params.cuh,
// AppendParams): token t of (sequence b, kv head hk) goes to row seqlens[b] + t of that head's
// cache rows, addressed as the forward reads them back (seq.cuh: Rows for a contiguous cache,
// PagedRows through block_table for a paged one). Rows at or past the capacity are not written
// (the host's checks refuse such calls; with validate=False they are dropped, never written
// outside the cache). One thread per 16 bytes of a row; grid (ceil(tokens·d / (E·256)),
// sequences·kv heads).
#pragma once
#include "common.cuh"
#include "seq.cuh"

namespace cuflash {

template <typename T, bool PAGED>
struct KvAppend {
    using Acc = typename Accum<T>::type;
    using Params = AppendParams<T, Acc>;
    static constexpr int kThreads = 256, E = 16 / sizeof(T);   // elements per 16 bytes

    // Row r of (b, hk) in a cache x with strides s
    static __device__ __forceinline__ T* cache_row(const Params& p, T* x, const Strides& s, int b,
                                                   int hk, int r) {
        if constexpr (PAGED)
            return PagedRows<T>{x + hk * s[1], p.block_table + (long long)b * p.table_stride, s[0],
                                int(s[2]), p.page_shift, p.num_pages}.at(r);
        else
            return Rows<T>{x + b * s[0] + hk * s[1], int(s[2])}.at(r);
    }

    static __device__ __forceinline__ void run(const Params& p) {
        const int bz = batch_index();
        if (bz >= p.batch * p.kv_heads) return;
        const int b = bz / p.kv_heads, hk = bz % p.kv_heads;
        const int chunks = p.d / E;
        const long long idx = (long long)blockIdx.x * kThreads + threadIdx.x;
        const int t = int(idx / chunks), c = int(idx % chunks) * E;
        if (t >= p.tokens) return;
        const int r = p.seqlens[b] + t;
        if (r < 0 || r >= p.capacity) return;
        const T* kn = p.k_new + b * p.k_new_stride[0] + hk * p.k_new_stride[1] + t * p.k_new_stride[2];
        const T* vn = p.v_new + b * p.v_new_stride[0] + hk * p.v_new_stride[1] + t * p.v_new_stride[2];
        *reinterpret_cast<uint4*>(cache_row(p, p.k_cache, p.k_cache_stride, b, hk, r) + c) =
            *reinterpret_cast<const uint4*>(kn + c);
        *reinterpret_cast<uint4*>(cache_row(p, p.v_cache, p.v_cache_stride, b, hk, r) + c) =
            *reinterpret_cast<const uint4*>(vn + c);
    }
};

}  // namespace cuflash
