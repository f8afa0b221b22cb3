// cuda/wmma.cuh — the warp matrix API (nvcuda::wmma) for tensor-core
// kernels: CUDA's <mma.h> under nvcc, the emulator's cuda/sim/wmma.h under
// EMBER_CUDASIM. Include after cuda/common.cuh. The 16-bit shapes need
// sm_70 (f16) or sm_80 (bf16); the Makefile's CUDA_ARCH starts at 80.
#pragma once
#include "cuda/common.cuh"
#if defined(EMBER_CUDASIM)
#include "cuda/sim/wmma.h"
#else
#include <mma.h>
#endif
