#!/usr/bin/env bash
# One call on a GPU machine: environment, GPU test suite, compute-sanitizer, experiments.
# Each experiment's results directory and log are packed into $OUT/<step>.tgz as soon as the
# step ends (a device call returns at most 8 files), so a later step that times out loses
# nothing. A short summary prints last.
#   STEPS="env fast tests sanitize ab ablation speed memory io variants gqa varlen precision" \
#     bash tests/gpu_session.sh
# fast: the fast GPU tier; tests: the full GPU suite (both with pytest-xdist, JOBS processes,
# when it is installed: compiling kernels is most of their time); ab: tools/ab_speed.py against
# the tree in .ab/base (carry .ab/base, which git ignores; see README, Development).
# Limits (seconds): LIMIT_<STEP> (and LIMIT_SANITIZE_WARM); extra `cuflash run` arguments:
# SET_<STEP>; the sanitizer's part of tests/sanitize.py: SANITIZE_ARGS (e.g. "kv").
set -u
OUT=${OUT:-/tmp/cuflash_out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PY=${PYTHON:-python3}
# JOBS: the machine's CPUs by default (on a fresh H200 the suite's cold compiles took over 280 s
# at 12 processes, 62 s warm at 16: NOTES v69, call 206)
XDIST=$($PY -c "import xdist" 2>/dev/null && echo "-n ${JOBS:-$(nproc)}")
STEPS=${STEPS:-"env tests sanitize"}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

step() {  # step NAME LIMIT CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "=== $name (limit ${limit}s): $*"
  timeout --signal=INT --kill-after=15 "$limit" "$@" >> "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$SUMMARY"
  tail -n "${TAIL:-12}" "$OUT/$name.log"
}

experiment() {  # experiment NAME FILE LIMIT [cuflash run args...]
  local name=$1 file=$2 limit=$3; shift 3
  step "$name" "$limit" $PY -m cuflash run "$file" --out "$OUT/$name" "$@"
  tar -czf "$OUT/$name.tgz" -C "$OUT" "$name" "$name.log" && rm -rf "$OUT/$name" "$OUT/$name.log"
}

for s in $STEPS; do
  case $s in
    env) step env 60 bash -c "nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv; \
          $PY -c 'import cupy, numpy, sys; print(sys.version); print(\"cupy\", cupy.__version__, \"numpy\", numpy.__version__)'; \
          git log -1 --format='%H %s' 2>/dev/null || true" ;;
    fast) step fast "${LIMIT_FAST:-150}" $PY -m pytest -q -m "gpu and not slow" tests -rfE -p no:cacheprovider $XDIST ${PYTEST_ARGS:-} ;;
    tests) step tests "${LIMIT_TESTS:-400}" $PY -m pytest -q -m gpu tests -rfE -p no:cacheprovider $XDIST ${PYTEST_ARGS:-} ;;
    ab) step ab "${LIMIT_AB:-420}" $PY tools/ab_speed.py --base .ab/base --new . ${AB_ARGS:-} ;;
    variants) experiment variants experiments/variants.yaml "${LIMIT_VARIANTS:-580}" ${SET_VARIANTS:-} ;;
    gqa) experiment gqa experiments/gqa.yaml "${LIMIT_GQA:-300}" ${SET_GQA:-} ;;
    varlen) experiment varlen experiments/varlen.yaml "${LIMIT_VARLEN:-300}" ${SET_VARLEN:-} ;;
    precision) experiment precision experiments/precision.yaml "${LIMIT_PRECISION:-420}" ${SET_PRECISION:-} ;;
    sanitize) # compiled first without the sanitizer (CuPy's disk cache), so that its time
              # goes to the kernels: NVRTC under memcheck took most of the 75 s limit before.
              # On a fresh machine the whole set takes more than 120 s to compile (call 115);
              # SANITIZE_ARGS="kv" (or "case DTYPE D") runs a part of tests/sanitize.py.
              step sanitize-warm "${LIMIT_SANITIZE_WARM:-240}" $PY tests/sanitize.py ${SANITIZE_ARGS:-}
              step sanitize "${LIMIT_SANITIZE:-60}" compute-sanitizer --tool memcheck --error-exitcode 1 $PY tests/sanitize.py ${SANITIZE_ARGS:-}
              step sanitize "${LIMIT_SANITIZE:-60}" compute-sanitizer --tool racecheck --error-exitcode 1 $PY tests/sanitize.py ${SANITIZE_ARGS:-} ;;
    ablation) experiment ablation experiments/tile_ablation.yaml "${LIMIT_ABLATION:-150}" ${SET_ABLATION:-} ;;
    speed) experiment speed experiments/speed_vs_length.yaml "${LIMIT_SPEED:-300}" ${SET_SPEED:-} ;;
    memory) experiment memory experiments/memory_vs_length.yaml "${LIMIT_MEMORY:-90}" ${SET_MEMORY:-} ;;
    io) experiment io experiments/io_bytes.yaml "${LIMIT_IO:-300}" ${SET_IO:-} ;;
    *) echo "unknown step $s" ;;
  esac
done
echo "=== summary"
cat "$SUMMARY"
