# v16: warp-specialized forward (producer warpgroup + 2 consumers, mbarriers): correctness, sanitizer, speed vs cuDNN
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
timeout 100 python .ab/ws_small.py > $OUT/small.txt 2>&1; echo "small rc $?"; tail -15 $OUT/small.txt
timeout 100 compute-sanitizer --tool racecheck --print-limit 5 python .ab/ws_small.py > $OUT/racecheck.txt 2>&1; echo "racecheck rc $?"; grep -E "RACECHECK SUMMARY|hazard|rror" $OUT/racecheck.txt | head -5
timeout 230 python tools/bench_fwd_tiles.py --tiles default,128x128x12x2,128x128x12x3,128x64x12x4 --dtypes float16 --rounds 3 --json $OUT/bench.json > $OUT/bench.txt 2>&1; echo "bench rc $?"
cat $OUT/bench.txt | cut -c1-250 | grep -v "^  cuflash"
timeout 150 python -m pytest -q -x -n 8 tests/test_gpu_kernels.py -k "w12" -p no:cacheprovider > $OUT/tests.txt 2>&1; echo "tests rc $?"; tail -3 $OUT/tests.txt
