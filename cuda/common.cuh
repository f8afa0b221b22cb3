// cuda/common.cuh — what every .cu file of ember includes first.
//
// The same .cu source is compiled two ways:
//   nvcc -c file.cu                      a real CUDA object
//   g++ -x c++ -DEMBER_CUDASIM file.cu   the CPU emulator (cuda/sim), for tests
// so kernels use only what both understand: CUDA's own headers (which g++
// reads fine: dim3, __half, __nv_bfloat16 and their host conversions), the sim header that
// then redefines what host compilation erases (__shared__, threadIdx,
// __syncthreads, warp shuffles, atomics, ...), and one launch helper.
//
// Rules for kernel files (checked by tests/cuda/test_cuda_sources.cpp):
// - every launch goes through launch() below; `<<<` appears nowhere else;
// - dynamic shared memory only through EMBER_DYNAMIC_SHARED;
// - no __CUDA_ARCH__ branches and no inline PTX.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(EMBER_CUDASIM)
#include "cuda/sim/cudasim.h"
#endif

#include "cuda/cuda_check.h"
#include "engine/device_work.h"
#include "engine/dtype.h"

// EMBER_PROFILE_FLOPS(n): the calling thread did n floating-point operations
// (a multiply-add is 2). The emulator's profiler adds them up per launch for
// its roofline estimate (cuda/sim/README.md, "Profiling"); nvcc compiles it
// to nothing.
#if defined(EMBER_CUDASIM)
#define EMBER_PROFILE_FLOPS(n) ::cudasim::detail::count_flops(static_cast<uint64_t>(n))
#else
#define EMBER_PROFILE_FLOPS(n) ((void)0)
#endif

// EMBER_UNROLL before a loop with a compile-time trip count: nvcc unrolls
// it (so register arrays indexed by its counter stay in registers); g++
// (the emulator) ignores it.
#if defined(EMBER_CUDASIM)
#define EMBER_UNROLL
#else
#define EMBER_UNROLL _Pragma("unroll")
#endif

// EMBER_NO_UNROLL before a loop whose stride is known only at run time
// (blockDim.x): nvcc keeps it rolled, where unrolling would compute its
// trip count with a 64-bit division (tests/cuda/test_cuda_ptx.cpp finds
// divisions inside loops); g++ ignores it.
#if defined(EMBER_CUDASIM)
#define EMBER_NO_UNROLL
#else
#define EMBER_NO_UNROLL _Pragma("unroll 1")
#endif

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
  count_device_work(DeviceWork::kernel);
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

// Index of this thread in a 1-D grid of 1-D blocks, and the grid's thread
// count: the start and step of a grid-stride loop,
//   for (int64_t i = grid_thread_index(); i < n; i += grid_thread_count())
__device__ __forceinline__ int64_t grid_thread_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_thread_count() { return int64_t(gridDim.x) * blockDim.x; }

inline cudaStream_t as_cuda_stream(void* s) { return static_cast<cudaStream_t>(s); }

// ------------------------------------------------- storage / compute types
// Mixed precision (ops/kernels.h): a kernel is templated on its STORAGE type
// T (float, double, __half or __nv_bfloat16) and does its arithmetic in
// compute_t<T>: T itself for f32/f64, float for f16 and bf16. Batch-norm
// parameters and statistics, losses, probabilities and grad_loss are
// compute_t<T> too (f32 with 16-bit data). Loads convert with to_compute(),
// stores round once with to_storage<T>(); for f32/f64 both are the identity,
// so those kernels keep their exact arithmetic (and bits). (A NaN stored as
// bf16 becomes CUDA's canonical NaN 0x7fff, where the CPU keeps the sign and
// top payload bits: both are quiet NaNs; every other value has the same bits.)
template <typename T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<__half> {
  using type = float;
};
template <>
struct ComputeType<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename ComputeType<T>::type;

// double -> float rounded to odd: of the two floats bracketing d, the one
// nearer zero, with its last bit set when d was not exact (out-of-range
// values become +-inf, as a plain conversion does). Narrowing a double this
// way and then rounding the float to half or bfloat16 is one correct rounding of d.
__host__ __device__ __forceinline__ float double_to_float_odd(double d) {
  float f = static_cast<float>(d);
  const double fd = static_cast<double>(f);
  if (fd != d && fd - fd == 0.0) {  // inexact and finite (fd - fd is NaN for inf)
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((fd < 0 ? -fd : fd) > (d < 0 ? -d : d)) bits -= 1u;  // one step toward zero (f != 0 here)
    bits |= 1u;
    memcpy(&f, &bits, sizeof bits);
  }
  return f;
}

template <typename T>
__host__ __device__ __forceinline__ T to_compute(T v) {
  return v;
}
__host__ __device__ __forceinline__ float to_compute(__half v) { return __half2float(v); }
__host__ __device__ __forceinline__ float to_compute(__nv_bfloat16 v) { return __bfloat162float(v); }

// A computed value (float or double) stored as T, rounded once.
template <typename T, typename V>
__host__ __device__ __forceinline__ T to_storage(V v) {
  if constexpr (std::is_same_v<T, __half>) {
    if constexpr (std::is_same_v<V, double>)
      return __float2half_rn(double_to_float_odd(v));
    else
      return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if constexpr (std::is_same_v<V, double>)
      return __float2bfloat16_rn(double_to_float_odd(v));
    else
      return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// Calls f(T{}) with the storage type T = float, double, __half or __nv_bfloat16 for dt; any
// other dtype is an error naming the kernel (launchers of mixed-precision
// kernels use this; they compute in compute_t<T>).
template <typename F>
void dispatch_float_half(DType dt, const char* kernel, F&& f) {
  switch (dt) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    case DType::f16: f(__half{}); break;
    case DType::bf16: f(__nv_bfloat16{}); break;
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

namespace ember::cuda {

// One 16-byte load or store (ld/st .v4.f32): p must be 16-byte aligned. On
// the emulator a single 16-byte memcpy, so that its profiler sees one
// 16-byte access per lane as a GPU makes it (the host compiler splits a
// float4 copy into four 4-byte accesses).
__device__ __forceinline__ float4 load_vec4(const float* p) {
#if defined(EMBER_CUDASIM)
  float4 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
#else
  return *reinterpret_cast<const float4*>(p);
#endif
}
__device__ __forceinline__ void store_vec4(float* p, float4 v) {
#if defined(EMBER_CUDASIM)
  __builtin_memcpy(p, &v, sizeof v);
#else
  *reinterpret_cast<float4*>(p) = v;
#endif
}

}  // namespace ember::cuda
