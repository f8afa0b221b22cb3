// net/sgd.cpp — the SGD optimizer.
#include "net/sgd.h"

#include "engine/autograd.h"
#include "ops/ops.h"

namespace ember::net {

SGD::SGD(std::vector<NamedParameter> params, const SgdOptions& options) : options_(options) {
  EMBER_CHECK(options.momentum >= 0.0, "SGD: momentum must be >= 0, got ", options.momentum);
  EMBER_CHECK(options.weight_decay >= 0.0, "SGD: weight decay must be >= 0, got ", options.weight_decay);
  EMBER_CHECK(!options.nesterov || options.momentum > 0.0, "SGD: Nesterov momentum needs momentum > 0");
  for (auto& p : params) slots_.push_back({std::move(p), Tensor()});
}

void SGD::step(double lr, double grad_scale) {
  NoGradGuard no_grad;
  for (Slot& s : slots_) {
    Tensor& w = *s.param.tensor;
    Tensor g = w.grad();
    if (!g.defined()) continue;
    SgdParams p;
    p.lr = lr;
    p.momentum = options_.momentum;
    p.weight_decay = s.param.decay ? options_.weight_decay : 0.0;
    p.nesterov = options_.nesterov;
    p.grad_scale = grad_scale;
    p.first_step = false;
    if (options_.momentum != 0.0 && !s.momentum.defined()) {
      s.momentum = Tensor::empty(w.shape(), w.dtype(), w.device());
      p.first_step = true;
    }
    ops::sgd_update_(w, g, s.momentum, p);
  }
  ++steps_;
}

void SGD::zero_grad() {
  for (Slot& s : slots_) s.param.tensor->set_grad(Tensor());
}

std::vector<std::pair<std::string, Tensor>> SGD::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Slot& s : slots_)
    if (s.momentum.defined()) out.emplace_back("momentum." + s.param.name, s.momentum);
  return out;
}

void SGD::load_state(const std::vector<std::pair<std::string, Tensor>>& state, int64_t steps) {
  for (const auto& [name, t] : state) {
    bool found = false;
    for (Slot& s : slots_) {
      if ("momentum." + s.param.name != name) continue;
      const Tensor& w = *s.param.tensor;
      EMBER_CHECK(t.shape() == w.shape() && t.dtype() == w.dtype(), "optimizer state '", name, "' is ", t.str(),
                  " but the parameter is ", w.str());
      s.momentum = t.to(w.device()).clone();
      found = true;
      break;
    }
    EMBER_CHECK(found, "optimizer state '", name, "' matches no parameter of the model");
  }
  steps_ = steps;
}

}  // namespace ember::net
