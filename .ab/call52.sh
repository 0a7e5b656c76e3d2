# call 52: forward modify_and_mask unswitched (two copies of the element loop), tanh with one
# special-function op (reciprocal on the FMA pipe), ws register split 80/216; against 2741d47
# (.ab/base.tar) in the same run. Whole GPU suite first.
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
mkdir -p /tmp/base && tar -xf .ab/base.tar -C /tmp/base
STEPS="tests" JOBS=14 LIMIT_TESTS=230 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head
for r in 1 2; do for t in base new; do
  tree=$PWD; [ $t = base ] && tree=/tmp/base
  PYTHONPATH=$tree timeout 100 python tools/bench_variants.py --parts modifiers --backward > $OUT/variants_${t}_$r.txt 2>&1
done; done
PYTHONPATH=$PWD timeout 80 python tools/bench_variants.py --parts window > $OUT/window.txt 2>&1
PYTHONPATH=$PWD timeout 120 python tools/ab_speed.py --base /tmp/base --new . --passes fwd --dtypes float16 --d 64,128 --rounds 1 > $OUT/ab_dense.txt 2>&1
for f in $OUT/variants_*.txt; do echo "== $(basename $f)"; tail -7 $f; done
cat $OUT/window.txt; tail -18 $OUT/ab_dense.txt
