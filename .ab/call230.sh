#!/usr/bin/env bash
# call 230 (session 45): v80's arms under ncu (clocks locked to base) and by wall time, softcap
# forward non-causal, d = 128 (.ab/softcap_ncu.py): base (.ab/base), new (ON_FMA 6, .ab/arms/on6), on8,
# rcp, mono (softcap's row max on the raw scores, tanh being increasing); then the whole GPU suite
# (LIMIT 580).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-300}
declare -A DIR=([new]=.ab/arms/on6 [base]=.ab/base [on8]=.ab/arms/on8 [rcp]=.ab/arms/rcp [mono]=.ab/arms/mono)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/env.txt
for a in base new on8 rcp mono; do   # compile side by side
  PYTHONPATH=${DIR[$a]} timeout 120 python3 .ab/softcap_ncu.py > /dev/null 2>&1 &
done
wait; echo "compiled at ${SECONDS}s"
for a in base new on8 rcp mono; do
  PYTHONPATH=${DIR[$a]} timeout 60 python3 .ab/softcap_ncu.py --time > $OUT/time_$a.txt 2>&1; echo "time $a rc=$?"
done
for a in base on8 mono rcp new; do
  left=$((L - 300 - SECONDS)); [ $left -gt 50 ] && left=50; [ $left -lt 25 ] && { echo "skip ncu $a"; continue; }
  PYTHONPATH=${DIR[$a]} timeout $left ncu --section SpeedOfLight --section WarpStateStats --section InstructionStats \
    --section ComputeWorkloadAnalysis -k regex:softcap --launch-skip 1 --launch-count 1 --csv --page raw \
    python3 .ab/softcap_ncu.py > $OUT/ncu_$a.csv 2> $OUT/ncu_$a.err
  echo "ncu $a rc=$? at ${SECONDS}s"
  python3 .ab/ncu_pick.py $OUT/ncu_$a.csv > $OUT/ncu_$a.txt 2>&1
done
cd $OUT && tar czf ncu.tgz ncu_*.csv ncu_*.err && rm -f ncu_*.csv ncu_*.err; cd - > /dev/null
for a in base new on8 rcp mono; do echo "== $a"; cat $OUT/time_$a.txt; grep -E "gpu__time_duration.sum|sm__inst_executed.sum|pipe_(fma|xu|alu|fmaheavy|fmalite)[a-z_]*.sum |pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active|stalls" $OUT/ncu_$a.txt | head -14; done
echo "elapsed ${SECONDS}s"
# then the whole GPU suite on the working tree (main's HEAD: v80 is not merged)
left=$((L - 15 - SECONDS))
if [ $left -gt 120 ]; then
  STEPS="env tests" LIMIT_TESTS=$left OUT=$OUT/gs TAIL=6 bash tests/gpu_session.sh 2>&1 | tail -12
  cd $OUT && tar czf gs.tgz gs && rm -rf gs; cd - > /dev/null
fi
echo "elapsed ${SECONDS}s"
