// apps/training/step_stats.cpp — see step_stats.h.
#include "apps/training/step_stats.h"

#include "ops/ops.h"

namespace ember::apps {

void StepStats::add(const Tensor& loss, const Tensor& logits, const Tensor& labels, int64_t batch) {
  if (!totals_.defined()) totals_ = Tensor::zeros({2}, DType::f64, device_);
  Tensor loss_sum = totals_.view_at(0, {1}), correct = totals_.view_at(1, {1});
  const Tensor l = loss.detach();
  ops::add_(loss_sum, l.dtype() == DType::f64 ? l : ops::cast(l, DType::f64), double(batch));
  ops::count_equal_(correct, ops::argmax(logits.detach()), labels);
  count(batch);
}

StepStats::Sums StepStats::read() {
  Sums s;
  s.steps = steps_;
  s.samples = samples_;
  if (steps_ > 0) {
    const std::vector<double> t = totals_.to_double_vector();  // the one wait
    s.loss_sum = t[0];
    s.correct = int64_t(t[1]);
    totals_.zero_();
  }
  steps_ = samples_ = 0;
  return s;
}

}  // namespace ember::apps
