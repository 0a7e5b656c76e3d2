"""Experiments: declared in YAML, measured point by point into a CSV, drawn from it.

Modules, one job each: ``schema`` (the file format and its validation), ``points`` (the points an
experiment expands into), ``measure`` (time, memory, error of one point), ``torch_sdpa`` (PyTorch's
SDPA as a reference method), ``ncu`` and ``one_call`` (measured DRAM bytes through Nsight Compute),
``env`` (the machine a run measured on), ``results`` (the CSV), ``runner`` (a whole run, resumable)
and ``plots`` (figures from the CSV). The ``cuflash`` command (``cuflash.cli``) drives them.
"""
