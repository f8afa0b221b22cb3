// cuda/sim/internal.h — what the emulator's scheduler and its libcudart
// stand-in (cuda/sim/runtime.cpp) share. Not for kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <chrono>
#include <string>

#include "cuda/sim/touch.h"

// The emulator's streams and events (runtime.cpp makes them).
struct CUstream_st {
  unsigned flags = 0;
  int priority = 0;
};
struct CUevent_st {
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point time{};
};

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

// ------------------------------------------------------- stream_order.cpp
// The stream-order checker (see stream_order.cpp). Each operation queued on
// a stream is checked and recorded; a race makes it fail (the return value,
// set as the last error) before it runs.
struct Op {
  enum class Kind { kernel, copy, fill } kind;
  const void* kernel = nullptr;  // Kind::kernel: the __global__ function
};
cudaError_t stream_order_operation(cudaStream_t stream, const Op& op, const Touch* touches, size_t n);
void stream_order_record(cudaEvent_t event, cudaStream_t stream);
void stream_order_wait_event(cudaStream_t stream, cudaEvent_t event);
void stream_order_host_waits_stream(cudaStream_t stream);
void stream_order_host_waits_event(cudaEvent_t event);
void stream_order_host_waits_all();
void stream_order_forget_block(uintptr_t base);  // cudaFree, cudaFreeHost
void stream_order_forget_event(cudaEvent_t event);
void stream_order_forget_stream(cudaStream_t stream);

// ---------------------------------------------------------------- graph.cpp
// Stream capture: a copy or fill queued on a capturing stream is recorded
// (true) instead of run. capture_refuses(fn, stream) fails a call that
// waits for the device during a capture: of `stream`, or (stream null) of
// any stream not capturing in the relaxed mode; the capture is invalidated.
bool stream_capturing(cudaStream_t stream);  // also declared in cudasim.h, for launch()
bool capture_copy(cudaStream_t stream, void* dst, const void* src, size_t count, cudaMemcpyKind kind);
bool capture_fill(cudaStream_t stream, void* dst, int value, size_t count);
cudaError_t capture_refuses(const char* fn, cudaStream_t stream);

// The demangled name of the function at `fn` (scheduler.cpp).
std::string function_name(const void* fn);
// The running emulated thread's linear index in its block (scheduler.cpp).
unsigned current_thread() noexcept;
// ---------------------------------------------------------- async_copy.cpp
// cp.async's queues, one per thread of the running block: emptied when a
// block begins; at its end (profiled: whether to report the pipeline's
// depth to the profiler) copies never waited for are dropped.
void async_copy_block_begin(unsigned nthreads);
void async_copy_block_end(bool profiled);

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
// An access the emulator makes for the running thread (a cp.async completing):
// counted like an instrumented one at instruction `pc`.
void profile_access(const void* addr, uint32_t size, bool write, const void* pc) noexcept;
void profile_async_copy(uint64_t bytes) noexcept;  // one thread's cp.async
// One block's pipeline: the most groups a thread had in flight at a wait,
// and the most bytes a warp's lanes had in flight (each lane's peak, summed).
void profile_async_pipeline(unsigned groups, uint64_t warp_bytes) noexcept;

}  // namespace cudasim::detail
