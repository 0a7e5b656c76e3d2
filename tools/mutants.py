"""Curated mutation testing: each mutation below is applied alone to a temporary copy of the
repository, the CPU tests that should catch it run there (``pytest -x``), and a mutation whose
tests still pass is reported as a survivor. Exit status 1 if any survives (or a mutation no
longer applies: its text changed, so the list needs updating), else 0.

    python tools/mutants.py            # the CPU mutations (make mutants)
    python tools/mutants.py --gpu      # also those of GPU-only code (on a GPU machine)
    python tools/mutants.py --list     # print the list
    python tools/mutants.py NAME ...   # only these

Each entry: the file, the exact text replaced (it must occur once), its replacement, the tests
that must fail, and why the mutation matters. The list follows issue 18's audit (comparator,
naive yardstick, IO-model constants, tile ranges, twin rounding) plus a few more.

Result at the commit that added this script: see NOTES.md ("Mutation testing").
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str
    gpu: bool = False


def M(name, path, old, new, tests, why, gpu=False):
    return Mutant(name, path, old, new, tuple(tests.split()), why, gpu)


CHECKERS = "tests/test_checkers.py"
NAIVE = "tests/test_naive.py"
IO = "tests/test_iomodel.py tests/test_iomodel_l2.py tests/test_twin_io.py " \
     "tests/test_iomodel_staged.py"
LAYOUTS = "tests/test_layout_experiments.py"
KV_EXP = "tests/test_kv_cache_experiments.py"

MUTANTS = [
    # -- the experiment points run what the library's default runs
    M("points_backward_unstaged", "cuflash/experiments/points.py",
      "precision=precision, staged=staged[1], **fields)", "precision=precision, **fields)",
      "tests/test_precision_experiments.py", "float32 backward points leave out the API's "
      "warpgroup rule: precision.yaml timed the mma.sync pair (call 182)"),
    # -- the comparator and the criterion
    M("rel_error_zero", "cuflash/oracle.py",
      "return float(err / denom) if denom > 0 else float(err)", "return 0.0",
      CHECKERS, "the comparator returns 0: every check passes"),
    M("rel_error_div100", "cuflash/oracle.py",
      "return float(err / denom) if denom > 0 else float(err)",
      "return float(err / denom / 100) if denom > 0 else float(err / 100)",
      CHECKERS, "the comparator 100x too lenient"),
    M("normwise_zero", "cuflash/oracle.py",
      "return err / norm if norm > 0 else err", "return 0.0",
      CHECKERS, "the normwise comparator returns 0"),
    M("bias_zero", "cuflash/oracle.py",
      "return float((a - r) @ r) / rr if rr > 0 else 0.0", "return 0.0",
      CHECKERS, "the scale-bias comparator returns 0"),
    M("row_error_global", "cuflash/oracle.py",
      "denom = norm + tau * norm.max()", "denom = norm.max() + 0 * norm",
      CHECKERS, "the row comparator divides by the largest row"),
    M("row_error_underflow_x1000", "cuflash/oracle.py",
      "+ tiny * np.sqrt(r.shape[-1])", "+ 1000 * tiny * np.sqrt(r.shape[-1])",
      CHECKERS, "the row comparator's underflow term 1000x too large: small rows go unseen"),
    M("roundoff_bounds_x3", "tests/helpers.py",
      'ROUNDOFF = {"max": 4.0, "normwise": 2.0, "bias": 1.0, "row": 4.0}',
      'ROUNDOFF = {"max": 12.0, "normwise": 6.0, "bias": 3.0, "row": 12.0}',
      CHECKERS, "16-bit roundoff bounds widened 3x"),
    M("lse_bound_x100", "tests/helpers.py", "LSE_16 = 32.0", "LSE_16 = 3200.0",
      CHECKERS, "the float32-level lse bound widened 100x"),
    M("zero_rows_x100", "tests/helpers.py", "ZERO_ROWS = 1024.0", "ZERO_ROWS = 102400.0",
      CHECKERS, "rows the oracle has at 0 allowed 100x more"),
    # -- the twin
    M("twin_no_D", "cuflash/twin.py", "ds = p * (dp - D_i[..., None])", "ds = p * dp",
      "tests/test_backward.py::test_backward_matches_oracle",
      "the backward's D term dropped"),
    M("twin_D_0.1pct", "cuflash/twin.py", "prod.sum(axis=-1))",
      "prod.sum(axis=-1) * acc.type(1.001))",
      "tests/test_backward.py::test_backward_matches_oracle", "D off by 0.1%"),
    M("twin_round_noop", "cuflash/twin.py",
      "return x.astype(dtype).astype(acc) if np.dtype(dtype).itemsize < 4 else x", "return x",
      "tests/test_forward.py::test_twin_rounds_p_like_the_kernels",
      "the twin no longer rounds P and dS to the input dtype (as the kernels do)"),
    M("twin_drop_last_key", "cuflash/twin.py",
      "seen = self.mask.visible(i, j, self.T, self.S)",
      "seen = self.mask.visible(i, j, self.T, self.S) & (j != self.S - 1)",
      "tests/test_forward.py::test_forward_matches_oracle",
      "key S-1 hidden on the tiles the mask cuts"),
    M("twin_all_query_tiles", "cuflash/twin.py",
      "for i0 in mask.query_tiles(j0, j1, T, S, block_m):", "for i0 in range(0, T, block_m):",
      "tests/test_twin_io.py",
      "the backward visits every query tile (right answer, wrong bytes)"),
    M("twin_lse_log1.02", "cuflash/twin.py",
      "(m + np.log(l)).astype(acc))", "(m + np.log(l * 1.02)).astype(acc))",
      "tests/test_forward.py::test_forward_matches_oracle", "lse off by log 1.02"),
    M("twin_out_1pct", "cuflash/twin.py",
      "parts.append((np.where(l[..., None] == 0, 0, o / l[..., None]).astype(acc),",
      "parts.append((np.where(l[..., None] == 0, 0, 1.01 * o / l[..., None]).astype(acc),",
      "tests/test_forward.py::test_forward_matches_oracle", "output scaled by 1%"),
    # -- broadcast gradients
    M("unbroadcast_f16_sum", "cuflash/checks.py",
      "acc = g.astype(np.float64 if g.dtype == np.float64 else np.float32).sum(",
      "acc = g.sum(", "tests/test_backward.py::test_broadcast_gradients_sum_over_repeated_dims",
      "broadcast gradients summed in the input dtype (float16)"),
    # -- the naive yardstick (16-bit path only: the float64 oracle calls the same code)
    M("naive_dS_x1.05", "cuflash/naive.py",
      "dp *= xp.asarray(problem.scale, dtype=dt)",
      "dp *= xp.asarray(problem.scale * (1.05 if dt.itemsize < 4 else 1), dtype=dt)",
      NAIVE, "naive 16-bit dS 5% too large"),
    M("naive_D_f16", "cuflash/naive.py",
      "D = (p * dp).sum(axis=-1, keepdims=True, dtype=acc)",
      "D = (p * dp).sum(axis=-1, keepdims=True, dtype=np.float16 if dt.itemsize < 8 else acc)",
      NAIVE, "naive D summed in float16"),
    M("naive_lse_log1.02", "cuflash/naive.py",
      "lse = (m.astype(acc) + xp.log(l))[..., 0]",
      "lse = (m.astype(acc) + xp.log(l * (1.02 if dt.itemsize < 4 else 1)))[..., 0]",
      NAIVE, "naive 16-bit lse off by log 1.02"),
    # -- the IO model
    M("io_l2_64MB", "cuflash/device.py",
      'Device("sm_90", 232448, 233472, 50 * 10**6, 132,',
      'Device("sm_90", 232448, 233472, 64 * 10**6, 132,', IO, "L2 size 64 MB (the assumed H200's)"),
    M("io_resident_132", "cuflash/iomodel.py",
      'RESIDENT_BLOCKS = 2 * device.assumed("sm_90").sm_count',
      'RESIDENT_BLOCKS = device.assumed("sm_90").sm_count', IO, "132 resident blocks"),
    M("io_f32_extra_1_1", "cuflash/iomodel.py", "_F32_MATMUL_EXTRA = (2, 2)",
      "_F32_MATMUL_EXTRA = (1, 1)", IO, "float32 copies of 16-bit products cost (1, 1) passes"),
    M("io_naive_bwd_one_read_less", "cuflash/iomodel.py",
      "reads, writes = 1 + 3 + 1 + 2 + 1 + 1 + 1, 1 + 1 + 1 + 1 + 1",
      "reads, writes = 1 + 3 + 1 + 2 + 1 + 1 + 0, 1 + 1 + 1 + 1 + 1", IO,
      "one T×S read fewer in naive_backward"),
    M("io_naive_no_mask_pass", "cuflash/iomodel.py",
      "reads, writes, mask = reads + 1, writes + 1, T * S",
      "reads, writes, mask = reads, writes, 0", IO, "naive causal-mask pass not counted"),
    M("io_kv_rows_full_tiles", "cuflash/iomodel.py",
      "return len(tiles) * block if whole else min(n, tiles[-1] + block) - tiles[0]",
      "return len(tiles) * block", IO, "a partial K/V tile counted as full"),
    M("io_staging_unpadded", "cuflash/iomodel.py",
      "batch * sum(padded_keys(n, t) for n, t in operands) * self.row_bytes",
      "batch * sum(n for n, t in operands) * self.row_bytes", IO,
      "the staging pass writes S rows, not whole tiles"),
    M("io_staged_rows_as_given", "cuflash/iomodel.py",
      "        return 4 * row_floats(head_dim_pad(D, kernel), carries_lo(kernel))",
      "        return 4 * d", IO, "the float16-product kernels read float32 rows"),
    M("io_dq_on_the_dkdv_tile", "cuflash/iomodel.py",
      "    return dq_tile(tile, kernel_head_dim(d))", "    return tile", IO,
      "the dQ pass counted on the dK/dV kernel's tile"),
    # -- the mask rule (read by the twin, naive and the IO model)
    M("mask_query_lo_0", "cuflash/mask.py",
      "lo = 0 if self.right is None else max(0, j0 - diag - self.right)", "lo = 0",
      "tests/test_mask.py tests/test_twin_io.py", "query_range starts at 0 (q_start = 0)"),
    # -- issue 12's experiments (cuflash/experiments/layouts.py)
    M("layouts_padded_flops", "cuflash/experiments/layouts.py",
      "    seqs = sequences(point)\n    if seqs is None:\n        return variants.flops(point)",
      "    seqs = sequences(point)\n    if point.layout == \"padded\":\n"
      "        b, h, T, S = run_shape(point)\n"
      "        return iomodel.attention_flops(b * h, T, S, point.head_dim, variants.band(point),"
      " point.pass_ == \"backward\")\n    if seqs is None:\n        return variants.flops(point)",
      LAYOUTS, "padded rows' FLOPs counted over the padded batch (pads included)"),
    M("layouts_row_flops", "cuflash/experiments/layouts.py",
      "return variants.flops(point, work=seqs.model_mask(variants.band(point), point.seq_len))",
      "return variants.flops(point)", LAYOUTS,
      "a packed batch's FLOPs counted as one causal row of all its tokens"),
    M("layouts_materialized_kv_once", "cuflash/experiments/layouts.py",
      "    if materialized(point):\n        kv *= point.group",
      "    if False:\n        kv *= point.group", LAYOUTS,
      "the materialized K/V counted once (Hkv heads) instead of G times"),
    M("layouts_packed_one_problem", "cuflash/experiments/layouts.py",
      "    if packed_varlen(point):\n        lengths = sequences(point).in_row(point.seq_len)",
      "    if False:\n        lengths = sequences(point).in_row(point.seq_len)", LAYOUTS,
      "a packed batch's bytes modelled as one causal row, not per sequence"),
    M("layouts_no_fold", "cuflash/experiments/layouts.py",
      "    if not materialized(point):\n        return tuple(grads)",
      "    if True:\n        return tuple(grads)", LAYOUTS,
      "materialized dK/dV not summed back to the kv heads"),
    # -- issue 14's experiments (cuflash/experiments/decode.py, readbw.py)
    M("decode_lengths_floor", "cuflash/experiments/decode.py",
      "return tuple(math.ceil(fr[b % len(fr)] * S) for b in range(batch))",
      "return tuple(max(1, int(fr[b % len(fr)] * S)) for b in range(batch))", KV_EXP,
      "a mix's lengths rounded down (tokens and bytes of every mixed point off)"),
    M("decode_pool_spare_page", "cuflash/experiments/decode.py",
      "pool = kvcache.PagedKVCache(num_pages=pages_needed(L, P),",
      "pool = kvcache.PagedKVCache(num_pages=pages_needed(L, P) + 1,", KV_EXP,
      "the paged pool one page larger than the pages in use (cache_bytes overstated)"),
    M("decode_kv_bytes_query_heads", "cuflash/experiments/decode.py",
      "return 2 * sum(lengths(point)) * kv_heads(point) * point.head_dim * _itemsize(point)",
      "return 2 * sum(lengths(point)) * point.heads * point.head_dim * _itemsize(point)",
      KV_EXP, "K/V of the tokens counted per query head (GQA's saving lost)"),
    M("decode_written_without_lse", "cuflash/experiments/decode.py",
      "written = B * Hq * Tq * d * e + B * Hq * Tq * acc + 2 * B * Hkv * Tq * d * e",
      "written = B * Hq * Tq * d * e + 2 * B * Hkv * Tq * d * e", KV_EXP,
      "lse's writes counted as reads"),
    M("decode_naive_appends_one_late", "cuflash/experiments/decode.py",
      "pos = seqlens.astype(np.int64)[:, None] + np.arange(Tq)[None, :]",
      "pos = seqlens.astype(np.int64)[:, None] + np.arange(Tq)[None, :] + 1", KV_EXP,
      "naive's new tokens stored one slot late"),
    M("readbw_host_skips_a_word", "cuflash/experiments/readbw.py",
      "return int(np.bitwise_xor.reduce(x, initial=np.uint32(0)))",
      "return int(np.bitwise_xor.reduce(x[:-1], initial=np.uint32(0)))", KV_EXP,
      "the CPU read pass skips the last word"),
    # -- split-KV, GQA ranks, the device description
    M("split_share_floor", "cuflash/mask.py",
      "    per = -(-n // splits)", "    per = max(1, n // splits)",
      "tests/test_split_kv.py", "split-KV shares tiles by floor(n / splits): the last tiles are dropped"),
    M("split_merge_unweighted", "cuflash/twin.py",
      "    o = sum(np.exp(lse_s - lse_safe)[..., None] * o_s for o_s, lse_s in parts)",
      "    o = sum(o_s for o_s, lse_s in parts) / len(parts)",
      "tests/test_split_kv.py", "the merge averages the splits' outputs instead of weighting them by their lse"),
    M("group_ranks_always_one", "cuflash/gpu/ops.py",
      "    return next(r for r in range(1, group + 1)\n"
      "                if group % r == 0 and (2 * blocks_per_rank * r >= 3 * wave or r == group))",
      "    return 1",
      "tests/test_gqa.py", "the GQA backward never shares a kv head's tile between blocks"),
    M("device_hopper_by_name", "cuflash/device.py",
      '    return arch in ("sm_90", "sm_90a")', '    return arch.startswith("sm_8")',
      "tests/test_device.py tests/test_kernel_plan.py", "the Hopper test names the wrong architectures"),
    M("default_dq_atomic_on_hopper", "cuflash/tile.py",
      '    return bool(deterministic) or tile.kernel in ("wgmma", F16_SCALED, *F16_SPLIT, *PRODUCTS)',
      '    return bool(deterministic) or tile.kernel in (F16_SCALED, *F16_SPLIT, *PRODUCTS)',
      "tests/test_kernel_plan.py",
      "deterministic=False's default on Hopper runs the slower atomic-dQ ws kernel (v20)"),
    M("default_x3_backward_atomic", "cuflash/tile.py",
      '    return bool(deterministic) or tile.kernel in ("wgmma", F16_SCALED, *F16_SPLIT, *PRODUCTS)',
      '    return bool(deterministic) or tile.kernel in ("wgmma", F16_SCALED, *PRODUCTS)',
      "tests/test_wgmma_f16x3.py",
      "deterministic=False's default on sm_90 asks the x3 pair for atomic dQ, which it refuses"),
    M("x3_default_for_packed_batches", "cuflash/api.py",
      "    staged = dense and float32_wgmma_pays(prec, d, p.S, backward=True)",
      "    staged = float32_wgmma_pays(prec, d, p.S, backward=True)",
      "tests/test_wgmma_f16x3.py",
      "a packed batch's backward takes the x3 pair by default, which refuses packed batches"),
    M("f16x1_runs_three_products", "cuflash/gpu/build.py",
      "    if F16_SPLIT.get(fam, 3) != 3:", "    if False:",
      "tests/test_wgmma_f16x1.py::test_family_tiles_and_kernel_type",
      "kernel='wgmma_f16x1' compiles the x3 kernels' default, three products: 'highest' in "
      "'tf32''s name"),
    M("ab_speed_backward_default_precision", "tools/ab_speed.py",
      '            bwd_kw.setdefault("precision", prec)', "            pass",
      "tests/test_ab_speed.py::test_cell_precision_reaches_the_backward",
      "an A/B of float32:tf32 times the backward at its default precision, 'highest' (call 179)"),
    M("ab_speed_env_from_cwd", "tools/ab_speed.py",
      'ENV_CODE = ("import sys; sys.path.insert(0, sys.argv[1]); from',
      'ENV_CODE = ("import sys; from',
      "tests/test_ab_speed.py::test_env_line_names_where_it_ran",
      "the A/B's environment line from whatever cuflash the working folder holds, not the tree"),
    M("f16x1_dq_tile_transposed", "cuflash/tile.py",
      '    return 64 if kernel == "wgmma_f16x1" else x3_backward_block_m(head_dim)',
      "    return x3_backward_block_m(head_dim)",
      "tests/test_wgmma_f16x1.py::test_family_tiles_and_kernel_type",
      "x1's dQ kernel takes the dK/dV tile transposed at d = 128 (32 keys), as x3's must"),
    M("x3_default_any_length", "cuflash/tile.py",
      "    return head_dim <= widest and seq_len_k >= WGMMA_F16X3_MIN_KEYS",
      "    return head_dim <= widest",
      "tests/test_wgmma_f16x3.py",
      "the x3 kernels become the default at lengths where they were not measured to pay"),
    # -- GPU-only code (run with --gpu on a GPU machine)
    M("gpu_ds_tiles_off_the_swizzle_atom", "kernels_cu/flash_bwd_wgmma_ws.cu",
      "    alignas(1024) T ds[2][N * BLOCK_M * 64];", "    alignas(128) T ds[2][N * BLOCK_M * 64];",
      "tests/test_gpu_kernels.py::test_tiles_against_oracle",
      "the atomic-dQ kernel's dS tiles off a 1024-byte swizzle atom (v20, call 61: the 3-stage "
      "tile's dQ wrong, memcheck and racecheck clean)", gpu=True),
    M("gpu_drop_last_key", "kernels_cu/mask.cuh",
      "        bool ok = j < S_len;                            // one predicate, no branch per bound",
      "        bool ok = j < S_len - 1;",
      "tests/test_gpu_kernels.py::test_tiles_against_oracle",
      "every kernel hides key S-1 (on the tiles that need the per-element rule)", gpu=True),
    M("gpu_batch_index_without_z", "kernels_cu/params.cuh",
      "return blockIdx.z * gridDim.y + blockIdx.y;", "return blockIdx.y;",
      "tests/test_gpu_kernels.py::test_batch_beyond_grid_limit",
      "blocks past gridDim.y work on the first 65535 heads again", gpu=True),
    M("gpu_null_stream", "cuflash/gpu/ops.py",
      "_driver().launchKernel(fn.ptr, gx, gy, gz, threads, 1, 1, smem, stream,",
      "_driver().launchKernel(fn.ptr, gx, gy, gz, threads, 1, 1, smem, 0,",
      "tests/test_gpu_kernels.py::test_runs_on_current_stream",
      "kernels launched on the null stream, not the current one", gpu=True),
    M("gpu_wgmma_fwd_rows_of_warpgroup_0", "kernels_cu/wgmma_forward.cuh",
      ": blk(b), sQw(sq + wg * 64 * PANEL),", ": blk(b), sQw(sq),",
      "tests/test_gpu_kernels.py::test_tiles_against_oracle",
      "every warpgroup of a wgmma forward multiplies the first 64 query rows", gpu=True),
    M("gpu_wgmma_fwd_no_rescale", "kernels_cu/wgmma_forward.cuh",
      "for (int e = 0; e < 4; ++e) o[0][n][e] *= alpha[e >> 1];",
      "for (int e = 0; e < 4; ++e) o[0][n][e] *= 1.f;",
      "tests/test_gpu_kernels.py::test_tiles_against_oracle",
      "O is not rescaled when the running max grows (both wgmma forwards)", gpu=True),
    M("gpu_dmma_abt_k_orders_disagree", "kernels_cu/dmma.cuh",
      "const double* b_row = B + g * LDS + c0;", "const double* b_row = B + g * LDS + 4 * t;",
      "tests/test_gpu_kernels.py::test_tiles_against_oracle",
      "the m16n8k16 Q·Kᵀ pairs A's k-step kk with another column of K (v78)", gpu=True),
    M("gpu_drows_m16_columns", "kernels_cu/dmma.cuh",
      "16 * q + 8 * (t >> 1) + 2 * (t & 1) + 4 * h,", "16 * q + 8 * (t >> 1) + 2 * (t & 1) + 2 * h,",
      "tests/test_gpu_kernels.py::test_tiles_against_oracle",
      "the m16n8k16 accumulator's second pair of columns is stored two columns off (v78)",
      gpu=True),
    M("gpu_lazy_rescale_only_first_tile", "kernels_cu/softmax.cuh",
      "over |= t[r] > m[r] + Acc(SLACK);", "over |= m[r] == -Num<Acc>::inf() && t[r] > m[r];",
      "tests/test_forward.py::test_running_max_climbs",
      "the forwards of a slack (float64's, the wgmma forwards) rescale O and l only on a row's "
      "first key tile, never when its max moves by more than the slack later (v79, v81, v82; "
      "random inputs rarely move it that far)", gpu=True),
    M("gpu_row_max_skips_last", "kernels_cu/softmax.cuh",
      "for (int e = 0; e < E; ++e) mx[e % W]", "for (int e = 0; e < E - 1; ++e) mx[e % W]",
      "tests/test_forward.py::test_running_max_leaps",
      "each thread's row max leaves out its last element (v83's running maxima): P of a key "
      "above the max by more than 2^7 overflows", gpu=True),
    M("gpu_ws_consumer_turns_share_a_barrier", "kernels_cu/flash_fwd_wgmma_ws.cu",
      "next_turn{1 + (c_ + 1) % NC, 256}", "next_turn{1 + c_, 256}",
      "tests/test_gpu_kernels.py::test_tiles_against_oracle",
      "each consumer arrives on its own turn barrier: the first sync never completes (the test "
      "must end by the mutant runner's timeout, not pass)", gpu=True),
    # -- float32's precisions (issue 15)
    M("highest_drops_small_terms", "cuflash/precision.py",
      "small = ((as_ @ bb).astype(f, copy=False) + (ab @ bs).astype(f, copy=False)).astype(f)",
      "small = 0 * (as_ @ bb)",
      "tests/test_tf32.py", "'highest' computes one TF32 product (the twin's and naive's)"),
    M("tf32_rounds_toward_zero", "cuflash/precision.py",
      "rounded = (b + np.uint32(0x1000)) & np.uint32(0xFFFFE000)",
      "rounded = b & np.uint32(0xFFFFE000)",
      "tests/test_tf32.py", "TF32 operands truncated, not rounded to nearest as cvt.rna"),
    M("gpu_tf32x3_one_product", "kernels_cu/tf32.cuh",
      "mma1688_tf32(c, a[0].small, a[1].small, a[2].small, a[3].small, b[0].big, b[1].big);",
      "mma1688_tf32(c, a[0].small, a[1].small, a[2].small, a[3].small, 0u, 0u);",
      "tests/test_tf32.py::test_highest_is_three_products",
      "3xTF32 loses its small·big term", gpu=True),
    M("gpu_tf32x3_chained_sums", "kernels_cu/tf32.cuh",
      "mma1688<N, true>(s[mt][n], a[mt], b);", "mma1688<N>(s[mt][n], a[mt], b);",
      "tests/test_tf32.py::test_tf32_tiles_against_oracle",
      "Q·Kᵀ's k-steps summed in the tensor core's truncating accumulator", gpu=True),
    M("gpu_alpha_an_ulp_off", "kernels_cu/softmax.cuh",
      "                alpha[r] = exp2(m[r] - ref);",
      "                alpha[r] = exp2(m[r] - ref) * Acc(1.0000001);",
      "tests/test_long_keys.py::test_long_keys_through_every_family[simt-float32-full] "
      "tests/test_long_keys.py::test_long_keys_tf32_forward",
      "alpha an ulp above 1 while the max stands: l and lse drift by an ulp per key tile, as "
      "before NOTES v24", gpu=True),
    M("gpu_simt_running_sum", "kernels_cu/simt_tiles.cuh",
      """            Acc t[TR][JC * VEC];
            sum_cols<TRANS_P, LDP, LDX, N, JC>(P, X, j0, t);
#pragma unroll
            for (int i = 0; i < TR; ++i) {
                const Acc s = f ? f[row(i)] : Acc(1);
#pragma unroll
                for (int c = 0; c < JC * VEC; ++c) {
                    Acc& y = o[i][j0 * VEC + c];
                    y = f ? fma(y, s, t[i][c]) : y + t[i][c];
                }
            }""",
      """#pragma unroll
            for (int i = 0; i < TR; ++i)
#pragma unroll
                for (int c = 0; c < JC * VEC; ++c) if (f) o[i][j0 * VEC + c] *= f[row(i)];
            for (int n = 0; n < N; ++n)
#pragma unroll
                for (int i = 0; i < TR; ++i)
#pragma unroll
                    for (int c = 0; c < JC * VEC; ++c)
                        o[i][j0 * VEC + c] += (TRANS_P ? P[n * LDP + row(i)] : P[row(i) * LDP + n])
                                              * X[n * LDX + col(j0 + c / VEC) + c % VEC];""",
      "tests/test_long_keys.py::test_long_sequence_float32",
      "the CUDA-core kernels' sums fed one product at a time into the running accumulator, as "
      "before NOTES v25", gpu=True),
    M("gpu_packed_self_keys_at_zero", "kernels_cu/seq.cuh",
      "                s.k0 = s.q0;", "                s.k0 = 0;",
      "tests/test_varlen.py::test_varlen_matches_oracle",
      "packed self-attention reads every sequence's keys from the batch's first rows", gpu=True),
    # -- split-KV's merge in the kernels (NOTES v29)
    M("gpu_split_merge_weights_unnormalized", "kernels_cu/split_combine.cuh",
      "Num<Acc>::exp2((w[s] - lse) * Acc(kLog2e));", "Num<Acc>::exp2((w[s] - m) * Acc(kLog2e));",
      "tests/test_split_kv.py::test_split_kv_many_splits",
      "the merge weighs each split by e^(lse_s - max) instead of e^(lse_s - lse)", gpu=True),
    M("gpu_split_merge_first_batch_only", "kernels_cu/split_combine.cuh",
      "const char* x16 = mine + buf * half * 512;", "const char* x16 = mine;",
      "tests/test_split_kv.py::test_split_kv_many_splits",
      "every batch of staged splits is summed from the first buffer (stale or racing chunks "
      "past the first batch)", gpu=True),
    M("gpu_split_cap_ignored", "cuflash/gpu/ops.py",
      "cap = _merge_split_cap(self.spec, self.acc.itemsize)", "cap = 256",
      "tests/test_split_kv.py::test_split_merge_room_of_small_tiles",
      "automatic splits past what a small tile's merge holds (the kernel traps)", gpu=True),
    # -- the warp-specialized forward's copy-engine loads (NOTES v30)
    M("tma_stride_check_dropped", "cuflash/gpu/tma.py",
      "if b <= 0 or b % 16 or b >= _STRIDE_LIMIT:", "if b < 0:",
      "tests/test_kernel_plan.py::test_tensor_map_shapes",
      "maps for arrays the copy engine cannot read (a broadcast axis, 148-byte rows)"),
    M("tma_map_field_misplaced", "cuflash/gpu/params.py",
      "_ALIGN = {6: 64}", "_ALIGN = {6: 8}",
      "tests/test_kernel_plan.py::test_forward_params_hold_tensor_maps_first",
      "tensor-map fields placed at 8-byte alignment (the struct's layout drifts from C++'s)"),
    M("gpu_tma_bwd_query_head", "kernels_cu/flash_bwd_wgmma_ws.cu",
      "                                               i0, head.seq.h, head.seq.b, full);",
      "                                               i0, head.seq.hk, head.seq.b, full);",
      "tests/test_gpu_kernels.py::test_ws_backward_loads_through_tensor_maps",
      "the dK/dV kernel's Q tiles of the kv head, not of the query head (GQA)", gpu=True),
    M("gpu_bulk_dq_unswizzled", "kernels_cu/tma.cuh",
      "return row * 128 + ((((col >> 2) ^ row) & 7) << 4) + (col & 3) * 4;",
      "return row * 128 + (((col >> 2) & 7) << 4) + (col & 3) * 4;",
      "tests/test_gpu_kernels.py::test_ws_backward_loads_through_tensor_maps",
      "atomic dQ's float panel stored unswizzled: the copy engine adds it to the wrong columns",
      gpu=True),
    M("gpu_tf32_bwd_pair_handover", "kernels_cu/flash_bwd_tf32.cu",
      "const float4 x = handover[n * 32];",
      "const float4 x = handover[0];",
      "tests/test_tf32.py::test_tf32_backward_highest_is_three_products",
      "the dP-warp of a pair takes the first n-tile of Sᵀ for every n-tile (d = 128)",
      gpu=True),
    M("gpu_tf32_bwd_one_product", "cuflash/gpu/build.py",
      'args.append(f"cuflash::Tf32Products<{PRODUCTS[fam]}>")',
      'args.append(f"cuflash::Tf32Products<{1 if spec.role != \'fwd\' else PRODUCTS[fam]}>")',
      "tests/test_tf32.py::test_tf32_backward_highest_is_three_products",
      "the 'highest' backward runs one TF32 product where three were asked", gpu=True),
    M("gpu_wgmma_tf32_slot_order", "kernels_cu/wgmma_forward.cuh",
      "a[1] = to_tf32(s[kk][2]);\n        a[2] = to_tf32(s[kk][1]);",
      "a[1] = to_tf32(s[kk][1]);\n        a[2] = to_tf32(s[kk][2]);",
      "tests/test_wgmma_tf32.py::test_wgmma_tf32_against_oracle",
      "P's A fragment in S's own order: keys 2t + 1 meet V's rows 2t + 4 (tf32_stage.KEY_OF_SLOT)",
      gpu=True),
    M("gpu_wgmma_tf32_q_truncated", "kernels_cu/flash_fwd_wgmma_tf32.cu",
      "round_tf32_tile<BLOCK_M, DP, NT>(sm.q);", "(void)0;",
      "tests/test_wgmma_tf32.py::test_wgmma_tf32_matches_the_mma_kernel",
      "Q read by truncation to TF32 (never rounded): a bias of half a TF32 ulp", gpu=True),
    M("gpu_wgmma_tf32_ws_q_rows", "kernels_cu/flash_fwd_wgmma_ws.cu",
      "round_tf32_tile<BLOCK_M, DP, 128, 64>(sm.q, threadIdx.x % 128, 64 * c);",
      "round_tf32_tile<BLOCK_M, DP, 128, 64>(sm.q, threadIdx.x % 128, 0);",
      "tests/test_wgmma_tf32.py::test_wgmma_tf32_matches_the_mma_kernel",
      "the warp-specialized TF32 forward's second consumer rounds the first one's Q rows, its "
      "own read by truncation", gpu=True),
    M("gpu_f16x3_lo_hi_dropped", "kernels_cu/f16x3.cuh",
      "MMA::ss(acc, s.a_lo, s.b_hi, 0);", "MMA::ss(acc, s.a_hi, s.b_lo, 0);",
      "tests/test_wgmma_f16x3.py::test_wgmma_f16x3_against_oracle",
      "Q·Kᵀ without its lo_q·hi_k term (hi_q·lo_k twice): S to float16's 2^-11, not float32's",
      gpu=True),
    M("gpu_f16x3_v_unscaled", "kernels_cu/f16x3_stage.cuh",
      "inv = 1.f / (s * kX3PScale);", "inv = 1.f / kX3PScale;",
      "tests/test_wgmma_f16x3.py::test_wgmma_f16x3_scales_into_range",
      "V's tile scale never undone in the O update", gpu=True),
    M("gpu_f16x3_k_inverse_skipped", "kernels_cu/f16x3.cuh",
      "for (int r = tid; r < ROWS; r += 128) inv[r] = StagedRow",
      "for (int r = tid; r < ROWS / 2; r += 128) inv[r] = StagedRow",
      "tests/test_wgmma_f16x3.py::test_wgmma_f16x3_against_oracle",
      "the producers copy only half a tile's inverse scales (the rest stale)", gpu=True),
    M("gpu_f16x1_chain_not_from_zero", "kernels_cu/f16x3.cuh",
      "MMA::ss(acc, s.a_hi, s.b_hi, kk > 0 ? 1 : 0);", "MMA::ss(acc, s.a_hi, s.b_hi, 1);",
      "tests/test_wgmma_f16x1.py::test_wgmma_f16x1_backward_against_oracle",
      "'tf32''s chained sums over the head dim start from whatever the accumulator held",
      gpu=True),
    M("gpu_f16x3_bwd_panel_offset", "kernels_cu/flash_bwd_wgmma_x3.cu",
      "const int at = h * BLOCK_M * 64;", "const int at = 0;",
      "tests/test_wgmma_f16x3.py::test_wgmma_f16x3_backward_against_oracle",
      "d = 128's dV and dK read panel 0 of dO and Q for both 64-column panels", gpu=True),
    M("f16x3_stage_hi_rows_as_wide", "cuflash/gpu/f16x3_stage.py",
      "return (dp if lo else dp // 2) + ROW_PAD", "return dp + ROW_PAD",
      "tests/test_f16x3_stage.py::test_rows_without_lo_parts",
      "'tf32''s staged rows keep room for the lo parts they do not hold"),
    M("gpu_f16x1_inverse_after_lo", "kernels_cu/f16x3.cuh",
      "static constexpr int kInvHalf = (LO ? 2 : 1) * DP;", "static constexpr int kInvHalf = 2 * DP;",
      "tests/test_wgmma_f16x1.py::test_wgmma_f16x1_backward_against_oracle",
      "'tf32''s producers read a row's inverse where 'highest''s rows keep it (past a hi-only row)",
      gpu=True),
    M("f16x3_stage_v_per_row", "cuflash/gpu/f16x3_stage.py",
      "    vs_scale = np.repeat(range_scale(tiles), block_n, axis=-1)[..., None]",
      "    vs_scale = range_scale(np.abs(vp).max(axis=-1, initial=0))[..., None]",
      "tests/test_f16x3_stage.py::test_staged_rows",
      "V scaled per row, not per key tile (P·V sums over its rows: no factor can undo that)"),
    M("f16x3_stage_no_p_scale", "cuflash/gpu/f16x3_stage.py",
      "(1 / (vs_scale[..., 0] * np.float32(P_SCALE)))", "(1 / vs_scale[..., 0])",
      "tests/test_f16x3_stage.py::test_staged_rows",
      "V's inverse without P's 2^14"),
    M("gpu_f16x3_p_tile_chained", "kernels_cu/f16x3.cuh",
      "MMA::template rs<1>(acc, a_lo, b_hi, first ? 0 : 1);",
      "MMA::template rs<1>(acc, a_lo, b_hi, 1);",
      "tests/test_wgmma_f16x3.py::test_wgmma_f16x3_against_oracle",
      "O_tile not started from zero: each key tile's P·V adds the previous tiles' again", gpu=True),
    M("gpu_f16x3_bwd_dv_column_factor", "kernels_cu/flash_bwd_wgmma_x3.cu",
      "scale_columns(st, do_inv, t4);", "",
      "tests/test_wgmma_f16x3.py::test_wgmma_f16x3_backward_against_oracle",
      "Pᵀ keeps dO's row scales: dV's terms weighed by each query's power of two", gpu=True),
    M("gpu_f16x3_bwd_dk_row_scale", "kernels_cu/flash_bwd_wgmma_x3.cu",
      "dK[8 * h + n][e] = fmaf(dkt[n][e], ik[e >> 1], dK[8 * h + n][e]);",
      "dK[8 * h + n][e] += dkt[n][e];",
      "tests/test_wgmma_f16x3.py::test_wgmma_f16x3_backward_against_oracle",
      "dK's tiles added without undoing dSᵀ's row scale", gpu=True),
    M("gpu_f16x3_bwd_dq_column_factor", "kernels_cu/flash_bwd_wgmma_x3.cu",
      "scale_columns(dp, k_inv, t4);", "",
      "tests/test_wgmma_f16x3.py::test_wgmma_f16x3_backward_against_oracle",
      "dS keeps K's row scales: dQ's terms weighed by each key's power of two", gpu=True),
    M("gpu_f16x3_bwd_quad_max", "kernels_cu/f16x3.cuh",
      "m[h] = fmaxf(m[h], __shfl_xor_sync(0xffffffffu, m[h], 2));", "",
      "tests/test_wgmma_f16x3.py::test_wgmma_f16x3_backward_scales_into_range",
      "a row's scale from half its quad: the row's other lanes may scale by another power of two, "
      "so one row of an A operand carries two scales", gpu=True),
    M("f16x3_bwd_any_head_dim", "cuflash/gpu/plan.py",
      "if spec.head_dim > WGMMA_F16X3_BWD_MAX_D:", "if False:",
      "tests/test_wgmma_f16x3.py::test_backward_validate_names_the_problem",
      "the backward's plan takes d = 128, where its registers do not hold dK and dV"),
    M("f16x3_any_stages", "cuflash/gpu/plan.py",
      "    if not t.warp_specialized or t.num_stages not in stages:",
      "    if not t.warp_specialized:",
      "tests/test_wgmma_f16x3.py::test_validate_names_the_problem",
      "a 3-stage wgmma_f16x3 tile passes the plan (the kernel's ring is compiled for it, but "
      "its shared memory was budgeted for 2)"),
    M("wgmma_tf32_ws_first_at_96", "cuflash/tile.py",
      "tiles = tiles + ws if 64 < head_dim <= 96 else ws + tiles", "tiles = ws + tiles",
      "tests/test_wgmma_tf32.py::test_first_tiles_compile_without_spills",
      "the warp-specialized TF32 tile first at 96 columns too, where its producer spills"),
    M("wgmma_tf32_ws_any_block_m", "cuflash/gpu/plan.py",
      "        if t.block_m != 128:\n            raise ValueError(f\"{where}: the warp-specialized TF32",
      "        if False:\n            raise ValueError(f\"{where}: the warp-specialized TF32",
      "tests/test_wgmma_tf32.py::test_validate_names_the_problem",
      "a warp-specialized TF32 tile of one consumer warpgroup passes the plan"),
    M("wgmma_tf32_stage_unpermuted", "cuflash/gpu/tf32_stage.py",
      "KEY_OF_SLOT = (0, 2, 4, 6, 1, 3, 5, 7)", "KEY_OF_SLOT = (0, 1, 2, 3, 4, 5, 6, 7)",
      "tests/test_wgmma_tf32.py::test_staged_keys_and_values",
      "Vᵀ staged in key order, not the kernel's k-slot order"),
    M("wgmma_tf32_pays_short", "cuflash/tile.py",
      "    return head_dim > 64 or seq_len_k >= WGMMA_TF32_MIN_KEYS",
      "    return head_dim > 64 or seq_len_k > WGMMA_TF32_MIN_KEYS",
      "tests/test_wgmma_tf32.py::test_tiles_and_plan",
      "the d <= 64 crossover one key late (call 148's rule: from 2048 keys)"),
    M("wgmma_tf32_wide_any_length", "cuflash/tile.py",
      "        return head_dim <= WGMMA_TF32_WIDE_D and seq_len_k >= WGMMA_TF32_WIDE_MIN_KEYS",
      "        return head_dim <= WGMMA_TF32_WIDE_D",
      "tests/test_wgmma_tf32.py::test_tiles_and_plan",
      "the wide tile becomes 'tf32''s default at lengths where it was not measured"),
    M("gpu_wgmma_tf32_default_splits", "cuflash/api.py",
      "tile, prec = _forward_tile(p, tile, precision, dense=num_splits == 1)",
      "tile, prec = _forward_tile(p, tile, precision, dense=True)",
      "tests/test_wgmma_tf32.py::test_tf32_default_takes_wgmma_where_it_pays",
      "num_splits=None (automatic split-KV) given the TF32 wgmma kernel, which runs one pass",
      gpu=True),
    M("gpu_bulk_dq_no_map", "cuflash/gpu/ops.py",
      "r, dout, maps = _backward_maps(r, dout, dt, dkdv, dq_accum)",
      "r, dout, maps = _backward_maps(r, dout, dt, dkdv)",
      "tests/test_gpu_kernels.py::test_ws_backward_loads_through_tensor_maps",
      "the atomic-dQ kernel gets no map of dq_accum to reduce through", gpu=True),
    M("gpu_tma_kv_head", "kernels_cu/flash_fwd_wgmma_ws.cu",
      "tma_load_tile<BLOCK_N, DP>(sm.kv.k[r.stage], p.tma[1], j0, s.hk, s.b,",
      "tma_load_tile<BLOCK_N, DP>(sm.kv.k[r.stage], p.tma[1], j0, s.h, s.b,",
      "tests/test_gpu_kernels.py::test_ws_forward_loads_through_tensor_maps",
      "K tiles of the query head, not of its kv head (GQA)", gpu=True),
    M("gpu_tma_maps_never_made", "cuflash/gpu/ops.py",
      "if not self.spec.reads_tensor_maps or r.packed:",
      "if True:",
      "tests/test_gpu_kernels.py::test_ws_forward_loads_through_tensor_maps",
      "the forward never hands its producer tensor maps (every load by cp.async)", gpu=True),
    # -- the decode step's per-call path (NOTES v26)
    M("word_slots_off_by_one", "cuflash/gpu/params.py",
      "return {name: off // 8 for name, off in self._offsets.items()}",
      "return {name: off // 8 + 1 for name, off in self._offsets.items()}",
      "tests/test_kernel_plan.py::test_word_slots_write_what_pack_writes",
      "the per-call path writes each address into the next field of the struct"),
    M("decode_split_overfills", "cuflash/kvcache.py",
      "min(max_splits, fill * sms // max(blocks, 1),",
      "min(max_splits, 4 * fill * sms // max(blocks, 1),",
      "tests/test_split_kv.py::test_decode_split_rule",
      "decode grids between 1 and 4 blocks per SM split again (NOTES v27's sweep: 1.3-1.5 waves "
      "read up to 25% slower)"),
    M("decode_tile_across_pages", "cuflash/kvcache.py",
      "    if page_size and page_size % plan.page_rows(tile):",
      "    if False and page_size and page_size % plan.page_rows(tile):",
      "tests/test_kvcache.py::test_decode_tile_keys_lie_in_whole_pages",
      "a decode tile whose key tiles cross pages of a paged cache is launched (each copy reads "
      "one page: keys of the next page come from the wrong rows)"),
    M("merge_room_half", "cuflash/gpu/ops.py",
      "    return busy * (weights + splits * MERGE_BYTES_PER_SPLIT) + 1024",
      "    return busy * (weights + splits * MERGE_BYTES_PER_SPLIT // 2) + 1024",
      "tests/test_split_kv.py::test_merge_room_holds_every_split_in_one_round",
      "the launch-sized merge room holds half the splits: the kernel falls back to two buffers "
      "of a quarter each, a slower merge than the launch paid for, silently"),
    M("decode_stages_ignored", "cuflash/kvcache.py",
      "            if stages != tile.num_stages:",
      "            if False:",
      "tests/test_split_kv.py::test_decode_step_takes_the_rule",
      "the decode step keeps the 2-stage ring where the rule asks 3", gpu=True),
    M("gpu_struct_shared_by_threads", "cuflash/gpu/ops.py",
      "self.local = threading.local()",
      "self.local = type(\"Shared\", (), {})()",
      "tests/test_kvcache.py::test_prepared_call_from_threads_at_once",
      "every thread writes its addresses into one parameter struct", gpu=True),
    M("wgmma_tf32_wide_any_tile", "cuflash/gpu/plan.py",
      "if spec.head_dim > WGMMA_TF32_MAX_D and (t.warp_specialized or t.block_n != 32):",
      "if False:",
      "tests/test_wgmma_tf32_wide.py::test_validate_names_the_problem",
      "any TF32 wgmma tile passes the plan above d = 128 (the warp-specialized kernel there is "
      "neither compiled nor budgeted)"),
    M("gpu_tf32_stage_narrow_for_wide", "cuflash/gpu/build.py",
      "            return max_d\n", "            return TF32_STAGE_MAX_D\n",
      "tests/test_wgmma_tf32_wide.py::test_wide_staging_matches_the_rule",
      "wide heads staged by the d <= 128 kernel: its shared rows hold 128 of the head dim's "
      "columns", gpu=True),
    M("softcap_past_logit_limit", "cuflash/checks.py",
      "    if c * _LOG2E >= limit:", "    if False:",
      "tests/test_errors.py::test_score_constants_in_float64_take_float64s_range",
      "a softcap whose capped logits pass 2^31 (2^63) is taken: the GPU's exponent of the row "
      "max overflows (NaN, call 185)"),
    M("alibi_past_logit_limit", "cuflash/checks.py",
      "    if biggest * max(int(reach), 0) * _LOG2E >= limit:", "    if False:",
      "tests/test_errors.py::test_alibi_bias_within_the_logit_limit",
      "ALiBi slopes whose bias at the call's longest distance passes 2^31 are taken: a row whose "
      "visible keys all lie that far has its max there, and the GPU's exponent overflows"),
    M("kv_overlap_by_extent", "cuflash/kvcache.py",
      "        return bool(np.shares_memory(_layout(a), _layout(b), max_work=_EXACT_WORK))",
      "        return True",
      "tests/test_kvcache.py::test_interleaved_k_and_v_caches_append",
      "K and V caches interleaved in one array are refused as overlapping: their byte extents "
      "meet though no element is shared"),
    M("resume_deletes_unread_rows", "cuflash/experiments/runner.py",
      "        results.set_aside(out_dir / SET_ASIDE_CSV, header, unread)", "        pass",
      "tests/test_runner_edges.py::test_a_resume_sets_aside_rows_it_cannot_read_and_keys_a_resaved_csv",
      "a resume's rewrite deletes the rows it cannot read (torn, unknown status)"),
    M("resume_keys_verbatim", "cuflash/experiments/points.py",
      "    if column in BOOL_COLUMNS and text.lower() in (\"true\", \"false\"):",
      "    if False:",
      "tests/test_runner_edges.py::test_a_resume_sets_aside_rows_it_cannot_read_and_keys_a_resaved_csv",
      "a results CSV re-saved with FALSE for false names no point: everything measured twice"),
    M("plot_filter_values_unchecked", "cuflash/experiments/runner.py",
      "    check_plots(exp, points)                  # a plot that would be empty: stop before measuring",
      "    pass",
      "tests/test_runner_edges.py::test_a_plot_that_would_be_empty_stops_the_run_before_measuring",
      "a plot filter value no point has (heads: 7) is taken: the plot comes out empty after the run"),
    M("one_failing_plot_stops_the_rest", "cuflash/experiments/plots.py",
      "        except Exception as exc:   # the rows are safe in the CSV: say it, draw the others",
      "        except ZeroDivisionError as exc:",
      "tests/test_runner_edges.py::test_run_draws_no_empty_plot_and_a_failing_plot_stops_no_other",
      "one plot's failure stops the plots after it"),
    M("x1_forward_no_128_keys", "cuflash/tile.py",
      "return ((64, 32, 128) if head_dim <= 64 else (64, 32)), (2, 3)",
      "return (64, 32), (2, 3)",
      "tests/test_wgmma_f16x1.py::test_family_tiles_and_kernel_type",
      "the x1 forward's 128-key tiles at d <= 64 neither listed nor taken (nor staged)"),
    M("x1_forward_default_not_at_d64", "cuflash/tile.py",
      "    if kernel_head_dim(head_dim) == 64:", "    if False:",
      "tests/test_wgmma_f16x1.py::test_tf32_default_backward_where_it_pays",
      "'tf32''s default forward at d = 57-64 stays on the TF32 wgmma kernel (v62: x1's "
      "128-key tile, 1.02-1.09x)"),
    M("two_blocks_any_warps", "cuflash/gpu/plan.py",
      "                self.threads() <= 256 and self.tile.block_n + self.head_dim <= 128 and \\",
      "                self.tile.block_n + self.head_dim <= 128 and \\",
      "tests/test_kernel_plan.py::test_two_blocks_only_where_registers_allow",
      "a 16-warp wgmma forward compiled for two blocks: 64 registers, 1 KB of spills, its "
      "wgmma serialized (fuzzing, session 39)"),
    M("mma_on_any_arch", "cuflash/gpu/plan.py",
      "_SM80_NEEDS = {\"mma\": \"mma.sync .f16 / .bf16 and cp.async\", \"dmma\": \"mma.sync .f64\",",
      "_SM80_NEEDS = {\"dmma\": \"mma.sync .f64\",",
      "tests/test_kernel_plan.py::test_mma_needs_sm80_and_older_gpus_take_the_cuda_cores",
      "the mma family taken on sm_75, where cp.async does not exist: the float16 defaults "
      "failed to compile there (fuzzing, session 39)"),
    M("wgmma_backward_wide_heads", "cuflash/gpu/plan.py",
      "    if spec.role != \"fwd\" and spec.head_dim > 128:", "    if False:",
      "tests/test_kernel_plan.py::test_wgmma_backward_tiles_that_spill_are_refused",
      "a 16-bit wgmma backward above d = 128 is taken: 0.5-9 KB of spills, its wgmma "
      "serialized (fuzzing, session 39)"),
    M("ws_one_consumer_wide_heads", "cuflash/gpu/plan.py",
      "        if t.num_warps == 8 and spec.head_dim > 64:", "        if False:",
      "tests/test_kernel_plan.py::test_wgmma_backward_is_deterministic_only_and_16_bit",
      "the 16-bit backward on one consumer warpgroup taken at d = 128: 0.1-1.6 KB of spills, "
      "its wgmma serialized (v66)"),
    M("one_consumer_forward_not_default", "cuflash/tile.py",
      '        return three + [TileConfig(64, 128, 8, 2, "wgmma"), TileConfig(128, 128, 12, 2, "wgmma"),',
      '        return three + [TileConfig(128, 128, 12, 2, "wgmma"),',
      "tests/test_kernel_plan.py::test_one_consumer_defaults_at_short_heads",
      "the 16-bit forward at d <= 64 back on the 12-warp tile (v69: 1.02-1.07x slower)"),
    M("one_consumer_backward_length_ignored", "cuflash/api.py",
      "    short = dense and wgmma_one_consumer_pays(d, p.T, p.S, p.causal, backward=True)",
      "    short = dense",
      "tests/test_kernel_plan.py::test_api_asks_for_one_consumer_backward_only_for_short_dense_batches",
      "the one-consumer 16-bit backward taken at every length, past the lengths where it pays"),
    M("one_consumer_causal_ignored", "cuflash/tile.py",
      "    return head_dim <= 64 and max(seq_len_q, seq_len_k) <= lens[bool(causal)]",
      "    return head_dim <= 64 and max(seq_len_q, seq_len_k) <= lens[True]",
      "tests/test_kernel_plan.py::test_api_asks_for_one_consumer_backward_only_for_short_dense_batches",
      "the causal limit (8192) applied to non-causal backwards too, where 8192 lost 0-4%"),
    M("one_consumer_forward_consumer_starved", "kernels_cu/flash_fwd_wgmma_ws.cu",
      "                               (BLOCK_M == 64 ? 176 : BLOCK_M == 192 ? 160",
      "                               (BLOCK_M == 64 ? 168 : BLOCK_M == 192 ? 160",
      "tests/test_kernel_plan.py::test_one_consumer_16_bit_forward_compiles_in_half_the_registers",
      "the one-consumer forward's consumers at 168 registers: the window + softcap kernel spills"),
    # v89: the forward of three consumer warpgroups
    M("three_consumer_forward_not_default", "cuflash/tile.py",
      '        three = [] if short else [TileConfig(192, 128, 16, 2, "wgmma")]',
      '        three = []',
      "tests/test_kernel_plan.py::test_one_consumer_defaults_at_short_heads",
      "the d <= 64 forward back on one consumer warpgroup (call 253: 1.07-1.14x slower "
      "non-causal)"),
    M("three_consumer_short_causal_taken", "cuflash/tile.py",
      "WGMMA_FWD_ONE_CONSUMER_MAX_LEN = {True: 4096, False: 1024}",
      "WGMMA_FWD_ONE_CONSUMER_MAX_LEN = {True: 1024, False: 1024}",
      "tests/test_kernel_plan.py::test_one_consumer_defaults_at_short_heads",
      "three consumers for causal T <= 4096 too, where they ran 0.95-0.98x"),
    M("three_consumer_softcap_taken", "cuflash/api.py",
      "    short = not dense or p.softcap is not None or \\",
      "    short = not dense or \\",
      "tests/test_kernel_plan.py::test_api_takes_three_consumers_for_dense_forwards_only",
      "the default's softcap forward on the three-consumer tile, which refuses it"),
    M("three_consumer_softcap_allowed", "cuflash/gpu/plan.py",
      "    return not variant.packed and not variant.softcap",
      "    return not variant.packed",
      "tests/test_kernel_plan.py::test_three_consumer_forward_tile",
      "softcap on three consumers: 52-356 bytes of spills"),
    M("three_consumer_consumer_starved", "kernels_cu/flash_fwd_wgmma_ws.cu",
      "                               (BLOCK_M == 64 ? 176 : BLOCK_M == 192 ? 160",
      "                               (BLOCK_M == 64 ? 176 : BLOCK_M == 192 ? 152",
      "tests/test_kernel_plan.py::test_three_consumer_16_bit_forward_compiles_without_spills",
      "the three-consumer forward's consumers at 152 registers: spills, wgmma serialized"),
    M("gpu_three_consumer_unmapped", "cuflash/gpu/ops.py",
      "        elif plan.copy_engine_only(tile) and not r.packed and not _mappable(r, tile):",
      "        elif False:",
      "tests/test_gpu_kernels.py::test_three_consumer_forward_where_the_copy_engine_cannot_read",
      "the copy-engine-only forward launched without tensor maps on arrays it cannot map",
      gpu=True),
    # v91: split-KV's splits as one thread-block cluster, merged through its shared memory
    M("gpu_cluster_merge_own_lse", "kernels_cu/split_combine.cuh",
      "for (int s = 0; s < C; ++s) x[s] = cluster_ld(lse_at[s] + 4 * r);",
      "for (int s = 0; s < C; ++s) x[s] = cluster_ld(lse_at[0] + 4 * r);",
      "tests/test_kvcache.py::test_split_clusters",
      "every split of a cluster weighed by split 0's lse", gpu=True),
    M("gpu_cluster_merge_no_wait", "kernels_cu/split_combine.cuh",
      "    cluster_arrive();   // this block's partials, released to the cluster\n"
      "    cluster_wait();     // and every other block's, acquired\n", "",
      "tests/test_kvcache.py::test_split_clusters",
      "the merge reads the other blocks' partials before they are written (a race)", gpu=True),
    M("cluster_rule_any_divisor", "cuflash/gpu/plan.py",
      "    if num_splits not in SPLIT_CLUSTERS[1:] or num_splits > most or \\",
      "    if num_splits < 2 or num_splits % 2 or \\",
      "tests/test_kvcache.py::test_split_cluster_rule",
      "clusters for split counts that no one cluster holds (16-128 splits: the kernel merges "
      "only the first C, or a cluster of 16 blocks that cannot launch)"),
    M("cluster_dims_dropped", "cuflash/gpu/build.py",
      '        bounds = f"__cluster_dims__({spec.variant.cluster}, 1, 1) {bounds}"',
      '        pass',
      "tests/test_kvcache.py::test_cluster_decode_kernels_compile_without_spills",
      "a cluster kernel launched without clusters: every block maps ranks that do not exist"),
    # v73: report precision_summary's reference (torch's efficient kernel, math for float64)
    M("precision_summary_math_first", "cuflash/experiments/report.py",
      '        name, ref = ("efficient", torch) if at in torch else ("math", math_)',
      '        name, ref = ("math", math_) if at in math_ else ("efficient", torch)',
      "tests/test_precision_experiments.py::test_precision_summary_spans_and_reference_choice",
      "float32's ratios taken against torch's unfused math path: 'tf32' and 'highest' look "
      "several times faster than against the efficient kernel issue 15 names"),
    M("precision_table_math_column_dropped", "cuflash/experiments/report.py",
      '            row += [_num(tm), f"{mt / tm:.2f}" if mt and tm else "–"]',
      '            row += [_num(tm), "–"]',
      "tests/test_precision_experiments.py::test_precision_report_against_torch",
      "float64's ratio to torch's math path (issue 15's float64 bar) missing from the table"),
    # v71: 'tf32''s backward on the 16-bit pair, float16 copies scaled per tensor
    M("f16s_default_atomic", "cuflash/tile.py",
      '    return bool(deterministic) or tile.kernel in ("wgmma", F16_SCALED, *F16_SPLIT, *PRODUCTS)',
      '    return bool(deterministic) or tile.kernel in ("wgmma", *F16_SPLIT, *PRODUCTS)',
      "tests/test_f16_scaled.py::test_default_backward_of_tf32",
      "deterministic=False's default on 'wgmma_f16s' runs atomic dQ, measured slower on the "
      "16-bit pair (v32)"),
    M("f16s_dk_factor_of_q", "cuflash/gpu/f16_scaled.py",
      "        return self.kernel_scale * self.b / (self.c * self.e)",
      "        return self.kernel_scale * self.a / (self.c * self.e)",
      "tests/test_f16_scaled.py::test_copies_and_factors_give_the_gradients",
      "dk takes q's power of two: wrong wherever q and k have different ranges"),
    M("f16s_dv_factor_of_v", "cuflash/gpu/f16_scaled.py",
      "        return 1.0 / self.c",
      "        return 1.0 / self.e",
      "tests/test_f16_scaled.py::test_copies_and_factors_give_the_gradients",
      "dv divided by v's power of two instead of dout's"),
    M("f16s_range_top_off_by_one", "cuflash/gpu/f16_scaled.py",
      "    return math.ldexp(1.0, min(max(top - exp, _EXP_RANGE[0]), _EXP_RANGE[1]))",
      "    return math.ldexp(1.0, min(max(top + 1 - exp, _EXP_RANGE[0]), _EXP_RANGE[1]))",
      "tests/test_f16_scaled.py::test_power_of_two_puts_the_max_in_range",
      "copies twice as large as the rule says: dS~ nearer float16's overflow"),
    M("f16s_out_with_dout_scale", "cuflash/gpu/f16_scaled.py",
      "    return Cast(to16(q, f.a), to16(k, f.b), to16(v, f.e), to16(out, f.e), to16(dout, f.c), f)",
      "    return Cast(to16(q, f.a), to16(k, f.b), to16(v, f.e), to16(out, f.c), to16(dout, f.c), f)",
      "tests/test_f16_scaled.py::test_wgmma_f16s_scales_into_range",
      "out's copy scaled as dout: D~ no longer c·e·D, every dS wrong", gpu=True),
    M("f16s_dv_scale_dropped", "kernels_cu/epilogue.cuh",
      "                                     int(p.dv_stride[2]), kb.rows, dV, p.dv_scale, wkey, lane);",
      "                                     int(p.dv_stride[2]), kb.rows, dV, 1.f, wkey, lane);",
      "tests/test_f16_scaled.py::test_wgmma_f16s_scales_into_range",
      "the kernels' dV without its factor: dout's power of two left in", gpu=True),
    M("two_blocks_never", "cuflash/tile.py",
      "        return 2 if ws and self.num_warps == 8 else 1",
      "        return 1",
      "tests/test_wgmma_f16x1.py::test_two_block_tiles",
      "an 8-warp float16-product kernel compiled for one block a multiprocessor while its "
      "register split assumes two (v64): the IO model and the launch bounds disagree with it"),
    M("two_blocks_cpp_rule_off", "kernels_cu/barrier.cuh",
      "    static constexpr int kBlocks = NC == 1 ? 2 : 1;",
      "    static constexpr int kBlocks = 1;",
      "tests/test_wgmma_f16x1.py::test_two_block_kernels_compile_in_half_the_registers",
      "the C++ split of a one-consumer block takes a whole multiprocessor's registers: "
      "setmaxnreg beyond the launch's 128 a thread (v64; NOTES v17's hang)"),
    M("two_blocks_producer_starved", "kernels_cu/barrier.cuh",
      "    static constexpr int kProducerFloor = 48;",
      "    static constexpr int kProducerFloor = 24;",
      "tests/test_wgmma_f16x1.py::test_two_block_kernels_compile_in_half_the_registers",
      "the producer of a two-block kernel left 32-40 registers: its copy loops spill (v64)"),
    M("two_blocks_smem_unchecked", "cuflash/gpu/plan.py",
      "    if spec.min_blocks() == 2 and device.assumed(\"sm_90\").blocks_per_sm(spec.smem_bytes()) < 2:",
      "    if False:",
      "tests/test_wgmma_f16x1.py::test_two_block_tiles",
      "an 8-warp float16-product tile whose shared memory fits once is taken: one block a "
      "multiprocessor with its producer starved of registers for nothing (v64)"),
    M("ws_backward_any_streamed_rows", "cuflash/gpu/plan.py",
      "        if streamed != 64:", "        if False:",
      "tests/test_kernel_plan.py::test_wgmma_tiles_that_do_not_compile_are_refused",
      "a warp-specialized wgmma backward of 16 or 32 queries is taken: its dQ kernel does not "
      "compile (tma.cuh's whole 64-row boxes)"),
    M("wgmma_16_warps_wide_heads", "cuflash/gpu/plan.py",
      "    if t.num_warps > 12 and spec.head_dim > 192:", "    if False:",
      "tests/test_kernel_plan.py::test_wgmma_tiles_that_do_not_compile_are_refused",
      "a 16-warp wgmma tile at head_dim > 192 is taken: ptxas runs out of registers"),
    M("mask_mod_index_wraps", "cuflash/mask_mod.py",
      "            if a.dtype.kind == \"u\" and a.size and int(a.max()) > I32[1]:   # (cast would wrap)",
      "            if False:",
      "tests/test_mask_mod.py::test_int32_edges_and_depth",
      "MaskMod.evaluate casts a uint64 index past int32 to int64 and wraps (2^64 - 1 reads -1)"),
    M("gpu_tools_ungated", "tools/gpu_tool.py",
      "        if not gpu_available():", "        if False:",
      "tests/test_gpu_tools_gate.py::test_without_a_gpu_one_line_and_exit_2",
      "a GPU tool started without a GPU prints a CUDA traceback instead of one line"),
    M("dry_run_out_unchecked", "cuflash/cli.py",
      "            check_folder(args.out, \"--out\")", "            pass",
      "tests/test_runner_edges.py::test_bad_out_is_a_one_line_error_and_writes_nothing",
      "cuflash run --dry-run --out FILE exits 0 where the run itself refuses the folder"),
    M("plot_draws_what_does_not_fit", "cuflash/experiments/plots.py",
      "        why = unfit(rows, plot)", "        why = None",
      "tests/test_experiments.py::test_plot_from_csv_alone",
      "cuflash plot --config draws an empty PNG for a plot no row of the CSV fits"),
    M("x1_forward_stages_as_x3", "cuflash/tile.py",
      "return ((64, 32, 128) if head_dim <= 64 else (64, 32)), (2, 3)",
      "return ((64, 32, 128) if head_dim <= 64 else (64, 32)), (2,)",
      "tests/test_wgmma_f16x1.py::test_family_tiles_and_kernel_type",
      "the x1 forward's 3-stage tiles (no lo tiles: room for a third) neither listed nor taken"),
    M("resume_label_of_another_method", "cuflash/experiments/runner.py",
      "    _check_labels(points, old, csv_path)", "    pass",
      "tests/test_experiments.py::test_resume_refuses_a_label_given_to_another_method",
      "a resume keeps a label's rows measured by another method and renames them in the spec"),
    M("varlen_backward_unchecked_without_queries", "cuflash/varlen.py",
      "    chosen, det, _ = api._backward_choice(vp, tile, deterministic, precision)\n",
      "    chosen, det = tile, deterministic\n",
      "tests/test_varlen.py::test_backward_of_no_queries_checks_precision_and_tile",
      "a packed backward without query rows takes any precision and any family's tile"),
    M("kv_lengths_cut", "cuflash/kvcache.py",
      "    if not whole:\n", "    if False:\n",
      "tests/test_kvcache.py::test_byte_helpers_refuse_what_they_would_miscount",
      "cache_waste and decode_step_bytes cut 2.7 tokens to 2"),
    M("plot_filter_sweep_unchecked", "cuflash/experiments/schema.py",
      '"sweep": "name", "cache": "cache", ', "",
      "tests/test_experiments.py::test_schema_error_names_file_path_and_choices",
      "a plot filter naming no sweep of the experiment draws an empty plot"),
]


def _copy_tree(dst: Path):
    """The working tree's tracked and untracked, not ignored files (as the tests see them)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        src = ROOT / os.fsdecode(f)
        if src.is_file():
            out = dst / os.fsdecode(f)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)


def run_one(m: Mutant, tree: Path, python: str, mutate=True) -> tuple[str, float, str]:
    """('killed' | 'survived' | 'not applied' | 'error', seconds, detail)."""
    path = tree / m.path
    text = path.read_text()
    if mutate and text.count(m.old) != 1:
        return "not applied", 0.0, f"{m.path}: the text occurs {text.count(m.old)} times"
    if mutate:
        path.write_text(text.replace(m.old, m.new))
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    t0 = time.time()
    try:
        proc = subprocess.run([python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                               *m.tests], cwd=tree, env=env, capture_output=True, text=True,
                              timeout=600)
    finally:
        path.write_text(text)
    dt = time.time() - t0
    tail = (proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode == 0:
        return "survived", dt, tail
    if proc.returncode == 1:
        return "killed", dt, tail
    return "error", dt, f"pytest exit {proc.returncode}: {tail}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="only these mutations")
    ap.add_argument("--gpu", action="store_true", help="also the GPU-only mutations")
    ap.add_argument("--list", action="store_true", help="print the mutations and exit")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if (args.gpu or not m.gpu) and (not args.names
                                                                 or m.name in args.names)]
    if args.list:
        for m in MUTANTS:
            print(f"{m.name:28s} {'GPU ' if m.gpu else ''}{m.path}: {m.why} -> {' '.join(m.tests)}")
        return 0
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        print(f"unknown mutations: {sorted(unknown)}", file=sys.stderr)
        return 2
    bad = 0
    with tempfile.TemporaryDirectory(prefix="cuflash-mutants-") as tmp:
        tree = Path(tmp)
        _copy_tree(tree)
        # the tests must pass unmutated, or every mutation would look killed
        tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        status, dt, detail = run_one(Mutant("baseline", "Makefile", "", "", tests, ""), tree,
                                     args.python, mutate=False)
        print(f"baseline    {len(tests)} test selections, unmutated: {detail} ({dt:.0f} s)",
              flush=True)
        if status != "survived":
            print("the tests fail without any mutation: fix that first", file=sys.stderr)
            return 2
        for m in chosen:
            status, dt, detail = run_one(m, tree, args.python)
            bad += status != "killed"
            print(f"{status:11s} {m.name:28s} {dt:5.1f} s  {m.why}"
                  + ("" if status == "killed" else f"  [{detail}]"), flush=True)
    print(f"{len(chosen) - bad} of {len(chosen)} mutations killed"
          + ("" if not bad else f"; {bad} survived or did not apply"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
