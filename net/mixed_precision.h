// net/mixed_precision.h — fp16 and bf16 training with f32 master weights:
// converting a model to a 16-bit type, and the dynamic loss scaler.
//
// The recipe (NVIDIA's "mixed precision training", PyTorch's GradScaler):
//   * weights and activations are stored in f16 or bf16 (conv, linear);
//     batch-norm parameters, statistics, the loss and softmax stay f32;
//     kernels accumulate in f32 (ops/kernels.h);
//   * the optimizer (net/sgd.h) keeps an f32 master copy of every 16-bit
//     parameter and its momentum in f32, updates the master and writes the
//     16-bit copy after each step; checkpoints hold the masters;
//   * fp16 only: the loss is multiplied by a scale S before backward so small
//     gradients survive f16; the optimizer divides by S. A step whose
//     gradients hold an inf or NaN is skipped and S halves; after `window`
//     clean steps in a row S doubles.
//   * bf16 has f32's exponent range, so it needs no loss scale (PyTorch's
//     autocast to bfloat16 uses none): fit() runs it with a fixed scale of
//     1, which still skips and counts a step with inf/NaN gradients.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "net/module.h"
#include "ops/kernels.h"

namespace ember::net {

using Masters = std::vector<std::pair<std::string, Tensor>>;

// Converts every f32 parameter of the model that is not keep_f32 to `half`
// (f16 or bf16), in place (gradients dropped). Returns the f32 tensors they
// had, by parameter name: the exact master weights for the optimizer.
// Parameters that are not f32 are left alone (the masters of 16-bit ones are
// then cast by the optimizer).
std::vector<std::pair<std::string, Tensor>> convert_to_half(Module& model, DType half = DType::f16);

// Copies f32 master weights back into the model's parameters, converting the
// parameters to f32 (the inverse of convert_to_half).
void restore_f32(Module& model, const std::vector<std::pair<std::string, Tensor>>& masters);

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16
  int64_t window = 2000;           // clean steps before the scale doubles (--scale-window)
  double fixed_scale = 0.0;        // > 0: a constant scale (--loss-scale); non-finite steps are still skipped
  double max_scale = 16777216.0;   // 2^24: growth stops here
  int64_t max_consecutive_skips = 100;  // then training has diverged: error
};

// The scaler's state lives on the training device (ops/kernels.h's
// LossScaleState): the training step reads the scale there as the seed of
// backward, the unscale kernel raises the non-finite flag there, and
// update_on_device() applies the policy there, so an fp16 step never waits
// for the device. The host reads the state only when it asks (read(),
// scale(), ...: a wait on a GPU), e.g. at the log points, where fit() also
// checks for divergence.
class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {}, Device device = Device::cpu());

  struct Snapshot {
    double scale = 1;
    int64_t clean = 0, skipped = 0, consecutive = 0;
  };
  Snapshot read() const;  // one copy of the state to the host
  double scale() const { return read().scale; }
  bool dynamic() const { return options_.fixed_scale <= 0.0; }
  int64_t skipped_steps() const { return read().skipped; }
  int64_t clean_steps_in_window() const { return read().clean; }
  int64_t consecutive_skips() const { return read().consecutive; }

  // f32 [kLossScaleStateSize] on the device: what the step's kernels take.
  Tensor& state() { return state_; }
  // The gradient backward starts from: the scale, shaped as `loss` (a view
  // of the state, so backward(seed) scales every gradient without a launch).
  Tensor seed(const Tensor& loss) const;
  // The policy applied to the flag the step's unscale left (one launch).
  void update_on_device();
  // Throws ember::Error when `s` shows max_consecutive_skips skipped steps in a row.
  void check_divergence(const Snapshot& s) const;

  // Reports one step's gradients from the host: finite -> the step counts
  // as taken (returns true), and after `window` such steps in a row the
  // scale doubles; not finite -> it counts as skipped (returns false) and a
  // dynamic scale halves. Throws ember::Error after max_consecutive_skips
  // skipped steps in a row. (The same kernel as update_on_device, then a read.)
  bool update(bool gradients_finite);
  // Puts back a state saved from read() (resuming a run).
  void restore(double scale, int64_t clean, int64_t skipped, int64_t consecutive_skips);
  const LossScalerOptions& options() const { return options_; }

 private:
  LossScalerOptions options_;
  Tensor state_;
};

}  // namespace ember::net
