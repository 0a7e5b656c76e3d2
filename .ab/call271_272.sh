#!/usr/bin/env bash
# Calls 271+272 in one (session 54): both prepared patches applied (.ab/pages101.patch,
# .ab/mergeroom99.patch), main's tree in .ab/base. (1) racecheck/memcheck on small launches over
# pages of 64/32/16 (v101); (2) pages_ab 16 and 32 (v101); (3) ring_ab G = 1 against .ab/base (v99).
# The GPU tests of both run in the whole suite that follows (call 273).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
CELLS=1x1x8192,1x1x32768,1x1x131072,1x8x32768
timeout 40 python3 .ab/warp_race.py > $OUT/race_warm.txt 2>&1; echo "warm rc=$?"; tail -1 $OUT/race_warm.txt
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 1 python3 .ab/warp_race.py > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$?"
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 1 python3 .ab/warp_race.py > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$?"
for p in 16 32; do timeout 90 python3 .ab/pages_ab.py $p > $OUT/pages$p.txt 2>&1; echo "pages $p rc=$?"; done
(timeout 80 python3 .ab/ring_ab.py auto@64 $CELLS 1 > $OUT/new_g1.txt 2>&1; echo "new G=1 rc=$?")
(cd .ab/base && PYTHONPATH=$PWD timeout 80 python3 ../ring_ab.py auto@64 $CELLS 1 > $OUT/base_g1.txt 2>&1; echo "base G=1 rc=$?")
tail -1 $OUT/racecheck.txt; tail -1 $OUT/memcheck.txt
for p in 16 32; do echo "== pages of $p"; grep -E "^check|S=" $OUT/pages$p.txt | tail -8 | cut -c1-150; done
for f in base_g1 new_g1; do echo "== $f"; grep "S=" $OUT/$f.txt | tail -4 | cut -c1-120; done
