// net/mixed_precision.cpp — f16/bf16 model conversion and the dynamic loss scaler
// (net/mixed_precision.h).
#include "net/mixed_precision.h"

#include <cmath>
#include <map>

#include "engine/autograd.h"
#include "engine/error.h"
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

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options) {
  EMBER_CHECK(options.fixed_scale >= 0.0 && std::isfinite(options.fixed_scale), "--loss-scale must be >= 0, got ",
              options.fixed_scale);
  EMBER_CHECK(options.initial_scale > 0.0 && std::isfinite(options.initial_scale),
              "the initial loss scale must be positive, got ", options.initial_scale);
  EMBER_CHECK(options.window > 0, "--scale-window must be positive, got ", options.window);
  scale_ = dynamic() ? options.initial_scale : options.fixed_scale;
}

void LossScaler::restore(double scale, int64_t clean, int64_t skipped, int64_t consecutive_skips) {
  EMBER_CHECK(scale > 0.0 && std::isfinite(scale), "loss scale to restore must be positive, got ", scale);
  EMBER_CHECK(clean >= 0 && skipped >= 0 && consecutive_skips >= 0, "loss scaler: negative counts to restore");
  scale_ = dynamic() ? scale : options_.fixed_scale;
  clean_ = clean, skipped_ = skipped, consecutive_skips_ = consecutive_skips;
}

bool LossScaler::update(bool gradients_finite) {
  if (gradients_finite) {
    consecutive_skips_ = 0;
    if (dynamic() && ++clean_ >= options_.window) {
      clean_ = 0;
      scale_ = std::min(scale_ * 2.0, std::max(options_.max_scale, scale_));
    }
    return true;
  }
  ++skipped_;
  clean_ = 0;
  if (dynamic()) scale_ = std::max(scale_ * 0.5, 1.0 / 16777216.0);  // floor 2^-24
  EMBER_CHECK(++consecutive_skips_ < options_.max_consecutive_skips, "training diverged: ", consecutive_skips_,
              " steps in a row had inf/NaN gradients (loss scale now ", scale_, "); try a lower --lr");
  return false;
}

}  // namespace ember::net
