// ops/loss.cpp — mean softmax cross-entropy with label smoothing.
//
//   loss = mean over n of  -sum_c target[n, c] * log softmax(logits[n])[c]
//   target = (1 - s) * onehot(label) + s / classes
//   glogits = gloss / N * (softmax(logits) - target)
// With f16 logits the loss (and the softmax kept for backward) is f32
// (ops::param_dtype); the gradient reaching the logits is f16.
#include "ops/op_helpers.h"
#include "ops/ops.h"

namespace ember::ops {
using namespace detail;

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing) {
  require_float(logits, "cross_entropy", "logits");
  require_ndim(logits, 2, "cross_entropy", "logits");
  require_defined(labels, "cross_entropy", "labels");
  EMBER_CHECK(labels.dtype() == DType::i64, "cross_entropy: labels must be i64, got ", labels.str());
  EMBER_CHECK(labels.device() == logits.device(), "cross_entropy: labels on ", labels.device().str(),
              ", logits on ", logits.device().str());
  const int64_t N = logits.size(0), C = logits.size(1);
  require_shape(labels, Shape{N}, "cross_entropy", "labels");
  EMBER_CHECK(N > 0 && C > 0, "cross_entropy: empty logits ", logits.shape().str());
  EMBER_CHECK(label_smoothing >= 0.0 && label_smoothing < 1.0, "cross_entropy: label_smoothing must be in [0, 1), got ",
              label_smoothing);

  const DType dt = logits.dtype(), lt = param_dtype(dt);  // lt: losses, probs, loss
  Tensor losses = Tensor::empty({N}, lt, logits.device());
  Tensor probs = Tensor::empty({N, C}, lt, logits.device());
  auto [k, s] = launch_on(logits);
  k.softmax_cross_entropy_forward(dt, logits.raw_data(), labels.data<int64_t>(), losses.raw_data(),
                                  probs.raw_data(), N, C, label_smoothing, s);
  Tensor loss = Tensor::empty({1}, lt, logits.device());
  k.sum(lt, losses.raw_data(), loss.raw_data(), N, s);
  k.axpby(lt, 1.0 / double(N), loss.raw_data(), 0.0, loss.raw_data(), 1, s);
  if (!should_record({&logits})) return loss;

  Tensor ls = labels.detach();
  return record_op("cross_entropy", loss, {&logits},
                   [probs, ls, N, C, label_smoothing, dt](const Tensor& gy, GradMask) {
                     Tensor g = Tensor::empty({N, C}, dt, probs.device());
                     auto [k2, s2] = launch_on(probs);
                     k2.softmax_cross_entropy_backward(dt, probs.raw_data(), ls.data<int64_t>(), gy.raw_data(),
                                                       1.0 / double(N), g.raw_data(), N, C, label_smoothing, s2);
                     return std::vector<Tensor>{g};
                   });
}

}  // namespace ember::ops
