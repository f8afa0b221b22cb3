// net/sgd.h — SGD with momentum, Nesterov and decoupled-from-BN weight decay.
//
// PyTorch's torch.optim.SGD formula (ops/kernels.h, sgd_update): weight
// decay is added to the gradient of parameters whose `decay` flag is set
// (conv and fc weights; not batch-norm parameters nor biases, as in
// "Bag of Tricks" and the DAWNBench ResNet recipes). The momentum buffer
// starts as the first gradient.
#pragma once
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
  SGD(std::vector<NamedParameter> params, const SgdOptions& options);

  // Updates every parameter that has a gradient, with learning rate lr.
  // grad_scale multiplies the gradients first (1 / loss scale).
  void step(double lr, double grad_scale = 1.0);
  void zero_grad();  // drops the gradients (set to none)
  int64_t steps() const { return steps_; }
  const SgdOptions& options() const { return options_; }

  // Momentum buffers named "momentum.<param name>", for checkpoints. Buffers
  // of parameters that never had a gradient are absent.
  std::vector<std::pair<std::string, Tensor>> state() const;
  // Restores buffers saved by state(); errors on unknown names or shapes.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, int64_t steps);

 private:
  struct Slot {
    NamedParameter param;
    Tensor momentum;  // undefined until the first step
  };
  std::vector<Slot> slots_;
  SgdOptions options_;
  int64_t steps_ = 0;
};

}  // namespace ember::net
