# call 53 (last of the session): whole GPU suite at the final kernels (ws split 72/216 after
# call 52's hang at 80/216), then the modifiers' cost (new and 2741d47), dense forward A/B,
# the window
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
mkdir -p /tmp/base && tar -xf .ab/base.tar -C /tmp/base
STEPS="tests" JOBS=14 LIMIT_TESTS=270 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head
echo "suite done at $((SECONDS - T0)) s"
PYTHONPATH=$PWD timeout 75 python tools/bench_variants.py --parts modifiers --backward > $OUT/variants_new.txt 2>&1
PYTHONPATH=/tmp/base timeout 75 python tools/bench_variants.py --parts modifiers > $OUT/variants_base.txt 2>&1
echo "variants done at $((SECONDS - T0)) s"
left=$((500 - (SECONDS - T0)))
[ $left -gt 60 ] && PYTHONPATH=$PWD timeout 60 python tools/bench_variants.py --parts window > $OUT/window.txt 2>&1
left=$((510 - (SECONDS - T0)))
[ $left -gt 40 ] && PYTHONPATH=$PWD timeout $left python tools/ab_speed.py --base /tmp/base --new . --passes fwd --dtypes float16 --d 64,128 --rounds 1 > $OUT/ab_dense.txt 2>&1
echo "end at $((SECONDS - T0)) s"
for f in $OUT/variants_*.txt $OUT/window.txt; do echo "== $(basename $f)"; tail -7 $f; done
tail -18 $OUT/ab_dense.txt
