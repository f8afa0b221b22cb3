// ops/elementwise.cpp — add, scale, sum, cast, relu and add + relu with their
// gradients, and the ops of ops/pointwise.h (gelu, dropout) through one wrapper,
// detail::pointwise.
#include "ops/op_helpers.h"
#include "ops/ops.h"
#include "ops/pointwise.h"

namespace ember::ops {
using namespace detail;

// y = a + b;  ga = gy, gb = gy
Tensor add(const Tensor& a, const Tensor& b) {
  require_float(a, "add", "a");
  require_like(b, a, "add", "b");
  EMBER_CHECK(a.shape() == b.shape(), "add: shapes differ: ", a.shape().str(), " and ", b.shape().str());
  require_same_format(b, a, "add", "b");
  Tensor y = Tensor::empty_like(a);
  auto [k, s] = launch_on(a);
  k.add(a.dtype(), a.raw_data(), b.raw_data(), y.raw_data(), a.numel(), s);
  if (!should_record({&a, &b})) return y;
  return record_op("add", y, {&a, &b}, [](const Tensor& gy, GradMask) { return std::vector<Tensor>{gy, gy}; });
}

// y = alpha x;  gx = alpha gy
Tensor scale(const Tensor& x, double alpha) {
  require_float(x, "scale", "input");
  Tensor y = Tensor::empty_like(x);
  auto [k, s] = launch_on(x);
  k.axpby(x.dtype(), alpha, x.raw_data(), 0.0, y.raw_data(), x.numel(), s);
  if (!should_record({&x})) return y;
  return record_op("scale", y, {&x}, [alpha](const Tensor& gy, GradMask) {
    return std::vector<Tensor>{scale(gy, alpha)};
  });
}

// y = sum x;  gx = gy broadcast to x's shape
Tensor sum(const Tensor& x) {
  require_float(x, "sum", "input");
  Tensor y = Tensor::empty({1}, x.dtype(), x.device());
  auto [k, s] = launch_on(x);
  k.sum(x.dtype(), x.raw_data(), y.raw_data(), x.numel(), s);
  if (!should_record({&x})) return y;
  const Shape shape = x.shape();
  const MemoryFormat format = x.memory_format();
  return record_op("sum", y, {&x}, [shape, format](const Tensor& gy, GradMask) {
    // gy is a one-element device tensor: broadcast it through the host (one
    // value everywhere: the same bytes in either memory format).
    return std::vector<Tensor>{Tensor::full(shape, gy.item(), gy.dtype(), gy.device()).reinterpret_format(format)};
  });
}

// y = (dtype) x;  gx = (x.dtype) gy
Tensor cast(const Tensor& x, DType dtype) {
  require_defined(x, "cast", "input");
  EMBER_CHECK(is_floating(x.dtype()) && is_floating(dtype), "cast: only between floating types, got ",
              dtype_name(x.dtype()), " -> ", dtype_name(dtype));
  if (x.dtype() == dtype) return x;
  Tensor y = Tensor::empty_like(x, dtype);
  auto [k, s] = launch_on(x);
  k.cast(x.dtype(), x.raw_data(), dtype, y.raw_data(), x.numel(), s);
  if (!should_record({&x})) return y;
  const DType back = x.dtype();
  return record_op("cast", y, {&x}, [back](const Tensor& gy, GradMask) { return std::vector<Tensor>{cast(gy, back)}; });
}

// y = max(x, 0);  gx = y > 0 ? gy : 0
Tensor relu(const Tensor& x) {
  require_float(x, "relu", "input");
  Tensor y = Tensor::empty_like(x);
  auto [k, s] = launch_on(x);
  k.relu_forward(x.dtype(), x.raw_data(), y.raw_data(), x.numel(), s);
  if (!should_record({&x})) return y;
  Tensor saved = y.detach();
  return record_op("relu", y, {&x}, [saved](const Tensor& gy, GradMask) {
    Tensor gx = Tensor::empty_like(saved);
    auto [k2, s2] = launch_on(saved);
    k2.relu_backward(saved.dtype(), saved.raw_data(), gy.raw_data(), gx.raw_data(), saved.numel(), s2);
    return std::vector<Tensor>{gx};
  });
}

// y = max(a + b, 0);  ga = gb = y > 0 ? gy : 0
Tensor add_relu(const Tensor& a, const Tensor& b) {
  require_float(a, "add_relu", "a");
  require_like(b, a, "add_relu", "b");
  EMBER_CHECK(a.shape() == b.shape(), "add_relu: shapes differ: ", a.shape().str(), " and ", b.shape().str());
  require_same_format(b, a, "add_relu", "b");
  Tensor y = Tensor::empty_like(a);
  auto [k, s] = launch_on(a);
  k.add_relu(a.dtype(), a.raw_data(), b.raw_data(), y.raw_data(), a.numel(), s);
  if (!should_record({&a, &b})) return y;
  Tensor saved = y.detach();
  return record_op("add_relu", y, {&a, &b}, [saved](const Tensor& gy, GradMask) {
    Tensor g = Tensor::empty_like(saved);
    auto [k2, s2] = launch_on(saved);
    k2.relu_backward(saved.dtype(), saved.raw_data(), gy.raw_data(), g.raw_data(), saved.numel(), s2);
    return std::vector<Tensor>{g, g};
  });
}

// ------------------------------------------------------------ pointwise ops

// y = Op::forward(x) elementwise for an op of ops/pointwise.h, with
// gx = gy * Op::derivative(x). x is kept for the backward only if the op reads it.
Tensor detail::pointwise(const Tensor& x, PointwiseOp op, const PointwiseArgs& args) {
  const char* name = pointwise_name(op);
  require_float(x, name, "input");
  Tensor y = Tensor::empty_like(x);
  auto [k, s] = launch_on(x);
  k.pointwise_forward(x.dtype(), op, x.raw_data(), y.raw_data(), x.numel(), args, s);
  if (!should_record({&x})) return y;
  const bool reads_x = with_pointwise_fn(op, [](auto fn) { return decltype(fn)::backward_reads_x; });
  Tensor saved = reads_x ? x.detach() : Tensor();
  const DType dt = x.dtype();
  const Shape shape = x.shape();
  const Device device = x.device();
  const MemoryFormat format = x.memory_format();
  return record_op(name, y, {&x}, [saved, shape, dt, device, format, op, args](const Tensor& gy, GradMask) {
    Tensor gx = Tensor::empty(shape, dt, device, format);
    auto [k2, s2] = launch_on(gy);
    k2.pointwise_backward(dt, op, saved.defined() ? saved.raw_data() : nullptr, gy.raw_data(), gx.raw_data(),
                          gx.numel(), args, s2);
    return std::vector<Tensor>{gx};
  });
}

// gelu(x) = x * Phi(x)
Tensor gelu(const Tensor& x) { return pointwise(x, PointwiseOp::gelu, {}); }

// y = x * mask / (1 - p);  gx = gy * mask / (1 - p), the mask drawn again
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  require_float(x, "dropout", "input");
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  const uint64_t offset = gen.reserve_blocks((uint64_t(x.numel()) + 3) / 4);
  return pointwise(x, PointwiseOp::dropout, {p, gen.seed(), offset});
}

}  // namespace ember::ops
