// tests/test_kernel_profile.cpp — the CPU kernel profiler behind
// `train_resnet --profile 1` (ops/kernel_profile.h): calls are counted per
// kernel and dtype only while profiling is on, the wrapped kernels compute
// the same results, reset clears the counts, the time of a large add is
// measured (positive, within the wall time around the call), and the
// printed table names each kernel.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "ops/kernel_profile.h"
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
