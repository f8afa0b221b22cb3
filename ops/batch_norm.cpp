// ops/batch_norm.cpp — 2-D batch normalisation, training and inference.
//
// Training normalises with the batch's mean and biased variance per channel,
// updates the running statistics in place (unbiased variance, PyTorch's
// momentum convention), and saves (mean, 1/sqrt(var + eps)) for backward.
// Inference uses the running statistics; its backward treats them as
// constants (fine-tuning with frozen statistics). batch_norm2d_relu is the
// same with the relu after it fused into the training kernels, and
// batch_norm2d_add_relu with a ResNet block's residual add and relu.
#include "ops/op_helpers.h"
#include "ops/ops.h"

namespace ember::ops {
using namespace detail;

namespace {
void require_param(const Tensor& t, const Tensor& x, int64_t C, const char* what) {
  require_defined(t, "batch_norm2d", what);
  EMBER_CHECK(t.device() == x.device(), "batch_norm2d: ", what, " is on ", t.device().str(), ", input on ",
              x.device().str());
  EMBER_CHECK(t.dtype() == param_dtype(x.dtype()), "batch_norm2d: ", what, " must be ",
              dtype_name(param_dtype(x.dtype())), " for ", dtype_name(x.dtype()), " input, got ", t.str());
  require_shape(t, Shape{C}, "batch_norm2d", what);
}

// The checks of a training call with batch statistics.
void require_training_args(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                           const Tensor& running_var, double eps) {
  require_float(x, "batch_norm2d", "input");
  require_ndim(x, 4, "batch_norm2d", "input");
  const int64_t C = x.size(1);
  require_param(gamma, x, C, "weight");
  require_param(beta, x, C, "bias");
  require_param(running_mean, x, C, "running_mean");
  require_param(running_var, x, C, "running_var");
  EMBER_CHECK(eps > 0, "batch_norm2d: eps must be positive");
  EMBER_CHECK(x.size(0) * x.size(2) * x.size(3) > 1,
              "batch_norm2d: training needs more than one value per channel, got input ", x.shape().str());
}
}  // namespace

Tensor batch_norm2d(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                    Tensor& running_var, bool training, double momentum, double eps) {
  require_float(x, "batch_norm2d", "input");
  require_ndim(x, 4, "batch_norm2d", "input");
  const ChannelDims cd = channel_dims(x);
  const int64_t N = cd.N, C = cd.C, HW = cd.HW;
  require_param(gamma, x, C, "weight");
  require_param(beta, x, C, "bias");
  require_param(running_mean, x, C, "running_mean");
  require_param(running_var, x, C, "running_var");
  EMBER_CHECK(eps > 0, "batch_norm2d: eps must be positive");
  const DType pt = param_dtype(x.dtype());
  Tensor y = Tensor::empty_like(x);
  auto [k, s] = launch_on(x);

  if (training) {
    EMBER_CHECK(N * HW > 1, "batch_norm2d: training needs more than one value per channel, got input ",
                x.shape().str());
    Tensor mean = Tensor::empty({C}, pt, x.device()), invstd = Tensor::empty({C}, pt, x.device());
    k.batch_norm_forward_train(x.dtype(), x.raw_data(), gamma.raw_data(), beta.raw_data(), y.raw_data(),
                               mean.raw_data(), invstd.raw_data(), running_mean.raw_data(), running_var.raw_data(),
                               N, C, HW, momentum, eps, s);
    if (!should_record({&x, &gamma, &beta})) return y;
    Tensor xs = x.detach(), gs = gamma.detach();
    return record_op("batch_norm2d", y, {&x, &gamma, &beta},
                     [xs, gs, mean, invstd, N, C, HW, eps](const Tensor& gy, GradMask) {
                       auto [k2, s2] = launch_on(xs);
                       Tensor gx = Tensor::empty_like(xs);
                       Tensor gg = Tensor::empty({C}, gs.dtype(), xs.device());
                       Tensor gb = Tensor::empty({C}, gs.dtype(), xs.device());
                       k2.batch_norm_backward_train(xs.dtype(), xs.raw_data(), gy.raw_data(), gs.raw_data(),
                                                    mean.raw_data(), invstd.raw_data(), gx.raw_data(),
                                                    gg.raw_data(), gb.raw_data(), N, C, HW, eps, s2);
                       return std::vector<Tensor>{gx, gg, gb};
                     });
  }

  k.batch_norm_forward_eval(x.dtype(), x.raw_data(), gamma.raw_data(), beta.raw_data(), running_mean.raw_data(),
                            running_var.raw_data(), y.raw_data(), N, C, HW, eps, s);
  if (!should_record({&x, &gamma, &beta})) return y;
  Tensor xs = x.detach(), gs = gamma.detach(), rm = running_mean.clone(), rv = running_var.clone();
  return record_op("batch_norm2d_eval", y, {&x, &gamma, &beta},
                   [xs, gs, rm, rv, N, C, HW, eps](const Tensor& gy, GradMask) {
                     auto [k2, s2] = launch_on(xs);
                     Tensor gx = Tensor::empty_like(xs);
                     Tensor gg = Tensor::empty({C}, gs.dtype(), xs.device());
                     Tensor gb = Tensor::empty({C}, gs.dtype(), xs.device());
                     k2.batch_norm_backward_eval(xs.dtype(), xs.raw_data(), gy.raw_data(), gs.raw_data(),
                                                 rm.raw_data(), rv.raw_data(), gx.raw_data(), gg.raw_data(),
                                                 gb.raw_data(), N, C, HW, eps, s2);
                     return std::vector<Tensor>{gx, gg, gb};
                   });
}

Tensor batch_norm2d_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                         Tensor& running_var, bool training, double momentum, double eps) {
  if (!training) return relu(batch_norm2d(x, gamma, beta, running_mean, running_var, false, momentum, eps));
  require_training_args(x, gamma, beta, running_mean, running_var, eps);
  const ChannelDims cd = channel_dims(x);
  const int64_t N = cd.N, C = cd.C, HW = cd.HW;
  const DType pt = param_dtype(x.dtype());
  Tensor y = Tensor::empty_like(x);
  auto [k, s] = launch_on(x);
  Tensor mean = Tensor::empty({C}, pt, x.device()), invstd = Tensor::empty({C}, pt, x.device());
  k.batch_norm_relu_forward_train(x.dtype(), x.raw_data(), gamma.raw_data(), beta.raw_data(), y.raw_data(),
                                  mean.raw_data(), invstd.raw_data(), running_mean.raw_data(), running_var.raw_data(),
                                  N, C, HW, momentum, eps, s);
  if (!should_record({&x, &gamma, &beta})) return y;
  Tensor xs = x.detach(), ys = y.detach(), gs = gamma.detach();
  return record_op("batch_norm2d_relu", y, {&x, &gamma, &beta},
                   [xs, ys, gs, mean, invstd, N, C, HW, eps](const Tensor& gy, GradMask) {
                     auto [k2, s2] = launch_on(xs);
                     Tensor gx = Tensor::empty_like(xs);
                     Tensor gg = Tensor::empty({C}, gs.dtype(), xs.device());
                     Tensor gb = Tensor::empty({C}, gs.dtype(), xs.device());
                     k2.batch_norm_relu_backward_train(xs.dtype(), xs.raw_data(), ys.raw_data(), gy.raw_data(),
                                                       gs.raw_data(), mean.raw_data(), invstd.raw_data(),
                                                       gx.raw_data(), gg.raw_data(), gb.raw_data(), N, C, HW, eps, s2);
                     return std::vector<Tensor>{gx, gg, gb};
                   });
}

Tensor batch_norm2d_add_relu(const Tensor& x, const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                             Tensor& running_mean, Tensor& running_var, bool training, double momentum, double eps) {
  if (!training)
    return add_relu(batch_norm2d(x, gamma, beta, running_mean, running_var, false, momentum, eps), residual);
  require_training_args(x, gamma, beta, running_mean, running_var, eps);
  require_defined(residual, "batch_norm2d_add_relu", "residual");
  require_like(residual, x, "batch_norm2d_add_relu", "residual");
  EMBER_CHECK(residual.shape() == x.shape(), "batch_norm2d_add_relu: residual ", residual.shape().str(),
              " differs from input ", x.shape().str());
  require_same_format(residual, x, "batch_norm2d_add_relu", "residual");
  const ChannelDims cd = channel_dims(x);
  const int64_t N = cd.N, C = cd.C, HW = cd.HW;
  const DType pt = param_dtype(x.dtype());
  Tensor y = Tensor::empty_like(x);
  auto [k, s] = launch_on(x);
  Tensor mean = Tensor::empty({C}, pt, x.device()), invstd = Tensor::empty({C}, pt, x.device());
  k.batch_norm_add_relu_forward_train(x.dtype(), x.raw_data(), residual.raw_data(), gamma.raw_data(),
                                      beta.raw_data(), y.raw_data(), mean.raw_data(), invstd.raw_data(),
                                      running_mean.raw_data(), running_var.raw_data(), N, C, HW, momentum, eps, s);
  if (!should_record({&x, &residual, &gamma, &beta})) return y;
  Tensor xs = x.detach(), ys = y.detach(), gs = gamma.detach();
  return record_op("batch_norm2d_add_relu", y, {&x, &residual, &gamma, &beta},
                   [xs, ys, gs, mean, invstd, N, C, HW, eps](const Tensor& gy, GradMask) {
                     auto [k2, s2] = launch_on(xs);
                     Tensor gx = Tensor::empty_like(xs);
                     Tensor gr = Tensor::empty_like(xs);
                     Tensor gg = Tensor::empty({C}, gs.dtype(), xs.device());
                     Tensor gb = Tensor::empty({C}, gs.dtype(), xs.device());
                     k2.batch_norm_add_relu_backward_train(xs.dtype(), xs.raw_data(), ys.raw_data(), gy.raw_data(),
                                                           gs.raw_data(), mean.raw_data(), invstd.raw_data(),
                                                           gx.raw_data(), gr.raw_data(), gg.raw_data(),
                                                           gb.raw_data(), N, C, HW, eps, s2);
                     return std::vector<Tensor>{gx, gr, gg, gb};
                   });
}

}  // namespace ember::ops
