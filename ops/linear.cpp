// ops/linear.cpp — fully connected layer y = x w^T + b and its gradients.
//
//   x: [N, in]  w: [out, in]  b: [out]  y: [N, out]
//   gx = gy w        gw = gy^T x        gb = sum of gy over N
#include "ops/op_helpers.h"
#include "ops/ops.h"

namespace ember::ops {
using namespace detail;

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  require_float(x, "linear", "input");
  require_ndim(x, 2, "linear", "input");
  require_like(w, x, "linear", "weight");
  require_ndim(w, 2, "linear", "weight");
  EMBER_CHECK(w.size(1) == x.size(1), "linear: weight ", w.shape().str(), " expects ", w.size(1),
              " input features, input ", x.shape().str(), " has ", x.size(1));
  const int64_t N = x.size(0), in = x.size(1), out = w.size(0);
  if (b.defined()) {
    require_like(b, x, "linear", "bias");
    require_shape(b, Shape{out}, "linear", "bias");
  }
  Tensor y = Tensor::empty({N, out}, x.dtype(), x.device());
  auto [k, s] = launch_on(x);
  k.gemm(x.dtype(), false, true, N, out, in, 1.0, x.raw_data(), in, w.raw_data(), in, 0.0, y.raw_data(), out, s);
  if (b.defined()) k.bias_add(x.dtype(), y.raw_data(), b.raw_data(), N, out, 1, s);
  if (!should_record({&x, &w, &b})) return y;

  Tensor xs = x.detach(), ws = w.detach();
  return record_op("linear", y, {&x, &w, &b}, [xs, ws, N, in, out](const Tensor& gy, GradMask needs) {
    auto [k2, s2] = launch_on(gy);
    const DType dt = xs.dtype();
    std::vector<Tensor> grads(3);
    if (needs[0]) {
      grads[0] = Tensor::empty({N, in}, dt, xs.device());
      k2.gemm(dt, false, false, N, in, out, 1.0, gy.raw_data(), out, ws.raw_data(), in, 0.0, grads[0].raw_data(),
              in, s2);
    }
    if (needs[1]) {
      grads[1] = Tensor::empty({out, in}, dt, xs.device());
      k2.gemm(dt, true, false, out, in, N, 1.0, gy.raw_data(), out, xs.raw_data(), in, 0.0, grads[1].raw_data(),
              in, s2);
    }
    if (needs[2]) {
      grads[2] = Tensor::empty({out}, dt, xs.device());
      k2.bias_backward(dt, gy.raw_data(), grads[2].raw_data(), N, out, 1, s2);
    }
    return grads;
  });
}

}  // namespace ember::ops
