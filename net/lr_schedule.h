// net/lr_schedule.h — learning-rate schedules, evaluated per iteration.
//
//   step:     lr * factor^(number of --lr-step-epochs passed)  (MXNet's MultiFactorScheduler)
//   cosine:   lr * (1 + cos(pi * t)) / 2 over the epochs after warm-up
//   onecycle: PyTorch's OneCycleLR (cosine, two phases): from lr / div_factor up to
//             lr over the first pct_start of training, then down to
//             lr / div_factor / final_div_factor
// Momentum cycling (onecycle with cycle_momentum, fast.ai's moms=(0.95, 0.85, 0.95)
// and PyTorch OneCycleLR's cycle_momentum): momentum anneals (cosine) from
// max_momentum down to base_momentum while the lr rises, and back up while
// it falls. Otherwise momentum_at() is the optimizer's constant momentum.
// Warm-up (step and cosine): linear from lr / warmup_steps to lr over the
// first warmup_epochs (Goyal et al.); onecycle has its own warm-up phase.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ember::net {

enum class LrScheduleKind { step, cosine, onecycle };
LrScheduleKind parse_lr_schedule(const std::string& name);  // errors on unknown names
const char* lr_schedule_name(LrScheduleKind kind);

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::step;
  double base_lr = 0.1;
  int64_t steps_per_epoch = 1;
  int num_epochs = 1;
  std::vector<int> step_epochs;  // step: epochs after which lr *= factor
  double factor = 0.1;
  double warmup_epochs = 0.0;
  double pct_start = 0.25;       // onecycle
  double div_factor = 25.0;      // onecycle
  double final_div_factor = 1e4; // onecycle
  bool cycle_momentum = false;   // onecycle: momentum from max_momentum to base_momentum and back
  double max_momentum = 0.95, base_momentum = 0.85;
  double momentum = 0.9;         // the constant momentum otherwise
};

// The default recipe's arithmetic (train_resnet without --lr / --num-epochs):
// Goyal et al.'s linear scaling rule, lr_per_256 x global_batch / 256 ...
double linear_scaled_lr(double lr_per_256, int64_t global_batch);
// ... and the epochs of a run that takes at least `min_epochs` epochs and at
// least `min_steps` steps of `steps_per_epoch` each, so that a small data set
// (a few steps an epoch) still gives the schedule steps to warm up, peak and
// anneal: max(min_epochs, ceil(min_steps / steps_per_epoch)).
int epochs_for_min_steps(int min_epochs, int64_t min_steps, int64_t steps_per_epoch);

class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleOptions& options);
  // Learning rate for global iteration `it` (0-based, counted from the start of training).
  double lr_at(int64_t it) const;
  // Momentum for global iteration `it`.
  double momentum_at(int64_t it) const;
  const LrScheduleOptions& options() const { return o_; }

 private:
  double onecycle_value(int64_t it, double start, double peak, double end) const;
  LrScheduleOptions o_;
  int64_t total_steps_;
  int64_t warmup_steps_;
};

}  // namespace ember::net
