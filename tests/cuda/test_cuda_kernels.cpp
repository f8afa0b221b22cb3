// tests/cuda/test_cuda_kernels.cpp — the hand-written CUDA kernels of
// cuda/kernels/{memory,elementwise,reduce,loss,input,optimizer,random}.cu
// (memory: fill, cast, copy_2d and transpose_batched, which take every dtype),
// called through the registered CUDA table and compared with the CPU table on
// identical inputs: sizes that are odd or not multiples of a block (1, 7, 33,
// 1000, 4099, 70000), f32 and f64 (and f16 for fill and cast; f16 for the
// rest is tests/cuda/test_cuda_f16.cpp), in-place use,
// NaN rules, ties, bad labels and their message, every SGD form, and the
// Philox fills bit for bit. Kernels whose arithmetic is a single rounding per
// element must give the CPU's bits; the others (a multiply-add that either
// compiler may fuse, sums in another order) are held to a tolerance of a few
// units in the last place, and their exact cases (integer data) to equality.
// Runs on the emulator (build/test_sim) and on a GPU (build/test_ember).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "engine/rng.h"
#include "tests/cuda/cuda_test_env.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;
using ember::testing::cpu_table;
using ember::testing::thrown_message;
using ember::testing::cuda_available;
using ember::testing::cuda_stream;
using ember::testing::cuda_table;

const int64_t kSizes[] = {1, 7, 33, 1000, 4099, 70000};
const DType kFloatTypes[] = {DType::f32, DType::f64};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// Deterministic test values in [lo, hi).
std::vector<double> test_values(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  PhiloxStream rs(seed, 7);
  std::vector<double> v(sz(n));
  for (auto& x : v) x = lo + (hi - lo) * rs.uniform();
  return v;
}

// Small integers in [-k, k]: their sums are exact in double, whatever the order.
std::vector<double> integer_values(int64_t n, uint64_t seed, int k = 8) {
  PhiloxStream rs(seed, 8);
  std::vector<double> v(sz(n));
  for (auto& x : v) x = double(int64_t(rs.below(uint64_t(2 * k + 1))) - k);
  return v;
}

Tensor on_cpu(const std::vector<double>& v, DType dt) {
  return Tensor::from_vector(v, {int64_t(v.size())}, dt, Device::cpu());
}
Tensor on_gpu(const std::vector<double>& v, DType dt) {
  return Tensor::from_vector(v, {int64_t(v.size())}, dt, Device::cuda(0));
}

bool all_finite(const std::vector<double>& v) {
  for (double x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

uint64_t bits_of(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

// The index of the first element where got and want differ by more than
// atol + rtol * |want| (a NaN must meet a NaN; infinities must be equal), or -1.
int64_t first_mismatch(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol) {
  if (got.size() != want.size()) return 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(g) || std::isnan(w)) {
      if (std::isnan(g) != std::isnan(w)) return int64_t(i);
    } else if (std::isinf(g) || std::isinf(w)) {
      if (g != w) return int64_t(i);
    } else if (rtol == 0.0 && atol == 0.0) {
      if (bits_of(g) != bits_of(w)) return int64_t(i);  // also tells -0 from +0
    } else if (std::abs(g - w) > atol + rtol * std::abs(w)) {
      return int64_t(i);
    }
  }
  return -1;
}

#define CHECK_CLOSE(got, want, rtol, atol)                                                                           \
  do {                                                                                                               \
    const std::vector<double>& got_ = (got);                                                                         \
    const std::vector<double>& want_ = (want);                                                                       \
    REQUIRE(got_.size() == want_.size());                                                                            \
    const int64_t bad_ = first_mismatch(got_, want_, (rtol), (atol));                                                \
    CHECK_MESSAGE(bad_ < 0, #got " vs " #want ": element " << bad_ << " is " << (bad_ >= 0 ? got_[sz(bad_)] : 0.0)   \
                                                           << ", expected " << (bad_ >= 0 ? want_[sz(bad_)] : 0.0)); \
  } while (0)
#define CHECK_SAME(got, want) CHECK_CLOSE(got, want, 0.0, 0.0)

// Tolerance of results that may differ by a fused multiply-add or a
// summation order: a few units in the last place of the type.
double ulps(DType dt, double k) { return k * (dt == DType::f32 ? 0x1p-23 : 0x1p-52); }

}  // namespace

// ------------------------------------------------------------------ memory

TEST_CASE("cuda fill: every dtype, exactly n values, the CPU's conversion" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const DType all[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
  // 1 + 2^-11 + 2^-40 lies just above the midpoint of two halves: rounding
  // through float first would tie to even (0x3c00); a single rounding gives
  // 0x3c01. 1 + 2^-8 + 2^-40 is the same for bf16 (0x3f81).
  const double values[] = {2.5, -0.1, 1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-8 + 0x1p-40, 65519.0, 1e6, -3.7, 200.9};
  for (DType dt : all)
    for (double value : values) {
      const bool in_range = is_floating(dt) || (dt == DType::u8 ? value >= 0 && value < 256 : value < 2147483647.0);
      if (!in_range) continue;  // integer conversions of out-of-range values are undefined
      for (int64_t n : kSizes) {
        CAPTURE(dtype_name(dt));
        CAPTURE(value);
        CAPTURE(n);
        const std::vector<double> sentinel(sz(n) + 1, 7.0);
        Tensor gpu = on_gpu(sentinel, dt), cpu = on_cpu(sentinel, dt);
        cuda_table().fill(dt, gpu.raw_data(), n, value, cuda_stream());
        cpu_table().fill(dt, cpu.raw_data(), n, value, nullptr);
        const auto got = gpu.to_double_vector(), want = cpu.to_double_vector();
        CHECK_SAME(got, want);
        CHECK(got[sz(n)] == 7.0);  // nothing written past the end
      }
    }
  // the single rounding, on the bits
  Tensor h = on_gpu({0.0, 0.0}, DType::f16);
  cuda_table().fill(DType::f16, h.raw_data(), 2, 1.0 + 0x1p-11 + 0x1p-40, cuda_stream());
  const Tensor hh = h.to(Device::cpu());
  CHECK(static_cast<const uint16_t*>(hh.raw_data())[0] == 0x3c01);
}

TEST_CASE("cuda cast: f32, f64, f16, bf16 in every direction give the CPU's bits" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const DType floats[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
  for (int64_t n : kSizes) {
    // wide-range values: normal, f16-subnormal, beyond f16's range, specials, ties
    std::vector<double> v = test_values(n, 11, -1.0, 1.0);
    PhiloxStream rs(12, 0);
    for (size_t i = 0; i < v.size(); ++i) v[i] *= std::ldexp(1.0, int(rs.below(48)) - 30);
    const double tie_plus = 1.0 + 0x1p-11 + 0x1p-40;  // just above a midpoint of two halves
    const double f16_subnormal = 0x1p-24 * 1.5, f16_max_plus = 65519.99;
    // bf16: a value just above a tie (one rounding), its largest finite value and the boundary to inf,
    // a subnormal tie
    const double bf16_tie_plus = 1.0 + 0x1p-8 + 0x1p-40, bf16_max = 3.3895313892515355e38;
    const double specials[] = {kNaN,    kInf,          -kInf,           0.0,   -0.0,   tie_plus, 65520.0, f16_max_plus,
                               0x1p-25, f16_subnormal, -0x1p-14 * 0.75, 1e-30, 3.0e38, 1e300,
                               bf16_tie_plus, bf16_max, 3.3962e38, 0x1p-134 * 3.0};
    for (size_t i = 0; i < v.size() && i < std::size(specials); ++i) v[i * 3 % v.size()] = specials[i];
    for (DType src : floats)
      for (DType dst : floats) {
        CAPTURE(n);
        CAPTURE(dtype_name(src));
        CAPTURE(dtype_name(dst));
        Tensor xg = on_gpu(v, src), xc = on_cpu(v, src);
        std::vector<double> sentinel(sz(n) + 1, 5.0);
        Tensor yg = on_gpu(sentinel, dst), yc = on_cpu(sentinel, dst);
        cuda_table().cast(src, xg.raw_data(), dst, yg.raw_data(), n, cuda_stream());
        cpu_table().cast(src, xc.raw_data(), dst, yc.raw_data(), n, nullptr);
        const auto got = yg.to_double_vector(), want = yc.to_double_vector();
        CHECK_SAME(got, want);
        CHECK(got[sz(n)] == 5.0);
      }
  }
  // the single rounding of f64 -> f16, on the bits
  Tensor x = on_gpu({1.0 + 0x1p-11 + 0x1p-40, -(1.0 + 0x1p-11 + 0x1p-40), 1.0 + 0x1p-11}, DType::f64);
  Tensor y = on_gpu({0, 0, 0}, DType::f16);
  cuda_table().cast(DType::f64, x.raw_data(), DType::f16, y.raw_data(), 3, cuda_stream());
  const Tensor yh = y.to(Device::cpu());
  const auto* bits = static_cast<const uint16_t*>(yh.raw_data());
  CHECK(bits[0] == 0x3c01);
  CHECK(bits[1] == 0xbc01);
  CHECK(bits[2] == 0x3c00);  // an exact tie goes to even
  // and of f64 -> bf16
  Tensor xb = on_gpu({1.0 + 0x1p-8 + 0x1p-40, -(1.0 + 0x1p-8 + 0x1p-40), 1.0 + 0x1p-8}, DType::f64);
  Tensor yb = on_gpu({0, 0, 0}, DType::bf16);
  cuda_table().cast(DType::f64, xb.raw_data(), DType::bf16, yb.raw_data(), 3, cuda_stream());
  const Tensor ybh = yb.to(Device::cpu());
  const auto* bbits = static_cast<const uint16_t*>(ybh.raw_data());
  CHECK(bbits[0] == 0x3f81);
  CHECK(bbits[1] == 0xbf81);
  CHECK(bbits[2] == 0x3f80);
  // in place (same dtype) is a no-op
  Tensor z = on_gpu({1.5, -2.0}, DType::f32);
  cuda_table().cast(DType::f32, z.raw_data(), DType::f32, z.raw_data(), 2, cuda_stream());
  CHECK(z.to_double_vector() == std::vector<double>{1.5, -2.0});
}

// ------------------------------------------------------------- elementwise

TEST_CASE("cuda copy_2d: strided blocks of every dtype, the CPU's bits, elements outside the block untouched" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  struct Block {
    int64_t rows, ldx, ldy, cols, x_off, y_off;  // the block starts x_off / y_off elements into x / y
  };
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    for (const Block& k : {Block{1, 5, 5, 5, 0, 0}, Block{7, 3, 8, 3, 0, 5}, Block{33, 10, 4, 4, 6, 0},
                           Block{1000, 70, 71, 33, 37, 38}, Block{5, 4, 4, 0, 0, 0}, Block{0, 4, 4, 4, 0, 0}}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(k.rows);
      CAPTURE(k.cols);
      std::vector<double> x(sz(k.rows * k.ldx)), y(sz(k.rows * k.ldy), 99.0);
      PhiloxStream rs(uint64_t(k.rows), 3);
      for (double& v : x) v = double(rs.below(90));  // exact in every dtype
      const size_t es = dtype_size(dt);
      const Tensor xg = on_gpu(x, dt), xc = on_cpu(x, dt);
      Tensor yg = on_gpu(y, dt), yc = on_cpu(y, dt);
      cuda_table().copy_2d(dt, static_cast<const char*>(xg.raw_data()) + sz(k.x_off) * es, k.ldx,
                           static_cast<char*>(yg.raw_data()) + sz(k.y_off) * es, k.ldy, k.rows, k.cols, cuda_stream());
      cpu_table().copy_2d(dt, static_cast<const char*>(xc.raw_data()) + sz(k.x_off) * es, k.ldx,
                          static_cast<char*>(yc.raw_data()) + sz(k.y_off) * es, k.ldy, k.rows, k.cols, nullptr);
      const std::vector<double> got = yg.to_double_vector();
      CHECK_SAME(got, yc.to_double_vector());
      // The definition: y[y_off + r * ldy + c] = x[x_off + r * ldx + c] inside the block, 99 elsewhere.
      for (int64_t i = 0; i < k.rows * k.ldy; ++i) {
        const int64_t j = i - k.y_off, r = j >= 0 ? j / k.ldy : -1, c = j >= 0 ? j % k.ldy : -1;
        const bool inside = j >= 0 && r < k.rows && c < k.cols;
        REQUIRE(got[sz(i)] == (inside ? x[sz(k.x_off + r * k.ldx + c)] : 99.0));
      }
    }
  CHECK(thrown_message([] { cuda_table().copy_2d(DType::f32, nullptr, 2, nullptr, 4, 1, 3, cuda_stream()); })
            .find("copy_2d: a block of 1x3 does not fit row strides 2 and 4") != std::string::npos);
}

TEST_CASE("cuda transpose_batched: every dtype, the CPU's bits and the definition, tiles cut at every edge" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  struct Dims {
    int64_t batch, rows, cols;
  };
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::u8})
    for (const Dims& d : {Dims{1, 1, 1}, Dims{2, 3, 5}, Dims{3, 32, 32}, Dims{2, 33, 31}, Dims{5, 64, 49},
                          Dims{2, 49, 64}, Dims{1, 1, 1000}, Dims{1, 1000, 1}, Dims{4, 0, 7}, Dims{0, 3, 3}}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(d.batch);
      CAPTURE(d.rows);
      CAPTURE(d.cols);
      const int64_t n = d.batch * d.rows * d.cols;
      std::vector<double> x(sz(n));
      PhiloxStream rs(uint64_t(n + 1), 5);
      for (double& v : x) v = double(rs.below(90));  // exact in every dtype
      const Tensor xg = on_gpu(x, dt), xc = on_cpu(x, dt);
      Tensor yg = on_gpu(std::vector<double>(sz(n), 99.0), dt), yc = on_cpu(std::vector<double>(sz(n), 99.0), dt);
      cuda_table().transpose_batched(dt, xg.raw_data(), yg.raw_data(), d.batch, d.rows, d.cols, cuda_stream());
      cpu_table().transpose_batched(dt, xc.raw_data(), yc.raw_data(), d.batch, d.rows, d.cols, nullptr);
      const std::vector<double> got = yg.to_double_vector(), cpu = yc.to_double_vector();
      CHECK_SAME(got, cpu);
      for (int64_t b = 0; b < d.batch; ++b)  // y[b, j, i] = x[b, i, j]
        for (int64_t i = 0; i < d.rows; ++i)
          for (int64_t j = 0; j < d.cols; ++j)
            REQUIRE(cpu[sz((b * d.cols + j) * d.rows + i)] == x[sz((b * d.rows + i) * d.cols + j)]);
    }
  CHECK(thrown_message([] { cuda_table().transpose_batched(DType::f32, nullptr, nullptr, 1, -2, 3, cuda_stream()); })
            .find("transpose_batched: negative size") != std::string::npos);
}

TEST_CASE("cuda add, relu_forward, relu_backward: the CPU's bits, in place too" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  for (DType dt : kFloatTypes)
    for (int64_t n : kSizes) {
      CAPTURE(dtype_name(dt));
      CAPTURE(n);
      auto a = test_values(n, 1), b = test_values(n, 2);
      a[0] = kNaN;             // relu propagates NaN
      if (n > 3) a[3] = -0.0;  // relu(-0) keeps the sign, as on the CPU
      const auto& K = cuda_table();
      const auto& C = cpu_table();
      const Tensor ag = on_gpu(a, dt), bg = on_gpu(b, dt), ac = on_cpu(a, dt), bc = on_cpu(b, dt);
      Tensor yg = on_gpu(std::vector<double>(sz(n), 9.0), dt), yc = on_cpu(std::vector<double>(sz(n), 9.0), dt);
      K.add(dt, ag.raw_data(), bg.raw_data(), yg.raw_data(), n, cuda_stream());
      C.add(dt, ac.raw_data(), bc.raw_data(), yc.raw_data(), n, nullptr);
      CHECK_SAME(yg.to_double_vector(), yc.to_double_vector());

      // y = y + b, y = y + y
      K.add(dt, yg.raw_data(), bg.raw_data(), yg.raw_data(), n, cuda_stream());
      C.add(dt, yc.raw_data(), bc.raw_data(), yc.raw_data(), n, nullptr);
      K.add(dt, yg.raw_data(), yg.raw_data(), yg.raw_data(), n, cuda_stream());
      C.add(dt, yc.raw_data(), yc.raw_data(), yc.raw_data(), n, nullptr);
      CHECK_SAME(yg.to_double_vector(), yc.to_double_vector());

      // relu out of place and in place
      Tensor rg = on_gpu(std::vector<double>(sz(n), 9.0), dt), rc = on_cpu(std::vector<double>(sz(n), 9.0), dt);
      K.relu_forward(dt, ag.raw_data(), rg.raw_data(), n, cuda_stream());
      C.relu_forward(dt, ac.raw_data(), rc.raw_data(), n, nullptr);
      const auto relu = rg.to_double_vector();
      CHECK_SAME(relu, rc.to_double_vector());
      CHECK(std::isnan(relu[0]));
      Tensor ig = on_gpu(a, dt);
      K.relu_forward(dt, ig.raw_data(), ig.raw_data(), n, cuda_stream());
      CHECK_SAME(ig.to_double_vector(), relu);

      // relu backward: gx = y > 0 ? gy : 0, into a fresh buffer and over gy
      Tensor gxg = on_gpu(std::vector<double>(sz(n), 9.0), dt), gxc = on_cpu(std::vector<double>(sz(n), 9.0), dt);
      K.relu_backward(dt, rg.raw_data(), bg.raw_data(), gxg.raw_data(), n, cuda_stream());
      C.relu_backward(dt, rc.raw_data(), bc.raw_data(), gxc.raw_data(), n, nullptr);
      const auto grad = gxg.to_double_vector();
      CHECK_SAME(grad, gxc.to_double_vector());
      CHECK(grad[0] == 0.0);  // y = NaN is not > 0
      Tensor gyg = on_gpu(b, dt);
      K.relu_backward(dt, rg.raw_data(), gyg.raw_data(), gyg.raw_data(), n, cuda_stream());
      CHECK_SAME(gyg.to_double_vector(), grad);
    }
}

TEST_CASE("cuda axpby: every form, beta == 0 ignores NaN in y, exact aliasing" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  struct Form {
    double alpha, beta;
    bool exact;  // one rounding per element: the CPU's bits
  };
  const Form forms[] = {{0.5, 0.0, true}, {-3.0, 0.0, true}, {1.0, 1.0, true}, {0.3, -1.7, false}, {1.0, 0.9, false}};
  for (DType dt : kFloatTypes)
    for (int64_t n : kSizes)
      for (const Form& f : forms) {
        CAPTURE(dtype_name(dt));
        CAPTURE(n);
        CAPTURE(f.alpha);
        CAPTURE(f.beta);
        const auto x = test_values(n, 3);
        auto y = test_values(n, 4);
        if (f.beta == 0.0)
          for (size_t i = 0; i < y.size(); i += 2) y[i] = kNaN;  // never read
        const Tensor xg = on_gpu(x, dt), xc = on_cpu(x, dt);
        Tensor yg = on_gpu(y, dt), yc = on_cpu(y, dt);
        cuda_table().axpby(dt, f.alpha, xg.raw_data(), f.beta, yg.raw_data(), n, cuda_stream());
        cpu_table().axpby(dt, f.alpha, xc.raw_data(), f.beta, yc.raw_data(), n, nullptr);
        const auto got = yg.to_double_vector(), want = yc.to_double_vector();
        if (f.exact)
          CHECK_SAME(got, want);
        else
          CHECK_CLOSE(got, want, ulps(dt, 4), ulps(dt, 8));
        if (f.beta == 0.0) CHECK(all_finite(got));

        // x and y the same array: y = (alpha + beta) * y, one rounding each way in the exact forms
        Tensor zg = on_gpu(x, dt), zc = on_cpu(x, dt);
        cuda_table().axpby(dt, f.alpha, zg.raw_data(), f.beta, zg.raw_data(), n, cuda_stream());
        cpu_table().axpby(dt, f.alpha, zc.raw_data(), f.beta, zc.raw_data(), n, nullptr);
        if (f.exact)
          CHECK_SAME(zg.to_double_vector(), zc.to_double_vector());
        else
          CHECK_CLOSE(zg.to_double_vector(), zc.to_double_vector(), ulps(dt, 4), ulps(dt, 8));
      }
}

TEST_CASE("cuda bias_add: y[o, c, i] += b[c], the CPU's bits" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const int64_t shapes[][3] = {{1, 1, 1},    {2, 3, 5},     {1, 7, 1},    {33, 130, 1}, {3, 33, 1000},
                               {2, 5, 4099}, {1, 1, 70000}, {7, 1000, 1}, {1, 70000, 1}};
  for (DType dt : kFloatTypes)
    for (const auto& s : shapes) {
      const int64_t outer = s[0], channels = s[1], inner = s[2], n = outer * channels * inner;
      CAPTURE(dtype_name(dt));
      CAPTURE(outer);
      CAPTURE(channels);
      CAPTURE(inner);
      const auto y = test_values(n, 5), b = test_values(channels, 6, -4.0, 4.0);
      Tensor yg = on_gpu(y, dt), yc = on_cpu(y, dt);
      const Tensor bg = on_gpu(b, dt), bc = on_cpu(b, dt);
      cuda_table().bias_add(dt, yg.raw_data(), bg.raw_data(), outer, channels, inner, cuda_stream());
      cpu_table().bias_add(dt, yc.raw_data(), bc.raw_data(), outer, channels, inner, nullptr);
      CHECK_SAME(yg.to_double_vector(), yc.to_double_vector());
    }
}

TEST_CASE("cuda bias_backward: per-channel sums in double, deterministic, exact on integers" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  // inner == 1 with >= 128 channels takes the column kernel, the rest one block
  // per channel; 8200 channels is more blocks than the grid cap (blocks loop).
  const int64_t shapes[][3] = {{1, 1, 1},    {5, 1, 1},     {3, 7, 33},    {1000, 10, 1}, {70, 200, 1},
                               {4, 3, 4099}, {1, 1, 70000}, {2, 33, 1000}, {1, 8200, 2},  {257, 129, 1}};
  for (DType dt : kFloatTypes)
    for (const auto& s : shapes) {
      const int64_t outer = s[0], channels = s[1], inner = s[2], n = outer * channels * inner;
      CAPTURE(dtype_name(dt));
      CAPTURE(outer);
      CAPTURE(channels);
      CAPTURE(inner);
      for (int integers = 0; integers < 2; ++integers) {
        CAPTURE(integers);
        const auto gy = integers ? integer_values(n, 7) : test_values(n, 7);
        const Tensor gg = on_gpu(gy, dt), gc = on_cpu(gy, dt);
        const std::vector<double> sentinel(sz(channels) + 1, 3.0);
        Tensor bg = on_gpu(sentinel, dt), bc = on_cpu(sentinel, dt);
        cuda_table().bias_backward(dt, gg.raw_data(), bg.raw_data(), outer, channels, inner, cuda_stream());
        cpu_table().bias_backward(dt, gc.raw_data(), bc.raw_data(), outer, channels, inner, nullptr);
        const auto got = bg.to_double_vector(), want = bc.to_double_vector();
        // the sums are in double: only the final rounding to f32, or double round-off, may differ
        if (integers)
          CHECK_SAME(got, want);
        else
          CHECK_CLOSE(got, want, ulps(dt, 2), dt == DType::f32 ? 1e-6 : 1e-12);
        CHECK(got[sz(channels)] == 3.0);
        // the same bits on a second run
        Tensor again = on_gpu(sentinel, dt);
        cuda_table().bias_backward(dt, gg.raw_data(), again.raw_data(), outer, channels, inner, cuda_stream());
        CHECK_SAME(again.to_double_vector(), got);
      }
    }
}

// -------------------------------------------------------------- reductions

TEST_CASE("cuda sum: deterministic, matches the CPU, exact on integers" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  // 300001: more than the 1024 partial sums' worth of blocks (grid-stride)
  const int64_t sizes[] = {0, 1, 7, 33, 255, 256, 257, 1000, 4099, 70000, 300001};
  for (DType dt : kFloatTypes)
    for (int64_t n : sizes) {
      CAPTURE(dtype_name(dt));
      CAPTURE(n);
      for (int integers = 0; integers < 2; ++integers) {
        CAPTURE(integers);
        auto x = integers ? integer_values(n, 9) : test_values(n, 9);
        if (!integers && n > 1) x[sz(n) - 1] = 1e4;  // the last element counts
        const Tensor xg = on_gpu(x, dt), xc = on_cpu(x, dt);
        Tensor yg = on_gpu({5.0}, dt), yc = on_cpu({5.0}, dt);
        cuda_table().sum(dt, xg.raw_data(), yg.raw_data(), n, cuda_stream());
        cpu_table().sum(dt, xc.raw_data(), yc.raw_data(), n, nullptr);
        const double got = yg.item(), want = yc.item();
        double abs_sum = 0;
        for (double v : x) abs_sum += std::abs(v);
        if (integers)
          CHECK(got == want);
        else
          CHECK(std::abs(got - want) <= ulps(dt, 1) * std::abs(want) + 1e-14 * abs_sum);
        Tensor again = on_gpu({5.0}, dt);
        cuda_table().sum(dt, xg.raw_data(), again.raw_data(), n, cuda_stream());
        CHECK(bits_of(again.item()) == bits_of(got));
      }
    }
  // NaN and infinities propagate
  for (DType dt : kFloatTypes) {
    auto x = test_values(5000, 10);
    x[4321] = kNaN;
    Tensor y = on_gpu({0.0}, dt);
    cuda_table().sum(dt, on_gpu(x, dt).raw_data(), y.raw_data(), 5000, cuda_stream());
    CHECK(std::isnan(y.item()));
    x[4321] = -kInf;
    cuda_table().sum(dt, on_gpu(x, dt).raw_data(), y.raw_data(), 5000, cuda_stream());
    CHECK(y.item() == -kInf);
  }
}

TEST_CASE("cuda count_equal: the CPU's count, added to the device total, over one and many block strides" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(256), int64_t(257), int64_t(5000)}) {
    CAPTURE(n);
    PhiloxStream rs(21, uint64_t(n));
    std::vector<double> a(sz(n)), b(sz(n));
    for (int64_t i = 0; i < n; ++i) {
      a[sz(i)] = double(rs.below(4));
      b[sz(i)] = i % 3 == 0 ? a[sz(i)] : double(rs.below(4));  // some equal for sure
    }
    const Tensor ag = Tensor::from_vector(a, {n}, DType::i64, Device::cuda(0));
    const Tensor bg = Tensor::from_vector(b, {n}, DType::i64, Device::cuda(0));
    const Tensor ac = Tensor::from_vector(a, {n}, DType::i64, Device::cpu());
    const Tensor bc = Tensor::from_vector(b, {n}, DType::i64, Device::cpu());
    Tensor total_g = Tensor::from_vector({3.0}, {1}, DType::f64, Device::cuda(0));
    double total_c = 3.0;
    for (int rep = 0; rep < 2; ++rep) {  // it adds, launch after launch
      cuda_table().count_equal(DType::i64, static_cast<const int64_t*>(ag.raw_data()),
                               static_cast<const int64_t*>(bg.raw_data()), n, static_cast<double*>(total_g.raw_data()),
                               cuda_stream());
      cpu_table().count_equal(DType::i64, static_cast<const int64_t*>(ac.raw_data()),
                              static_cast<const int64_t*>(bc.raw_data()), n, &total_c, nullptr);
    }
    CHECK(total_g.to_double_vector()[0] == total_c);
    CHECK(total_c > 3.0);
  }
}

TEST_CASE("cuda argmax_rows: first index of the largest, NaN wins, ties go first" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  // cols >= 1024 take a block per row, narrower rows a warp per row
  const int64_t shapes[][2] = {{1, 1},    {5, 1},    {3, 7},     {37, 33},   {9, 1000},
                               {4, 1024}, {3, 4099}, {2, 70000}, {1000, 10}, {4099, 3}};
  for (DType dt : kFloatTypes)
    for (const auto& s : shapes)
      for (int pattern = 0; pattern < 4; ++pattern) {
        const int64_t rows = s[0], cols = s[1], n = rows * cols;
        CAPTURE(dtype_name(dt));
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(pattern);
        std::vector<double> x;
        if (pattern == 0) {  // distinct values
          x = test_values(n, 13);
        } else if (pattern == 1) {  // few levels: many ties, the max tied across threads and warps
          x = integer_values(n, 14, 2);
        } else if (pattern == 2) {  // every row equal (-0 and +0 tie too), and rows of -inf
          x.assign(sz(n), 0.0);
          for (int64_t i = 0; i < n; i += 3) x[sz(i)] = -0.0;
          for (int64_t r = 1; r < rows; r += 2)
            for (int64_t c = 0; c < cols; ++c) x[sz(r * cols + c)] = -kInf;
        } else {  // NaN: first NaN wins, also at column 0 and behind a +inf
          x = test_values(n, 15);
          PhiloxStream rs(16, 0);
          for (int64_t r = 0; r < rows; ++r) {
            double* row = x.data() + r * cols;
            if (r % 4 == 1) row[rs.below(uint64_t(cols))] = kInf;
            if (r % 4 == 2) row[0] = kNaN;
            if (r % 4 != 3) {
              const uint64_t a = rs.below(uint64_t(cols)), b = rs.below(uint64_t(cols));
              row[a] = kNaN;
              row[b] = kNaN;
            }
          }
        }
        const Tensor xg = on_gpu(x, dt), xc = on_cpu(x, dt);
        Tensor ig = Tensor::full({rows}, -5.0, DType::i64, Device::cuda(0));
        Tensor ic = Tensor::full({rows}, -5.0, DType::i64, Device::cpu());
        cuda_table().argmax_rows(dt, xg.raw_data(), static_cast<int64_t*>(ig.raw_data()), rows, cols, cuda_stream());
        cpu_table().argmax_rows(dt, xc.raw_data(), static_cast<int64_t*>(ic.raw_data()), rows, cols, nullptr);
        CHECK_SAME(ig.to_double_vector(), ic.to_double_vector());
      }
  // a known answer: ties and NaN, independent of the CPU kernel
  const std::vector<double> x = {1,     3,     3,     2,      // ties: the first
                                 kNaN,  5,     kNaN,  1,      // NaN at 0
                                 -kInf, -kInf, -kInf, -kInf,  // all -inf: 0
                                 0,     7,     kNaN,  7};     // NaN beats the max
  Tensor idx = Tensor::zeros({4}, DType::i64, Device::cuda(0));
  cuda_table().argmax_rows(DType::f32, Tensor::from_vector(x, {4, 4}, DType::f32, Device::cuda(0)).raw_data(),
                           static_cast<int64_t*>(idx.raw_data()), 4, 4, cuda_stream());
  CHECK(idx.to_double_vector() == std::vector<double>{1, 0, 0, 2});
  // rows without columns point at 0, as on the CPU
  Tensor empty_rows = Tensor::full({3}, 9.0, DType::i64, Device::cuda(0));
  cuda_table().argmax_rows(DType::f64, nullptr, static_cast<int64_t*>(empty_rows.raw_data()), 3, 0, cuda_stream());
  CHECK(empty_rows.to_double_vector() == std::vector<double>{0, 0, 0});
}

// -------------------------------------------------------------------- loss

namespace {

struct LossCase {
  int64_t N, classes;
  double smoothing;
};

std::vector<double> labels_for(int64_t N, int64_t classes, uint64_t seed) {
  PhiloxStream rs(seed, 3);
  std::vector<double> l(sz(N));
  for (auto& v : l) v = double(rs.below(uint64_t(classes)));
  return l;
}

}  // namespace

TEST_CASE("cuda softmax_cross_entropy forward and backward match the CPU" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  // classes >= 1024 take a block per row, narrower rows a warp per row
  const LossCase cases[] = {{1, 1, 0.0},    {1, 7, 0.1},    {5, 10, 0.0},    {37, 33, 0.1},  {3, 1000, 0.0},
                            {2, 1024, 0.2}, {2, 4099, 0.1}, {1, 70000, 0.0}, {4099, 3, 0.1}, {300, 100, 0.0}};
  for (DType dt : kFloatTypes)
    for (const LossCase& c : cases) {
      CAPTURE(dtype_name(dt));
      CAPTURE(c.N);
      CAPTURE(c.classes);
      CAPTURE(c.smoothing);
      const int64_t n = c.N * c.classes;
      auto x = test_values(n, 17, -6.0, 6.0);
      if (c.N > 1) x[sz(c.classes)] = 40.0;  // a confident row: tiny loss and probabilities
      const auto labels = labels_for(c.N, c.classes, 18);
      const Tensor xg = on_gpu(x, dt), xc = on_cpu(x, dt);
      const Tensor lg = Tensor::from_vector(labels, {c.N}, DType::i64, Device::cuda(0));
      const Tensor lc = Tensor::from_vector(labels, {c.N}, DType::i64, Device::cpu());
      Tensor pg = on_gpu(std::vector<double>(sz(n), 9.0), dt), pc = on_cpu(std::vector<double>(sz(n), 9.0), dt);
      Tensor sg = on_gpu(std::vector<double>(sz(c.N), 9.0), dt), scpu = on_cpu(std::vector<double>(sz(c.N), 9.0), dt);
      const auto* lgp = static_cast<const int64_t*>(lg.raw_data());
      const auto* lcp = static_cast<const int64_t*>(lc.raw_data());
      cuda_table().softmax_cross_entropy_forward(dt, xg.raw_data(), lgp, sg.raw_data(), pg.raw_data(), c.N, c.classes,
                                                 c.smoothing, cuda_stream());
      cpu_table().softmax_cross_entropy_forward(dt, xc.raw_data(), lcp, scpu.raw_data(), pc.raw_data(), c.N, c.classes,
                                                c.smoothing, nullptr);
      const double rtol = dt == DType::f32 ? 1e-6 : 1e-12;
      CHECK_CLOSE(pg.to_double_vector(), pc.to_double_vector(), rtol, dt == DType::f32 ? 1e-30 : 1e-300);
      CHECK_CLOSE(sg.to_double_vector(), scpu.to_double_vector(), rtol, dt == DType::f32 ? 1e-9 : 1e-15);

      // backward from the same probabilities, with a device grad_loss
      const Tensor gl_g = on_gpu({0.75}, dt), gl_c = on_cpu({0.75}, dt);
      const double scale = 1.0 / double(c.N);
      Tensor gg = on_gpu(std::vector<double>(sz(n), 9.0), dt), gc = on_cpu(std::vector<double>(sz(n), 9.0), dt);
      cuda_table().softmax_cross_entropy_backward(dt, pc.to(Device::cuda(0)).raw_data(), lgp, gl_g.raw_data(), scale,
                                                  gg.raw_data(), c.N, c.classes, c.smoothing, cuda_stream());
      cpu_table().softmax_cross_entropy_backward(dt, pc.raw_data(), lcp, gl_c.raw_data(), scale, gc.raw_data(), c.N,
                                                 c.classes, c.smoothing, nullptr);
      CHECK_SAME(gg.to_double_vector(), gc.to_double_vector());  // one product of one difference: the same bits
    }
}

TEST_CASE("cuda softmax_cross_entropy: a label outside [0, classes) is the CPU's error" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  for (DType dt : kFloatTypes)
    for (int64_t classes : {int64_t(5), int64_t(1500)}) {  // warp and block forward
      CAPTURE(dtype_name(dt));
      CAPTURE(classes);
      const int64_t N = 40;
      for (double bad : {double(classes), -1.0, 1e9}) {
        CAPTURE(bad);
        auto labels = labels_for(N, classes, 19);
        labels[29] = bad;  // a later bad row does not hide the first
        labels[11] = bad;
        const auto x = test_values(N * classes, 20);
        const Tensor xg = on_gpu(x, dt), xc = on_cpu(x, dt);
        const Tensor lg = Tensor::from_vector(labels, {N}, DType::i64, Device::cuda(0));
        const Tensor lc = Tensor::from_vector(labels, {N}, DType::i64, Device::cpu());
        Tensor pg = on_gpu(x, dt), pc = on_cpu(x, dt), sg = on_gpu(std::vector<double>(sz(N)), dt),
               scpu = on_cpu(std::vector<double>(sz(N)), dt);
        const Tensor gl_g = on_gpu({1.0}, dt), gl_c = on_cpu({1.0}, dt);
        const auto* lgp = static_cast<const int64_t*>(lg.raw_data());
        const auto* lcp = static_cast<const int64_t*>(lc.raw_data());

        // The launch queues the check and does not wait; the host's next wait
        // for the stream (here an explicit one) throws.
        cuda_table().softmax_cross_entropy_forward(dt, xg.raw_data(), lgp, sg.raw_data(), pg.raw_data(), N, classes, 0.1,
                                                   cuda_stream());
        const std::string fwd_gpu = thrown_message([&] { memory_backend(DeviceType::CUDA).synchronize(0); });
        const std::string fwd_cpu = thrown_message([&] {
          cpu_table().softmax_cross_entropy_forward(dt, xc.raw_data(), lcp, scpu.raw_data(), pc.raw_data(), N, classes,
                                                    0.1, nullptr);
        });
        CHECK(fwd_gpu == fwd_cpu);
        CHECK(fwd_gpu.find("of row 11 ") != std::string::npos);

        // (a read of any device value is a wait: it throws as well)
        cuda_table().softmax_cross_entropy_backward(dt, pg.raw_data(), lgp, gl_g.raw_data(), 1.0, pg.raw_data(), N,
                                                    classes, 0.1, cuda_stream());
        const std::string bwd_gpu = thrown_message([&] { (void)gl_g.to_double_vector(); });
        const std::string bwd_cpu = thrown_message([&] {
          cpu_table().softmax_cross_entropy_backward(dt, pc.raw_data(), lcp, gl_c.raw_data(), 1.0, pc.raw_data(), N,
                                                     classes, 0.1, nullptr);
        });
        CHECK(bwd_gpu == bwd_cpu);
        CHECK(bwd_gpu.find("softmax_cross_entropy_backward: label ") == 0);

        // once thrown, the record is clear: the next wait does not throw again
        CHECK(thrown_message([&] { memory_backend(DeviceType::CUDA).synchronize(0); }).empty());
        // the device is still usable afterwards, and good labels pass
        labels[11] = labels[29] = 0;
        const Tensor ok = Tensor::from_vector(labels, {N}, DType::i64, Device::cuda(0));
        cuda_table().softmax_cross_entropy_forward(dt, xg.raw_data(), static_cast<const int64_t*>(ok.raw_data()),
                                                   sg.raw_data(), pg.raw_data(), N, classes, 0.1, cuda_stream());
        CHECK(all_finite(sg.to_double_vector()));
      }
    }
}

// ------------------------------------------------------------------- input

TEST_CASE("cuda normalize_u8: (x / 255 - mean) * inv_std per channel" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  for (DType dt : kFloatTypes)
    for (int channels : {1, 3, 8})
      for (int64_t HW : {int64_t(1), int64_t(33), int64_t(4099)}) {
        const int64_t N = HW > 1000 ? 2 : 5, n = N * channels * HW;
        CAPTURE(dtype_name(dt));
        CAPTURE(channels);
        CAPTURE(HW);
        ChannelNorm norm;
        norm.channels = channels;
        for (int c = 0; c < channels; ++c) {
          norm.mean[c] = 0.1f * float(c + 1);
          norm.inv_std[c] = 1.0f / (0.2f + 0.05f * float(c));
        }
        std::vector<double> px(sz(n));
        PhiloxStream rs(21, 0);
        for (auto& v : px) v = double(rs.below(256));
        px[0] = 0, px[sz(n) - 1] = 255;
        const Tensor xg = Tensor::from_vector(px, {n}, DType::u8, Device::cuda(0));
        const Tensor xc = Tensor::from_vector(px, {n}, DType::u8, Device::cpu());
        Tensor yg = on_gpu(std::vector<double>(sz(n), 9.0), dt), yc = on_cpu(std::vector<double>(sz(n), 9.0), dt);
        cuda_table().normalize_u8(dt, static_cast<const uint8_t*>(xg.raw_data()), yg.raw_data(), N, HW, norm,
                                  cuda_stream());
        cpu_table().normalize_u8(dt, static_cast<const uint8_t*>(xc.raw_data()), yc.raw_data(), N, HW, norm, nullptr);
        // x * a + b: one fused multiply-add or two roundings, values up to ~5
        CHECK_CLOSE(yg.to_double_vector(), yc.to_double_vector(), ulps(dt, 2), ulps(dt, 16));
      }
  ChannelNorm bad;
  bad.channels = 9;
  Tensor y = on_gpu({0.0}, DType::f32);
  const std::string msg =
      thrown_message([&] { cuda_table().normalize_u8(DType::f32, nullptr, y.raw_data(), 1, 1, bad, cuda_stream()); });
  CHECK(msg == "normalize_u8: channels must be in [1, 8], got 9");
}

// --------------------------------------------------------------- optimizer

TEST_CASE("cuda sgd_update: every form matches the CPU" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  struct Form {
    double momentum, wd;
    bool nesterov, first;
    double grad_scale;
  };
  const Form forms[] = {{0.0, 0.0, false, false, 1.0},      {0.0, 1e-4, false, true, 0.5},
                        {0.9, 0.0, false, true, 1.0},       {0.9, 5e-4, true, true, 1.0},
                        {0.9, 5e-4, false, false, 1.0},     {0.9, 5e-4, true, false, 0.25},
                        {0.5, 0.0, true, false, 1.0 / 1024}};
  for (DType dt : kFloatTypes)
    for (int64_t n : kSizes)
      for (const Form& f : forms)
        for (int with_buffer = 0; with_buffer < 2; ++with_buffer) {
          if (f.momentum != 0.0 && !with_buffer) continue;
          CAPTURE(dtype_name(dt));
          CAPTURE(n);
          CAPTURE(f.momentum);
          CAPTURE(f.nesterov);
          CAPTURE(f.first);
          CAPTURE(with_buffer);
          SgdParams p;
          p.lr = 0.1, p.momentum = f.momentum, p.weight_decay = f.wd, p.nesterov = f.nesterov;
          p.first_step = f.first, p.grad_scale = f.grad_scale;
          const auto w = test_values(n, 22), g = test_values(n, 23), buf = test_values(n, 24);
          Tensor wg = on_gpu(w, dt), wc = on_cpu(w, dt), bg = on_gpu(buf, dt), bc = on_cpu(buf, dt);
          const Tensor gg = on_gpu(g, dt), gc = on_cpu(g, dt);
          cuda_table().sgd_update(dt, wg.raw_data(), gg.raw_data(), with_buffer ? bg.raw_data() : nullptr, n, p,
                                  cuda_stream());
          cpu_table().sgd_update(dt, wc.raw_data(), gc.raw_data(), with_buffer ? bc.raw_data() : nullptr, n, p,
                                 nullptr);
          // a few multiply-adds that either compiler may fuse
          CHECK_CLOSE(wg.to_double_vector(), wc.to_double_vector(), ulps(dt, 4), ulps(dt, 4));
          const auto buf_after = bg.to_double_vector();
          CHECK_CLOSE(buf_after, bc.to_double_vector(), ulps(dt, 4), ulps(dt, 4));
          if (f.momentum == 0.0) CHECK_SAME(buf_after, on_cpu(buf, dt).to_double_vector());  // untouched
          // the step did something
          CHECK(wg.to_double_vector() != on_cpu(w, dt).to_double_vector());
        }
  // momentum without a buffer is the CPU's error
  SgdParams p;
  Tensor w = on_gpu({1.0}, DType::f32), g = on_gpu({1.0}, DType::f32);
  const std::string msg = thrown_message(
      [&] { cuda_table().sgd_update(DType::f32, w.raw_data(), g.raw_data(), nullptr, 1, p, cuda_stream()); });
  CHECK(msg == thrown_message([&] {
          float wc = 1, gc = 1;
          cpu_table().sgd_update(DType::f32, &wc, &gc, nullptr, 1, p, nullptr);
        }));
  CHECK(msg.find("needs a momentum buffer") != std::string::npos);
}

// ------------------------------------------------------------------ random

TEST_CASE("cuda random_uniform and random_normal draw the CPU's Philox streams" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const bool simulated = ember::cuda::is_simulated();
  for (DType dt : kFloatTypes)
    for (int64_t n : kSizes)
      for (uint64_t offset : {uint64_t(0), uint64_t(5), uint64_t(0xffffffffull)}) {  // the block counter carries
        CAPTURE(dtype_name(dt));
        CAPTURE(n);
        CAPTURE(offset);
        const std::vector<double> sentinel(sz(n) + 1, 42.0);
        Tensor ug = on_gpu(sentinel, dt), uc = on_cpu(sentinel, dt);
        cuda_table().random_uniform(dt, ug.raw_data(), n, 1234, offset, -0.5, 2.0, cuda_stream());
        cpu_table().random_uniform(dt, uc.raw_data(), n, 1234, offset, -0.5, 2.0, nullptr);
        const auto u = ug.to_double_vector();
        CHECK_SAME(u, uc.to_double_vector());  // pure arithmetic: bit for bit
        CHECK(u[sz(n)] == 42.0);
        if (n >= 1000) CHECK(u[0] != u[sz(n) - 1]);

        Tensor ng = on_gpu(sentinel, dt), nc = on_cpu(sentinel, dt);
        cuda_table().random_normal(dt, ng.raw_data(), n, 99, offset, 0.25, 3.0, cuda_stream());
        cpu_table().random_normal(dt, nc.raw_data(), n, 99, offset, 0.25, 3.0, nullptr);
        const auto z = ng.to_double_vector();
        // the emulator calls the host's libm: bit for bit; a GPU's log/cos/sin
        // may differ from it in the last bit of the double
        if (simulated)
          CHECK_SAME(z, nc.to_double_vector());
        else
          CHECK_CLOSE(z, nc.to_double_vector(), ulps(dt, dt == DType::f32 ? 1 : 8), ulps(dt, 8));
        CHECK(z[sz(n)] == 42.0);
      }
}

// ------------------------------------------------------------------ dtypes

TEST_CASE("cuda kernels refuse dtypes they do not support" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const auto& K = cuda_table();
  const Stream s = cuda_stream();
  const DType h = DType::i32;  // (f16 is supported: tests/cuda/test_cuda_f16.cpp)
  ChannelNorm norm;
  norm.channels = 1;
  SgdParams p;
  struct Case {
    const char* name;
    std::function<void()> call;
  };
  const Case cases[] = {
      {"add", [&] { K.add(h, nullptr, nullptr, nullptr, 1, s); }},
      {"axpby", [&] { K.axpby(h, 1.0, nullptr, 0.0, nullptr, 1, s); }},
      {"relu_forward", [&] { K.relu_forward(h, nullptr, nullptr, 1, s); }},
      {"relu_backward", [&] { K.relu_backward(h, nullptr, nullptr, nullptr, 1, s); }},
      {"bias_add", [&] { K.bias_add(h, nullptr, nullptr, 1, 1, 1, s); }},
      {"bias_backward", [&] { K.bias_backward(h, nullptr, nullptr, 1, 1, 1, s); }},
      {"sum", [&] { K.sum(h, nullptr, nullptr, 1, s); }},
      {"argmax_rows", [&] { K.argmax_rows(h, nullptr, nullptr, 1, 1, s); }},
      {"softmax_cross_entropy_forward",
       [&] { K.softmax_cross_entropy_forward(h, nullptr, nullptr, nullptr, nullptr, 1, 2, 0.0, s); }},
      {"softmax_cross_entropy_backward",
       [&] { K.softmax_cross_entropy_backward(h, nullptr, nullptr, nullptr, 1.0, nullptr, 1, 2, 0.0, s); }},
      {"normalize_u8", [&] { K.normalize_u8(h, nullptr, nullptr, 1, 1, norm, s); }},
      {"sgd_update", [&] { K.sgd_update(h, nullptr, nullptr, nullptr, 1, p, s); }},
      {"random_uniform", [&] { K.random_uniform(h, nullptr, 1, 0, 0, 0.0, 1.0, s); }},
      {"random_normal", [&] { K.random_normal(h, nullptr, 1, 0, 0, 0.0, 1.0, s); }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CHECK(thrown_message(c.call) == std::string("cuda ") + c.name + ": unsupported dtype i32");
  }
  CHECK(thrown_message([&] { K.cast(DType::i32, nullptr, DType::f32, nullptr, 1, s); }) ==
        "cuda cast: unsupported dtypes i32 -> f32 (f32, f64, f16, bf16 only)");
  CHECK(thrown_message([&] { K.cast(DType::f16, nullptr, DType::u8, nullptr, 1, s); }) ==
        "cuda cast: unsupported dtypes f16 -> u8 (f32, f64, f16, bf16 only)");
}
