# call 64 (thirteenth session, final kernels): the whole GPU suite at the merge of fused-dq
# (atomic-dQ ws kernel, explicit tiles only) and deterministic=False's new default on Hopper
# (the deterministic pair); the backward's default with deterministic=False against True.
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
T0=$SECONDS
STEPS="tests" JOBS=14 LIMIT_TESTS=300 TAIL=3 bash tests/gpu_session.sh > $OUT/suite.txt 2>&1
echo "suite at $((SECONDS - T0)) s"; tail -4 $OUT/suite.txt; tail -3 $OUT/tests.log
timeout 120 python tools/bench_fwd_tiles.py --pass bwd --tiles default,default:atomic --T 4096,16384 --d 64,128 --dtypes float16 --rounds 3 > $OUT/bwd_default.txt 2>&1
echo "bench at $((SECONDS - T0)) s"; grep -v "^ *$" $OUT/bwd_default.txt | tail -9
