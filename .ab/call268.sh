#!/usr/bin/env bash
# Call 268 (session 53): the whole GPU suite at the session's first commit, then the decode
# sanitizer (tests/sanitize.py kv: now also d = 256 over pages of 32, the 16 x 32 x 2 and
# 32 x 32 x 2 tiles).
export PYTHONPATH=$PWD
STEPS="env tests sanitize" LIMIT_TESTS=330 LIMIT_SANITIZE_WARM=120 LIMIT_SANITIZE=70 \
  SANITIZE_ARGS=kv OUT=$OUT/gs TAIL=6 bash tests/gpu_session.sh 2>&1 | tail -40
