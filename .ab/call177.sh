#!/usr/bin/env bash
# call 177 (next session; NOTES v53-v54): run on a working tree with BOTH patches applied
#   git apply .ab/x3_split_barrier.patch && git apply .ab/x3_bwd_d128.patch
# and .ab/base = main eaef638's tree (git archive eaef638 cuflash kernels_cu setup.cfg tools |
# tar -x -C .ab/base; carry [".ab/base"]). One call, ~560 s:
#  - the whole GPU suite (the d = 128 x3 backward's tests among them), beside it racecheck of the
#    x3 kernels (v53: forward and dQ expected clean) and the GPU mutant gpu_f16x3_bwd_panel_offset;
#  - bits of the x3 forward and d = 64 backward against main (the split barrier and the d = 64
#    refactor must not change them);
#  - issue 15's ratios against torch's efficient float32 in one run: bench_f32 --x3, forward d 64
#    and 128, backward d 64 and 128 (the d = 128 pair by name: it is opt-in), T 4096 / 16384.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
BASE=$PWD/.ab/base
(PYTHONPATH=$PWD timeout 90 compute-sanitizer --tool racecheck --error-exitcode 1 python3 .ab/x3_race.py --d128 > /tmp/race.txt 2>&1; echo "racecheck rc=$?"; tail -2 /tmp/race.txt
 grep "Error: Race" /tmp/race.txt | sed 's/+0x[0-9a-f]*//g' | sort | uniq -c
 head -c 12000 /tmp/race.txt > $OUT/race_head.txt
 PYTHONPATH=$BASE timeout 90 python3 .ab/x3_bits.py /tmp/base.npz; PYTHONPATH=$PWD timeout 90 python3 .ab/x3_bits.py /tmp/new.npz
 python3 .ab/x3_bits_diff.py /tmp/base.npz /tmp/new.npz
 timeout 120 python3 tools/mutants.py --gpu gpu_f16x3_bwd_panel_offset > /tmp/m.txt 2>&1; echo "mutant rc=$? $(tail -1 /tmp/m.txt)"
) > $OUT/side.txt 2>&1 &
export PYTHONPATH=$PWD
STEPS="env tests" JOBS=12 LIMIT_TESTS=300 TAIL=3 OUT=/tmp/gs bash tests/gpu_session.sh > $OUT/session.txt 2>&1
wait
grep -E "^(FAILED|ERROR)" /tmp/gs/tests.log > $OUT/failures.txt; tail -3 /tmp/gs/tests.log >> $OUT/failures.txt
timeout 110 python3 tools/bench_f32.py --x3 --d 64 128 --T 4096 16384 --reps 3 --jobs 14 \
  > $OUT/bench_fwd.txt 2>&1; echo "bench fwd rc=$?" >> $OUT/side.txt
timeout 110 python3 tools/bench_f32.py --pass bwd --x3 --d 64 128 --T 4096 16384 --reps 3 \
  --jobs 14 > $OUT/bench_bwd.txt 2>&1; echo "bench bwd rc=$?" >> $OUT/side.txt
echo "=================== SUMMARY"
cat /tmp/gs/summary.txt $OUT/side.txt; head -30 $OUT/failures.txt
grep -E "^(fwd|bwd) " $OUT/bench_fwd.txt $OUT/bench_bwd.txt | grep -E "f16x3|torch_eff|highest" | sort -u | head -50
