// ops/shape_ops.cpp — reshape and flatten: views whose gradient is reshaped back.
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
  return record_op("reshape", y, {&x}, [in_shape](const Tensor& gy, GradMask) {
    return std::vector<Tensor>{gy.view(in_shape)};
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

}  // namespace ember::ops
