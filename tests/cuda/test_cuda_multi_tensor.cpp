// tests/cuda/test_cuda_multi_tensor.cpp — the multi-tensor optimizer step on
// the device against the CPU (ops/multi_tensor.h, ops/kernels.h): unscaling
// f16, bf16 and f32 gradients with the inf/NaN flag, the SGD over chunks of
// many parameters (momentum, Nesterov, weight decay, lr multipliers, the
// rounded 16-bit copy, aligned and unaligned arrays, chunk boundaries), a
// flagged step that changes nothing, the loss scaler's policy on the device,
// and SGD::step_scaled training a ResNet in fp16 and bf16 as on the CPU.
#include <cmath>
#include <limits>

#include "engine/device_work.h"
#include "net/mixed_precision.h"
#include "net/resnet.h"
#include "net/sgd.h"
#include "ops/multi_tensor.h"
#include "ops/ops.h"
#include "tests/cuda/cuda_test_env.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;

std::vector<double> values(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  PhiloxStream rng(seed, 7);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * double(rng.uniform());
  return v;
}

// One parameter of a test plan.
struct ParamSpec {
  int64_t n;
  DType grad_dtype;  // f32, f16 or bf16
  bool master;       // a 16-bit parameter (of grad_dtype) with an f32 master; else an f32 parameter
  float lr_mult, weight_decay;
  int64_t misalign;  // elements: its arrays start this far into their allocation
};

// Every buffer of a plan on one device.
struct PlanBuffers {
  std::vector<Tensor> grads, grad32, weights, momentum, halves;
  ops::MultiTensorPlan plan;
  Tensor state;
};

Tensor at(const Tensor& base, int64_t offset, int64_t n) { return base.view_at(offset, {n}); }

PlanBuffers make_plan(const std::vector<ParamSpec>& specs, Device device, bool with_momentum, uint64_t seed,
                      double scale, double inf_at = -1) {
  PlanBuffers b;
  b.plan = ops::MultiTensorPlan(device);
  std::vector<MultiTensorSlice> slices;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& p = specs[i];
    const int64_t m = p.misalign;
    auto make = [&](uint64_t s, DType dt, double lo, double hi) {
      Tensor host = Tensor::from_vector(values(p.n + m, seed * 100 + i * 10 + s, lo, hi), {p.n + m}, dt);
      return at(host.to(device), m, p.n);
    };
    Tensor g = make(1, p.grad_dtype, -scale, scale);
    if (inf_at >= 0 && i == specs.size() - 1) {  // an inf in the last parameter's gradient
      Tensor h = g.to(Device::cpu()).clone();
      h.copy_from(ops::cast(Tensor::full({p.n}, std::numeric_limits<double>::infinity(), DType::f32), p.grad_dtype));
      g.copy_from(h);
    }
    b.grads.push_back(g);
    b.grad32.push_back(make(2, DType::f32, 0, 0));
    b.weights.push_back(make(3, DType::f32, -1, 1));
    b.momentum.push_back(make(4, DType::f32, -0.1, 0.1));
    b.halves.push_back(p.master ? make(5, p.grad_dtype, 0, 0) : Tensor());
    MultiTensorSlice x{};
    x.grad = g.raw_data();
    x.grad_dtype = int32_t(p.grad_dtype);
    x.grad32 = b.grad32.back().data<float>();
    x.weight = b.weights.back().data<float>();
    x.momentum = with_momentum ? b.momentum.back().data<float>() : nullptr;
    x.half = p.master ? b.halves.back().raw_data() : nullptr;
    x.half_dtype = int32_t(p.grad_dtype);
    x.n = p.n;
    x.lr_mult = p.lr_mult;
    x.weight_decay = p.weight_decay;
    slices.push_back(x);
  }
  b.plan.set(slices);
  b.state = ops::loss_scale_state(scale, device);
  return b;
}

std::vector<double> host(const Tensor& t) { return t.defined() ? t.to_double_vector() : std::vector<double>(); }

const std::vector<ParamSpec> kSpecs = {
    {1, DType::f32, false, 1.0f, 0.0f, 0},
    {37, DType::f16, true, 1.0f, 5e-4f, 0},
    {2 * kMultiTensorChunk + 5, DType::bf16, true, 0.5f, 1e-4f, 0},  // three chunks, the last a partial one
    {kMultiTensorChunk, DType::f32, false, 2.0f, 0.0f, 1},         // unaligned: the one-by-one path
    {1003, DType::f16, true, 1.0f, 1e-4f, 3},                       // unaligned 16-bit
    {4, DType::bf16, true, 1.0f, 0.0f, 0},
};

}  // namespace

TEST_CASE("cuda multi-tensor step: unscale and SGD over many parameters match the CPU" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  for (int with_momentum = 0; with_momentum < 2; ++with_momentum)
    for (int nesterov = 0; nesterov < 2; ++nesterov) {
      if (nesterov && !with_momentum) continue;
      CAPTURE(with_momentum);
      CAPTURE(nesterov);
      const double scale = 1024.0;
      PlanBuffers c = make_plan(kSpecs, Device::cpu(), with_momentum, 3, scale);
      PlanBuffers g = make_plan(kSpecs, Device::cuda(0), with_momentum, 3, scale);
      CHECK(g.plan.num_chunks() == 1 + 1 + 3 + 1 + 1 + 1);
      for (int step = 0; step < 2; ++step) {
        for (PlanBuffers* b : {&c, &g}) {
          ops::unscale_gradients(b->plan, b->state);
          ops::multi_tensor_sgd(b->plan, 0.1, with_momentum ? 0.9 : 0.0, nesterov, &b->state);
        }
        for (size_t i = 0; i < kSpecs.size(); ++i) {
          CAPTURE(i);
          // One multiplication: the same bits.
          CHECK(host(g.grad32[i]) == host(c.grad32[i]));
          const auto wg = host(g.weights[i]), wc = host(c.weights[i]);
          const auto mg = host(g.momentum[i]), mc = host(c.momentum[i]);
          for (size_t k = 0; k < wg.size(); ++k) {
            // a few multiply-adds that either compiler may fuse
            CHECK(std::abs(wg[k] - wc[k]) <= 4e-7 * (1 + std::abs(wc[k])));
            CHECK(std::abs(mg[k] - mc[k]) <= 4e-7 * (1 + std::abs(mc[k])));
          }
          if (kSpecs[i].master) {  // the 16-bit copy is the master rounded once, on each backend
            CHECK(host(g.halves[i]) == host(ops::cast(g.weights[i].to(Device::cpu()), kSpecs[i].grad_dtype)));
            CHECK(host(c.halves[i]) == host(ops::cast(c.weights[i], kSpecs[i].grad_dtype)));
          }
        }
        CHECK(host(g.state)[kFoundNonfinite] == 0.0);
      }
      // Without momentum the buffers are never touched.
      if (!with_momentum)
        for (size_t i = 0; i < kSpecs.size(); ++i) {
          const auto m = host(g.momentum[i]);
          const auto m0 = values(kSpecs[i].n + kSpecs[i].misalign, 3 * 100 + i * 10 + 4, -0.1, 0.1);
          CHECK(std::equal(m.begin(), m.end(), m0.begin() + kSpecs[i].misalign, [](double a, double b) {
            return a == double(float(b));
          }));
        }
    }
}

TEST_CASE("cuda multi-tensor step: an inf or NaN gradient raises the flag and the flagged step changes nothing" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  for (Device device : {Device::cpu(), Device::cuda(0)}) {
    CAPTURE(device.str());
    PlanBuffers b = make_plan(kSpecs, device, true, 5, 64.0, /*inf_at=*/0);
    ops::unscale_gradients(b.plan, b.state);
    CHECK(host(b.state)[kFoundNonfinite] == 1.0);
    std::vector<std::vector<double>> before;
    for (size_t i = 0; i < kSpecs.size(); ++i)
      for (const Tensor* t : {&b.weights[i], &b.momentum[i], &b.halves[i]}) before.push_back(host(*t));
    ops::multi_tensor_sgd(b.plan, 0.1, 0.9, false, &b.state);
    size_t j = 0;
    for (size_t i = 0; i < kSpecs.size(); ++i)
      for (const Tensor* t : {&b.weights[i], &b.momentum[i], &b.halves[i]}) CHECK(host(*t) == before[j++]);
    // Without the state, the same step is taken.
    ops::multi_tensor_sgd(b.plan, 0.1, 0.9, false, nullptr);
    CHECK(host(b.weights[0]) != before[0]);
    // The scaler's update reads the flag and clears it.
    ops::loss_scale_update(b.state, {});
    const auto s = host(b.state);
    CHECK(s[kFoundNonfinite] == 0.0);
    CHECK(s[kLossScale] == 32.0);
    CHECK(s[kSkippedSteps] == 1.0);
  }
  // A NaN (not only inf) counts, in every gradient dtype.
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Tensor g = ops::cast(Tensor::from_vector({1.0, std::nan(""), 2.0}, {3}, DType::f32), dt).to(Device::cuda(0));
    Tensor g32 = Tensor::zeros({3}, DType::f32, Device::cuda(0)), w = Tensor::zeros({3}, DType::f32, Device::cuda(0));
    MultiTensorSlice x{};
    x.grad = g.raw_data(), x.grad_dtype = int32_t(dt), x.grad32 = g32.data<float>(), x.weight = w.data<float>();
    x.n = 3, x.lr_mult = 1;
    ops::MultiTensorPlan plan(Device::cuda(0));
    plan.set({x});
    Tensor state = ops::loss_scale_state(1.0, Device::cuda(0));
    ops::unscale_gradients(plan, state);
    CHECK(host(state)[kFoundNonfinite] == 1.0);
  }
}

TEST_CASE("cuda multi-tensor step: the loss scaler's policy on the device is the CPU's, step by step" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  net::LossScalerOptions dynamic;
  dynamic.window = 3;
  dynamic.initial_scale = 4.0;
  dynamic.max_scale = 16.0;
  net::LossScalerOptions fixed;
  fixed.fixed_scale = 128;
  fixed.window = 1;
  std::vector<bool> flags = {true, false};
  flags.insert(flags.end(), 12, true);
  flags.insert(flags.end(), {false, false, true});
  for (const net::LossScalerOptions& o : {dynamic, fixed}) {
    net::LossScaler cpu(o, Device::cpu()), gpu(o, Device::cuda(0));
    double largest = 0;
    for (bool finite : flags) {
      CHECK(gpu.update(finite) == cpu.update(finite));
      const auto a = gpu.read(), b = cpu.read();
      CHECK(a.scale == b.scale);
      CHECK(a.clean == b.clean);
      CHECK(a.skipped == b.skipped);
      CHECK(a.consecutive == b.consecutive);
      largest = std::max(largest, a.scale);
    }
    CHECK(largest == (o.fixed_scale == 0 ? 16.0 : 128.0));  // doubled up to max_scale, never past it
    CHECK(gpu.skipped_steps() == 3);
    CHECK(gpu.scale() == (o.fixed_scale == 0 ? 4.0 : 128.0));
  }
}

TEST_CASE("cuda multi-tensor step: SGD::step_scaled on the device is the CPU's step, a skipped step included" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  for (DType half : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(half));
    struct Run {
      std::vector<std::vector<double>> masters, momentum, halves;
      net::LossScaler::Snapshot scaler;
    };
    auto run = [&](Device device) {
      // A 16-bit weight with decay and an f32 batch-norm-like parameter without, each with its master or itself.
      const std::vector<double> w0 = values(2 * kMultiTensorChunk + 9, 21), b0 = values(7, 22);
      Tensor w = ops::cast(Tensor::from_vector(w0, {int64_t(w0.size())}), half).to(device);
      Tensor b = Tensor::from_vector(b0, {7}).to(device);
      w.set_requires_grad(true);
      b.set_requires_grad(true);
      net::SGD opt({{"w", &w, true}, {"b", &b, false, true}}, {0.9, 5e-4, true},
                   {{"w", Tensor::from_vector(w0, {int64_t(w0.size())}).to(device)}});
      net::LossScalerOptions so;
      so.initial_scale = 256;
      so.window = 2;
      net::LossScaler scaler(so, device);
      const int64_t waits = device_work_counts().host_waits;
      for (int step = 0; step < 4; ++step) {
        std::vector<double> gw = values(int64_t(w0.size()), 30 + uint64_t(step), -256, 256);
        if (step == 2) gw[5] = std::numeric_limits<double>::infinity();  // skipped: the scale halves
        w.set_grad(ops::cast(Tensor::from_vector(gw, {int64_t(gw.size())}), half).to(device));
        b.set_grad(Tensor::from_vector(values(7, 40 + uint64_t(step), -256, 256), {7}).to(device));
        opt.step_scaled(0.05, scaler);
      }
      if (!device.is_cpu()) CHECK(device_work_counts().host_waits == waits);  // four steps, no wait
      Run r;
      for (auto& [name, t] : opt.masters()) r.masters.push_back(t.to_double_vector());
      for (auto& [name, t] : opt.state()) r.momentum.push_back(t.to_double_vector());
      r.halves = {w.to_double_vector(), b.to_double_vector()};
      r.scaler = scaler.read();
      return r;
    };
    const Run c = run(Device::cpu()), g = run(Device::cuda(0));
    auto close = [](const std::vector<std::vector<double>>& x, const std::vector<std::vector<double>>& y) {
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        for (size_t j = 0; j < x[i].size(); ++j)
          if (std::abs(x[i][j] - y[i][j]) > 4e-7 * (1 + std::abs(x[i][j]))) return false;
      return true;
    };
    CHECK(c.masters.size() == 1);
    CHECK(c.momentum.size() == 2);
    CHECK(close(c.masters, g.masters));
    CHECK(close(c.momentum, g.momentum));
    CHECK(close(c.halves, g.halves));
    CHECK(g.scaler.skipped == 1);
    CHECK(g.scaler.scale == 256.0);  // 256, doubled after two clean steps, halved at the skip
    CHECK(g.scaler.clean == c.scaler.clean);
  }
}

TEST_CASE("cuda multi-tensor step: a ResNet learns in fp16 and bf16 on the device without waiting for it" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  for (DType half : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(half));
    const Device device = Device::cuda(0);
    Generator gen(11);
    net::ResNet model(testing::tiny_resnet_config(DType::f32), gen);
    model.to(device);
    net::SGD opt(model.named_parameters(), {0.9, 5e-4, true}, net::convert_to_half(model, half));
    net::LossScalerOptions so;
    if (half == DType::bf16) so.fixed_scale = 1.0;
    net::LossScaler scaler(so, device);
    const data::ImageSet set = data::subset(testing::separable_image_set(), 0, 16);
    Tensor x = Tensor::from_data(set.pixels.data(), {set.count, 1, 10, 10}).to(device);
    Tensor y = Tensor::from_data(set.labels.data(), {set.count}).to(device);
    const int64_t waits = device_work_counts().host_waits;
    Tensor first, last;
    for (int step = 0; step < 6; ++step) {
      const Tensor loss = ops::cross_entropy(model(x), y);
      opt.zero_grad();
      loss.backward(scaler.seed(loss));
      opt.step_scaled(0.1, scaler);
      (step == 0 ? first : last) = loss;
    }
    CHECK(device_work_counts().host_waits == waits);  // six steps, no wait
    MESSAGE(dtype_name(half) << ": loss " << first.item() << " -> " << last.item() << ", " << scaler.skipped_steps()
                             << " skipped steps");
    CHECK(last.item() < 0.5 * first.item());
  }
}

TEST_CASE("cuda multi-tensor step: lr and momentum read from the device give the bits of the same values as arguments" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  for (const Device d : {Device::cpu(), Device::cuda(0)}) {
    CAPTURE(d.str());
    PlanBuffers a = make_plan(kSpecs, d, true, 5, 64.0), b = make_plan(kSpecs, d, true, 5, 64.0),
                wrong = make_plan(kSpecs, d, true, 5, 64.0);
    const Tensor hyper = Tensor::from_vector({0.05, 0.85}, {2}, DType::f32, d);
    for (int step = 0; step < 2; ++step) {
      for (PlanBuffers* p : {&a, &b, &wrong}) ops::unscale_gradients(p->plan, p->state);
      ops::multi_tensor_sgd(a.plan, 0.05, 0.85, true, &a.state);
      ops::multi_tensor_sgd(b.plan, 7.0, 0.3, true, &b.state, &hyper);  // the arguments are not read
      ops::multi_tensor_sgd(wrong.plan, 7.0, 0.3, true, &wrong.state);
    }
    bool any_differs = false;
    for (size_t i = 0; i < kSpecs.size(); ++i) {
      CAPTURE(i);
      CHECK(host(b.weights[i]) == host(a.weights[i]));
      CHECK(host(b.momentum[i]) == host(a.momentum[i]));
      CHECK(host(b.halves[i]) == host(a.halves[i]));
      any_differs = any_differs || host(wrong.weights[i]) != host(a.weights[i]);
    }
    CHECK(any_differs);  // the arguments alone would have stepped elsewhere
  }
  const Tensor bad = Tensor::from_vector({0.1}, {1}, DType::f32, Device::cuda(0));
  PlanBuffers g = make_plan(kSpecs, Device::cuda(0), true, 5, 64.0);
  CHECK(testing::thrown_message([&] { ops::multi_tensor_sgd(g.plan, 0.1, 0.9, false, &g.state, &bad); })
            .find("multi_tensor_sgd: the hyperparameters must be f32 [2] (lr, momentum)") != std::string::npos);
}
