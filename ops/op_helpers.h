// ops/op_helpers.h — input checks and kernel lookup shared by the op files.
// Internal to ops/: every check produces a one-line message naming the op.
#pragma once
#include "engine/tensor.h"
#include "ops/kernels.h"

namespace ember::ops::detail {

inline void require_defined(const Tensor& t, const char* op, const char* what) {
  EMBER_CHECK(t.defined(), op, ": ", what, " is undefined");
}

// f32, f64, f16 or bf16 (mixed precision: 16-bit storage, f32 arithmetic in the kernels).
inline void require_float(const Tensor& t, const char* op, const char* what) {
  require_defined(t, op, what);
  EMBER_CHECK(is_floating(t.dtype()), op, ": ", what, " must be f32, f64, f16 or bf16, got ", t.str());
}

inline void require_ndim(const Tensor& t, int ndim, const char* op, const char* what) {
  EMBER_CHECK(t.ndim() == ndim, op, ": ", what, " must have ", ndim, " dimensions, got ", t.str());
}

// Same device and dtype as `like`.
inline void require_like(const Tensor& t, const Tensor& like, const char* op, const char* what) {
  require_defined(t, op, what);
  EMBER_CHECK(t.device() == like.device(), op, ": ", what, " is on ", t.device().str(), " but the input is on ",
              like.device().str());
  EMBER_CHECK(t.dtype() == like.dtype(), op, ": ", what, " is ", dtype_name(t.dtype()), " but the input is ",
              dtype_name(like.dtype()));
}

inline void require_shape(const Tensor& t, const Shape& shape, const char* op, const char* what) {
  EMBER_CHECK(t.shape() == shape, op, ": ", what, " must have shape ", shape.str(), ", got ", t.shape().str());
}

// Same memory format as `like` (binary elementwise ops read both flat).
inline void require_same_format(const Tensor& t, const Tensor& like, const char* op, const char* what) {
  EMBER_CHECK(t.memory_format() == like.memory_format(), op, ": ", what, " is ", memory_format_name(t.memory_format()),
              " but the input is ", memory_format_name(like.memory_format()));
}

// The [N, C, HW] a per-channel kernel (batch norm, bias) sees for a 4-D x:
// a channels-last x is [N*H*W, C, 1], the same numbers in the same places.
struct ChannelDims {
  int64_t N, C, HW;
};
inline ChannelDims channel_dims(const Tensor& x) {
  if (x.is_channels_last()) return {x.size(0) * x.size(2) * x.size(3), x.size(1), 1};
  return {x.size(0), x.size(1), x.size(2) * x.size(3)};
}

struct Launch {
  const Kernels& k;
  Stream stream;
};
inline Launch launch_on(const Tensor& t) { return {kernels_for(t.device()), stream_for(t.device())}; }

}  // namespace ember::ops::detail

#include "engine/autograd.h"

namespace ember::ops::detail {

// An op of ops/pointwise.h on x, with its backward recorded (ops/elementwise.cpp).
Tensor pointwise(const Tensor& x, PointwiseOp op, const PointwiseArgs& args);

// Installs the kernel-backed gradient accumulation into the engine (once).
void install_grad_accumulator();

// record() for ops: makes sure backward can sum gradients, then records.
inline Tensor record_op(const char* name, Tensor output, std::initializer_list<const Tensor*> inputs,
                        BackwardFn fn) {
  install_grad_accumulator();
  return record(name, std::move(output), inputs, std::move(fn));
}

}  // namespace ember::ops::detail
