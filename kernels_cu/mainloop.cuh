// cuflash: the shared parts every attention kernel is composed of, in one include: which rows a
// block works on (seq.cuh, block.cuh), which scores it sees (mask.cuh, score.cuh), the softmax
// (softmax.cuh), the staging of streamed tiles (pipeline.cuh) and the epilogues (epilogue.cuh);
// and the dK/dV kernels' loop over their query heads and query tiles (for_each_query_tile).
#pragma once
#include "block.cuh"
#include "epilogue.cuh"
#include "pipeline.cuh"
#include "softmax.cuh"

namespace cuflash {

// The dK/dV kernels' loop: each query head of a KeyBlock's chunk (GroupHead `Head`), and each
// query tile of that head that sees the key tile, staged through a Pipe (CpAsyncPipeline,
// SyncPipeline) by stage(stage, seq, i0); body(head, t, i0, stage) computes on tile t (first query
// i0) in buffer `stage`.
template <int BLOCK_M, class Head, class Pipe, class P, class KB, class Stage, class Body>
__device__ __forceinline__ void for_each_query_tile(const P& p, const KB& kb, Stage&& stage,
                                                    Body&& body) {
    for (int c = 0; c < p.group_chunk; ++c) {   // this block's query heads of the group
        const Head head(p, kb, c);
        const TileIter& qt = head.tiles;       // the query tiles that see this key tile
        Pipe pipe{qt.n};
        auto load_q = [&](int t, int buf) { stage(buf, head.seq, qt.start(t, BLOCK_M)); };
        pipe.prologue(load_q);
        for (int t = 0; t < pipe.n; ++t) {
            const int buf = pipe.acquire(t, load_q);
            body(head, t, qt.start(t, BLOCK_M), buf);
            pipe.release();
        }
        pipe.drain();
    }
}

}  // namespace cuflash

