// net/sgd.h — SGD with momentum, Nesterov and decoupled-from-BN weight decay.
//
// PyTorch's torch.optim.SGD formula (ops/kernels.h, sgd_update): weight
// decay is added to the gradient of parameters whose `decay` flag is set
// (conv and fc weights; not batch-norm parameters nor biases, as in
// "Bag of Tricks" and the DAWNBench ResNet recipes). The momentum buffer
// starts at zero, so the first step's buffer is the first gradient.
//
// The optimizer keeps its state in flat f32 buffers, one slice per
// parameter: the momentum of every parameter and, in mixed precision
// (net/mixed_precision.h), the f32 master weights of each f16/bf16
// parameter and this step's unscaled f32 gradients. A step over f32, f16
// and bf16 parameters is one multi-tensor launch (ops/multi_tensor.h) that
// updates the masters and momentum in f32 and writes each 16-bit parameter
// rounded from its master; step_scaled() adds the unscale with its
// inf/NaN check before it and the loss scaler's update after it, all on the
// device, so a mixed-precision step never waits for it. f64 parameters
// (the PyTorch-agreement tests) step one by one.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "net/mixed_precision.h"
#include "net/module.h"
#include "ops/multi_tensor.h"

namespace ember::net {

struct SgdOptions {
  double momentum = 0.9;
  double weight_decay = 1e-4;
  bool nesterov = false;
};

class SGD {
 public:
  // masters: f32 master weights of f16/bf16 parameters by name (from
  // net::convert_to_half); a 16-bit parameter without one gets a cast copy.
  // Every parameter is on the same device.
  SGD(std::vector<NamedParameter> params, const SgdOptions& options,
      std::vector<std::pair<std::string, Tensor>> masters = {});

  // Updates every parameter that has a gradient, with learning rate lr.
  // grad_scale multiplies the gradients first (1 / loss scale).
  void step(double lr, double grad_scale = 1.0);
  // The mixed-precision step, on the device: the gradients divided by the
  // scaler's scale into the flat f32 buffer (an inf or NaN raises the
  // scaler's flag), the update unless the flag is up, the scaler's update.
  // Three launches for the whole model, and no wait for the device.
  void step_scaled(double lr, LossScaler& scaler);
  // The same as step(), unless some gradient holds an inf or NaN: then
  // nothing changes and it returns false (reads one flag from the device).
  bool step_if_finite(double lr, double grad_scale = 1.0);
  // True when every gradient is finite (reads one flag from the device).
  bool gradients_finite();
  // The f32 masters of 16-bit parameters, by parameter name (empty in f32
  // training): views of the flat buffer.
  std::vector<std::pair<std::string, Tensor>> masters() const;
  void zero_grad();  // drops the gradients (set to none)
  // Per-parameter learning-rate multipliers (fast.ai's discriminative
  // learning rates, MXNet's lr_mult): a step uses lr * multiplier(name).
  // Every parameter starts at 1.
  void set_lr_multipliers(const std::function<double(const std::string&)>& multiplier);
  int64_t steps() const { return steps_; }
  const SgdOptions& options() const { return options_; }
  // The momentum of the next steps (one-cycle's momentum cycling changes it
  // every step). Nesterov needs it > 0.
  void set_momentum(double momentum);

  // Momentum buffers named "momentum.<param name>", for checkpoints. Buffers
  // of parameters that never had a gradient are absent.
  std::vector<std::pair<std::string, Tensor>> state() const;
  // Restores buffers saved by state(); errors on unknown names or shapes.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, int64_t steps);

  // CUDA-graph training (apps/training/step_graph.h): from now on the
  // multi-tensor step reads lr and momentum from a buffer on the device,
  // which write_hyperparameters() sets before each step (two fills, outside
  // the captured step); the lr given to step() and step_scaled() is ignored.
  void use_device_hyperparameters();
  void write_hyperparameters(double lr, double momentum);
  // Counts a step that ran as a replay of a captured one (the host side of
  // step() or step_scaled(): the step count).
  void count_replayed_step() { ++steps_; }

 private:
  struct Slot {
    NamedParameter param;
    double lr_mult = 1.0;
    bool flat = false;          // in the flat buffers (f32, f16 or bf16); f64 steps one by one
    int64_t offset = 0;         // flat: its slice of momentum_ and grads32_
    int64_t master_offset = -1; // 16-bit: its slice of masters_
    bool had_gradient = false;  // a step has seen its gradient (state() lists its momentum)
    Tensor momentum;            // f64 parameters only
  };
  Tensor master_of(const Slot& s) const;
  Tensor momentum_of(const Slot& s) const;
  // The plan of this step over the flat slots with a gradient; unscaled:
  // each slice's gradient goes through the flat f32 buffer (mixed
  // precision, or a grad_scale != 1), else f32 gradients are read in place.
  void plan_step(bool unscaled);
  void step_one_by_one(double lr, double grad_scale);
  Tensor& grads32();  // allocated on first use

  std::vector<Slot> slots_;
  SgdOptions options_;
  Device device_;
  Tensor masters_, momentum_, grads32_;  // f32 flat buffers
  Tensor hyper_;                         // f32 [2] on the device: lr, momentum (device hyperparameters only)
  int64_t flat_size_ = 0;
  ops::MultiTensorPlan plan_;
  int64_t steps_ = 0;
};

}  // namespace ember::net
