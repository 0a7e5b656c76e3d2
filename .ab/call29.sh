export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 100 python .ab/diag2.py 2>&1 | tail -8
