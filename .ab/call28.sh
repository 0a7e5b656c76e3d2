export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 120 python .ab/diag.py 2>&1 | tail -12
