# experiment: persistent ws forward (branch persistent-exp, carried as .ab/pers.tar) against main's, same run
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
mkdir -p /tmp/pers && tar -xf .ab/pers.tar -C /tmp/pers
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/env.txt
(cd /tmp/pers && PYTHONPATH=/tmp/pers timeout 60 python .ab/ws_small.py) > $OUT/small.txt 2>&1; echo "small rc $?"; tail -4 $OUT/small.txt
(cd /tmp/pers && PYTHONPATH=/tmp/pers timeout 90 compute-sanitizer --tool racecheck --print-limit 5 python .ab/ws_small.py) > $OUT/racecheck.txt 2>&1; echo "racecheck rc $?"; grep -E "RACECHECK SUMMARY" $OUT/racecheck.txt
PYTHONPATH=$PWD timeout 200 python tools/ab_speed.py --base . --new /tmp/pers --passes fwd --dtypes float16 --d 64,128 --rounds 3 --json $OUT/ab.json > $OUT/ab.txt 2>&1; echo "ab rc $?"; tail -25 $OUT/ab.txt
