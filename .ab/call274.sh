#!/usr/bin/env bash
# Session 55's first call: both prepared patches applied (.ab/pages101.patch,
# .ab/mergeroom99.patch), main's tree in .ab/base (carried). The whole GPU suite first (271 s on
# an H100 in call 268), then each step cut to the time left before DEADLINE: pages_ab 32 (v101),
# ring_ab G = 1 against .ab/base (v99), racecheck and memcheck on the warp-local decode tile
# (v101), pages_ab 16. Key results print last.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
DEADLINE=${DEADLINE:-580}
lim() { local l=$((DEADLINE - SECONDS)); [ $l -gt $1 ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
CELLS=1x1x8192,1x1x32768,1x1x131072,1x8x32768
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
STEPS="env tests" LIMIT_TESTS=310 OUT=$OUT/gs TAIL=3 bash tests/gpu_session.sh > $OUT/gs.txt 2>&1; echo "suite ${SECONDS}s"
timeout $(lim 70) python3 .ab/pages_ab.py 32 > $OUT/pages32.txt 2>&1; echo "pages 32 rc=$? ${SECONDS}s"
(timeout $(lim 60) python3 .ab/ring_ab.py auto@64 $CELLS 1 > $OUT/new_g1.txt 2>&1; echo "new G=1 rc=$?")
(cd .ab/base && PYTHONPATH=$PWD timeout $(lim 60) python3 ../ring_ab.py auto@64 $CELLS 1 > $OUT/base_g1.txt 2>&1; echo "base G=1 rc=$? ${SECONDS}s")
timeout $(lim 25) python3 .ab/warp_race.py > $OUT/race_warm.txt 2>&1; echo "warm rc=$? ${SECONDS}s"; tail -1 $OUT/race_warm.txt
timeout $(lim 50) compute-sanitizer --tool racecheck --error-exitcode 1 python3 .ab/warp_race.py > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$? ${SECONDS}s"; tail -1 $OUT/racecheck.txt
timeout $(lim 35) compute-sanitizer --tool memcheck --error-exitcode 1 python3 .ab/warp_race.py > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$? ${SECONDS}s"; tail -1 $OUT/memcheck.txt
#timeout $(lim 70) python3 .ab/pages_ab.py 16 > $OUT/pages16.txt 2>&1; echo "pages 16 rc=$? ${SECONDS}s"
echo "== suite"; grep -E "rc=|passed|failed" $OUT/gs.txt | tail -4; grep -E "^FAILED|^ERROR" -r $OUT/gs | head -8 | cut -c1-200
for p in 16 32; do echo "== pages of $p"; grep -E "^check|S=" $OUT/pages$p.txt | tail -8 | cut -c1-150; done
for f in base_g1 new_g1; do echo "== $f"; grep "S=" $OUT/$f.txt | tail -4 | cut -c1-120; done
