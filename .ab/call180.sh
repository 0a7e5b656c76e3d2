#!/usr/bin/env bash
# call 180 (session 34, the last 180 s of device time): v57 against a12f798 (.ab/base) on 'tf32''s
# backward at d = 128, with ab_speed passing the cell's precision to the backward (call 179's
# A/B timed 'highest''s: attention_backward's default).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
python3 tools/ab_speed.py --base $PWD/.ab/base --new $PWD --dtypes float32:tf32 --d 128 \
  --T 2048,4096 --passes bwd --causal 0,1 --rounds 1 --json $OUT/ab.json 2>&1 | tee $OUT/ab.txt | tail -12
