#!/usr/bin/env bash
# Session 52, first call: the whole GPU suite at the final commit, then v93's A/B (8 warps per decode block).
export PYTHONPATH=$PWD
mkdir -p $OUT
STEPS="env tests" LIMIT_TESTS=330 OUT=$OUT/gs TAIL=6 bash tests/gpu_session.sh > $OUT/gs.txt 2>&1
tail -12 $OUT/gs.txt
timeout 200 python3 .ab/ring_ab.py 16x128x8x3,16x128x8x2 > $OUT/v93.txt 2>&1; echo "v93 rc=$?"
tail -30 $OUT/v93.txt
timeout 150 python3 .ab/page32_ab.py > $OUT/page32.txt 2>&1; echo "page32 rc=$?"
tail -9 $OUT/page32.txt
