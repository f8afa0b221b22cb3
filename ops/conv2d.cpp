// ops/conv2d.cpp — 2-D convolution (optional bias) and its gradients.
//
//   y = conv(x, w) + b            x: [N, C, H, W]  w: [K, C, R, S]  b: [K]  y: [N, K, P, Q]
//   gx = conv2d_backward_data(gy, w)
//   gw = conv2d_backward_filter(x, gy)
//   gb = sum of gy over N, P, Q
#include "ops/op_helpers.h"
#include "ops/ops.h"

namespace ember::ops {
using namespace detail;

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& opt) {
  require_float(x, "conv2d", "input");
  require_ndim(x, 4, "conv2d", "input");
  require_like(w, x, "conv2d", "weight");
  require_ndim(w, 4, "conv2d", "weight");
  EMBER_CHECK(w.size(1) == x.size(1), "conv2d: weight ", w.shape().str(), " expects ", w.size(1),
              " input channels, input ", x.shape().str(), " has ", x.size(1));
  if (b.defined()) {
    require_like(b, x, "conv2d", "bias");
    require_shape(b, Shape{w.size(0)}, "conv2d", "bias");
  }
  const Conv2dGeometry g = make_conv2d_geometry(x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2),
                                                w.size(3), opt.stride_h, opt.stride_w, opt.pad_h, opt.pad_w);
  Tensor y = Tensor::empty({g.N, g.K, g.P, g.Q}, x.dtype(), x.device());
  auto [k, s] = launch_on(x);
  k.conv2d_forward(x.dtype(), g, x.raw_data(), w.raw_data(), y.raw_data(), s);
  if (b.defined()) k.bias_add(x.dtype(), y.raw_data(), b.raw_data(), g.N, g.K, g.P * g.Q, s);
  if (!should_record({&x, &w, &b})) return y;

  Tensor xs = x.detach(), ws = w.detach();
  return record_op("conv2d", y, {&x, &w, &b}, [xs, ws, g](const Tensor& gy, GradMask needs) {
    auto [k2, s2] = launch_on(gy);
    std::vector<Tensor> grads(3);
    if (needs[0]) {
      grads[0] = Tensor::empty(xs.shape(), xs.dtype(), xs.device());
      k2.conv2d_backward_data(xs.dtype(), g, gy.raw_data(), ws.raw_data(), grads[0].raw_data(), s2);
    }
    if (needs[1]) {
      grads[1] = Tensor::empty(ws.shape(), ws.dtype(), ws.device());
      k2.conv2d_backward_filter(xs.dtype(), g, xs.raw_data(), gy.raw_data(), grads[1].raw_data(), s2);
    }
    if (needs[2]) {
      grads[2] = Tensor::empty({g.K}, xs.dtype(), xs.device());
      k2.bias_backward(xs.dtype(), gy.raw_data(), grads[2].raw_data(), g.N, g.K, g.P * g.Q, s2);
    }
    return grads;
  });
}

}  // namespace ember::ops
