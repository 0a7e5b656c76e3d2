# the window's per-block cost against dense's
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
timeout 120 python .ab/window_cost.py > $OUT/window_cost.txt 2>&1
cat $OUT/window_cost.txt
