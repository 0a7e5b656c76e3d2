#!/usr/bin/env bash
# call 151 (main): ncu --set full on the TF32 wgmma forward and the 16-bit wgmma forward, d = 128
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 .ab/tf32_ncu.py > $OUT/warm.txt 2>&1   # compiles into the disk cache first
timeout 300 ncu --set full -k regex:'wgmma.*fwd' --launch-skip 1 --launch-count 1 -f -o $OUT/tf32 \
  python3 .ab/tf32_ncu.py > $OUT/ncu_run.txt 2>&1; echo "ncu tf32 rc=$?"
timeout 200 ncu --set full -k regex:'wgmma.*fwd' --launch-skip 3 --launch-count 1 -f -o $OUT/f16 \
  python3 .ab/tf32_ncu.py >> $OUT/ncu_run.txt 2>&1; echo "ncu f16 rc=$?"
for f in tf32 f16; do
  ncu -i $OUT/$f.ncu-rep --page details > $OUT/${f}_details.txt 2>&1
done
grep -E "Kernel|cuflash_" $OUT/ncu_run.txt | head; 
for f in tf32 f16; do echo "== $f"; grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Shared Memory|L1/TEX Hit|Executed Ipc A" $OUT/${f}_details.txt | head -24; done
