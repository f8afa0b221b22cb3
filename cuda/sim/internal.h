// cuda/sim/internal.h — what the emulator's scheduler and its libcudart
// stand-in (cuda/sim/runtime.cpp) share. Not for kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
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

// The cudaMalloc (or cudaMallocHost) block holding p: [*lo, *hi). False if
// p is in none (runtime.cpp).
bool device_block_of(const void* p, uintptr_t* lo, uintptr_t* hi);

// The demangled name of the function at `fn` (scheduler.cpp).
std::string function_name(const void* fn);

// ------------------------------------------------------------ profiler.cpp
// What the scheduler tells the profiler. profile_recording is true while a
// profiled launch runs blocks; profile_thread is then the linear index of
// the running thread in its block (set at every switch).
extern thread_local bool profile_recording;
extern unsigned profile_thread;
bool profile_enabled();  // CUDASIM_PROFILE or set_profiling
void profile_launch_begin(const void* kernel, unsigned threads_per_block, const unsigned char* dynamic_shared,
                          size_t dynamic_bytes);
void profile_segment_end();  // a barrier completed or a block ended: every thread's accesses so far are in
void profile_block_end(unsigned threads_ran);
void profile_barrier_completed();
void profile_warp_op_completed(unsigned lanes);
void profile_launch_end(bool ok);
void profile_shared_variable(const unsigned char* p, size_t n);  // a __shared__ variable of a profiled kernel

}  // namespace cudasim::detail
