# final kernels of the session (shared wgmma forward step): whole GPU suite; 8-warp vs ws forward in one run
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/env.txt
git log --oneline -1 >> $OUT/env.txt 2>/dev/null
STEPS="tests" JOBS=14 LIMIT_TESTS=230 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head
timeout 60 python tools/bench_fwd_tiles.py --tiles default,128x128x8x3 --d 128 --dtypes float16 --rounds 2 --no-torch > $OUT/bench.txt 2>&1; echo "bench rc $?"
grep -v "^  cuflash" $OUT/bench.txt
