#!/usr/bin/env bash
# Before call 122 (here, no GPU): the A/B arms as trees under .ab/arms (carry .ab/arms: ignored):
#   main     HEAD
#   acq      HEAD + .ab/acq_rel_counter.patch (the counter as one acq_rel atomic; call 121)
#   tree     HEAD + .ab/tree_merge.patch (two-level merge past 32 splits; branch tree-merge)
#   treeacq  tree + .ab/tree_merge_acq.patch (both; branch tree-merge-acq)
# The patches are diffs against af677d3 (branches tree-merge, tree-merge-acq); if HEAD moved, rebase the branches and remake them (git diff main tree-merge > .ab/tree_merge.patch).
set -e
cd "$(git rev-parse --show-toplevel)"
rm -rf .ab/arms && mkdir -p .ab/arms
for arm in main acq tree treeacq; do
  mkdir -p .ab/arms/$arm
  git archive HEAD cuflash kernels_cu tools tests experiments setup.cfg | tar -x -C .ab/arms/$arm
done
(cd .ab/arms/acq && patch -s -p1 < ../../acq_rel_counter.patch)
for arm in tree treeacq; do (cd .ab/arms/$arm && patch -s -p1 < ../../tree_merge.patch); done
(cd .ab/arms/treeacq && patch -s -p1 < ../../tree_merge_acq.patch)
du -sh .ab/arms
