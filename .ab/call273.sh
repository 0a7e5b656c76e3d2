#!/usr/bin/env bash
# Call 273 (session 54): ring_ab G = 4 against .ab/base (v99: predicted unchanged), then the whole
# GPU suite on the tree as it stands (both patches applied unless a refuted one was reverted).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
CELLS=1x1x8192,1x1x32768,1x1x131072,1x8x32768
(timeout 70 python3 .ab/ring_ab.py auto@64 $CELLS 4 > $OUT/new_g4.txt 2>&1; echo "new G=4 rc=$?")
(cd .ab/base && PYTHONPATH=$PWD timeout 70 python3 ../ring_ab.py auto@64 $CELLS 4 > $OUT/base_g4.txt 2>&1; echo "base G=4 rc=$?")
STEPS="env tests" LIMIT_TESTS=330 OUT=$OUT/gs TAIL=6 bash tests/gpu_session.sh
for f in base_g4 new_g4; do echo "== $f"; grep "S=" $OUT/$f.txt | tail -4 | cut -c1-120; done
