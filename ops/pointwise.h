// ops/pointwise.h — elementwise ops whose math is written once, here, and
// run by every backend.
//
// A pointwise op maps each element on its own: y[i] = forward(x[i], i), and
// its gradient is gx[i] = gy[i] * derivative(x[i], i). Each op is a struct
// of two static function templates (T = float for f32, f16 and bf16 data,
// double for f64), callable from host and device code. The CPU kernels
// (ops/cpu/elementwise.cpp) and the CUDA kernels (cuda/kernels/elementwise.cu,
// which the emulator also runs) each have one loop that calls them, and
// instantiate it for every entry of EMBER_FOR_EACH_POINTWISE; ops/elementwise.cpp
// has the one autograd wrapper (ops::detail::pointwise). So an op of this
// kind is added by:
//   1. a struct below and its line in EMBER_FOR_EACH_POINTWISE,
//   2. its declaration in ops/ops.h,
//   3. its definition in ops/elementwise.cpp (argument checks, then
//      detail::pointwise),
// and a case in tests/ops/test_ops.cpp that the op harness checks on every backend
// (docs/guide.md, "Adding an op", walks through dropout this way). ops/kernels.h
// declares PointwiseOp and PointwiseArgs by name only, so a new op recompiles
// the few files that include this header, not everything that sees the table.
//
// Ops whose output element depends on other elements (softmax, batch norm)
// or that need a fused kernel for speed (relu, add_relu) are kernels of
// their own in ops/kernels.h instead.
#pragma once
#include <cmath>
#include <cstdint>

#include "engine/error.h"
#include "engine/rng.h"

#if defined(__CUDACC__)
#define EMBER_POINTWISE_FN __host__ __device__ inline
#else
#define EMBER_POINTWISE_FN inline
#endif

namespace ember {

// What a pointwise op may depend on besides its element: one parameter and
// the Philox coordinates of its random draws. Element i draws from block
// (offset + i / 4), word i % 4, of stream 0 under key `seed`, as the
// random_uniform kernel does; the op reserves ceil(n / 4) blocks of its
// Generator for that.
struct PointwiseArgs {
  double p = 0;  // the op's parameter (dropout: the probability of dropping)
  uint64_t seed = 0, offset = 0;
};

EMBER_POINTWISE_FN float pointwise_erf(float x) { return erff(x); }
EMBER_POINTWISE_FN double pointwise_erf(double x) { return erf(x); }
EMBER_POINTWISE_FN float pointwise_exp(float x) { return expf(x); }
EMBER_POINTWISE_FN double pointwise_exp(double x) { return exp(x); }

// gelu(x) = x * Phi(x), Phi the standard normal CDF (the exact erf form,
// PyTorch's default); d/dx = Phi(x) + x * phi(x), phi the normal density.
struct Gelu {
  static constexpr bool backward_reads_x = true;
  template <typename T>
  EMBER_POINTWISE_FN static T forward(T x, int64_t, const PointwiseArgs&) {
    return T(0.5) * x * (T(1) + pointwise_erf(x * T(0.70710678118654752440)));
  }
  template <typename T>
  EMBER_POINTWISE_FN static T derivative(T x, int64_t, const PointwiseArgs&) {
    const T cdf = T(0.5) * (T(1) + pointwise_erf(x * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * pointwise_exp(T(-0.5) * x * x);
    return cdf + x * pdf;
  }
};

// dropout (training): element i is dropped (0) with probability p, else
// scaled by 1 / (1 - p). Its draw is Philox (seed, block offset + i / 4,
// word i % 4) as a uniform u in [0, 1), and u < p drops it; the backward
// recomputes the same mask from the same draws instead of storing one.
struct Dropout {
  static constexpr bool backward_reads_x = false;
  template <typename T>
  EMBER_POINTWISE_FN static T derivative(T, int64_t i, const PointwiseArgs& a) {
    const PhiloxBlock r = philox4x32(a.seed, a.offset + (uint64_t(i) >> 2), 0);
    const bool keep = double(u32_to_unit(r.w[i & 3])) >= a.p;
    return keep ? T(1) / (T(1) - T(a.p)) : T(0);
  }
  template <typename T>
  EMBER_POINTWISE_FN static T forward(T x, int64_t i, const PointwiseArgs& a) {
    return x * derivative(x, i, a);
  }
};

// The list of pointwise ops: X(name, struct). The enum, the kernels'
// dispatch and the tests' coverage all come from it.
#define EMBER_FOR_EACH_POINTWISE(X) X(gelu, Gelu) X(dropout, Dropout)

enum class PointwiseOp : int {
#define EMBER_POINTWISE_ENUM_(name, Fn) name,
  EMBER_FOR_EACH_POINTWISE(EMBER_POINTWISE_ENUM_)
#undef EMBER_POINTWISE_ENUM_
};

inline const char* pointwise_name(PointwiseOp op) {
  switch (op) {
#define EMBER_POINTWISE_NAME_(name, Fn) \
  case PointwiseOp::name: return #name;
    EMBER_FOR_EACH_POINTWISE(EMBER_POINTWISE_NAME_)
#undef EMBER_POINTWISE_NAME_
  }
  return "unknown pointwise op";
}

// Calls f(Fn{}) with the struct of op (host code: the kernels' launchers).
template <typename F>
decltype(auto) with_pointwise_fn(PointwiseOp op, F&& f) {
  switch (op) {
#define EMBER_POINTWISE_CASE_(name, Fn) \
  case PointwiseOp::name: return f(Fn{});
    EMBER_FOR_EACH_POINTWISE(EMBER_POINTWISE_CASE_)
#undef EMBER_POINTWISE_CASE_
  }
  fail(cat("unknown pointwise op ", int(op)));
}

}  // namespace ember
