// cuda/lab/batch_norm_versions.h — the kernel lab's batch-norm statistics
// ladder (apps/bench/kernel_lab.cpp, --op bn_stats/<version>/<threads>, or
// --op bn-stats-ladder): per-channel mean and biased variance of x, each
// version one change from the last, checked against the CPU in double on
// data whose mean is far from zero (where a careless formula cancels), and
// profiled (kernel_lab_sim) or timed (kernel_lab). ember's own kernel
// (cuda/kernels/batch_norm.cu: shifted sums in double, partial blocks per
// channel) is the rung above. Not part of the kernel table.
//
//   x: [N, C, HW]   mean, var: [C]   one block of `threads` per channel
#pragma once
#include <cstdint>

#include "ops/kernels.h"

namespace ember::cuda::lab {

enum class BnStatsVersion {
  two_pass,        // a pass for the mean, a second for sum (x - mean)^2: exact enough, reads x twice
  naive_one_pass,  // sum x and sum x^2 in f32 in one pass, var = E[x^2] - E[x]^2: cancels when |mean| >> std
  welford,         // one pass, per-thread Welford updates in f32, merged by warp shuffles (Chan's formula)
};
const char* bn_stats_version_name(BnStatsVersion v);
// "two_pass" | "naive_one_pass" | "welford"; throws naming the value otherwise.
BnStatsVersion parse_bn_stats_version(const char* name);

// threads: a multiple of 32 from 32 to 1024.
void bn_stats_version(BnStatsVersion v, int threads, int64_t N, int64_t C, int64_t HW, const float* x, float* mean,
                      float* var, Stream stream);

}  // namespace ember::cuda::lab
