// net/sgd.h — SGD with momentum, Nesterov and decoupled-from-BN weight decay.
//
// PyTorch's torch.optim.SGD formula (ops/kernels.h, sgd_update): weight
// decay is added to the gradient of parameters whose `decay` flag is set
// (conv and fc weights; not batch-norm parameters nor biases, as in
// "Bag of Tricks" and the DAWNBench ResNet recipes). The momentum buffer
// starts as the first gradient.
//
// Mixed precision (net/mixed_precision.h): for every f16 or bf16 parameter
// the optimizer keeps an f32 master copy and an f32 momentum buffer; a step
// casts the 16-bit gradient to f32, updates the master and writes the
// parameter back in its 16-bit type. step_if_finite() first checks that every gradient is finite (one
// device sync for all of them) and leaves everything untouched otherwise.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "net/module.h"

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
  SGD(std::vector<NamedParameter> params, const SgdOptions& options,
      std::vector<std::pair<std::string, Tensor>> masters = {});

  // Updates every parameter that has a gradient, with learning rate lr.
  // grad_scale multiplies the gradients first (1 / loss scale).
  void step(double lr, double grad_scale = 1.0);
  // The same, unless some gradient holds an inf or NaN: then nothing changes
  // and it returns false.
  bool step_if_finite(double lr, double grad_scale = 1.0);
  // True when every gradient is finite (sums them in f32 on the device, then
  // reads one number).
  bool gradients_finite();
  // The f32 masters of 16-bit parameters, by parameter name (empty in f32 training).
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

 private:
  struct Slot {
    NamedParameter param;
    Tensor momentum;  // undefined until the first step; f32 for 16-bit parameters
    Tensor master;    // f16/bf16 parameters: the f32 weights the step updates
    Tensor grad32;    // f16/bf16 parameters: this step's gradient in f32
    double lr_mult = 1.0;
  };
  // The gradient the update uses: the f32 copy for 16-bit parameters.
  Tensor update_gradient(Slot& s);
  std::vector<Slot> slots_;
  SgdOptions options_;
  int64_t steps_ = 0;
};

}  // namespace ember::net
