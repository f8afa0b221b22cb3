// tests/ops/cpu/test_cpu_kernels.cpp — the CPU kernels that are not differentiable
// ops, called through ember::cpu_kernels() and checked against plain
// reference loops or exact known values: fill, cast (incl. f16 bit patterns),
// axpby, sum, argmax_rows, normalize_u8, sgd_update, the Philox random fills,
// batch-norm's running-statistics update, the loss's label check, and max
// pooling's winner (ties, NaN, clipped windows) against a plain scan.
// (add/relu/bias/batch-norm/pooling/loss values and gradients are checked
// through ops/ by the op tests.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/half.h"
#include "engine/parallel.h"
#include "engine/rng.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/kernels.h"

using namespace ember;

namespace {

const Kernels& K() { return cpu_kernels(); }

size_t sz(int64_t n) { return static_cast<size_t>(n); }

const int64_t kSizes[] = {1, 7, 33, 1000};

// Deterministic test values in [-1, 1).
std::vector<double> test_values(int64_t n, uint64_t seed) {
  PhiloxStream rs(seed, 99);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = 2.0 * rs.uniform() - 1.0;
  return v;
}

template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Restores the thread count when a test changes it.
struct ThreadCountGuard {
  int saved = num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("cpu fill writes exactly n values of every dtype") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    std::vector<float> f(sz(n) + 1, -7.0f);
    K().fill(DType::f32, f.data(), n, 2.5, nullptr);
    for (int64_t i = 0; i < n; ++i) REQUIRE(f[sz(i)] == 2.5f);
    CHECK(f[sz(n)] == -7.0f);  // nothing written past the end

    std::vector<double> d(sz(n) + 1, -7.0);
    K().fill(DType::f64, d.data(), n, 0.1, nullptr);
    for (int64_t i = 0; i < n; ++i) REQUIRE(d[sz(i)] == 0.1);
    CHECK(d[sz(n)] == -7.0);

    std::vector<uint16_t> h(sz(n) + 1, 0xabcd);
    K().fill(DType::f16, h.data(), n, -2.0, nullptr);
    for (int64_t i = 0; i < n; ++i) REQUIRE(h[sz(i)] == 0xc000);
    CHECK(h[sz(n)] == 0xabcd);

    std::vector<int32_t> i32(sz(n) + 1, 5);
    K().fill(DType::i32, i32.data(), n, -3.0, nullptr);
    for (int64_t i = 0; i < n; ++i) REQUIRE(i32[sz(i)] == -3);
    CHECK(i32[sz(n)] == 5);

    std::vector<int64_t> i64(sz(n) + 1, 5);
    K().fill(DType::i64, i64.data(), n, 1e12, nullptr);
    for (int64_t i = 0; i < n; ++i) REQUIRE(i64[sz(i)] == 1000000000000LL);
    CHECK(i64[sz(n)] == 5);

    std::vector<uint8_t> u8(sz(n) + 1, 5);
    K().fill(DType::u8, u8.data(), n, 200.0, nullptr);
    for (int64_t i = 0; i < n; ++i) REQUIRE(u8[sz(i)] == 200);
    CHECK(u8[sz(n)] == 5);
  }
}

TEST_CASE("cpu cast f32 <-> f64 round trips and rounds") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    const std::vector<double> v = test_values(n, 1);
    std::vector<float> f = as<float>(v), f2(sz(n));
    std::vector<double> d(sz(n)), d2(sz(n));
    K().cast(DType::f32, f.data(), DType::f64, d.data(), n, nullptr);
    K().cast(DType::f64, d.data(), DType::f32, f2.data(), n, nullptr);
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE(d[sz(i)] == double(f[sz(i)]));
      REQUIRE(f2[sz(i)] == f[sz(i)]);
    }
    // f64 -> f32 rounds to nearest
    K().cast(DType::f64, v.data(), DType::f32, f2.data(), n, nullptr);
    for (int64_t i = 0; i < n; ++i) REQUIRE(f2[sz(i)] == float(v[sz(i)]));
    // same type is a copy
    K().cast(DType::f64, v.data(), DType::f64, d2.data(), n, nullptr);
    for (int64_t i = 0; i < n; ++i) REQUIRE(d2[sz(i)] == v[sz(i)]);
  }
}

TEST_CASE("cpu cast to f16 gives the exact IEEE bits (subnormal, inf, nan, ties to even)") {
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    double value;
    uint16_t bits;
  };
  const std::vector<Case> cases = {
      {0.0, 0x0000},
      {-0.0, 0x8000},
      {1.0, 0x3c00},
      {-2.0, 0xc000},
      {0.5, 0x3800},
      {65504.0, 0x7bff},                         // largest finite
      {65519.0, 0x7bff},                         // below the rounding boundary
      {65520.0, 0x7c00},                         // rounds up to inf
      {1e6, 0x7c00},                             // overflow
      {std::ldexp(1.0, -14), 0x0400},            // smallest normal
      {std::ldexp(1.0, -24), 0x0001},            // smallest subnormal
      {std::ldexp(1023.0, -24), 0x03ff},         // largest subnormal
      {std::ldexp(1.0, -25), 0x0000},            // halfway 0 / 2^-24: ties to even (0)
      {std::ldexp(3.0, -25), 0x0002},            // halfway 2^-24 / 2^-23: ties to even (2)
      {std::ldexp(3.0, -26), 0x0001},            // 0.75 * 2^-24 rounds up
      {1.0 + std::ldexp(1.0, -11), 0x3c00},      // halfway 1 / 1+2^-10: ties to even
      {1.0 + std::ldexp(3.0, -11), 0x3c02},      // halfway 1+2^-10 / 1+2^-9: ties to even
      {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -20), 0x3c01},  // just above halfway
      {-(1.0 + std::ldexp(3.0, -12)), 0xbc01},   // 1.00073: nearest is 1+2^-10
      {double(inf), 0x7c00},
      {-double(inf), 0xfc00},
  };
  // 33 values: every case, repeated, so both the 8-wide bulk path and the tail see them
  const int64_t n = 33;
  std::vector<float> f(n);
  std::vector<double> d(n);
  std::vector<uint16_t> want(n), from_f(n), from_d(n);
  for (int64_t i = 0; i < n; ++i) {
    const Case& c = cases[sz(i) % cases.size()];
    f[sz(i)] = float(c.value);
    d[sz(i)] = c.value;
    want[sz(i)] = c.bits;
  }
  K().cast(DType::f32, f.data(), DType::f16, from_f.data(), n, nullptr);
  K().cast(DType::f64, d.data(), DType::f16, from_d.data(), n, nullptr);
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(i);
    CAPTURE(d[sz(i)]);
    CHECK(from_f[sz(i)] == want[sz(i)]);
    CHECK(from_d[sz(i)] == want[sz(i)]);
  }

  // f64 -> f16 rounds once: 1 + 2^-11 + 2^-40 is above the halfway point,
  // but rounding it to float first would land exactly on it (and go to even).
  std::vector<double> tricky(9, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));
  tricky[8] = -tricky[8];
  std::vector<uint16_t> th(9);
  K().cast(DType::f64, tricky.data(), DType::f16, th.data(), 9, nullptr);
  for (int i = 0; i < 8; ++i) CHECK(th[sz(i)] == 0x3c01);
  CHECK(th[8] == 0xbc01);

  // NaN stays NaN
  std::vector<float> nanf(9, std::numeric_limits<float>::quiet_NaN());
  std::vector<double> nand(9, std::numeric_limits<double>::quiet_NaN());
  std::vector<uint16_t> nh(9), nh2(9);
  K().cast(DType::f32, nanf.data(), DType::f16, nh.data(), 9, nullptr);
  K().cast(DType::f64, nand.data(), DType::f16, nh2.data(), 9, nullptr);
  for (int i = 0; i < 9; ++i) {
    CHECK((nh[sz(i)] & 0x7c00) == 0x7c00);
    CHECK((nh[sz(i)] & 0x03ff) != 0);
    CHECK((nh2[sz(i)] & 0x7c00) == 0x7c00);
    CHECK((nh2[sz(i)] & 0x03ff) != 0);
  }
}

TEST_CASE("cpu cast from f16 is exact for every bit pattern and round trips") {
  const int64_t n = 65536;
  std::vector<uint16_t> h(n);
  for (int64_t i = 0; i < n; ++i) h[sz(i)] = uint16_t(i);
  std::vector<float> f(n);
  std::vector<double> d(n);
  K().cast(DType::f16, h.data(), DType::f32, f.data(), n, nullptr);
  K().cast(DType::f16, h.data(), DType::f64, d.data(), n, nullptr);
  // known values
  CHECK(f[0x3c00] == 1.0f);
  CHECK(f[0xc000] == -2.0f);
  CHECK(f[0x7bff] == 65504.0f);
  CHECK(f[0x0001] == std::ldexp(1.0f, -24));
  CHECK(f[0x03ff] == std::ldexp(1023.0f, -24));
  CHECK(f[0x0400] == std::ldexp(1.0f, -14));
  CHECK(f[0x7c00] == std::numeric_limits<float>::infinity());
  CHECK(f[0xfc00] == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(f[0x7e00]));
  CHECK(std::isnan(d[0x7c01]));
  CHECK(float_bits(f[0x8000]) == 0x80000000u);  // negative zero
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float ref = half_to_float(uint16_t(i));
    const bool nan = std::isnan(ref);
    if (nan ? !std::isnan(f[sz(i)]) || !std::isnan(d[sz(i)])
            : (float_bits(f[sz(i)]) != float_bits(ref) || d[sz(i)] != double(ref)))
      ++mismatches;
  }
  CHECK(mismatches == 0);
  // back to f16: every non-NaN pattern comes back unchanged, NaNs stay NaN
  std::vector<uint16_t> back_f(n), back_d(n);
  K().cast(DType::f32, f.data(), DType::f16, back_f.data(), n, nullptr);
  K().cast(DType::f64, d.data(), DType::f16, back_d.data(), n, nullptr);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool nan = (i & 0x7c00) == 0x7c00 && (i & 0x03ff) != 0;
    for (uint16_t b : {back_f[sz(i)], back_d[sz(i)]}) {
      if (nan ? !((b & 0x7c00) == 0x7c00 && (b & 0x03ff) != 0) : b != uint16_t(i)) ++bad;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("cpu cast rejects non-float dtypes") {
  std::vector<int32_t> a(4);
  std::vector<float> b(4);
  CHECK_THROWS_AS(K().cast(DType::i32, a.data(), DType::f32, b.data(), 4, nullptr), ember::Error);
  CHECK_THROWS_AS(K().cast(DType::f32, b.data(), DType::u8, a.data(), 4, nullptr), ember::Error);
}

TEST_CASE_TEMPLATE("cpu axpby matches alpha*x + beta*y, with aliasing and beta == 0", T, float, double) {
  const double tol = sizeof(T) == 4 ? 1e-6 : 1e-14;
  const double cases[][2] = {{0.5, -1.5}, {1.0, 1.0}, {-2.0, 0.0}, {0.0, 3.0}};
  for (int64_t n : kSizes) {
    const std::vector<double> x = test_values(n, 2), y0 = test_values(n, 3);
    for (const auto& ab : cases) {
      const double alpha = ab[0], beta = ab[1];
      CAPTURE(n);
      CAPTURE(alpha);
      CAPTURE(beta);
      std::vector<T> xt = as<T>(x), yt = as<T>(y0);
      if (beta == 0.0) yt.assign(sz(n), std::numeric_limits<T>::quiet_NaN());  // must be ignored
      K().axpby(dtype_of<T>::value, alpha, xt.data(), beta, yt.data(), n, nullptr);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = alpha * double(T(x[sz(i)])) + (beta == 0.0 ? 0.0 : beta * double(T(y0[sz(i)])));
        REQUIRE(std::fabs(double(yt[sz(i)]) - ref) <= tol * 4);
      }
      // x and y the same array: y = (alpha + beta) * y
      std::vector<T> z = as<T>(x);
      K().axpby(dtype_of<T>::value, alpha, z.data(), beta, z.data(), n, nullptr);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = (alpha + beta) * double(T(x[sz(i)]));
        REQUIRE(std::fabs(double(z[sz(i)]) - ref) <= tol * 4);
      }
    }
  }
}

TEST_CASE_TEMPLATE("cpu sum adds every element in double precision, independent of thread count", T, float, double) {
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(33), int64_t(1000), int64_t(100003)}) {
    CAPTURE(n);
    std::vector<T> x = as<T>(test_values(n, 4));
    double ref = 0;
    for (T v : x) ref += double(v);
    T y = T(-123);
    K().sum(dtype_of<T>::value, x.data(), &y, n, nullptr);
    CHECK(double(y) == doctest::Approx(ref).epsilon(sizeof(T) == 4 ? 1e-6 : 1e-12));
  }
  // the same bits whatever the thread count
  {
    const int64_t n = 100003;
    std::vector<T> x = as<T>(test_values(n, 11));
    T y1 = 0, y2 = 0;
    ThreadCountGuard guard;
    set_num_threads(1);
    K().sum(dtype_of<T>::value, x.data(), &y1, n, nullptr);
    set_num_threads(2);
    K().sum(dtype_of<T>::value, x.data(), &y2, n, nullptr);
    CHECK(y1 == y2);
  }
  // 1e8 + 1000 ones - 1e8: a float accumulator loses every one of the ones
  std::vector<T> x(1002, T(1));
  x[0] = T(1e8);
  x[1001] = T(-1e8);
  T y = T(0);
  K().sum(dtype_of<T>::value, x.data(), &y, 1002, nullptr);
  CHECK(double(y) == 1000.0);
  // n == 0 gives 0
  y = T(5);
  K().sum(dtype_of<T>::value, x.data(), &y, 0, nullptr);
  CHECK(double(y) == 0.0);
}

TEST_CASE_TEMPLATE("cpu argmax_rows returns the first index of the maximum", T, float, double) {
  // rows: ties at 1 and 4; max at the end; all equal; single negative; NaN
  const int64_t cols = 7;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> x = {
      0, 5, 1, 2, 5, 3, -1,   //
      0, 1, 2, 3, 4, 5, 6,    //
      2, 2, 2, 2, 2, 2, 2,    //
      -9, -3, -8, -3, -7, -5, -4,  //
      1, 9, nan, 9, nan, 1, 1,     //
  };
  const int64_t rows = int64_t(x.size()) / cols;
  std::vector<int64_t> idx(sz(rows), -1);
  K().argmax_rows(dtype_of<T>::value, x.data(), idx.data(), rows, cols, nullptr);
  CHECK(idx == std::vector<int64_t>{1, 6, 0, 1, 2});

  // one column, and many rows of 1000 with the max planted
  std::vector<T> one = {3, -1, 4};
  std::vector<int64_t> i1(3, -1);
  K().argmax_rows(dtype_of<T>::value, one.data(), i1.data(), 3, 1, nullptr);
  CHECK(i1 == std::vector<int64_t>{0, 0, 0});
  const int64_t R = 33, Cn = 1000;
  std::vector<T> big = as<T>(test_values(R * Cn, 5));
  std::vector<int64_t> want(R), got(R, -1);
  for (int64_t r = 0; r < R; ++r) {
    want[sz(r)] = (r * 37) % Cn;
    big[sz(r * Cn + want[sz(r)])] = T(2);
    big[sz(r * Cn + (want[sz(r)] + 500) % Cn)] = T(2);  // a tie later or earlier in the row
    if ((want[sz(r)] + 500) % Cn < want[sz(r)]) want[sz(r)] = (want[sz(r)] + 500) % Cn;
  }
  K().argmax_rows(dtype_of<T>::value, big.data(), got.data(), R, Cn, nullptr);
  CHECK(got == want);
}

TEST_CASE("cpu count_equal adds the number of equal positions to the total") {
  const std::vector<int64_t> a = {0, 3, -1, 7, 7, 2, 9}, b = {0, 2, -1, 7, 6, 2, -9};
  double acc = 10.0;
  K().count_equal(DType::i64, a.data(), b.data(), int64_t(a.size()), &acc, nullptr);
  CHECK(acc == 14.0);  // positions 0, 2, 3, 5, added to what was there
  K().count_equal(DType::i64, a.data(), a.data(), 0, &acc, nullptr);
  CHECK(acc == 14.0);
  CHECK_THROWS_WITH(K().count_equal(DType::i32, a.data(), b.data(), 1, &acc, nullptr),
                    doctest::Contains("count_equal: indices must be i64"));
}

TEST_CASE_TEMPLATE("cpu normalize_u8 computes (x/255 - mean) * inv_std per channel", T, float, double) {
  ChannelNorm norm;
  norm.channels = 3;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, inv[3] = {1 / 0.229f, 1 / 0.224f, 1 / 0.225f};
  for (int c = 0; c < 3; ++c) norm.mean[c] = mean[c], norm.inv_std[c] = inv[c];
  for (int64_t HW : {int64_t(1), int64_t(7), int64_t(33), int64_t(1000)}) {
    const int64_t N = 2, C = 3;
    CAPTURE(HW);
    std::vector<uint8_t> x(sz(N * C * HW));
    for (size_t i = 0; i < x.size(); ++i) x[i] = uint8_t((i * 97 + 13) % 256);
    x[0] = 0, x.back() = 255;
    std::vector<T> y(x.size() + 1, T(-99));
    K().normalize_u8(dtype_of<T>::value, x.data(), y.data(), N, HW, norm, nullptr);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < HW; ++i) {
          const size_t k = sz((n * C + c) * HW + i);
          const double ref = (double(x[k]) / 255.0 - double(mean[c])) * double(inv[c]);
          REQUIRE(double(y[k]) == doctest::Approx(ref).epsilon(sizeof(T) == 4 ? 1e-5 : 1e-12).scale(1));
        }
    CHECK(y.back() == T(-99));
  }
  norm.channels = 9;
  std::vector<uint8_t> x(9);
  std::vector<T> y(9);
  CHECK_THROWS_AS(K().normalize_u8(dtype_of<T>::value, x.data(), y.data(), 1, 1, norm, nullptr), ember::Error);
}

namespace {
// Plain reference of kernels.h's SGD formula, in double.
void sgd_reference(std::vector<double>& w, const std::vector<double>& g, std::vector<double>& buf,
                   const SgdParams& p) {
  for (size_t i = 0; i < w.size(); ++i) {
    const double gi = p.grad_scale * g[i] + p.weight_decay * w[i];
    double step = gi;
    if (p.momentum != 0.0) {
      buf[i] = p.first_step ? gi : p.momentum * buf[i] + gi;
      step = p.nesterov ? gi + p.momentum * buf[i] : buf[i];
    }
    w[i] -= p.lr * step;
  }
}
}  // namespace

TEST_CASE_TEMPLATE("cpu sgd_update follows PyTorch's formula", T, float, double) {
  const double tol = sizeof(T) == 4 ? 2e-6 : 1e-13;
  struct Named {
    const char* name;
    SgdParams p;
  };
  std::vector<Named> cases;
  {
    SgdParams p;
    p.lr = 0.1, p.momentum = 0.0;
    cases.push_back({"plain", p});
    p.weight_decay = 5e-4, p.grad_scale = 1.0 / 1024;
    cases.push_back({"plain + wd + grad_scale", p});
    p = SgdParams{};
    p.lr = 0.05, p.momentum = 0.9, p.first_step = true;
    cases.push_back({"momentum first step", p});
    p.first_step = false;
    cases.push_back({"momentum later step", p});
    p.nesterov = true;
    cases.push_back({"nesterov later step", p});
    p.first_step = true;
    cases.push_back({"nesterov first step", p});
    p = SgdParams{};
    p.lr = 0.2, p.momentum = 0.875, p.weight_decay = 1e-2, p.grad_scale = 0.25, p.nesterov = true;
    cases.push_back({"nesterov + wd + grad_scale", p});
    p.nesterov = false;
    cases.push_back({"momentum + wd + grad_scale", p});
  }
  for (const Named& c : cases) {
    for (int64_t n : kSizes) {
      CAPTURE(c.name);
      CAPTURE(n);
      std::vector<double> w = test_values(n, 6), g = test_values(n, 7), buf = test_values(n, 8);
      std::vector<T> wt = as<T>(w), gt = as<T>(g), bt = as<T>(buf);
      for (size_t i = 0; i < w.size(); ++i) w[i] = double(wt[i]), g[i] = double(gt[i]), buf[i] = double(bt[i]);
      // two steps, so a later step sees the buffer the first one wrote
      for (int step = 0; step < 2; ++step) {
        sgd_reference(w, g, buf, c.p);
        K().sgd_update(dtype_of<T>::value, wt.data(), gt.data(), c.p.momentum != 0.0 ? bt.data() : nullptr, n,
                       c.p, nullptr);
        for (int64_t i = 0; i < n; ++i) {
          REQUIRE(std::fabs(double(wt[sz(i)]) - w[sz(i)]) <= tol);
          REQUIRE(std::fabs(double(bt[sz(i)]) - buf[sz(i)]) <= tol);
        }
      }
    }
  }
  // momentum without a buffer is an error
  SgdParams p;
  p.momentum = 0.9;
  std::vector<T> w(3), g(3);
  CHECK_THROWS_AS(K().sgd_update(dtype_of<T>::value, w.data(), g.data(), nullptr, 3, p, nullptr), ember::Error);
}

TEST_CASE_TEMPLATE("cpu random_uniform follows the Philox contract", T, float, double) {
  const DType dt = dtype_of<T>::value;
  const uint64_t seed = 1234, offset = 77;
  const double lo = -0.5, hi = 1.5;
  // every element is lo + (hi - lo) * u32_to_unit(word i%4 of block offset + i/4)
  for (int64_t n : kSizes) {
    CAPTURE(n);
    std::vector<T> y(sz(n) + 1, T(-99));
    K().random_uniform(dt, y.data(), n, seed, offset, lo, hi, nullptr);
    for (int64_t i = 0; i < n; ++i) {
      const PhiloxBlock b = philox4x32(seed, offset + uint64_t(i) / 4, 0);
      const double ref = lo + (hi - lo) * double(u32_to_unit(b.w[i % 4]));
      REQUIRE(double(y[sz(i)]) == doctest::Approx(ref).epsilon(1e-7));
    }
    CHECK(y[sz(n)] == T(-99));
  }
  // block offsets: the last 4 of an 8-element fill at offset 0 == a 4-element fill at offset 1
  std::vector<T> a(8), b(4);
  K().random_uniform(dt, a.data(), 8, seed, 0, lo, hi, nullptr);
  K().random_uniform(dt, b.data(), 4, seed, 1, lo, hi, nullptr);
  for (int i = 0; i < 4; ++i) CHECK(a[sz(4 + i)] == b[sz(i)]);

  // statistics, determinism, thread-count independence, seeds
  const int64_t n = 100000;
  std::vector<T> y1(n), y2(n), y3(n), y4(n);
  {
    ThreadCountGuard guard;
    set_num_threads(1);
    K().random_uniform(dt, y1.data(), n, seed, offset, lo, hi, nullptr);
    set_num_threads(2);
    K().random_uniform(dt, y2.data(), n, seed, offset, lo, hi, nullptr);
  }
  K().random_uniform(dt, y3.data(), n, seed, offset, lo, hi, nullptr);
  K().random_uniform(dt, y4.data(), n, seed + 1, offset, lo, hi, nullptr);
  CHECK(y1 == y2);
  CHECK(y1 == y3);
  CHECK(y1 != y4);
  double s = 0, ss = 0, mn = 1e9, mx = -1e9;
  for (T v : y1) {
    s += double(v), ss += double(v) * double(v);
    mn = std::min(mn, double(v)), mx = std::max(mx, double(v));
  }
  const double mean = s / double(n), var = ss / double(n) - mean * mean;
  CHECK(mn >= lo);
  CHECK(mx < hi);
  CHECK(mn < lo + 0.01);  // the whole range is used
  CHECK(mx > hi - 0.01);
  // mean 0.5 with sd of the mean 2/sqrt(12)/sqrt(1e5) ~ 0.0018; variance 4/12
  CHECK(std::fabs(mean - 0.5) < 0.01);
  CHECK(std::fabs(var - 4.0 / 12.0) < 0.01);
}

TEST_CASE_TEMPLATE("cpu random_normal follows the Philox Box-Muller contract", T, float, double) {
  const DType dt = dtype_of<T>::value;
  const uint64_t seed = 99, offset = 5;
  const double mu = 0.25, sd = 2.0;
  for (int64_t n : kSizes) {
    CAPTURE(n);
    std::vector<T> y(sz(n) + 1, T(-99));
    K().random_normal(dt, y.data(), n, seed, offset, mu, sd, nullptr);
    for (int64_t i = 0; i < n; ++i) {
      const PhiloxBlock b = philox4x32(seed, offset + uint64_t(i) / 2, 0);
      const double r = std::sqrt(-2.0 * std::log(double(u32_to_unit_open0(b.w[0]))));
      const double t = 6.283185307179586 * double(u32_to_unit(b.w[1]));
      const double ref = mu + sd * (i % 2 == 0 ? r * std::cos(t) : r * std::sin(t));
      REQUIRE(double(y[sz(i)]) == doctest::Approx(ref).epsilon(1e-6).scale(1));
    }
    CHECK(y[sz(n)] == T(-99));  // an odd n writes no pair partner past the end
  }
  // pair j takes block offset + j
  std::vector<T> a(8), b(6);
  K().random_normal(dt, a.data(), 8, seed, 0, mu, sd, nullptr);
  K().random_normal(dt, b.data(), 6, seed, 1, mu, sd, nullptr);
  for (int i = 0; i < 6; ++i) CHECK(a[sz(2 + i)] == b[sz(i)]);

  const int64_t n = 100000;
  std::vector<T> y1(n), y2(n), y3(n);
  {
    ThreadCountGuard guard;
    set_num_threads(1);
    K().random_normal(dt, y1.data(), n, seed, offset, mu, sd, nullptr);
    set_num_threads(2);
    K().random_normal(dt, y2.data(), n, seed, offset, mu, sd, nullptr);
  }
  K().random_normal(dt, y3.data(), n, seed, offset + 1, mu, sd, nullptr);
  CHECK(y1 == y2);
  CHECK(y1 != y3);
  double s = 0, ss = 0, s4 = 0;
  int64_t beyond_3sd = 0;
  for (T v : y1) {
    REQUIRE(std::isfinite(double(v)));
    const double z = (double(v) - mu) / sd;
    s += z, ss += z * z, s4 += z * z * z * z;
    if (std::fabs(z) > 3) ++beyond_3sd;
  }
  const double m = s / double(n), var = ss / double(n) - m * m, kurt = s4 / double(n);
  // sd of the mean of z: 1/sqrt(1e5) ~ 0.0032; of the variance ~ 0.0045
  CHECK(std::fabs(m) < 0.015);
  CHECK(std::fabs(var - 1.0) < 0.02);
  CHECK(std::fabs(kurt - 3.0) < 0.15);  // a normal, not just any unit-variance law
  CHECK(beyond_3sd > 200);             // expected 270
  CHECK(beyond_3sd < 340);
}

TEST_CASE_TEMPLATE("cpu batch_norm_forward_train statistics and running update", T, float, double) {
  const DType dt = dtype_of<T>::value;
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  struct Shape3 {
    int64_t N, C, HW;
  };
  for (const Shape3 s : {Shape3{3, 2, 5}, Shape3{1, 1, 7}, Shape3{4, 3, 33}, Shape3{2, 5, 1}}) {
    const int64_t N = s.N, C = s.C, HW = s.HW, M = N * HW;
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(HW);
    std::vector<double> xd = test_values(N * C * HW, 9);
    for (size_t i = 0; i < xd.size(); ++i) xd[i] = 3.0 * xd[i] + 10.0 * double((i / sz(HW)) % sz(C));
    std::vector<T> x = as<T>(xd), y(xd.size());
    std::vector<T> gamma(C), beta(C), rm(C), rv(C), sm(C, T(-1)), si(C, T(-1));
    for (int64_t c = 0; c < C; ++c) {
      gamma[sz(c)] = T(0.5 + 0.25 * double(c));
      beta[sz(c)] = T(-0.1 * double(c));
      rm[sz(c)] = T(0.3 * double(c));
      rv[sz(c)] = T(1.0 + double(c));
    }
    const double momentum = 0.1, eps = 1e-5;
    const std::vector<T> rm0 = rm, rv0 = rv;
    K().batch_norm_forward_train(dt, x.data(), gamma.data(), beta.data(), y.data(), sm.data(), si.data(),
                                 rm.data(), rv.data(), N, C, HW, momentum, eps, nullptr);
    for (int64_t c = 0; c < C; ++c) {
      double mean = 0, var = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < HW; ++i) mean += double(x[sz((n * C + c) * HW + i)]);
      mean /= double(M);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < HW; ++i) {
          const double d = double(x[sz((n * C + c) * HW + i)]) - mean;
          var += d * d;
        }
      var /= double(M);  // biased, for normalising
      const double invstd = 1.0 / std::sqrt(var + eps);
      const double unbiased = M > 1 ? var * double(M) / double(M - 1) : var;
      CAPTURE(c);
      CHECK(double(sm[sz(c)]) == doctest::Approx(mean).epsilon(tol).scale(1));
      CHECK(double(si[sz(c)]) == doctest::Approx(invstd).epsilon(tol));
      CHECK(double(rm[sz(c)]) ==
            doctest::Approx((1 - momentum) * double(rm0[sz(c)]) + momentum * mean).epsilon(tol).scale(1));
      CHECK(double(rv[sz(c)]) ==
            doctest::Approx((1 - momentum) * double(rv0[sz(c)]) + momentum * unbiased).epsilon(tol).scale(1));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < HW; ++i) {
          const size_t k = sz((n * C + c) * HW + i);
          const double ref = (double(x[k]) - mean) * invstd * double(gamma[sz(c)]) + double(beta[sz(c)]);
          // y is as sensitive to rounding as x * invstd * gamma is large
          const double bound = (sizeof(T) == 4 ? 4e-7 : 1e-15) *
                               (1 + std::fabs(double(x[k])) * invstd * std::fabs(double(gamma[sz(c)])));
          REQUIRE(std::fabs(double(y[k]) - ref) <= bound);
        }
    }
  }
}

TEST_CASE("cpu batch_norm_forward_train keeps the variance of values with a large mean") {
  // f32 values 1e4 + N(0, 1): a naive E[x^2] - E[x]^2 in float loses the variance entirely
  const int64_t N = 8, C = 1, HW = 1000;
  std::vector<float> x(N * HW), y(N * HW);
  K().random_normal(DType::f32, x.data(), N * HW, 3, 0, 1e4, 1.0, nullptr);
  double mean = 0, var = 0;
  for (float v : x) mean += v;
  mean /= double(x.size());
  for (float v : x) var += (v - mean) * (v - mean);
  var /= double(x.size());
  float gamma = 1, beta = 0, rm = 0, rv = 1, sm = 0, si = 0;
  K().batch_norm_forward_train(DType::f32, x.data(), &gamma, &beta, y.data(), &sm, &si, &rm, &rv, N, C, HW, 1.0,
                               1e-5, nullptr);
  CHECK(double(si) == doctest::Approx(1.0 / std::sqrt(var + 1e-5)).epsilon(1e-4));
  CHECK(double(rv) == doctest::Approx(var * double(N * HW) / double(N * HW - 1)).epsilon(1e-4));
}

// Forces the batch-norm kernels' order of work for one scope.
struct ForcedBatchNormOrder {
  const cpu::BatchNormOrder before = cpu::batch_norm_order();
  explicit ForcedBatchNormOrder(const char* order) {
    cpu::set_batch_norm_order(std::string(order) == "planes" ? cpu::BatchNormOrder::planes
                                                             : cpu::BatchNormOrder::channels);
  }
  ~ForcedBatchNormOrder() { cpu::set_batch_norm_order(before); }
};

TEST_CASE_TEMPLATE("cpu batch-norm training pair, with and without relu, by planes and by channels, against double sums",
                   T, float, double) {
  const DType dt = dtype_of<T>::value;
  const double tol = sizeof(T) == 4 ? 2e-5 : 1e-12;
  struct Shape3 {
    int64_t N, C, HW;
  };
  // short planes, planes past kShortPlane, planes of several kChunk runs
  for (const Shape3 sh : {Shape3{3, 4, 5}, Shape3{2, 3, 300}, Shape3{5, 2, 1100}})
    for (const bool relu : {false, true})
      for (const char* order : {"planes", "channels"}) {
        const int64_t N = sh.N, C = sh.C, HW = sh.HW, M = N * HW;
        const std::string what = std::string(order) + (relu ? " relu" : "");
        CAPTURE(what);
        CAPTURE(HW);
        const ForcedBatchNormOrder forced(order);
        std::vector<double> xd = test_values(N * C * HW, 21), gd = test_values(N * C * HW, 22);
        for (size_t i = 0; i < xd.size(); ++i) xd[i] = 2.0 * xd[i] + 5.0 * double((i / sz(HW)) % sz(C));
        const std::vector<T> x = as<T>(xd), gy = as<T>(gd);
        std::vector<T> y(x.size()), gx(x.size(), T(1e4)), gamma(sz(C)), beta(sz(C)), rm(sz(C), T(0)), rv(sz(C), T(1)),
            sm(sz(C)), si(sz(C)), gg(sz(C)), gb(sz(C));
        for (int64_t c = 0; c < C; ++c) gamma[sz(c)] = T(0.75 + 0.5 * double(c)), beta[sz(c)] = T(0.2 - 0.3 * double(c));
        const auto forward = relu ? K().batch_norm_relu_forward_train : K().batch_norm_forward_train;
        forward(dt, x.data(), gamma.data(), beta.data(), y.data(), sm.data(), si.data(), rm.data(), rv.data(), N, C, HW,
                0.1, 1e-5, nullptr);
        if (relu)
          K().batch_norm_relu_backward_train(dt, x.data(), y.data(), gy.data(), gamma.data(), sm.data(), si.data(),
                                             gx.data(), gg.data(), gb.data(), N, C, HW, 1e-5, nullptr);
        else
          K().batch_norm_backward_train(dt, x.data(), gy.data(), gamma.data(), sm.data(), si.data(), gx.data(),
                                        gg.data(), gb.data(), N, C, HW, 1e-5, nullptr);
        bool outputs_ok = true, gx_ok = true;
        for (int64_t c = 0; c < C; ++c) {
          CAPTURE(c);
          auto at = [&](int64_t n, int64_t i) { return sz((n * C + c) * HW + i); };
          double mean = 0, var = 0;
          for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < HW; ++i) mean += double(x[at(n, i)]);
          mean /= double(M);
          for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < HW; ++i) var += (double(x[at(n, i)]) - mean) * (double(x[at(n, i)]) - mean);
          const double invstd = 1.0 / std::sqrt(var / double(M) + 1e-5), g = double(gamma[sz(c)]);
          CHECK(double(sm[sz(c)]) == doctest::Approx(mean).epsilon(tol).scale(1));
          CHECK(double(si[sz(c)]) == doctest::Approx(invstd).epsilon(tol));
          // the gradients of y = [relu] (gamma * xhat + beta), with the kernel's own y as relu's mask
          double sum_g = 0, sum_gx = 0;
          for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < HW; ++i) {
              const double xh = (double(x[at(n, i)]) - mean) * invstd, want_y = g * xh + double(beta[sz(c)]);
              outputs_ok = outputs_ok && std::fabs(double(y[at(n, i)]) - (relu ? std::max(0.0, want_y) : want_y)) <=
                                             tol * (1 + std::fabs(want_y));
              const double gi = relu && !(double(y[at(n, i)]) > 0) ? 0.0 : double(gy[at(n, i)]);
              sum_g += gi, sum_gx += gi * xh;
            }
          CHECK(double(gb[sz(c)]) == doctest::Approx(sum_g).epsilon(tol).scale(1));
          CHECK(double(gg[sz(c)]) == doctest::Approx(sum_gx).epsilon(tol).scale(1));
          for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < HW; ++i) {
              const double xh = (double(x[at(n, i)]) - mean) * invstd;
              const double gi = relu && !(double(y[at(n, i)]) > 0) ? 0.0 : double(gy[at(n, i)]);
              const double want = g * invstd / double(M) * (double(M) * gi - sum_g - xh * sum_gx);
              gx_ok = gx_ok && std::fabs(double(gx[at(n, i)]) - want) <= tol * (1 + std::fabs(want));
            }
        }
        CHECK(outputs_ok);
        CHECK(gx_ok);
      }
}

// The winner of every max-pooling window by a plain row-major scan: the
// first maximum wins ties, the first NaN wins over numbers, padding is never
// selected, a window with no real pixel gives -inf and index -1.
template <typename T>
void ref_max_pool(const Pool2dGeometry& g, const std::vector<T>& x, std::vector<T>& y, std::vector<int32_t>& a) {
  y.assign(sz(g.N * g.C * g.P * g.Q), T(0));
  a.assign(y.size(), 0);
  for (int64_t nc = 0; nc < g.N * g.C; ++nc)
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q = 0; q < g.Q; ++q) {
        T best = -std::numeric_limits<T>::infinity();
        int64_t where = -1;
        for (int64_t r = 0; r < g.R; ++r)
          for (int64_t s = 0; s < g.S; ++s) {
            const int64_t h = p * g.stride_h - g.pad_h + r, w = q * g.stride_w - g.pad_w + s;
            if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
            const T v = x[sz((nc * g.H + h) * g.W + w)];
            const bool better = where < 0 || v > best || (std::isnan(v) && !std::isnan(best));
            if (better) best = v, where = h * g.W + w;
          }
        y[sz((nc * g.P + p) * g.Q + q)] = best;
        a[sz((nc * g.P + p) * g.Q + q)] = int32_t(where);
      }
}

TEST_CASE_TEMPLATE("cpu max_pool2d_forward picks the first maximum, NaN over numbers, at every window position", T,
                   float, double) {
  struct Case {
    int64_t H, W, k, stride, pad;
  };
  // Planes narrower than the window, windows clipped on every side, strides
  // 1-3, and planes wide enough for the vectorised run of full windows.
  const Case cases[] = {{7, 9, 3, 2, 1}, {112, 112, 3, 2, 1}, {8, 40, 3, 1, 1}, {5, 37, 2, 2, 0},
                        {6, 6, 5, 1, 2}, {2, 3, 3, 1, 1},     {9, 50, 3, 3, 1}, {4, 1, 3, 2, 1},
                        {3, 70, 4, 2, 2}, {1, 1, 1, 1, 0}};
  PhiloxStream rs(7, 3);
  int checked = 0;
  for (const Case& c : cases)
    for (int values = 0; values < 3; ++values) {  // few distinct values (many ties); with NaNs; all equal
      const Pool2dGeometry g = make_pool2d_geometry(2, 3, c.H, c.W, c.k, c.k, c.stride, c.stride, c.pad, c.pad);
      std::vector<T> x(sz(g.N * g.C * g.H * g.W));
      for (T& v : x) {
        const double u = rs.uniform();
        v = values == 2 ? T(-1.5) : T(std::floor(u * 4) - 2);
        if (values == 1 && rs.uniform() < 0.08) v = std::numeric_limits<T>::quiet_NaN();
      }
      std::vector<T> want_y, y(sz(g.N * g.C * g.P * g.Q));
      std::vector<int32_t> want_a, a(y.size(), 12345);
      ref_max_pool(g, x, want_y, want_a);
      K().max_pool2d_forward(dtype_of<T>::value, g, x.data(), y.data(), a.data(), nullptr);
      int64_t wrong = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        const bool same_y = std::isnan(want_y[i]) ? std::isnan(y[i]) : y[i] == want_y[i];
        if (!same_y || a[i] != want_a[i]) ++wrong;
      }
      CHECK_MESSAGE(wrong == 0, "H=" << c.H << " W=" << c.W << " k=" << c.k << " stride=" << c.stride
                                     << " pad=" << c.pad << " values=" << values);
      ++checked;
    }
  CHECK(checked == 30);
}

TEST_CASE("cpu float kernels reject non-float dtypes") {
  std::vector<uint16_t> h(8);
  CHECK_NOTHROW(K().relu_forward(DType::f16, h.data(), h.data(), 8, nullptr));  // f16 is supported (test_f16.cpp)
  CHECK_THROWS_AS(K().relu_forward(DType::i64, h.data(), h.data(), 2, nullptr), ember::Error);
  CHECK_THROWS_AS(K().sum(DType::i32, h.data(), h.data(), 2, nullptr), ember::Error);
  CHECK_THROWS_WITH_AS(K().gemm(DType::u8, false, false, 1, 1, 1, 1.0, h.data(), 1, h.data(), 1, 0.0, h.data(), 1, nullptr),
                       "cpu gemm: unsupported dtype u8", ember::Error);
}

TEST_CASE_TEMPLATE("cpu softmax_cross_entropy_forward rejects a label outside [0, classes)", T, float, double) {
  const DType dt = dtype_of<T>::value;
  const int64_t N = 3, classes = 4;
  std::vector<T> logits = as<T>(test_values(N * classes, 10)), losses(N), probs(N * classes);
  std::vector<int64_t> labels = {0, 3, 2};
  CHECK_NOTHROW(K().softmax_cross_entropy_forward(dt, logits.data(), labels.data(), losses.data(), probs.data(), N,
                                                  classes, 0.1, nullptr));
  // a correct row: loss = -sum target * log p
  for (int64_t n = 0; n < N; ++n) {
    double mx = -1e300, se = 0;
    for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, double(logits[sz(n * classes + c)]));
    for (int64_t c = 0; c < classes; ++c) se += std::exp(double(logits[sz(n * classes + c)]) - mx);
    double loss = 0;
    for (int64_t c = 0; c < classes; ++c) {
      const double logp = double(logits[sz(n * classes + c)]) - mx - std::log(se);
      const double target = (c == labels[sz(n)] ? 0.9 : 0.0) + 0.1 / double(classes);
      loss -= target * logp;
      CHECK(double(probs[sz(n * classes + c)]) == doctest::Approx(std::exp(logp)).epsilon(1e-6));
    }
    CHECK(double(losses[sz(n)]) == doctest::Approx(loss).epsilon(1e-6));
  }
  for (int64_t bad : {int64_t(-1), classes, int64_t(1000)}) {
    labels = {0, 1, 2};
    labels[1] = bad;
    CAPTURE(bad);
    std::string message;
    try {
      K().softmax_cross_entropy_forward(dt, logits.data(), labels.data(), losses.data(), probs.data(), N, classes,
                                        0.0, nullptr);
    } catch (const ember::Error& e) {
      message = e.what();
    }
    CHECK(message.find("row 1") != std::string::npos);
    CHECK(message.find("label " + std::to_string(bad)) != std::string::npos);
    CHECK(message.find(std::to_string(classes)) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
}
