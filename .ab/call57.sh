# call 57 (for the twelfth session, branch ws-backward): the warp-specialized dK/dV and dQ
# kernels' first run: their GPU tests (tiles, variants, GQA ranks), then speed against the default.
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
T0=$SECONDS
XDIST=$(python -c "import xdist" 2>/dev/null && echo "-n 14")
timeout 110 python -m pytest -q -x $XDIST -p no:cacheprovider tests/test_gpu_kernels.py tests/test_variants.py tests/test_gqa.py -k "w12_s2-bwd or w12_s3-bwd or wgmma_ws or warp_specialized_dkdv" > $OUT/tests.txt 2>&1
echo "tests rc=$? at $((SECONDS - T0)) s"; tail -4 $OUT/tests.txt
timeout 60 python tools/bench_fwd_tiles.py --pass bwd --tiles default,64x128x12x2 --T 16384 --d 64,128 --dtypes float16 --rounds 3 > $OUT/bwd_ws.txt 2>&1
echo "end at $((SECONDS - T0)) s"; grep -v "^ *$" $OUT/bwd_ws.txt | tail -6
