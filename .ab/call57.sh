# call 57 (for the twelfth session, branch ws-backward): the warp-specialized dK/dV and dQ
# kernels' first run: their GPU tests (tiles, variants, GQA ranks), speed against the default
# backward tile (and cuDNN), issue 12's strided cells with the ws backward, ncu of the three
# backward tiles. Sanitizers: .ab/call58.sh.
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
T0=$SECONDS
XDIST=$(python -c "import xdist" 2>/dev/null && echo "-n 14")
timeout 150 python -m pytest -q -x $XDIST -p no:cacheprovider tests/test_gpu_kernels.py tests/test_variants.py tests/test_gqa.py -k "w12_s2-bwd or w12_s3-bwd or wgmma_ws or warp_specialized_dkdv" > $OUT/tests.txt 2>&1
echo "tests rc=$? at $((SECONDS - T0)) s"; tail -4 $OUT/tests.txt
timeout 90 python tools/bench_fwd_tiles.py --pass bwd --tiles default,64x128x12x2,64x128x12x3 --T 4096,16384 --d 64,128 --dtypes float16 --rounds 3 > $OUT/bwd_ws.txt 2>&1
echo "bench at $((SECONDS - T0)) s"
timeout 80 python tools/bench_issue12.py --parts strided,gqa --bwd-tile 64x128x12x2 --rounds 5 --min-ms 20 > $OUT/issue12_ws.txt 2>&1
echo "issue12 at $((SECONDS - T0)) s"
timeout 80 ncu --profile-from-start off --set full -k regex:bwd python .ab/bwd_ncu.py > $OUT/bwd_ncu.txt 2>&1
echo "end at $((SECONDS - T0)) s"; grep -v "^ *$" $OUT/bwd_ws.txt | tail -9
grep -A4 "^strided" $OUT/issue12_ws.txt; grep -E "^  cuflash|Duration|highest-utilized" $OUT/bwd_ncu.txt | cut -c1-110
