#!/usr/bin/env bash
# call 165 (NOTES v48, after call 164 on the same stack of four patches): their GPU mutants (ten,
# each in its own process, all at once), the A/B of the unstaged ws TF32 forward against main
# (.ab/base, carry it), and the x3 forward / backward against torch's efficient float32.
# Predictions: NOTES v43 (unstaged: T = 1024 +15-30%, T = 16384 -5..+3%), v45 (x3 forward
# 3-5x torch efficient), v46 (x3 backward d = 64: 1.6-2.6x torch efficient).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/mut
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
for m in gpu_wgmma_tf32_own_vt_unpermuted gpu_wgmma_tf32_own_k_truncated gpu_wgmma_tf32_ws_staged_anyway \
    gpu_f16x3_lo_hi_dropped gpu_f16x3_p_tile_chained gpu_f16x3_bwd_dv_column_factor \
    gpu_f16x3_bwd_dk_row_scale gpu_f16x3_bwd_dq_column_factor gpu_f16x3_bwd_quad_max \
    gpu_tf32_stage_narrow_for_wide; do
  (timeout 170 python3 tools/mutants.py --gpu $m > $OUT/mut/$m.txt 2>&1; echo "$m rc=$?" >> $OUT/mut/rcs.txt) &
done
wait
timeout 130 python3 tools/ab_speed.py --base .ab/base --new . --dtypes float32:tf32 --d 64,128 \
  --T 1024,4096,16384 --passes fwd --causal 0,1 --rounds 1 --json $OUT/ab.json > $OUT/ab.txt 2>&1
echo "ab rc=$?"
timeout 130 python3 tools/bench_f32.py --x3 --errors --d 64 128 --T 4096 16384 --reps 3 \
  --jobs 14 > $OUT/bench_fwd.txt 2>&1; echo "bench fwd rc=$?"
timeout 130 python3 tools/bench_f32.py --pass bwd --x3 --d 64 --T 4096 16384 \
  --reps 3 --jobs 14 > $OUT/bench_bwd.txt 2>&1; echo "bench bwd rc=$?"
echo "=================== SUMMARY"
cat $OUT/mut/rcs.txt; for f in $OUT/mut/gpu_*.txt; do echo "$(basename $f): $(tail -1 $f)"; done
tail -14 $OUT/ab.txt
grep -E "^(fwd|err|bwd) " $OUT/bench_fwd.txt $OUT/bench_bwd.txt | grep -E "f16x3|highest|torch_eff|naive_f32" | sort -k2,2n -k3,3n -k4,4n
