# NEXT SESSION (not run yet): persistent ws forward with dynamic tile claims (branch persistent-exp,
# also kept as .ab/persistent-exp.patch against main at eb6fef7; carried as .ab/pers.tar:
# git worktree add /tmp/pers persistent-exp (or apply the patch there); git -C /tmp/pers archive
# HEAD -o .ab/pers.tar; run with carry [".ab/pers.tar"])
# against main's one-block-per-tile launch, same run; then the branch's GPU tests for the forward
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
mkdir -p /tmp/pers && tar -xf .ab/pers.tar -C /tmp/pers
(cd /tmp/pers && PYTHONPATH=/tmp/pers timeout 90 compute-sanitizer --tool racecheck --print-limit 5 python .ab/ws_small.py) > $OUT/racecheck.txt 2>&1; grep -E "RACECHECK SUMMARY" $OUT/racecheck.txt
(cd /tmp/pers && PYTHONPATH=/tmp/pers timeout 90 compute-sanitizer --tool memcheck --print-limit 5 python .ab/ws_small.py) > $OUT/memcheck.txt 2>&1; grep -E "ERROR SUMMARY" $OUT/memcheck.txt
for mode in dynamic static; do
  CUFLASH_PERSISTENT=$mode PYTHONPATH=$PWD timeout 150 python tools/ab_speed.py --base . --new /tmp/pers --passes fwd --dtypes float16 --d 64,128 --rounds 2 > $OUT/ab_$mode.txt 2>&1
  echo "== $mode"; tail -20 $OUT/ab_$mode.txt
done
(cd /tmp/pers && PYTHONPATH=/tmp/pers timeout 200 python -m pytest -q -x -n 14 tests/test_gpu_kernels.py tests/test_variants.py tests/test_varlen.py -p no:cacheprovider) > $OUT/tests.txt 2>&1; tail -3 $OUT/tests.txt
