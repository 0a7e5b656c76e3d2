#!/usr/bin/env bash
# Call 271 (prepared in session 53, NOTES v99): the merge's warps share the block's memory when a
# tile has fewer rows than warps (.ab/mergeroom99.patch, applied to the tree before the call;
# main's kernels in .ab/base, carried: git archive HEAD cuflash kernels_cu tools | tar -x -C .ab/base).
# (1) the split-KV and KV-cache GPU tests on the patched tree; (2) each tree's decode steps with
# one query head a kv head (G = 1: one row a tile) and with G = 4 (four rows: unchanged).
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
CELLS=1x1x8192,1x1x32768,1x1x131072,1x8x32768
timeout 150 python3 -m pytest -q -m gpu tests/test_kvcache.py tests/test_split_kv.py -x -p no:cacheprovider -n 16 > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.txt
for g in 1 4; do
  (timeout 80 python3 .ab/ring_ab.py auto@64 $CELLS $g > $OUT/new_g$g.txt 2>&1; echo "new G=$g rc=$?")
  (cd .ab/base && PYTHONPATH=$PWD timeout 80 python3 ../ring_ab.py auto@64 $CELLS $g > $OUT/base_g$g.txt 2>&1; echo "base G=$g rc=$?")
done
for f in base_g1 new_g1 base_g4 new_g4; do echo "== $f"; grep "S=" $OUT/$f.txt | tail -4 | cut -c1-120; done
