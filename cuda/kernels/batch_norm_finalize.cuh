// cuda/kernels/batch_norm_finalize.cuh — batch norm's training-forward
// finalize for one channel: from the sums of (x - shift) and their squares,
// the statistics, save_mean/save_invstd, the running averages and the
// coefficients of the elementwise pass. Run by the last block of the launch
// that took the sums: batch norm's own statistics pass (batch_norm.cu,
// batch_norm_sums.cuh), or the tensor-core convolution that stored x
// (conv_mma.cu, whose epilogue takes the sums around a given center).
#pragma once
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/kernels/batch_norm_sums.cuh"

namespace ember::cuda {
namespace {

// Training forward, channel c: statistics from the partials, save_mean/
// save_invstd, the running averages, and coef = [mean | gamma*invstd | beta].
//   pa, pb: [C, G]   coef: [3, C]
template <typename T, typename P = compute_t<T>>
struct ForwardFinalize {
  const T* x;
  const P* gamma;
  const P* beta;
  P* save_mean;
  P* save_invstd;
  P* running_mean;
  P* running_var;
  P* coef;
  int64_t N, C, HW;
  double momentum, eps;
  const P* center = nullptr;  // the sums' shift: center[c], or (null) the channel's first value, x[c * HW]
  __device__ void operator()(int64_t c, const double* pa, const double* pb, int64_t G) const {
    double s, ss;
    add_partials(c, pa, pb, G, s, ss);
    from_sums(c, center ? double(center[c]) : N * HW > 0 ? double(to_compute(x[c * HW])) : 0.0, s, ss);
  }
  // From s and ss, the sums of x - shift and of its square over the channel
  // (shift is read before running_mean is written: it may be running_mean).
  __device__ void from_sums(int64_t c, double shift, double s, double ss) const {
    const int64_t M = N * HW;
    const double dmean = M > 0 ? s / double(M) : 0.0;
    const double mean = shift + dmean;
    const double var = M > 0 ? std::max(0.0, ss / double(M) - dmean * dmean) : 0.0;
    const double invstd = 1.0 / ::sqrt(var + eps);
    save_mean[c] = P(mean);
    save_invstd[c] = P(invstd);
    const double var_unbiased = M > 1 ? var * double(M) / double(M - 1) : var;
    running_mean[c] = P((1.0 - momentum) * double(running_mean[c]) + momentum * mean);
    running_var[c] = P((1.0 - momentum) * double(running_var[c]) + momentum * var_unbiased);
    coef[c] = P(mean);
    coef[C + c] = P(double(gamma[c]) * invstd);
    coef[2 * C + c] = beta[c];
  }
};

}  // namespace
}  // namespace ember::cuda
