# call 68: the late-readback GPU test (fixed) and where a tiny call's host time goes
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python -m pytest -q -m gpu tests/test_varlen.py -p no:cacheprovider > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.txt
timeout 200 python .ab/prof_host.py > $OUT/prof.txt 2>&1; echo "prof rc=$?"; grep "=====" $OUT/prof.txt
