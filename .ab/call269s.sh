#!/usr/bin/env bash
# Call 269 (session 53): the decode sanitizer (tests/sanitize.py kv, with d = 256 over pages of 32
# in 16-bit), racecheck given the time it needs.
export PYTHONPATH=$PWD
STEPS="sanitize" LIMIT_SANITIZE_WARM=120 LIMIT_SANITIZE=200 SANITIZE_ARGS=kv OUT=$OUT/san TAIL=4 \
  bash tests/gpu_session.sh 2>&1 | tail -24
