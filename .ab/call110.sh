#!/usr/bin/env bash
# call 110 (issue 14): the forward mma kernels' tiles unpadded and swizzled (tile_at): decode A/B
# against .ab/base (b871844: padded rows), ncu L2 sectors of the step, the README's decode table,
# the small step's source view, the whole GPU suite
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
G="--grid 1x1,1x8,8x8,32x8,64x8 --S 1024,8192,32768,131072 --layouts contiguous --no-host --no-torch"
for pass in 1 2; do
  echo "== A/B pass $pass"
  (cd .ab/base && PYTHONPATH=$PWD timeout 100 python3 tools/bench_kvcache.py $G > $OUT/ab_base_$pass.txt 2>&1); echo "base rc=$?"
  timeout 100 python3 tools/bench_kvcache.py $G > $OUT/ab_new_$pass.txt 2>&1; echo "new rc=$?"
done
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
timeout 100 ncu --clock-control none -k regex:'mma_fwd|read_ceiling' --launch-skip 2 --launch-count 2 \
  --metrics $M python3 .ab/decode_ncu.py > $OUT/dec_ncu.txt 2>&1; echo "dec ncu rc=$?"
STEPS="env tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 OUT=$OUT bash tests/gpu_session.sh > $OUT/session.txt 2>&1
echo "== README table"
timeout 150 python3 tools/bench_kvcache.py --grid 1x1,1x8,4x8,8x8,32x8,64x8 > $OUT/bench_kvcache.txt 2>&1; echo "table rc=$?"
echo "== small step source view"
timeout 60 ncu --set full --import-source yes --warp-sampling-interval 0 -k regex:'mma_fwd' --launch-skip 2 --launch-count 1 -f -o $OUT/small \
  python3 .ab/small_one.py > $OUT/small_ncu.log 2>&1; echo "small rc=$?"
ncu -i $OUT/small.ncu-rep --page source --csv --print-source sass > $OUT/small_source.csv 2>&1
ncu -i $OUT/small.ncu-rep --page details > $OUT/small_details.txt 2>&1; rm -f $OUT/small.ncu-rep
echo "=================== SUMMARY"
grep -E "mma_fwd|read_ceiling|gpu__time|dram__|lts__" $OUT/dec_ncu.txt | sed 's/  */ /g' | cut -c1-100
python3 - <<'PY'
import os, re
out = os.environ.get("OUT", "/tmp/out")
def rows(f):
    r = {}
    for l in open(f):
        m = re.match(r"\s*(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+contiguous\s+([\d.nan]+)\s+([\d.nan]+)", l)
        if m: r[m.groups()[:3]] = (float(m.group(4)), float(m.group(5)))
    return r
b = [rows(f"{out}/ab_base_{p}.txt") for p in (1, 2)]
n = [rows(f"{out}/ab_new_{p}.txt") for p in (1, 2)]
print("B Hkv S   base(TB/s p1,p2)  new(p1,p2)  new/base  new/read")
for k in sorted(b[0], key=lambda k: (int(k[0]) * int(k[1]), int(k[2]))):
    bb = [x[k][0] for x in b if k in x]; nn = [x[k][0] for x in n if k in x]
    if not bb or not nn: continue
    rd = [x[k][1] for x in n if k in x]
    print(*k, [round(v, 2) for v in bb], [round(v, 2) for v in nn],
          round(max(nn) / max(bb), 3), round(max(nn) / max(rd), 3))
PY
cat $OUT/summary.txt; tail -4 $OUT/tests.log
grep -E "contiguous|paged|host|cuDNN" $OUT/bench_kvcache.txt | tail -58 | head -60
grep -E "Duration|Registers Per|Elapsed Cycles" $OUT/small_details.txt | head -5
