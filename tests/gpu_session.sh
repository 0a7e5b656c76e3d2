#!/usr/bin/env bash
# One call on a GPU machine: environment, GPU test suite, compute-sanitizer, benchmarks.
# Logs and result CSVs go under $OUT (default /tmp/cuflash_out); a short summary prints last.
#   STEPS="env tests sanitize bench" bash tests/gpu_session.sh
# Each step has a time limit (seconds) from LIMIT_<STEP>; a step that fails or times out is
# reported and the next one runs.
set -u
OUT=${OUT:-/tmp/cuflash_out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PY=${PYTHON:-python3}
STEPS=${STEPS:-"env tests sanitize bench"}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

step() {  # step NAME LIMIT CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "=== $name (limit ${limit}s): $*"
  timeout --signal=INT --kill-after=20 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$SUMMARY"
  tail -n "${TAIL:-15}" "$OUT/$name.log"
}

for s in $STEPS; do
  case $s in
    env) step env 60 bash -c "nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv; \
          $PY -c 'import cupy, numpy, sys; print(sys.version); print(\"cupy\", cupy.__version__, \"numpy\", numpy.__version__); cupy.show_config()'; \
          git log -1 --format='%H %s' 2>/dev/null || true" ;;
    tests) step tests "${LIMIT_TESTS:-300}" $PY -m pytest -q -m gpu tests -rfE -p no:cacheprovider \
          --junitxml="$OUT/tests.xml" ${PYTEST_ARGS:-} ;;
    sanitize) step memcheck "${LIMIT_SAN:-150}" compute-sanitizer --tool memcheck --error-exitcode 1 $PY tests/sanitize.py
              step racecheck "${LIMIT_SAN:-150}" compute-sanitizer --tool racecheck --error-exitcode 1 $PY tests/sanitize.py ;;
    bench) step bench "${LIMIT_BENCH:-240}" $PY -m cuflash run "${BENCH_FILE:-experiments/speed_vs_length.yaml}" \
          --out "$OUT/bench" ${BENCH_SET:-} ;;
    ablation) step ablation "${LIMIT_ABL:-200}" $PY -m cuflash run experiments/tile_ablation.yaml --out "$OUT/ablation" ;;
    *) echo "unknown step $s" ;;
  esac
done
echo "=== summary"
cat "$SUMMARY"
