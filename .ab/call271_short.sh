#!/usr/bin/env bash
# The short form of .ab/call271_273.sh (session 54, ~300 s of device time left): both prepared
# patches applied, main's tree in .ab/base (carried). In order, each step cut to the time left
# before DEADLINE: (1) the decode GPU tests (KV cache, split-KV, decode tiles); (2) racecheck and
# memcheck on small launches over pages of 64/32/16 (v101); (3) pages_ab 32 (v101); (4) ring_ab
# G = 1 against .ab/base (v99); (5) pages_ab 16.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
DEADLINE=${DEADLINE:-300}
lim() { local l=$((DEADLINE - SECONDS)); [ $l -gt $1 ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
CELLS=1x1x8192,1x1x32768,1x1x131072,1x8x32768
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout $(lim 150) python3 -m pytest -q -m gpu tests/test_kvcache.py tests/test_split_kv.py tests/test_decode_tiles.py -rfE -p no:cacheprovider -n 16 > $OUT/kvtests.txt 2>&1; echo "kvtests rc=$? ${SECONDS}s"; tail -2 $OUT/kvtests.txt
timeout $(lim 25) python3 .ab/warp_race.py > $OUT/race_warm.txt 2>&1; echo "warm rc=$? ${SECONDS}s"; tail -1 $OUT/race_warm.txt
timeout $(lim 50) compute-sanitizer --tool racecheck --error-exitcode 1 python3 .ab/warp_race.py > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$? ${SECONDS}s"; tail -1 $OUT/racecheck.txt
timeout $(lim 35) compute-sanitizer --tool memcheck --error-exitcode 1 python3 .ab/warp_race.py > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$? ${SECONDS}s"; tail -1 $OUT/memcheck.txt
timeout $(lim 70) python3 .ab/pages_ab.py 32 > $OUT/pages32.txt 2>&1; echo "pages 32 rc=$? ${SECONDS}s"
echo "== pages of 32"; grep -E "^check|S=" $OUT/pages32.txt | tail -8 | cut -c1-150
(timeout $(lim 60) python3 .ab/ring_ab.py auto@64 $CELLS 1 > $OUT/new_g1.txt 2>&1; echo "new G=1 rc=$?")
(cd .ab/base && PYTHONPATH=$PWD timeout $(lim 60) python3 ../ring_ab.py auto@64 $CELLS 1 > $OUT/base_g1.txt 2>&1; echo "base G=1 rc=$? ${SECONDS}s")
for f in base_g1 new_g1; do echo "== $f"; grep "S=" $OUT/$f.txt | tail -4 | cut -c1-120; done
timeout $(lim 70) python3 .ab/pages_ab.py 16 > $OUT/pages16.txt 2>&1; echo "pages 16 rc=$? ${SECONDS}s"
echo "== pages of 16"; grep -E "^check|S=" $OUT/pages16.txt | tail -8 | cut -c1-150
