// net/sgd.cpp — the SGD optimizer.
#include "net/sgd.h"

#include <cmath>
#include <map>

#include "engine/autograd.h"
#include "net/json.h"
#include "ops/ops.h"

namespace ember::net {

SGD::SGD(std::vector<NamedParameter> params, const SgdOptions& options,
         std::vector<std::pair<std::string, Tensor>> masters)
    : options_(options) {
  EMBER_CHECK(options.momentum >= 0.0, "SGD: momentum must be >= 0, got ", options.momentum);
  EMBER_CHECK(options.weight_decay >= 0.0, "SGD: weight decay must be >= 0, got ", options.weight_decay);
  EMBER_CHECK(!options.nesterov || options.momentum > 0.0, "SGD: Nesterov momentum needs momentum > 0");
  std::map<std::string, Tensor> by_name;
  for (auto& [name, t] : masters) by_name[name] = t;
  NoGradGuard no_grad;
  for (auto& p : params) {
    Slot s{std::move(p), Tensor(), Tensor(), Tensor(), 1.0};
    const Tensor& w = *s.param.tensor;
    if (is_16bit_float(w.dtype())) {
      const auto it = by_name.find(s.param.name);
      if (it != by_name.end()) {
        EMBER_CHECK(it->second.shape() == w.shape() && it->second.dtype() == DType::f32, "SGD: master of '",
                    s.param.name, "' is ", it->second.str(), " for the ", dtype_name(w.dtype()), " parameter ",
                    w.str());
        s.master = it->second.to(w.device());
        by_name.erase(it);
      } else {
        s.master = ops::cast(w, DType::f32);
      }
      s.master.set_requires_grad(false);
    }
    slots_.push_back(std::move(s));
  }
  EMBER_CHECK(by_name.empty(), "SGD: master weights for ", json::shown(by_name.empty() ? "" : by_name.begin()->first),
              ", which is not an f16 or bf16 parameter of the model");
}

Tensor SGD::update_gradient(Slot& s) {
  Tensor g = s.param.tensor->grad();
  if (!g.defined() || !s.master.defined()) return g;
  if (!s.grad32.defined()) s.grad32 = ops::cast(g, DType::f32);
  return s.grad32;
}

bool SGD::gradients_finite() {
  NoGradGuard no_grad;
  Tensor total;
  for (Slot& s : slots_) {
    const Tensor g = update_gradient(s);
    if (!g.defined()) continue;
    // Sums of finite f16 values fit f32 easily; an inf or NaN anywhere makes the total non-finite.
    // (bf16 reaches f32's range: a sum of finite bf16 gradients beyond 3.4e38 also counts as overflow.)
    const Tensor part = ops::sum(g.dtype() == DType::f32 ? g : ops::cast(g, DType::f32));
    total = total.defined() ? ops::add(total, part) : part;
  }
  return !total.defined() || std::isfinite(total.item());
}

bool SGD::step_if_finite(double lr, double grad_scale) {
  if (!gradients_finite()) return false;
  step(lr, grad_scale);
  return true;
}

std::vector<std::pair<std::string, Tensor>> SGD::masters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Slot& s : slots_)
    if (s.master.defined()) out.emplace_back(s.param.name, s.master);
  return out;
}

void SGD::set_momentum(double momentum) {
  EMBER_CHECK(momentum >= 0.0 && momentum < 1.0, "SGD: momentum must be in [0, 1), got ", momentum);
  EMBER_CHECK(!options_.nesterov || momentum > 0.0, "SGD: Nesterov momentum needs momentum > 0");
  EMBER_CHECK((momentum != 0.0) == (options_.momentum != 0.0) || steps_ == 0,
              "SGD: momentum cannot be switched on or off after the first step");
  options_.momentum = momentum;
}

void SGD::step(double lr, double grad_scale) {
  NoGradGuard no_grad;
  for (Slot& s : slots_) {
    Tensor& param = *s.param.tensor;
    Tensor g = update_gradient(s);
    if (!g.defined()) continue;
    Tensor& w = s.master.defined() ? s.master : param;
    SgdParams p;
    p.lr = lr * s.lr_mult;
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
    if (s.master.defined()) param.copy_from(ops::cast(s.master, param.dtype()));  // the 16-bit copy the model uses
  }
  ++steps_;
}

void SGD::set_lr_multipliers(const std::function<double(const std::string&)>& multiplier) {
  for (Slot& s : slots_) {
    s.lr_mult = multiplier(s.param.name);
    EMBER_CHECK(s.lr_mult >= 0 && std::isfinite(s.lr_mult), "SGD: learning-rate multiplier of '", s.param.name,
                "' is ", s.lr_mult);
  }
}

void SGD::zero_grad() {
  for (Slot& s : slots_) {
    s.param.tensor->set_grad(Tensor());
    s.grad32 = Tensor();
  }
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
      const Tensor& w = s.master.defined() ? s.master : *s.param.tensor;  // momentum has the master's dtype
      EMBER_CHECK(t.shape() == w.shape() && t.dtype() == w.dtype(), "optimizer state ", json::shown(name), " is ", t.str(),
                  " but the parameter is ", w.str());
      s.momentum = t.to(w.device()).clone();
      found = true;
      break;
    }
    EMBER_CHECK(found, "optimizer state ", json::shown(name), " matches no parameter of the model");
  }
  steps_ = steps;
}

}  // namespace ember::net
