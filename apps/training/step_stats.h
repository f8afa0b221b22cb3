// apps/training/step_stats.h — the training loss and accuracy of the steps
// since the host last looked, summed on the training device, so that a step
// on a GPU does not wait for the device to hand back its loss and
// predictions (cuda/host_sync.h). fit() reads the sums where it needs the
// numbers: every --disp-batches steps (the log line, the bar), at a
// checkpoint, at the end of an epoch; and after every step where that costs
// nothing (the CPU) or where the step waits anyway (fp16/bf16: the loss
// scaler's finite check).
#pragma once
#include <cstdint>

#include "engine/tensor.h"

namespace ember::apps {

class StepStats {
 public:
  explicit StepStats(Device device) : device_(device) {}

  // Queues loss_sum += loss * batch and correct += #(argmax(logits) == labels)
  // on the device. loss: [1]; logits: [batch, classes]; labels: i64 [batch]
  // on the logits' device.
  void add(const Tensor& loss, const Tensor& logits, const Tensor& labels, int64_t batch);
  // The host side of add() alone: a step whose device work was a CUDA
  // graph's replay (its captured add() queued the sums).
  void count(int64_t batch) {
    ++steps_;
    samples_ += batch;
  }

  struct Sums {
    int64_t steps = 0, samples = 0, correct = 0;
    double loss_sum = 0;  // sum over the steps of loss * batch; not finite if a step's loss was not
  };
  // The sums since the last read (one wait for a GPU), then starts again from zero.
  Sums read();

  int64_t pending_steps() const { return steps_; }
  // Sums into `totals` (f64 [2] on the device, zero) from now on: a CUDA
  // graph's captured add() writes one buffer for the whole run, so every
  // epoch's StepStats must read that one.
  void share_totals(const Tensor& totals) { totals_ = totals; }

 private:
  Device device_;
  Tensor totals_;  // f64 [2] on device_: the loss sum, the correct count (read in one copy)
  int64_t steps_ = 0, samples_ = 0;
};

}  // namespace ember::apps
