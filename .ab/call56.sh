# call 56 (eleventh session, measurements only; kernels as in call 55): racecheck on the cases
# call 55's racecheck did not reach (bfloat16 d = 200, the KV cache); issue 11's window, softcap
# and ALiBi costs (3 rounds); the 8-warp backward tile with turns against the default; ncu's full
# set on both backward tiles; issue 12's GQA and strided cells on the warp-specialized forward.
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
T0=$SECONDS
L=$OUT/logs; mkdir -p $L
left() { echo $(( $1 - (SECONDS - T0) )); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $L/env.txt
timeout 100 python tests/sanitize.py case bfloat16 200 > $L/sanitize_warm.txt 2>&1
timeout 60 python tests/sanitize.py kv >> $L/sanitize_warm.txt 2>&1
echo "warm done at $((SECONDS - T0)) s"
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 1 python tests/sanitize.py case bfloat16 200 > $L/racecheck.txt 2>&1; echo "racecheck d200 rc=$?"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 1 python tests/sanitize.py kv >> $L/racecheck.txt 2>&1; echo "racecheck kv rc=$?"
echo "racecheck done at $((SECONDS - T0)) s"
timeout 100 python tools/bench_variants.py --parts modifiers,window --rounds 3 > $L/variants.txt 2>&1
echo "variants done at $((SECONDS - T0)) s"
timeout 60 python tools/bench_fwd_tiles.py --pass bwd --tiles default,64x128x8x2 --T 16384 --d 64,128 --dtypes float16 --rounds 3 > $L/bwd_tiles.txt 2>&1
echo "bwd tiles done at $((SECONDS - T0)) s"
l=$(left 440); [ $l -gt 20 ] && timeout $(( l < 60 ? l : 60 )) ncu --profile-from-start off --set full -k regex:bwd python .ab/bwd_ncu.py > $L/bwd_ncu.txt 2>&1
echo "ncu done at $((SECONDS - T0)) s"
l=$(left 525); [ $l -gt 30 ] && timeout $l python tools/bench_issue12.py --parts gqa,strided --rounds 5 --min-ms 20 > $L/issue12.txt 2>&1
echo "end at $((SECONDS - T0)) s"
tar -czf $OUT/call56.tgz -C $OUT logs
grep -E "SUMMARY|Race|ok " $L/racecheck.txt | tail -12
tail -9 $L/variants.txt; grep -v "^ *$" $L/bwd_tiles.txt | tail -5
tail -22 $L/issue12.txt
