# SeqLens (no readback per varlen call): targeted GPU tests, where varlen loses (diag), issue 12's varlen criterion
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
timeout 150 python -m pytest -q -x -m gpu tests/test_varlen.py -p no:cacheprovider > $OUT/tests.log 2>&1
tail -3 $OUT/tests.log
timeout 120 python .ab/diag_varlen.py > $OUT/diag.txt 2>&1
timeout 120 python tools/bench_issue12.py --parts varlen > $OUT/bench_varlen.txt 2>&1
cat $OUT/env.txt $OUT/diag.txt $OUT/bench_varlen.txt
