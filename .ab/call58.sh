# call 58 (twelfth session): the ws backward as the default at d <= 128 (tile.py) and bwd_probs'
# single element loop (softmax.cuh): the whole GPU suite, the backward side by side with main
# (.ab/basemain: main's tree; .ab/base4w: main's Python with this tree's kernels, i.e. the 4-warp
# backward with the new bwd_probs), memcheck on the float16 d = 128 cases.
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
T0=$SECONDS
STEPS="tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 bash tests/gpu_session.sh > $OUT/suite.txt 2>&1
echo "suite at $((SECONDS - T0)) s"; tail -4 $OUT/suite.txt; tail -3 $OUT/tests.log
AB="--passes bwd --T 2048,8192 --d 64,128 --dtypes float16 --causal 0,1 --rounds 2"
timeout 110 python tools/ab_speed.py --base .ab/basemain --new . $AB > $OUT/ab_main.txt 2>&1
echo "ab main at $((SECONDS - T0)) s"
timeout 100 python tools/ab_speed.py --base .ab/basemain --new .ab/base4w $AB > $OUT/ab_4w.txt 2>&1
echo "ab 4w at $((SECONDS - T0)) s"
L=$((560 - (SECONDS - T0) - 10))
timeout $L compute-sanitizer --tool memcheck --error-exitcode 1 python tests/sanitize.py case float16 128 > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$? at $((SECONDS - T0)) s"
grep -E "^ok|SUMMARY" $OUT/memcheck.txt | tail -4
tail -14 $OUT/ab_main.txt; tail -5 $OUT/ab_4w.txt
