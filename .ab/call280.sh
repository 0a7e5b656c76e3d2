#!/usr/bin/env bash
# Session 56, call 280 (warm machine of call 279): ring_ab on three trees, each in its own process:
# the working tree (main + v104 + chunk copier), .ab/arms/v104 (main + v104) and .ab/base (main);
# G = 4 (arms auto@64, auto@32) and G = 1; then tests/sanitize.py kv under racecheck.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT
DEADLINE=${DEADLINE:-570}
lim() { local l=$((DEADLINE - SECONDS)); [ $l -gt $1 ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
CELLS=1x1x8192,1x1x32768,1x1x131072,1x8x32768
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for G in 4 1; do
  ARMS=auto@64; [ $G = 4 ] && ARMS=auto@64,auto@32
  for T in new v104 base; do
    D=.; [ $T = v104 ] && D=.ab/arms/v104; [ $T = base ] && D=.ab/base
    (cd $D && PYTHONPATH=$PWD timeout $(lim 80) python3 $OLDPWD/.ab/ring_ab.py $ARMS $CELLS $G > $OUT/${T}_g$G.txt 2>&1; echo "$T G=$G rc=$? ${SECONDS}s")
  done
done
timeout $(lim 200) compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitize.py kv > $OUT/kv_racecheck.txt 2>&1; echo "kv racecheck rc=$? ${SECONDS}s"
echo "== results"; tail -1 $OUT/kv_racecheck.txt
for f in base_g4 v104_g4 new_g4 base_g1 v104_g1 new_g1; do echo "== $f"; grep "S=" $OUT/$f.txt | tail -4 | cut -c1-190; done
