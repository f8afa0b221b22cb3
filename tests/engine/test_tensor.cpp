// tests/engine/test_tensor.cpp — Tensor basics (engine/tensor.h, shape.h, half.h)
// and the Philox generator (engine/rng.h).
#include <doctest/doctest.h>

#include "tests/support/test_helpers.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "engine/rng.h"
#include "engine/tensor.h"

using namespace ember;

namespace {
using ember::testing::expect_error;


const DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};

}  // namespace

// ================================================================== construction

TEST_CASE("tensor: empty, zeros, full and from_vector for every dtype") {
  for (DType dt : kAllDTypes) {
    CAPTURE(dtype_name(dt));
    Tensor e = Tensor::empty({2, 3}, dt);
    CHECK(e.defined());
    CHECK(e.shape() == Shape{2, 3});
    CHECK(e.ndim() == 2);
    CHECK(e.numel() == 6);
    CHECK(e.dtype() == dt);
    CHECK(e.device() == Device::cpu());
    CHECK(e.nbytes() == 6 * dtype_size(dt));
    CHECK(e.is_leaf());
    CHECK_FALSE(e.requires_grad());

    CHECK(Tensor::zeros({2, 3}, dt).to_double_vector() == std::vector<double>(6, 0.0));
    CHECK(Tensor::full({4}, 7.0, dt).to_double_vector() == std::vector<double>(4, 7.0));

    // Values representable in every dtype (u8 has no negatives).
    const std::vector<double> v = dt == DType::u8 ? std::vector<double>{0, 1, 2, 100, 200, 255}
                                                   : std::vector<double>{0, 1, -2, 100, -120, 3};
    Tensor t = Tensor::from_vector(v, {3, 2}, dt);
    CHECK(t.to_double_vector() == v);
  }
  CHECK(Tensor::empty({0, 5}).numel() == 0);
  CHECK(Tensor::zeros({}).numel() == 1);  // a scalar shape
  expect_error([] { Tensor::from_vector({1, 2, 3}, {2, 2}); }, "from_vector: 3 values for shape [2, 2]");
}

TEST_CASE("tensor: from_vector converts to the dtype (f32 rounds, ints truncate)") {
  CHECK(Tensor::from_vector({0.1}, {1}, DType::f32).item() == double(0.1f));
  CHECK(Tensor::from_vector({0.1}, {1}, DType::f64).item() == 0.1);
  CHECK(Tensor::from_vector({2.7}, {1}, DType::i64).item() == 2.0);
  CHECK(Tensor::from_vector({3e9}, {1}, DType::i64).item() == 3e9);
  const float raw[3] = {1.5f, -2.5f, 4.0f};
  Tensor d = Tensor::from_data(raw, {3});
  CHECK(d.dtype() == DType::f32);
  CHECK(d.to_double_vector() == std::vector<double>{1.5, -2.5, 4.0});
}

TEST_CASE("tensor: typed data access checks the dtype") {
  Tensor t = Tensor::from_vector({1, 2}, {2}, DType::f32);
  CHECK(t.data<float>()[1] == 2.0f);
  t.data<float>()[0] = 5;
  CHECK(t.to_double_vector()[0] == 5.0);
  expect_error([&] { t.data<double>(); }, "tensor holds f32, asked for f64");
  expect_error([&] { t.data<int64_t>(); }, "asked for i64");
}

TEST_CASE("tensor: f16 storage round-trips through to_double_vector") {
  const std::vector<double> exact{0.0, 1.0, -2.0, 0.5, 1.5, 65504.0, -0.000061035156250, 0.099975585937500};
  CHECK(Tensor::from_vector(exact, {8}, DType::f16).to_double_vector() == exact);
  Tensor t = Tensor::from_vector({1.0 / 3.0, 65520.0, 1e6, std::ldexp(1.0, -24), std::ldexp(1.0, -25),
                                  std::ldexp(3.0, -25), 1.0 + std::ldexp(1.0, -11), 1.0 + std::ldexp(3.0, -11)},
                                 {8}, DType::f16);
  CHECK(t.nbytes() == 16);
  const std::vector<double> v = t.to_double_vector();
  CHECK(v[0] == 0.333251953125);              // nearest binary16
  CHECK(std::isinf(v[1]));                    // 65520 rounds up past the largest finite half
  CHECK(std::isinf(v[2]));
  CHECK(v[3] == std::ldexp(1.0, -24));        // smallest subnormal, exact
  CHECK(v[4] == 0.0);                         // half of it: a tie, rounds to even (0)
  CHECK(v[5] == std::ldexp(2.0, -24));        // 1.5 ulp: a tie, rounds to even (2 ulp)
  CHECK(v[6] == 1.0);                         // 1 + half an ulp: tie to even -> 1
  CHECK(v[7] == 1.0 + std::ldexp(2.0, -10));  // 1 + 1.5 ulp: tie to even -> 1 + 2 ulp
  Tensor n = Tensor::from_vector({std::numeric_limits<double>::quiet_NaN(), -1e9}, {2}, DType::f16);
  CHECK(std::isnan(n.to_double_vector()[0]));
  CHECK(n.to_double_vector()[1] == -std::numeric_limits<double>::infinity());
}

TEST_CASE("tensor: bf16 storage round-trips through to_double_vector, one rounding from double") {
  const std::vector<double> exact{0.0, 1.0, -2.0, 0.5, 1.5, 3.3895313892515355e38, std::ldexp(1.0, -133), -1.0078125};
  CHECK(Tensor::from_vector(exact, {8}, DType::bf16).to_double_vector() == exact);
  Tensor t = Tensor::from_vector({1.0 / 3.0, 3.3962e38, 1e39, 1.0 + std::ldexp(1.0, -8), 1.0 + std::ldexp(3.0, -8),
                                  1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), std::ldexp(1.0, -134),
                                  std::ldexp(3.0, -134)},
                                 {8}, DType::bf16);
  CHECK(t.nbytes() == 16);
  CHECK(t.str() == "Tensor[bf16 cpu [8]]");
  const std::vector<double> v = t.to_double_vector();
  CHECK(v[0] == 0.333984375);                 // nearest bfloat16
  CHECK(std::isinf(v[1]));                    // past max + half an ulp: inf
  CHECK(std::isinf(v[2]));
  CHECK(v[3] == 1.0);                         // 1 + half an ulp: tie to even -> 1
  CHECK(v[4] == 1.0 + std::ldexp(2.0, -7));   // 1 + 1.5 ulp: tie to even -> 1 + 2 ulp
  CHECK(v[5] == 1.0 + std::ldexp(1.0, -7));   // just above the tie: up (through f32 it would tie and go down)
  CHECK(v[6] == 0.0);                         // half the smallest subnormal: tie to even (0)
  CHECK(v[7] == std::ldexp(2.0, -133));       // 1.5 subnormal ulps: tie to even (2)
  Tensor n = Tensor::from_vector({std::numeric_limits<double>::quiet_NaN(), -1e39}, {2}, DType::bf16);
  CHECK(std::isnan(n.to_double_vector()[0]));
  CHECK(n.to_double_vector()[1] == -std::numeric_limits<double>::infinity());
}

TEST_CASE("tensor: item() needs exactly one element") {
  CHECK(Tensor::full({1}, 2.5, DType::f64).item() == 2.5);
  CHECK(Tensor::full({1, 1, 1}, -3, DType::i32).item() == -3);
  expect_error([] { (void)Tensor::zeros({2}).item(); }, "item() of a tensor with 2 elements");
}

// ================================================================== views and copies

TEST_CASE("tensor: view shares storage and rejects wrong sizes") {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor v = t.view({3, 2});
  CHECK(v.shape() == Shape{3, 2});
  CHECK(v.raw_data() == t.raw_data());
  v.data<float>()[4] = 40;
  CHECK(t.to_double_vector()[4] == 40);
  CHECK(t.shape() == Shape{2, 3});  // the original keeps its shape
  expect_error([&] { t.view({4, 2}); }, "view: cannot view [2, 3] (6 elements) as [4, 2]");
}

TEST_CASE("tensor: view_infer fills in one -1 dimension") {
  Tensor t = Tensor::zeros({2, 3, 4});
  CHECK(t.view_infer({-1, 4}).shape() == Shape{6, 4});
  CHECK(t.view_infer({2, -1}).shape() == Shape{2, 12});
  CHECK(t.view_infer({-1}).shape() == Shape{24});
  CHECK(t.view_infer({-1, 4}).raw_data() == t.raw_data());
  expect_error([&] { t.view_infer({-1, -1}); }, "only one dimension may be -1");
  expect_error([&] { t.view_infer({-1, 5}); }, "cannot infer -1 for [2, 3, 4]");
  expect_error([&] { t.view_infer({5, 5}); }, "view: cannot view");
}

TEST_CASE("tensor: clone is deep, detach and copies of the handle are shallow") {
  Tensor t = Tensor::from_vector({1, 2, 3}, {3}, DType::f64);
  Tensor c = t.clone();
  CHECK(c.raw_data() != t.raw_data());
  CHECK(c.to_double_vector() == t.to_double_vector());
  c.data<double>()[0] = 100;
  CHECK(t.to_double_vector()[0] == 1);

  Tensor h = t;  // a handle copy
  CHECK(h.same(t));
  Tensor d = t.detach();
  CHECK_FALSE(d.same(t));
  CHECK(d.raw_data() == t.raw_data());
  d.data<double>()[1] = 20;
  CHECK(t.to_double_vector()[1] == 20);

  CHECK(t.to(Device::cpu()).same(t));  // already there: the same tensor
}

TEST_CASE("tensor: copy_from and zero_") {
  Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::zeros({2, 2});
  b.copy_from(a);
  CHECK(b.to_double_vector() == a.to_double_vector());
  CHECK(b.raw_data() != a.raw_data());
  b.zero_();
  CHECK(b.to_double_vector() == std::vector<double>(4, 0.0));
  CHECK(a.to_double_vector()[3] == 4);
  expect_error([&] { b.copy_from(Tensor::zeros({4})); }, "copy_from:");
  expect_error([&] { b.copy_from(Tensor::zeros({2, 2}, DType::f64)); }, "copy_from:");
}

// ================================================================== metadata and errors

TEST_CASE("tensor: str() of shapes and tensors") {
  CHECK(Shape{128, 3, 224, 224}.str() == "[128, 3, 224, 224]");
  CHECK(Shape{}.str() == "[]");
  CHECK(Tensor::zeros({2, 3}).str() == "Tensor[f32 cpu [2, 3]]");
  CHECK(Tensor::zeros({4}, DType::i64).str() == "Tensor[i64 cpu [4]]");
  CHECK(Tensor().str() == "Tensor[undefined]");
}

TEST_CASE("tensor: using an undefined tensor is an error") {
  Tensor u;
  CHECK_FALSE(u.defined());
  expect_error([&] { (void)u.shape(); }, "use of an undefined tensor");
  expect_error([&] { (void)u.numel(); }, "use of an undefined tensor");
  expect_error([&] { (void)u.to_double_vector(); }, "use of an undefined tensor");
  expect_error([&] { (void)u.clone(); }, "use of an undefined tensor");
  expect_error([&] { (void)u.requires_grad(); }, "use of an undefined tensor");
}

TEST_CASE("shape: limits, sizes and equality") {
  Shape s{2, 3, 4};
  CHECK(s.ndim() == 3);
  CHECK(s.numel() == 24);
  CHECK(s.size(0) == 2);
  CHECK(s.size(-1) == 4);
  CHECK(s.size(-3) == 2);
  CHECK(s.vec() == std::vector<int64_t>{2, 3, 4});
  expect_error([&] { (void)s.size(3); }, "dimension 3 out of range for shape [2, 3, 4]");
  expect_error([&] { (void)s.size(-4); }, "out of range");
  CHECK(Shape{1, 2, 3, 4, 5, 6, 7, 8}.ndim() == Shape::kMaxDims);
  expect_error([] { Shape{1, 2, 3, 4, 5, 6, 7, 8, 9}; }, "a shape has at most 8 dimensions");
  expect_error([] { Shape{2, -1}; }, "negative dimension -1");
  expect_error([] { Shape(std::vector<int64_t>(9, 1)); }, "at most 8 dimensions");
  CHECK(Shape{2, 3} == Shape{2, 3});
  CHECK(Shape{2, 3} != Shape{3, 2});
  CHECK(Shape{2, 3} != Shape{2, 3, 1});
  CHECK(Shape{}.numel() == 1);
  CHECK(Shape{5, 0}.numel() == 0);
}

TEST_CASE("dtype: sizes and names") {
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(dtype_size(DType::f16) == 2);
  CHECK(dtype_size(DType::i32) == 4);
  CHECK(dtype_size(DType::i64) == 8);
  CHECK(dtype_size(DType::u8) == 1);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(std::string(dtype_name(DType::f16)) == "f16");
  CHECK(std::string(dtype_name(DType::bf16)) == "bf16");
  CHECK(is_floating(DType::f16));
  CHECK(is_floating(DType::bf16));
  CHECK(is_16bit_float(DType::f16));
  CHECK(is_16bit_float(DType::bf16));
  CHECK_FALSE(is_16bit_float(DType::f32));
  CHECK_FALSE(is_floating(DType::i64));
  // The enumerators travel in frame headers of the TCP ring: appended, never renumbered.
  CHECK(int(DType::u8) == 5);
  CHECK(int(DType::bf16) == 6);
  CHECK(kNumDTypes == 7);
  CHECK(Tensor::zeros({3}, DType::bf16).str() == "Tensor[bf16 cpu [3]]");
}

// ================================================================== Philox

TEST_CASE("philox: Random123's published Philox4x32-10 known-answer vectors") {
  // Counter (c0, c1, c2, c3) = (block lo, block hi, stream lo, stream hi); key = k0 | k1 << 32.
  struct KAT {
    uint32_t k0, k1, c0, c1, c2, c3;
    uint32_t out[4];
  };
  const KAT kats[] = {
      {0, 0, 0, 0, 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {0xa4093822u, 0x299f31d0u, 0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u,
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const KAT& k : kats) {
    const PhiloxBlock b = philox4x32(uint64_t(k.k0) | uint64_t(k.k1) << 32, uint64_t(k.c0) | uint64_t(k.c1) << 32,
                                     uint64_t(k.c2) | uint64_t(k.c3) << 32);
    for (int i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(b.w[i] == k.out[i]);
    }
  }
}

TEST_CASE("philox: PhiloxStream draws the words of consecutive blocks in order") {
  PhiloxStream s(42, 7);
  for (uint64_t block = 0; block < 3; ++block) {
    const PhiloxBlock b = philox4x32(42, block, 7);
    for (int i = 0; i < 4; ++i) CHECK(s.next_u32() == b.w[i]);
  }
  PhiloxStream t(42, 7);
  const PhiloxBlock b0 = philox4x32(42, 0, 7);
  CHECK(t.next_u64() == (uint64_t(b0.w[0]) << 32 | b0.w[1]));
}

TEST_CASE("philox: determinism, and different seeds and streams differ") {
  PhiloxStream a(1, 0), b(1, 0), c(2, 0), d(1, 1);
  int differ_b = 0, same_c = 0, same_d = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint32_t x = a.next_u32();
    differ_b += x != b.next_u32();
    same_c += x == c.next_u32();
    same_d += x == d.next_u32();
  }
  CHECK(differ_b == 0);
  CHECK(same_c < 3);
  CHECK(same_d < 3);
}

TEST_CASE("philox: uniform in [0, 1) and normal with the right moments") {
  PhiloxStream s(123, 0);
  const int n = 100000;
  double sum = 0, lo = 1, hi = 0;
  int outside = 0;
  for (int i = 0; i < n; ++i) {
    const double u = s.uniform();
    outside += !(u >= 0.0 && u < 1.0);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  CHECK(outside == 0);
  CHECK(std::fabs(sum / n - 0.5) < 0.005);  // sd of the mean ~ 0.0009
  CHECK(lo < 1e-3);
  CHECK(hi > 1 - 1e-3);
  CHECK(u32_to_unit(0xffffffffu) < 1.0f);
  CHECK(u32_to_unit(0) == 0.0f);
  CHECK(u32_to_unit_open0(0) > 0.0f);
  CHECK(u32_to_unit_open0(0xffffffffu) == 1.0f);

  double m = 0, m2 = 0;
  int non_finite = 0;
  for (int i = 0; i < n; ++i) {
    const double z = s.normal();
    non_finite += !std::isfinite(z);
    m += z;
    m2 += z * z;
  }
  CHECK(non_finite == 0);
  m /= n;
  m2 /= n;
  CHECK(std::fabs(m) < 0.02);       // sd ~ 0.003
  CHECK(std::fabs(m2 - 1) < 0.03);  // sd ~ 0.0045
}

TEST_CASE("philox: below(n) is uniform on small n (chi-square)") {
  PhiloxStream s(9, 3);
  for (uint64_t n : {2ull, 3ull, 5ull, 7ull, 10ull, 37ull}) {
    CAPTURE(n);
    const int draws = int(2000 * n);
    std::vector<int> count(n, 0);
    int out_of_range = 0;
    for (int i = 0; i < draws; ++i) {
      const uint64_t v = s.below(n);
      if (v < n)
        ++count[v];
      else
        ++out_of_range;
    }
    CHECK(out_of_range == 0);
    double chi2 = 0;
    const double expect = double(draws) / double(n);
    for (int c : count) chi2 += (c - expect) * (c - expect) / expect;
    // df = n - 1 <= 36: the 99.99th percentile is below 4 * df + 20.
    CHECK(chi2 < 4.0 * double(n - 1) + 20.0);
  }
  CHECK(s.below(1) == 0);
  CHECK(s.below(0) == 0);
}

TEST_CASE("philox: below(n) has no modulo bias when n is a large fraction of 2^64") {
  // n = 3 * 2^62: plain x % n would put values below 2^62 twice as often as
  // the others (half the draws instead of a third). Rejection sampling must not.
  PhiloxStream s(5, 0);
  const uint64_t n = 3ull << 62;
  const int draws = 30000;
  int low = 0, out_of_range = 0;
  for (int i = 0; i < draws; ++i) {
    const uint64_t v = s.below(n);
    out_of_range += v >= n;
    low += v < (1ull << 62);
  }
  CHECK(out_of_range == 0);
  const double frac = double(low) / draws;  // 1/3, sd ~ 0.0027
  CHECK(frac == doctest::Approx(1.0 / 3.0).epsilon(0.05));
}

TEST_CASE("philox: Generator hands out disjoint block ranges") {
  Generator g(77);
  CHECK(g.seed() == 77);
  CHECK(g.reserve_blocks(10) == 0);
  CHECK(g.reserve_blocks(5) == 10);
  CHECK(g.reserve_blocks(1) == 15);
}
