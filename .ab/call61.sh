# call 61 (next session, branch fused-dq): the warp-specialized dK/dV kernel with dQ by atomics
# (deterministic=False) on its first GPU run: its tests (tiles, variants, GQA ranks; both dQ
# modes), speed against the deterministic ws backward, the mma atomic tile (the det=False
# default on sm_90) and cuDNN, then memcheck/racecheck on the float16 d = 128 cases (ws atomic
# among them). Prediction in NOTES v19 (fused-dq).
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
T0=$SECONDS
XDIST=$(python -c "import xdist" 2>/dev/null && echo "-n 14")
timeout 170 python -m pytest -q -x $XDIST -p no:cacheprovider tests/test_gpu_kernels.py tests/test_variants.py tests/test_gqa.py tests/test_empty.py -k "w12_s2-bwd or w12_s3-bwd or wgmma_ws or warp_specialized_dkdv or wgmma-ws" > $OUT/tests.txt 2>&1
echo "tests rc=$? at $((SECONDS - T0)) s"; tail -4 $OUT/tests.txt
timeout 120 python tools/bench_fwd_tiles.py --pass bwd --tiles default,64x128x12x2:atomic,default:atomic --T 4096,16384 --d 64,128 --dtypes float16 --rounds 3 > $OUT/bwd_atomic.txt 2>&1
echo "bench at $((SECONDS - T0)) s"; grep -v "^ *$" $OUT/bwd_atomic.txt | tail -9
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 python tests/sanitize.py case float16 128 > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$? at $((SECONDS - T0)) s"
timeout 180 compute-sanitizer --tool racecheck --error-exitcode 1 python tests/sanitize.py case float16 128 > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$? at $((SECONDS - T0)) s"
grep -E "SUMMARY" $OUT/memcheck.txt $OUT/racecheck.txt
