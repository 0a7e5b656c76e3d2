# call 73: issue 12's varlen and strided parts again with 11 rounds (call 72's 5 rounds put the
# strided causal forward at 0.957 where call 67 read 1.021, with the same kernels)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
timeout 150 python tools/bench_issue12.py --parts strided,varlen --rounds 11 --min-ms 20 > $OUT/issue12.txt 2>&1; echo "issue12 rc=$?"
grep -v "^ *$" $OUT/issue12.txt | tail -20
