"""Issue 12: why the packed kernel's causal forward of 16 equal sequences (4096 each) runs at
~0.93 of the dense kernel on the same (16, 4096) problem, the packed rows through the dense
kernel at ~0.98 (call 66). One causal forward each (Hq = 16, d = 128, fp16), for
    ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats \
        --section LaunchStats --section SchedulerStats -k regex:fwd python .ab/packed_ncu.py"""
from packed_case import profile, runs

profile(runs("seqlens"))
