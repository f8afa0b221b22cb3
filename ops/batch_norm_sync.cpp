// ops/batch_norm_sync.cpp — synchronised batch normalisation for
// data-parallel training (--sync-bn 1): the batch statistics, and the two
// per-channel sums of the backward, cover the samples of every rank, so P
// ranks with batch B each train exactly as one rank with batch P*B.
//
// Built from the batch-norm kernels that exist (ops/kernels.h), with the
// per-channel arithmetic (a few numbers per channel) in double on the host:
//   forward   1. each rank's count, mean and unbiased variance: the training
//                kernel with momentum 1 into scratch running buffers;
//             2. all ranks' (count, mean, variance) gathered (an all-reduce
//                of a [world, 2C+1] table where each rank fills its row) and
//                combined with Chan's parallel formula: global mean and
//                biased variance; the running statistics are updated with
//                the global unbiased variance, as one big batch would;
//             3. y = the inference kernel with the global statistics.
//   backward  1. the inference backward kernel with the global statistics
//                gives gx_e = gamma * invstd * gy and the local sums
//                S_b = sum(gy), S_g = sum(gy * xhat) (its gbeta, ggamma);
//             2. S_b, S_g all-reduced (summed over ranks);
//             3. gx = gx_e - gamma * invstd / M * (S_b + xhat * S_g), the
//                correction computed by the inference forward kernel with
//                per-channel scale and shift, then added;
//             ggamma, gbeta are this rank's own sums (the data-parallel
//             reducer averages parameter gradients afterwards).
// Every rank computes the same global statistics bit for bit.
#include <cmath>
#include <vector>

#include "ops/op_helpers.h"
#include "ops/ops.h"

namespace ember::ops {
using namespace detail;

namespace {

std::vector<double> host_values(const Tensor& t) { return t.to_double_vector(); }
Tensor device_values(const std::vector<double>& v, DType dt, Device d) {
  return Tensor::from_vector(v, Shape{int64_t(v.size())}, dt, d);
}

}  // namespace

Tensor batch_norm2d_sync(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                         Tensor& running_var, double momentum, double eps, const BatchNormSync& sync) {
  require_float(x, "batch_norm2d_sync", "input");
  require_ndim(x, 4, "batch_norm2d_sync", "input");
  EMBER_CHECK(sync.all_reduce_sum && sync.world >= 1 && sync.rank >= 0 && sync.rank < sync.world,
              "batch_norm2d_sync: no all-reduce for rank ", sync.rank, " of ", sync.world);
  EMBER_CHECK(eps > 0, "batch_norm2d_sync: eps must be positive");
  const ChannelDims cd = channel_dims(x);
  const int64_t N = cd.N, C = cd.C, HW = cd.HW;
  for (const Tensor* t : {&gamma, &beta, static_cast<const Tensor*>(&running_mean), static_cast<const Tensor*>(&running_var)}) {
    EMBER_CHECK(t->defined() && t->shape() == Shape{C} && t->dtype() == param_dtype(x.dtype()) &&
                    t->device() == x.device(),
                "batch_norm2d_sync: parameters and statistics must be ", dtype_name(param_dtype(x.dtype())), " [", C,
                "] on ", x.device().str(), ", got ", t->defined() ? t->str() : "an undefined tensor");
  }
  const DType pt = param_dtype(x.dtype());
  auto [k, s] = launch_on(x);
  const int64_t M = N * HW;

  // 1. this rank's mean and unbiased variance (the running outputs with momentum 1)
  Tensor scratch_y = Tensor::empty_like(x);
  Tensor lmean = Tensor::empty({C}, pt, x.device()), linv = Tensor::empty({C}, pt, x.device());
  Tensor rmean = Tensor::zeros({C}, pt, x.device()), rvar = Tensor::zeros({C}, pt, x.device());
  Tensor ones = Tensor::full({C}, 1.0, pt, x.device()), zeros = Tensor::zeros({C}, pt, x.device());
  if (M > 0)
    k.batch_norm_forward_train(x.dtype(), x.raw_data(), ones.raw_data(), zeros.raw_data(), scratch_y.raw_data(),
                               lmean.raw_data(), linv.raw_data(), rmean.raw_data(), rvar.raw_data(), N, C, HW, 1.0,
                               eps, s);
  scratch_y = Tensor();
  // 2. gather every rank's (count, mean, variance), combine in double
  const int64_t row = 2 * C + 1;
  std::vector<double> table(size_t(sync.world * row), 0.0);
  {
    const std::vector<double> m = host_values(rmean), v = host_values(rvar);
    double* mine = table.data() + sync.rank * row;
    mine[0] = double(M);
    for (int64_t c = 0; c < C; ++c) {
      mine[1 + c] = m[size_t(c)];
      mine[1 + C + c] = M > 1 ? v[size_t(c)] * double(M - 1) / double(M) : 0.0;  // biased
    }
  }
  Tensor gathered = device_values(table, DType::f64, x.device());
  sync.all_reduce_sum(gathered);
  table = host_values(gathered);
  double total = 0;
  for (int r = 0; r < sync.world; ++r) total += table[size_t(r * row)];
  EMBER_CHECK(total > 1, "batch_norm2d_sync: training needs more than one value per channel over all ranks, got ",
              total);
  std::vector<double> mean(size_t(C), 0.0), var(size_t(C), 0.0);
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int r = 0; r < sync.world; ++r) sum += table[size_t(r * row)] * table[size_t(r * row + 1 + c)];
    const double mu = sum / total;
    double m2 = 0;
    for (int r = 0; r < sync.world; ++r) {
      const double n = table[size_t(r * row)], d = table[size_t(r * row + 1 + c)] - mu;
      m2 += n * (table[size_t(r * row + 1 + C + c)] + d * d);
    }
    mean[size_t(c)] = mu;
    var[size_t(c)] = m2 / total;
  }
  {  // running statistics, as one batch of `total` values would move them
    std::vector<double> rm = host_values(running_mean), rv = host_values(running_var);
    for (int64_t c = 0; c < C; ++c) {
      const size_t i = size_t(c);
      rm[i] = (1.0 - momentum) * rm[i] + momentum * mean[i];
      rv[i] = (1.0 - momentum) * rv[i] + momentum * var[i] * total / (total - 1);
    }
    running_mean.copy_from(device_values(rm, pt, x.device()));
    running_var.copy_from(device_values(rv, pt, x.device()));
  }
  // 3. normalise with the global statistics
  const Tensor gmean = device_values(mean, pt, x.device()), gvar = device_values(var, pt, x.device());
  Tensor y = Tensor::empty_like(x);
  k.batch_norm_forward_eval(x.dtype(), x.raw_data(), gamma.raw_data(), beta.raw_data(), gmean.raw_data(),
                            gvar.raw_data(), y.raw_data(), N, C, HW, eps, s);
  if (!should_record({&x, &gamma, &beta})) return y;

  Tensor xs = x.detach(), gs = gamma.detach();
  return record_op("batch_norm2d_sync", y, {&x, &gamma, &beta},
                   [xs, gs, gmean, gvar, var, total, N, C, HW, eps, sync](const Tensor& gy, GradMask) {
                     auto [k2, s2] = launch_on(xs);
                     const DType pt2 = gs.dtype();
                     Tensor gx = Tensor::empty_like(xs);
                     Tensor gg = Tensor::empty({C}, pt2, xs.device()), gb = Tensor::empty({C}, pt2, xs.device());
                     k2.batch_norm_backward_eval(xs.dtype(), xs.raw_data(), gy.raw_data(), gs.raw_data(),
                                                 gmean.raw_data(), gvar.raw_data(), gx.raw_data(), gg.raw_data(),
                                                 gb.raw_data(), N, C, HW, eps, s2);
                     // global sums of gy*xhat and gy
                     std::vector<double> sums = host_values(gg);
                     const std::vector<double> b = host_values(gb);
                     sums.insert(sums.end(), b.begin(), b.end());
                     Tensor both = device_values(sums, DType::f64, xs.device());
                     sync.all_reduce_sum(both);
                     sums = host_values(both);
                     const std::vector<double> g = host_values(gs);
                     std::vector<double> xhat_scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
                     for (int64_t c = 0; c < C; ++c) {
                       const size_t i = size_t(c);
                       const double k_c = -g[i] / std::sqrt(var[i] + eps) / total;
                       xhat_scale[i] = k_c * sums[i];
                       shift[i] = k_c * sums[size_t(C) + i];
                     }
                     const Tensor sc = device_values(xhat_scale, pt2, xs.device()), sh = device_values(shift, pt2, xs.device());
                     Tensor correction = Tensor::empty_like(xs);
                     k2.batch_norm_forward_eval(xs.dtype(), xs.raw_data(), sc.raw_data(), sh.raw_data(),
                                                gmean.raw_data(), gvar.raw_data(), correction.raw_data(), N, C, HW,
                                                eps, s2);
                     k2.add(xs.dtype(), gx.raw_data(), correction.raw_data(), gx.raw_data(), xs.numel(), s2);
                     return std::vector<Tensor>{gx, gg, gb};
                   });
}

}  // namespace ember::ops
