// ops/ops.h — the differentiable operations and the tensor utilities.
//
// Each op checks its inputs (shapes, dtypes, devices) with a clear message,
// runs its kernels through the table of the inputs' device, and, when an
// input requires grad, records a backward node (engine/autograd.h) whose
// formula is in the op's own .cpp file next to the forward.
//
// Shapes follow PyTorch: images are [N, C, H, W], linear inputs [N, features].
#pragma once
#include <cstdint>
#include <functional>

#include "engine/autograd.h"
#include "engine/rng.h"
#include "engine/tensor.h"
#include "ops/kernels.h"

namespace ember::ops {

// Batch-norm parameters and statistics are stored in this type for
// activations of type dt (f64 for f64, f32 otherwise).
inline DType param_dtype(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

// ------------------------------------------------------------ utilities (no grad)
void fill_(Tensor& t, double value);
void uniform_(Tensor& t, double lo, double hi, Generator& gen);
void normal_(Tensor& t, double mean, double std, Generator& gen);
// acc += alpha * g, in place (same shape, dtype, device).
void add_(Tensor& acc, const Tensor& g, double alpha = 1.0);
// x -> float tensor (dtype out) normalised per channel: (x/255 - mean) * inv_std.   x: u8 [N, C, H, W]
Tensor normalize_u8(const Tensor& x, const ChannelNorm& norm, DType out = DType::f32);
// Index of the largest value in each row.   x: [N, C] -> i64 [N]
Tensor argmax(const Tensor& x);
// acc[0] += number of positions where a and b (i64, same shape) are equal;
// acc: f64 [1] on their device. Accuracy summed on the device, so training
// steps need not copy predictions to the host.
void count_equal_(Tensor& acc, const Tensor& a, const Tensor& b);
// One SGD step on w with gradient g and momentum buffer buf (see kernels.h).
void sgd_update_(Tensor& w, const Tensor& g, Tensor& buf, const SgdParams& p);

// --------------------------------------------------------------- differentiable
// a + b (same shape)
Tensor add(const Tensor& a, const Tensor& b);
// alpha * x
Tensor scale(const Tensor& x, double alpha);
// sum of all elements -> [1]
Tensor sum(const Tensor& x);
// Cast between floating types (gradient is cast back).
Tensor cast(const Tensor& x, DType dtype);
Tensor relu(const Tensor& x);
// relu(a + b) in one pass (the residual connection); the gradient of both
// inputs is relu's of the output.
Tensor add_relu(const Tensor& a, const Tensor& b);
// x * Phi(x), Phi the standard normal CDF (PyTorch's gelu, the exact form).
Tensor gelu(const Tensor& x);
// Dropout (PyTorch's): in training each element is zeroed with probability
// p and the others are scaled by 1 / (1 - p). The mask is drawn from gen
// (ceil(n / 4) Philox blocks) and recomputed, not stored, for the gradient.
// Not training, or p == 0: x itself.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  static Conv2dOptions square(int64_t stride, int64_t pad) { return {stride, stride, pad, pad}; }
};
// x: [N, C, H, W], w: [K, C, R, S], b: [K] or undefined -> [N, K, P, Q]
// A channels-last w makes a channels-last convolution (x converted to w's
// format if it differs; y in w's format).
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& opt);

// x: [N, C, H, W]; gamma, beta, running_mean, running_var: [C] in param_dtype.
// training: normalise with batch statistics and update the running ones in place.
Tensor batch_norm2d(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                    Tensor& running_var, bool training, double momentum, double eps);

// relu(batch_norm2d(...)): in training one fused op (one output pass, and
// one gradient with relu's mask folded into batch norm's passes); in
// inference batch_norm2d then relu. Same arguments as batch_norm2d.
Tensor batch_norm2d_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                         Tensor& running_var, bool training, double momentum, double eps);
// relu(batch_norm2d(x, ...) + residual), a ResNet block's end: in training
// one fused op (one output pass that reads x and the residual; backward,
// the residual's gradient is stored as batch norm's first pass reads gy);
// in inference batch_norm2d then add_relu. residual: x's shape, dtype and
// device.
Tensor batch_norm2d_add_relu(const Tensor& x, const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                             Tensor& running_mean, Tensor& running_var, bool training, double momentum, double eps);
// A convolution (no bias) and the training batch norm after it, with this
// batch's statistics, as one op: y = batch_norm2d(conv2d(x, w)), then
// relu(y) when relu, or relu(y + residual) when residual is given (relu must
// then be true). The kernels may take the statistics as the convolution
// stores its output (the CUDA tensor-core path: one read of the output
// fewer); values, running statistics and gradients are those of conv2d then
// batch_norm2d(_relu, _add_relu), the statistics up to the rounding of
// their sums. gamma, beta, running_mean, running_var: [K] in param_dtype.
Tensor conv2d_batch_norm2d_train(const Tensor& x, const Tensor& w, const Conv2dOptions& opt, const Tensor& gamma,
                                 const Tensor& beta, Tensor& running_mean, Tensor& running_var, double momentum,
                                 double eps, bool relu, const Tensor& residual = Tensor());
// Synchronised batch norm (training only) for data-parallel runs: the
// statistics and the backward's per-channel sums cover every rank's batch
// (ops/batch_norm_sync.cpp). all_reduce_sum sums a small f64 tensor (on x's
// device) across the ranks in place; every rank must call this op for the
// same layers in the same order.
struct BatchNormSync {
  int rank = 0, world = 1;
  std::function<void(Tensor&)> all_reduce_sum;
};
Tensor batch_norm2d_sync(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                         Tensor& running_var, double momentum, double eps, const BatchNormSync& sync);

// Square window max pooling.   x: [N, C, H, W] -> [N, C, P, Q]
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding);
// x: [N, C, H, W] -> [N, C, out_h, out_w]
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);
// The largest value of each plane (max pooling with one H x W window; the
// gradient goes to the first maximum).   x: [N, C, H, W] -> [N, C, 1, 1]
Tensor global_max_pool2d(const Tensor& x);

// x: [N, in], w: [out, in], b: [out] or undefined -> [N, out]
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

// x in the given memory format (engine/tensor.h): x itself if it already is,
// else a converted copy (one transpose per image); the gradient converts back.
Tensor to_memory_format(const Tensor& x, MemoryFormat format);

// Views of the same storage (the gradient is reshaped back). A channels-last
// x can be viewed only where its order does not matter (C == 1 or H*W == 1).
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int start_dim = 1);
// a and b joined along dim (negative: from the end); every other size must
// agree, as must dtype and device. The gradient is split back.
//   a: [..., Fa, ...], b: [..., Fb, ...] -> [..., Fa + Fb, ...]
Tensor concat(const Tensor& a, const Tensor& b, int dim = 1);

// Mean softmax cross-entropy over the batch with label smoothing.
//   logits: [N, classes], labels: i64 [N] -> [1]
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing = 0.0);

}  // namespace ember::ops
