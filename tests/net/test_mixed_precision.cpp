// tests/net/test_mixed_precision.cpp — fp16 and bf16 training's host-side
// machinery: the dynamic loss scaler, SGD's f32 master weights (skipped
// steps leave everything untouched; the 16-bit copy always equals the
// rounded master), converting a ResNet to f16/bf16 and back, and checkpoints
// holding the masters (and 16-bit tensors written and read as themselves).
// The tests after the loss scaler's run for f16 and for bf16.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/autograd.h"
#include "engine/bfloat16.h"
#include "engine/half.h"
#include "net/checkpoint.h"
#include "net/mixed_precision.h"
#include "net/resnet.h"
#include "net/safetensors.h"
#include "net/sgd.h"
#include "ops/ops.h"
#include "tests/support/test_helpers.h"

using namespace ember;
using ember::testing::TempDir;

namespace {

// A small CIFAR-style ResNet-8 for 28x28 grey images, 10 classes.
net::ResNetConfig resnet8_config() {
  net::ResNetConfig cfg;
  cfg.num_layers = 8;
  cfg.num_classes = 10;
  cfg.in_channels = 1;
  cfg.image_size = 28;
  return cfg;
}

template <typename H> constexpr DType kHalf = dtype_of<H>::value;

// f rounded to the 16-bit type H (round to nearest even), as a float.
template <typename H>
float round_half(float f) {
  if constexpr (std::is_same_v<H, f16>)
    return half_to_float(float_to_half(f));
  else
    return bf16_to_float(float_to_bf16(f));
}

// A tensor of the 16-bit type H (f16 unless told) with the given values, rounded.
template <typename H = f16>
Tensor half_tensor(const std::vector<float>& values) {
  Tensor t = Tensor::empty({int64_t(values.size())}, kHalf<H>);
  uint16_t* bits = reinterpret_cast<uint16_t*>(t.data<H>());
  if constexpr (std::is_same_v<H, f16>)
    float_to_half_n(values.data(), bits, values.size());
  else
    float_to_bf16_n(values.data(), bits, values.size());
  return t;
}

std::vector<float> as_floats(const Tensor& t) {
  const std::vector<double> d = t.to_double_vector();
  return std::vector<float>(d.begin(), d.end());
}

}  // namespace

TEST_CASE("loss scaler: skips and halves on inf/NaN, doubles after the window, resets the window on a skip") {
  net::LossScalerOptions o;
  o.window = 3;
  net::LossScaler s(o);
  CHECK(s.scale() == 65536.0);
  CHECK(s.dynamic());
  CHECK_FALSE(s.update(false));  // injected inf
  CHECK(s.scale() == 32768.0);
  CHECK(s.skipped_steps() == 1);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK(s.scale() == 32768.0);  // 2 clean steps of 3
  CHECK_FALSE(s.update(false));  // a skip restarts the window
  CHECK(s.scale() == 16384.0);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK(s.scale() == 16384.0);
  CHECK(s.update(true));
  CHECK(s.scale() == 32768.0);  // 3 clean in a row: doubled
  CHECK(s.clean_steps_in_window() == 0);
  CHECK(s.skipped_steps() == 2);
}

TEST_CASE("loss scaler: a fixed scale never changes but still skips; endless skips are a divergence error") {
  net::LossScalerOptions o;
  o.fixed_scale = 128;
  o.window = 1;
  net::LossScaler fixed(o);
  CHECK_FALSE(fixed.dynamic());
  CHECK(fixed.update(true));
  CHECK(fixed.update(true));
  CHECK(fixed.scale() == 128.0);
  CHECK_FALSE(fixed.update(false));
  CHECK(fixed.scale() == 128.0);

  net::LossScalerOptions d;
  d.max_consecutive_skips = 5;
  net::LossScaler diverging(d);
  for (int i = 0; i < 4; ++i) CHECK_FALSE(diverging.update(false));
  CHECK_ERROR_HAS(diverging.update(false), "training diverged: 5 steps in a row had inf/NaN gradients");

  net::LossScalerOptions bad;
  bad.window = 0;
  CHECK_ERROR_HAS(net::LossScaler{bad}, "--scale-window must be positive");
}

TEST_CASE_TEMPLATE("SGD with f16/bf16 parameters: f32 masters and momentum, the 16-bit copy is the rounded master", H,
                   f16, bf16) {
  // w starts at values the 16-bit type cannot hold exactly; the master keeps them.
  const std::vector<float> w0 = {0.1f, -0.2f, 1.0f / 3.0f, 1000.7f};
  Tensor master0 = Tensor::empty({4}, DType::f32);
  for (int i = 0; i < 4; ++i) master0.data<float>()[i] = w0[size_t(i)];
  Tensor w = ops::cast(master0, kHalf<H>);
  w.set_requires_grad(true);
  net::SGD opt({{"w", &w, true}}, {0.9, 0.01, true}, {{"w", master0.clone()}});
  REQUIRE(opt.masters().size() == 1);
  CHECK(opt.masters()[0].second.dtype() == DType::f32);

  // Reference: the same f32 update on an f32 copy with the f32 value of the 16-bit gradient.
  Tensor ref = master0.clone();
  ref.set_requires_grad(true);
  net::SGD ref_opt({{"ref", &ref, true}}, {0.9, 0.01, true});
  const float scale = 1024.0f;
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = {0.5f * scale, -0.25f * scale, float(step) * scale, 3.0f * scale};
    w.set_grad(half_tensor<H>(g));
    ref.set_grad(ops::cast(half_tensor<H>(g), DType::f32));
    CHECK(opt.step_if_finite(0.1, 1.0 / scale));
    ref_opt.step(0.1, 1.0 / scale);
    const auto m = as_floats(opt.masters()[0].second), r = as_floats(ref);
    for (int i = 0; i < 4; ++i) CHECK(m[size_t(i)] == r[size_t(i)]);
    const auto wf = as_floats(w);
    CHECK(w.dtype() == kHalf<H>);
    for (int i = 0; i < 4; ++i) CHECK(wf[size_t(i)] == round_half<H>(m[size_t(i)]));
    if (step == 2) CHECK(m != wf);  // the master holds what the 16-bit copy cannot
    opt.zero_grad();
    ref_opt.zero_grad();
  }
  CHECK(opt.state().at(0).second.dtype() == DType::f32);  // momentum in f32
}

TEST_CASE_TEMPLATE("SGD with f16/bf16 parameters: a gradient with inf or NaN skips the step and changes nothing", H,
                   f16, bf16) {
  Tensor master0 = Tensor::full({3}, 0.3, DType::f32);
  Tensor w = ops::cast(master0, kHalf<H>);
  w.set_requires_grad(true);
  Tensor bn = Tensor::full({2}, 1.0, DType::f32);  // an f32 parameter beside it (batch-norm gamma)
  bn.set_requires_grad(true);
  net::SGD opt({{"w", &w, true}, {"bn", &bn, false, true}}, {0.9, 0.0, false}, {{"w", master0.clone()}});
  w.set_grad(half_tensor<H>({1, 2, 3}));
  bn.set_grad(Tensor::full({2}, 0.5, DType::f32));
  REQUIRE(opt.step_if_finite(0.1));  // a first clean step creates the momentum buffers
  opt.zero_grad();
  const auto master_before = as_floats(opt.masters()[0].second), w_before = as_floats(w), bn_before = as_floats(bn);
  const auto mom_before = as_floats(opt.state()[0].second);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto& bad : std::vector<std::vector<float>>{{1, inf, 3}, {nan, 2, 3}, {-inf, 2, inf}}) {
    w.set_grad(half_tensor<H>(bad));
    bn.set_grad(Tensor::full({2}, 0.5, DType::f32));
    CHECK_FALSE(opt.gradients_finite());
    CHECK_FALSE(opt.step_if_finite(0.1));
    CHECK(as_floats(opt.masters()[0].second) == master_before);
    CHECK(as_floats(w) == w_before);
    CHECK(as_floats(bn) == bn_before);
    CHECK(as_floats(opt.state()[0].second) == mom_before);
    opt.zero_grad();
  }
  // An inf in the f32 parameter's gradient counts too.
  w.set_grad(half_tensor<H>({1, 2, 3}));
  Tensor g = Tensor::full({2}, 0.5, DType::f32);
  g.data<float>()[1] = inf;
  bn.set_grad(g);
  CHECK_FALSE(opt.step_if_finite(0.1));
  // Large but finite 16-bit gradients (a sum beyond f16's range, near f32's for bf16) are finite.
  opt.zero_grad();
  const float big = std::is_same_v<H, f16> ? 65504.0f : 1e38f;
  w.set_grad(half_tensor<H>({big, big, big}));
  CHECK(opt.gradients_finite());
}

TEST_CASE_TEMPLATE("convert_to_half: conv/fc weights become f16/bf16, batch norm stays f32, exact masters; restore_f32 inverts",
                   H, f16, bf16) {
  const net::ResNetConfig cfg = resnet8_config();
  Generator gen(3);
  net::ResNet model(cfg, gen);
  std::vector<std::pair<std::string, std::vector<double>>> before;
  for (auto& p : model.named_parameters()) before.emplace_back(p.name, p.tensor->to_double_vector());

  const net::Masters masters = net::convert_to_half(model, kHalf<H>);
  int64_t halves = 0;
  for (auto& p : model.named_parameters()) {
    const bool is_bn = p.name.find("bn") != std::string::npos || p.name.find("downsample.1") != std::string::npos;
    CHECK_MESSAGE(p.tensor->dtype() == (is_bn ? DType::f32 : kHalf<H>), p.name);
    CHECK(p.tensor->requires_grad());
    halves += p.tensor->dtype() == kHalf<H>;
  }
  CHECK(int64_t(masters.size()) == halves);
  for (const auto& [name, m] : masters) {
    CHECK(m.dtype() == DType::f32);
    for (const auto& [bname, values] : before)
      if (bname == name) CHECK(m.to_double_vector() == values);
  }
  // The buffers (running statistics) stay f32.
  for (auto& b : model.named_buffers())
    if (b.name.find("running") != std::string::npos) CHECK(b.tensor->dtype() == DType::f32);

  net::restore_f32(model, masters);
  size_t i = 0;
  for (auto& p : model.named_parameters()) {
    CHECK(p.tensor->dtype() == DType::f32);
    CHECK(p.tensor->to_double_vector() == before[i++].second);
  }
}

TEST_CASE_TEMPLATE("checkpoints of fp16/bf16 training hold the f32 masters and load into an f32 model", H, f16, bf16) {
  TempDir dir;
  const net::ResNetConfig cfg = resnet8_config();
  Generator gen(5);
  net::ResNet model(cfg, gen);
  const net::Masters masters = net::convert_to_half(model, kHalf<H>);
  const std::string path = dir.file("m-0001.safetensors");
  net::save_model(path, model, {{"epoch", "1"}}, masters);

  Generator gen2(6);
  net::ResNet loaded(cfg, gen2);
  net::load_model(path, loaded);  // f32 model: every dtype must match
  for (auto& p : loaded.named_parameters())
    for (const auto& [name, m] : masters)
      if (name == p.name) CHECK(p.tensor->to_double_vector() == m.to_double_vector());

  // The 16-bit model's own state (no masters): written as F16/BF16, read
  // back as the same dtype and bits, and loaded strictly into a converted model.
  const std::string half_path = dir.file("half.safetensors");
  net::save_model(half_path, model);
  const SafetensorsFile file = load_safetensors(half_path);
  int64_t half_tensors = 0;
  for (auto& [name, t] : model.state()) {
    const Tensor* got = file.find(name);
    REQUIRE(got);
    CHECK(got->dtype() == t->dtype());
    if (t->dtype() != kHalf<H>) continue;
    ++half_tensors;
    CHECK(std::memcmp(got->raw_data(), t->raw_data(), t->nbytes()) == 0);
  }
  CHECK(half_tensors == int64_t(masters.size()));
  Generator gen3(7);
  net::ResNet other(cfg, gen3);
  net::convert_to_half(other, kHalf<H>);
  net::load_model(half_path, other);
  for (auto& p : other.named_parameters())
    for (auto& q : model.named_parameters())
      if (p.name == q.name) CHECK(p.tensor->to_double_vector() == q.tensor->to_double_vector());
}
