// cuda/lab/batch_norm_versions.cu — the batch-norm statistics ladder (see
// batch_norm_versions.h). One block per channel; each thread walks the
// channel's N planes of HW values with threadIdx.x along a plane (coalesced
// reads), and the block combines its threads with reduce.cuh's block_reduce.
//   two_pass        reads x twice (the profiler's DRAM bytes: 2x the others)
//   naive_one_pass  reads x once, but E[x^2] - E[x]^2 in f32 loses the
//                   variance when the mean is large (the lab's check fails
//                   at --bn-offset 100: a formula, not a rounding, problem)
//   welford         reads x once and stays exact: each thread keeps (count,
//                   mean, M2) and updates them per value; threads merge as
//                   n = na + nb, d = mb - ma, mean = ma + d nb / n,
//                   M2 = M2a + M2b + d^2 na nb / n (Chan et al.), by xor
//                   shuffles within a warp, then across warps
#include "cuda/lab/batch_norm_versions.h"

#include <cstring>

#include "cuda/common.cuh"
#include "cuda/kernels/reduce.cuh"
#include "engine/error.h"

namespace ember::cuda::lab {
namespace {

// The values of channel c, visited in the same order by every version:
// plane n, then position j = threadIdx.x, threadIdx.x + blockDim.x, ...
//   x: [N, C, HW]
template <typename F>
__device__ void for_channel_values(const float* x, int64_t N, int64_t C, int64_t HW, int64_t c, F f) {
  for (int64_t n = 0; n < N; ++n) {
    const float* plane = x + (n * C + c) * HW;
    for (int64_t j = threadIdx.x; j < HW; j += blockDim.x) f(plane[j]);
  }
}

// ------------------------------------------------------------- two passes

// mean[c] = sum of the channel / M
__global__ void mean_kernel(const float* x, int64_t N, int64_t C, int64_t HW, float* mean) {
  const int64_t c = blockIdx.x;
  float s = 0.0f;
  for_channel_values(x, N, C, HW, c, [&](float v) { s += v; });
  s = block_sum(s);
  if (threadIdx.x == 0) mean[c] = s / float(N * HW);
}

// var[c] = sum (x - mean[c])^2 / M: the second read of x
__global__ void centered_variance_kernel(const float* x, int64_t N, int64_t C, int64_t HW, const float* mean,
                                         float* var) {
  const int64_t c = blockIdx.x;
  const float m = mean[c];
  float s = 0.0f;
  for_channel_values(x, N, C, HW, c, [&](float v) {
    const float d = v - m;
    s += d * d;
  });
  s = block_sum(s);
  if (threadIdx.x == 0) var[c] = s / float(N * HW);
}

// ------------------------------------------------------ naive one pass

__global__ void naive_one_pass_kernel(const float* x, int64_t N, int64_t C, int64_t HW, float* mean, float* var) {
  const int64_t c = blockIdx.x;
  float s = 0.0f, s2 = 0.0f;
  for_channel_values(x, N, C, HW, c, [&](float v) {
    s += v;
    s2 += v * v;
  });
  s = block_sum(s);
  s2 = block_sum(s2);
  if (threadIdx.x == 0) {
    const float M = float(N * HW), m = s / M;
    mean[c] = m;
    var[c] = s2 / M - m * m;  // the difference of two large, nearly equal numbers
  }
}

// ------------------------------------------------------------- Welford

struct WelfordState {
  float n, mean, m2;  // values seen, their mean, sum of squared deviations from it
};

__device__ __forceinline__ WelfordState welford_merge(WelfordState a, WelfordState b) {
  const float n = a.n + b.n;
  if (n == 0.0f) return a;
  const float d = b.mean - a.mean, wb = b.n / n;
  return {n, a.mean + d * wb, a.m2 + b.m2 + d * d * a.n * wb};
}

__device__ __forceinline__ WelfordState warp_welford(WelfordState s) {
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2) {
    WelfordState o;
    o.n = __shfl_xor_sync(kFullWarpMask, s.n, mask);
    o.mean = __shfl_xor_sync(kFullWarpMask, s.mean, mask);
    o.m2 = __shfl_xor_sync(kFullWarpMask, s.m2, mask);
    s = welford_merge(s, o);
  }
  return s;
}

__global__ void welford_kernel(const float* x, int64_t N, int64_t C, int64_t HW, float* mean, float* var) {
  const int64_t c = blockIdx.x;
  WelfordState s{0.0f, 0.0f, 0.0f};
  for_channel_values(x, N, C, HW, c, [&](float v) {
    s.n += 1.0f;
    const float d = v - s.mean;
    s.mean += d / s.n;
    s.m2 += d * (v - s.mean);
  });
  s = block_reduce(s, WelfordState{0.0f, 0.0f, 0.0f}, [](WelfordState w) { return warp_welford(w); });
  if (threadIdx.x == 0) {
    mean[c] = s.mean;
    var[c] = s.n > 0.0f ? s.m2 / s.n : 0.0f;
  }
}

}  // namespace

const char* bn_stats_version_name(BnStatsVersion v) {
  switch (v) {
    case BnStatsVersion::two_pass: return "two_pass";
    case BnStatsVersion::naive_one_pass: return "naive_one_pass";
    case BnStatsVersion::welford: return "welford";
  }
  return "?";
}

BnStatsVersion parse_bn_stats_version(const char* name) {
  for (BnStatsVersion v : {BnStatsVersion::two_pass, BnStatsVersion::naive_one_pass, BnStatsVersion::welford})
    if (std::strcmp(name, bn_stats_version_name(v)) == 0) return v;
  fail(cat("unknown batch-norm statistics version '", name, "' (two_pass, naive_one_pass, welford)"));
}

void bn_stats_version(BnStatsVersion v, int threads, int64_t N, int64_t C, int64_t HW, const float* x, float* mean,
                      float* var, Stream stream) {
  EMBER_CHECK(threads >= 32 && threads <= 1024 && threads % 32 == 0, "bn_stats_version: ", threads,
              " threads per block (a multiple of 32 from 32 to 1024)");
  if (C <= 0) return;
  const cudaStream_t s = as_cuda_stream(stream);
  const dim3 grid{unsigned(C)}, block{unsigned(threads)};
  switch (v) {
    case BnStatsVersion::two_pass:
      launch(mean_kernel, grid, block, 0, s, x, N, C, HW, mean);
      launch(centered_variance_kernel, grid, block, 0, s, x, N, C, HW, static_cast<const float*>(mean), var);
      return;
    case BnStatsVersion::naive_one_pass:
      launch(naive_one_pass_kernel, grid, block, 0, s, x, N, C, HW, mean, var);
      return;
    case BnStatsVersion::welford:
      launch(welford_kernel, grid, block, 0, s, x, N, C, HW, mean, var);
      return;
  }
}

}  // namespace ember::cuda::lab
