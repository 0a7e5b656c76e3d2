// cuflash: the shared parts every attention kernel is composed of, in one include: which rows a
// block works on (seq.cuh, block.cuh), which scores it sees (mask.cuh, score.cuh), the softmax
// (softmax.cuh), the staging of streamed tiles (pipeline.cuh) and the epilogues (epilogue.cuh).
#pragma once
#include "block.cuh"
#include "epilogue.cuh"
#include "pipeline.cuh"
#include "softmax.cuh"
