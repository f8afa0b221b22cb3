// tests/engine/test_memory_format.cpp — channels-last tensors on the CPU:
// what the memory format means for a Tensor (logical host access, views,
// copies across formats), the conversion op and its gradient, the errors
// that keep formats from mixing silently, a model converted with
// Module::to_memory_format (same logits and gradients), its checkpoints
// (torchvision's NCHW/OIHW order, byte for byte the NCHW model's file, and
// loadable into either format), the optimizer's flat buffers, and the
// --layout flag's checks. The kernels in channels-last are the harness's
// cases (tests/ops/test_ops.cpp) on every backend.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "apps/training/train_settings.h"
#include "engine/autograd.h"
#include "engine/file_io.h"
#include "net/checkpoint.h"
#include "net/mixed_precision.h"
#include "net/resnet.h"
#include "net/safetensors.h"
#include "net/sgd.h"
#include "ops/ops.h"
#include "tests/support/test_helpers.h"

using namespace ember;
using ember::testing::expect_error;
using ember::testing::TempDir;

namespace {

// 0, 1, 2, ... in [N, C, H, W] order.
Tensor iota(const Shape& s, DType dt = DType::f64) {
  std::vector<double> v(size_t(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i);
  return Tensor::from_vector(v, s, dt);
}

// The raw storage of a host tensor as doubles, in memory order.
std::vector<double> memory_order(const Tensor& t) {
  REQUIRE(t.device().is_cpu());
  REQUIRE(t.dtype() == DType::f64);
  const double* p = t.data<double>();
  return {p, p + t.numel()};
}

net::ResNetConfig small_config() {
  net::ResNetConfig c;
  c.num_layers = 8;
  c.num_classes = 4;
  c.in_channels = 3;
  c.image_size = 8;
  c.input_norm.channels = 3;
  for (int i = 0; i < 3; ++i) c.input_norm.mean[i] = 0.4f, c.input_norm.inv_std[i] = 4.0f;
  return c;
}

Tensor image_batch(int64_t n, uint64_t seed) {
  std::vector<double> v(size_t(n * 3 * 8 * 8));
  uint64_t s = seed;
  for (double& x : v) s = s * 6364136223846793005ull + 1442695040888963407ull, x = double(s >> 56);
  return Tensor::from_vector(v, {n, 3, 8, 8}, DType::u8);
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

}  // namespace

TEST_CASE("memory format: a channels-last tensor keeps logical shape and host order, NHWC bytes") {
  const Shape s{2, 3, 2, 2};
  const Tensor x = iota(s);
  const Tensor y = ops::to_memory_format(x, MemoryFormat::channels_last);
  CHECK(y.is_channels_last());
  CHECK(y.shape() == s);
  CHECK(y.str() == "Tensor[f64 cpu [2, 3, 2, 2] channels_last]");
  CHECK(y.to_double_vector() == x.to_double_vector());  // logical order
  // memory: [n, h, w, c] = x[n, c, h, w]
  const std::vector<double> m = memory_order(y);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < 4; ++i) REQUIRE(m[size_t((n * 4 + i) * 3 + c)] == double((n * 3 + c) * 4 + i));
  // copies keep the format; a conversion back is x's bytes
  CHECK(y.clone().is_channels_last());
  CHECK(y.detach().is_channels_last());
  CHECK(Tensor::empty_like(y).is_channels_last());
  CHECK(memory_order(y.clone()) == m);
  CHECK(memory_order(ops::to_memory_format(y, MemoryFormat::contiguous)) == memory_order(x));
  CHECK(memory_order(y.contiguous_host()) == memory_order(x));
  // copy_from between formats reorders; within one format it copies bytes
  Tensor z = Tensor::empty(s, DType::f64, Device::cpu(), MemoryFormat::channels_last);
  z.copy_from(x);
  CHECK(memory_order(z) == m);
  Tensor w = Tensor::empty(s, DType::f64);
  w.copy_from(y);
  CHECK(memory_order(w) == memory_order(x));
  // reinterpret_format claims the format for the same bytes
  CHECK(memory_order(x.reinterpret_format(MemoryFormat::channels_last)) == memory_order(x));
  CHECK(y.reinterpret_format(MemoryFormat::contiguous).to_double_vector() == m);
}

TEST_CASE("memory format: views of a channels-last tensor only where the order cannot matter") {
  const Tensor y = ops::to_memory_format(iota({2, 3, 2, 2}), MemoryFormat::channels_last);
  expect_error([&] { y.view({2, 12}); }, "view: Tensor[f64 cpu [2, 3, 2, 2] channels_last] is channels_last");
  expect_error([&] { ops::flatten(y, 1); }, "convert with ops::to_memory_format first");
  // H*W == 1 (a pooled head) and C == 1: both orders are the same
  const Tensor pooled = ops::to_memory_format(iota({2, 3, 1, 1}), MemoryFormat::channels_last);
  const Tensor flat = ops::flatten(pooled, 1);
  CHECK(!flat.is_channels_last());
  CHECK(flat.to_double_vector() == pooled.to_double_vector());
  const Tensor grey = ops::to_memory_format(iota({2, 1, 2, 2}), MemoryFormat::channels_last);
  CHECK(grey.view({2, 4}).to_double_vector() == grey.to_double_vector());
  expect_error([] { Tensor::empty({2, 3}, DType::f32, Device::cpu(), MemoryFormat::channels_last); },
               "channels_last needs a 4-D tensor [N, C, H, W], not shape [2, 3]");
  expect_error([] { ops::to_memory_format(iota({2, 3}), MemoryFormat::channels_last); }, "must have 4 dimensions");
  expect_error([] { iota({2, 3}).reinterpret_format(MemoryFormat::channels_last); }, "needs a 4-D tensor");
}

TEST_CASE("memory format: the conversion's gradient converts back; mixing formats is an error, not a silent mix") {
  Tensor x = iota({2, 3, 2, 2});
  x.set_requires_grad(true);
  const Tensor y = ops::to_memory_format(x, MemoryFormat::channels_last);
  Tensor r = ops::to_memory_format(iota({2, 3, 2, 2}), MemoryFormat::channels_last);
  ops::sum(ops::add(y, r)).backward();  // d/dx sum(x + r) = 1 everywhere
  REQUIRE(x.grad().defined());
  CHECK(!x.grad().is_channels_last());
  CHECK(x.grad().to_double_vector() == std::vector<double>(24, 1.0));
  expect_error([&] { ops::add(y.detach(), x.detach()); }, "add: b is contiguous but the input is channels_last");
  expect_error([&] { ops::add_relu(x.detach(), y.detach()); },
               "add_relu: b is channels_last but the input is contiguous");
  // a seed in the other format is converted (PyTorch takes any layout of the seed)
  Tensor leaf = iota({2, 3, 2, 2});
  leaf.set_requires_grad(true);
  Tensor doubled = ops::scale(leaf, 2.0);
  doubled.backward(y.detach());
  CHECK(!leaf.grad().is_channels_last());
  std::vector<double> want = y.to_double_vector();
  for (double& v : want) v *= 2;
  CHECK(leaf.grad().to_double_vector() == want);
  expect_error([&] { ops::concat(y.detach(), y.detach(), 1); }, "concat: channels_last inputs are not supported");
  expect_error([] { ops::normalize_u8(ops::to_memory_format(iota({1, 3, 2, 2}, DType::u8), MemoryFormat::channels_last),
                                      ChannelNorm{3, {0, 0, 0}, {1, 1, 1}}, DType::f32); },
               "normalize_u8: the image batch must be NCHW");
  // a channels-last leaf's gradient through sum() (a broadcast value) is channels-last too
  Tensor w = ops::to_memory_format(iota({2, 3, 2, 2}), MemoryFormat::channels_last).detach();
  w.set_requires_grad(true);
  ops::sum(ops::scale(w, 3.0)).backward();
  CHECK(w.grad().is_channels_last());
  CHECK(w.grad().to_double_vector() == std::vector<double>(24, 3.0));
}

TEST_CASE("memory format: a channels-last ResNet gives the NCHW model's logits and gradients") {
  Generator g1(21), g2(21);
  net::ResNet a(small_config(), g1), b(small_config(), g2);
  b.to_memory_format(MemoryFormat::channels_last);
  int converted = 0;
  for (auto& p : b.named_parameters()) {
    CHECK(p.tensor->is_channels_last() == (p.tensor->ndim() == 4));
    converted += p.tensor->is_channels_last();
    CHECK(p.tensor->requires_grad());
    CHECK(p.tensor->is_leaf());
  }
  CHECK(converted == 9);
  const Tensor images = image_batch(4, 3);
  for (bool training : {true, false}) {
    CAPTURE(training);
    a.train(training), b.train(training);
    const Tensor la = a(images), lb = b(images);
    CHECK(max_abs_diff(la.to_double_vector(), lb.to_double_vector()) < 1e-5);
  }
  a.train(), b.train();
  const Tensor labels = Tensor::from_vector({0, 1, 2, 3}, {4}, DType::i64);
  ops::cross_entropy(a(images), labels).backward();
  ops::cross_entropy(b(images), labels).backward();
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    CAPTURE(pa[i].name);
    const Tensor ga = pa[i].tensor->grad(), gb = pb[i].tensor->grad();
    REQUIRE(gb.defined());
    CHECK(gb.memory_format() == pb[i].tensor->memory_format());
    CHECK(max_abs_diff(ga.to_double_vector(), gb.to_double_vector()) < 1e-5);
  }
}

TEST_CASE("memory format: checkpoints of a channels-last model are the NCHW model's file and load into either") {
  TempDir dir;
  Generator g1(8), g2(8), g3(9), g4(10);
  net::ResNet a(small_config(), g1), b(small_config(), g2);
  b.to_memory_format(MemoryFormat::channels_last);
  const std::string pa = dir.file("a.safetensors"), pb = dir.file("b.safetensors");
  net::save_model(pa, a);
  net::save_model(pb, b);
  CHECK(read_file(pa) == read_file(pb));  // torchvision's OIHW order, whatever the format in memory
  const SafetensorsFile file = load_safetensors(pb);
  REQUIRE(file.find("conv1.weight"));
  CHECK(file.find("conv1.weight")->shape() == Shape{16, 3, 3, 3});
  // into a channels-last model, and into an NCHW one: the same logits as the saved model
  net::ResNet c(small_config(), g3), d(small_config(), g4);
  c.to_memory_format(MemoryFormat::channels_last);
  net::load_model(pb, c);
  net::load_model(pb, d);
  CHECK(c.conv1->weight.is_channels_last());
  a.eval(), c.eval(), d.eval();
  const Tensor images = image_batch(3, 5);
  const std::vector<double> want = a(images).to_double_vector();
  CHECK(max_abs_diff(c(images).to_double_vector(), want) < 1e-5);
  CHECK(d(images).to_double_vector() == want);
}

TEST_CASE("memory format: the optimizer's masters and momentum mirror channels-last parameters; files stay NCHW") {
  // f32 (flat f32 buffers, tight) and bf16 (f32 masters; the 16-bit
  // activations round in other places, so the two runs agree to bf16's
  // precision). A slice in the wrong order would scramble the weights: off
  // by the size of the weights themselves.
  for (DType precision : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(precision));
    const double tol = precision == DType::f32 ? 1e-5 : 5e-2;
    // max |a - b| over max(1, max |a|)
    auto differ = [](const Tensor& a, const Tensor& b) {
      const std::vector<double> va = a.to_double_vector(), vb = b.to_double_vector();
      double scale = 1;
      for (double v : va) scale = std::max(scale, std::fabs(v));
      return max_abs_diff(va, vb) / scale;
    };
    TempDir dir;
    Generator g1(4), g2(4);
    net::ResNet a(small_config(), g1), b(small_config(), g2);
    b.to_memory_format(MemoryFormat::channels_last);
    const bool half = precision != DType::f32;
    const net::Masters ma = half ? net::convert_to_half(a, precision) : net::Masters{};
    const net::Masters mb = half ? net::convert_to_half(b, precision) : net::Masters{};
    net::SGD oa(a.named_parameters(), {0.9, 1e-4, true}, ma), ob(b.named_parameters(), {0.9, 1e-4, true}, mb);
    for (const auto& [name, m] : ob.masters()) {
      const Tensor* p = nullptr;
      for (auto& np : b.named_parameters())
        if (np.name == name) p = np.tensor;
      REQUIRE(p);
      CHECK(m.memory_format() == p->memory_format());
    }
    const Tensor images = image_batch(4, 7), labels = Tensor::from_vector({3, 2, 1, 0}, {4}, DType::i64);
    for (int step = 0; step < 2; ++step) {
      for (net::ResNet* m : {&a, &b}) {
        m->zero_grad();
        ops::cross_entropy((*m)(images), labels).backward();
      }
      oa.step(0.1);
      ob.step(0.1);
    }
    // The two optimizers hold the same numbers (logically), and write the same files.
    auto sa = oa.state(), sb = ob.state();
    REQUIRE(sa.size() == sb.size());
    REQUIRE(!sa.empty());
    for (size_t i = 0; i < sa.size(); ++i) {
      CAPTURE(sa[i].first);
      CHECK(sb[i].second.is_channels_last() == (sb[i].second.ndim() == 4));
      CHECK(differ(sa[i].second, sb[i].second) < tol);
    }
    const std::string fa = dir.file("a.states.safetensors"), fb = dir.file("b.states.safetensors");
    net::save_optimizer(fa, oa);
    net::save_optimizer(fb, ob);
    const SafetensorsFile ra = load_safetensors(fa), rb = load_safetensors(fb);
    for (auto& [name, t] : ra.tensors) {
      CAPTURE(name);
      const Tensor* u = rb.find(name);
      REQUIRE(u);
      CHECK(u->shape() == t.shape());
      CHECK(differ(t, *u) < tol);
    }
    // a model checkpoint (with the masters in mixed precision) holds logical (OIHW) f32 weights
    net::save_model(dir.file("b.safetensors"), b, {}, ob.masters());
    net::save_model(dir.file("a.safetensors"), a, {}, oa.masters());
    const SafetensorsFile ca = load_safetensors(dir.file("a.safetensors")),
                          cb = load_safetensors(dir.file("b.safetensors"));
    for (auto& [name, t] : ca.tensors) {
      CAPTURE(name);
      REQUIRE(cb.find(name));
      CHECK(differ(t, *cb.find(name)) < tol);
    }
    // A resumed optimizer reads the file back into channels-last momentum: the same values.
    net::SGD oc(b.named_parameters(), {0.9, 1e-4, true}, ob.masters());
    net::load_optimizer(fb, oc);
    auto sc = oc.state();
    REQUIRE(sc.size() == sb.size());
    for (size_t i = 0; i < sc.size(); ++i) {
      CHECK(sc[i].second.memory_format() == sb[i].second.memory_format());
      CHECK(sc[i].second.to_double_vector() == sb[i].second.to_double_vector());
    }
  }
}

TEST_CASE("memory format: --layout is nchw or nhwc, and nhwc asks for a GPU") {
  apps::GpuOptions g;
  CHECK(apps::layout_format(g) == MemoryFormat::contiguous);
  apps::validate_gpu_options(g, false);
  g.layout = "nhwc";
  CHECK(apps::layout_format(g) == MemoryFormat::channels_last);
  apps::validate_gpu_options(g, true);
  expect_error([&] { apps::validate_gpu_options(g, false); },
               "--layout nhwc is for GPUs (add --gpus); the CPU backend computes in NCHW");
  g.layout = "NHWC";
  expect_error([&] { apps::validate_gpu_options(g, true); }, "unknown --layout 'NHWC' (nchw or nhwc)");
}
