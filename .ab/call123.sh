#!/usr/bin/env bash
# call 123: the whole GPU suite on main (acq_rel split counter, the merge-room test's tile fixed),
# the GPU mutant gpu_split_cap_ignored, then ncu's full set on the ws forward (issue 13 evidence).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
STEPS="env tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
timeout 120 python3 tools/mutants.py --gpu gpu_split_cap_ignored > $OUT/mutants.txt 2>&1; echo "mutant rc=$?"
timeout 150 ncu --profile-from-start off --set full -k regex:fwd -o /tmp/fwd python3 .ab/fwd_ncu.py >> $OUT/session.txt 2>&1
echo "ncu rc=$?"
ncu -i /tmp/fwd.ncu-rep --print-details all > $OUT/fwd_details.txt 2>&1
ncu -i /tmp/fwd.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $OUT/fwd_source.csv.gz
echo "=================== SUMMARY"
cat $OUT/summary.txt; tail -3 $OUT/tests.log; tail -3 $OUT/mutants.txt
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Registers Per|Tensor|Achieved Occupancy|No Eligible|Warp Cycles Per Issued" $OUT/fwd_details.txt | head -40
