# call 59 (twelfth session, main at the merge of ws-backward): speed_vs_length for the README's
# table (ws forward and ws backward defaults, cuDNN and FA2 in the same run), racecheck on the
# float16 d = 128 cases (the ws backward), then ncu kernel times of the 4-warp backward tile:
# main's kernels (.ab/basemain) against this tree's (.ab/base4w: main's Python, these kernels).
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
T0=$SECONDS
STEPS="env speed" LIMIT_SPEED=270 TAIL=2 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
echo "speed at $((SECONDS - T0)) s"; grep "rc=" $OUT/session.txt
timeout 170 compute-sanitizer --tool racecheck --error-exitcode 1 python tests/sanitize.py case float16 128 > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$? at $((SECONDS - T0)) s"
grep -E "^ok|SUMMARY" $OUT/racecheck.txt | tail -3
L=$((470 - (SECONDS - T0)))
timeout $L python tools/ab_kernels.py --base .ab/basemain --new .ab/base4w --T 2048,8192 --d 64,128 --passes bwd --causal 0,1 --dtypes float16 --no-host > $OUT/abk_4w.txt 2>&1
echo "abk rc=$? at $((SECONDS - T0)) s"; tail -30 $OUT/abk_4w.txt | cut -c1-150
