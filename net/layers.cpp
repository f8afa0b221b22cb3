// net/layers.cpp — construction and forward of the basic layers.
#include "net/layers.h"

#include <cmath>

#include "engine/autograd.h"

namespace ember::net {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding,
               bool with_bias, DType dtype)
    : options(ops::Conv2dOptions::square(stride, padding)) {
  EMBER_CHECK(in_channels > 0 && out_channels > 0 && kernel > 0, "Conv2d: sizes must be positive");
  weight = Tensor::zeros({out_channels, in_channels, kernel, kernel}, dtype);
  register_parameter("weight", &weight, /*decay=*/true);
  if (with_bias) {
    bias = Tensor::zeros({out_channels}, dtype);
    register_parameter("bias", &bias, /*decay=*/false);
  }
}

Tensor Conv2d::forward(const Tensor& x) { return ops::conv2d(x, weight, bias, options); }

BatchNorm2d::BatchNorm2d(int64_t channels, double eps_, double momentum_, DType dtype, bool fixed_gamma)
    : eps(eps_), momentum(momentum_) {
  const DType pt = ops::param_dtype(dtype);
  weight = Tensor::full({channels}, 1.0, pt);
  bias = Tensor::zeros({channels}, pt);
  running_mean = Tensor::zeros({channels}, pt);
  running_var = Tensor::full({channels}, 1.0, pt);
  num_batches_tracked = Tensor::zeros(Shape{}, DType::i64);
  if (fixed_gamma)
    register_buffer("weight", &weight);
  else
    register_parameter("weight", &weight, /*decay=*/false, /*keep_f32=*/true);
  register_parameter("bias", &bias, /*decay=*/false, /*keep_f32=*/true);
  register_buffer("running_mean", &running_mean);
  register_buffer("running_var", &running_var);
  register_buffer("num_batches_tracked", &num_batches_tracked, /*host_only=*/true);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  const bool batch_statistics = is_training() && !frozen_statistics;
  if (batch_statistics) num_batches_tracked.data<int64_t>()[0] += 1;
  if (batch_statistics && sync)
    return ops::batch_norm2d_sync(x, weight, bias, running_mean, running_var, momentum, eps, *sync);
  return ops::batch_norm2d(x, weight, bias, running_mean, running_var, batch_statistics, momentum, eps);
}

Tensor BatchNorm2d::forward_relu(const Tensor& x) {
  if (!is_training() || frozen_statistics || sync) return ops::relu(forward(x));
  num_batches_tracked.data<int64_t>()[0] += 1;
  return ops::batch_norm2d_relu(x, weight, bias, running_mean, running_var, true, momentum, eps);
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& residual) {
  if (!is_training() || frozen_statistics || sync) return ops::add_relu(forward(x), residual);
  num_batches_tracked.data<int64_t>()[0] += 1;
  return ops::batch_norm2d_add_relu(x, residual, weight, bias, running_mean, running_var, true, momentum, eps);
}

Tensor BatchNorm2d::forward_relu(Conv2d& conv, const Tensor& x) {
  if (!is_training() || frozen_statistics || sync || conv.bias.defined()) return forward_relu(conv(x));
  num_batches_tracked.data<int64_t>()[0] += 1;
  return ops::conv2d_batch_norm2d_train(x, conv.weight, conv.options, weight, bias, running_mean, running_var, momentum,
                                        eps, /*relu=*/true);
}

Tensor BatchNorm2d::forward_add_relu(Conv2d& conv, const Tensor& x, const Tensor& residual) {
  if (!is_training() || frozen_statistics || sync || conv.bias.defined()) return forward_add_relu(conv(x), residual);
  num_batches_tracked.data<int64_t>()[0] += 1;
  return ops::conv2d_batch_norm2d_train(x, conv.weight, conv.options, weight, bias, running_mean, running_var, momentum,
                                        eps, /*relu=*/true, residual);
}

void set_sync_batch_norm(Module& model, std::shared_ptr<const ops::BatchNormSync> sync) {
  model.apply([&](Module& m) {
    if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) bn->sync = sync;
  });
}

Dropout::Dropout(double p_) : p(p_) {
  EMBER_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
}

void set_dropout_step(Module& model, uint64_t seed, uint64_t step, uint64_t stream) {
  // The per-step Philox stream of data/batch_iterator.h's table, use 1
  // (mixup is use 0): 3 << 62 | 1 << 56 | step; its block (stream << 20 |
  // index) gives the index-th Dropout of that rank its key for the step.
  EMBER_CHECK(step < (uint64_t(1) << 56), "dropout: step ", step, " outside [0, 2^56)");
  const uint64_t step_stream = uint64_t(3) << 62 | uint64_t(1) << 56 | step;
  uint64_t index = 0;
  model.apply([&](Module& m) {
    if (auto* d = dynamic_cast<Dropout*>(&m)) {
      const PhiloxBlock r = philox4x32(seed, stream << 20 | index++, step_stream);
      d->gen = Generator(uint64_t(r.w[0]) << 32 | r.w[1]);
    }
  });
}

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, DType dtype) {
  EMBER_CHECK(in_features > 0 && out_features > 0, "Linear: sizes must be positive");
  weight = Tensor::zeros({out_features, in_features}, dtype);
  register_parameter("weight", &weight, /*decay=*/true);
  if (with_bias) {
    bias = Tensor::zeros({out_features}, dtype);
    register_parameter("bias", &bias, /*decay=*/false);
  }
}

Tensor Linear::forward(const Tensor& x) { return ops::linear(x, weight, bias); }

void Sequential::append(std::shared_ptr<Module> m) {
  register_module(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : layers_) y = m->forward(y);
  return y;
}

}  // namespace ember::net
