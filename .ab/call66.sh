# call 66 (thirteenth session, main's final kernels): issue 12's packed batch against both dense
# shapes of the same 65536 tokens (16 x 4096 and 8 x 8192) in one run (.ab/diag_varlen.py).
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=$PWD
timeout 150 python .ab/diag_varlen.py > $OUT/diag_varlen.txt 2>&1; echo "rc=$?"; tail -4 $OUT/diag_varlen.txt
# then ncu of the ws backward's two dQ modes (v20: why atomic dQ loses at d = 128)
timeout 100 ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats --metrics lts__t_requests_op_red.sum,lts__t_sectors_op_red.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active -k regex:bwd python .ab/atomic_ncu.py > $OUT/atomic_ncu.txt 2>&1; echo "ncu rc=$?"
grep -E "^  cuflash|Duration|lts__t_|gmma_cycles|Stall|Warp Cycles Per Issued" $OUT/atomic_ncu.txt | cut -c1-120 | head -40
