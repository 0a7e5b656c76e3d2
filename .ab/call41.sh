# final kernels: compute-sanitizer memcheck and racecheck on tests/sanitize.py
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
STEPS="sanitize" LIMIT_SANITIZE=200 TAIL=4 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
cat $OUT/summary.txt; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|hazard" $OUT/sanitize.log | tail -8
