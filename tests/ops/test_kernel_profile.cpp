// tests/ops/test_kernel_profile.cpp — the CPU kernel profiler behind
// `train_resnet --profile 1` (ops/kernel_profile.h): calls are counted per
// kernel and dtype only while profiling is on, the wrapped kernels compute
// the same results, reset clears the counts, the time of a large add is
// measured (positive, within the wall time around the call), the printed
// table names each kernel, and convolutions are counted per pass and
// geometry with the algorithm the CPU policy ran.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "ops/cpu/conv/conv_policy.h"
#include "ops/kernel_profile.h"
#include "ops/kernels.h"
#include "ops/ops.h"

using namespace ember;

namespace {
const KernelTime* find_row(const std::vector<KernelTime>& rows, const std::string& kernel, DType dt) {
  for (const KernelTime& r : rows)
    if (r.kernel == kernel && r.dtype == dt) return &r;
  return nullptr;
}
}  // namespace

TEST_CASE("kernel profile: counts calls per kernel and dtype while on, results unchanged") {
  const Tensor a = Tensor::from_vector({1, -2, 3, -4}, {4}), b = Tensor::from_vector({0.5, 0.5, 0.5, 0.5}, {4});
  const Tensor h = Tensor::from_vector({-1, 2}, {2}, DType::f16);
  reset_kernel_profile();
  const std::vector<double> plain = ops::relu(ops::add(a, b)).to_double_vector();
  CHECK(kernel_profile().empty());  // off: nothing counted

  set_kernel_profiling(true);
  const std::vector<double> profiled = ops::relu(ops::add(a, b)).to_double_vector();
  (void)ops::add(a, b);
  (void)ops::relu(h);
  set_kernel_profiling(false);
  CHECK(profiled == plain);
  CHECK(profiled == std::vector<double>{1.5, 0, 3.5, 0});
  const std::vector<KernelTime> rows = kernel_profile();
  const KernelTime* add32 = find_row(rows, "add", DType::f32);
  const KernelTime* relu32 = find_row(rows, "relu_forward", DType::f32);
  const KernelTime* relu16 = find_row(rows, "relu_forward", DType::f16);
  REQUIRE(add32);
  REQUIRE(relu32);
  REQUIRE(relu16);
  CHECK(add32->calls == 2);
  CHECK(relu32->calls == 1);
  CHECK(relu16->calls == 1);
  CHECK(add32->seconds > 0);
  for (size_t i = 1; i < rows.size(); ++i) CHECK(rows[i - 1].seconds >= rows[i].seconds);  // largest first

  char buf[4096] = {};
  std::FILE* f = fmemopen(buf, sizeof buf - 1, "w");
  REQUIRE(f);
  print_kernel_profile(f);
  std::fclose(f);
  const std::string table(buf);
  CHECK(table.find("relu_forward") != std::string::npos);
  CHECK(table.find("all kernels") != std::string::npos);

  reset_kernel_profile();
  CHECK(kernel_profile().empty());
}

TEST_CASE("kernel profile: convolutions per pass and geometry, with the algorithm the policy ran") {
  struct PolicyAfter {
    ~PolicyAfter() { cpu::set_conv_policy(cpu::ConvPolicy::heuristic); }
  } restore;
  const Conv2dGeometry g3 = make_conv2d_geometry(2, 4, 9, 9, 6, 3, 3, 1, 1, 1, 1);
  const Conv2dGeometry g1 = make_conv2d_geometry(2, 4, 9, 9, 6, 1, 1, 2, 2, 0, 0);
  std::vector<float> x(size_t(g3.N * g3.C * g3.H * g3.W)), w(size_t(g3.K * g3.C * 9)), w1(size_t(g3.K * g3.C));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) - 3.0f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i % 5) * 0.25f - 0.5f;
  std::vector<float> y(size_t(g3.N * g3.K * g3.P * g3.Q)), y_plain(y.size()), gx(x.size()), gw(w.size());
  std::vector<float> y1(size_t(g1.N * g1.K * g1.P * g1.Q));
  cpu::set_conv_policy(cpu::ConvPolicy::window);
  kernels_for(Device::cpu()).conv2d_forward(DType::f32, g3, x.data(), w.data(), y_plain.data(), nullptr);

  reset_kernel_profile();
  set_kernel_profiling(true);
  const Kernels& k = kernels_for(Device::cpu());
  k.conv2d_forward(DType::f32, g3, x.data(), w.data(), y.data(), nullptr);
  k.conv2d_forward(DType::f32, g3, x.data(), w.data(), y.data(), nullptr);
  cpu::set_conv_policy(cpu::ConvPolicy::gemm);
  k.conv2d_backward_data(DType::f32, g3, y.data(), w.data(), gx.data(), nullptr);
  cpu::set_conv_policy(cpu::ConvPolicy::winograd4);
  k.conv2d_backward_filter(DType::f32, g3, x.data(), y.data(), gw.data(), nullptr);
  k.conv2d_forward(DType::f32, g1, x.data(), w1.data(), y1.data(), nullptr);  // 1x1/2: window
  set_kernel_profiling(false);
  CHECK(y == y_plain);  // the wrapper computes what the kernel does

  const std::vector<ConvLayerTime> rows = conv_layer_profile();
  REQUIRE(rows.size() == 4);
  auto find = [&](const std::string& pass, const Conv2dGeometry& g) -> const ConvLayerTime* {
    for (const ConvLayerTime& r : rows)
      if (r.pass == pass && r.geometry.R == g.R && r.geometry.C == g.C && r.geometry.K == g.K &&
          r.geometry.stride_h == g.stride_h && r.geometry.P == g.P && r.geometry.N == g.N)
        return &r;
    return nullptr;
  };
  const ConvLayerTime* fwd = find("forward", g3);
  const ConvLayerTime* bdata = find("backward_data", g3);
  const ConvLayerTime* bfilt = find("backward_filter", g3);
  const ConvLayerTime* fwd1 = find("forward", g1);
  REQUIRE(fwd);
  REQUIRE(bdata);
  REQUIRE(bfilt);
  REQUIRE(fwd1);
  CHECK(fwd->calls == 2);
  CHECK(fwd->algorithm == "window");
  CHECK(bdata->calls == 1);
  CHECK(bdata->algorithm == "gemm");
  CHECK(bfilt->algorithm == "winograd4");
  CHECK(fwd1->algorithm == "window");  // forced Winograd does not apply to 1x1
  CHECK(fwd->dtype == DType::f32);
  CHECK(fwd->seconds > 0);
  for (size_t i = 1; i < rows.size(); ++i) CHECK(rows[i - 1].seconds >= rows[i].seconds);  // largest first

  char buf[8192] = {};
  std::FILE* f = fmemopen(buf, sizeof buf - 1, "w");
  REQUIRE(f);
  print_kernel_profile(f, 100.0);
  std::fclose(f);
  const std::string table(buf);
  CHECK(table.find("Convolutions by layer and pass") != std::string::npos);
  CHECK(table.find("4,9x9->6 3x3/1") != std::string::npos);
  CHECK(table.find("4,9x9->6 1x1/2") != std::string::npos);
  CHECK(table.find("winograd4") != std::string::npos);
  CHECK(table.find("%") != std::string::npos);

  reset_kernel_profile();
  CHECK(conv_layer_profile().empty());
}

TEST_CASE("kernel profile: the time is the kernel's, within the wall time around the call") {
  const Tensor big = Tensor::full({1 << 22}, 1.5);  // 16 MiB: the add takes milliseconds
  reset_kernel_profile();
  set_kernel_profiling(true);
  const auto start = std::chrono::steady_clock::now();
  const Tensor sum = ops::add(big, big);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  set_kernel_profiling(false);
  CHECK(sum.to_double_vector()[12345] == 3.0);
  const std::vector<KernelTime> rows = kernel_profile();
  const KernelTime* add = find_row(rows, "add", DType::f32);
  REQUIRE(add);
  CHECK(add->calls == 1);
  MESSAGE("add of 4M floats: " << add->seconds * 1e3 << " ms profiled, " << wall * 1e3 << " ms around the call");
  CHECK(add->seconds > 1e-6);  // a real measurement, not a clock that never moved
  CHECK(add->seconds <= wall);
  reset_kernel_profile();
}
