#!/usr/bin/env bash
# Before call 170 (NOTES v48; next session): in the checkout the device copies,
#   1. apply .ab/defaults_v48.patch to the working tree (the suite runs on it);
#   2. build the arm .ab/arms/x3arrive: main's tree + .ab/x3_dkdv_thread_arrival.patch (carry it:
#      run with carry [".ab/arms/x3arrive"]; git ignores /.ab/arms/).
set -e
cd "$(git rev-parse --show-toplevel)"
git apply .ab/defaults_v48.patch
rm -rf .ab/arms/x3arrive && mkdir -p .ab/arms/x3arrive
git archive HEAD cuflash kernels_cu tests setup.cfg | tar -x -C .ab/arms/x3arrive
git apply --directory=.ab/arms/x3arrive .ab/x3_dkdv_thread_arrival.patch
grep -q "128 \* NC" .ab/arms/x3arrive/kernels_cu/flash_bwd_wgmma_x3.cu && echo "arm ready"
