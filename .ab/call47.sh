# v16 as the default d <= 128 forward: whole GPU suite, speed vs cuDNN (fp16, bf16), variants, d = 256 candidate
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
timeout 200 python tools/bench_fwd_tiles.py --tiles default --rounds 3 --json $OUT/bench.json > $OUT/bench.txt 2>&1; echo "bench rc $?"
timeout 60 python tools/bench_fwd_tiles.py --tiles default,128x64x12x2,128x32x12x3 --d 256 --T 4096,16384 --dtypes float16 --rounds 2 --no-torch > $OUT/bench256.txt 2>&1; echo "bench256 rc $?"
timeout 90 python tools/bench_variants.py > $OUT/variants.txt 2>&1; echo "variants rc $?"
STEPS="tests" JOBS=14 LIMIT_TESTS=240 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head
cut -c1-200 $OUT/bench.txt | grep -v "^  cuflash"; cat $OUT/bench256.txt | grep -v "^  cuflash"; cat $OUT/variants.txt
