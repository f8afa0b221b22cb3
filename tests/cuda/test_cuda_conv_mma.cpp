// tests/cuda/test_cuda_conv_mma.cpp — the tensor-core channels-last
// convolutions (cuda/kernels/conv_mma.cu: forward, data gradient with its
// stride phases in one launch, filter gradient with and without split-K) against double-precision
// references on the same inputs, at both block tiles, in f16, bf16 and f32
// on TF32 (the reference multiplies the TF32-rounded inputs:
// tests/cuda/mma_operands.h), over the shapes that exercise their edges:
// 3x3 and 1x1 at strides 1 and 2 with padding, channel counts of 8 and 16
// (a step spans several taps), 24 and 40 (a step straddles taps), 4 and 12
// (f32's 4-channel chunks), output channels and pixels that leave partial
// tiles; and that the kernel table takes them for such convolutions (f32
// only while TF32 is allowed) and keeps the scalar path for the 3-channel
// stem, NCHW, and (data gradient) strides above 2.
// Runs on the emulator (build/test_sim) and on a GPU (build/test_ember).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/kernels/conv_mma.h"
#include "engine/bfloat16.h"
#include "engine/half.h"
#include "tests/cuda/cuda_test_env.h"
#include "tests/cuda/device_buffer.h"
#include "tests/cuda/mma_operands.h"

using namespace ember;
using ember::testing::cuda_available;
using ember::testing::cuda_stream;
using ember::testing::DeviceBuffer;
using ember::testing::MmaOperand;
using ember::testing::random_mma_operand;
using ember::testing::result_unit;
using ember::testing::stored_value;
using ember::testing::sum_tolerance;
using ember::testing::Tf32On;

namespace {

struct Case {
  int64_t N, C, H, W, K, R, S, stride, pad;
};

enum class Pass { forward, backward_data, backward_filter };

Conv2dGeometry geometry_of(const Case& c) {
  Conv2dGeometry g = make_conv2d_geometry(c.N, c.C, c.H, c.W, c.K, c.R, c.S, c.stride, c.stride, c.pad, c.pad);
  g.channels_last = true;
  return g;
}

// Runs one pass through `run` (on device buffers: the two inputs, then the
// output) and compares every output with the double reference of the
// values the tensor cores multiply, within the rounding of one result (16-bit
// results; f32 sums are far finer). Every pass is a sum over (n, p, q, r,
// s, c, k) of x * w * gy with one of the three left out.
template <typename Run>
void check_pass(const Case& c, DType dt, Pass pass, Run&& run) {
  CAPTURE(int(pass));
  CAPTURE(c.N);
  CAPTURE(c.C);
  CAPTURE(c.H);
  CAPTURE(c.K);
  CAPTURE(c.R);
  CAPTURE(c.stride);
  CAPTURE(c.pad);
  const Conv2dGeometry g = geometry_of(c);
  std::mt19937 rng(unsigned(c.C * 131 + c.K * 7 + c.R + int(pass)));
  const size_t nx = size_t(g.N * g.H * g.W * g.C), nw = size_t(g.K * g.R * g.S * g.C), ny = size_t(g.N * g.P * g.Q * g.K);
  const MmaOperand x = random_mma_operand(nx, dt, rng), w = random_mma_operand(nw, dt, rng),
                   gy = random_mma_operand(ny, dt, rng);
  // The reference sums of the pass's output, with the sums of |terms|.
  std::vector<double> want(pass == Pass::forward ? ny : pass == Pass::backward_data ? nx : nw, 0.0);
  std::vector<double> scale(want.size(), 0.0);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q = 0; q < g.Q; ++q)
        for (int64_t r = 0; r < g.R; ++r)
          for (int64_t s = 0; s < g.S; ++s) {
            const int64_t h = p * g.stride_h - g.pad_h + r, wc = q * g.stride_w - g.pad_w + s;
            if (h < 0 || h >= g.H || wc < 0 || wc >= g.W) continue;
            for (int64_t k = 0; k < g.K; ++k)
              for (int64_t ch = 0; ch < g.C; ++ch) {
                const size_t ix = size_t(((n * g.H + h) * g.W + wc) * g.C + ch);
                const size_t iw = size_t(((k * g.R + r) * g.S + s) * g.C + ch);
                const size_t iy = size_t(((n * g.P + p) * g.Q + q) * g.K + k);
                const double vx = x.multiplied[ix], vw = w.multiplied[iw], vy = gy.multiplied[iy];
                const double term = pass == Pass::forward ? vx * vw : pass == Pass::backward_data ? vy * vw : vy * vx;
                const size_t out = pass == Pass::forward ? iy : pass == Pass::backward_data ? ix : iw;
                want[out] += term;
                scale[out] += std::fabs(term);
              }
          }
  DeviceBuffer<unsigned char> dx(x.bytes), dw(w.bytes), dgy(gy.bytes);
  DeviceBuffer<unsigned char> dout(want.size() * dtype_size(dt));
  if (pass == Pass::forward)
    run(g, dx.p, dw.p, dout.p);
  else if (pass == Pass::backward_data)
    run(g, dgy.p, dw.p, dout.p);
  else
    run(g, dx.p, dgy.p, dout.p);
  const std::vector<unsigned char> got = dout.host();
  const double unit = result_unit(dt);
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double v = stored_value(got, i, dt);
    if (std::fabs(v - want[i]) > unit * std::fabs(want[i]) + sum_tolerance(dt) * scale[i] + 1e-7 && bad++ < 5)
      MESSAGE("output " << i << " = " << v << ", want " << want[i]);
  }
  CHECK(bad == 0);
}

const Case kCases[] = {
    {2, 64, 6, 5, 72, 3, 3, 1, 1},   // ResNet's 3x3, partial tiles in pixels and channels
    {2, 32, 7, 7, 40, 3, 3, 2, 1},   // stride 2
    {3, 24, 5, 6, 16, 1, 1, 1, 0},   // 1x1: a step straddles no tap but C < 32
    {2, 40, 5, 5, 24, 1, 1, 2, 0},   // 1x1 stride 2 (the downsample)
    {1, 8, 6, 6, 8, 3, 3, 1, 1},     // C = 8: one step covers 4 taps
    {1, 16, 5, 4, 8, 3, 2, 1, 2},    // C = 16, a 3x2 filter, wide padding
};
// f32 moves 4 channels a chunk: channel counts that are multiples of 4, not 8.
const Case kTf32Cases[] = {
    {2, 12, 5, 5, 20, 3, 3, 1, 1},  // a 16-value step straddles taps
    {1, 4, 6, 6, 12, 3, 3, 2, 1},   // C = 4: one step covers 4 taps; stride 2
};

// The three passes of case c through conv_mma.h's entry points at a forced tile.
void check_three_passes(const Case& c, DType dt, cuda::MmaConvTileChoice tile) {
  check_pass(c, dt, Pass::forward, [&](const Conv2dGeometry& g, const void* x, const void* w, void* y) {
    REQUIRE(cuda::conv_mma_supports(dt, g));
    cuda::conv2d_forward_mma(dt, g, x, w, y, cuda_stream(), tile);
  });
  check_pass(c, dt, Pass::backward_data, [&](const Conv2dGeometry& g, const void* gy, const void* w, void* gx) {
    REQUIRE(cuda::conv_mma_supports_backward_data(dt, g));
    cuda::conv2d_backward_data_mma(dt, g, gy, w, gx, cuda_stream(), tile);
  });
  check_pass(c, dt, Pass::backward_filter, [&](const Conv2dGeometry& g, const void* x, const void* gy, void* gw) {
    cuda::conv2d_backward_filter_mma(dt, g, x, gy, gw, cuda_stream(), tile);
  });
}

}  // namespace

TEST_CASE("cuda conv mma: forward, data and filter gradients match double references, both tiles, f16 and bf16" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  for (DType dt : {DType::f16, DType::bf16})
    for (auto tile : {cuda::MmaConvTileChoice::small, cuda::MmaConvTileChoice::large})
      for (const Case& c : kCases) {
        CAPTURE(dtype_name(dt));
        CAPTURE(tile == cuda::MmaConvTileChoice::large);
        check_three_passes(c, dt, tile);
      }
}

TEST_CASE("cuda conv mma: f32 on TF32 (mma.sync m16n8k8, inputs rounded to nearest) matches double references" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const Tf32On tf32;
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.insert(cases.end(), std::begin(kTf32Cases), std::end(kTf32Cases));
  const DType dt = DType::f32;
  for (auto tile : {cuda::MmaConvTileChoice::small, cuda::MmaConvTileChoice::large})
    for (const Case& c : cases) {
      CAPTURE(tile == cuda::MmaConvTileChoice::large);
      check_three_passes(c, dt, tile);
    }
  // The split filter gradient: f32 slices of 16-value steps.
  check_pass({4, 16, 16, 16, 16, 3, 3, 1, 1}, dt, Pass::backward_filter,
             [&](const Conv2dGeometry& g, const void* x, const void* gy, void* gw) {
               cuda::conv2d_backward_filter_mma(dt, g, x, gy, gw, cuda_stream(), cuda::MmaConvTileChoice::small);
             });
}

TEST_CASE("cuda conv mma: the filter gradient splits a long reduction over slices and adds them in order" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  // 16 x 16 images of 4: 1024 output pixels, 32 steps: 4 slices of 8 on one output tile.
  const Case c{4, 16, 16, 16, 16, 3, 3, 1, 1};
  check_pass(c, DType::f16, Pass::backward_filter, [&](const Conv2dGeometry& g, const void* x, const void* gy, void* gw) {
    cuda::conv2d_backward_filter_mma(DType::f16, g, x, gy, gw, cuda_stream(), cuda::MmaConvTileChoice::small);
  });
}

TEST_CASE("cuda conv mma: the kernel table takes it for channels-last 16-bit convolutions, and f32 ones with TF32 "
          "allowed; not for 3 channels or NCHW" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  Conv2dGeometry g = make_conv2d_geometry(2, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1);
  g.channels_last = true;
  CHECK(cuda::conv_mma_supports(DType::f16, g));
  CHECK(cuda::conv_mma_supports(DType::bf16, g));
  cuda::set_tf32(false);
  CHECK_FALSE(cuda::conv_mma_supports(DType::f32, g));  // f32 stays f32 unless TF32 is allowed
  {
    const Tf32On tf32;
    CHECK(cuda::conv_mma_supports(DType::f32, g));
    CHECK_FALSE(cuda::conv_mma_supports(DType::f64, g));
    Conv2dGeometry odd = g;
    odd.C = 6;  // 6 f32 channels: no 16-byte chunks
    CHECK_FALSE(cuda::conv_mma_supports(DType::f32, odd));
  }
  Conv2dGeometry stem = make_conv2d_geometry(2, 3, 16, 16, 64, 7, 7, 2, 2, 3, 3);
  stem.channels_last = true;
  CHECK_FALSE(cuda::conv_mma_supports(DType::f16, stem));
  g.channels_last = false;
  CHECK_FALSE(cuda::conv_mma_supports(DType::f16, g));
  g.channels_last = true;
  g.stride_h = g.stride_w = 2;
  CHECK(cuda::conv_mma_supports_backward_data(DType::f16, g));  // 4 phases, one launch
  g.stride_h = 3;
  CHECK_FALSE(cuda::conv_mma_supports_backward_data(DType::f16, g));  // 6 phases: conv.cu's GEMMs
  // Through the kernel table, as the engine calls it.
  const Kernels& table = testing::cuda_table();
  const Case c{2, 64, 5, 5, 32, 3, 3, 1, 1};
  check_pass({2, 16, 9, 9, 24, 3, 3, 3, 1}, DType::f16, Pass::backward_data,  // stride 3: the scalar phases
             [&](const Conv2dGeometry& geo, const void* gy, const void* w, void* gx) {
               table.conv2d_backward_data(DType::f16, geo, gy, w, gx, cuda_stream());
             });
  check_pass(c, DType::f16, Pass::forward, [&](const Conv2dGeometry& geo, const void* x, const void* w, void* y) {
    table.conv2d_forward(DType::f16, geo, x, w, y, cuda_stream());
  });
  check_pass(c, DType::f16, Pass::backward_data, [&](const Conv2dGeometry& geo, const void* gy, const void* w, void* gx) {
    table.conv2d_backward_data(DType::f16, geo, gy, w, gx, cuda_stream());
  });
  check_pass(c, DType::bf16, Pass::backward_filter, [&](const Conv2dGeometry& geo, const void* x, const void* gy, void* gw) {
    table.conv2d_backward_filter(DType::bf16, geo, x, gy, gw, cuda_stream());
  });
  // f32 with TF32 allowed: the table's results are the TF32 products (the
  // scalar f32 path would miss the TF32 reference by ~2^-12 of each product).
  const Tf32On tf32;
  check_pass(c, DType::f32, Pass::forward, [&](const Conv2dGeometry& geo, const void* x, const void* w, void* y) {
    table.conv2d_forward(DType::f32, geo, x, w, y, cuda_stream());
  });
  check_pass(c, DType::f32, Pass::backward_data, [&](const Conv2dGeometry& geo, const void* gy, const void* w, void* gx) {
    table.conv2d_backward_data(DType::f32, geo, gy, w, gx, cuda_stream());
  });
  check_pass(c, DType::f32, Pass::backward_filter, [&](const Conv2dGeometry& geo, const void* x, const void* gy, void* gw) {
    table.conv2d_backward_filter(DType::f32, geo, x, gy, gw, cuda_stream());
  });
}
