#!/usr/bin/env bash
# call 86 (next session, first): issue 12's family matrix (tests/test_layout_families.py, written
# after session 16's last device call), issue 15's long-T float32 error (.ab/f32_longT.py)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 300 python3 -m pytest -q -m gpu tests/test_layout_families.py -n 14 -rfE -p no:cacheprovider > $OUT/families.log 2>&1; echo "families rc=$?"
tail -3 $OUT/families.log; grep -h "^FAILED\|^ERROR" $OUT/families.log | head -20
timeout 200 python3 .ab/f32_longT.py > $OUT/f32_longT.txt 2>&1; echo "f32 longT rc=$?"; cat $OUT/f32_longT.txt | tail -25
