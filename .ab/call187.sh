#!/usr/bin/env bash
# call 187 (a later session; can share a call with 186 if time allows): the IO model of float32's
# staged paths (NOTES "IO model of the staged float32 paths", commit 9851879): ncu DRAM bytes of
# 'ieee', 'tf32' and 'highest', forward and backward, against iomodel's plain and L2 models.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 400 python3 -m cuflash run experiments/io_bytes_float32.yaml --out $OUT/io_f32 \
  > $OUT/io_f32.txt 2>&1; echo "io_f32 rc=$?" >> $OUT/side.txt
python3 -m cuflash.experiments.report io $OUT/io_f32/results.csv > $OUT/io_report.txt 2>&1
echo "=================== SUMMARY"; cat $OUT/side.txt; tail -5 $OUT/io_f32.txt; cat $OUT/io_report.txt
