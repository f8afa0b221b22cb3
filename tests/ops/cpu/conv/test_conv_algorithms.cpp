// tests/ops/cpu/conv/test_conv_algorithms.cpp — every CPU convolution algorithm
// (ops/cpu/conv/conv_policy.h: window, gemm, winograd, winograd4) on every pass (forward,
// backward data, backward filter) against plain double loops, in f64, f32,
// f16 and bf16 (bf16 on AVX512-BF16 and through f32), under every GEMM
// kernel set this CPU runs: strides 1-3, padding 0-3 (also wider than the
// filter), 1x1 to 7x7 and non-square filters, odd
// and tiny images, output channel counts that fold lanes (8, 16) and that
// do not fill a tile, pointwise planes read in place (>= 256 pixels) and
// stacked, partial stacks, and fewer images than threads. Then the policy
// itself: names, forced choices and benchmark mode's cached choice.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/error.h"
#include "engine/bfloat16.h"
#include "engine/half.h"
#include "engine/parallel.h"
#include "ops/cpu/conv/conv_bf16_kernels.h"
#include "ops/cpu/conv/conv_policy.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm/gemm_isa.h"
#include "ops/kernels.h"

namespace ember {
namespace {

struct RestoreAfter {  // the default policy, Winograd rule and best kernel set when a test case ends
  ~RestoreAfter() {
    cpu::set_conv_policy(cpu::ConvPolicy::heuristic);
    cpu::set_winograd_rule(cpu::WinogradRule::automatic);
    cpu::set_gemm_isa(cpu::supported_gemm_isas().back());
  }
};

std::vector<double> values(size_t n, uint64_t seed) {
  std::vector<double> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 11;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = double(int64_t(s >> 35) % 257 - 128) / 64.0;  // multiples of 1/64 in [-2, 2]: exact in f16 and bf16
  }
  return v;
}

// x[n, c, h, w] at padded output position (p, q), tap (r, s), or 0 outside.
double at(const Conv2dGeometry& g, const std::vector<double>& x, int64_t n, int64_t c, int64_t p, int64_t q,
          int64_t r, int64_t s) {
  const int64_t h = p * g.stride_h - g.pad_h + r, w = q * g.stride_w - g.pad_w + s;
  if (h < 0 || h >= g.H || w < 0 || w >= g.W) return 0;
  return x[size_t(((n * g.C + c) * g.H + h) * g.W + w)];
}

struct Passes {
  std::vector<double> y, gx, gw;
};

// The three passes by their definitions, in double.
Passes reference(const Conv2dGeometry& g, const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& gy) {
  Passes out{std::vector<double>(gy.size(), 0.0), std::vector<double>(x.size(), 0.0),
             std::vector<double>(w.size(), 0.0)};
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t p = 0; p < g.P; ++p)
        for (int64_t q = 0; q < g.Q; ++q) {
          const size_t yi = size_t(((n * g.K + k) * g.P + p) * g.Q + q);
          for (int64_t c = 0; c < g.C; ++c)
            for (int64_t r = 0; r < g.R; ++r)
              for (int64_t s = 0; s < g.S; ++s) {
                const size_t wi = size_t(((k * g.C + c) * g.R + r) * g.S + s);
                out.y[yi] += at(g, x, n, c, p, q, r, s) * w[wi];
                out.gw[wi] += at(g, x, n, c, p, q, r, s) * gy[yi];
                const int64_t h = p * g.stride_h - g.pad_h + r, v = q * g.stride_w - g.pad_w + s;
                if (h >= 0 && h < g.H && v >= 0 && v < g.W) out.gx[size_t(((n * g.C + c) * g.H + h) * g.W + v)] += w[wi] * gy[yi];
              }
        }
  return out;
}

template <typename S>
std::vector<S> as(const std::vector<double>& v) {
  std::vector<S> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = cpu::convert_value<S>(v[i]);
  return out;
}

// max |got - want| / (scale + |want|), scale: the largest |want| over sqrt(terms) (>= 1e-3).
template <typename S>
double worst_error(const std::vector<S>& got, const std::vector<double>& want) {
  double big = 0;
  for (double v : want) big = std::max(big, std::fabs(v));
  const double scale = std::max(1e-3, big * 1e-2);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(cpu::convert_value<double>(got[i]) - want[i]) / (scale + std::fabs(want[i])));
  return worst;
}

template <typename S>
double tolerance() {
  if (std::is_same_v<S, double>) return 1e-12;
  // F(4x4, 3x3) rounds coarser (its transforms scale by up to 5, 8 and
  // 1/24): up to 2.5e-4 measured on these cases, where the outputs of
  // [-2, 2] values cancel to far below their terms
  if (std::is_same_v<S, float>) return cpu::conv_policy() == cpu::ConvPolicy::winograd4 ? 5e-4 : 2e-5;
  if (std::is_same_v<S, bf16>) return 8e-3;  // the output's own rounding, 2^-9 relative, with margin
  return 2e-3;  // f16: the output's own rounding, 2^-11 relative
}

const char* dtype_label(DType dt) { return dtype_name(dt); }

// Every pass of g in storage type S with the current policy and kernel set.
template <typename S>
void check_geometry(const Conv2dGeometry& g, uint64_t seed) {
  const auto x = values(size_t(g.N * g.C * g.H * g.W), seed);
  const auto w = values(size_t(g.K * g.C * g.R * g.S), seed + 1);
  const auto gy = values(size_t(g.N * g.K * g.P * g.Q), seed + 2);
  const Passes want = reference(g, x, w, gy);
  const auto xs = as<S>(x), ws = as<S>(w), gys = as<S>(gy);
  std::vector<S> y(gy.size()), gx(x.size()), gw(w.size());
  // Poison the outputs: every element must be written.
  std::fill(y.begin(), y.end(), cpu::convert_value<S>(1e4));
  std::fill(gx.begin(), gx.end(), cpu::convert_value<S>(1e4));
  std::fill(gw.begin(), gw.end(), cpu::convert_value<S>(1e4));
  const Kernels& k = cpu_kernels();
  const DType dt = dtype_of<S>::value;
  k.conv2d_forward(dt, g, xs.data(), ws.data(), y.data(), nullptr);
  k.conv2d_backward_data(dt, g, gys.data(), ws.data(), gx.data(), nullptr);
  k.conv2d_backward_filter(dt, g, xs.data(), gys.data(), gw.data(), nullptr);
  const std::string dtype = dtype_label(dt);
  CAPTURE(dtype);
  CHECK(worst_error(y, want.y) < tolerance<S>());
  CHECK(worst_error(gx, want.gx) < tolerance<S>());
  CHECK(worst_error(gw, want.gw) < tolerance<S>());
}

struct Case {
  int64_t N, C, H, W, K, R, S, stride, pad;
};
// (N, C, H, W, K, R, S, stride, pad)
const std::vector<Case> kCases = {
    {1, 1, 3, 3, 1, 3, 3, 1, 1},    {2, 3, 7, 9, 5, 3, 3, 1, 1},    {3, 2, 5, 4, 4, 3, 3, 1, 2},
    {2, 4, 6, 6, 3, 3, 3, 1, 0},    {2, 5, 1, 1, 2, 3, 3, 1, 1},    {4, 16, 7, 7, 16, 3, 3, 1, 1},
    {3, 8, 9, 11, 8, 3, 3, 1, 1},   {2, 33, 9, 11, 17, 3, 3, 1, 1}, {5, 8, 28, 28, 6, 3, 3, 1, 1},
    {2, 3, 11, 13, 7, 3, 3, 2, 1},  {3, 4, 8, 8, 16, 3, 3, 2, 1},   {2, 6, 9, 7, 5, 1, 1, 2, 0},
    {2, 3, 15, 15, 8, 7, 7, 2, 3},  {2, 2, 10, 9, 3, 5, 5, 3, 2},   {2, 4, 6, 7, 3, 2, 3, 1, 0},
    {2, 3, 5, 6, 4, 3, 1, 1, 1},    {1, 2, 5, 5, 3, 3, 3, 1, 3},    {2, 3, 6, 5, 2, 3, 3, 2, 3},
    {3, 7, 20, 17, 9, 1, 1, 1, 0},  {2, 5, 4, 5, 40, 1, 1, 1, 0},   {2, 12, 17, 16, 20, 1, 1, 1, 0},  // in place: 272 px
    {1, 4, 16, 16, 8, 3, 3, 1, 1},  {1, 3, 20, 20, 33, 1, 1, 1, 0}, {7, 6, 3, 3, 10, 3, 3, 1, 1},   // partial stacks
    {2, 64, 4, 4, 64, 3, 3, 1, 1},
    {20, 4, 5, 5, 6, 3, 3, 2, 1},   {18, 16, 8, 8, 32, 3, 3, 2, 1}, {9, 8, 6, 6, 12, 1, 1, 2, 0},  // strided stacks
};

template <typename S>
void check_all_cases() {
  for (size_t i = 0; i < kCases.size(); ++i) {
    const Case& c = kCases[i];
    const Conv2dGeometry g =
        make_conv2d_geometry(c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.stride, c.stride, c.pad, c.pad);
    char what[128];
    std::snprintf(what, sizeof what, "N%lld C%lld %lldx%lld K%lld %lldx%lld/%lld pad %lld", (long long)c.N,
                  (long long)c.C, (long long)c.H, (long long)c.W, (long long)c.K, (long long)c.R, (long long)c.S,
                  (long long)c.stride, (long long)c.pad);
    const std::string geometry = what;
    CAPTURE(geometry);
    check_geometry<S>(g, 17 * i + 3);
  }
}

void for_each_isa(const std::function<void()>& f) {
  for (cpu::GemmIsa isa : cpu::supported_gemm_isas()) {
    const std::string isa_name = cpu::gemm_isa_name(isa);
    CAPTURE(isa_name);
    REQUIRE(cpu::set_gemm_isa(isa));
    f();
  }
}

TEST_CASE("conv algorithms: window, every pass, f64/f32/f16, every kernel set, against double loops") {
  RestoreAfter restore;
  cpu::set_conv_policy(cpu::ConvPolicy::window);
  for_each_isa([] {
    check_all_cases<double>();
    check_all_cases<float>();
    check_all_cases<f16>();
  });
}

TEST_CASE("conv algorithms: window in bf16, on AVX512-BF16 (where the CPU has it) and through f32") {
  struct Restore {
    ~Restore() { cpu::set_bf16_conv_kernel_mode(cpu::Bf16KernelMode::automatic); }
  } restore_bf16;
  RestoreAfter restore;
  cpu::set_conv_policy(cpu::ConvPolicy::window);
  for (bool native : {true, false}) {
    CAPTURE(native);
    cpu::set_bf16_conv_kernel_mode(native ? cpu::Bf16KernelMode::on : cpu::Bf16KernelMode::off);
    if (native && !cpu::bf16_conv_kernels()) MESSAGE("this CPU has no AVX512-BF16: bf16 runs through f32 only");
    check_all_cases<bf16>();
  }
}

TEST_CASE("conv algorithms: gemm lowerings, every pass, against double loops") {
  RestoreAfter restore;
  cpu::set_conv_policy(cpu::ConvPolicy::gemm);
  check_all_cases<double>();
  check_all_cases<float>();
  check_all_cases<f16>();
}

TEST_CASE("conv algorithms: winograd where it applies (window elsewhere), every pass") {
  RestoreAfter restore;
  cpu::set_conv_policy(cpu::ConvPolicy::winograd);
  check_all_cases<double>();
  check_all_cases<float>();
}

TEST_CASE("conv algorithms: winograd4 where it applies (window elsewhere), every pass") {
  RestoreAfter restore;
  cpu::set_conv_policy(cpu::ConvPolicy::winograd4);
  check_all_cases<double>();
  check_all_cases<float>();
}

TEST_CASE("conv algorithms: one thread and fewer images than threads") {
  RestoreAfter restore;
  cpu::set_conv_policy(cpu::ConvPolicy::window);
  const int before = num_threads();
  for (int threads : {1, 3}) {
    CAPTURE(threads);
    set_num_threads(threads);
    check_geometry<float>(make_conv2d_geometry(1, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1), 5);   // N < threads
    check_geometry<float>(make_conv2d_geometry(2, 16, 16, 16, 32, 1, 1, 1, 1, 0, 0), 6);  // in place, N < 3
    check_geometry<float>(make_conv2d_geometry(2, 8, 14, 14, 16, 3, 3, 2, 2, 1, 1), 7);
  }
  set_num_threads(before);
}

TEST_CASE("conv algorithms: copy_rows writes exactly the rows' span, one image or several side by side, under every kernel set") {
  RestoreAfter restore;
  for_each_isa([] {
    const auto copy_rows = cpu::gemm_kernels<float>().copy_rows;
    int cases = 0;
    for (int64_t n : {1, 7, 15, 16, 17, 28, 56})
      for (int64_t left : {0, 1, 3})
        for (int64_t extra : {0, 1, 2, 9})  // width - left - n
          for (int64_t rows : {1, 2, 3, 8})
            for (int64_t src_gap : {0, 5})
              for (int64_t images : {1, 3}) {
                // image g's rows at g * ldimage (rows * ldsrc + a gap); dst row i * images + g
                const int64_t width = left + n + extra, lddst = width, ldsrc = n + src_gap,
                              ldimage = images == 1 ? 0 : rows * ldsrc + 2 * src_gap + 1, total = rows * images;
                const int64_t guard = 40;  // sentinels on both sides of both arrays
                const int64_t src_size = (images - 1) * ldimage + rows * ldsrc;
                // (nothing after src: a read past the last image's last row is outside the
                // allocation, which the AddressSanitizer build reports)
                std::vector<float> src(size_t(guard + src_size), -1.0f),
                    dst(size_t(guard + total * lddst + guard), -2.0f);
                for (int64_t g = 0; g < images; ++g)
                  for (int64_t i = 0; i < rows; ++i)
                    for (int64_t j = 0; j < n; ++j)
                      src[size_t(guard + g * ldimage + i * ldsrc + j)] = float(1 + g * 10000 + i * 100 + j);
                const std::vector<float> src_before = src;
                copy_rows(src.data() + guard, ldsrc, n, dst.data() + guard, left, width, rows, images, ldimage);
                CHECK(src == src_before);
                bool ok = true;
                for (int64_t p = 0; p < int64_t(dst.size()); ++p) {
                  const int64_t at = p - guard, r = at >= 0 ? at / lddst : -1, j = at >= 0 ? at % lddst : -1;
                  const int64_t i = r / images, g = r % images;
                  float want = -2.0f;  // outside the rows: untouched
                  if (at >= 0 && r < total && j < width)
                    want = j < left || j >= left + n ? 0.0f : float(1 + g * 10000 + i * 100 + j - left);
                  ok = ok && dst[size_t(p)] == want;
                }
                CHECK_MESSAGE(ok, "n=" << n << " left=" << left << " width=" << width << " rows=" << rows
                                        << " ldsrc=" << ldsrc << " images=" << images);
                ++cases;
              }
    CHECK(cases > 100);
  });
}

TEST_CASE("conv algorithms: policy names, parsing, where Winograd applies") {
  for (cpu::ConvPolicy p : {cpu::ConvPolicy::heuristic, cpu::ConvPolicy::benchmark, cpu::ConvPolicy::window,
                            cpu::ConvPolicy::gemm, cpu::ConvPolicy::winograd, cpu::ConvPolicy::winograd4})
    CHECK(cpu::parse_conv_policy(cpu::conv_policy_name(p)) == p);
  CHECK_THROWS_WITH_AS(
      cpu::parse_conv_policy("fft"),
      "EMBER_CPU_CONV=fft: unknown convolution policy (expected heuristic, benchmark, window, gemm, winograd or winograd4)",
      Error);
  CHECK(cpu::winograd_applies(make_conv2d_geometry(1, 1, 5, 5, 1, 3, 3, 1, 1, 1, 1)));
  CHECK(cpu::winograd_applies(make_conv2d_geometry(1, 1, 5, 5, 1, 3, 3, 1, 1, 2, 0)));
  CHECK_FALSE(cpu::winograd_applies(make_conv2d_geometry(1, 1, 5, 5, 1, 3, 3, 2, 2, 1, 1)));  // stride 2
  CHECK_FALSE(cpu::winograd_applies(make_conv2d_geometry(1, 1, 5, 5, 1, 1, 1, 1, 1, 0, 0)));  // 1x1
  CHECK_FALSE(cpu::winograd_applies(make_conv2d_geometry(1, 1, 5, 5, 1, 3, 3, 1, 1, 3, 3)));  // padding 3
}

TEST_CASE("conv algorithms: the heuristic takes Winograd for 3x3 stride-1 layers of >= 32 channels (filter gradients >= 16) and enough tiles, where it pays, F(4x4) where its tiles fit the rows") {
  RestoreAfter restore;
  using cpu::ConvAlgo;
  using cpu::ConvPass;
  const int before = num_threads();
  set_num_threads(2);
  cpu::set_conv_policy(cpu::ConvPolicy::heuristic);
  // ResNet-50's 256-channel 14x14 layer at batch 16: 784 tiles, 392 a thread.
  const Conv2dGeometry wide = make_conv2d_geometry(16, 256, 14, 14, 256, 3, 3, 1, 1, 1, 1);
  // Also taken: ResNet-20's 32-channel 14x14 layer (batch 128), 512
  // channels at 7x7 (narrower than 28: F(2x2)).
  const std::vector<Conv2dGeometry> taken = {make_conv2d_geometry(128, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1),
                                             make_conv2d_geometry(16, 512, 7, 7, 512, 3, 3, 1, 1, 1, 1)};
  // F(4x4) (rows 4j or 4j + 3 wide): ResNet-50's 64-channel 56x56 layer, 32
  // in / 64 out at 28x28, ResNet-20's 16-channel 28x28 layers (16 in or out)
  // and its 64-channel 7x7 one (512 tiles), 28 wide but 14 high, 16
  // channels 27 and 20 wide (16 in or out).
  const std::vector<Conv2dGeometry> taken4 = {
      make_conv2d_geometry(16, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1), make_conv2d_geometry(16, 32, 28, 28, 64, 3, 3, 1, 1, 1, 1),
      make_conv2d_geometry(128, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1), make_conv2d_geometry(128, 16, 28, 28, 32, 3, 3, 1, 1, 1, 1),
      make_conv2d_geometry(128, 32, 28, 28, 16, 3, 3, 1, 1, 1, 1), make_conv2d_geometry(128, 64, 7, 7, 64, 3, 3, 1, 1, 1, 1),
      make_conv2d_geometry(32, 32, 14, 28, 32, 3, 3, 1, 1, 1, 1), make_conv2d_geometry(128, 16, 27, 27, 16, 3, 3, 1, 1, 1, 1),
      make_conv2d_geometry(128, 16, 20, 20, 16, 3, 3, 1, 1, 1, 1), make_conv2d_geometry(128, 16, 20, 20, 32, 3, 3, 1, 1, 1, 1),
      make_conv2d_geometry(128, 32, 20, 20, 16, 3, 3, 1, 1, 1, 1)};
  // 16 channels 14 wide (4x4 tiles would compute 16 columns): F(2x2) for
  // the filter gradient only (as 16 channels on any row F(4x4) does not fit).
  const Conv2dGeometry narrow = make_conv2d_geometry(128, 16, 14, 14, 16, 3, 3, 1, 1, 1, 1);     // 16 channels
  const Conv2dGeometry narrow_in = make_conv2d_geometry(128, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1);  // 16 in
  const Conv2dGeometry narrow_out = make_conv2d_geometry(128, 32, 30, 30, 16, 3, 3, 1, 1, 1, 1); // 16 out, 30 wide
  // Too few 4x4 tiles: 128 channels 7x7 at batch 32 (128 tiles, 64 a
  // thread) for the filter gradient (F(4x4) forward), 64 channels 28x28 at
  // batch 4 (196 tiles) likewise, but F(2x2) there.
  const Conv2dGeometry forward_only4 = make_conv2d_geometry(32, 128, 7, 7, 128, 3, 3, 1, 1, 1, 1);
  const Conv2dGeometry forward_only4_wide = make_conv2d_geometry(4, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1);
  const Conv2dGeometry small_plane = make_conv2d_geometry(128, 64, 6, 6, 64, 3, 3, 1, 1, 1, 1);  // 6x6, < 128 channels
  const Conv2dGeometry small_plane_in = make_conv2d_geometry(16, 64, 7, 7, 512, 3, 3, 1, 1, 1, 1);  // 64 in
  const Conv2dGeometry few_tiles = make_conv2d_geometry(2, 256, 14, 14, 256, 3, 3, 1, 1, 1, 1);  // 49 a thread
  const Conv2dGeometry one_image = make_conv2d_geometry(1, 128, 56, 56, 128, 3, 3, 1, 1, 1, 1);  // N < threads
  const Conv2dGeometry strided = make_conv2d_geometry(16, 256, 28, 28, 256, 3, 3, 2, 2, 1, 1);
  cpu::set_winograd_rule(cpu::WinogradRule::on);
  CHECK(cpu::winograd_pays());
  CHECK(cpu::conv_algo_for(ConvPass::forward, wide, DType::f32) == ConvAlgo::winograd);
  CHECK(cpu::conv_algo_for(ConvPass::backward_data, wide, DType::f32) == ConvAlgo::winograd);
  CHECK(cpu::conv_algo_for(ConvPass::forward, wide, DType::f16) == ConvAlgo::winograd);
  CHECK(cpu::conv_algo_for(ConvPass::backward_filter, wide, DType::f32) == ConvAlgo::winograd);
  for (const Conv2dGeometry& g : taken) {
    INFO("N=" << g.N << " C=" << g.C << " K=" << g.K << " H=" << g.H);
    CHECK(cpu::conv_algo_for(ConvPass::forward, g, DType::f32) == ConvAlgo::winograd);
    CHECK(cpu::conv_algo_for(ConvPass::backward_data, g, DType::f32) == ConvAlgo::winograd);
    CHECK(cpu::conv_algo_for(ConvPass::backward_filter, g, DType::f32) == ConvAlgo::winograd);
  }
  for (const Conv2dGeometry& g : taken4) {
    INFO("N=" << g.N << " C=" << g.C << " K=" << g.K << " H=" << g.H << " W=" << g.W);
    CHECK(cpu::conv_algo_for(ConvPass::forward, g, DType::f32) == ConvAlgo::winograd4);
    CHECK(cpu::conv_algo_for(ConvPass::backward_data, g, DType::f32) == ConvAlgo::winograd4);
    CHECK(cpu::conv_algo_for(ConvPass::backward_filter, g, DType::f32) == ConvAlgo::winograd4);
  }
  for (const Conv2dGeometry& g : {forward_only4, forward_only4_wide}) {
    INFO("N=" << g.N << " C=" << g.C << " H=" << g.H);
    CHECK(cpu::conv_algo_for(ConvPass::forward, g, DType::f32) == ConvAlgo::winograd4);
    CHECK(cpu::conv_algo_for(ConvPass::backward_data, g, DType::f32) == ConvAlgo::winograd4);
    CHECK(cpu::conv_algo_for(ConvPass::backward_filter, g, DType::f32) != ConvAlgo::winograd4);
  }
  CHECK(cpu::conv_algo_for(ConvPass::backward_filter, forward_only4_wide, DType::f32) == ConvAlgo::winograd);
  // 16 channels where F(4x4) does not fit: the filter gradient only.
  for (const Conv2dGeometry& g : {narrow, narrow_in, narrow_out}) {
    INFO("N=" << g.N << " C=" << g.C << " K=" << g.K << " H=" << g.H);
    CHECK(cpu::conv_algo_for(ConvPass::forward, g, DType::f32) != ConvAlgo::winograd);
    CHECK(cpu::conv_algo_for(ConvPass::backward_data, g, DType::f32) != ConvAlgo::winograd);
    CHECK(cpu::conv_algo_for(ConvPass::backward_filter, g, DType::f32) == ConvAlgo::winograd);
  }
  const Conv2dGeometry eight_channels = make_conv2d_geometry(128, 8, 28, 28, 16, 3, 3, 1, 1, 1, 1);
  const Conv2dGeometry narrow_small_plane = make_conv2d_geometry(128, 16, 7, 7, 16, 3, 3, 1, 1, 1, 1);
  for (const Conv2dGeometry& g :
       {eight_channels, narrow_small_plane, small_plane, small_plane_in, few_tiles, one_image, strided}) {
    INFO("N=" << g.N << " C=" << g.C << " K=" << g.K << " H=" << g.H);
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_filter}) {
      CHECK(cpu::conv_algo_for(pass, g, DType::f32) != ConvAlgo::winograd);
      CHECK(cpu::conv_algo_for(pass, g, DType::f32) != ConvAlgo::winograd4);
    }
  }
  // Enough tiles on two threads are too few on eight.
  set_num_threads(8);
  const Conv2dGeometry eight = make_conv2d_geometry(8, 256, 14, 14, 256, 3, 3, 1, 1, 1, 1);  // 392 tiles
  CHECK(cpu::conv_algo_for(ConvPass::forward, eight, DType::f32) != ConvAlgo::winograd);
  set_num_threads(2);
  CHECK(cpu::conv_algo_for(ConvPass::forward, eight, DType::f32) == ConvAlgo::winograd);
  if (cpu::bf16_conv_kernels()) {  // the bf16 window tiles outrun it where they run
    CHECK(cpu::conv_algo_for(ConvPass::forward, wide, DType::bf16) == ConvAlgo::window);
    // ... but not in strided backward data, which they run in f32 through
    // phases: there the GEMM lowering from 256 channels, as in f32.
    const Conv2dGeometry strided512 = make_conv2d_geometry(16, 512, 14, 14, 512, 3, 3, 2, 2, 1, 1);
    const Conv2dGeometry strided128 = make_conv2d_geometry(16, 128, 56, 56, 128, 3, 3, 2, 2, 1, 1);
    CHECK(cpu::conv_algo_for(ConvPass::backward_data, strided512, DType::bf16) == ConvAlgo::gemm);
    CHECK(cpu::conv_algo_for(ConvPass::backward_filter, strided512, DType::bf16) == ConvAlgo::window);
    CHECK(cpu::conv_algo_for(ConvPass::backward_data, strided128, DType::bf16) == ConvAlgo::window);
  }
  CHECK(cpu::conv_policy_description() == "heuristic (Winograd for wide 3x3 layers: EMBER_CPU_WINOGRAD=1)");

  cpu::set_winograd_rule(cpu::WinogradRule::off);
  CHECK_FALSE(cpu::winograd_pays());
  CHECK(cpu::conv_algo_for(ConvPass::forward, wide, DType::f32) == ConvAlgo::window);
  CHECK(cpu::conv_algo_for(ConvPass::forward, taken4[0], DType::f32) == ConvAlgo::window);
  CHECK(cpu::conv_policy_description() == "heuristic (no Winograd: EMBER_CPU_WINOGRAD=0)");

  // Measured: the rule follows the measurement, and the banner says it.
  cpu::set_winograd_rule(cpu::WinogradRule::automatic);
  const double speedup = cpu::winograd_speedup();
  MESSAGE("Winograd / window on the reference layer: " << speedup << "x");
  CHECK(speedup > 0.2);
  CHECK(speedup < 5.0);
  CHECK(cpu::winograd_speedup() == speedup);  // measured once
  const bool pays = speedup >= cpu::kWinogradMinSpeedup;
  CHECK(cpu::winograd_pays() == pays);
  CHECK((cpu::conv_algo_for(ConvPass::forward, wide, DType::f32) == ConvAlgo::winograd) == pays);
  const std::string banner = cpu::conv_policy_description();
  CHECK(banner.rfind(pays ? "heuristic (Winograd for wide 3x3 layers: measured " : "heuristic (no Winograd: measured ", 0) == 0);
  cpu::set_conv_policy(cpu::ConvPolicy::benchmark);
  CHECK(cpu::conv_policy_description() == "benchmark");
  set_num_threads(before);
}

TEST_CASE("conv algorithms: forced policies pick what they say; benchmark mode times each pass once and keeps it") {
  RestoreAfter restore;
  const Conv2dGeometry g3 = make_conv2d_geometry(4, 32, 10, 9, 40, 3, 3, 1, 1, 1, 1);
  const Conv2dGeometry g1 = make_conv2d_geometry(4, 32, 10, 9, 40, 1, 1, 2, 2, 0, 0);
  using cpu::ConvAlgo;
  using cpu::ConvPass;
  cpu::set_conv_policy(cpu::ConvPolicy::gemm);
  CHECK(cpu::conv_algo_for(ConvPass::forward, g3, DType::f32) == ConvAlgo::gemm);
  cpu::set_conv_policy(cpu::ConvPolicy::window);
  CHECK(cpu::conv_algo_for(ConvPass::backward_filter, g3, DType::f32) == ConvAlgo::window);
  cpu::set_conv_policy(cpu::ConvPolicy::winograd);
  CHECK(cpu::conv_algo_for(ConvPass::forward, g3, DType::f32) == ConvAlgo::winograd);
  CHECK(cpu::conv_algo_for(ConvPass::backward_data, g3, DType::f32) == ConvAlgo::winograd);
  CHECK(cpu::conv_algo_for(ConvPass::backward_filter, g3, DType::f32) == ConvAlgo::winograd);
  CHECK(cpu::conv_algo_for(ConvPass::forward, g1, DType::f32) == ConvAlgo::window);          // does not apply
  cpu::set_conv_policy(cpu::ConvPolicy::winograd4);
  CHECK(cpu::conv_algo_for(ConvPass::forward, g3, DType::f32) == ConvAlgo::winograd4);
  CHECK(cpu::conv_algo_for(ConvPass::backward_data, g3, DType::f32) == ConvAlgo::winograd4);
  CHECK(cpu::conv_algo_for(ConvPass::backward_filter, g3, DType::f32) == ConvAlgo::winograd4);
  CHECK(cpu::conv_algo_for(ConvPass::forward, g1, DType::f32) == ConvAlgo::window);

  cpu::set_conv_policy(cpu::ConvPolicy::benchmark);
  cpu::clear_conv_choices();
  std::vector<ConvAlgo> ran;
  auto record = [&](ConvAlgo a) { ran.push_back(a); };
  cpu::run_conv_pass(ConvPass::forward, g3, DType::f32, record);  // first call: all four, timed
  CHECK(ran == std::vector<ConvAlgo>{ConvAlgo::window, ConvAlgo::gemm, ConvAlgo::winograd, ConvAlgo::winograd4});
  const ConvAlgo kept = cpu::conv_algo_for(ConvPass::forward, g3, DType::f32);
  ran.clear();
  cpu::run_conv_pass(ConvPass::forward, g3, DType::f32, record);
  REQUIRE(ran.size() == 1);
  CHECK(ran[0] == kept);
  ran.clear();
  cpu::run_conv_pass(ConvPass::backward_filter, g3, DType::f32, record);  // its own key
  CHECK(ran.size() == 4);
  ran.clear();
  cpu::run_conv_pass(ConvPass::backward_filter, g1, DType::f32, record);  // no Winograd: window and gemm
  CHECK(ran.size() == 2);
  ran.clear();
  cpu::run_conv_pass(ConvPass::forward, g3, DType::f16, record);  // another dtype: timed again
  CHECK(ran.size() == 4);
  cpu::clear_conv_choices();
  CHECK(cpu::conv_algo_for(ConvPass::forward, g3, DType::f32) == ConvAlgo::window);
}

}  // namespace
}  // namespace ember
