// cuda/kernels/random.cu — random fills on the device from engine/rng.h's
// Philox4x32 counter generator (the counterparts of ops/cpu/random.cpp).
//
// Where each value comes from is fixed by ops/kernels.h, so these kernels
// draw the very streams the CPU draws, whatever the grid:
//   uniform: element i <- block (offset + i/4), word i%4, u = u32_to_unit(word)
//            y = lo + (hi - lo) * u
//   normal:  elements 2j, 2j+1 <- block (offset + j), words 0 and 1:
//            r = sqrt(-2 log u32_to_unit_open0(w0)), t = 2 pi u32_to_unit(w1),
//            y = mean + std * r * cos t,  mean + std * r * sin t
// computed in double with the CPU's expressions and rounded once to the
// output type (f16, bf16: one correct rounding of the double, through
// to_storage). One thread per Philox block (uniform) or pair (normal), in a
// grid-stride loop. The uniform fill is pure arithmetic and gives the CPU's
// bits; the normal fill also calls log, sqrt, cos and sin, whose last bit may
// differ between CUDA's device library and the host's libm.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "engine/rng.h"

namespace ember::cuda {

namespace {

constexpr unsigned kRandomThreads = 256;  // threads per block
constexpr double kTwoPi = 6.283185307179586476925286766559;

// ----------------------------------------------------------------- kernels

// y = lo + range * u                                          y: [n]
template <typename T>
__global__ void random_uniform_kernel(T* __restrict__ y, int64_t n, uint64_t seed, uint64_t offset, double lo,
                                      double range) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t blk = grid_thread_index(); blk < blocks; blk += grid_thread_count()) {
    const PhiloxBlock r = philox4x32(seed, offset + uint64_t(blk), 0);
    const int64_t i0 = blk * 4, m = n - i0 < 4 ? n - i0 : 4;
    for (int64_t k = 0; k < m; ++k) y[i0 + k] = to_storage<T>(fma(range, double(u32_to_unit(r.w[k])), lo));
  }
}

// y = mean + std * z, z standard normal (Box-Muller)          y: [n]
template <typename T>
__global__ void random_normal_kernel(T* __restrict__ y, int64_t n, uint64_t seed, uint64_t offset, double mean,
                                     double std) {
  const int64_t pairs = (n + 1) / 2;
  for (int64_t j = grid_thread_index(); j < pairs; j += grid_thread_count()) {
    const PhiloxBlock r = philox4x32(seed, offset + uint64_t(j), 0);
    const double radius = sqrt(-2.0 * log(double(u32_to_unit_open0(r.w[0]))));
    const double theta = kTwoPi * double(u32_to_unit(r.w[1]));
    y[2 * j] = to_storage<T>(fma(std * radius, cos(theta), mean));
    if (2 * j + 1 < n) y[2 * j + 1] = to_storage<T>(fma(std * radius, sin(theta), mean));
  }
}

}  // namespace

// --------------------------------------------------------------- launchers

// y = lo + (hi - lo) * u,  u in [0, 1)                      y: [n]
void random_uniform(DType dt, void* y, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi, Stream stream) {
  dispatch_float_half(dt, "random_uniform", [&](auto zero) {
    using T = decltype(zero);
    if (n <= 0) return;
    const int64_t blocks = (n + 3) / 4;
    launch(random_uniform_kernel<T>, dim3(blocks_for(blocks, kRandomThreads)), dim3(kRandomThreads), 0,
           as_cuda_stream(stream), static_cast<T*>(y), n, seed, offset, lo, hi - lo);
  });
}

// y = mean + std * z                                        y: [n]
void random_normal(DType dt, void* y, int64_t n, uint64_t seed, uint64_t offset, double mean, double std,
                   Stream stream) {
  dispatch_float_half(dt, "random_normal", [&](auto zero) {
    using T = decltype(zero);
    if (n <= 0) return;
    const int64_t pairs = (n + 1) / 2;
    launch(random_normal_kernel<T>, dim3(blocks_for(pairs, kRandomThreads)), dim3(kRandomThreads), 0,
           as_cuda_stream(stream), static_cast<T*>(y), n, seed, offset, mean, std);
  });
}

}  // namespace ember::cuda
