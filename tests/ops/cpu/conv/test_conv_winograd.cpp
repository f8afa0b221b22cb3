// tests/ops/cpu/conv/test_conv_winograd.cpp — Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution
// (ops/cpu/conv/conv_winograd.h) against plain double loops, in f64, f32 and f16,
// over batch sizes, odd and tiny images, every padding it takes and channel
// counts past one tile batch; then the policy (names, forced, benchmark
// mode) through the conv2d kernels of the CPU table, forward, backward
// data and filter gradient; the filter gradient against double sums too.
// The transforms and the products run on the GEMM kernel set's vector
// tiles (ops/cpu/conv/winograd_micro.h, winograd4_micro.h), so the direct comparisons run once per
// kernel set this CPU supports (AVX-512, AVX2, portable: 32-, 32- and
// 16-byte transform vectors). The op harness also runs every conv case with
// Winograd forced (backends cpu-winograd and cpu-winograd4, tests/support/op_harness.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/half.h"
#include "ops/cpu/conv/conv_winograd.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm/gemm_isa.h"
#include "ops/kernels.h"

namespace ember {
namespace {

struct PolicyAfter {  // puts the default policy back when a test case ends
  ~PolicyAfter() { cpu::set_conv_policy(cpu::ConvPolicy::heuristic); }
};
struct IsaAfter {  // puts the best kernel set back when a test case ends
  ~IsaAfter() { cpu::set_gemm_isa(cpu::supported_gemm_isas().back()); }
};

std::vector<double> values(size_t n, uint64_t seed) {
  std::vector<double> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = double(int64_t(s >> 35) % 1025 - 512) / 512.0;  // multiples of 1/512: exact in f16
  }
  return v;
}

// y[n, k, p, q] = sum over c, r, s of x[n, c, p + r - pad, q + s - pad] w[k, c, r, s]
std::vector<double> reference(const Conv2dGeometry& g, const std::vector<double>& x, const std::vector<double>& w) {
  std::vector<double> y(size_t(g.N * g.K * g.P * g.Q), 0.0);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t p = 0; p < g.P; ++p)
        for (int64_t q = 0; q < g.Q; ++q) {
          double acc = 0;
          for (int64_t c = 0; c < g.C; ++c)
            for (int64_t r = 0; r < g.R; ++r)
              for (int64_t s = 0; s < g.S; ++s) {
                const int64_t h = p + r - g.pad_h, v = q + s - g.pad_w;
                if (h < 0 || h >= g.H || v < 0 || v >= g.W) continue;
                acc += x[size_t(((n * g.C + c) * g.H + h) * g.W + v)] * w[size_t(((k * g.C + c) * g.R + r) * g.S + s)];
              }
          y[size_t(((n * g.K + k) * g.P + p) * g.Q + q)] = acc;
        }
  return y;
}

template <typename S>
std::vector<S> as(const std::vector<double>& v) {
  std::vector<S> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = cpu::convert_value<S>(v[i]);
  return out;
}

// Max |got - want| / (1 + |want|) over the output.
template <typename S>
double worst_error(const std::vector<S>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(double(cpu::convert_value<double>(got[i])) - want[i]) / (1 + std::fabs(want[i])));
  return worst;
}

struct Geom {
  int64_t N, C, H, W, K, pad;
};
const std::vector<Geom> kGeoms = {
    {1, 1, 3, 3, 1, 0},  {2, 3, 7, 9, 5, 1},   {3, 2, 5, 4, 4, 2},   {1, 4, 6, 6, 3, 0},
    {2, 5, 1, 1, 2, 1},  {4, 16, 7, 7, 8, 1},  {2, 33, 9, 11, 17, 1}, {5, 8, 28, 28, 6, 1},  // 28x28: tile rows batch
    {1, 3, 2, 8, 2, 2},
    // 57x58: 29 tiles a row (vector blocks and a partial one; batches of 6
    // tile rows that cross images; the odd last row not written in place).
    {3, 2, 57, 58, 3, 1},
    // 16 output channels (two tiles a lane pair in the filter gradient) and
    // 49 tiles an image, one image a thread: an odd count of tiles.
    {2, 3, 13, 13, 16, 1},
    // 20 output channels: one tile a lane, a part-filled panel.
    {2, 3, 14, 14, 20, 1},
    // 48x48: F(4x4)'s 12 tiles a row, batches of 8 tile rows that split an
    // image (runs that start past its first tile row: written in place
    // only within their plane).
    {2, 3, 48, 48, 5, 1},
    // 8x8: two 4x4 (four 2x2) tiles a row that end at the padding column:
    // no room to put images side by side.
    {3, 4, 8, 8, 6, 1},
};

std::string describe(cpu::GemmIsa isa, const Geom& t) {
  return std::string(cpu::gemm_isa_name(isa)) + " N=" + std::to_string(t.N) + " C=" + std::to_string(t.C) +
         " H=" + std::to_string(t.H) + " W=" + std::to_string(t.W) + " K=" + std::to_string(t.K) +
         " pad=" + std::to_string(t.pad);
}

// The f32 error bound of F(m x m, 3x3) against exact sums, in units of
// 2e-6 sqrt(terms): F(2x2)'s transforms only add and halve; F(4x4)'s
// multiply by up to 5 (B^T), 8 (A^T) and 1/24 (G), so its transformed
// values round coarser against the result (up to 1.5 units measured on
// these cases, against F(2x2)'s 1; 4 leaves a margin without hiding a
// wrong transform, whose errors are of the order of the values).
double f32_growth(int m) { return m == 2 ? 1.0 : 4.0; }

TEST_CASE_TEMPLATE("conv winograd F(2x2,3x3) and F(4x4,3x3) match direct convolution", S, double, float, f16) {
  IsaAfter restore;
  for (int m : {2, 4})
    for (cpu::GemmIsa isa : cpu::supported_gemm_isas()) {
      for (const Geom& t : kGeoms) {
        cpu::set_gemm_isa(isa);
        const Conv2dGeometry g = make_conv2d_geometry(t.N, t.C, t.H, t.W, t.K, 3, 3, 1, 1, t.pad, t.pad);
        INFO("F(" << m << "x" << m << ") " << describe(isa, t));
        const auto x = values(size_t(g.N * g.C * g.H * g.W), 1), w = values(size_t(g.K * g.C * 9), 2);
        const auto want = reference(g, x, w);
        const auto xs = as<S>(x), ws = as<S>(w);
        std::vector<S> y(want.size(), cpu::convert_value<S>(123.0));
        cpu::conv_forward_winograd(g, xs.data(), ws.data(), y.data(), m);
        // f64: rounding only; f32: a few ulps of sums of ~9C terms; f16: the output's rounding (2^-11) dominates.
        const double tol = std::is_same_v<S, double>  ? 1e-12
                           : std::is_same_v<S, float> ? 2e-6 * f32_growth(m) * std::sqrt(double(9 * g.C))
                                                      : 1e-3;
        const double worst = worst_error(y, want);
        CHECK_MESSAGE(worst < tol, "worst " << worst << " tolerance " << tol);
      }
    }
}

// gw[k, c, r, s] = sum over n, p, q of gy[n, k, p, q] x[n, c, p + r - pad, q + s - pad]
std::vector<double> reference_filter_grad(const Conv2dGeometry& g, const std::vector<double>& x,
                                          const std::vector<double>& gy) {
  std::vector<double> gw(size_t(g.K * g.C * 9), 0.0);
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t s = 0; s < 3; ++s) {
          double acc = 0;
          for (int64_t n = 0; n < g.N; ++n)
            for (int64_t p = 0; p < g.P; ++p)
              for (int64_t q = 0; q < g.Q; ++q) {
                const int64_t h = p + r - g.pad_h, v = q + s - g.pad_w;
                if (h < 0 || h >= g.H || v < 0 || v >= g.W) continue;
                acc += gy[size_t(((n * g.K + k) * g.P + p) * g.Q + q)] * x[size_t(((n * g.C + c) * g.H + h) * g.W + v)];
              }
          gw[size_t(((k * g.C + c) * 3 + r) * 3 + s)] = acc;
        }
  return gw;
}

TEST_CASE_TEMPLATE("conv winograd F(2x2,3x3) and F(4x4,3x3) filter gradients match the direct sums", S, double, float,
                   f16) {
  IsaAfter restore;
  std::vector<Geom> geoms = kGeoms;
  geoms.push_back({9, 4, 6, 5, 3, 1});  // more images than threads, uneven shares
  for (int m : {2, 4})
    for (cpu::GemmIsa isa : cpu::supported_gemm_isas()) {
      for (const Geom& t : geoms) {
        cpu::set_gemm_isa(isa);
        const Conv2dGeometry g = make_conv2d_geometry(t.N, t.C, t.H, t.W, t.K, 3, 3, 1, 1, t.pad, t.pad);
        INFO("F(" << m << "x" << m << ") " << describe(isa, t));
        const auto x = values(size_t(g.N * g.C * g.H * g.W), 6), gy = values(size_t(g.N * g.K * g.P * g.Q), 7);
        const auto want = reference_filter_grad(g, x, gy);
        const auto xs = as<S>(x), gys = as<S>(gy);
        std::vector<S> gw(want.size(), cpu::convert_value<S>(123.0));
        cpu::conv_backward_filter_winograd(g, xs.data(), gys.data(), gw.data(), m);
        // f64: rounding only; f32: a few ulps of sums of N*P*Q terms; f16: the output's rounding dominates.
        const double terms = double(g.N * g.P * g.Q);
        const double tol = std::is_same_v<S, double>  ? 1e-12
                           : std::is_same_v<S, float> ? 2e-6 * f32_growth(m) * std::sqrt(terms)
                                                      : 1e-3;
        const double worst = worst_error(gw, want);
        CHECK_MESSAGE(worst < tol, "worst " << worst << " tolerance " << tol);
      }
    }
}

TEST_CASE("conv winograd: refuses what it does not apply to") {
  const Conv2dGeometry g = make_conv2d_geometry(1, 1, 5, 5, 1, 5, 5, 1, 1, 2, 2);
  std::vector<float> x(25), w(25), y(25);
  CHECK_THROWS_WITH_AS(cpu::conv_forward_winograd(g, x.data(), w.data(), y.data(), 4),
                       "conv2d: Winograd F(m x m, 3x3) needs a 3x3 filter, stride 1 and padding <= 2", Error);
  CHECK_THROWS_WITH_AS(cpu::conv_backward_filter_winograd(g, x.data(), y.data(), w.data(), 2),
                       "conv2d: Winograd F(m x m, 3x3) needs a 3x3 filter, stride 1 and padding <= 2", Error);
  const Conv2dGeometry three = make_conv2d_geometry(1, 1, 5, 5, 1, 3, 3, 1, 1, 1, 1);
  CHECK_THROWS_WITH_AS(cpu::conv_forward_winograd(three, x.data(), w.data(), y.data(), 3),
                       "conv2d: Winograd output tiles are 2x2 or 4x4, not 3", Error);
}

TEST_CASE("conv winograd: every policy gives the same forward, backward data and filter gradient through the CPU kernels") {
  PolicyAfter restore;
  const Kernels& k = kernels_for(Device::cpu());
  // Wide enough for the heuristic to pick Winograd, and a batch for both threads.
  const Conv2dGeometry g = make_conv2d_geometry(4, 32, 10, 9, 40, 3, 3, 1, 1, 1, 1);
  const auto x = as<float>(values(size_t(g.N * g.C * g.H * g.W), 3));
  const auto w = as<float>(values(size_t(g.K * g.C * 9), 4));
  const auto gy = as<float>(values(size_t(g.N * g.K * g.P * g.Q), 5));
  auto run = [&](cpu::ConvPolicy p) {
    cpu::set_conv_policy(p);
    std::vector<float> y(gy.size()), gx(x.size()), gw(w.size());
    k.conv2d_forward(DType::f32, g, x.data(), w.data(), y.data(), nullptr);
    k.conv2d_backward_data(DType::f32, g, gy.data(), w.data(), gx.data(), nullptr);
    k.conv2d_backward_filter(DType::f32, g, x.data(), gy.data(), gw.data(), nullptr);
    return std::vector<std::vector<float>>{y, gx, gw};
  };
  const auto direct = run(cpu::ConvPolicy::gemm);
  cpu::clear_conv_choices();
  for (cpu::ConvPolicy p : {cpu::ConvPolicy::winograd, cpu::ConvPolicy::winograd4, cpu::ConvPolicy::window, cpu::ConvPolicy::heuristic,
                            cpu::ConvPolicy::benchmark, cpu::ConvPolicy::benchmark}) {  // benchmark twice: timed first call, then the cached choice
    CAPTURE(cpu::conv_policy_name(p));
    const auto got = run(p);
    for (size_t which = 0; which < 3; ++which) {
      CAPTURE(which);
      const auto& a = got[which];
      const auto& b = direct[which];
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i])) / (1 + std::fabs(b[i])));
      // F(4x4, 3x3) rounds coarser (f32_growth); benchmark mode may take it
      const bool f4 = p == cpu::ConvPolicy::winograd4 || p == cpu::ConvPolicy::benchmark;
      CHECK(worst < (f4 ? 1e-4 : 2e-5));
    }
  }
}

}  // namespace
}  // namespace ember
