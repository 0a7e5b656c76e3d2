#!/usr/bin/env bash
# Session 56, call 282 (NOTES v106): cluster placement probe; cluster vs L2 merge at long decode
# steps; the bench grid's last cell (64 x 8 at 131072, contiguous and paged) after the _paged mend.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
DEADLINE=${DEADLINE:-400}
lim() { local l=$((DEADLINE - SECONDS)); [ $l -gt $1 ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
timeout $(lim 60) python3 .ab/cluster_place.py > $OUT/place.txt 2>&1; echo "place rc=$? ${SECONDS}s"
timeout $(lim 200) python3 .ab/cluster_ab.py 4x8x1024,4x8x8192,4x8x32768,4x8x131072,8x8x8192,8x8x131072,2x8x1024,2x8x32768,1x8x1024 > $OUT/cluster_ab.txt 2>&1; echo "cluster_ab rc=$? ${SECONDS}s"
timeout $(lim 120) python3 tools/bench_kvcache.py --grid 64x8 --S 131072 --layouts contiguous,paged --pages 256 --host-calls 3000 > $OUT/bench_last.txt 2>&1; echo "bench rc=$? ${SECONDS}s"
echo "== results"; cat $OUT/place.txt | cut -c1-160
grep -E "max \|err\|" $OUT/cluster_ab.txt | awk '{print $NF}' | sort -g | tail -1
sed -n '/=== µs/,$p' $OUT/cluster_ab.txt | cut -c1-190; tail -3 $OUT/cluster_ab.txt | grep -i error
grep -E "^ 64|host |error|Error" $OUT/bench_last.txt | head -12 | cut -c1-160
