#!/usr/bin/env bash
# call 234 (session 46): the whole GPU suite on the working tree (the commit to be stopped at),
# then, with the time left, the 128 x 176 probe (.ab/call233.sh; carry .ab/arms/n176).
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
L=${LIMIT:-590}
STEPS="env tests" LIMIT_TESTS=$((L - 20)) OUT=$OUT/gs TAIL=6 bash tests/gpu_session.sh 2>&1 | tail -8
(cd $OUT && tar czf gs.tgz gs && rm -rf gs)
echo "suite done at ${SECONDS}s"
if [ $((L - SECONDS)) -gt 150 ] && [ -d .ab/arms/n176 ]; then
  OUT=$OUT/n176 timeout $((L - SECONDS - 5)) bash .ab/call233.sh; (cd $OUT && tar czf n176.tgz n176 && rm -rf n176)
fi
echo "elapsed ${SECONDS}s"
