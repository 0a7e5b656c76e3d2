#!/usr/bin/env bash
# v91 (issue 14): split-KV merged in thread-block clusters. Probe, the cluster tests, the A/B
# against the L2 merge with cuDNN, the sanitizer over the decode path, then the whole GPU suite
# with what time is left. Usage: OUT=... bash .ab/call258.sh [seconds available]
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
T0=$SECONDS; AVAIL=${1:-560}
left() { echo $((AVAIL - (SECONDS - T0))); }
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/env.txt 2>&1
python3 -c 'import cupy, sys; print(sys.version.split()[0], "cupy", cupy.__version__); from cupy_backends.cuda.libs import nvrtc; print("nvrtc", nvrtc.getVersion())' >> $OUT/env.txt 2>&1
cat $OUT/env.txt
timeout 60 python3 .ab/cluster_probe.py 2>&1 | tee $OUT/probe.txt
XD="-n 16"; python3 -c "import xdist" 2>/dev/null || XD=""
timeout 150 python3 -m pytest -q -m gpu tests/test_kvcache.py -k "cluster or in_kernel_path" -rfE -p no:cacheprovider $XD > $OUT/cluster_tests.txt 2>&1
echo "cluster tests rc=$? $(tail -1 $OUT/cluster_tests.txt)"
timeout 150 python3 .ab/cluster_ab.py > $OUT/ab.txt 2>&1; echo "ab rc=$?"
timeout 100 bash -c "SANITIZE_ARGS=kv STEPS=sanitize LIMIT_SANITIZE_WARM=40 LIMIT_SANITIZE=25 OUT=$OUT/san TAIL=3 bash tests/gpu_session.sh" > $OUT/san.txt 2>&1
grep "rc=" $OUT/san.txt
L=$(( $(left) - 15 ))
if [ $L -gt 120 ]; then
  STEPS=tests LIMIT_TESTS=$L OUT=$OUT/gs TAIL=4 bash tests/gpu_session.sh > $OUT/gs.txt 2>&1
  grep -E "passed|failed" $OUT/gs/tests.log | tail -2
fi
grep -E "FAILED|ERROR" $OUT/cluster_tests.txt | head -20
echo "=== A/B"; tail -12 $OUT/ab.txt
