// ops/conv2d.cpp — 2-D convolution (optional bias) and its gradients.
//
//   y = conv(x, w) + b            x: [N, C, H, W]  w: [K, C, R, S]  b: [K]  y: [N, K, P, Q]
//   gx = conv2d_backward_data(gy, w)
//   gw = conv2d_backward_filter(x, gy)
//   gb = sum of gy over N, P, Q
//
// Memory format: a channels-last weight makes a channels-last convolution
// (x, y: [N, H, W, C] in memory, w: [K, R, S, C]); an input in the other
// format than the weight is converted first (differentiably: the stem's
// NCHW image batch meets a channels-last model here), and y and the
// gradients take the weight's format.
#include "ops/op_helpers.h"
#include "ops/ops.h"

namespace ember::ops {
using namespace detail;

Tensor conv2d(const Tensor& x_in, const Tensor& w, const Tensor& b, const Conv2dOptions& opt) {
  require_float(x_in, "conv2d", "input");
  require_ndim(x_in, 4, "conv2d", "input");
  require_like(w, x_in, "conv2d", "weight");
  require_ndim(w, 4, "conv2d", "weight");
  const Tensor x = x_in.memory_format() == w.memory_format() ? x_in : to_memory_format(x_in, w.memory_format());
  EMBER_CHECK(w.size(1) == x.size(1), "conv2d: weight ", w.shape().str(), " expects ", w.size(1),
              " input channels, input ", x.shape().str(), " has ", x.size(1));
  if (b.defined()) {
    require_like(b, x, "conv2d", "bias");
    require_shape(b, Shape{w.size(0)}, "conv2d", "bias");
  }
  Conv2dGeometry g = make_conv2d_geometry(x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3),
                                          opt.stride_h, opt.stride_w, opt.pad_h, opt.pad_w);
  g.channels_last = w.is_channels_last();
  Tensor y = Tensor::empty({g.N, g.K, g.P, g.Q}, x.dtype(), x.device(), w.memory_format());
  auto [k, s] = launch_on(x);
  k.conv2d_forward(x.dtype(), g, x.raw_data(), w.raw_data(), y.raw_data(), s);
  const ChannelDims yd = channel_dims(y);
  if (b.defined()) k.bias_add(x.dtype(), y.raw_data(), b.raw_data(), yd.N, yd.C, yd.HW, s);
  if (!should_record({&x, &w, &b})) return y;

  Tensor xs = x.detach(), ws = w.detach();
  return record_op("conv2d", y, {&x, &w, &b}, [xs, ws, g, yd](const Tensor& gy, GradMask needs) {
    auto [k2, s2] = launch_on(gy);
    std::vector<Tensor> grads(3);
    if (needs[0]) {
      grads[0] = Tensor::empty_like(xs);
      k2.conv2d_backward_data(xs.dtype(), g, gy.raw_data(), ws.raw_data(), grads[0].raw_data(), s2);
    }
    if (needs[1]) {
      grads[1] = Tensor::empty_like(ws);
      k2.conv2d_backward_filter(xs.dtype(), g, xs.raw_data(), gy.raw_data(), grads[1].raw_data(), s2);
    }
    if (needs[2]) {
      grads[2] = Tensor::empty({g.K}, xs.dtype(), xs.device());
      k2.bias_backward(xs.dtype(), gy.raw_data(), grads[2].raw_data(), yd.N, yd.C, yd.HW, s2);
    }
    return grads;
  });
}

}  // namespace ember::ops
