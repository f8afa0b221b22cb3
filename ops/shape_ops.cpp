// ops/shape_ops.cpp — reshape and flatten (views whose gradient is reshaped
// back), concat (a copy through the copy_2d kernel; its gradient is split
// back by the same kernel) and to_memory_format (NCHW <-> NHWC through the
// transpose_batched kernel; its gradient converts back).
#include "ops/op_helpers.h"
#include "ops/ops.h"

namespace ember::ops {
using namespace detail;

Tensor reshape(const Tensor& x, const Shape& shape) {
  require_defined(x, "reshape", "input");
  EMBER_CHECK(shape.numel() == x.numel(), "reshape: cannot reshape ", x.shape().str(), " to ", shape.str());
  Tensor y = x.view(shape);
  if (!should_record({&x})) return y;
  const Shape in_shape = x.shape();
  const MemoryFormat in_format = x.memory_format();  // a channels-last x here has C == 1 or H*W == 1
  return record_op("reshape", y, {&x}, [in_shape, in_format](const Tensor& gy, GradMask) {
    return std::vector<Tensor>{gy.view(in_shape).reinterpret_format(in_format)};
  });
}

Tensor to_memory_format(const Tensor& x, MemoryFormat format) {
  require_defined(x, "to_memory_format", "input");
  if (x.memory_format() == format) return x;
  require_ndim(x, 4, "to_memory_format", "input");
  const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), format);
  auto [k, s] = launch_on(x);
  if (format == MemoryFormat::channels_last)
    k.transpose_batched(x.dtype(), x.raw_data(), y.raw_data(), N, C, HW, s);  // [N, C, HW] -> [N, HW, C]
  else
    k.transpose_batched(x.dtype(), x.raw_data(), y.raw_data(), N, HW, C, s);  // [N, HW, C] -> [N, C, HW]
  if (!should_record({&x})) return y;
  const MemoryFormat back = x.memory_format();
  return record_op("to_memory_format", y, {&x}, [back](const Tensor& gy, GradMask) {
    return std::vector<Tensor>{to_memory_format(gy, back)};
  });
}

// Collapses dimensions start_dim.. into one: [N, C, H, W] -> [N, C*H*W].
Tensor flatten(const Tensor& x, int start_dim) {
  require_defined(x, "flatten", "input");
  const int nd = x.ndim();
  const int sd = start_dim < 0 ? start_dim + nd : start_dim;
  EMBER_CHECK(sd >= 0 && sd < std::max(nd, 1), "flatten: start_dim ", start_dim, " out of range for ", x.str());
  std::vector<int64_t> dims(x.shape().begin(), x.shape().begin() + sd);
  int64_t rest = 1;
  for (int i = sd; i < nd; ++i) rest *= x.size(i);
  dims.push_back(rest);
  return reshape(x, Shape(dims));
}

// Viewed as a: [outer, ca], b: [outer, cb], y: [outer, ca + cb] (ca = Fa times
// the sizes after dim, likewise cb): y's rows are a's row then b's row.
//   y = [a, b] along dim;  ga = gy's first ca columns, gb = the other cb
Tensor concat(const Tensor& a, const Tensor& b, int dim) {
  require_defined(a, "concat", "a");
  require_like(b, a, "concat", "b");
  EMBER_CHECK(!a.is_channels_last() && !b.is_channels_last(),
              "concat: channels_last inputs are not supported (convert with to_memory_format first)");
  const int nd = a.ndim();
  EMBER_CHECK(b.ndim() == nd, "concat: a ", a.shape().str(), " and b ", b.shape().str(),
              " have different numbers of dimensions");
  const int d = dim < 0 ? dim + nd : dim;
  EMBER_CHECK(d >= 0 && d < nd, "concat: dim ", dim, " out of range for ", a.shape().str());
  int64_t outer = 1, inner = 1;
  std::vector<int64_t> dims(a.shape().begin(), a.shape().end());
  for (int i = 0; i < nd; ++i) {
    if (i == d) continue;
    EMBER_CHECK(a.size(i) == b.size(i), "concat: a ", a.shape().str(), " and b ", b.shape().str(),
                " differ in dimension ", i, " (only dim ", d, " may)");
    (i < d ? outer : inner) *= a.size(i);
  }
  dims[size_t(d)] = a.size(d) + b.size(d);
  const int64_t ca = a.size(d) * inner, cb = b.size(d) * inner, ld = ca + cb;
  const DType dt = a.dtype();
  const size_t es = dtype_size(dt);
  Tensor y = Tensor::empty(Shape(dims), dt, a.device());
  auto [k, s] = launch_on(a);
  char* yp = static_cast<char*>(y.raw_data());
  k.copy_2d(dt, a.raw_data(), ca, yp, ld, outer, ca, s);
  k.copy_2d(dt, b.raw_data(), cb, yp + size_t(ca) * es, ld, outer, cb, s);
  if (!should_record({&a, &b})) return y;
  const Shape as = a.shape(), bs = b.shape();
  return record_op("concat", y, {&a, &b}, [=](const Tensor& gy, GradMask needs) {
    std::vector<Tensor> g(2);
    auto [k2, s2] = launch_on(gy);
    const char* gp = static_cast<const char*>(gy.raw_data());
    if (needs[0]) {
      g[0] = Tensor::empty(as, dt, gy.device());
      k2.copy_2d(dt, gp, ld, g[0].raw_data(), ca, outer, ca, s2);
    }
    if (needs[1]) {
      g[1] = Tensor::empty(bs, dt, gy.device());
      k2.copy_2d(dt, gp + size_t(ca) * es, ld, g[1].raw_data(), cb, outer, cb, s2);
    }
    return g;
  });
}

}  // namespace ember::ops
