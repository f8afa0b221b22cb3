// ops/batch_norm.cpp — 2-D batch normalisation, training and inference.
//
// Training normalises with the batch's mean and biased variance per channel,
// updates the running statistics in place (unbiased variance, PyTorch's
// momentum convention), and saves (mean, 1/sqrt(var + eps)) for backward.
// Inference uses the running statistics; its backward treats them as
// constants (fine-tuning with frozen statistics). batch_norm2d_relu is the
// same with the relu after it fused into the training kernels, and
// batch_norm2d_add_relu with a ResNet block's residual add and relu.
// conv2d_batch_norm2d_train is a convolution and any of the three training
// forms after it as one op, so that a backend can take the statistics as
// the convolution stores its output (the kernel table's
// conv2d_batch_norm_forward_train); its backward is batch norm's, then the
// convolution's.
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

Tensor conv2d_batch_norm2d_train(const Tensor& x_in, const Tensor& w, const Conv2dOptions& opt, const Tensor& gamma,
                                 const Tensor& beta, Tensor& running_mean, Tensor& running_var, double momentum,
                                 double eps, bool relu, const Tensor& residual) {
  const char* op = "conv2d_batch_norm2d_train";
  require_float(x_in, op, "input");
  require_ndim(x_in, 4, op, "input");
  require_like(w, x_in, op, "weight");
  require_ndim(w, 4, op, "weight");
  const Tensor x = x_in.memory_format() == w.memory_format() ? x_in : to_memory_format(x_in, w.memory_format());
  EMBER_CHECK(w.size(1) == x.size(1), op, ": weight ", w.shape().str(), " expects ", w.size(1), " input channels, input ",
              x.shape().str(), " has ", x.size(1));
  Conv2dGeometry g = make_conv2d_geometry(x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3),
                                          opt.stride_h, opt.stride_w, opt.pad_h, opt.pad_w);
  g.channels_last = w.is_channels_last();
  Tensor y_conv = Tensor::empty({g.N, g.K, g.P, g.Q}, x.dtype(), x.device(), w.memory_format());
  require_training_args(y_conv, gamma, beta, running_mean, running_var, eps);
  if (residual.defined()) {
    EMBER_CHECK(relu, op, ": a residual is added before the ReLU (relu(bn + residual)): relu must be true");
    require_like(residual, y_conv, op, "residual");
    EMBER_CHECK(residual.shape() == y_conv.shape(), op, ": residual ", residual.shape().str(),
                " differs from the convolution's output ", y_conv.shape().str());
    require_same_format(residual, y_conv, op, "residual");
  }
  const ChannelDims cd = channel_dims(y_conv);
  const int64_t N = cd.N, C = cd.C, HW = cd.HW;
  const DType pt = param_dtype(x.dtype());
  Tensor y = Tensor::empty_like(y_conv);
  Tensor mean = Tensor::empty({C}, pt, x.device()), invstd = Tensor::empty({C}, pt, x.device());
  auto [k, s] = launch_on(x);
  k.conv2d_batch_norm_forward_train(x.dtype(), g, x.raw_data(), w.raw_data(), y_conv.raw_data(),
                                    residual.defined() ? residual.raw_data() : nullptr, gamma.raw_data(),
                                    beta.raw_data(), y.raw_data(), mean.raw_data(), invstd.raw_data(),
                                    running_mean.raw_data(), running_var.raw_data(), momentum, eps, relu, s);
  if (!should_record({&x, &w, &gamma, &beta, &residual})) return y;
  Tensor xs = x.detach(), ws = w.detach(), ycs = y_conv, ys = y.detach(), gs = gamma.detach();
  const bool has_residual = residual.defined();
  return record_op("conv2d_batch_norm2d", y, {&x, &w, &gamma, &beta, &residual},
                   [xs, ws, ycs, ys, gs, mean, invstd, g, N, C, HW, eps, relu, has_residual](const Tensor& gy,
                                                                                             GradMask needs) {
                     auto [k2, s2] = launch_on(xs);
                     const DType dt = xs.dtype();
                     // Batch norm's backward: the gradient of the convolution's output (and the residual's).
                     Tensor g_conv = Tensor::empty_like(ycs), gr;
                     Tensor gg = Tensor::empty({C}, gs.dtype(), xs.device());
                     Tensor gb = Tensor::empty({C}, gs.dtype(), xs.device());
                     if (has_residual) {
                       gr = Tensor::empty_like(ycs);
                       k2.batch_norm_add_relu_backward_train(dt, ycs.raw_data(), ys.raw_data(), gy.raw_data(),
                                                             gs.raw_data(), mean.raw_data(), invstd.raw_data(),
                                                             g_conv.raw_data(), gr.raw_data(), gg.raw_data(),
                                                             gb.raw_data(), N, C, HW, eps, s2);
                     } else if (relu) {
                       k2.batch_norm_relu_backward_train(dt, ycs.raw_data(), ys.raw_data(), gy.raw_data(),
                                                         gs.raw_data(), mean.raw_data(), invstd.raw_data(),
                                                         g_conv.raw_data(), gg.raw_data(), gb.raw_data(), N, C, HW,
                                                         eps, s2);
                     } else {
                       k2.batch_norm_backward_train(dt, ycs.raw_data(), gy.raw_data(), gs.raw_data(), mean.raw_data(),
                                                    invstd.raw_data(), g_conv.raw_data(), gg.raw_data(),
                                                    gb.raw_data(), N, C, HW, eps, s2);
                     }
                     // The convolution's.
                     std::vector<Tensor> grads(5);
                     if (needs[0]) {
                       grads[0] = Tensor::empty_like(xs);
                       k2.conv2d_backward_data(dt, g, g_conv.raw_data(), ws.raw_data(), grads[0].raw_data(), s2);
                     }
                     if (needs[1]) {
                       grads[1] = Tensor::empty_like(ws);
                       k2.conv2d_backward_filter(dt, g, xs.raw_data(), g_conv.raw_data(), grads[1].raw_data(), s2);
                     }
                     grads[2] = gg;
                     grads[3] = gb;
                     grads[4] = gr;
                     return grads;
                   });
}

}  // namespace ember::ops
