// cuda/cuda_check.h — CUDA_CHECK: turn a failed CUDA runtime call into an
// ember::Error naming the call's file and line (host side only; nothing is
// thrown from device code or through CUDA callbacks).
#pragma once
#include <cuda_runtime.h>

#include "engine/error.h"

#define CUDA_CHECK(call)                                                                              \
  do {                                                                                                \
    const cudaError_t ember_cuda_status_ = (call);                                                    \
    if (ember_cuda_status_ != cudaSuccess)                                                            \
      ::ember::fail(::ember::cat(__FILE__, ":", __LINE__, ": ", #call, " failed: ",                   \
                                 cudaGetErrorString(ember_cuda_status_)));                            \
  } while (0)
