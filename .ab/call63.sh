# call 63 (branch fused-dq): the atomic-dQ ws dK/dV kernel with dQ in turns (tile n on consumer warpgroup n % 2,
# the other only bar.arrive after its dS store): the warpgroups drift apart as in the deterministic kernel.
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
T0=$SECONDS
XDIST=$(python -c "import xdist" 2>/dev/null && echo "-n 14")
timeout 170 python -m pytest -q $XDIST -p no:cacheprovider tests/test_gpu_kernels.py tests/test_variants.py tests/test_gqa.py tests/test_empty.py -k "w12_s2-bwd or w12_s3-bwd or wgmma_ws or warp_specialized_dkdv or wgmma-ws" > $OUT/tests.txt 2>&1
echo "tests rc=$? at $((SECONDS - T0)) s"; tail -3 $OUT/tests.txt; grep -E "^(FAILED|ERROR)" $OUT/tests.txt | head -8
timeout 150 python tools/bench_fwd_tiles.py --pass bwd --tiles default,64x128x12x2:atomic,64x128x12x3:atomic --T 4096,8192,16384 --d 64,128 --dtypes float16 --rounds 3 > $OUT/bwd_atomic.txt 2>&1
echo "bench at $((SECONDS - T0)) s"; grep -v "^ *$" $OUT/bwd_atomic.txt | tail -13
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 1 python tests/sanitize.py case float16 128 > $OUT/memcheck.txt 2>&1; echo "memcheck rc=$? at $((SECONDS - T0)) s"
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 1 python tests/sanitize.py case float16 128 > $OUT/racecheck.txt 2>&1; echo "racecheck rc=$? at $((SECONDS - T0)) s"
grep -E "SUMMARY" $OUT/memcheck.txt $OUT/racecheck.txt
