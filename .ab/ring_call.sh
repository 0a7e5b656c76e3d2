#!/bin/bash
# Issue 16's remaining deliverables on 2 H200s of one host (the lead runs this; under 8 minutes):
#  1. the 2-GPU tests of cuflash.distributed (ring_demo.py --check under the env-var launch and
#     under mpirun, NcclComm with one rank, the simulated ring on one GPU);
#  2. experiments/ring.yaml into $OUT/ring: ring attention on 2 GPUs (one NCCL worker process
#     per GPU per point, started by the runner) against single-GPU cuflash at the same T:
#     throughput per GPU, compute-only / comm-only times, max context (an 'oom' row, not a
#     crash); the CSV is written row by row, so a time-out keeps what was measured (rerunning
#     the same command resumes);
#  3. its plots, redrawn from the CSV alone; 4. the table (python -m cuflash.experiments.report
#     ring), printed last.
# Timeouts: 110 + 320 + 30 s, plus a few seconds of set-up.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvidia-smi topo -m; python -c "import cupy, sys; print(sys.version.split()[0], 'cupy', cupy.__version__)"
} > $OUT/env.txt 2>&1
head -3 $OUT/env.txt

stamp "tests: python -m pytest -q -m gpu tests/test_distributed.py"
timeout -k 10 110 python -m pytest -q -m gpu tests/test_distributed.py -rfE -p no:cacheprovider \
    > $OUT/tests_distributed.log 2>&1
echo "tests rc=$?"; tail -2 $OUT/tests_distributed.log; grep -E "^(FAILED|ERROR)" $OUT/tests_distributed.log | head

stamp "experiment: python -m cuflash run experiments/ring.yaml --out \$OUT/ring"
timeout -k 15 320 python -m cuflash run experiments/ring.yaml --out $OUT/ring > $OUT/ring_run.log 2>&1
echo "run rc=$?"
grep -E "^\[[0-9]+/|^measured|failed|Error" $OUT/ring_run.log | cut -c1-240 | tail -34

stamp "plots: python -m cuflash plot \$OUT/ring/results.csv"
timeout -k 5 30 python -m cuflash plot $OUT/ring/results.csv > $OUT/ring_plot.log 2>&1
echo "plot rc=$?"; tail -4 $OUT/ring_plot.log

stamp "table: python -m cuflash.experiments.report ring \$OUT/ring/results.csv"
python -m cuflash.experiments.report ring $OUT/ring/results.csv > $OUT/ring_table.md 2>&1
cat $OUT/ring_table.md
stamp "done"
