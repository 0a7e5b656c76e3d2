# call 71: where the packed causal forward's 4.7% goes (call 67: 2.68 against 2.56 ms on equal
# lengths): warp states and per-instruction stall samples of the view (dense kernel) and the
# packed kernel, .ab/packed_ncu.py
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
timeout 150 ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters -k regex:fwd python .ab/packed_ncu.py > $OUT/states.txt 2>&1; echo "states rc=$?"
grep -E "^  cuflash|Duration|Warp Cycles Per Issued|Stall|Issue Slot|Eligible|No Eligible|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth" $OUT/states.txt | cut -c1-120 | head -60
timeout 200 ncu --profile-from-start off --section SourceCounters --section WarpStateStats -k regex:fwd --launch-skip 1 --page source --print-source sass --csv python .ab/packed_ncu.py > $OUT/source.csv 2>&1; echo "source rc=$?"; head -c 600 $OUT/source.csv; wc -l $OUT/source.csv
