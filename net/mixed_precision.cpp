// net/mixed_precision.cpp — f16/bf16 model conversion and the dynamic loss scaler
// (net/mixed_precision.h).
#include "net/mixed_precision.h"

#include <cmath>
#include <map>

#include "engine/autograd.h"
#include "engine/error.h"
#include "ops/multi_tensor.h"
#include "ops/ops.h"

namespace ember::net {

std::vector<std::pair<std::string, Tensor>> convert_to_half(Module& model, DType half_dtype) {
  EMBER_CHECK(is_16bit_float(half_dtype), "convert_to_half: f16 or bf16, not ", dtype_name(half_dtype));
  NoGradGuard no_grad;
  std::vector<std::pair<std::string, Tensor>> masters;
  for (NamedParameter& p : model.named_parameters()) {
    Tensor& t = *p.tensor;
    if (p.keep_f32 || t.dtype() != DType::f32) continue;
    Tensor half = ops::cast(t, half_dtype);
    half.set_requires_grad(true);
    Tensor master = t;  // the f32 tensor itself: exact masters
    t = half;
    master.set_requires_grad(false);
    masters.emplace_back(p.name, master);
  }
  return masters;
}

void restore_f32(Module& model, const std::vector<std::pair<std::string, Tensor>>& masters) {
  NoGradGuard no_grad;
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : masters) by_name[name] = &t;
  for (NamedParameter& p : model.named_parameters()) {
    const auto it = by_name.find(p.name);
    if (it == by_name.end()) continue;
    Tensor& t = *p.tensor;
    EMBER_CHECK(it->second->shape() == t.shape(), "restore_f32: master '", p.name, "' is ", it->second->str(),
                " but the parameter is ", t.str());
    Tensor f32 = it->second->to(t.device()).clone();
    f32.set_requires_grad(true);
    t = f32;
  }
}

LossScaler::LossScaler(const LossScalerOptions& options, Device device) : options_(options) {
  EMBER_CHECK(options.fixed_scale >= 0.0 && std::isfinite(options.fixed_scale), "--loss-scale must be >= 0, got ",
              options.fixed_scale);
  EMBER_CHECK(options.initial_scale > 0.0 && std::isfinite(options.initial_scale),
              "the initial loss scale must be positive, got ", options.initial_scale);
  EMBER_CHECK(options.window > 0, "--scale-window must be positive, got ", options.window);
  state_ = ops::loss_scale_state(dynamic() ? options.initial_scale : options.fixed_scale, device);
}

LossScaler::Snapshot LossScaler::read() const {
  const Tensor host = state_.to(Device::cpu());
  const float* v = host.data<float>();
  return {double(v[kLossScale]), int64_t(v[kCleanSteps]), int64_t(v[kSkippedSteps]), int64_t(v[kConsecutiveSkips])};
}

Tensor LossScaler::seed(const Tensor& loss) const {
  EMBER_CHECK(loss.numel() == 1 && loss.dtype() == DType::f32 && loss.device() == state_.device(),
              "loss scaler: the loss must be one f32 value on ", state_.device().str(), ", got ", loss.str());
  return state_.view_at(kLossScale, loss.shape());
}

void LossScaler::update_on_device() {
  LossScaleParams p;
  p.dynamic = dynamic();
  p.window = double(options_.window);
  p.max_scale = options_.max_scale;
  ops::loss_scale_update(state_, p);
}

void LossScaler::check_divergence(const Snapshot& s) const {
  EMBER_CHECK(s.consecutive < options_.max_consecutive_skips, "training diverged: ", s.consecutive,
              " steps in a row had inf/NaN gradients (loss scale now ", s.scale, "); try a lower --lr");
}

bool LossScaler::update(bool gradients_finite) {
  if (!gradients_finite) {
    Tensor flag = state_.view_at(kFoundNonfinite, {1});
    ops::fill_(flag, 1.0);
  }
  update_on_device();
  check_divergence(read());
  return gradients_finite;
}

void LossScaler::restore(double scale, int64_t clean, int64_t skipped, int64_t consecutive_skips) {
  EMBER_CHECK(scale > 0.0 && std::isfinite(scale), "loss scale to restore must be positive, got ", scale);
  EMBER_CHECK(clean >= 0 && skipped >= 0 && consecutive_skips >= 0, "loss scaler: negative counts to restore");
  std::vector<double> v(kLossScaleStateSize, 0.0);
  v[kLossScale] = dynamic() ? scale : options_.fixed_scale;
  v[kCleanSteps] = double(clean), v[kSkippedSteps] = double(skipped), v[kConsecutiveSkips] = double(consecutive_skips);
  state_.copy_from(Tensor::from_vector(v, {kLossScaleStateSize}, DType::f32));
}

}  // namespace ember::net
