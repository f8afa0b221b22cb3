// net/layers.h — the layers ResNets are built from: Conv2d, BatchNorm2d,
// Linear, ReLU, Dropout, MaxPool2d, AdaptiveAvgPool2d and Sequential.
//
// Parameter and buffer names and default initialisation follow PyTorch's
// torch.nn (weights are filled by the ResNet builder's init, net/init.h).
#pragma once
#include <memory>
#include <vector>

#include "net/module.h"
#include "ops/ops.h"

namespace ember::net {

// weight: [out, in, k, k], bias: [out] (optional)
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
         bool bias = false, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  ops::Conv2dOptions options;
};

// weight, bias, running_mean, running_var: [C]; num_batches_tracked: i64 scalar (host)
class BatchNorm2d : public Module {
 public:
  // fixed_gamma (MXNet's fix_gamma=True): the scale is 1 and not learned;
  // `weight` is then a buffer (saved, loaded, never trained).
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1, DType dtype = DType::f32,
                       bool fixed_gamma = false);
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)), fused into one op where that exists (training with
  // this rank's batch statistics: ops::batch_norm2d_relu).
  Tensor forward_relu(const Tensor& x);
  // relu(forward(x) + residual), a ResNet block's end, fused the same way
  // (ops::batch_norm2d_add_relu).
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  // forward_relu(conv(x)) and forward_add_relu(conv(x), residual): in
  // training with this rank's batch statistics and a convolution without
  // bias, one op (ops::conv2d_batch_norm2d_train: a backend may take the
  // statistics as the convolution stores its output), else conv then the
  // forms above.
  Tensor forward_relu(Conv2d& conv, const Tensor& x);
  Tensor forward_add_relu(Conv2d& conv, const Tensor& x, const Tensor& residual);
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  double eps, momentum;
  // Data-parallel --sync-bn: training statistics over every rank's batch
  // (ops::batch_norm2d_sync); null: this rank's batch only.
  std::shared_ptr<const ops::BatchNormSync> sync;
  // Fine-tuning a frozen backbone: normalise with the running statistics
  // even in training mode, and leave them (and the counter) unchanged.
  bool frozen_statistics = false;
};

// Makes every BatchNorm2d of the model synchronised (null: local again).
void set_sync_batch_norm(Module& model, std::shared_ptr<const ops::BatchNormSync> sync);

// weight: [out, in], bias: [out]
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return ops::relu(x); }
};

// torch.nn.Dropout: ops::dropout in training mode, the identity in
// evaluation. Its masks come from `gen`, which set_dropout_step resets
// every training step.
class Dropout : public Module {
 public:
  explicit Dropout(double p);
  Tensor forward(const Tensor& x) override { return ops::dropout(x, p, is_training(), gen); }
  double p;
  Generator gen;
};

// Gives every Dropout of the model the Philox key of (seed, step, stream,
// its place among the model's Dropouts): fit calls it before each training
// step (stream: the data-parallel rank), so the masks of a step do not
// depend on the steps before it and a resumed run draws what the first run
// drew (mixup's rule, net/mixup.h).
void set_dropout_step(Module& model, uint64_t seed, uint64_t step, uint64_t stream);

class MaxPool2d : public Module {
 public:
  MaxPool2d(int64_t kernel, int64_t stride, int64_t padding) : kernel_(kernel), stride_(stride), padding_(padding) {}
  Tensor forward(const Tensor& x) override { return ops::max_pool2d(x, kernel_, stride_, padding_); }

 private:
  int64_t kernel_, stride_, padding_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w) : out_h_(out_h), out_w_(out_w) {}
  Tensor forward(const Tensor& x) override { return ops::adaptive_avg_pool2d(x, out_h_, out_w_); }

 private:
  int64_t out_h_, out_w_;
};

// Children named "0", "1", ... run in order.
class Sequential : public Module {
 public:
  Sequential() = default;
  void append(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  Module& operator[](size_t i) { return *layers_[i]; }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace ember::net
