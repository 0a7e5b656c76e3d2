# call 54 (eleventh session, first): whole GPU suite (kernels of HEAD + v18's backward turns;
# the softcap30 float32 floor should make call 53's failure pass); the backward with two
# warpgroups taking turns (64x128x8x2: dK/dV 8 warps, dQ the tile transposed) against the
# default 64x64x4x2 and against the same tile without turns (/tmp/two = main before v18 +
# .ab/tanh_two_op.patch, whose plain kernels are main's); softcap's tanh one op (this tree)
# against two (/tmp/two).
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)" >> $OUT/env.txt
mkdir -p /tmp/two && tar -xf .ab/two.tar -C /tmp/two
STEPS="tests" JOBS=14 LIMIT_TESTS=240 TAIL=3 bash tests/gpu_session.sh > $OUT/session.txt 2>&1
grep -E "passed|failed" $OUT/tests.log | tail -1; grep -E "^FAILED|^ERROR" $OUT/tests.log | head
echo "suite done at $((SECONDS - T0)) s"
B="tools/bench_fwd_tiles.py --pass bwd --tiles default,64x128x8x2 --T 4096,16384 --dtypes float16 --rounds 3"
PYTHONPATH=$PWD timeout 110 python $B > $OUT/bwd_new.txt 2>&1
echo "bwd new done at $((SECONDS - T0)) s"
PYTHONPATH=/tmp/two timeout 100 python $B > $OUT/bwd_base.txt 2>&1
echo "bwd base done at $((SECONDS - T0)) s"
for t in one two; do
  left=$((555 - (SECONDS - T0))); [ $left -lt 30 ] && break
  tree=$PWD; [ $t = two ] && tree=/tmp/two
  PYTHONPATH=$tree timeout $(( left < 70 ? left : 70 )) python tools/bench_variants.py --parts modifiers --rounds 3 >> $OUT/tanh_$t.txt 2>&1
done
echo "end at $((SECONDS - T0)) s"
cat $OUT/bwd_new.txt $OUT/bwd_base.txt | grep -v "^ *$" | tail -24
for f in $OUT/tanh_one.txt $OUT/tanh_two.txt; do echo "== $(basename $f)"; tail -8 $f; done
