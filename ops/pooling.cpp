// ops/pooling.cpp — max pooling (with saved argmax), global max pooling (the
// same kernels with one window per plane) and adaptive average pooling.
// Max pooling keeps its input's memory format; adaptive average pooling
// reads a channels-last input through a contiguous copy (ResNet's head: one
// small pass) and returns a contiguous result.
#include "ops/op_helpers.h"
#include "ops/ops.h"

namespace ember::ops {
using namespace detail;

namespace {

// y[n, c, p, q] = max of the window;  gx = gy scattered to each window's argmax
//   x: [N, C, H, W] -> [N, C, P, Q]
Tensor max_pool2d_with(const Tensor& x, Pool2dGeometry g) {
  g.channels_last = x.is_channels_last();
  const MemoryFormat format = x.memory_format();
  Tensor y = Tensor::empty({g.N, g.C, g.P, g.Q}, x.dtype(), x.device(), format);
  Tensor argmax = Tensor::empty({g.N, g.C, g.P, g.Q}, DType::i32, x.device(), format);
  auto [k, s] = launch_on(x);
  k.max_pool2d_forward(x.dtype(), g, x.raw_data(), y.raw_data(), argmax.data<int32_t>(), s);
  if (!should_record({&x})) return y;
  const DType dt = x.dtype();
  Tensor xs = x.detach(), ys = y.detach();
  return record_op("max_pool2d", y, {&x}, [g, xs, ys, argmax, dt, format](const Tensor& gy, GradMask) {
    Tensor gx = Tensor::empty({g.N, g.C, g.H, g.W}, dt, gy.device(), format);
    auto [k2, s2] = launch_on(gy);
    k2.max_pool2d_backward(dt, g, xs.raw_data(), ys.raw_data(), gy.raw_data(), argmax.data<int32_t>(), gx.raw_data(),
                           s2);
    return std::vector<Tensor>{gx};
  });
}

}  // namespace

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  require_float(x, "max_pool2d", "input");
  require_ndim(x, 4, "max_pool2d", "input");
  return max_pool2d_with(x, make_pool2d_geometry(x.size(0), x.size(1), x.size(2), x.size(3), kernel, kernel, stride,
                                                 stride, padding, padding));
}

// One H x W window per plane, stride H x W, no padding.
Tensor global_max_pool2d(const Tensor& x) {
  require_float(x, "global_max_pool2d", "input");
  require_ndim(x, 4, "global_max_pool2d", "input");
  const int64_t H = x.size(2), W = x.size(3);
  EMBER_CHECK(H > 0 && W > 0, "global_max_pool2d: empty input ", x.shape().str());
  return max_pool2d_with(x, make_pool2d_geometry(x.size(0), x.size(1), H, W, H, W, H, W, 0, 0));
}

// y[n, c, i, j] = mean of x over bin (i, j);  gx spreads gy evenly over each bin
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  require_float(x, "adaptive_avg_pool2d", "input");
  require_ndim(x, 4, "adaptive_avg_pool2d", "input");
  if (x.is_channels_last()) return adaptive_avg_pool2d(to_memory_format(x, MemoryFormat::contiguous), out_h, out_w);
  EMBER_CHECK(out_h > 0 && out_w > 0, "adaptive_avg_pool2d: output size must be positive, got ", out_h, "x", out_w);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  EMBER_CHECK(H > 0 && W > 0, "adaptive_avg_pool2d: empty input ", x.shape().str());
  Tensor y = Tensor::empty({N, C, out_h, out_w}, x.dtype(), x.device());
  auto [k, s] = launch_on(x);
  k.adaptive_avg_pool2d_forward(x.dtype(), x.raw_data(), y.raw_data(), N * C, H, W, out_h, out_w, s);
  if (!should_record({&x})) return y;
  const DType dt = x.dtype();
  return record_op("adaptive_avg_pool2d", y, {&x}, [=](const Tensor& gy, GradMask) {
    Tensor gx = Tensor::empty({N, C, H, W}, dt, gy.device());
    auto [k2, s2] = launch_on(gy);
    k2.adaptive_avg_pool2d_backward(dt, gy.raw_data(), gx.raw_data(), N * C, H, W, out_h, out_w, s2);
    return std::vector<Tensor>{gx};
  });
}

}  // namespace ember::ops
