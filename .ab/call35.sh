# compute-sanitizer memcheck and racecheck on the final kernels (kernels compiled first, outside the sanitizer)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
STEPS="sanitize" LIMIT_SANITIZE=140 TAIL=4 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
cat $OUT/summary.txt
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|^ok|Error" $OUT/sanitize.log | sort | uniq -c | sort -rn | head -12
tail -3 $OUT/sanitize-warm.log
