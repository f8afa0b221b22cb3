// tests/ops/test_f16.cpp — mixed precision (f16 or bf16 storage, f32 arithmetic)
// on the CPU backend at the kernel level: 16-bit GEMM and convolutions
// against the f32 kernels on the same 16-bit-representable values (odd
// sizes, transposes, beta != 0, every convolution path), the
// elementwise/reduction kernels, inf/NaN propagation (the loss scaler's
// overflow check), sgd_update and the ops' dtype rules (mixed dtypes only
// where the contract allows them). Each test runs for f16 and for bf16
// (TEST_CASE_TEMPLATE); tolerances are written for f16 and multiplied by
// kTol<H>: 8 for bf16, whose unit roundoff (2^-8, 8 significand bits) is 8x
// f16's (2^-11). The per-op 16-bit axes of the generic harness are in
// tests/support/op_harness.cpp; bf16 conversions are in tests/engine/test_bf16.cpp.
#include <doctest/doctest.h>

#include "tests/support/test_helpers.h"
#include "tests/support/skip.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/bfloat16.h"
#include "engine/half.h"
#include "engine/rng.h"
#include "engine/parallel.h"
#include "ops/cpu/f16_native.h"
#include "ops/cpu/gemm/gemm_f16.h"
#include "ops/kernels.h"
#include "ops/ops.h"

using namespace ember;

namespace {
using ember::testing::expect_error;

// The 16-bit type under test: its dtype, and its tolerances in f16 units.
template <typename H> struct HalfInfo;
template <> struct HalfInfo<f16> {
  static constexpr DType dtype = DType::f16;
  static constexpr double tol = 1;
};
template <> struct HalfInfo<bf16> {
  static constexpr DType dtype = DType::bf16;
  static constexpr double tol = 8;  // unit roundoff 2^-8 against f16's 2^-11
};
template <typename H> constexpr DType kHalf = HalfInfo<H>::dtype;
template <typename H> constexpr double kTol = HalfInfo<H>::tol;

// v rounded to H, as Tensor::from_vector stores it.
template <typename H>
double round_half(double v) {
  if constexpr (std::is_same_v<H, f16>)
    return double(half_to_float(float_to_half(float(v))));
  else
    return double(bf16_to_float(double_to_bf16(v)));
}

// n values uniform in [lo, hi), rounded to H (so f32 and H see the same inputs).
template <typename H = f16>
std::vector<double> f16_values(int64_t n, uint64_t stream, double lo = -1, double hi = 1) {
  PhiloxStream rng(1234, stream);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) {
    const double u = double(rng.next_u64() >> 11) * (1.0 / 9007199254740992.0);
    x = round_half<H>(float(lo + (hi - lo) * u));
  }
  return v;
}

// |got - exp| <= rtol * |exp| + atol * max(1, max |exp|) elementwise; returns the number of misses.
int count_mismatches(const std::vector<double>& got, const std::vector<double>& exp, double rtol, double atol,
                     const std::string& what) {
  REQUIRE(got.size() == exp.size());
  double scale = 1;
  for (double e : exp) scale = std::max(scale, std::fabs(e));
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(got[i] - exp[i]);
    if (!(d <= rtol * std::fabs(exp[i]) + atol * scale)) {
      if (bad < 3) MESSAGE(what << " element " << i << ": expected " << exp[i] << ", got " << got[i]);
      ++bad;
    }
  }
  return bad;
}

// got holds H values, each of which must be ONE rounding to nearest of the
// matching want (an f32 or exact result): within half an ulp of H at want's
// magnitude, plus `noise` times max(1, max |want|) for f32 summation-order
// differences between the two computations. Truncating, or rounding twice,
// misses by up to a whole ulp on many elements. Returns the number of misses.
template <typename H>
int count_not_one_rounding(const std::vector<double>& got, const std::vector<double>& want, double noise,
                           const std::string& what) {
  REQUIRE(got.size() == want.size());
  constexpr int mantissa = std::is_same_v<H, f16> ? 10 : 7, min_exp = std::is_same_v<H, f16> ? -14 : -126;
  double scale = 1;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want[i];
    if (std::isnan(w) || std::isinf(w) || std::isnan(got[i])) {
      bad += !(std::isnan(w) ? std::isnan(got[i]) : got[i] == w);
      continue;
    }
    const int e = w == 0 ? min_exp : std::max(min_exp, std::ilogb(w));
    const double half_ulp = std::ldexp(1.0, e - mantissa - 1);
    if (!(std::fabs(got[i] - w) <= half_ulp * (1 + 1e-9) + noise * scale)) {
      if (bad < 3) MESSAGE(what << " element " << i << ": " << got[i] << " is not one rounding of " << w);
      ++bad;
    }
  }
  return bad;
}

const Kernels& cpu_table() { return cpu_kernels(); }

struct GemmCase {
  bool ta, tb;
  int64_t M, N, K;
  double alpha, beta;
};

// 16-bit GEMM vs f32 GEMM on the same inputs; lda/ldb/ldc padded by 3.
template <typename H>
void check_gemm(const GemmCase& c, uint64_t seed) {
  const int64_t ar = c.ta ? c.K : c.M, ac = c.ta ? c.M : c.K, br = c.tb ? c.N : c.K, bc = c.tb ? c.K : c.N;
  const int64_t lda = ac + 3, ldb = bc + 3, ldc = c.N + 3;
  const auto a = f16_values<H>(ar * lda, seed), b = f16_values<H>(br * ldb, seed + 1),
             c0 = f16_values<H>(c.M * ldc, seed + 2);
  std::vector<double> out[2];
  const DType dts[2] = {DType::f32, kHalf<H>};
  for (int i = 0; i < 2; ++i) {
    Tensor A = Tensor::from_vector(a, {ar, lda}, dts[i]), B = Tensor::from_vector(b, {br, ldb}, dts[i]);
    Tensor C = Tensor::from_vector(c0, {c.M, ldc}, dts[i]);
    cpu_table().gemm(dts[i], c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.raw_data(), lda, B.raw_data(), ldb, c.beta, C.raw_data(),
               ldc, nullptr);
    out[i] = C.to_double_vector();
  }
  // Padding columns of C must be untouched.
  for (int64_t r = 0; r < c.M; ++r)
    for (int64_t j = c.N; j < ldc; ++j) CHECK(out[1][size_t(r * ldc + j)] == c0[size_t(r * ldc + j)]);
  // Each output is one 16-bit rounding of the f32 result (plus f32 ordering noise).
  CHECK(count_mismatches(out[1], out[0], 1e-3 * kTol<H>, 1e-4 * kTol<H>, "gemm") == 0);
  CHECK(count_not_one_rounding<H>(out[1], out[0], 1e-6, "gemm") == 0);
}

}  // namespace

TEST_CASE_TEMPLATE("f16/bf16: gemm matches f32 (odd sizes, transposes, beta != 0)", T16, f16, bf16) {
  uint64_t seed = 10;
  const std::vector<GemmCase> cases = {
      {false, false, 1, 1, 1, 1.0, 0.0},    {false, false, 7, 13, 5, 1.0, 0.0},   {true, false, 9, 33, 17, 0.5, 1.0},
      {false, true, 17, 31, 300, 1.0, -0.5}, {true, true, 33, 19, 65, 2.0, 0.25}, {false, true, 64, 10, 129, 1.0, 0.0},
      {false, false, 130, 70, 260, 1.0, 1.0}, {true, false, 3, 200, 1, -1.0, 0.0}, {false, false, 5, 6, 0, 1.0, 0.5}};
  for (const auto& c : cases) {
    CAPTURE(c.ta);
    CAPTURE(c.tb);
    CAPTURE(c.M);
    CAPTURE(c.N);
    CAPTURE(c.K);
    CAPTURE(c.beta);
    check_gemm<T16>(c, seed += 3);
  }
}

// The 16-bit helpers the convolutions use, against a double reference on the
// same 16-bit values: A (weights) converted while packing, transposed or not;
// B f16 or f32; C f16 (several column chunks, partial panels, rounded once)
// or f32; serial and with chunks spread over the threads; and the pointwise
// filter gradient's inner-dimension chunks.
TEST_CASE_TEMPLATE("f16/bf16: chunked GEMMs with 16-bit weights match a double reference", T16, f16, bf16) {
  struct Case {
    bool trans_a;
    int64_t M, N, K;
  };
  // M = 2048 makes 128-column chunks, so N = 300 is three chunks (the last partial);
  // K = 300 spans two 256-deep blocks; M = 13 leaves a partial row panel.
  const std::vector<Case> cases = {{false, 2048, 300, 5}, {true, 2048, 300, 5}, {false, 13, 70, 300},
                                   {true, 13, 70, 300},   {true, 7, 1, 1},      {false, 3, 5, 0}};
  uint64_t seed = 700;
  for (const Case& c : cases)
    for (int variant = 0; variant < 3; ++variant)  // (B, C) = (H, H), (f32, H), (H, f32)
      for (bool parallel : {false, true}) {
        CAPTURE(c.trans_a);
        CAPTURE(c.M);
        CAPTURE(c.N);
        CAPTURE(c.K);
        CAPTURE(variant);
        CAPTURE(parallel);
        const int64_t lda = (c.trans_a ? c.M : c.K) + 2, ldb = c.N + 3, ldc = c.N + 1;
        const auto a = f16_values<T16>((c.trans_a ? c.K : c.M) * lda, seed++), b = f16_values<T16>(c.K * ldb, seed++);
        std::vector<double> want(size_t(c.M * ldc), 0.0);
        for (int64_t i = 0; i < c.M; ++i)
          for (int64_t j = 0; j < c.N; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < c.K; ++k)
              acc += a[size_t(c.trans_a ? k * lda + i : i * lda + k)] * b[size_t(k * ldb + j)];
            want[size_t(i * ldc + j)] = acc;
          }
        Tensor A = Tensor::from_vector(a, {int64_t(a.size())}, kHalf<T16>);
        const DType bt = variant == 1 ? DType::f32 : kHalf<T16>, ct = variant == 2 ? DType::f32 : kHalf<T16>;
        Tensor B = Tensor::from_vector(b, {int64_t(b.size())}, bt);
        Tensor C = Tensor::full({c.M * ldc}, 7.0, ct);  // the padding columns must keep their 7s
        const T16* pa = A.data<T16>();
        if (variant == 0)
          cpu::gemm_f16a_chunked(c.trans_a, c.M, c.N, c.K, pa, lda, B.data<T16>(), ldb, C.data<T16>(), ldc, parallel);
        else if (variant == 1)
          cpu::gemm_f16a_chunked(c.trans_a, c.M, c.N, c.K, pa, lda, B.data<float>(), ldb, C.data<T16>(), ldc, parallel);
        else
          cpu::gemm_f16a_chunked(c.trans_a, c.M, c.N, c.K, pa, lda, B.data<T16>(), ldb, C.data<float>(), ldc, parallel);
        std::vector<double> got = C.to_double_vector();
        for (int64_t i = 0; i < c.M; ++i)
          for (int64_t j = c.N; j < ldc; ++j) {
            CHECK(got[size_t(i * ldc + j)] == 7.0);
            got[size_t(i * ldc + j)] = 0.0;
          }
        const double rtol = ct == kHalf<T16> ? 1e-3 * kTol<T16> : 1e-5;  // one 16-bit rounding, or none
        CHECK(count_mismatches(got, want, rtol, 1e-5, "gemm_f16a_chunked") == 0);
        if (ct == kHalf<T16>) CHECK(count_not_one_rounding<T16>(got, want, 1e-5, "gemm_f16a_chunked") == 0);
      }
  // acc += A B^T over an inner dimension cut into three chunks, on top of what acc held.
  const int64_t M = 1000, N = 100, K = 600, lda = K + 1, ldb = K + 5;
  const auto a = f16_values<T16>(M * lda, seed++), b = f16_values<T16>(N * ldb, seed++);
  const auto acc0 = f16_values(M * N, seed++);
  std::vector<double> want = acc0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) want[size_t(i * N + j)] += a[size_t(i * lda + k)] * b[size_t(j * ldb + k)];
  Tensor A = Tensor::from_vector(a, {M * lda}, kHalf<T16>), B = Tensor::from_vector(b, {N * ldb}, kHalf<T16>);
  Tensor acc = Tensor::from_vector(acc0, {M * N}, DType::f32);
  cpu::gemm_nt_accumulate_f16(M, N, K, A.data<T16>(), lda, B.data<T16>(), ldb, acc.data<float>(), N);
  CHECK(count_mismatches(acc.to_double_vector(), want, 1e-5, 1e-5, "gemm_nt_accumulate_f16") == 0);
}

TEST_CASE_TEMPLATE("f16/bf16: convolutions match f32 on every path", T16, f16, bf16) {
  struct G {
    int64_t N, C, H, W, K, R, S, stride, pad;
  };
  // pointwise, 1x1 stride 2, 3x3 same (padded grid), 3x3 stride 2 (im2col), 7x7 stem, backward-data im2col path,
  // large padded grid
  const std::vector<G> geoms = {{3, 8, 6, 7, 5, 1, 1, 1, 0}, {2, 6, 9, 7, 10, 1, 1, 2, 0}, {3, 16, 8, 8, 16, 3, 3, 1, 1},
                                {2, 5, 9, 11, 7, 3, 3, 2, 1}, {2, 3, 15, 13, 8, 7, 7, 2, 3}, {2, 4, 6, 6, 3, 3, 3, 1, 3},
                                {4, 16, 16, 16, 32, 3, 3, 1, 1},
                                // one image with 2^20 multiply-adds: the GEMMs split across the threads
                                {1, 64, 16, 16, 64, 1, 1, 1, 0}, {1, 32, 17, 17, 64, 3, 3, 2, 1}};
  uint64_t seed = 100;
  for (const G& gg : geoms) {
    const Conv2dGeometry g = make_conv2d_geometry(gg.N, gg.C, gg.H, gg.W, gg.K, gg.R, gg.S, gg.stride, gg.stride,
                                                  gg.pad, gg.pad);
    CAPTURE(gg.C);
    CAPTURE(gg.R);
    CAPTURE(gg.stride);
    CAPTURE(gg.pad);
    const Shape xs{g.N, g.C, g.H, g.W}, ws{g.K, g.C, g.R, g.S}, ys{g.N, g.K, g.P, g.Q};
    const auto x = f16_values<T16>(xs.numel(), seed++), w = f16_values<T16>(ws.numel(), seed++),
               gy = f16_values<T16>(ys.numel(), seed++);
    std::vector<double> fwd[2], bwd_data[2], bwd_filter[2];
    const DType dts[2] = {DType::f32, kHalf<T16>};
    for (int i = 0; i < 2; ++i) {
      Tensor X = Tensor::from_vector(x, xs, dts[i]), Wt = Tensor::from_vector(w, ws, dts[i]);
      Tensor GY = Tensor::from_vector(gy, ys, dts[i]);
      Tensor Y = Tensor::empty(ys, dts[i]), GX = Tensor::empty(xs, dts[i]), GW = Tensor::empty(ws, dts[i]);
      cpu_table().conv2d_forward(dts[i], g, X.raw_data(), Wt.raw_data(), Y.raw_data(), nullptr);
      cpu_table().conv2d_backward_data(dts[i], g, GY.raw_data(), Wt.raw_data(), GX.raw_data(), nullptr);
      cpu_table().conv2d_backward_filter(dts[i], g, X.raw_data(), GY.raw_data(), GW.raw_data(), nullptr);
      fwd[i] = Y.to_double_vector();
      bwd_data[i] = GX.to_double_vector();
      bwd_filter[i] = GW.to_double_vector();
    }
    const double rtol = 1e-3 * kTol<T16>, atol = 1e-4 * kTol<T16>;
    CHECK(count_mismatches(fwd[1], fwd[0], rtol, atol, "conv forward") == 0);
    CHECK(count_mismatches(bwd_data[1], bwd_data[0], rtol, atol, "conv backward data") == 0);
    CHECK(count_mismatches(bwd_filter[1], bwd_filter[0], rtol, atol, "conv backward filter") == 0);
    CHECK(count_not_one_rounding<T16>(fwd[1], fwd[0], 1e-5, "conv forward") == 0);
    CHECK(count_not_one_rounding<T16>(bwd_data[1], bwd_data[0], 1e-5, "conv backward data") == 0);
    CHECK(count_not_one_rounding<T16>(bwd_filter[1], bwd_filter[0], 1e-5, "conv backward filter") == 0);
  }
}

// Every f16 bit pattern against every 131st one (with the special values
// first: signed zeros, subnormals, the largest finite values whose sum
// overflows, infinities, NaNs): add, gradient accumulation and relu in f16
// arithmetic (AVX512-FP16) give the same bits as the conversion path, except
// that a NaN only has to stay a NaN. Skipped where the build has no AVX512-FP16
// (the default ARCH): both runs would take the conversion path.
namespace {
bool native_f16_built() { return cpu::native_f16_available(); }
constexpr testing::needs kNeedsNativeF16{
    "this build has no AVX512-FP16 arithmetic (ARCH=native on a CPU with it compiles it in)", native_f16_built};
}  // namespace

TEST_CASE("f16: add, accumulation and relu in f16 arithmetic give the conversion path's bits" * kNeedsNativeF16) {
  REQUIRE(cpu::native_f16_available());  // else both runs would take the conversion path
  const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff,
                               0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7d00, 0x3c00, 0xbc00, 0x3c01};
  std::vector<uint16_t> a, b;
  for (uint16_t x : specials)
    for (uint16_t y : specials) a.push_back(x), b.push_back(y);
  for (uint32_t i = 0; i < 65536; ++i) a.push_back(uint16_t(i)), b.push_back(uint16_t(i * 131u + 7u));
  a.resize(a.size() - 5), b.resize(b.size() - 5);  // not a multiple of 32: the masked tail runs
  const int64_t n = int64_t(a.size());
  auto run = [&](bool native_on) {
    cpu::set_native_f16(native_on);
    std::vector<uint16_t> sum(a.size()), acc = b, relu(a.size()), grad(a.size());
    const Kernels& k = cpu_table();
    k.add(DType::f16, a.data(), b.data(), sum.data(), n, nullptr);
    k.axpby(DType::f16, 1.0, a.data(), 1.0, acc.data(), n, nullptr);
    k.relu_forward(DType::f16, a.data(), relu.data(), n, nullptr);
    k.relu_backward(DType::f16, a.data(), b.data(), grad.data(), n, nullptr);
    cpu::set_native_f16(true);
    return std::vector<std::vector<uint16_t>>{sum, acc, relu, grad};
  };
  const auto native = run(true), converted = run(false);
  const char* names[] = {"add", "axpby(1, 1)", "relu_forward", "relu_backward"};
  auto is_nan = [](uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; };
  for (int o = 0; o < 4; ++o) {
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t x = native[size_t(o)][size_t(i)], y = converted[size_t(o)][size_t(i)];
      if (x != y && !(is_nan(x) && is_nan(y)) && bad++ < 3) {
        char line[128];
        std::snprintf(line, sizeof line, "%s(0x%04x, 0x%04x): native 0x%04x, converted 0x%04x", names[o],
                      unsigned(a[size_t(i)]), unsigned(b[size_t(i)]), unsigned(x), unsigned(y));
        MESSAGE(std::string(line));
      }
    }
    CHECK_MESSAGE(bad == 0, std::string(names[o]));
  }
  // And the values themselves: relu(-0) is -0, relu(NaN) is NaN, 65504 + 65504 overflows to inf.
  CHECK(native[2][16] == 0x8000);
  CHECK(is_nan(native[2][10 * 16]));
  CHECK(native[0][6 * 16 + 6] == 0x7c00);
}

TEST_CASE_TEMPLATE("f16/bf16: im2col/col2im, elementwise, bias, pooling and loss kernels match f32", T16, f16, bf16) {
  const Conv2dGeometry g = make_conv2d_geometry(1, 3, 7, 6, 4, 3, 3, 2, 2, 1, 1);
  const auto x = f16_values<T16>(g.C * g.H * g.W, 7), col = f16_values<T16>(g.col_rows() * g.col_cols(), 8);
  std::vector<double> got[2][2];
  const DType dts[2] = {DType::f32, kHalf<T16>};
  for (int i = 0; i < 2; ++i) {
    Tensor X = Tensor::from_vector(x, {g.C * g.H * g.W}, dts[i]), COL = Tensor::empty({g.col_rows() * g.col_cols()}, dts[i]);
    cpu_table().im2col(dts[i], g, X.raw_data(), COL.raw_data(), nullptr);
    got[i][0] = COL.to_double_vector();
    Tensor C2 = Tensor::from_vector(col, {g.col_rows() * g.col_cols()}, dts[i]), X2 = Tensor::empty({g.C * g.H * g.W}, dts[i]);
    cpu_table().col2im(dts[i], g, C2.raw_data(), X2.raw_data(), nullptr);
    got[i][1] = X2.to_double_vector();
  }
  CHECK(got[1][0] == got[0][0]);  // im2col moves values: exact
  CHECK(count_mismatches(got[1][1], got[0][1], 1e-3 * kTol<T16>, 1e-4 * kTol<T16>, "col2im") == 0);

  // Elementwise kernels over an odd length past the conversion chunk, in place too.
  const int64_t n = 5003;
  const auto a = f16_values<T16>(n, 20, -2, 2), b = f16_values<T16>(n, 21, -2, 2);
  std::vector<double> res[2][5];
  for (int i = 0; i < 2; ++i) {
    const DType dt = dts[i];
    Tensor A = Tensor::from_vector(a, {n}, dt), B = Tensor::from_vector(b, {n}, dt), Y = Tensor::empty({n}, dt);
    cpu_table().add(dt, A.raw_data(), B.raw_data(), Y.raw_data(), n, nullptr);
    res[i][0] = Y.to_double_vector();
    Tensor Y2 = B.clone();
    cpu_table().axpby(dt, 0.5, A.raw_data(), -1.25, Y2.raw_data(), n, nullptr);
    res[i][1] = Y2.to_double_vector();
    Tensor R = A.clone();
    cpu_table().relu_forward(dt, R.raw_data(), R.raw_data(), n, nullptr);  // in place
    res[i][2] = R.to_double_vector();
    Tensor GX = Tensor::empty({n}, dt);
    cpu_table().relu_backward(dt, R.raw_data(), B.raw_data(), GX.raw_data(), n, nullptr);
    res[i][3] = GX.to_double_vector();
    Tensor Y3 = A.clone();
    Tensor bias = Tensor::from_vector(f16_values<T16>(7, 22), {7}, dt), gb = Tensor::empty({7}, dt);
    cpu_table().bias_add(dt, Y3.raw_data(), bias.raw_data(), 1, 7, 714, nullptr);  // 7 * 714 = 4998 values
    cpu_table().bias_backward(dt, A.raw_data(), gb.raw_data(), 2, 7, 357, nullptr);
    std::vector<double> v = Y3.to_double_vector(), gbv = gb.to_double_vector();
    v.insert(v.end(), gbv.begin(), gbv.end());
    res[i][4] = v;
  }
  const char* names[5] = {"add", "axpby", "relu_forward", "relu_backward", "bias_add/backward"};
  for (int k = 0; k < 5; ++k) {
    CHECK(count_mismatches(res[1][k], res[0][k], 1e-3 * kTol<T16>, 1e-6 * kTol<T16>, names[k]) == 0);
    CHECK(count_not_one_rounding<T16>(res[1][k], res[0][k], 1e-7, names[k]) == 0);
  }
  CHECK(res[1][2] == res[0][2]);  // relu is exact
  CHECK(res[1][3] == res[0][3]);

  // Pooling planes, softmax cross-entropy (f32 losses/probs, 16-bit gradient).
  const Pool2dGeometry pg = make_pool2d_geometry(2, 3, 7, 9, 3, 3, 2, 2, 1, 1);
  const auto px = f16_values<T16>(2 * 3 * 7 * 9, 30);
  const auto logits = f16_values<T16>(4 * 10, 31, -5, 5);
  const std::vector<int64_t> labels = {3, 0, 9, 5};
  std::vector<double> pool[2], ce[2];
  for (int i = 0; i < 2; ++i) {
    const DType dt = dts[i];
    Tensor X = Tensor::from_vector(px, {2 * 3 * 7 * 9}, dt), Y = Tensor::empty({pg.N * pg.C * pg.P * pg.Q}, dt);
    std::vector<int32_t> am(size_t(pg.N * pg.C * pg.P * pg.Q));
    cpu_table().max_pool2d_forward(dt, pg, X.raw_data(), Y.raw_data(), am.data(), nullptr);
    Tensor GX = Tensor::empty({2 * 3 * 7 * 9}, dt), A = Tensor::empty({6 * 2 * 2}, dt), GA = Tensor::empty({2 * 3 * 7 * 9}, dt);
    cpu_table().max_pool2d_backward(dt, pg, X.raw_data(), Y.raw_data(), Y.raw_data(), am.data(), GX.raw_data(), nullptr);
    cpu_table().adaptive_avg_pool2d_forward(dt, X.raw_data(), A.raw_data(), 6, 7, 9, 2, 2, nullptr);
    cpu_table().adaptive_avg_pool2d_backward(dt, A.raw_data(), GA.raw_data(), 6, 7, 9, 2, 2, nullptr);
    for (const Tensor& t : {Y, GX, A, GA}) {
      auto v = t.to_double_vector();
      pool[i].insert(pool[i].end(), v.begin(), v.end());
    }
    Tensor L = Tensor::from_vector(logits, {4, 10}, dt), losses = Tensor::empty({4}), probs = Tensor::empty({4, 10});
    Tensor gl = Tensor::full({1}, 0.75), G = Tensor::empty({4, 10}, dt);
    cpu_table().softmax_cross_entropy_forward(dt, L.raw_data(), labels.data(), losses.raw_data(), probs.raw_data(), 4, 10,
                                        0.1, nullptr);
    cpu_table().softmax_cross_entropy_backward(dt, probs.raw_data(), labels.data(), gl.raw_data(), 0.25, G.raw_data(), 4, 10,
                                         0.1, nullptr);
    for (const Tensor& t : {losses, probs, G}) {
      auto v = t.to_double_vector();
      ce[i].insert(ce[i].end(), v.begin(), v.end());
    }
  }
  CHECK(count_mismatches(pool[1], pool[0], 1e-3 * kTol<T16>, 1e-6 * kTol<T16>, "pooling") == 0);
  CHECK(count_mismatches(ce[1], ce[0], 1e-3 * kTol<T16>, 1e-6 * kTol<T16>, "cross-entropy") == 0);
}

TEST_CASE_TEMPLATE("f16/bf16: batch-norm kernels take 16-bit data with f32 parameters and statistics", T16, f16, bf16) {
  const int64_t N = 3, C = 4, HW = 37;
  const auto x = f16_values<T16>(N * C * HW, 40, -3, 5), gy = f16_values<T16>(N * C * HW, 41);
  const std::vector<double> gamma = {0.5, 1.0, 1.5, -1.0}, beta = {0.1, -0.2, 0.3, 0.0};
  std::vector<double> out[2];
  const DType dts[2] = {DType::f32, kHalf<T16>};
  for (int i = 0; i < 2; ++i) {
    const DType dt = dts[i];
    Tensor X = Tensor::from_vector(x, {N * C * HW}, dt), GY = Tensor::from_vector(gy, {N * C * HW}, dt);
    Tensor Y = Tensor::empty({N * C * HW}, dt), GX = Tensor::empty({N * C * HW}, dt), GX2 = Tensor::empty({N * C * HW}, dt);
    Tensor g = Tensor::from_vector(gamma, {C}), b = Tensor::from_vector(beta, {C});  // f32 parameters
    Tensor rm = Tensor::zeros({C}), rv = Tensor::full({C}, 1.0), sm = Tensor::empty({C}), si = Tensor::empty({C});
    Tensor gg = Tensor::empty({C}), gbt = Tensor::empty({C}), gg2 = Tensor::empty({C}), gb2 = Tensor::empty({C});
    Tensor Ye = Tensor::empty({N * C * HW}, dt);
    cpu_table().batch_norm_forward_train(dt, X.raw_data(), g.raw_data(), b.raw_data(), Y.raw_data(), sm.raw_data(),
                                   si.raw_data(), rm.raw_data(), rv.raw_data(), N, C, HW, 0.1, 1e-5, nullptr);
    cpu_table().batch_norm_backward_train(dt, X.raw_data(), GY.raw_data(), g.raw_data(), sm.raw_data(), si.raw_data(),
                                    GX.raw_data(), gg.raw_data(), gbt.raw_data(), N, C, HW, 1e-5, nullptr);
    cpu_table().batch_norm_forward_eval(dt, X.raw_data(), g.raw_data(), b.raw_data(), rm.raw_data(), rv.raw_data(),
                                  Ye.raw_data(), N, C, HW, 1e-5, nullptr);
    cpu_table().batch_norm_backward_eval(dt, X.raw_data(), GY.raw_data(), g.raw_data(), rm.raw_data(), rv.raw_data(),
                                   GX2.raw_data(), gg2.raw_data(), gb2.raw_data(), N, C, HW, 1e-5, nullptr);
    for (const Tensor& t : {Y, sm, si, rm, rv, GX, gg, gbt, Ye, GX2, gg2, gb2}) {
      auto v = t.to_double_vector();
      out[i].insert(out[i].end(), v.begin(), v.end());
    }
  }
  CHECK(count_mismatches(out[1], out[0], 2e-3 * kTol<T16>, 1e-5 * kTol<T16>, "batch norm") == 0);
}

TEST_CASE_TEMPLATE("f16/bf16: sum propagates inf and NaN, argmax, normalize_u8, random fills, sgd_update", T16, f16,
                   bf16) {
  constexpr DType kH = kHalf<T16>;
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t n : {int64_t(10), int64_t(40000)}) {
    std::vector<double> v = f16_values<T16>(n, 50);
    Tensor s = Tensor::empty({1}, kH);
    Tensor x = Tensor::from_vector(v, {n}, kH);
    cpu_table().sum(kH, x.raw_data(), s.raw_data(), n, nullptr);
    double exact = 0;
    for (double a : v) exact += a;
    CHECK(std::fabs(s.item() - exact) <= 1e-3 * kTol<T16> * (std::fabs(exact) + 1));
    v[size_t(n / 2)] = inf;
    x = Tensor::from_vector(v, {n}, kH);
    cpu_table().sum(kH, x.raw_data(), s.raw_data(), n, nullptr);
    CHECK(std::isinf(s.item()));
    v[size_t(n / 3)] = -inf;  // inf - inf
    x = Tensor::from_vector(v, {n}, kH);
    cpu_table().sum(kH, x.raw_data(), s.raw_data(), n, nullptr);
    CHECK(std::isnan(s.item()));
    v[size_t(n / 3)] = std::nan("");
    v[size_t(n / 2)] = 0;
    x = Tensor::from_vector(v, {n}, kH);
    cpu_table().sum(kH, x.raw_data(), s.raw_data(), n, nullptr);
    CHECK(std::isnan(s.item()));
    // Through the op: an overflowing 16-bit gradient shows up in the 16-bit sum.
    CHECK(std::isnan(ops::sum(x).item()));
  }
  // A finite 16-bit sum beyond the type's range overflows to inf (the documented behaviour).
  CHECK(std::isinf(ops::sum(Tensor::full({100}, kH == DType::f16 ? 1000.0 : 1e37, kH)).item()));

  Tensor rows = Tensor::from_vector({1, 3, 3, -1, 2, std::nan(""), 0, 5, 4}, {3, 3}, kH);
  const std::vector<double> idx = ops::argmax(rows).to_double_vector();
  CHECK(idx == std::vector<double>{1, 2, 1});

  ChannelNorm norm;
  norm.channels = 3;
  for (int c = 0; c < 3; ++c) norm.mean[c] = 0.4f + 0.05f * float(c), norm.inv_std[c] = 4.0f - float(c);
  std::vector<double> pix(2 * 3 * 5 * 4);
  for (size_t i = 0; i < pix.size(); ++i) pix[i] = double((i * 37) % 256);
  Tensor u8 = Tensor::from_vector(pix, {2, 3, 5, 4}, DType::u8);
  Tensor y16 = ops::normalize_u8(u8, norm, kH), y32 = ops::normalize_u8(u8, norm, DType::f32);
  CHECK(y16.dtype() == kH);
  CHECK(count_mismatches(y16.to_double_vector(), y32.to_double_vector(), 1e-3 * kTol<T16>, 1e-6, "normalize_u8") == 0);

  Generator g16(7), g32(7);
  Tensor r16 = Tensor::empty({1001}, kH), r32 = Tensor::empty({1001});
  ops::normal_(r16, 0.5, 2.0, g16);
  ops::normal_(r32, 0.5, 2.0, g32);
  CHECK(count_mismatches(r16.to_double_vector(), r32.to_double_vector(), 1e-3 * kTol<T16>, 1e-6, "normal_") == 0);
  ops::uniform_(r16, -1, 3, g16);
  ops::uniform_(r32, -1, 3, g32);
  CHECK(count_mismatches(r16.to_double_vector(), r32.to_double_vector(), 1e-3 * kTol<T16>, 1e-6, "uniform_") == 0);

  for (bool nesterov : {false, true}) {
    std::vector<double> res[2];
    for (DType dt : {DType::f32, kH}) {
      Tensor w = Tensor::from_vector(f16_values<T16>(3000, 60), {3000}, dt);
      Tensor gr = Tensor::from_vector(f16_values<T16>(3000, 61), {3000}, dt);
      Tensor buf = Tensor::empty({3000}, dt);
      SgdParams p;
      p.lr = 0.1, p.momentum = 0.9, p.weight_decay = 1e-4, p.nesterov = nesterov, p.first_step = true, p.grad_scale = 0.5;
      ops::sgd_update_(w, gr, buf, p);
      p.first_step = false;
      ops::sgd_update_(w, gr, buf, p);
      auto a = w.to_double_vector(), b = buf.to_double_vector();
      a.insert(a.end(), b.begin(), b.end());
      res[dt == kH] = a;
    }
    // w is rounded to H after each step: absolute error up to an ulp of max |w|.
    CHECK(count_mismatches(res[1], res[0], 2e-3 * kTol<T16>, 1e-3 * kTol<T16>, "sgd_update") == 0);
  }
}

TEST_CASE_TEMPLATE("f16/bf16: ops accept 16-bit tensors, batch norm mixes f32 parameters, other mixes are errors",
                   T16, f16, bf16) {
  constexpr DType kH = kHalf<T16>;
  const std::string name = dtype_name(kH);
  Tensor x = Tensor::from_vector(f16_values<T16>(2 * 3 * 4 * 4, 70), {2, 3, 4, 4}, kH);
  Tensor w16 = Tensor::from_vector(f16_values<T16>(5 * 3 * 3 * 3, 71), {5, 3, 3, 3}, kH);
  Tensor w32 = Tensor::from_vector(f16_values<T16>(5 * 3 * 3 * 3, 71), {5, 3, 3, 3}, DType::f32);
  const auto opt = ops::Conv2dOptions::square(1, 1);
  CHECK(ops::conv2d(x, w16, Tensor(), opt).dtype() == kH);
  expect_error([&] { ops::conv2d(x, w32, Tensor(), opt); }, "conv2d: weight is f32 but the input is " + name);
  Tensor b32 = Tensor::zeros({5});
  expect_error([&] { ops::conv2d(x, w16, b32, opt); }, "conv2d: bias is f32 but the input is " + name);
  Tensor g = Tensor::full({3}, 1.0), b = Tensor::zeros({3}), rm = Tensor::zeros({3}), rv = Tensor::full({3}, 1.0);
  CHECK(ops::batch_norm2d(x, g, b, rm, rv, true, 0.1, 1e-5).dtype() == kH);
  Tensor g16 = Tensor::full({3}, 1.0, kH);
  expect_error([&] { ops::batch_norm2d(x, g16, b, rm, rv, true, 0.1, 1e-5); },
               "batch_norm2d: weight must be f32 for " + name + " input");
  Tensor logits = Tensor::from_vector(f16_values<T16>(3 * 4, 72), {3, 4}, kH);
  logits.set_requires_grad(true);
  Tensor labels = Tensor::from_vector({0, 3, 1}, {3}, DType::i64);
  Tensor loss = ops::cross_entropy(logits, labels);
  CHECK(loss.dtype() == DType::f32);
  loss.backward();
  REQUIRE(logits.grad().defined());
  CHECK(logits.grad().dtype() == kH);
  Tensor l32 = Tensor::zeros({3, 4});
  expect_error([&] { ops::add(logits, l32); }, "add: b is f32 but the input is " + name);
  Tensor fc16 = Tensor::zeros({2, 4}, kH), fc32 = Tensor::zeros({2, 4});
  CHECK(ops::linear(logits, fc16, Tensor()).dtype() == kH);
  expect_error([&] { ops::linear(logits, fc32, Tensor()); }, "linear: weight is f32 but the input is " + name);
}
