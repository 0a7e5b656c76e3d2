# issue 16 on two H200s: the 2-GPU ring tests (env launch, mpirun), then the ring bench at 256k
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt; nvidia-smi topo -m >> $OUT/env.txt 2>&1
timeout 200 python -m pytest -q -m gpu tests/test_distributed.py -rfE -p no:cacheprovider > $OUT/tests_distributed.log 2>&1
tail -3 $OUT/tests_distributed.log; grep -E "^FAILED|^ERROR" $OUT/tests_distributed.log | head
timeout 150 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 -x PYTHONPATH=$PWD python3 examples/ring_demo.py --bench --seq 262144 --heads 8 --dim 128 --dtype bfloat16 --causal > $OUT/ring_bench.txt 2>&1
echo "bench rc=$?"; tail -15 $OUT/ring_bench.txt
