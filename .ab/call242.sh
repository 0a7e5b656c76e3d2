#!/usr/bin/env bash
# call 242 (session 47, prepared; not run: no device came): the checks the v81-v83 merge still
# owes, at main's kernels: the whole GPU suite, then call 240's compute-sanitizer memcheck and
# racecheck on the forwards v81-v83 changed (.ab/call240.sh, in the time left).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-590}
STEPS="env tests" LIMIT_TESTS=330 OUT=$OUT/gs TAIL=6 bash tests/gpu_session.sh 2>&1 | tail -8
(cd $OUT && tar czf gs.tgz gs && rm -rf gs); echo "suite done at ${SECONDS}s"
LIMIT=$((L - SECONDS - 5)) OUT=$OUT/san bash .ab/call240.sh
(cd $OUT && tar czf san.tgz san && rm -rf san)
