#!/usr/bin/env bash
# call 222 (session 43): NOTES v77's question, ALiBi's wall-clock cost against its cycles:
# .ab/alibi_power.py (each case back to back for 3 s, SM clock and power sampled), then the
# single-launch event timing of call 220 again.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
timeout 240 python3 .ab/alibi_power.py --seconds 3 > $OUT/alibi_power.txt 2>&1; echo "power rc=$?"
timeout 60 python3 .ab/alibi_ncu.py --time > $OUT/alibi_time.txt 2>&1; echo "time rc=$?"
cat $OUT/alibi_power.txt | tail -14; cat $OUT/alibi_time.txt; echo "elapsed ${SECONDS}s"
