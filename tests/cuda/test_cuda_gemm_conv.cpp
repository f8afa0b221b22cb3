// tests/cuda/test_cuda_gemm_conv.cpp — the CUDA table's GEMM, im2col/col2im,
// convolution, batch-norm and pooling kernels against the CPU table's, on
// identical inputs (on the emulator always, on a GPU when there is one).
//
// Every kernel is called through cuda_table() with device tensors and
// through cpu_table() with host tensors, and the whole output buffers are
// compared: f64 to ~1e-10 and f32 to ~1e-4 of the result's scale, NaN only
// where the CPU has NaN. Shapes are small (the emulator runs every thread on
// the CPU) but cover both GEMM tiles, their edges, all transposes, leading
// dimensions, split-K in the filter gradient, split channels in batch norm,
// and every stride/padding regime of the convolutions and pools.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/rng.h"
#include "tests/cuda/cuda_test_env.h"

using namespace ember;
using ember::testing::cpu_table;
using ember::testing::cuda_available;
using ember::testing::cuda_stream;
using ember::testing::cuda_table;
using ember::testing::to_cuda;
using ember::testing::to_host;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const DType kFloatTypes[] = {DType::f64, DType::f32};

double tolerance(DType dt) { return dt == DType::f64 ? 1e-10 : 1e-4; }

// n values uniform in [lo, hi), deterministic for a seed.
std::vector<double> uniform(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  PhiloxStream rs(seed, 7);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * rs.uniform();
  return v;
}

// A host tensor and a device tensor holding the same values.
struct Both {
  Tensor cpu, dev;
  void* c() const { return cpu.raw_data(); }
  void* d() const { return dev.raw_data(); }
};
Both both(const std::vector<double>& v, const Shape& shape, DType dt) {
  return Both{Tensor::from_vector(v, shape, dt), to_cuda(v, shape, dt)};
}
Both both_filled(int64_t n, double value, DType dt) {
  return both(std::vector<double>(static_cast<size_t>(n), value), Shape{n}, dt);
}

// The device result equals the CPU result within tol of the result's scale
// (max |cpu|, at least 1); NaN exactly where the CPU has NaN.
void expect_close(const Both& t, double tol, const std::string& what) {
  const std::vector<double> want = t.cpu.to_double_vector();
  const std::vector<double> got = to_host(t.dev);
  REQUIRE(want.size() == got.size());
  double scale = 1.0;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
  size_t bad = 0, first = 0;
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok = std::isnan(want[i]) ? std::isnan(got[i])
                    : std::isinf(want[i]) ? got[i] == want[i]
                                          : std::abs(got[i] - want[i]) <= tol * scale;
    if (!ok) {
      if (bad++ == 0) first = i;
      if (!std::isnan(got[i])) worst = std::max(worst, std::abs(got[i] - want[i]));
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << want.size() << " values differ; first at " << first
                               << " (cuda " << (bad ? got[first] : 0.0) << ", cpu " << (bad ? want[first] : 0.0)
                               << "), worst |diff| " << worst << ", scale " << scale);
}

// Bitwise-equal host copies (determinism checks).
bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = to_host(a), y = to_host(b);
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

}  // namespace

// ------------------------------------------------------------------- gemm

TEST_CASE("cuda gemm matches the cpu over shapes, transposes, leading dimensions, alpha and beta" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  struct Shape3 {
    int64_t M, N, K;
  };
  // small tile (M or N < 64) and large tile, exact and ragged edges, K not a multiple of 16
  const Shape3 shapes[] = {{1, 1, 1}, {7, 13, 5}, {64, 64, 64}, {65, 63, 17}, {130, 37, 300}, {100, 80, 40},
                           {3, 70, 33}};
  struct AlphaBeta {
    double alpha, beta;
  };
  const AlphaBeta coefs[] = {{1.0, 0.0}, {-0.75, 1.5}, {2.0, -1.0}};
  uint64_t seed = 1;
  int variant = 0;
  for (DType dt : kFloatTypes)
    for (const Shape3& s : shapes)
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) {
          const AlphaBeta ab = coefs[variant++ % 3];
          // leading dimensions past the logical width (lda > K etc.) on every other case
          const int64_t pad = (variant % 2) ? 3 : 0;
          const int64_t a_rows = ta ? s.K : s.M, a_cols = ta ? s.M : s.K;
          const int64_t b_rows = tb ? s.N : s.K, b_cols = tb ? s.K : s.N;
          const int64_t lda = a_cols + pad, ldb = b_cols + 2 * pad, ldc = s.N + pad;
          CAPTURE(dtype_name(dt));
          CAPTURE(s.M);
          CAPTURE(s.N);
          CAPTURE(s.K);
          CAPTURE(ta);
          CAPTURE(tb);
          CAPTURE(ab.alpha);
          CAPTURE(ab.beta);
          CAPTURE(lda);
          const Both A = both(uniform(a_rows * lda, seed++), Shape{a_rows, lda}, dt);
          const Both B = both(uniform(b_rows * ldb, seed++), Shape{b_rows, ldb}, dt);
          // beta == 0 must not read C: start it as NaN. The padding columns
          // of C must stay as they are (NaN or random) on both.
          const std::vector<double> c0 =
              ab.beta == 0.0 ? std::vector<double>(size_t(s.M * ldc), kNaN) : uniform(s.M * ldc, seed++);
          const Both C = both(c0, Shape{s.M, ldc}, dt);
          cpu_table().gemm(dt, ta, tb, s.M, s.N, s.K, ab.alpha, A.c(), lda, B.c(), ldb, ab.beta, C.c(), ldc, nullptr);
          cuda_table().gemm(dt, ta, tb, s.M, s.N, s.K, ab.alpha, A.d(), lda, B.d(), ldb, ab.beta, C.d(), ldc,
                            cuda_stream());
          expect_close(C, tolerance(dt), "gemm");
        }
}

TEST_CASE("cuda gemm on the 128x128 tile of big f32 products matches the cpu" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  // 11 x 12 = 132 tiles of 128: the smallest grid that takes the huge tile,
  // ragged at both edges; K below and above its BK of 8. K is small so the
  // emulator stays fast.
  const int64_t M = 1300, N = 1420;
  const DType dt = DType::f32;
  uint64_t seed = 77;
  int variant = 0;
  for (int64_t K : {3, 9})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb, ++variant) {
        if ((variant + int(K)) % 2) continue;  // half of the 8 combinations: every transpose pair once
        CAPTURE(K);
        CAPTURE(ta);
        CAPTURE(tb);
        const int64_t a_rows = ta ? K : M, lda = ta ? M : K, b_rows = tb ? N : K, ldb = tb ? K : N;
        const Both A = both(uniform(a_rows * lda, seed++), Shape{a_rows, lda}, dt);
        const Both B = both(uniform(b_rows * ldb, seed++), Shape{b_rows, ldb}, dt);
        const Both C = both(uniform(M * N, seed++), Shape{M, N}, dt);
        cpu_table().gemm(dt, ta, tb, M, N, K, 1.25, A.c(), lda, B.c(), ldb, 0.5, C.c(), N, nullptr);
        cuda_table().gemm(dt, ta, tb, M, N, K, 1.25, A.d(), lda, B.d(), ldb, 0.5, C.d(), N, cuda_stream());
        expect_close(C, tolerance(dt), "gemm 128x128 tile");
      }
}

TEST_CASE("cuda gemm with K == 0 or alpha == 0 only scales C, and M or N == 0 writes nothing" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  for (DType dt : kFloatTypes) {
    CAPTURE(dtype_name(dt));
    const int64_t M = 5, N = 9, K = 4;
    const Both A = both(std::vector<double>(size_t(M * K), kNaN), Shape{M, K}, dt);  // must not be read
    const Both B = both(uniform(K * N, 3), Shape{K, N}, dt);
    for (double beta : {0.0, 2.5}) {
      CAPTURE(beta);
      const Both C = both(beta == 0.0 ? std::vector<double>(size_t(M * N), kNaN) : uniform(M * N, 4), Shape{M, N}, dt);
      cpu_table().gemm(dt, false, false, M, N, K, 0.0, A.c(), K, B.c(), N, beta, C.c(), N, nullptr);
      cuda_table().gemm(dt, false, false, M, N, K, 0.0, A.d(), K, B.d(), N, beta, C.d(), N, cuda_stream());
      expect_close(C, tolerance(dt), "alpha == 0");
      const Both C2 = both(uniform(M * N, 5), Shape{M, N}, dt);
      cpu_table().gemm(dt, false, false, M, N, 0, 1.0, A.c(), 1, B.c(), N, beta, C2.c(), N, nullptr);
      cuda_table().gemm(dt, false, false, M, N, 0, 1.0, A.d(), 1, B.d(), N, beta, C2.d(), N, cuda_stream());
      expect_close(C2, tolerance(dt), "K == 0");
    }
    const Both C3 = both(uniform(M * N, 6), Shape{M, N}, dt);
    cuda_table().gemm(dt, false, false, 0, N, K, 1.0, A.d(), K, B.d(), N, 0.0, C3.d(), N, cuda_stream());
    cuda_table().gemm(dt, false, false, M, 0, K, 1.0, A.d(), K, B.d(), N, 0.0, C3.d(), N, cuda_stream());
    expect_close(C3, 0.0, "M or N == 0 leaves C alone");
  }
}

// ---------------------------------------------------------- im2col / col2im

namespace {
struct ConvCase {
  int64_t N, C, H, W, K, R, S, sh, sw, ph, pw;
};
// For CAPTURE: every field of the case.
std::ostream& operator<<(std::ostream& os, const ConvCase& c) {
  return os << "N " << c.N << " C " << c.C << " H " << c.H << " W " << c.W << " K " << c.K << " R " << c.R << " S "
            << c.S << " stride " << c.sh << "x" << c.sw << " pad " << c.ph << "x" << c.pw;
}
Conv2dGeometry geometry(const ConvCase& c) {
  return make_conv2d_geometry(c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.sh, c.sw, c.ph, c.pw);
}
}  // namespace

TEST_CASE("cuda im2col and col2im match the cpu over geometries" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const ConvCase cases[] = {
      {1, 3, 5, 6, 1, 1, 1, 1, 1, 0, 0},   // 1x1
      {1, 2, 7, 6, 1, 3, 3, 1, 1, 1, 1},   // 3x3 pad 1
      {1, 3, 11, 13, 1, 7, 7, 2, 2, 3, 3}, // 7x7 stride 2 pad 3
      {1, 2, 8, 9, 1, 3, 3, 2, 2, 0, 0},   // stride 2
      {1, 2, 5, 4, 1, 5, 4, 1, 1, 0, 0},   // kernel == input
      {1, 1, 9, 7, 1, 3, 2, 2, 3, 1, 0},   // odd sizes, unequal strides and pads
      {1, 2, 4, 5, 1, 2, 3, 1, 2, 2, 3},   // padding wider than the kernel
  };
  uint64_t seed = 100;
  for (DType dt : kFloatTypes)
    for (const ConvCase& cc : cases) {
      const Conv2dGeometry g = geometry(cc);
      CAPTURE(dtype_name(dt));
      CAPTURE(cc);
      const int64_t chw = g.C * g.H * g.W, cols = g.col_rows() * g.col_cols();
      const Both x = both(uniform(chw, seed++), Shape{g.C, g.H, g.W}, dt);
      const Both col = both(std::vector<double>(size_t(cols), kNaN), Shape{g.col_rows(), g.col_cols()}, dt);
      cpu_table().im2col(dt, g, x.c(), col.c(), nullptr);
      cuda_table().im2col(dt, g, x.d(), col.d(), cuda_stream());
      expect_close(col, 0.0, "im2col");  // a copy: exact

      const Both dcol = both(uniform(cols, seed++), Shape{g.col_rows(), g.col_cols()}, dt);
      const Both gx = both(std::vector<double>(size_t(chw), kNaN), Shape{g.C, g.H, g.W}, dt);  // overwritten
      cpu_table().col2im(dt, g, dcol.c(), gx.c(), nullptr);
      cuda_table().col2im(dt, g, dcol.d(), gx.d(), cuda_stream());
      expect_close(gx, tolerance(dt), "col2im");
    }
}

// ------------------------------------------------------------ convolution

TEST_CASE("cuda conv2d forward, backward data and backward filter match the cpu" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const ConvCase cases[] = {
      // N  C   H   W   K  R  S sh sw ph pw
      {2, 5, 9, 8, 7, 3, 3, 1, 1, 1, 1},     // 3x3 same
      {3, 20, 11, 10, 24, 3, 3, 2, 2, 1, 1}, // 3x3 stride 2 (ResNet downsampling)
      {2, 3, 17, 15, 8, 7, 7, 2, 2, 3, 3},   // 7x7 stem
      {1, 16, 7, 7, 12, 1, 1, 1, 1, 0, 0},   // pointwise
      {2, 12, 9, 9, 6, 1, 1, 2, 2, 0, 0},    // 1x1 stride 2 shortcut
      {1, 4, 5, 5, 3, 5, 5, 1, 1, 0, 0},     // kernel == input: a 1x1 output
      {2, 3, 6, 13, 5, 5, 3, 1, 2, 2, 0},    // R != S, unequal strides and pads
      {1, 1, 12, 5, 1, 3, 5, 2, 1, 3, 2},    // one channel in and out, padding wider than half the kernel
      {3, 2, 6, 7, 9, 1, 1, 1, 1, 2, 1},     // 1x1 with padding (zero borders in the output)
      {2, 8, 9, 9, 64, 3, 3, 1, 1, 1, 1},    // K = 64: large tiles in forward and filter gradient
      {1, 64, 9, 9, 4, 3, 3, 1, 1, 1, 1},    // C = 64: large tiles in the data gradient
      {3, 7, 16, 16, 10, 5, 5, 2, 2, 2, 2},  // 5x5 stride 2: long N*P*Q for split-K
      {1, 1, 92, 92, 130, 1, 1, 1, 1, 0, 0}, // K = 130, N*P*Q = 8464: f32 forward on the 128x128 tile
  };
  uint64_t seed = 1000;
  for (DType dt : kFloatTypes)
    for (const ConvCase& cc : cases) {
      const Conv2dGeometry g = geometry(cc);
      CAPTURE(dtype_name(dt));
      CAPTURE(cc);
      const Shape xs{g.N, g.C, g.H, g.W}, ws{g.K, g.C, g.R, g.S}, ys{g.N, g.K, g.P, g.Q};
      const Both x = both(uniform(xs.numel(), seed++), xs, dt);
      const Both w = both(uniform(ws.numel(), seed++), ws, dt);
      const Both gy = both(uniform(ys.numel(), seed++), ys, dt);
      const double tol = tolerance(dt);

      const Both y = both(std::vector<double>(size_t(ys.numel()), kNaN), ys, dt);
      cpu_table().conv2d_forward(dt, g, x.c(), w.c(), y.c(), nullptr);
      cuda_table().conv2d_forward(dt, g, x.d(), w.d(), y.d(), cuda_stream());
      expect_close(y, tol, "conv2d_forward");

      const Both gx = both(std::vector<double>(size_t(xs.numel()), kNaN), xs, dt);
      cpu_table().conv2d_backward_data(dt, g, gy.c(), w.c(), gx.c(), nullptr);
      cuda_table().conv2d_backward_data(dt, g, gy.d(), w.d(), gx.d(), cuda_stream());
      expect_close(gx, tol, "conv2d_backward_data");

      const Both gw = both(std::vector<double>(size_t(ws.numel()), kNaN), ws, dt);
      cpu_table().conv2d_backward_filter(dt, g, x.c(), gy.c(), gw.c(), nullptr);
      cuda_table().conv2d_backward_filter(dt, g, x.d(), gy.d(), gw.d(), cuda_stream());
      expect_close(gw, tol, "conv2d_backward_filter");
    }
}

TEST_CASE("cuda conv2d backward filter (split-K) is deterministic" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const Conv2dGeometry g = make_conv2d_geometry(3, 6, 12, 12, 5, 3, 3, 1, 1, 1, 1);
  const Shape xs{g.N, g.C, g.H, g.W}, ws{g.K, g.C, g.R, g.S}, ys{g.N, g.K, g.P, g.Q};
  const DType dt = DType::f32;
  const Tensor x = to_cuda(uniform(xs.numel(), 11), xs, dt);
  const Tensor gy = to_cuda(uniform(ys.numel(), 12), ys, dt);
  const Tensor a = to_cuda(std::vector<double>(size_t(ws.numel()), 0.0), ws, dt);
  const Tensor b = to_cuda(std::vector<double>(size_t(ws.numel()), 1.0), ws, dt);
  cuda_table().conv2d_backward_filter(dt, g, x.raw_data(), gy.raw_data(), a.raw_data(), cuda_stream());
  cuda_table().conv2d_backward_filter(dt, g, x.raw_data(), gy.raw_data(), b.raw_data(), cuda_stream());
  CHECK(same_bits(a, b));
}

// ------------------------------------------------------------- batch norm

TEST_CASE("cuda batch norm train/eval forward and backward match the cpu" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  struct BnCase {
    int64_t N, C, HW;
  };
  const BnCase cases[] = {
      {2, 3, 5},    // small
      {4, 5, 1},    // HW = 1 (batch norm after a linear layer)
      {3, 2, 700},  // long channels: split into several partial-sum blocks
      {1, 4, 9},    // one image
      // HW = 1 is also a channels-last activation, [N*H*W, C, 1]: the rows
      // kernel, 32 channels a block. A partial tile of channels and rows that
      // do not fill the 8 row groups; then rows split over several blocks,
      // with a partial last chunk, and channels over two full tiles and one
      // partial (C a multiple of the pack: the elementwise passes move packs).
      {13, 37, 1},
      {4099, 72, 1},
  };
  const double momentum = 0.1, eps = 1e-5;
  uint64_t seed = 5000;
  for (DType dt : kFloatTypes)
    for (const BnCase& bc : cases) {
      CAPTURE(dtype_name(dt));
      CAPTURE(bc.N);
      CAPTURE(bc.C);
      CAPTURE(bc.HW);
      const double tol = tolerance(dt);
      const Shape xs{bc.N, bc.C, bc.HW}, cs{bc.C};
      const int64_t C = bc.C;
      // a mean far from 0 and a small spread: the shifted sums matter
      const Both x = both(uniform(xs.numel(), seed++, 2.5, 3.5), xs, dt);
      const Both gamma = both(uniform(C, seed++, 0.5, 1.5), cs, dt);
      const Both beta = both(uniform(C, seed++), cs, dt);
      const Both rmean = both(uniform(C, seed++), cs, dt);
      const Both rvar = both(uniform(C, seed++, 0.5, 2.0), cs, dt);

      // training forward: y, saved statistics and the running averages
      const Both y = both_filled(xs.numel(), kNaN, dt);
      const Both smean = both_filled(C, kNaN, dt), sinv = both_filled(C, kNaN, dt);
      cpu_table().batch_norm_forward_train(dt, x.c(), gamma.c(), beta.c(), y.c(), smean.c(), sinv.c(), rmean.c(),
                                           rvar.c(), bc.N, C, bc.HW, momentum, eps, nullptr);
      cuda_table().batch_norm_forward_train(dt, x.d(), gamma.d(), beta.d(), y.d(), smean.d(), sinv.d(), rmean.d(),
                                            rvar.d(), bc.N, C, bc.HW, momentum, eps, cuda_stream());
      expect_close(y, tol, "forward_train y");
      expect_close(smean, tol, "save_mean");
      expect_close(sinv, tol, "save_invstd");
      expect_close(rmean, tol, "running_mean");
      expect_close(rvar, tol, "running_var");

      // inference forward with the (updated) running statistics
      const Both ye = both_filled(xs.numel(), kNaN, dt);
      cpu_table().batch_norm_forward_eval(dt, x.c(), gamma.c(), beta.c(), rmean.c(), rvar.c(), ye.c(), bc.N, C, bc.HW,
                                          eps, nullptr);
      cuda_table().batch_norm_forward_eval(dt, x.d(), gamma.d(), beta.d(), rmean.d(), rvar.d(), ye.d(), bc.N, C,
                                           bc.HW, eps, cuda_stream());
      expect_close(ye, tol, "forward_eval y");

      // training backward from the CPU's saved statistics (the same values on both)
      const std::vector<double> sm = smean.cpu.to_double_vector(), si = sinv.cpu.to_double_vector();
      const Both sm2 = both(sm, cs, dt), si2 = both(si, cs, dt);
      const Both gy = both(uniform(xs.numel(), seed++), xs, dt);
      const Both gx = both_filled(xs.numel(), kNaN, dt);
      const Both gg = both_filled(C, kNaN, dt), gb = both_filled(C, kNaN, dt);
      cpu_table().batch_norm_backward_train(dt, x.c(), gy.c(), gamma.c(), sm2.c(), si2.c(), gx.c(), gg.c(), gb.c(),
                                            bc.N, C, bc.HW, 1e-5, nullptr);
      cuda_table().batch_norm_backward_train(dt, x.d(), gy.d(), gamma.d(), sm2.d(), si2.d(), gx.d(), gg.d(), gb.d(),
                                             bc.N, C, bc.HW, 1e-5, cuda_stream());
      expect_close(gx, tol, "backward_train gx");
      expect_close(gg, tol, "backward_train ggamma");
      expect_close(gb, tol, "backward_train gbeta");

      // inference backward
      const Both gxe = both_filled(xs.numel(), kNaN, dt);
      const Both gge = both_filled(C, kNaN, dt), gbe = both_filled(C, kNaN, dt);
      cpu_table().batch_norm_backward_eval(dt, x.c(), gy.c(), gamma.c(), rmean.c(), rvar.c(), gxe.c(), gge.c(),
                                           gbe.c(), bc.N, C, bc.HW, eps, nullptr);
      cuda_table().batch_norm_backward_eval(dt, x.d(), gy.d(), gamma.d(), rmean.d(), rvar.d(), gxe.d(), gge.d(),
                                            gbe.d(), bc.N, C, bc.HW, eps, cuda_stream());
      expect_close(gxe, tol, "backward_eval gx");
      expect_close(gge, tol, "backward_eval ggamma");
      expect_close(gbe, tol, "backward_eval gbeta");
    }
}

TEST_CASE("cuda batch norm + relu (fused, training) forward and backward match the cpu" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const int64_t N = 3, C = 4, HW = 700;  // long channels: several partial-sum blocks
  const double momentum = 0.1, eps = 1e-5;
  uint64_t seed = 6000;
  for (DType dt : kFloatTypes) {
    CAPTURE(dtype_name(dt));
    const double tol = tolerance(dt);
    const Shape xs{N, C, HW}, cs{C};
    // Centred data: about half of each channel's outputs are negative and masked.
    const Both x = both(uniform(xs.numel(), seed++, -1.0, 1.0), xs, dt);
    const Both gamma = both(uniform(C, seed++, 0.5, 1.5), cs, dt);
    const Both beta = both(uniform(C, seed++, -0.2, 0.2), cs, dt);
    const Both rmean = both(uniform(C, seed++), cs, dt), rvar = both(uniform(C, seed++, 0.5, 2.0), cs, dt);
    const Both y = both_filled(xs.numel(), kNaN, dt);
    const Both smean = both_filled(C, kNaN, dt), sinv = both_filled(C, kNaN, dt);
    cpu_table().batch_norm_relu_forward_train(dt, x.c(), gamma.c(), beta.c(), y.c(), smean.c(), sinv.c(), rmean.c(),
                                              rvar.c(), N, C, HW, momentum, eps, nullptr);
    cuda_table().batch_norm_relu_forward_train(dt, x.d(), gamma.d(), beta.d(), y.d(), smean.d(), sinv.d(), rmean.d(),
                                               rvar.d(), N, C, HW, momentum, eps, cuda_stream());
    expect_close(y, tol, "relu forward y");
    expect_close(smean, tol, "save_mean");
    expect_close(sinv, tol, "save_invstd");
    const std::vector<double> yd = y.dev.to_double_vector();
    const auto zeros = std::count(yd.begin(), yd.end(), 0.0);
    CHECK(zeros > xs.numel() / 4);  // the ReLU masked a good share
    CHECK(zeros < 3 * xs.numel() / 4);
    CHECK(*std::min_element(yd.begin(), yd.end()) == 0.0);

    // Backward from the CPU's output and statistics (the same values on both).
    const Both y2 = both(y.cpu.to_double_vector(), xs, dt);
    const Both sm = both(smean.cpu.to_double_vector(), cs, dt), si = both(sinv.cpu.to_double_vector(), cs, dt);
    const Both gy = both(uniform(xs.numel(), seed++), xs, dt);
    const Both gx = both_filled(xs.numel(), kNaN, dt);
    const Both gg = both_filled(C, kNaN, dt), gb = both_filled(C, kNaN, dt);
    cpu_table().batch_norm_relu_backward_train(dt, x.c(), y2.c(), gy.c(), gamma.c(), sm.c(), si.c(), gx.c(), gg.c(),
                                               gb.c(), N, C, HW, eps, nullptr);
    cuda_table().batch_norm_relu_backward_train(dt, x.d(), y2.d(), gy.d(), gamma.d(), sm.d(), si.d(), gx.d(), gg.d(),
                                                gb.d(), N, C, HW, eps, cuda_stream());
    expect_close(gx, tol, "relu backward gx");
    expect_close(gg, tol, "relu backward ggamma");
    expect_close(gb, tol, "relu backward gbeta");
  }
}

// ---------------------------------------------------------------- pooling

TEST_CASE("cuda max pooling forward (values, argmax) and backward match the cpu" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  struct PoolCase {
    int64_t N, C, H, W, R, S, sh, sw, ph, pw;
  };
  const PoolCase cases[] = {
      {2, 3, 8, 8, 3, 3, 2, 2, 1, 1},  // ResNet's 3/2/1
      {1, 2, 7, 9, 3, 3, 2, 2, 1, 1},  // 3/2/1 on odd sizes
      {2, 2, 6, 6, 2, 2, 2, 2, 0, 0},  // 2/2/0
      {1, 3, 7, 5, 2, 2, 2, 2, 0, 0},  // 2/2/0 on odd sizes (last row/column dropped)
      {1, 2, 5, 6, 3, 3, 1, 1, 1, 1},  // 3/1/1: overlapping windows
      {1, 1, 4, 4, 1, 1, 1, 1, 0, 0},  // 1x1
      {1, 2, 6, 7, 4, 2, 3, 1, 2, 1},  // rectangular window, unequal strides
  };
  uint64_t seed = 9000;
  for (DType dt : kFloatTypes)
    for (const PoolCase& pc : cases)
      for (int values = 0; values < 3; ++values) {  // 0: random, 1: all negative, 2: many ties and some NaN
        const Pool2dGeometry g =
            make_pool2d_geometry(pc.N, pc.C, pc.H, pc.W, pc.R, pc.S, pc.sh, pc.sw, pc.ph, pc.pw);
        CAPTURE(dtype_name(dt));
        CAPTURE(pc.H);
        CAPTURE(pc.W);
        CAPTURE(pc.R);
        CAPTURE(pc.S);
        CAPTURE(pc.sh);
        CAPTURE(pc.ph);
        CAPTURE(values);
        const Shape xs{g.N, g.C, g.H, g.W}, ys{g.N, g.C, g.P, g.Q};
        std::vector<double> xv = uniform(xs.numel(), seed++);
        if (values == 1)
          for (double& v : xv) v = -2.0 + 0.5 * v;  // padding must not win with its 0 / -inf
        if (values == 2) {
          for (double& v : xv) v = std::floor(2.0 * v);  // {-2, -1, 0, 1}: ties everywhere
          for (size_t i = 3; i < xv.size(); i += 11) xv[i] = kNaN;
        }
        const Both x = both(xv, xs, dt);
        const Both y = both_filled(ys.numel(), -7.0, dt);
        const Both am = both_filled(ys.numel(), -7.0, DType::i32);
        cpu_table().max_pool2d_forward(dt, g, x.c(), y.c(), static_cast<int32_t*>(am.c()), nullptr);
        cuda_table().max_pool2d_forward(dt, g, x.d(), y.d(), static_cast<int32_t*>(am.d()), cuda_stream());
        expect_close(y, 0.0, "max_pool2d_forward y");
        expect_close(am, 0.0, "max_pool2d_forward argmax");

        // backward through the CPU's argmax (equal to the device's when the above passed)
        const Both am2 = both(am.cpu.to_double_vector(), ys, DType::i32);
        const Both gy = both(uniform(ys.numel(), seed++), ys, dt);
        const Both gx = both_filled(xs.numel(), kNaN, dt);
        cpu_table().max_pool2d_backward(dt, g, x.c(), y.c(), gy.c(), static_cast<const int32_t*>(am2.c()), gx.c(),
                                        nullptr);
        cuda_table().max_pool2d_backward(dt, g, x.d(), y.d(), gy.d(), static_cast<const int32_t*>(am2.d()), gx.d(),
                                         cuda_stream());
        expect_close(gx, tolerance(dt), "max_pool2d_backward");
      }
}

TEST_CASE("cuda adaptive average pooling forward and backward match the cpu" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  struct AdaptiveCase {
    int64_t planes, H, W, OH, OW;
  };
  const AdaptiveCase cases[] = {
      {3, 7, 7, 1, 1},    // global average (ResNet head)
      {2, 5, 7, 3, 2},    // overlapping bins
      {2, 4, 4, 4, 4},    // identity
      {1, 3, 5, 5, 7},    // more outputs than inputs
      {2, 10, 9, 4, 3},   // uneven bins
  };
  uint64_t seed = 12000;
  for (DType dt : kFloatTypes)
    for (const AdaptiveCase& ac : cases) {
      CAPTURE(dtype_name(dt));
      CAPTURE(ac.H);
      CAPTURE(ac.W);
      CAPTURE(ac.OH);
      CAPTURE(ac.OW);
      const Shape xs{ac.planes, ac.H, ac.W}, ys{ac.planes, ac.OH, ac.OW};
      const Both x = both(uniform(xs.numel(), seed++), xs, dt);
      const Both y = both_filled(ys.numel(), kNaN, dt);
      cpu_table().adaptive_avg_pool2d_forward(dt, x.c(), y.c(), ac.planes, ac.H, ac.W, ac.OH, ac.OW, nullptr);
      cuda_table().adaptive_avg_pool2d_forward(dt, x.d(), y.d(), ac.planes, ac.H, ac.W, ac.OH, ac.OW, cuda_stream());
      expect_close(y, tolerance(dt), "adaptive_avg_pool2d_forward");

      const Both gy = both(uniform(ys.numel(), seed++), ys, dt);
      const Both gx = both_filled(xs.numel(), kNaN, dt);
      cpu_table().adaptive_avg_pool2d_backward(dt, gy.c(), gx.c(), ac.planes, ac.H, ac.W, ac.OH, ac.OW, nullptr);
      cuda_table().adaptive_avg_pool2d_backward(dt, gy.d(), gx.d(), ac.planes, ac.H, ac.W, ac.OH, ac.OW,
                                                cuda_stream());
      expect_close(gx, tolerance(dt), "adaptive_avg_pool2d_backward");
    }
}

// ------------------------------------------------------------------ dtypes

TEST_CASE("cuda gemm, conv, batch norm and pooling kernels reject unsupported dtypes" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const Kernels& k = cuda_table();
  const Stream s = cuda_stream();
  const Tensor buf = to_cuda(std::vector<double>(64, 0.0), Shape{64}, DType::f32);
  void* p = buf.raw_data();
  const Conv2dGeometry cg = make_conv2d_geometry(1, 1, 3, 3, 1, 1, 1, 1, 1, 0, 0);
  const Pool2dGeometry pg = make_pool2d_geometry(1, 1, 2, 2, 2, 2, 2, 2, 0, 0);
  int32_t* am = static_cast<int32_t*>(p);
  for (DType dt : {DType::i32, DType::i64, DType::u8}) {  // (f16 is supported: tests/cuda/test_cuda_f16.cpp)
    CAPTURE(dtype_name(dt));
    CHECK_THROWS_AS(k.gemm(dt, false, false, 2, 2, 2, 1.0, p, 2, p, 2, 0.0, p, 2, s), Error);
    CHECK_THROWS_AS(k.im2col(dt, cg, p, p, s), Error);
    CHECK_THROWS_AS(k.col2im(dt, cg, p, p, s), Error);
    CHECK_THROWS_AS(k.conv2d_forward(dt, cg, p, p, p, s), Error);
    CHECK_THROWS_AS(k.conv2d_backward_data(dt, cg, p, p, p, s), Error);
    CHECK_THROWS_AS(k.conv2d_backward_filter(dt, cg, p, p, p, s), Error);
    CHECK_THROWS_AS(k.batch_norm_forward_train(dt, p, p, p, p, p, p, p, p, 1, 1, 4, 0.1, 1e-5, s), Error);
    CHECK_THROWS_AS(k.batch_norm_forward_eval(dt, p, p, p, p, p, p, 1, 1, 4, 1e-5, s), Error);
    CHECK_THROWS_AS(k.batch_norm_backward_train(dt, p, p, p, p, p, p, p, p, 1, 1, 4, 1e-5, s), Error);
    CHECK_THROWS_AS(k.batch_norm_backward_eval(dt, p, p, p, p, p, p, p, p, 1, 1, 4, 1e-5, s), Error);
    CHECK_THROWS_AS(k.max_pool2d_forward(dt, pg, p, p, am, s), Error);
    CHECK_THROWS_AS(k.max_pool2d_backward(dt, pg, p, p, p, am, p, s), Error);
    CHECK_THROWS_AS(k.adaptive_avg_pool2d_forward(dt, p, p, 1, 2, 2, 1, 1, s), Error);
    CHECK_THROWS_AS(k.adaptive_avg_pool2d_backward(dt, p, p, 1, 2, 2, 1, 1, s), Error);
  }
}
