// cuda/sim/internal.h — what the emulator's scheduler and its libcudart
// stand-in (cuda/sim/runtime.cpp) share. Not for kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace cudasim::detail {

constexpr size_t kDefaultDynamicSharedMemory = 48 * 1024;  // without cudaFuncSetAttribute
constexpr size_t kMaxSharedMemoryOptin = 227 * 1024;       // sharedMemPerBlockOptin of sm_90

// printf into a std::string (at most 1023 characters).
std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));

// Makes `code` the calling host thread's last error (cudaGetLastError,
// cudaPeekAtLastError) and `message` what cudaGetErrorString(code) says
// until the next error. Returns code.
cudaError_t set_error(cudaError_t code, std::string message);

// The dynamic shared memory a launch of `kernel` may ask for.
size_t max_dynamic_shared_memory(const void* kernel);

// Whether `stream` is 0, a special handle, or a stream not yet destroyed.
bool valid_stream(cudaStream_t stream);

}  // namespace cudasim::detail
