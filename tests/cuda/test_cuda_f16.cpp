// tests/cuda/test_cuda_f16.cpp — every kernel of ops/kernels.h with dt f16
// and with dt bf16 (mixed precision: 16-bit storage, f32 compute and
// accumulation, one rounding per stored 16-bit result) on the CUDA table,
// against the CPU table run in f32 on the very same inputs. Every test is a
// TEST_CASE_TEMPLATE over the 16-bit type H (f16, bf16).
//
// Inputs are rounded to H first (engine/half.h, engine/bfloat16.h), so both
// sides see the same numbers; the CPU computes in f32 and the CUDA kernel in
// f32 (or double) before rounding to H, so results agree within one rounding
// of the result (plus f32 summation-order noise): two half-ulps relative
// (2^-10 for f16, 2^-7 for bf16), or 2e-3 (f16) / 1.6e-2 (bf16: 8x, its
// unit roundoff 2^-8 against 2^-11) of the result's scale for
// GEMM/convolution/pooling/batch-norm outputs. Where the arithmetic is a
// single f32 operation whose result rounds the same way (add, relu, max
// pooling, argmax) the CUDA result must equal the CPU's f32 result rounded
// to H bit for bit (a NaN only has to be a NaN: CUDA's bf16 NaN is the
// canonical 0x7fff). Batch-norm parameters and statistics and the loss's
// losses/probs/grad_loss are f32 on both sides (ops/kernels.h). Also:
// NaN/inf propagation through sum, and overflow of the 16-bit result to inf.
// Shapes are small (the emulator runs every thread) but take every kernel
// variant: both GEMM tiles, split-K, split batch-norm channels, warp- and
// block-per-row reductions.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/bfloat16.h"
#include "engine/half.h"
#include "engine/rng.h"
#include "tests/cuda/cuda_test_env.h"

namespace {

using namespace ember;
using ember::testing::cpu_table;
using ember::testing::cuda_available;
using ember::testing::cuda_stream;
using ember::testing::cuda_table;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr DType kF = DType::f32;

// The 16-bit type under test: its dtype, two half-ulps relative (one
// rounding, with room for f32 order noise), the half-ulp, and how much
// wider than f16's its tolerances are (bf16's unit roundoff 2^-8 is 8x f16's 2^-11).
template <typename H> constexpr DType kHalf = dtype_of<H>::value;
template <typename H> constexpr double kHalfRel = std::is_same_v<H, f16> ? 0x1p-10 : 0x1p-7;
template <typename H> constexpr double kHalfUlp = std::is_same_v<H, f16> ? 0x1p-11 : 0x1p-8;
template <typename H> constexpr double kTol = std::is_same_v<H, f16> ? 1.0 : 8.0;

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// x rounded to the nearest H, as Tensor::from_vector and the CPU's conversions do
// (f16 through f32; bf16 in one rounding).
template <typename H>
double round_half(double x) {
  if constexpr (std::is_same_v<H, f16>)
    return double(half_to_float(float_to_half(float(x))));
  else
    return double(bf16_to_float(double_to_bf16(x)));
}

// n H-representable values uniform in [lo, hi).
template <typename H>
std::vector<double> hvalues(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  PhiloxStream rs(seed, 9);
  std::vector<double> v(sz(n));
  for (auto& x : v) x = round_half<H>(lo + (hi - lo) * rs.uniform());
  return v;
}

Tensor dev(const std::vector<double>& v, DType dt) { return Tensor::from_vector(v, {int64_t(v.size())}, dt, Device::cuda(0)); }
Tensor host(const std::vector<double>& v, DType dt) { return Tensor::from_vector(v, {int64_t(v.size())}, dt, Device::cpu()); }
std::vector<double> filled(int64_t n, double v) { return std::vector<double>(sz(n), v); }

// got (an H result) against want (the CPU's f32 result): NaN where NaN,
// infinities equal, else |got - want| <= rel * |want| + abs_tol. With rel ==
// abs_tol == 0: got must equal want rounded to H, bit for bit (signed zeros too).
template <typename H>
void check_f16(const std::vector<double>& got, const std::vector<double>& want, double rel, double abs_tol,
               const char* what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = (rel == 0 && abs_tol == 0) ? round_half<H>(want[i]) : want[i];
    bool ok;
    if (std::isnan(g) || std::isnan(w))
      ok = std::isnan(g) && std::isnan(w);
    else if (std::isinf(g) || std::isinf(w))
      ok = g == w;
    else if (rel == 0 && abs_tol == 0)
      ok = g == w && std::signbit(g) == std::signbit(w);
    else
      ok = std::abs(g - w) <= rel * std::abs(w) + abs_tol;
    if (!ok && bad++ == 0) first = i;
  }
  CHECK_MESSAGE(bad == 0, std::string(what) << ": " << bad << " of " << got.size() << " values differ; first at "
                                           << first << " (cuda " << std::string(dtype_name(kHalf<H>)) << " "
                                           << (bad ? got[first] : 0.0) << ", cpu f32 " << (bad ? want[first] : 0.0)
                                           << ")");
}

// The same, with the tolerance tol (f16's: times kTol<H>) times the result's
// scale (max |want|, at least 1).
template <typename H>
void check_scaled(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  double scale = 1.0;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
  check_f16<H>(got, want, kHalfUlp<H>, tol * kTol<H> * scale, what);
}

// A device H tensor and a host f32 tensor with the same (H-exact) values.
struct Pair {
  Tensor d, c;
  void* dp() const { return d.raw_data(); }
  void* cp() const { return c.raw_data(); }
};
template <typename H>
Pair pair(const std::vector<double>& v) { return Pair{dev(v, kHalf<H>), host(v, kF)}; }
// The same, but f32 on the device too (parameters, statistics, loss values).
Pair pair32(const std::vector<double>& v) { return Pair{dev(v, kF), host(v, kF)}; }

}  // namespace

// ------------------------------------------------------- memory, elementwise

TEST_CASE_TEMPLATE("cuda f16/bf16: fill, cast, add, axpby, relu, bias_add, bias_backward vs the CPU in f32" *
          ember::testing::kNeedsCudaDevice, T16, f16, bf16) {
  REQUIRE(cuda_available());
  constexpr DType kH = kHalf<T16>;
  const auto& K = cuda_table();
  const auto& C = cpu_table();
  const Stream s = cuda_stream();
  for (int64_t n : {int64_t(1), int64_t(33), int64_t(4099)}) {
    CAPTURE(n);
    // fill and cast H <-> f32
    Tensor fd = dev(filled(n, 0.0), kH);
    K.fill(kH, fd.raw_data(), n, -0.1, s);
    check_f16<T16>(fd.to_double_vector(), filled(n, -0.1), 0, 0, "fill");
    // f16 overflows beyond 65520, bf16 beyond 3.3961775e38: inf
    const double big = std::is_same_v<T16, f16> ? 70000.0 : 3.4e38;
    const auto wide = hvalues<T16>(n, 1, -big, big);
    Tensor x32 = dev(wide, kF), x16 = dev(filled(n, 0.0), kH);
    K.cast(kF, x32.raw_data(), kH, x16.raw_data(), n, s);
    check_f16<T16>(x16.to_double_vector(), wide, 0, 0, "cast f32 -> 16-bit");

    auto a = hvalues<T16>(n, 2, -4.0, 4.0), b = hvalues<T16>(n, 3, -4.0, 4.0);
    a[0] = kNaN;
    if (n > 3) a[3] = -0.0;
    const Pair A = pair<T16>(a), B = pair<T16>(b);
    Pair Y = pair<T16>(filled(n, 9.0));
    K.add(kH, A.dp(), B.dp(), Y.dp(), n, s);
    C.add(kF, A.cp(), B.cp(), Y.cp(), n, nullptr);
    check_f16<T16>(Y.d.to_double_vector(), Y.c.to_double_vector(), 0, 0, "add");
    K.add(kH, Y.dp(), Y.dp(), Y.dp(), n, s);  // in place
    C.add(kF, Y.cp(), Y.cp(), Y.cp(), n, nullptr);
    check_f16<T16>(Y.d.to_double_vector(), Y.c.to_double_vector(), 0, 0, "add in place");

    const double forms[][2] = {{0.5, 0.0}, {1.0, 1.0}, {0.3, -1.7}};
    for (const auto& f : forms) {
      CAPTURE(f[0]);
      CAPTURE(f[1]);
      auto y = hvalues<T16>(n, 4);
      if (f[1] == 0.0) y.assign(sz(n), kNaN);  // never read
      Pair Z = pair<T16>(y);
      K.axpby(kH, f[0], B.dp(), f[1], Z.dp(), n, s);
      C.axpby(kF, f[0], B.cp(), f[1], Z.cp(), n, nullptr);
      check_f16<T16>(Z.d.to_double_vector(), Z.c.to_double_vector(), kHalfRel<T16>, 1e-6 * kTol<T16>, "axpby");
    }

    Pair R = pair<T16>(filled(n, 9.0));
    K.relu_forward(kH, A.dp(), R.dp(), n, s);
    C.relu_forward(kF, A.cp(), R.cp(), n, nullptr);
    const auto relu = R.d.to_double_vector();
    check_f16<T16>(relu, R.c.to_double_vector(), 0, 0, "relu_forward");
    CHECK(std::isnan(relu[0]));
    Pair G = pair<T16>(filled(n, 9.0));
    K.relu_backward(kH, R.dp(), B.dp(), G.dp(), n, s);
    C.relu_backward(kF, R.cp(), B.cp(), G.cp(), n, nullptr);
    check_f16<T16>(G.d.to_double_vector(), G.c.to_double_vector(), 0, 0, "relu_backward");
  }
  // bias_add and bias_backward: column kernel (inner 1, >= 128 channels) and block kernel
  const int64_t shapes[][3] = {{2, 3, 5}, {33, 130, 1}, {3, 7, 300}, {1, 1, 4099}};
  for (const auto& sh : shapes) {
    const int64_t outer = sh[0], channels = sh[1], inner = sh[2], n = outer * channels * inner;
    CAPTURE(outer);
    CAPTURE(channels);
    CAPTURE(inner);
    Pair Y = pair<T16>(hvalues<T16>(n, 5));
    const Pair Bv = pair<T16>(hvalues<T16>(channels, 6, -4.0, 4.0));
    K.bias_add(kH, Y.dp(), Bv.dp(), outer, channels, inner, s);
    C.bias_add(kF, Y.cp(), Bv.cp(), outer, channels, inner, nullptr);
    check_f16<T16>(Y.d.to_double_vector(), Y.c.to_double_vector(), 0, 0, "bias_add");
    const Pair GY = pair<T16>(hvalues<T16>(n, 7));
    Pair GB = pair<T16>(filled(channels, 3.0));
    K.bias_backward(kH, GY.dp(), GB.dp(), outer, channels, inner, s);
    C.bias_backward(kF, GY.cp(), GB.cp(), outer, channels, inner, nullptr);
    check_f16<T16>(GB.d.to_double_vector(), GB.c.to_double_vector(), kHalfRel<T16>, 1e-4 * kTol<T16>, "bias_backward");
  }
}

// -------------------------------------------------------------- reductions

TEST_CASE_TEMPLATE("cuda f16/bf16: sum (NaN, inf and overflow propagate) and argmax_rows" *
          ember::testing::kNeedsCudaDevice, T16, f16, bf16) {
  REQUIRE(cuda_available());
  constexpr DType kH = kHalf<T16>;
  const auto& K = cuda_table();
  const Stream s = cuda_stream();
  for (int64_t n : {int64_t(1), int64_t(257), int64_t(4099)}) {
    CAPTURE(n);
    const Pair X = pair<T16>(hvalues<T16>(n, 8));
    Pair Y = pair<T16>({5.0});
    K.sum(kH, X.dp(), Y.dp(), n, s);
    cpu_table().sum(kF, X.cp(), Y.cp(), n, nullptr);
    check_f16<T16>(Y.d.to_double_vector(), Y.c.to_double_vector(), kHalfRel<T16>, 1e-3 * kTol<T16>, "sum");
  }
  auto x = hvalues<T16>(3000, 9);
  auto sum_of = [&](const std::vector<double>& v) {
    Tensor y = dev({0.0}, kH);
    K.sum(kH, dev(v, kH).raw_data(), y.raw_data(), int64_t(v.size()), s);
    return y.item();
  };
  x[2021] = kNaN;
  CHECK(std::isnan(sum_of(x)));
  x[2021] = -kInf;
  CHECK(sum_of(x) == -kInf);
  x[7] = kInf;
  CHECK(std::isnan(sum_of(x)));  // inf + -inf
  // 3000 * 60 = 180000 > 65504 (f16), 3000 * 2^118 > 3.4e38 (bf16): the 16-bit result overflows to inf
  // (the sum itself is exact in double)
  const double each = std::is_same_v<T16, f16> ? 60.0 : std::ldexp(1.0, 118);
  CHECK(sum_of(filled(3000, each)) == kInf);
  CHECK(sum_of(filled(3000, -each)) == -kInf);

  // argmax_rows on the same f16 values: exactly the CPU's indices (warp and block per row)
  const int64_t shapes[][2] = {{37, 33}, {3, 1500}, {5, 1}};
  for (const auto& sh : shapes)
    for (int pattern = 0; pattern < 2; ++pattern) {
      const int64_t rows = sh[0], cols = sh[1];
      CAPTURE(rows);
      CAPTURE(cols);
      CAPTURE(pattern);
      auto v = pattern == 0 ? hvalues<T16>(rows * cols, 10) : hvalues<T16>(rows * cols, 11, -2.0, 2.0);
      if (pattern == 1)  // few levels: ties; and NaN in some rows
        for (size_t i = 0; i < v.size(); ++i) v[i] = std::round(v[i]) + (i % 97 == 5 ? kNaN : 0.0);
      const Pair Xv = pair<T16>(v);
      Tensor id = Tensor::full({rows}, -5.0, DType::i64, Device::cuda(0));
      Tensor ic = Tensor::full({rows}, -5.0, DType::i64, Device::cpu());
      K.argmax_rows(kH, Xv.dp(), static_cast<int64_t*>(id.raw_data()), rows, cols, s);
      cpu_table().argmax_rows(kF, Xv.cp(), static_cast<int64_t*>(ic.raw_data()), rows, cols, nullptr);
      CHECK(id.to_double_vector() == ic.to_double_vector());
    }
}

// ---------------------------------------------------------------- gemm

TEST_CASE_TEMPLATE("cuda f16/bf16: gemm accumulates in f32 over shapes, transposes, alpha and beta" *
          ember::testing::kNeedsCudaDevice, T16, f16, bf16) {
  REQUIRE(cuda_available());
  constexpr DType kH = kHalf<T16>;
  struct Shape3 {
    int64_t M, N, K;
  };
  // small and large tiles, ragged edges, K not a multiple of BK
  const Shape3 shapes[] = {{7, 13, 5}, {65, 63, 17}, {3, 70, 300}};
  const double coefs[][2] = {{1.0, 0.0}, {-0.75, 1.5}, {2.0, -1.0}};
  uint64_t seed = 20;
  int variant = 0;
  for (const Shape3& sh : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const double alpha = coefs[variant % 3][0], beta = coefs[variant % 3][1];
        ++variant;
        const int64_t pad = variant % 2 ? 3 : 0;
        const int64_t a_rows = ta ? sh.K : sh.M, a_cols = ta ? sh.M : sh.K;
        const int64_t b_rows = tb ? sh.N : sh.K, b_cols = tb ? sh.K : sh.N;
        const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = sh.N + pad;
        CAPTURE(sh.M);
        CAPTURE(sh.N);
        CAPTURE(sh.K);
        CAPTURE(ta);
        CAPTURE(tb);
        const Pair A = pair<T16>(hvalues<T16>(a_rows * lda, seed++)), B = pair<T16>(hvalues<T16>(b_rows * ldb, seed++));
        Pair Cm = pair<T16>(beta == 0.0 ? filled(sh.M * ldc, kNaN) : hvalues<T16>(sh.M * ldc, seed++));
        cuda_table().gemm(kH, ta, tb, sh.M, sh.N, sh.K, alpha, A.dp(), lda, B.dp(), ldb, beta, Cm.dp(), ldc,
                          cuda_stream());
        cpu_table().gemm(kF, ta, tb, sh.M, sh.N, sh.K, alpha, A.cp(), lda, B.cp(), ldb, beta, Cm.cp(), ldc, nullptr);
        check_scaled<T16>(Cm.d.to_double_vector(), Cm.c.to_double_vector(), 2e-3, "gemm");
      }
  // K == 0: C = beta * C
  const Pair A = pair<T16>(hvalues<T16>(20, 1)), B = pair<T16>(hvalues<T16>(20, 2));
  Pair Cm = pair<T16>(hvalues<T16>(20, 3));
  cuda_table().gemm(kH, false, false, 4, 5, 0, 1.0, A.dp(), 1, B.dp(), 5, 0.5, Cm.dp(), 5, cuda_stream());
  cpu_table().gemm(kF, false, false, 4, 5, 0, 1.0, A.cp(), 1, B.cp(), 5, 0.5, Cm.cp(), 5, nullptr);
  check_f16<T16>(Cm.d.to_double_vector(), Cm.c.to_double_vector(), 0, 0, "gemm K == 0");
}

// --------------------------------------------------------- convolution

TEST_CASE_TEMPLATE("cuda f16/bf16: im2col, col2im and the implicit-GEMM convolutions (split-K too)" *
          ember::testing::kNeedsCudaDevice, T16, f16, bf16) {
  REQUIRE(cuda_available());
  constexpr DType kH = kHalf<T16>;
  struct Geo {
    int64_t N, C, H, W, K, R, S, sh, sw, ph, pw;
  };
  // the first: N*P*Q = 288 > 256 in the filter gradient, so two split-K slices
  const Geo geos[] = {{2, 3, 12, 12, 4, 3, 3, 1, 1, 1, 1}, {1, 2, 7, 5, 3, 3, 2, 2, 1, 1, 0}};
  uint64_t seed = 40;
  for (const Geo& q : geos) {
    const Conv2dGeometry g = make_conv2d_geometry(q.N, q.C, q.H, q.W, q.K, q.R, q.S, q.sh, q.sw, q.ph, q.pw);
    CAPTURE(g.N);
    CAPTURE(g.C);
    CAPTURE(g.H);
    CAPTURE(g.K);
    CAPTURE(g.R);
    const auto& K = cuda_table();
    const auto& C = cpu_table();
    const Stream s = cuda_stream();
    const Pair X = pair<T16>(hvalues<T16>(g.N * g.C * g.H * g.W, seed++));
    const Pair Wt = pair<T16>(hvalues<T16>(g.K * g.C * g.R * g.S, seed++));
    const Pair GY = pair<T16>(hvalues<T16>(g.N * g.K * g.P * g.Q, seed++));
    const int64_t cols = g.col_rows() * g.col_cols();
    Pair Col = pair<T16>(filled(cols, 7.0));
    K.im2col(kH, g, X.dp(), Col.dp(), s);
    C.im2col(kF, g, X.cp(), Col.cp(), nullptr);
    check_f16<T16>(Col.d.to_double_vector(), Col.c.to_double_vector(), 0, 0, "im2col");
    const Pair ColIn = pair<T16>(hvalues<T16>(cols, seed++));
    Pair Img = pair<T16>(filled(g.C * g.H * g.W, 7.0));
    K.col2im(kH, g, ColIn.dp(), Img.dp(), s);
    C.col2im(kF, g, ColIn.cp(), Img.cp(), nullptr);
    check_scaled<T16>(Img.d.to_double_vector(), Img.c.to_double_vector(), 2e-3, "col2im");

    Pair Y = pair<T16>(filled(g.N * g.K * g.P * g.Q, kNaN));
    K.conv2d_forward(kH, g, X.dp(), Wt.dp(), Y.dp(), s);
    C.conv2d_forward(kF, g, X.cp(), Wt.cp(), Y.cp(), nullptr);
    check_scaled<T16>(Y.d.to_double_vector(), Y.c.to_double_vector(), 2e-3, "conv2d_forward");
    Pair GX = pair<T16>(filled(g.N * g.C * g.H * g.W, kNaN));
    K.conv2d_backward_data(kH, g, GY.dp(), Wt.dp(), GX.dp(), s);
    C.conv2d_backward_data(kF, g, GY.cp(), Wt.cp(), GX.cp(), nullptr);
    check_scaled<T16>(GX.d.to_double_vector(), GX.c.to_double_vector(), 2e-3, "conv2d_backward_data");
    Pair GW = pair<T16>(filled(g.K * g.C * g.R * g.S, kNaN));
    K.conv2d_backward_filter(kH, g, X.dp(), GY.dp(), GW.dp(), s);
    C.conv2d_backward_filter(kF, g, X.cp(), GY.cp(), GW.cp(), nullptr);
    check_scaled<T16>(GW.d.to_double_vector(), GW.c.to_double_vector(), 2e-3, "conv2d_backward_filter");
  }
}

// ----------------------------------------------------------- batch norm

TEST_CASE_TEMPLATE("cuda f16/bf16: batch norm with f32 parameters and statistics" *
          ember::testing::kNeedsCudaDevice, T16, f16, bf16) {
  REQUIRE(cuda_available());
  constexpr DType kH = kHalf<T16>;
  // the second shape splits each channel over several partial-sum blocks;
  // the last two are channels-last activations ([N*H*W, C, 1]: the rows
  // kernel), C a multiple of the 8-element pack (packed elementwise passes)
  // and not
  const int64_t shapes[][3] = {{3, 4, 37}, {2, 2, 1100}, {300, 40, 1}, {70, 12, 1}};
  uint64_t seed = 60;
  for (const auto& sh : shapes) {
    const int64_t N = sh[0], Ch = sh[1], HW = sh[2], n = N * Ch * HW;
    CAPTURE(N);
    CAPTURE(Ch);
    CAPTURE(HW);
    const auto& K = cuda_table();
    const auto& C = cpu_table();
    const Stream s = cuda_stream();
    const Pair X = pair<T16>(hvalues<T16>(n, seed++, 2.0, 6.0));  // an offset mean
    const Pair GY = pair<T16>(hvalues<T16>(n, seed++));
    const Pair gamma = pair32(hvalues<T16>(Ch, seed++, 0.5, 1.5)), beta = pair32(hvalues<T16>(Ch, seed++));
    Pair rmean = pair32(hvalues<T16>(Ch, seed++)), rvar = pair32(hvalues<T16>(Ch, seed++, 0.5, 2.0));
    Pair smean = pair32(filled(Ch, 9.0)), sinv = pair32(filled(Ch, 9.0));
    Pair Y = pair<T16>(filled(n, kNaN));
    K.batch_norm_forward_train(kH, X.dp(), gamma.dp(), beta.dp(), Y.dp(), smean.dp(), sinv.dp(), rmean.dp(),
                               rvar.dp(), N, Ch, HW, 0.1, 1e-5, s);
    C.batch_norm_forward_train(kF, X.cp(), gamma.cp(), beta.cp(), Y.cp(), smean.cp(), sinv.cp(), rmean.cp(),
                               rvar.cp(), N, Ch, HW, 0.1, 1e-5, nullptr);
    check_scaled<T16>(Y.d.to_double_vector(), Y.c.to_double_vector(), 2e-3, "batch_norm_forward_train y");
    check_f16<T16>(smean.d.to_double_vector(), smean.c.to_double_vector(), 1e-5, 1e-6, "save_mean (f32)");
    check_f16<T16>(sinv.d.to_double_vector(), sinv.c.to_double_vector(), 1e-4, 1e-6, "save_invstd (f32)");
    check_f16<T16>(rmean.d.to_double_vector(), rmean.c.to_double_vector(), 1e-5, 1e-6, "running_mean (f32)");
    check_f16<T16>(rvar.d.to_double_vector(), rvar.c.to_double_vector(), 1e-4, 1e-6, "running_var (f32)");

    Pair Ye = pair<T16>(filled(n, kNaN));
    K.batch_norm_forward_eval(kH, X.dp(), gamma.dp(), beta.dp(), rmean.dp(), rvar.dp(), Ye.dp(), N, Ch, HW, 1e-5, s);
    C.batch_norm_forward_eval(kF, X.cp(), gamma.cp(), beta.cp(), rmean.cp(), rvar.cp(), Ye.cp(), N, Ch, HW, 1e-5,
                              nullptr);
    check_scaled<T16>(Ye.d.to_double_vector(), Ye.c.to_double_vector(), 2e-3, "batch_norm_forward_eval");

    for (int train = 0; train < 2; ++train) {
      CAPTURE(train);
      Pair GX = pair<T16>(filled(n, kNaN));
      Pair gg = pair32(filled(Ch, 9.0)), gb = pair32(filled(Ch, 9.0));
      // the CPU's statistics on both sides (the device ones were checked above)
      const Pair& m = train ? smean : rmean;
      const Pair st = pair32(train ? sinv.c.to_double_vector() : rvar.c.to_double_vector());
      const Pair mm = pair32(m.c.to_double_vector());
      if (train) {
        K.batch_norm_backward_train(kH, X.dp(), GY.dp(), gamma.dp(), mm.dp(), st.dp(), GX.dp(), gg.dp(), gb.dp(), N,
                                    Ch, HW, 1e-5, s);
        C.batch_norm_backward_train(kF, X.cp(), GY.cp(), gamma.cp(), mm.cp(), st.cp(), GX.cp(), gg.cp(), gb.cp(), N,
                                    Ch, HW, 1e-5, nullptr);
      } else {
        K.batch_norm_backward_eval(kH, X.dp(), GY.dp(), gamma.dp(), mm.dp(), st.dp(), GX.dp(), gg.dp(), gb.dp(), N, Ch,
                                   HW, 1e-5, s);
        C.batch_norm_backward_eval(kF, X.cp(), GY.cp(), gamma.cp(), mm.cp(), st.cp(), GX.cp(), gg.cp(), gb.cp(), N, Ch,
                                   HW, 1e-5, nullptr);
      }
      check_scaled<T16>(GX.d.to_double_vector(), GX.c.to_double_vector(), 2e-3, "batch norm gx");
      check_f16<T16>(gg.d.to_double_vector(), gg.c.to_double_vector(), 1e-4, 1e-4, "ggamma (f32)");
      check_f16<T16>(gb.d.to_double_vector(), gb.c.to_double_vector(), 1e-4, 1e-4, "gbeta (f32)");
    }
  }
}

// -------------------------------------------------------------- pooling

TEST_CASE_TEMPLATE("cuda f16/bf16: max pooling (argmax exact) and adaptive average pooling" *
          ember::testing::kNeedsCudaDevice, T16, f16, bf16) {
  REQUIRE(cuda_available());
  constexpr DType kH = kHalf<T16>;
  const auto& K = cuda_table();
  const auto& C = cpu_table();
  const Stream s = cuda_stream();
  const Pool2dGeometry g = make_pool2d_geometry(2, 3, 9, 7, 3, 3, 2, 2, 1, 1);
  const int64_t nx = g.N * g.C * g.H * g.W, ny = g.N * g.C * g.P * g.Q;
  auto xv = hvalues<T16>(nx, 70, -2.0, 2.0);
  for (size_t i = 0; i < xv.size(); i += 5) xv[i] = std::round(xv[i]);  // ties
  xv[10] = kNaN;
  const Pair X = pair<T16>(xv);
  Pair Y = pair<T16>(filled(ny, 9.0));
  Tensor ad = Tensor::full({ny}, -7.0, DType::i32, Device::cuda(0));
  Tensor ac = Tensor::full({ny}, -7.0, DType::i32, Device::cpu());
  K.max_pool2d_forward(kH, g, X.dp(), Y.dp(), static_cast<int32_t*>(ad.raw_data()), s);
  C.max_pool2d_forward(kF, g, X.cp(), Y.cp(), static_cast<int32_t*>(ac.raw_data()), nullptr);
  check_f16<T16>(Y.d.to_double_vector(), Y.c.to_double_vector(), 0, 0, "max_pool2d_forward");
  CHECK(ad.to_double_vector() == ac.to_double_vector());
  const Pair GY = pair<T16>(hvalues<T16>(ny, 71));
  Pair GX = pair<T16>(filled(nx, 9.0));
  K.max_pool2d_backward(kH, g, X.dp(), Y.dp(), GY.dp(), static_cast<const int32_t*>(ad.raw_data()), GX.dp(), s);
  C.max_pool2d_backward(kF, g, X.cp(), Y.cp(), GY.cp(), static_cast<const int32_t*>(ac.raw_data()), GX.cp(),
                        nullptr);
  check_f16<T16>(GX.d.to_double_vector(), GX.c.to_double_vector(), kHalfRel<T16>, 1e-6 * kTol<T16>,
               "max_pool2d_backward");

  const int64_t planes = 5, H = 7, W = 9, OH = 3, OW = 4;
  const Pair AX = pair<T16>(hvalues<T16>(planes * H * W, 72));
  Pair AY = pair<T16>(filled(planes * OH * OW, 9.0));
  K.adaptive_avg_pool2d_forward(kH, AX.dp(), AY.dp(), planes, H, W, OH, OW, s);
  C.adaptive_avg_pool2d_forward(kF, AX.cp(), AY.cp(), planes, H, W, OH, OW, nullptr);
  check_f16<T16>(AY.d.to_double_vector(), AY.c.to_double_vector(), kHalfRel<T16>, 1e-5 * kTol<T16>,
               "adaptive_avg_pool2d_forward");
  const Pair AGY = pair<T16>(hvalues<T16>(planes * OH * OW, 73));
  Pair AGX = pair<T16>(filled(planes * H * W, 9.0));
  K.adaptive_avg_pool2d_backward(kH, AGY.dp(), AGX.dp(), planes, H, W, OH, OW, s);
  C.adaptive_avg_pool2d_backward(kF, AGY.cp(), AGX.cp(), planes, H, W, OH, OW, nullptr);
  check_f16<T16>(AGX.d.to_double_vector(), AGX.c.to_double_vector(), kHalfRel<T16>, 1e-5 * kTol<T16>,
               "adaptive_avg_pool2d_backward");
}

// ------------------------------------------------------------------ loss

TEST_CASE_TEMPLATE("cuda f16/bf16: softmax cross-entropy with 16-bit logits, f32 losses/probs/grad_loss" *
          ember::testing::kNeedsCudaDevice, T16, f16, bf16) {
  REQUIRE(cuda_available());
  constexpr DType kH = kHalf<T16>;
  const int64_t cases[][2] = {{37, 33}, {2, 1500}};  // warp per row, block per row
  for (const auto& cs : cases) {
    const int64_t N = cs[0], classes = cs[1], n = N * classes;
    CAPTURE(N);
    CAPTURE(classes);
    const Pair X = pair<T16>(hvalues<T16>(n, 80, -6.0, 6.0));
    std::vector<double> labels(sz(N));
    PhiloxStream rs(81, 0);
    for (auto& l : labels) l = double(rs.below(uint64_t(classes)));
    const Tensor ld = Tensor::from_vector(labels, {N}, DType::i64, Device::cuda(0));
    const Tensor lc = Tensor::from_vector(labels, {N}, DType::i64, Device::cpu());
    const auto* ldp = static_cast<const int64_t*>(ld.raw_data());
    const auto* lcp = static_cast<const int64_t*>(lc.raw_data());
    Pair P = pair32(filled(n, 9.0)), L = pair32(filled(N, 9.0));
    cuda_table().softmax_cross_entropy_forward(kH, X.dp(), ldp, L.dp(), P.dp(), N, classes, 0.1, cuda_stream());
    cpu_table().softmax_cross_entropy_forward(kF, X.cp(), lcp, L.cp(), P.cp(), N, classes, 0.1, nullptr);
    check_f16<T16>(P.d.to_double_vector(), P.c.to_double_vector(), 1e-5, 1e-12, "probs (f32)");
    check_f16<T16>(L.d.to_double_vector(), L.c.to_double_vector(), 1e-5, 1e-6, "losses (f32)");

    const Pair probs = pair32(P.c.to_double_vector()), gl = pair32({0.75});
    Pair GL = pair<T16>(filled(n, 9.0));
    cuda_table().softmax_cross_entropy_backward(kH, probs.dp(), ldp, gl.dp(), 1.0 / double(N), GL.dp(), N, classes,
                                                0.1, cuda_stream());
    cpu_table().softmax_cross_entropy_backward(kF, probs.cp(), lcp, gl.cp(), 1.0 / double(N), GL.cp(), N, classes,
                                               0.1, nullptr);
    check_f16<T16>(GL.d.to_double_vector(), GL.c.to_double_vector(), kHalfRel<T16>, 1e-7 * kTol<T16>,
                 "glogits (16-bit)");
  }
}

// -------------------------------------------- input, optimizer, random

TEST_CASE_TEMPLATE("cuda f16/bf16: normalize_u8, sgd_update (f32 arithmetic), random fills" *
          ember::testing::kNeedsCudaDevice, T16, f16, bf16) {
  REQUIRE(cuda_available());
  constexpr DType kH = kHalf<T16>;
  const auto& K = cuda_table();
  const auto& C = cpu_table();
  const Stream s = cuda_stream();
  {
    ChannelNorm norm;
    norm.channels = 3;
    for (int c = 0; c < 3; ++c) norm.mean[c] = 0.1f * float(c + 1), norm.inv_std[c] = 1.0f / (0.2f + 0.05f * float(c));
    const int64_t N = 2, HW = 37, n = N * 3 * HW;
    std::vector<double> px(sz(n));
    PhiloxStream rs(90, 0);
    for (auto& v : px) v = double(rs.below(256));
    const Tensor xd = Tensor::from_vector(px, {n}, DType::u8, Device::cuda(0));
    const Tensor xc = Tensor::from_vector(px, {n}, DType::u8, Device::cpu());
    Pair Y = pair<T16>(filled(n, 9.0));
    K.normalize_u8(kH, static_cast<const uint8_t*>(xd.raw_data()), Y.dp(), N, HW, norm, s);
    C.normalize_u8(kF, static_cast<const uint8_t*>(xc.raw_data()), Y.cp(), N, HW, norm, nullptr);
    check_f16<T16>(Y.d.to_double_vector(), Y.c.to_double_vector(), kHalfRel<T16>, 1e-5 * kTol<T16>, "normalize_u8");
  }
  for (int form = 0; form < 3; ++form) {
    CAPTURE(form);
    SgdParams p;
    p.lr = 0.1, p.momentum = form == 0 ? 0.0 : 0.9, p.weight_decay = 5e-4, p.nesterov = form == 2;
    p.first_step = form == 1, p.grad_scale = 0.5;
    const int64_t n = 1000;
    Pair W = pair<T16>(hvalues<T16>(n, 91)), Bf = pair<T16>(hvalues<T16>(n, 92));
    const Pair G = pair<T16>(hvalues<T16>(n, 93));
    K.sgd_update(kH, W.dp(), G.dp(), Bf.dp(), n, p, s);
    C.sgd_update(kF, W.cp(), G.cp(), Bf.cp(), n, p, nullptr);
    check_f16<T16>(W.d.to_double_vector(), W.c.to_double_vector(), kHalfRel<T16>, 1e-6 * kTol<T16>, "sgd w");
    check_f16<T16>(Bf.d.to_double_vector(), Bf.c.to_double_vector(), kHalfRel<T16>, 1e-6 * kTol<T16>, "sgd buf");
  }
  for (int64_t n : {int64_t(1), int64_t(1001)}) {
    CAPTURE(n);
    Pair U = pair<T16>(filled(n + 1, 42.0));
    K.random_uniform(kH, U.dp(), n, 1234, 5, -0.5, 2.0, s);
    C.random_uniform(kF, U.cp(), n, 1234, 5, -0.5, 2.0, nullptr);
    const auto u = U.d.to_double_vector();
    check_f16<T16>(u, U.c.to_double_vector(), kHalfRel<T16>, 1e-7 * kTol<T16>, "random_uniform");
    CHECK(u[sz(n)] == 42.0);
    Pair Z = pair<T16>(filled(n + 1, 42.0));
    K.random_normal(kH, Z.dp(), n, 99, 5, 0.25, 3.0, s);
    C.random_normal(kF, Z.cp(), n, 99, 5, 0.25, 3.0, nullptr);
    const auto z = Z.d.to_double_vector();
    check_f16<T16>(z, Z.c.to_double_vector(), kHalfRel<T16>, 1e-7 * kTol<T16>, "random_normal");
    CHECK(z[sz(n)] == 42.0);
  }
}
