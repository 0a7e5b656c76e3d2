#!/usr/bin/env bash
# v104 (NOTES): `git apply .ab/merge104.patch` first; main's tree in .ab/base (carried:
# rm -rf .ab/base; mkdir -p .ab/base && git archive HEAD cuflash kernels_cu tools | tar -x -C .ab/base).
# (1) the lone-merge and split GPU tests; (2) .ab/merge_race.py under racecheck and memcheck;
# (3) ring_ab G = 4 and G = 1, patched tree and base, each in its own process. Each step cut to the
# time left before DEADLINE; key results last.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
DEADLINE=${DEADLINE:-300}
lim() { local l=$((DEADLINE - SECONDS)); [ $l -gt $1 ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
CELLS=1x1x8192,1x1x32768,1x1x131072,1x8x32768
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
timeout $(lim 120) python3 -m pytest -q -m gpu tests/test_kvcache.py tests/test_split_kv.py -rfE -p no:cacheprovider -n 16 > $OUT/tests.txt 2>&1; echo "tests rc=$? ${SECONDS}s"
timeout $(lim 30) python3 .ab/merge_race.py > $OUT/race_warm.txt 2>&1; echo "warm rc=$? ${SECONDS}s"
timeout $(lim 60) compute-sanitizer --tool racecheck --error-exitcode 1 python3 .ab/merge_race.py > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$? ${SECONDS}s"
timeout $(lim 40) compute-sanitizer --tool memcheck --error-exitcode 1 python3 .ab/merge_race.py > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$? ${SECONDS}s"
# G = 4 also with at most 32 splits (auto@32): v104's one-buffer rule stages 32 splits of four rows
# in one round within the layout's own memory, so the best cap may move
for G in 4 1; do
  ARMS=auto@64; [ $G = 4 ] && ARMS=auto@64,auto@32
  (timeout $(lim 70) python3 .ab/ring_ab.py $ARMS $CELLS $G > $OUT/new_g$G.txt 2>&1; echo "new G=$G rc=$?")
  (cd .ab/base && PYTHONPATH=$PWD timeout $(lim 70) python3 ../ring_ab.py $ARMS $CELLS $G > $OUT/base_g$G.txt 2>&1; echo "base G=$G rc=$? ${SECONDS}s")
done
echo "== results"; tail -1 $OUT/tests.txt; grep -E "^FAILED|^ERROR" $OUT/tests.txt | head -5 | cut -c1-200
tail -1 $OUT/race_warm.txt; tail -1 $OUT/racecheck.txt; tail -1 $OUT/memcheck.txt
for f in base_g4 new_g4 base_g1 new_g1; do echo "== $f"; grep "S=" $OUT/$f.txt | tail -4 | cut -c1-170; done
