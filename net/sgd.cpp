// net/sgd.cpp — the SGD optimizer.
#include "net/sgd.h"

#include <cmath>
#include <map>

#include "engine/autograd.h"
#include "net/json.h"
#include "ops/ops.h"

namespace ember::net {

namespace {

constexpr int64_t kSliceAlign = 16;  // elements: every slice of a flat buffer starts 64-byte aligned

int64_t aligned(int64_t n) { return (n + kSliceAlign - 1) / kSliceAlign * kSliceAlign; }

bool steps_flat(DType dt) { return dt == DType::f32 || is_16bit_float(dt); }

}  // namespace

SGD::SGD(std::vector<NamedParameter> params, const SgdOptions& options,
         std::vector<std::pair<std::string, Tensor>> masters)
    : options_(options) {
  EMBER_CHECK(options.momentum >= 0.0, "SGD: momentum must be >= 0, got ", options.momentum);
  EMBER_CHECK(options.weight_decay >= 0.0, "SGD: weight decay must be >= 0, got ", options.weight_decay);
  EMBER_CHECK(!options.nesterov || options.momentum > 0.0, "SGD: Nesterov momentum needs momentum > 0");
  std::map<std::string, Tensor> by_name;
  for (auto& [name, t] : masters) by_name[name] = t;
  NoGradGuard no_grad;
  device_ = params.empty() ? Device::cpu() : params.front().tensor->device();
  int64_t master_size = 0;
  for (auto& p : params) {
    Slot s;
    s.param = std::move(p);
    const Tensor& w = *s.param.tensor;
    EMBER_CHECK(w.device() == device_, "SGD: parameter '", s.param.name, "' is on ", w.device().str(),
                " and '", slots_.front().param.name, "' on ", device_.str(), "; every parameter must be on one device");
    s.flat = steps_flat(w.dtype());
    if (s.flat) {
      s.offset = flat_size_;
      flat_size_ = aligned(flat_size_ + w.numel());
    }
    if (is_16bit_float(w.dtype())) {
      s.master_offset = master_size;
      master_size = aligned(master_size + w.numel());
    }
    slots_.push_back(std::move(s));
  }
  plan_ = ops::MultiTensorPlan(device_);
  if (master_size > 0) masters_ = Tensor::zeros({master_size}, DType::f32, device_);
  for (Slot& s : slots_) {
    if (s.master_offset < 0) continue;
    const Tensor& w = *s.param.tensor;
    Tensor master = master_of(s);
    const auto it = by_name.find(s.param.name);
    if (it != by_name.end()) {
      EMBER_CHECK(it->second.shape() == w.shape() && it->second.dtype() == DType::f32, "SGD: master of '",
                  s.param.name, "' is ", it->second.str(), " for the ", dtype_name(w.dtype()), " parameter ",
                  w.str());
      master.copy_from(it->second);
      by_name.erase(it);
    } else {
      master.copy_from(ops::cast(w, DType::f32));
    }
  }
  EMBER_CHECK(by_name.empty(), "SGD: master weights for ", json::shown(by_name.empty() ? "" : by_name.begin()->first),
              ", which is not an f16 or bf16 parameter of the model");
}

// Slices of the flat buffers mirror their parameter's memory format (the
// multi-tensor step pairs them element for element with the parameter's bytes).
Tensor SGD::master_of(const Slot& s) const {
  if (s.master_offset < 0) return Tensor();
  const Tensor& w = *s.param.tensor;
  return masters_.view_at(s.master_offset, w.shape()).reinterpret_format(w.memory_format());
}

Tensor SGD::momentum_of(const Slot& s) const {
  if (!s.flat) return s.momentum;
  const Tensor& w = *s.param.tensor;
  return momentum_.defined() ? momentum_.view_at(s.offset, w.shape()).reinterpret_format(w.memory_format())
                             : Tensor();
}

Tensor& SGD::grads32() {
  if (!grads32_.defined() && flat_size_ > 0) grads32_ = Tensor::zeros({flat_size_}, DType::f32, device_);
  return grads32_;
}

void SGD::plan_step(bool unscaled) {
  std::vector<MultiTensorSlice> slices;
  const bool use_momentum = options_.momentum != 0.0;
  if (use_momentum && !momentum_.defined() && flat_size_ > 0)
    momentum_ = Tensor::zeros({flat_size_}, DType::f32, device_);  // a zero buffer: the first step's is the gradient
  for (const Slot& s : slots_) {
    const Tensor& w = *s.param.tensor;
    const Tensor g = w.grad();
    if (!s.flat || !g.defined() || w.numel() == 0) continue;
    EMBER_CHECK(g.dtype() == w.dtype() && g.device() == device_ && g.shape() == w.shape(), "SGD: the gradient of '",
                s.param.name, "' is ", g.str(), " for the parameter ", w.str());
    EMBER_CHECK(s.master_offset >= 0 || w.dtype() == DType::f32, "SGD: parameter '", s.param.name, "' became ",
                dtype_name(w.dtype()), " after the optimizer was made");
    MultiTensorSlice x{};
    x.grad = g.raw_data();
    x.grad_dtype = int32_t(g.dtype());
    x.grad32 = unscaled ? grads32().data<float>() + s.offset : g.data<float>();
    x.weight = s.master_offset >= 0 ? masters_.data<float>() + s.master_offset : w.data<float>();
    x.momentum = use_momentum ? momentum_.data<float>() + s.offset : nullptr;
    x.half = s.master_offset >= 0 ? w.raw_data() : nullptr;
    x.half_dtype = int32_t(w.dtype());
    x.n = w.numel();
    x.lr_mult = float(s.lr_mult);
    x.weight_decay = s.param.decay ? float(options_.weight_decay) : 0.0f;
    slices.push_back(x);
  }
  plan_.set(slices);
}

bool SGD::gradients_finite() {
  NoGradGuard no_grad;
  plan_step(true);
  Tensor state = ops::loss_scale_state(1.0, device_);
  ops::unscale_gradients(plan_, state);
  for (const Slot& s : slots_) {  // f64 parameters: a sum is non-finite when any element is
    const Tensor g = s.param.tensor->grad();
    if (!s.flat && g.defined() && !std::isfinite(ops::sum(g).item())) return false;
  }
  return state.to(Device::cpu()).data<float>()[kFoundNonfinite] == 0.0f;
}

bool SGD::step_if_finite(double lr, double grad_scale) {
  if (!gradients_finite()) return false;
  step(lr, grad_scale);
  return true;
}

void SGD::step(double lr, double grad_scale) {
  NoGradGuard no_grad;
  bool any_16bit = false;
  for (const Slot& s : slots_) {
    const Tensor g = s.param.tensor->grad();
    any_16bit = any_16bit || (s.flat && g.defined() && is_16bit_float(g.dtype()));
  }
  const bool unscaled = any_16bit || grad_scale != 1.0;
  plan_step(unscaled);
  if (unscaled) {
    Tensor state = ops::loss_scale_state(1.0 / grad_scale, device_);
    ops::unscale_gradients(plan_, state);
  }
  ops::multi_tensor_sgd(plan_, lr, options_.momentum, options_.nesterov, nullptr, hyper_.defined() ? &hyper_ : nullptr);
  step_one_by_one(lr, grad_scale);
  for (Slot& s : slots_) s.had_gradient = s.had_gradient || s.param.tensor->grad().defined();
  ++steps_;
}

void SGD::step_scaled(double lr, LossScaler& scaler) {
  NoGradGuard no_grad;
  EMBER_CHECK(scaler.state().device() == device_, "SGD: the loss scaler is on ", scaler.state().device().str(),
              " and the parameters on ", device_.str());
  for (const Slot& s : slots_)
    EMBER_CHECK(s.flat || !s.param.tensor->grad().defined(), "SGD: step_scaled takes f32, f16 and bf16 parameters; '",
                s.param.name, "' is ", dtype_name(s.param.tensor->dtype()));
  plan_step(true);
  ops::unscale_gradients(plan_, scaler.state());
  ops::multi_tensor_sgd(plan_, lr, options_.momentum, options_.nesterov, &scaler.state(),
                        hyper_.defined() ? &hyper_ : nullptr);
  scaler.update_on_device();
  for (Slot& s : slots_) s.had_gradient = s.had_gradient || s.param.tensor->grad().defined();
  ++steps_;
}

// f64 parameters: one sgd_update each, the buffer made from the first gradient.
void SGD::step_one_by_one(double lr, double grad_scale) {
  for (Slot& s : slots_) {
    Tensor& w = *s.param.tensor;
    const Tensor g = w.grad();
    if (s.flat || !g.defined()) continue;
    SgdParams p;
    p.lr = lr * s.lr_mult;
    p.momentum = options_.momentum;
    p.weight_decay = s.param.decay ? options_.weight_decay : 0.0;
    p.nesterov = options_.nesterov;
    p.grad_scale = grad_scale;
    p.first_step = false;
    if (options_.momentum != 0.0 && !s.momentum.defined()) {
      s.momentum = Tensor::empty_like(w);
      p.first_step = true;
    }
    ops::sgd_update_(w, g, s.momentum, p);
  }
}

std::vector<std::pair<std::string, Tensor>> SGD::masters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Slot& s : slots_)
    if (s.master_offset >= 0) out.emplace_back(s.param.name, master_of(s));
  return out;
}

void SGD::use_device_hyperparameters() {
  for (const Slot& s : slots_)
    EMBER_CHECK(s.flat, "SGD: device hyperparameters need f32, f16 or bf16 parameters; '", s.param.name, "' is ",
                dtype_name(s.param.tensor->dtype()));
  if (!hyper_.defined()) hyper_ = Tensor::zeros({2}, DType::f32, device_);
}

void SGD::write_hyperparameters(double lr, double momentum) {
  EMBER_CHECK(hyper_.defined(), "SGD: write_hyperparameters before use_device_hyperparameters");
  Tensor lr_slot = hyper_.view_at(0, {1}), momentum_slot = hyper_.view_at(1, {1});
  ops::fill_(lr_slot, lr);
  ops::fill_(momentum_slot, momentum);
}

void SGD::set_momentum(double momentum) {
  EMBER_CHECK(momentum >= 0.0 && momentum < 1.0, "SGD: momentum must be in [0, 1), got ", momentum);
  EMBER_CHECK(!options_.nesterov || momentum > 0.0, "SGD: Nesterov momentum needs momentum > 0");
  EMBER_CHECK((momentum != 0.0) == (options_.momentum != 0.0) || steps_ == 0,
              "SGD: momentum cannot be switched on or off after the first step");
  options_.momentum = momentum;
}

void SGD::set_lr_multipliers(const std::function<double(const std::string&)>& multiplier) {
  for (Slot& s : slots_) {
    s.lr_mult = multiplier(s.param.name);
    EMBER_CHECK(s.lr_mult >= 0 && std::isfinite(s.lr_mult), "SGD: learning-rate multiplier of '", s.param.name,
                "' is ", s.lr_mult);
  }
}

void SGD::zero_grad() {
  for (Slot& s : slots_) s.param.tensor->set_grad(Tensor());
}

std::vector<std::pair<std::string, Tensor>> SGD::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  if (options_.momentum == 0.0 && !momentum_.defined()) {
    for (const Slot& s : slots_)
      if (!s.flat && s.momentum.defined()) out.emplace_back("momentum." + s.param.name, s.momentum);
    return out;
  }
  for (const Slot& s : slots_) {
    const Tensor m = momentum_of(s);
    if (m.defined() && (s.had_gradient || !s.flat)) out.emplace_back("momentum." + s.param.name, m);
  }
  return out;
}

void SGD::load_state(const std::vector<std::pair<std::string, Tensor>>& state, int64_t steps) {
  NoGradGuard no_grad;
  for (const auto& [name, t] : state) {
    bool found = false;
    for (Slot& s : slots_) {
      if ("momentum." + s.param.name != name) continue;
      const Tensor& w = *s.param.tensor;
      const DType dt = s.flat ? DType::f32 : w.dtype();  // momentum is f32 for every flat parameter
      EMBER_CHECK(t.shape() == w.shape() && t.dtype() == dt, "optimizer state ", json::shown(name), " is ", t.str(),
                  " but the parameter's momentum is ", dtype_name(dt), " ", w.shape().str());
      if (s.flat) {
        if (!momentum_.defined()) momentum_ = Tensor::zeros({flat_size_}, DType::f32, device_);
        momentum_of(s).copy_from(t);
        s.had_gradient = true;
      } else {
        s.momentum = Tensor::empty_like(w);
        s.momentum.copy_from(t);
      }
      found = true;
      break;
    }
    EMBER_CHECK(found, "optimizer state ", json::shown(name), " matches no parameter of the model");
  }
  steps_ = steps;
}

}  // namespace ember::net
