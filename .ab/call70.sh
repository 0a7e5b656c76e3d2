# call 70: issue 11's dense A/B, this tree against 0dd094b's (cuflash/ and kernels_cu/ of that
# commit in .ab/base0dd, carried), FlashAttention's shapes, both passes, both timed with this
# checkout's host-ahead timer, alternating rounds.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
timeout 500 python tools/ab_speed.py --base .ab/base0dd --new . --T 4096,16384 --d 64,128 --dtypes float16,bfloat16 --causal 0,1 --rounds 2 --json $OUT/ab.json > $OUT/ab.txt 2>&1
echo "ab rc=$?"; tail -40 $OUT/ab.txt
