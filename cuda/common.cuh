// cuda/common.cuh — what every .cu file of ember includes first.
//
// The same .cu source is compiled two ways:
//   nvcc -c file.cu                      a real CUDA object
//   g++ -x c++ -DEMBER_CUDASIM file.cu   the CPU emulator (cuda/sim), for tests
// so kernels use only what both understand: CUDA's own headers (which g++
// reads fine: dim3, __half and its host conversions), the sim header that
// then redefines what host compilation erases (__shared__, threadIdx,
// __syncthreads, warp shuffles, atomics, ...), and one launch helper.
//
// Rules for kernel files (checked by tests/test_cuda_sources.cpp):
// - every launch goes through launch() below; `<<<` appears nowhere else;
// - dynamic shared memory only through EMBER_DYNAMIC_SHARED;
// - no __CUDA_ARCH__ branches and no inline PTX.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#if defined(EMBER_CUDASIM)
#include "cuda/sim/cudasim.h"
#endif

#include "cuda/cuda_check.h"
#include "engine/dtype.h"

namespace ember::cuda {

// Launches kernel<<<grid, block, smem, stream>>>(args...) (or runs it on the
// emulator) and turns a launch error (bad configuration, too much shared
// memory, ...) into an ember::Error naming the configuration.
template <typename... KernelArgs, typename... Args>
void launch(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
#if defined(EMBER_CUDASIM)
  ::cudasim::launch(kernel, grid, block, smem, stream, static_cast<KernelArgs>(std::forward<Args>(args))...);
#else
  kernel<<<grid, block, smem, stream>>>(static_cast<KernelArgs>(std::forward<Args>(args))...);
#endif
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    ::ember::fail(::ember::cat("kernel launch with grid (", grid.x, ", ", grid.y, ", ", grid.z, ") block (", block.x,
                               ", ", block.y, ", ", block.z, ") and ", smem, " bytes of dynamic shared memory failed: ",
                               cudaGetErrorString(status)));
}

// Blocks needed to cover n items with `threads` per block, capped at the
// grid limit (kernels then use grid-stride loops).
inline unsigned blocks_for(int64_t n, unsigned threads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > 65535 * 32 ? 65535 * 32 : b));
}

inline cudaStream_t as_cuda_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Calls f(T{}) with T = float or double for dt; any other dtype is an error
// naming the kernel (launchers of f32/f64 kernels use this).
template <typename F>
void dispatch_float(DType dt, const char* kernel, F&& f) {
  switch (dt) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    default: ::ember::fail(::ember::cat("cuda ", kernel, ": unsupported dtype ", dtype_name(dt)));
  }
}

}  // namespace ember::cuda

// Dynamic shared memory (the launch's smem bytes) as a T*.
#if defined(EMBER_CUDASIM)
#define EMBER_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::cudasim::dynamic_shared_memory())
#else
#define EMBER_DYNAMIC_SHARED(T, name)                          \
  extern __shared__ __align__(16) unsigned char ember_smem_[]; \
  T* name = reinterpret_cast<T*>(ember_smem_)
#endif
