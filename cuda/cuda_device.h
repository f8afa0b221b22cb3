// cuda/cuda_device.h — ember's entry points into the CUDA runtime: device
// discovery and the memory backend that lets tensors live on CUDA devices.
//
// This first version allocates with cudaMalloc directly and copies
// synchronously; the caching allocator, streams and kernels come with the
// CUDA backend (cuda/ fills ops/kernels.h's table then).
#pragma once
#include <string>

namespace ember::cuda {

// Number of usable CUDA devices (0 when there is no driver or device).
int device_count();
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)"; errors for a bad index.
std::string device_name(int index);
// Registers the CUDA memory backend with the engine (idempotent). Errors if
// no device is usable, with the runtime's reason.
void init();

}  // namespace ember::cuda
