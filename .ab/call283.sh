#!/usr/bin/env bash
# NOTES v107, first call of the next session: `git apply .ab/cluster_fit107.patch` first.
# (1) the clusters' SM cover from the driver (clusters of 2, 4, 8 of the decode kernel);
# (2) the new and the cluster tests; (3) cluster_ab with the new rule (its "cl" arm is now the
# library's rule: equal to the L2 arm where clusters would stack, ~0.91 at 1 x 8, 1k);
# (4) the whole GPU suite. Each step cut to the time left before DEADLINE; key results last.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
DEADLINE=${DEADLINE:-560}
lim() { local l=$((DEADLINE - SECONDS)); [ $l -gt $1 ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
timeout $(lim 40) python3 -c "
import dataclasses, cupy as cp
from cuflash import kvcache, TileConfig
from cuflash.gpu import ops, plan
s = ops._specs('float16', 128, TileConfig(16, 64, 4, 3, 'mma'), plan.Variant(mask='causal', split=True, cache='cache'), False)[0]
print('spec', s.name)
for c in (2, 4, 8):
    cs = dataclasses.replace(s, variant=dataclasses.replace(s.variant, cluster=c))
    print('clusters of', c, 'cover', ops._cluster_sms(cs, 0), 'of', ops.sm_count(), 'SMs')
" > $OUT/cover.txt 2>&1; echo "cover rc=$? ${SECONDS}s"
timeout $(lim 90) python3 -m pytest -q -m gpu tests/test_kvcache.py -k "stack_blocks or split_clusters" -rfE -p no:cacheprovider -n 8 > $OUT/tests.txt 2>&1; echo "tests rc=$? ${SECONDS}s"
timeout $(lim 90) python3 .ab/cluster_ab.py 4x8x8192,4x8x32768,4x8x131072,2x8x32768,8x8x8192,1x8x1024 > $OUT/cluster_ab.txt 2>&1; echo "cluster_ab rc=$? ${SECONDS}s"
LIMIT_TESTS=$(lim 300) STEPS="env tests" bash tests/gpu_session.sh > $OUT/gs.txt 2>&1; echo "suite done ${SECONDS}s"
echo "== results"; cat $OUT/cover.txt | tail -5; tail -1 $OUT/tests.txt; grep -E "^FAILED|^ERROR" $OUT/tests.txt | head -5 | cut -c1-200
grep -A3 "=== summary" $OUT/gs.txt; grep -E "passed|failed" $OUT/gs.txt | tail -1; grep -E "^FAILED|^ERROR" $OUT/gs.txt | head -8 | cut -c1-200
sed -n '/=== µs/,$p' $OUT/cluster_ab.txt | cut -c1-190; tail -3 $OUT/cluster_ab.txt | grep -i error
