# call 66 (thirteenth session, main's final kernels): issue 12's packed batch against both dense
# shapes of the same 65536 tokens (16 x 4096 and 8 x 8192) in one run (.ab/diag_varlen.py).
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
timeout 150 python .ab/diag_varlen.py > $OUT/diag_varlen.txt 2>&1; echo "rc=$?"; tail -4 $OUT/diag_varlen.txt
