# final kernels of the session: whole GPU suite; forward speed, ws default against the 8-warp tile in the same run, with clocks
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 1000 > $OUT/clocks.csv 2>&1 &
SMI=$!
timeout 260 python tools/bench_fwd_tiles.py --tiles default,128x128x8x3 --d 64,128,256 --rounds 3 --json $OUT/bench.json > $OUT/bench.txt 2>&1; echo "bench rc $?"
timeout 70 python tools/bench_variants.py > $OUT/variants.txt 2>&1; echo "variants rc $?"
kill $SMI
STEPS="tests" JOBS=14 LIMIT_TESTS=220 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head
cut -c1-200 $OUT/bench.txt | grep -v "^  cuflash"; cat $OUT/variants.txt; awk -F, 'NR>1{print $2}' $OUT/clocks.csv | sort | uniq -c | sort -rn | head -4
