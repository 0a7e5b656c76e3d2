#!/usr/bin/env bash
# call 241 (prepared in session 46, for issue 11): where softcap's forward warps stall, per SASS
# instruction. ncu's SourceCounters and WarpStateStats sections (PC sampling) on the second
# launch of the plain and of the softcap d = 128 ws forward (.ab/softcap_ncu.py's case: float16,
# T = 8192, B = 2, H = 16), each page exported as CSV and summarized by .ab/sass_stalls.py.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/env.txt
python3 .ab/softcap_ncu.py   # compile first, outside the profiler
declare -A K=([plain]='regex:w12_s2$' [softcap]='regex:w12_s2_softcap$')
for c in plain softcap; do
  timeout 200 ncu --section SourceCounters --section WarpStateStats -k "${K[$c]}" --launch-skip 1 \
    --launch-count 1 -f -o $OUT/$c python3 .ab/softcap_ncu.py > $OUT/ncu_$c.log 2>&1
  echo "ncu $c rc=$? at ${SECONDS}s"; tail -2 $OUT/ncu_$c.log
  ncu -i $OUT/$c.ncu-rep --page source --csv --print-source sass > $OUT/${c}_sass.csv 2> $OUT/${c}_page.err
  echo "page $c rc=$?: $(wc -l < $OUT/${c}_sass.csv) lines"; head -c 300 $OUT/${c}_page.err
  ncu -i $OUT/$c.ncu-rep --page details --csv > $OUT/${c}_details.csv 2>/dev/null
  python3 .ab/sass_stalls.py $OUT/${c}_sass.csv 40 > $OUT/${c}_stalls.txt 2>&1; head -30 $OUT/${c}_stalls.txt
done
(cd $OUT && tar czf ncu.tgz *.ncu-rep *_sass.csv *_details.csv && rm -f *.ncu-rep *_sass.csv *_details.csv)
echo "elapsed ${SECONDS}s"
