# call 60 (twelfth session, final kernels): issue 12's speed criteria at the default tiles (ws
# forward and ws backward), all three parts, one process.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
timeout 230 python tools/bench_issue12.py --parts gqa,strided,varlen --rounds 5 --min-ms 20 > $OUT/issue12.txt 2>&1
echo "rc=$?"; grep -v "^ *$" $OUT/issue12.txt | tail -45
