# call 67 (fourteenth session): the host-ahead timer (gputime) and attention_varlen's late
# readback with both bounds: GPU tests, host time per call, issue 12's three speed parts, the
# packed kernel under ncu, and issue 13's short-T cells with the new timer.
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
python -m pytest -q -m gpu -x tests/test_varlen.py tests/test_gputime.py -p no:cacheprovider > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.txt
timeout 60 python .ab/host_varlen.py > $OUT/host.txt 2>&1; echo "host rc=$?"; cat $OUT/host.txt
timeout 240 python tools/bench_issue12.py --parts varlen,gqa,strided --rounds 5 --min-ms 20 > $OUT/issue12.txt 2>&1; echo "issue12 rc=$?"
timeout 90 ncu --profile-from-start off --section SpeedOfLight --section LaunchStats -k regex:fwd python .ab/packed_ncu.py > $OUT/packed_ncu.txt 2>&1; echo "ncu rc=$?"
grep -E "^  cuflash|Duration|Registers Per|Grid Size" $OUT/packed_ncu.txt | cut -c1-110 | head -20
timeout 120 python tools/bench_fwd_tiles.py --T 2048,4096 --d 64,128 --dtypes float16 --rounds 3 > $OUT/fwd_short.txt 2>&1; echo "fwd rc=$?"; tail -12 $OUT/fwd_short.txt
grep -v "^ *$" $OUT/issue12.txt | tail -40
