// apps/training/fit_helpers.h — small pieces the training loop (fit.cpp) and
// the step benchmark and loader test (fit_benchmark.cpp) share.
#pragma once
#include <chrono>

#include "net/mixed_precision.h"
#include "ops/ops.h"

namespace ember::apps::detail {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Running totals between two log lines.
struct Interval {
  int64_t samples = 0, correct = 0, batches = 0;
  double loss_sum = 0;
  Clock::time_point start = Clock::now();
  void reset() { *this = Interval(); }
};

// bf16 training's scaler: a fixed scale of 1 (no loss scaling), which still
// skips and counts steps with inf/NaN gradients and ends a run of them.
inline net::LossScalerOptions unit_loss_scale(net::LossScalerOptions o) {
  o.fixed_scale = 1.0;
  return o;
}

}  // namespace ember::apps::detail
