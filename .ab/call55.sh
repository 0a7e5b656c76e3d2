# call 55 (eleventh session, last): the final kernels. Whole GPU suite; compute-sanitizer
# memcheck and racecheck (tests/sanitize.py); issue 11's window, softcap (two-op tanh back) and
# ALiBi costs (3 rounds); the 8-warp backward tile with turns (dQ's old 4-warp tile) against
# the default; ncu's full set on both backward tiles (issue 13: where the backward's time goes);
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
T0=$SECONDS
left() { echo $(( $1 - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
STEPS="tests" JOBS=14 LIMIT_TESTS=240 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head
echo "suite done at $((SECONDS - T0)) s"
STEPS="sanitize" LIMIT_SANITIZE=70 TAIL=2 bash tests/gpu_session.sh > $OUT/sanitize_session.txt 2>&1
echo "sanitize done at $((SECONDS - T0)) s"
l=$(left 480); [ $l -gt 40 ] && timeout $(( l < 95 ? l : 95 )) python tools/bench_variants.py --parts modifiers,window --rounds 3 > $OUT/variants.txt 2>&1
echo "variants done at $((SECONDS - T0)) s"
l=$(left 530); [ $l -gt 20 ] && timeout $(( l < 45 ? l : 45 )) python tools/bench_fwd_tiles.py --pass bwd --tiles default,64x128x8x2 --T 16384 --d 64,128 --dtypes float16 --rounds 3 > $OUT/bwd_tiles.txt 2>&1
echo "bwd tiles done at $((SECONDS - T0)) s"
l=$(left 575); [ $l -gt 20 ] && timeout $(( l < 50 ? l : 50 )) ncu --profile-from-start off --set full -k regex:bwd python .ab/bwd_ncu.py > $OUT/bwd_ncu.txt 2>&1
echo "ncu done at $((SECONDS - T0)) s"
echo "end at $((SECONDS - T0)) s"
cat $OUT/summary.txt 2>/dev/null
tail -9 $OUT/variants.txt; grep -v "^ *$" $OUT/bwd_tiles.txt | tail -9
grep -E "SUMMARY|FAIL" $OUT/sanitize.log 2>/dev/null | tail -4
