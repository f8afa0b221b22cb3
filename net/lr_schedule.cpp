// net/lr_schedule.cpp — the learning-rate schedules.
#include "net/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"

namespace ember::net {

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "step") return LrScheduleKind::step;
  if (name == "cosine") return LrScheduleKind::cosine;
  if (name == "onecycle") return LrScheduleKind::onecycle;
  fail(cat("unknown --lr-schedule '", name, "' (step, cosine or onecycle)"));
}

const char* lr_schedule_name(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::step: return "step";
    case LrScheduleKind::cosine: return "cosine";
    case LrScheduleKind::onecycle: return "onecycle";
  }
  return "?";
}

double linear_scaled_lr(double lr_per_256, int64_t global_batch) {
  EMBER_CHECK(lr_per_256 > 0 && global_batch > 0, "linear lr scaling: need a positive lr and batch, got ", lr_per_256,
              " and ", global_batch);
  return lr_per_256 * double(global_batch) / 256.0;
}

int epochs_for_min_steps(int min_epochs, int64_t min_steps, int64_t steps_per_epoch) {
  EMBER_CHECK(min_epochs > 0 && min_steps >= 0 && steps_per_epoch > 0, "epochs for ", min_steps, " steps: need ",
              "positive epochs and steps per epoch, got ", min_epochs, " and ", steps_per_epoch);
  const int64_t for_steps = (min_steps + steps_per_epoch - 1) / steps_per_epoch;
  return int(std::max<int64_t>(min_epochs, for_steps));
}

LrSchedule::LrSchedule(const LrScheduleOptions& o) : o_(o) {
  EMBER_CHECK(o.base_lr > 0, "learning rate must be positive, got ", o.base_lr);
  EMBER_CHECK(o.steps_per_epoch > 0 && o.num_epochs > 0, "lr schedule: need at least one epoch of one step");
  EMBER_CHECK(o.warmup_epochs >= 0 && o.warmup_epochs <= o.num_epochs, "--warmup-epochs ", o.warmup_epochs,
              " must be in [0, --num-epochs]");
  EMBER_CHECK(o.kind != LrScheduleKind::onecycle || (o.pct_start > 0 && o.pct_start < 1),
              "onecycle: pct_start must be in (0, 1)");
  EMBER_CHECK(!o.cycle_momentum || o.kind == LrScheduleKind::onecycle,
              "momentum cycling (--moms) needs --lr-schedule onecycle");
  EMBER_CHECK(!o.cycle_momentum || (o.base_momentum > 0 && o.base_momentum <= o.max_momentum && o.max_momentum < 1),
              "--moms MAX,MIN: need 0 < MIN <= MAX < 1, got ", o.max_momentum, ",", o.base_momentum);
  for (int e : o.step_epochs) EMBER_CHECK(e > 0, "--lr-step-epochs must be positive epochs, got ", e);
  total_steps_ = o.steps_per_epoch * o.num_epochs;
  warmup_steps_ = int64_t(std::llround(o.warmup_epochs * double(o.steps_per_epoch)));
}

namespace {
constexpr double pi = 3.14159265358979323846;
// Cosine from start (pct 0) to end (pct 1), as PyTorch's _annealing_cos.
double anneal(double start, double end, double pct) { return end + (start - end) / 2.0 * (std::cos(pi * pct) + 1.0); }
}  // namespace

// PyTorch OneCycleLR with anneal_strategy='cos', three_phase=False: phase 1
// up to step pct_start * total - 1, phase 2 down to the last step.
double LrSchedule::onecycle_value(int64_t it, double start, double peak, double end) const {
  const double up_end = o_.pct_start * double(total_steps_) - 1.0, down_end = double(total_steps_) - 1.0;
  const double t = double(it);
  if (t <= up_end) return anneal(start, peak, up_end > 0 ? t / up_end : 1.0);
  return anneal(peak, end, (t - up_end) / std::max(1.0, down_end - up_end));
}

double LrSchedule::momentum_at(int64_t it) const {
  if (!o_.cycle_momentum) return o_.momentum;
  it = std::clamp<int64_t>(it, 0, total_steps_ - 1);
  return onecycle_value(it, o_.max_momentum, o_.base_momentum, o_.max_momentum);
}

double LrSchedule::lr_at(int64_t it) const {
  it = std::clamp<int64_t>(it, 0, total_steps_ - 1);
  if (o_.kind == LrScheduleKind::onecycle) {
    const double initial = o_.base_lr / o_.div_factor;
    return onecycle_value(it, initial, o_.base_lr, initial / o_.final_div_factor);
  }
  if (it < warmup_steps_) return o_.base_lr * double(it + 1) / double(warmup_steps_);
  if (o_.kind == LrScheduleKind::cosine) {
    const double span = double(std::max<int64_t>(1, total_steps_ - warmup_steps_));
    return o_.base_lr * 0.5 * (1.0 + std::cos(pi * double(it - warmup_steps_) / span));
  }
  int passed = 0;
  for (int e : o_.step_epochs)
    if (it >= int64_t(e) * o_.steps_per_epoch) ++passed;
  return o_.base_lr * std::pow(o_.factor, passed);
}

}  // namespace ember::net
