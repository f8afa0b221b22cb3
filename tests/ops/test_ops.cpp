// tests/ops/test_ops.cpp — every differentiable op through the generic harness
// (tests/support/op_harness.h), on every backend in test::backends(); the harness's
// own ability to fail; and the ops' error messages.
//
// The references below are plain loops over doubles written from the
// definitions (the 7-nested-loop convolution, textbook batch norm, softmax
// cross-entropy directly), independent of ops/ and ops/cpu/.
#include <doctest/doctest.h>

#include "tests/support/test_helpers.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "engine/autograd.h"
#include "engine/memory.h"
#include "ops/ops.h"
#include "ops/pointwise.h"
#include "tests/support/op_harness.h"
#include "tests/support/skip.h"
#if defined(EMBER_CUDA) || defined(EMBER_CUDASIM)
#include "tests/cuda/cuda_test_env.h"
#endif

using namespace ember;
using test::Gen;
using test::OpCase;
using test::RefOut;
using test::Values;
using Outs = std::vector<Tensor>;
using Ins = std::vector<Tensor>;
using Refs = std::vector<RefOut>;
using InVals = std::vector<Values>;

namespace {
using ember::testing::expect_error;

// ------------------------------------------------------------------ references

RefOut ref_conv2d(const Values& x, const Shape& xs, const Values& w, const Shape& ws, const Values* b, int64_t sh,
                  int64_t sw, int64_t ph, int64_t pw) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], K = ws[0], R = ws[2], S = ws[3];
  const int64_t P = (H + 2 * ph - R) / sh + 1, Q = (W + 2 * pw - S) / sw + 1;
  Values y(size_t(N * K * P * Q));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          double acc = b ? (*b)[size_t(k)] : 0.0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t s = 0; s < S; ++s) {
                const int64_t ih = p * sh - ph + r, iw = q * sw - pw + s;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += x[size_t(((n * C + c) * H + ih) * W + iw)] * w[size_t(((k * C + c) * R + r) * S + s)];
              }
          y[size_t(((n * K + k) * P + p) * Q + q)] = acc;
        }
  return {Shape{N, K, P, Q}, y};
}

// Training batch norm: y, then the updated running mean and variance.
Refs ref_batch_norm_train(const Values& x, const Shape& xs, const Values& g, const Values& b, const Values& rm,
                          const Values& rv, double momentum, double eps) {
  const int64_t N = xs[0], C = xs[1], HW = xs[2] * xs[3], M = N * HW;
  Values y(x.size()), rm2(rm), rv2(rv);
  for (int64_t c = 0; c < C; ++c) {
    double mean = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) mean += x[size_t((n * C + c) * HW + i)];
    mean /= double(M);
    double var = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const double d = x[size_t((n * C + c) * HW + i)] - mean;
        var += d * d;
      }
    var /= double(M);  // biased, for normalising
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const size_t j = size_t((n * C + c) * HW + i);
        y[j] = (x[j] - mean) / std::sqrt(var + eps) * g[size_t(c)] + b[size_t(c)];
      }
    rm2[size_t(c)] = (1 - momentum) * rm[size_t(c)] + momentum * mean;
    rv2[size_t(c)] = (1 - momentum) * rv[size_t(c)] + momentum * var * double(M) / double(M - 1);  // unbiased
  }
  return {{xs, y}, {Shape{C}, rm2}, {Shape{C}, rv2}};
}

RefOut ref_batch_norm_eval(const Values& x, const Shape& xs, const Values& g, const Values& b, const Values& rm,
                           const Values& rv, double eps) {
  const int64_t N = xs[0], C = xs[1], HW = xs[2] * xs[3];
  Values y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) {
        const size_t j = size_t((n * C + c) * HW + i);
        y[j] = (x[j] - rm[size_t(c)]) / std::sqrt(rv[size_t(c)] + eps) * g[size_t(c)] + b[size_t(c)];
      }
  return {xs, y};
}

RefOut ref_max_pool2d(const Values& x, const Shape& xs, int64_t k, int64_t st, int64_t pad) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t P = (H + 2 * pad - k) / st + 1, Q = (W + 2 * pad - k) / st + 1;
  Values y(size_t(N * C * P * Q));
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t r = 0; r < k; ++r)
          for (int64_t s = 0; s < k; ++s) {
            const int64_t ih = p * st - pad + r, iw = q * st - pad + s;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W) m = std::max(m, x[size_t((nc * H + ih) * W + iw)]);
          }
        y[size_t((nc * P + p) * Q + q)] = m;
      }
  return {Shape{N, C, P, Q}, y};
}

RefOut ref_adaptive_avg_pool2d(const Values& x, const Shape& xs, int64_t OH, int64_t OW) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  Values y(size_t(N * C * OH * OW));
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        // PyTorch's bins: [floor(i*H/OH), ceil((i+1)*H/OH))
        const int64_t h0 = (i * H) / OH, h1 = ((i + 1) * H + OH - 1) / OH;
        const int64_t w0 = (j * W) / OW, w1 = ((j + 1) * W + OW - 1) / OW;
        double s = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) s += x[size_t((nc * H + h) * W + w)];
        y[size_t((nc * OH + i) * OW + j)] = s / double((h1 - h0) * (w1 - w0));
      }
  return {Shape{N, C, OH, OW}, y};
}

// The largest value of each [H, W] plane.
RefOut ref_global_max_pool2d(const Values& x, const Shape& xs) {
  const int64_t planes = xs[0] * xs[1], HW = xs[2] * xs[3];
  Values y(size_t(planes), -std::numeric_limits<double>::infinity());
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < HW; ++i) y[size_t(p)] = std::max(y[size_t(p)], x[size_t(p * HW + i)]);
  return {Shape{xs[0], xs[1], 1, 1}, y};
}

// a and b joined along dim d, element by element from the output's index.
RefOut ref_concat(const Values& a, const Shape& as, const Values& b, const Shape& bs, int d) {
  std::vector<int64_t> ys(as.begin(), as.end());
  ys[size_t(d)] = as[d] + bs[d];
  const Shape out(ys);
  Values y(size_t(out.numel()));
  std::vector<int64_t> idx(ys.size());
  for (int64_t flat = 0; flat < out.numel(); ++flat) {
    int64_t rest = flat;
    for (int i = int(ys.size()) - 1; i >= 0; --i) {
      idx[size_t(i)] = rest % ys[size_t(i)];
      rest /= ys[size_t(i)];
    }
    const bool from_a = idx[size_t(d)] < as[d];
    const Shape& src = from_a ? as : bs;
    if (!from_a) idx[size_t(d)] -= as[d];
    int64_t j = 0;
    for (size_t i = 0; i < idx.size(); ++i) j = j * src[int(i)] + idx[i];
    y[size_t(flat)] = (from_a ? a : b)[size_t(j)];
  }
  return {out, y};
}

RefOut ref_linear(const Values& x, const Shape& xs, const Values& w, const Shape& ws, const Values* b) {
  const int64_t N = xs[0], I = xs[1], O = ws[0];
  Values y(size_t(N * O));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      double acc = b ? (*b)[size_t(o)] : 0.0;
      for (int64_t i = 0; i < I; ++i) acc += x[size_t(n * I + i)] * w[size_t(o * I + i)];
      y[size_t(n * O + o)] = acc;
    }
  return {Shape{N, O}, y};
}

// Mean over rows of -sum_c target_c log softmax(z)_c, target = (1-s) onehot + s/C.
RefOut ref_cross_entropy(const Values& z, int64_t N, int64_t C, const Values& labels, double s) {
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double* row = &z[size_t(n * C)];
    const double m = *std::max_element(row, row + C);
    double se = 0;
    for (int64_t c = 0; c < C; ++c) se += std::exp(row[c] - m);
    const double lse = m + std::log(se);
    for (int64_t c = 0; c < C; ++c) {
      const double t = (1 - s) * (c == int64_t(labels[size_t(n)]) ? 1.0 : 0.0) + s / double(C);
      total += t * (lse - row[c]);
    }
  }
  return {Shape{1}, {total / double(N)}};
}

Values map(const Values& v, double (*f)(double)) {
  Values o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = f(v[i]);
  return o;
}
Values relu_v(const Values& v) {
  return map(v, [](double a) { return a > 0 ? a : 0.0; });
}
Values add_v(const Values& a, const Values& b) {
  Values o(a.size());
  for (size_t i = 0; i < a.size(); ++i) o[i] = a[i] + b[i];
  return o;
}

// ------------------------------------------------------------------ running

void run_cases(const std::vector<OpCase>& cases) {
  for (const auto& backend : test::backends())
    for (const auto& c : cases) {
      CAPTURE(c.name);
      const test::Report r = test::check_op(c, backend);
      if (std::getenv("EMBER_HARNESS_VERBOSE"))
        MESSAGE(backend.name << " " << c.name << ": " << r.values_checked << " values, worst |diff|/tol "
                             << r.worst_ratio << " at " << r.worst_what);
      CHECK_MESSAGE(r.ok(), r.summary());
      CHECK(r.values_checked > 0);
    }
  test::backends()[0].select();  // the best CPU kernels again for the tests that follow
}

// The case run channels-last: every 4-D float input is converted to
// channels_last first, so the op runs on NHWC memory (conv2d on a
// channels-last weight, batch norm as [N*H*W, C, 1], max pooling with the
// flag in its geometry); the harness reads outputs in logical order and the
// gradients come back to the contiguous inputs through the conversion. Every
// 4-D output must be channels-last too (the format carries through), except
// where an op documents a contiguous result (adaptive average pooling).
OpCase channels_last_case(OpCase c, bool outputs_channels_last = true) {
  c.name += "_channels_last";
  auto inner = c.forward;
  c.forward = [inner, outputs_channels_last](const Ins& in) {
    Ins converted;
    for (const Tensor& t : in)
      converted.push_back(t.ndim() == 4 && is_floating(t.dtype()) ? ops::to_memory_format(t, MemoryFormat::channels_last)
                                                                   : t);
    Outs out = inner(converted);
    for (const Tensor& t : out)
      EMBER_CHECK(t.ndim() != 4 || t.is_channels_last() == outputs_channels_last, "output ", t.str(), " should ",
                  outputs_channels_last ? "" : "not ", "be channels_last");
    return out;
  };
  return c;
}

// Appends the channels-last form of the cases with these names.
void add_channels_last_named(std::vector<OpCase>& cases, std::initializer_list<std::string> names,
                             bool outputs_channels_last = true) {
  std::vector<OpCase> extra;
  for (const std::string& name : names) {
    auto it = std::find_if(cases.begin(), cases.end(), [&](const OpCase& c) { return c.name == name; });
    EMBER_CHECK(it != cases.end(), "no case named ", name);
    extra.push_back(channels_last_case(*it, outputs_channels_last));
  }
  cases.insert(cases.end(), extra.begin(), extra.end());
}

// Appends the channels-last form of cases[i] for each listed i.
void add_channels_last(std::vector<OpCase>& cases, std::initializer_list<size_t> which, bool outputs_channels_last = true) {
  std::vector<OpCase> extra;
  for (size_t i : which) extra.push_back(channels_last_case(cases.at(i), outputs_channels_last));
  cases.insert(cases.end(), extra.begin(), extra.end());
}


// ------------------------------------------------------------------ conv cases

struct ConvGeom {
  int64_t N, C, H, W, K, R, S, stride, pad;
  bool bias;
};

OpCase conv_case(const ConvGeom& g, int64_t max_fd = 0) {
  OpCase c;
  c.name = "conv2d_" + std::to_string(g.R) + "x" + std::to_string(g.S) + "_s" + std::to_string(g.stride) + "_p" +
           std::to_string(g.pad) + "_N" + std::to_string(g.N) + "C" + std::to_string(g.C) + "H" +
           std::to_string(g.H) + "W" + std::to_string(g.W) + "K" + std::to_string(g.K) + (g.bias ? "_bias" : "");
  const Shape xs{g.N, g.C, g.H, g.W}, ws{g.K, g.C, g.R, g.S};
  c.inputs = {test::input("x", xs), test::input("w", ws)};
  if (g.bias) c.inputs.push_back(test::input("b", Shape{g.K}));
  const ops::Conv2dOptions opt = ops::Conv2dOptions::square(g.stride, g.pad);
  const bool bias = g.bias;
  c.forward = [opt, bias](const Ins& in) { return Outs{ops::conv2d(in[0], in[1], bias ? in[2] : Tensor(), opt)}; };
  c.reference = [g, xs, ws](const InVals& v) {
    return Refs{ref_conv2d(v[0], xs, v[1], ws, g.bias ? &v[2] : nullptr, g.stride, g.stride, g.pad, g.pad)};
  };
  c.max_fd_elements = max_fd;
  return c;
}

}  // namespace

// ================================================================== elementwise

TEST_CASE("ops: add, scale, sum, relu, add_relu, cast through the harness") {
  std::vector<OpCase> cases;
  {
    OpCase c;
    c.name = "add";
    c.inputs = {test::input("a", {2, 3, 4}), test::input("b", {2, 3, 4}, Gen::uniform, -3, 2)};
    c.forward = [](const Ins& in) { return Outs{ops::add(in[0], in[1])}; };
    c.reference = [](const InVals& v) { return Refs{{Shape{2, 3, 4}, add_v(v[0], v[1])}}; };
    cases.push_back(c);
  }
  {
    OpCase c;  // the same tensor on both sides: its gradient is the sum of both paths
    c.name = "add_self";
    c.inputs = {test::input("a", {5, 7})};
    c.forward = [](const Ins& in) { return Outs{ops::add(in[0], in[0])}; };
    c.reference = [](const InVals& v) { return Refs{{Shape{5, 7}, add_v(v[0], v[0])}}; };
    cases.push_back(c);
  }
  {
    OpCase c;  // one differentiable, one constant operand
    c.name = "add_const";
    c.inputs = {test::input("a", {3, 5}), test::constant("b", {3, 5})};
    c.forward = [](const Ins& in) { return Outs{ops::add(in[0], in[1])}; };
    c.reference = [](const InVals& v) { return Refs{{Shape{3, 5}, add_v(v[0], v[1])}}; };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "scale";
    c.inputs = {test::input("x", {3, 11})};
    c.forward = [](const Ins& in) { return Outs{ops::scale(in[0], -1.7)}; };
    c.reference = [](const InVals& v) {
      Values y(v[0]);
      for (auto& a : y) a *= -1.7;
      return Refs{{Shape{3, 11}, y}};
    };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "sum";
    c.inputs = {test::input("x", {3, 4, 5}, Gen::uniform, -2, 3)};
    c.forward = [](const Ins& in) { return Outs{ops::sum(in[0])}; };
    c.reference = [](const InVals& v) {
      double s = 0;
      for (double a : v[0]) s += a;
      return Refs{{Shape{1}, {s}}};
    };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "sum_large";  // long enough for a parallel / vectorised reduction
    c.inputs = {test::input("x", {1031})};
    c.forward = [](const Ins& in) { return Outs{ops::sum(in[0])}; };
    c.reference = [](const InVals& v) {
      double s = 0;
      for (double a : v[0]) s += a;
      return Refs{{Shape{1}, {s}}};
    };
    c.max_fd_elements = 64;
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "relu";
    c.inputs = {test::input("x", {4, 5, 6}, Gen::away_from_zero, 0.05, 1.0)};
    c.forward = [](const Ins& in) { return Outs{ops::relu(in[0])}; };
    c.reference = [](const InVals& v) { return Refs{{Shape{4, 5, 6}, relu_v(v[0])}}; };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "relu_large";  // odd length past any vector width
    c.inputs = {test::input("x", {1, 1027}, Gen::away_from_zero, 0.05, 1.0)};
    c.forward = [](const Ins& in) { return Outs{ops::relu(in[0])}; };
    c.reference = [](const InVals& v) { return Refs{{Shape{1, 1027}, relu_v(v[0])}}; };
    c.max_fd_elements = 64;
    cases.push_back(c);
  }
  {
    OpCase c;  // the fused residual add + relu: |a| >= 0.3 > |b|, so a + b stays away from relu's kink
    c.name = "add_relu";
    c.inputs = {test::input("a", {3, 4, 5}, Gen::away_from_zero, 0.3, 1.0),
                test::input("b", {3, 4, 5}, Gen::uniform, -0.1, 0.1)};
    c.forward = [](const Ins& in) { return Outs{ops::add_relu(in[0], in[1])}; };
    c.reference = [](const InVals& v) { return Refs{{Shape{3, 4, 5}, relu_v(add_v(v[0], v[1]))}}; };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "add_relu_large";  // odd length past any vector width and one thread's share
    c.inputs = {test::input("a", {1, 70001}, Gen::away_from_zero, 0.3, 1.0),
                test::input("b", {1, 70001}, Gen::uniform, -0.1, 0.1)};
    c.forward = [](const Ins& in) { return Outs{ops::add_relu(in[0], in[1])}; };
    c.reference = [](const InVals& v) { return Refs{{Shape{1, 70001}, relu_v(add_v(v[0], v[1]))}}; };
    c.max_fd_elements = 64;
    cases.push_back(c);
  }
  // Casts: grid values (multiples of 1/64 in [-2, 2]: at most 8 significant
  // bits) are exact in every float type, so f64 -> f32 -> f64 is the identity.
  auto other = [](DType dt) { return dt == DType::f64 ? DType::f32 : DType::f64; };
  {
    OpCase c;
    c.name = "cast_roundtrip";
    c.inputs = {test::input("x", {3, 7}, Gen::grid, -2, 2)};
    c.forward = [other](const Ins& in) {
      return Outs{ops::cast(ops::cast(in[0], other(in[0].dtype())), in[0].dtype())};
    };
    c.reference = [](const InVals& v) { return Refs{{Shape{3, 7}, v[0]}}; };
    c.fd_eps = 1.0 / 64;
    cases.push_back(c);
  }
  {
    OpCase c;  // output in the other type: f64 -> f32 and f32 -> f64, gradient cast back
    c.name = "cast_to_other";
    c.inputs = {test::input("x", {2, 9}, Gen::grid, -2, 2)};
    c.forward = [other](const Ins& in) { return Outs{ops::cast(in[0], other(in[0].dtype()))}; };
    c.reference = [](const InVals& v) { return Refs{{Shape{2, 9}, v[0]}}; };
    c.fd_eps = 1.0 / 64;
    c.check_out_dtype = false;
    cases.push_back(c);
  }
  {
    // A 16-bit input through the other 16-bit type and back (f16 -> bf16 -> f16, bf16 -> f16 -> bf16;
    // gradients back the same way); f32 and f64 (the references) are the identity.
    OpCase c;
    c.name = "cast_through_other_16bit";
    c.inputs = {test::input("x", {3, 5}, Gen::grid, -2, 2)};
    c.forward = [](const Ins& in) {
      const DType dt = in[0].dtype();
      if (!is_16bit_float(dt)) return Outs{ops::scale(in[0], 1.0)};
      return Outs{ops::cast(ops::cast(in[0], dt == DType::f16 ? DType::bf16 : DType::f16), dt)};
    };
    c.reference = [](const InVals& v) { return Refs{{Shape{3, 5}, v[0]}}; };
    c.fd_eps = 1.0 / 64;
    cases.push_back(c);
  }
  {
    OpCase c;  // cast to the same type then an op on it
    c.name = "cast_same_then_scale";
    c.inputs = {test::input("x", {2, 5})};
    c.forward = [](const Ins& in) { return Outs{ops::scale(ops::cast(in[0], in[0].dtype()), 3.0)}; };
    c.reference = [](const InVals& v) {
      Values y(v[0]);
      for (auto& a : y) a *= 3.0;
      return Refs{{Shape{2, 5}, y}};
    };
    cases.push_back(c);
  }
  run_cases(cases);
}

// ================================================================== pointwise ops (ops/pointwise.h)

TEST_CASE("ops: the pointwise ops through the harness") {
  std::vector<OpCase> cases;
  {
    OpCase c;  // gelu(x) = x * Phi(x), from the definition of the normal CDF
    c.name = "gelu";
    c.inputs = {test::input("x", {3, 4, 5}, Gen::uniform, -4, 4)};
    c.forward = [](const Ins& in) { return Outs{ops::gelu(in[0])}; };
    c.reference = [](const InVals& v) {
      return Refs{{Shape{3, 4, 5}, map(v[0], [](double a) { return a * 0.5 * std::erfc(-a / std::sqrt(2.0)); })}};
    };
    cases.push_back(c);
  }
  {
    OpCase c;  // gelu of a gelu: the backward of a chain
    c.name = "gelu_gelu";
    c.inputs = {test::input("x", {4, 9}, Gen::uniform, -3, 3)};
    c.forward = [](const Ins& in) { return Outs{ops::gelu(ops::gelu(in[0]))}; };
    c.reference = [](const InVals& v) {
      auto g = [](double a) { return a * 0.5 * std::erfc(-a / std::sqrt(2.0)); };
      Values y(v[0]);
      for (auto& a : y) a = g(g(a));
      return Refs{{Shape{4, 9}, y}};
    };
    cases.push_back(c);
  }
  {
    OpCase c;  // an odd length past one thread's share (the CPU splits from 2^15 elements)
    c.name = "gelu_large";
    c.inputs = {test::input("x", {1, 33001}, Gen::uniform, -3, 3)};
    c.forward = [](const Ins& in) { return Outs{ops::gelu(in[0])}; };
    c.reference = [](const InVals& v) {
      return Refs{{Shape{1, 33001}, map(v[0], [](double a) { return a * 0.5 * std::erfc(-a / std::sqrt(2.0)); })}};
    };
    c.max_fd_elements = 64;
    cases.push_back(c);
  }
  // Dropout with a fixed generator seed (a fresh Generator per forward, so the
  // finite differences see one mask), against the mask derived here from the
  // Philox words: element i is kept when its uniform draw is >= p.
  // (p == 0 returns x itself: the test case below.)
  for (const auto& [p, shape] : {std::pair{0.3, Shape{3, 4, 5}}, std::pair{0.5, Shape{1, 33001}},
                                 std::pair{1.0, Shape{4, 5}}}) {
    OpCase c;
    c.name = "dropout_p" + std::to_string(int(p * 100)) + "%_" + shape.str();
    c.inputs = {test::input("x", shape)};
    c.forward = [p](const Ins& in) {
      Generator gen(77);
      return Outs{ops::dropout(in[0], p, true, gen)};
    };
    c.reference = [p, shape](const InVals& v) {
      Values y(v[0]);
      for (size_t i = 0; i < y.size(); ++i) {
        const PhiloxBlock r = philox4x32(77, i / 4, 0);
        y[i] = double(u32_to_unit(r.w[i % 4])) >= p ? y[i] / (1.0 - p) : 0.0;
      }
      return Refs{{shape, y}};
    };
    if (shape.numel() > 1000) c.max_fd_elements = 64;
    cases.push_back(c);
  }
  // Every op of ops/pointwise.h has a case here, named after it.
#define EMBER_POINTWISE_HAS_CASE_(op, Fn)                                                                   \
  CHECK_MESSAGE(std::any_of(cases.begin(), cases.end(), [](const OpCase& c) { return c.name.rfind(#op, 0) == 0; }), \
                "no harness case for the pointwise op " #op);
  EMBER_FOR_EACH_POINTWISE(EMBER_POINTWISE_HAS_CASE_)
#undef EMBER_POINTWISE_HAS_CASE_
  run_cases(cases);
}

TEST_CASE("ops: dropout drops a fraction p, draws a new mask per call, and is the identity in eval") {
  const int64_t n = 1 << 20;
  Tensor x = Tensor::full({n}, 2.0, DType::f32, Device::cpu());
  Generator gen(5);
  for (double p : {0.1, 0.5, 0.9}) {
    CAPTURE(p);
    const std::vector<double> y = ops::dropout(x, p, true, gen).to_double_vector();
    int64_t dropped = 0, wrong_scale = 0;
    for (double v : y) {
      if (v == 0.0) ++dropped;
      else if (std::abs(v - 2.0 / (1.0 - p)) > 1e-5 * v) ++wrong_scale;
    }
    CHECK(wrong_scale == 0);
    // 5 standard deviations of the binomial count
    CHECK(std::abs(double(dropped) - p * n) < 5.0 * std::sqrt(n * p * (1 - p)));
  }
  // Two calls on one generator draw different masks; the same seed again repeats the first.
  Generator a(9), b(9);
  const auto m1 = ops::dropout(x, 0.5, true, a).to_double_vector();
  const auto m2 = ops::dropout(x, 0.5, true, a).to_double_vector();
  const auto m1_again = ops::dropout(x, 0.5, true, b).to_double_vector();
  CHECK(m1 != m2);
  CHECK(m1 == m1_again);
  // Eval mode and p == 0 return the input itself.
  CHECK(ops::dropout(x, 0.5, false, a).raw_data() == x.raw_data());
  CHECK(ops::dropout(x, 0.0, true, a).raw_data() == x.raw_data());
  expect_error([&] { ops::dropout(x, -0.1, true, a); }, "dropout: p must be in [0, 1], got -0.1");
  expect_error([&] { ops::dropout(x, 1.5, true, a); }, "dropout: p must be in [0, 1], got 1.5");
  expect_error([&] { ops::dropout(x, std::nan(""), true, a); }, "dropout: p must be in [0, 1]");
  expect_error([&] { ops::dropout(Tensor::zeros({2}, DType::i64, Device::cpu()), 0.5, true, a); },
               "dropout: input must be f32, f64, f16 or bf16");
}

TEST_CASE("ops: relu's gradient at exactly 0 is 0 (PyTorch's convention)") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = Tensor::from_vector({0.0, -0.0, 1.0, -1.0}, {4}, dt);
    x.set_requires_grad(true);
    Tensor y = ops::relu(x);
    CHECK(y.to_double_vector() == std::vector<double>{0, 0, 1, 0});
    y.backward(Tensor::from_vector({5, 6, 7, 8}, {4}, dt));
    CHECK(x.grad().to_double_vector() == std::vector<double>{0, 0, 7, 0});
  }
}

TEST_CASE("ops: cast output dtypes") {
  Tensor x = Tensor::from_vector({1.5, -2.25}, {2}, DType::f64);
  Tensor y = ops::cast(x, DType::f32);
  CHECK(y.dtype() == DType::f32);
  CHECK(y.to_double_vector() == std::vector<double>{1.5, -2.25});
  CHECK(ops::cast(y, DType::f64).dtype() == DType::f64);
  CHECK(ops::cast(x, DType::f64).same(x));  // same dtype: the tensor itself
}

// ================================================================== linear

TEST_CASE("ops: linear through the harness") {
  struct L {
    int64_t N, I, O;
    bool bias;
  };
  std::vector<OpCase> cases;
  for (const L& l : {L{5, 7, 3, true}, L{5, 7, 3, false}, L{1, 4, 6, true}, L{19, 37, 23, true}, L{2, 1, 1, false}}) {
    OpCase c;
    c.name = "linear_" + std::to_string(l.N) + "x" + std::to_string(l.I) + "_to_" + std::to_string(l.O) +
             (l.bias ? "_bias" : "");
    const Shape xs{l.N, l.I}, ws{l.O, l.I};
    c.inputs = {test::input("x", xs), test::input("w", ws)};
    if (l.bias) c.inputs.push_back(test::input("b", Shape{l.O}));
    const bool bias = l.bias;
    c.forward = [bias](const Ins& in) { return Outs{ops::linear(in[0], in[1], bias ? in[2] : Tensor())}; };
    c.reference = [xs, ws, bias](const InVals& v) { return Refs{ref_linear(v[0], xs, v[1], ws, bias ? &v[2] : nullptr)}; };
    cases.push_back(c);
  }
  {
    OpCase c;  // weight frozen (constant), only x and b differentiated
    c.name = "linear_frozen_weight";
    c.inputs = {test::input("x", {4, 6}), test::constant("w", {3, 6}), test::input("b", {3})};
    c.forward = [](const Ins& in) { return Outs{ops::linear(in[0], in[1], in[2])}; };
    c.reference = [](const InVals& v) { return Refs{ref_linear(v[0], {4, 6}, v[1], {3, 6}, &v[2])}; };
    cases.push_back(c);
  }
  {
    OpCase c;  // larger, past the GEMM micro-kernel tiles; sampled finite differences
    c.name = "linear_64x130_to_67";
    const Shape xs{64, 130}, ws{67, 130};
    c.inputs = {test::input("x", xs), test::input("w", ws), test::input("b", {67})};
    c.forward = [](const Ins& in) { return Outs{ops::linear(in[0], in[1], in[2])}; };
    c.reference = [xs, ws](const InVals& v) { return Refs{ref_linear(v[0], xs, v[1], ws, &v[2])}; };
    c.max_fd_elements = 40;
    cases.push_back(c);
  }
  {
    OpCase c;  // more rows than one GEMM row block and an inner dimension past one K block (backward)
    c.name = "linear_300x20_to_270";
    const Shape xs{300, 20}, ws{270, 20};
    c.inputs = {test::input("x", xs), test::input("w", ws)};
    c.forward = [](const Ins& in) { return Outs{ops::linear(in[0], in[1], Tensor())}; };
    c.reference = [xs, ws](const InVals& v) { return Refs{ref_linear(v[0], xs, v[1], ws, nullptr)}; };
    c.max_fd_elements = 24;
    cases.push_back(c);
  }
  run_cases(cases);
}

// ================================================================== conv2d

TEST_CASE("ops: conv2d through the harness") {
  std::vector<OpCase> cases;
  // N, C, H, W, K, R, S, stride, pad, bias
  cases.push_back(conv_case({2, 3, 7, 9, 5, 1, 1, 1, 0, false}));  // 1x1
  cases.push_back(conv_case({2, 3, 7, 9, 5, 1, 1, 2, 0, true}));   // 1x1 stride 2 (ResNet downsample)
  cases.push_back(conv_case({2, 3, 7, 9, 5, 3, 3, 1, 1, true}));   // 3x3 same
  cases.push_back(conv_case({2, 3, 7, 9, 5, 3, 3, 1, 0, false}));  // 3x3 valid
  cases.push_back(conv_case({2, 3, 7, 9, 5, 3, 3, 2, 1, false}));  // 3x3 stride 2
  cases.push_back(conv_case({2, 3, 8, 6, 4, 3, 3, 2, 1, true}));   // even sizes, stride 2
  cases.push_back(conv_case({2, 3, 9, 7, 5, 7, 7, 2, 3, false}));  // the ResNet stem
  cases.push_back(conv_case({1, 2, 7, 9, 3, 7, 7, 1, 3, true}));   // 7x7 stride 1
  cases.push_back(conv_case({2, 1, 5, 5, 1, 5, 5, 1, 0, true}));   // kernel = input: a 1x1 output
  cases.push_back(conv_case({1, 2, 3, 4, 2, 3, 3, 1, 3, false}));  // padding larger than needed
  // Wider channels to reach the fast (blocked GEMM) paths; sampled finite differences.
  cases.push_back(conv_case({2, 16, 8, 8, 24, 3, 3, 1, 1, true}, 48));
  cases.push_back(conv_case({2, 20, 9, 7, 33, 1, 1, 2, 0, false}, 48));
  // Batches past one stack of small images per thread (conv.cpp stacks 4x4
  // planes 15 (3x3) and 16 (1x1) to a GEMM): a full stack and a partial one.
  cases.push_back(conv_case({34, 2, 4, 4, 3, 3, 3, 1, 1, false}, 24));
  cases.push_back(conv_case({34, 3, 4, 4, 5, 1, 1, 1, 0, true}, 24));
  // Channels-last: 1x1, 1x1 stride 2 with bias, 3x3 same, 3x3 stride 2, the
  // stem, a 1x1 output, and the wider blocked case.
  add_channels_last(cases, {0, 1, 2, 4, 6, 8, 10});
  run_cases(cases);
}

// ================================================================== batch norm

TEST_CASE("ops: batch_norm2d through the harness") {
  const double momentum = 0.1, eps = 1e-5;
  std::vector<OpCase> cases;
  for (const Shape& xs : {Shape{2, 3, 4, 5}, Shape{4, 2, 3, 3}, Shape{1, 2, 1, 3}, Shape{3, 5, 1, 1}}) {
    const int64_t C = xs[1];
    {
      OpCase c;
      c.name = "batch_norm2d_train_" + xs.str();
      c.inputs = {test::input("x", xs, Gen::uniform, -2, 3),
                  test::as_param(test::input("gamma", {C}, Gen::uniform, 0.5, 1.5)),
                  test::as_param(test::input("beta", {C})),
                  test::as_param(test::constant("running_mean", {C}, Gen::uniform, -0.5, 0.5)),
                  test::as_param(test::constant("running_var", {C}, Gen::uniform, 0.5, 1.5))};
      // Copies of the running statistics: every finite-difference evaluation
      // starts from the same ones, and the updated copies are outputs 1 and 2.
      c.forward = [momentum, eps](const Ins& in) {
        Tensor rm = in[3].clone(), rv = in[4].clone();
        Tensor y = ops::batch_norm2d(in[0], in[1], in[2], rm, rv, true, momentum, eps);
        return Outs{y, rm, rv};
      };
      c.reference = [xs, momentum, eps](const InVals& v) {
        return ref_batch_norm_train(v[0], xs, v[1], v[2], v[3], v[4], momentum, eps);
      };
      cases.push_back(c);
    }
    {
      OpCase c;
      c.name = "batch_norm2d_eval_" + xs.str();
      c.inputs = {test::input("x", xs, Gen::uniform, -2, 3),
                  test::as_param(test::input("gamma", {C}, Gen::uniform, 0.5, 1.5)),
                  test::as_param(test::input("beta", {C})),
                  test::as_param(test::constant("running_mean", {C}, Gen::uniform, -0.5, 0.5)),
                  test::as_param(test::constant("running_var", {C}, Gen::uniform, 0.5, 1.5))};
      c.forward = [momentum, eps](const Ins& in) {
        Tensor rm = in[3], rv = in[4];  // eval must not touch them (the harness checks inputs are unchanged)
        return Outs{ops::batch_norm2d(in[0], in[1], in[2], rm, rv, false, momentum, eps)};
      };
      c.reference = [xs, eps](const InVals& v) {
        return Refs{ref_batch_norm_eval(v[0], xs, v[1], v[2], v[3], v[4], eps)};
      };
      cases.push_back(c);
    }
  }
  {
    OpCase c;  // a larger plane, momentum 0.3, eps 1e-3
    c.name = "batch_norm2d_train_momentum0.3";
    const Shape xs{2, 6, 9, 11};
    c.inputs = {test::input("x", xs, Gen::uniform, -1, 4),
                test::as_param(test::input("gamma", {6}, Gen::uniform, -1.5, 1.5)), test::as_param(test::input("beta", {6})),
                test::as_param(test::constant("running_mean", {6})),
                test::as_param(test::constant("running_var", {6}, Gen::uniform, 0.5, 2))};
    c.forward = [](const Ins& in) {
      Tensor rm = in[3].clone(), rv = in[4].clone();
      return Outs{ops::batch_norm2d(in[0], in[1], in[2], rm, rv, true, 0.3, 1e-3), rm, rv};
    };
    c.reference = [xs](const InVals& v) { return ref_batch_norm_train(v[0], xs, v[1], v[2], v[3], v[4], 0.3, 1e-3); };
    c.max_fd_elements = 100;
    cases.push_back(c);
  }
  // The fused batch norm + relu, training and (composed) inference.
  for (const Shape& xs : {Shape{2, 3, 4, 5}, Shape{4, 2, 3, 3}, Shape{2, 6, 9, 11}}) {
    const int64_t C = xs[1];
    for (bool training : {true, false}) {
      OpCase c;
      c.name = std::string("batch_norm2d_relu_") + (training ? "train_" : "eval_") + xs.str();
      c.inputs = {test::input("x", xs, Gen::uniform, -2, 3),
                  test::as_param(test::input("gamma", {C}, Gen::uniform, 0.5, 1.5)),
                  test::as_param(test::input("beta", {C}, Gen::uniform, -0.5, 0.5)),
                  test::as_param(test::constant("running_mean", {C}, Gen::uniform, -0.5, 0.5)),
                  test::as_param(test::constant("running_var", {C}, Gen::uniform, 0.5, 1.5))};
      c.forward = [training, momentum, eps](const Ins& in) {
        Tensor rm = in[3].clone(), rv = in[4].clone();
        Tensor y = ops::batch_norm2d_relu(in[0], in[1], in[2], rm, rv, training, momentum, eps);
        return Outs{y, rm, rv};
      };
      c.reference = [xs, training, momentum, eps](const InVals& v) {
        Refs r = training ? ref_batch_norm_train(v[0], xs, v[1], v[2], v[3], v[4], momentum, eps)
                          : Refs{ref_batch_norm_eval(v[0], xs, v[1], v[2], v[3], v[4], eps), {Shape{xs[1]}, v[3]},
                                 {Shape{xs[1]}, v[4]}};
        r[0].values = relu_v(r[0].values);
        return r;
      };
      c.max_fd_elements = 100;
      cases.push_back(c);
    }
  }
  // The fused end of a ResNet block, relu(batch norm(x) + r): the gradient
  // reaches x, r, gamma and beta.
  for (const Shape& xs : {Shape{2, 3, 4, 5}, Shape{2, 6, 9, 11}}) {
    const int64_t C = xs[1];
    for (bool training : {true, false}) {
      OpCase c;
      c.name = std::string("batch_norm2d_add_relu_") + (training ? "train_" : "eval_") + xs.str();
      c.inputs = {test::input("x", xs, Gen::uniform, -2, 3), test::input("residual", xs, Gen::uniform, -1, 1),
                  test::as_param(test::input("gamma", {C}, Gen::uniform, 0.5, 1.5)),
                  test::as_param(test::input("beta", {C}, Gen::uniform, -0.5, 0.5)),
                  test::as_param(test::constant("running_mean", {C}, Gen::uniform, -0.5, 0.5)),
                  test::as_param(test::constant("running_var", {C}, Gen::uniform, 0.5, 1.5))};
      c.forward = [training, momentum, eps](const Ins& in) {
        Tensor rm = in[4].clone(), rv = in[5].clone();
        Tensor y = ops::batch_norm2d_add_relu(in[0], in[1], in[2], in[3], rm, rv, training, momentum, eps);
        return Outs{y, rm, rv};
      };
      c.reference = [xs, training, momentum, eps](const InVals& v) {
        Refs r = training ? ref_batch_norm_train(v[0], xs, v[2], v[3], v[4], v[5], momentum, eps)
                          : Refs{ref_batch_norm_eval(v[0], xs, v[2], v[3], v[4], v[5], eps), {Shape{xs[1]}, v[4]},
                                 {Shape{xs[1]}, v[5]}};
        for (size_t i = 0; i < r[0].values.size(); ++i) r[0].values[i] += v[1][i];
        r[0].values = relu_v(r[0].values);
        return r;
      };
      c.max_fd_elements = 100;
      cases.push_back(c);
    }
  }
  add_channels_last_named(cases, {"batch_norm2d_train_[2, 3, 4, 5]", "batch_norm2d_eval_[2, 3, 4, 5]",
                                  "batch_norm2d_train_[3, 5, 1, 1]", "batch_norm2d_relu_train_[2, 6, 9, 11]",
                                  "batch_norm2d_relu_eval_[2, 3, 4, 5]", "batch_norm2d_add_relu_train_[2, 3, 4, 5]",
                                  "batch_norm2d_add_relu_eval_[2, 3, 4, 5]"});
  run_cases(cases);
}

// A convolution and the training batch norm after it as one op (then the
// ReLU, or the residual add and the ReLU): forward, running statistics and
// finite-difference gradients of x, w, gamma, beta and the residual, on
// every backend and dtype. The channels-last 16-channel case is the one the
// CUDA tensor-core path fuses in f16 and bf16 (statistics from the
// convolution's epilogue).
TEST_CASE("ops: conv2d_batch_norm2d_train through the harness") {
  std::vector<OpCase> cases;
  const double momentum = 0.1, eps = 1e-5;
  enum class After { none, relu, add_relu };
  struct Geom {
    int64_t N, C, H, W, K, R, stride, pad;
  };
  // (The 16-channel case leaves out the residual: over its 288 outputs some
  // relu(bn + r) lies so close to 0 that bf16 and f32 take different sides,
  // and the comparison of their gradients would see the mask, not the op.)
  for (const Geom& g : {Geom{2, 3, 6, 5, 4, 3, 1, 1}, Geom{2, 16, 5, 6, 16, 3, 2, 1}, Geom{3, 4, 4, 4, 6, 1, 1, 0}})
    for (After after : {After::none, After::relu, After::add_relu}) {
      if (g.C == 16 && after == After::add_relu) continue;
      const Shape xs{g.N, g.C, g.H, g.W}, ws{g.K, g.C, g.R, g.R};
      const int64_t P = (g.H + 2 * g.pad - g.R) / g.stride + 1, Q = (g.W + 2 * g.pad - g.R) / g.stride + 1;
      const Shape ys{g.N, g.K, P, Q};
      OpCase c;
      c.name = std::string("conv2d_batch_norm2d_") +
               (after == After::none ? "train_" : after == After::relu ? "relu_train_" : "add_relu_train_") +
               xs.str() + "_" + ws.str();
      c.inputs = {test::input("x", xs, Gen::uniform, -1, 2), test::input("w", ws, Gen::uniform, -0.5, 0.5),
                  test::as_param(test::input("gamma", {g.K}, Gen::uniform, 0.5, 1.5)),
                  test::as_param(test::input("beta", {g.K}, Gen::uniform, -0.5, 0.5)),
                  test::as_param(test::constant("running_mean", {g.K}, Gen::uniform, -0.5, 0.5)),
                  test::as_param(test::constant("running_var", {g.K}, Gen::uniform, 0.5, 1.5))};
      if (after == After::add_relu) c.inputs.push_back(test::input("residual", ys, Gen::uniform, -1, 1));
      const ops::Conv2dOptions opt = ops::Conv2dOptions::square(g.stride, g.pad);
      c.forward = [opt, after, momentum, eps](const Ins& in) {
        Tensor rm = in[4].clone(), rv = in[5].clone();
        Tensor y = ops::conv2d_batch_norm2d_train(in[0], in[1], opt, in[2], in[3], rm, rv, momentum, eps,
                                                  after != After::none,
                                                  after == After::add_relu ? in[6] : Tensor());
        return Outs{y, rm, rv};
      };
      c.reference = [g, xs, ws, ys, after, momentum, eps](const InVals& v) {
        const RefOut conv = ref_conv2d(v[0], xs, v[1], ws, nullptr, g.stride, g.stride, g.pad, g.pad);
        Refs r = ref_batch_norm_train(conv.values, ys, v[2], v[3], v[4], v[5], momentum, eps);
        if (after == After::add_relu)
          for (size_t i = 0; i < r[0].values.size(); ++i) r[0].values[i] += v[6][i];
        if (after != After::none) r[0].values = relu_v(r[0].values);
        return r;
      };
      c.max_fd_elements = 60;
      cases.push_back(c);
    }
  add_channels_last_named(cases, {"conv2d_batch_norm2d_relu_train_[2, 16, 5, 6]_[16, 16, 3, 3]",
                                  "conv2d_batch_norm2d_train_[2, 16, 5, 6]_[16, 16, 3, 3]",
                                  "conv2d_batch_norm2d_add_relu_train_[2, 3, 6, 5]_[4, 3, 3, 3]"});
  run_cases(cases);
}

// The fused ops against the unfused ops they replace, on every backend:
// forward outputs, running statistics and every gradient, f64 and f32, to
// rounding (sums may be vectorised in another order).
TEST_CASE("ops: fused batch_norm2d_relu, batch_norm2d_add_relu and add_relu match their unfused compositions") {
  auto make = [](int64_t n, double lo, double hi, uint64_t seed) {
    std::vector<double> v(static_cast<size_t>(n));
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 5;
    for (auto& a : v) {
      st = st * 6364136223846793005ull + 1442695040888963407ull;
      a = lo + (hi - lo) * double(st >> 11) / double(1ull << 53);
    }
    return v;
  };
  const Shape xs{4, 3, 5, 7};
  const auto xv = make(xs.numel(), -2, 3, 1), gv = make(3, 0.5, 1.5, 2), bv = make(3, -0.5, 0.5, 3),
             uv = make(xs.numel(), -1, 1, 4), dv = make(xs.numel(), -1, 1, 5), upv = make(xs.numel(), -1, 1, 6);
  for (const test::Backend& be : test::backends()) {
    if (be.select) be.select();
    CAPTURE(be.name);
    for (DType dt : {DType::f64, DType::f32}) {
      if (dt == DType::f64 && !be.has_f64) continue;
      const std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      const DType pt = ops::param_dtype(dt);
      const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
      auto leaf = [&](const std::vector<double>& v, const Shape& s, DType t) {
        Tensor x = Tensor::from_vector(v, s, t, be.device);
        x.set_requires_grad(true);
        return x;
      };
      auto close = [&](const Tensor& a, const Tensor& b) {
        const auto x = a.to_double_vector(), y = b.to_double_vector();
        REQUIRE(x.size() == y.size());
        double worst = 0;
        for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]) / (1 + std::fabs(y[i])));
        CHECK(worst <= tol);
      };
      const Tensor upstream = Tensor::from_vector(upv, xs, dt, be.device);
      // batch norm + relu, training: y, running statistics, gx, ggamma, gbeta
      std::vector<Tensor> fused, plain;
      for (bool fuse : {true, false}) {
        Tensor x = leaf(xv, xs, dt), g = leaf(gv, Shape{3}, pt), b = leaf(bv, Shape{3}, pt);
        Tensor rm = Tensor::zeros({3}, pt, be.device), rv = Tensor::full({3}, 1.0, pt, be.device);
        Tensor y = fuse ? ops::batch_norm2d_relu(x, g, b, rm, rv, true, 0.1, 1e-5)
                        : ops::relu(ops::batch_norm2d(x, g, b, rm, rv, true, 0.1, 1e-5));
        y.backward(upstream);
        (fuse ? fused : plain) = std::vector<Tensor>{y.detach(), rm, rv, x.grad(), g.grad(), b.grad()};
      }
      for (size_t i = 0; i < fused.size(); ++i) {
        CAPTURE(i);
        close(fused[i], plain[i]);
      }
      // batch norm + add + relu, training: y, running statistics, gx, gr, ggamma, gbeta
      fused.clear(), plain.clear();
      for (bool fuse : {true, false}) {
        Tensor x = leaf(xv, xs, dt), r = leaf(dv, xs, dt), g = leaf(gv, Shape{3}, pt), b = leaf(bv, Shape{3}, pt);
        Tensor rm = Tensor::zeros({3}, pt, be.device), rv = Tensor::full({3}, 1.0, pt, be.device);
        Tensor y = fuse ? ops::batch_norm2d_add_relu(x, r, g, b, rm, rv, true, 0.1, 1e-5)
                        : ops::add_relu(ops::batch_norm2d(x, g, b, rm, rv, true, 0.1, 1e-5), r);
        y.backward(upstream);
        (fuse ? fused : plain) = std::vector<Tensor>{y.detach(), rm, rv, x.grad(), r.grad(), g.grad(), b.grad()};
      }
      for (size_t i = 0; i < fused.size(); ++i) {
        CAPTURE(i);
        close(fused[i], plain[i]);
      }
      // add + relu: y and both gradients
      fused.clear(), plain.clear();
      for (bool fuse : {true, false}) {
        Tensor a = leaf(uv, xs, dt), b = leaf(dv, xs, dt);
        Tensor y = fuse ? ops::add_relu(a, b) : ops::relu(ops::add(a, b));
        y.backward(upstream);
        (fuse ? fused : plain) = std::vector<Tensor>{y.detach(), a.grad(), b.grad()};
      }
      for (size_t i = 0; i < fused.size(); ++i) {
        CAPTURE(i);
        close(fused[i], plain[i]);
      }
    }
  }
}

TEST_CASE("ops: batch_norm2d updates the running statistics in place, accumulating over steps") {
  // Two training steps on the same running tensors: the second update starts from the first.
  const Shape xs{2, 2, 2, 3};
  Values x1(24), x2(24);
  for (size_t i = 0; i < 24; ++i) {
    x1[i] = std::sin(double(i)) * 2 + 0.5;
    x2[i] = std::cos(double(i) * 0.7) - 0.25;
  }
  Tensor g = Tensor::full({2}, 1.0, DType::f64), b = Tensor::zeros({2}, DType::f64);
  Tensor rm = Tensor::zeros({2}, DType::f64), rv = Tensor::full({2}, 1.0, DType::f64);
  ops::batch_norm2d(Tensor::from_vector(x1, xs, DType::f64), g, b, rm, rv, true, 0.1, 1e-5);
  ops::batch_norm2d(Tensor::from_vector(x2, xs, DType::f64), g, b, rm, rv, true, 0.1, 1e-5);
  Refs r1 = ref_batch_norm_train(x1, xs, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 0.1, 1e-5);
  Refs r2 = ref_batch_norm_train(x2, xs, {1, 1}, {0, 0}, r1[1].values, r1[2].values, 0.1, 1e-5);
  for (size_t c = 0; c < 2; ++c) {
    CHECK(rm.to_double_vector()[c] == doctest::Approx(r2[1].values[c]).epsilon(1e-12));
    CHECK(rv.to_double_vector()[c] == doctest::Approx(r2[2].values[c]).epsilon(1e-12));
  }
  // Eval leaves them alone.
  const Values rm_before = rm.to_double_vector(), rv_before = rv.to_double_vector();
  ops::batch_norm2d(Tensor::from_vector(x1, xs, DType::f64), g, b, rm, rv, false, 0.1, 1e-5);
  CHECK(rm.to_double_vector() == rm_before);
  CHECK(rv.to_double_vector() == rv_before);
}

// ================================================================== pooling

TEST_CASE("ops: max_pool2d and adaptive_avg_pool2d through the harness") {
  struct MP {
    Shape xs;
    int64_t k, s, p;
  };
  std::vector<OpCase> cases;
  for (const MP& m : {MP{{2, 3, 7, 9}, 3, 2, 1}, MP{{2, 3, 8, 8}, 3, 2, 1}, MP{{2, 2, 6, 8}, 2, 2, 0},
                      MP{{1, 2, 7, 9}, 2, 2, 0}, MP{{1, 3, 5, 6}, 3, 1, 1}, MP{{1, 2, 4, 5}, 1, 1, 0},
                      MP{{2, 2, 5, 5}, 5, 1, 2}}) {
    OpCase c;
    c.name = "max_pool2d_k" + std::to_string(m.k) + "s" + std::to_string(m.s) + "p" + std::to_string(m.p) + "_" +
             m.xs.str();
    c.inputs = {test::input("x", m.xs, Gen::distinct, -2, 2)};
    c.forward = [m](const Ins& in) { return Outs{ops::max_pool2d(in[0], m.k, m.s, m.p)}; };
    c.reference = [m](const InVals& v) { return Refs{ref_max_pool2d(v[0], m.xs, m.k, m.s, m.p)}; };
    cases.push_back(c);
  }
  {
    OpCase c;  // all-negative input: padding must act as -inf, not 0
    c.name = "max_pool2d_negative_padding";
    const Shape xs{1, 2, 5, 5};
    c.inputs = {test::input("x", xs, Gen::distinct, -3, -1)};
    c.forward = [](const Ins& in) { return Outs{ops::max_pool2d(in[0], 3, 2, 1)}; };
    c.reference = [xs](const InVals& v) { return Refs{ref_max_pool2d(v[0], xs, 3, 2, 1)}; };
    cases.push_back(c);
  }
  struct AP {
    Shape xs;
    int64_t oh, ow;
  };
  for (const AP& a : {AP{{2, 3, 5, 7}, 1, 1}, AP{{2, 3, 5, 7}, 3, 2}, AP{{1, 2, 4, 6}, 2, 3}, AP{{1, 2, 7, 5}, 4, 3},
                      AP{{1, 2, 3, 2}, 5, 4}, AP{{2, 2, 4, 4}, 4, 4}}) {
    OpCase c;
    c.name = "adaptive_avg_pool2d_" + a.xs.str() + "_to_" + std::to_string(a.oh) + "x" + std::to_string(a.ow);
    c.inputs = {test::input("x", a.xs)};
    c.forward = [a](const Ins& in) { return Outs{ops::adaptive_avg_pool2d(in[0], a.oh, a.ow)}; };
    c.reference = [a](const InVals& v) { return Refs{ref_adaptive_avg_pool2d(v[0], a.xs, a.oh, a.ow)}; };
    cases.push_back(c);
  }
  add_channels_last_named(cases, {"max_pool2d_k3s2p1_[2, 3, 7, 9]", "max_pool2d_k2s2p0_[2, 2, 6, 8]",
                                  "max_pool2d_k5s1p2_[2, 2, 5, 5]", "max_pool2d_negative_padding"});
  add_channels_last_named(cases, {"adaptive_avg_pool2d_[2, 3, 5, 7]_to_1x1", "adaptive_avg_pool2d_[1, 2, 4, 6]_to_2x3"},
                          /*outputs_channels_last=*/false);
  run_cases(cases);
}

TEST_CASE("ops: global_max_pool2d through the harness") {
  std::vector<OpCase> cases;
  for (const Shape& xs : {Shape{2, 3, 4, 4}, Shape{2, 3, 5, 7}, Shape{1, 2, 1, 1}, Shape{3, 1, 6, 2}}) {
    OpCase c;
    c.name = "global_max_pool2d_" + xs.str();
    c.inputs = {test::input("x", xs, Gen::distinct, -2, 2)};
    c.forward = [](const Ins& in) { return Outs{ops::global_max_pool2d(in[0])}; };
    c.reference = [xs](const InVals& v) { return Refs{ref_global_max_pool2d(v[0], xs)}; };
    cases.push_back(c);
  }
  add_channels_last(cases, {0, 1});
  run_cases(cases);
}

// ================================================================== shape ops

TEST_CASE("ops: concat through the harness") {
  struct Cat {
    Shape as, bs;
    int dim;
  };
  std::vector<OpCase> cases;
  for (const Cat& k : {Cat{{3, 4}, {3, 5}, 1}, Cat{{2, 3, 4}, {2, 2, 4}, 1}, Cat{{2, 3}, {4, 3}, 0},
                       Cat{{2, 3, 4, 5}, {2, 3, 4, 2}, -1}, Cat{{2, 3, 4, 5}, {2, 3, 1, 5}, 2},
                       Cat{{1, 6}, {1, 1}, 1}}) {
    OpCase c;
    c.name = "concat_" + k.as.str() + "_" + k.bs.str() + "_dim" + std::to_string(k.dim);
    c.inputs = {test::input("a", k.as), test::input("b", k.bs, Gen::uniform, -3, 2)};
    c.forward = [k](const Ins& in) { return Outs{ops::concat(in[0], in[1], k.dim)}; };
    const int d = k.dim < 0 ? k.dim + k.as.ndim() : k.dim;
    c.reference = [k, d](const InVals& v) { return Refs{ref_concat(v[0], k.as, v[1], k.bs, d)}; };
    cases.push_back(c);
  }
  {
    OpCase c;  // the same tensor on both sides: its gradient is the sum of both halves
    c.name = "concat_self";
    c.inputs = {test::input("a", {3, 4})};
    c.forward = [](const Ins& in) { return Outs{ops::concat(in[0], in[0], 1)}; };
    c.reference = [](const InVals& v) { return Refs{ref_concat(v[0], {3, 4}, v[0], {3, 4}, 1)}; };
    cases.push_back(c);
  }
  {
    OpCase c;  // ResNet's concat-pool head: fc([avg pool, max pool])
    c.name = "concat_pool_head";
    const Shape xs{2, 3, 4, 4};
    c.inputs = {test::input("x", xs, Gen::distinct, -2, 2), test::input("w", {5, 6}), test::input("b", {5})};
    c.forward = [](const Ins& in) {
      Tensor avg = ops::flatten(ops::adaptive_avg_pool2d(in[0], 1, 1)), mx = ops::flatten(ops::global_max_pool2d(in[0]));
      return Outs{ops::linear(ops::concat(avg, mx, 1), in[1], in[2])};
    };
    c.reference = [xs](const InVals& v) {
      const RefOut avg = ref_adaptive_avg_pool2d(v[0], xs, 1, 1), mx = ref_global_max_pool2d(v[0], xs);
      const RefOut f = ref_concat(avg.values, {2, 3}, mx.values, {2, 3}, 1);
      return Refs{ref_linear(f.values, {2, 6}, v[1], {5, 6}, &v[2])};
    };
    cases.push_back(c);
  }
  run_cases(cases);
}

TEST_CASE("ops: concat of other dtypes (no gradient) and of empty parts") {
  Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, DType::i64), b = Tensor::from_vector({5, 6}, {2, 1}, DType::i64);
  Tensor y = ops::concat(a, b, 1);
  CHECK(y.shape() == Shape{2, 3});
  CHECK(y.dtype() == DType::i64);
  CHECK(y.to_double_vector() == std::vector<double>{1, 2, 5, 3, 4, 6});
  Tensor e = Tensor::zeros({2, 0});
  Tensor f = Tensor::from_vector({7, 8}, {2, 1});
  CHECK(ops::concat(e, f, 1).to_double_vector() == std::vector<double>{7, 8});
}

TEST_CASE("ops: flatten and reshape through the harness") {
  std::vector<OpCase> cases;
  struct F {
    int start;
    Shape out;
  };
  for (const F& f : {F{1, {2, 60}}, F{2, {2, 3, 20}}, F{0, {120}}, F{-1, {2, 3, 4, 5}}, F{3, {2, 3, 4, 5}}}) {
    OpCase c;
    c.name = "flatten_" + std::to_string(f.start);
    c.inputs = {test::input("x", {2, 3, 4, 5})};
    c.forward = [f](const Ins& in) { return Outs{ops::flatten(in[0], f.start)}; };
    c.reference = [f](const InVals& v) { return Refs{{f.out, v[0]}}; };
    cases.push_back(c);
  }
  {
    OpCase c;
    c.name = "reshape_6x20";
    c.inputs = {test::input("x", {2, 3, 4, 5})};
    c.forward = [](const Ins& in) { return Outs{ops::reshape(in[0], {6, 20})}; };
    c.reference = [](const InVals& v) { return Refs{{Shape{6, 20}, v[0]}}; };
    cases.push_back(c);
  }
  {
    OpCase c;  // a view in the middle of a graph: relu(reshape(x)) then linear
    c.name = "reshape_relu_linear";
    c.inputs = {test::input("x", {2, 2, 3}, Gen::away_from_zero, 0.1, 1), test::input("w", {4, 6})};
    c.forward = [](const Ins& in) { return Outs{ops::linear(ops::relu(ops::reshape(in[0], {2, 6})), in[1], Tensor())}; };
    c.reference = [](const InVals& v) { return Refs{ref_linear(relu_v(v[0]), {2, 6}, v[1], {4, 6}, nullptr)}; };
    cases.push_back(c);
  }
  run_cases(cases);
}

TEST_CASE("ops: reshape and flatten are views of the same storage") {
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  Tensor y = ops::flatten(x);
  CHECK(y.shape() == Shape{1, 6});
  CHECK(y.raw_data() == x.raw_data());
  Tensor z = ops::reshape(x, {3, 2});
  CHECK(z.raw_data() == x.raw_data());
  x.data<float>()[5] = 42;
  CHECK(z.to_double_vector()[5] == 42);
}

// ================================================================== loss

TEST_CASE("ops: cross_entropy through the harness") {
  struct CE {
    int64_t N, C;
    double smoothing, range;
  };
  std::vector<OpCase> cases;
  for (const CE& e : {CE{4, 5, 0.0, 3}, CE{4, 5, 0.1, 3}, CE{1, 3, 0.0, 2}, CE{6, 10, 0.2, 4}, CE{3, 7, 0.0, 100},
                      CE{3, 7, 0.1, 100}, CE{5, 1000, 0.1, 5}}) {
    OpCase c;
    c.name = "cross_entropy_" + std::to_string(e.N) + "x" + std::to_string(e.C) + "_smoothing" +
             std::to_string(int(e.smoothing * 100)) + "%_range" + std::to_string(int(e.range));
    c.inputs = {test::input("logits", {e.N, e.C}, Gen::uniform, -e.range, e.range), test::labels("labels", e.N, e.C)};
    c.forward = [e](const Ins& in) { return Outs{ops::cross_entropy(in[0], in[1], e.smoothing)}; };
    c.reference = [e](const InVals& v) { return Refs{ref_cross_entropy(v[0], e.N, e.C, v[1], e.smoothing)}; };
    if (e.C > 100) c.max_fd_elements = 60;
    c.out_param_dtype = true;  // f16 logits give an f32 loss
    cases.push_back(c);
  }
  run_cases(cases);
}

// ================================================================== a composite net

TEST_CASE("ops: a small residual network end to end through the harness") {
  // x -> conv3x3(+b) -> bn(train) -> relu -> maxpool 3/2/1 -> conv3x3 -> add(skip) -> relu
  //   -> adaptive avg 1x1 -> flatten -> linear(+b) -> cross_entropy(smoothing 0.1)
  OpCase c;
  c.name = "tiny_resnet";
  c.out_param_dtype = true;
  // In f16, values of a max-pool window that differ in f32 can round to a
  // tie (first one wins), routing some gradient elsewhere: looser f16 bounds.
  c.tol.f16_rtol = 5e-2;
  c.tol.f16_atol = 5e-2;
  const Shape xs{2, 3, 8, 8}, w1s{4, 3, 3, 3}, w2s{4, 4, 3, 3}, fcs{3, 4};
  c.inputs = {test::input("x", xs),
              test::input("w1", w1s, Gen::uniform, -0.5, 0.5),
              test::input("b1", {4}),
              test::as_param(test::input("gamma", {4}, Gen::uniform, 0.5, 1.5)),
              test::as_param(test::input("beta", {4})),
              test::as_param(test::constant("running_mean", {4})),
              test::as_param(test::constant("running_var", {4}, Gen::uniform, 0.5, 1.5)),
              test::input("w2", w2s, Gen::uniform, -0.5, 0.5),
              test::input("fc_w", fcs),
              test::input("fc_b", {3}),
              test::labels("labels", 2, 3)};
  c.forward = [](const Ins& in) {
    Tensor rm = in[5].clone(), rv = in[6].clone();
    Tensor h = ops::conv2d(in[0], in[1], in[2], ops::Conv2dOptions::square(1, 1));
    h = ops::relu(ops::batch_norm2d(h, in[3], in[4], rm, rv, true, 0.1, 1e-5));
    Tensor p = ops::max_pool2d(h, 3, 2, 1);
    Tensor r = ops::relu(ops::add(ops::conv2d(p, in[7], Tensor(), ops::Conv2dOptions::square(1, 1)), p));
    Tensor f = ops::flatten(ops::adaptive_avg_pool2d(r, 1, 1));
    return Outs{ops::cross_entropy(ops::linear(f, in[8], in[9]), in[10], 0.1)};
  };
  c.reference = [xs, w1s, w2s, fcs](const InVals& v) {
    RefOut h = ref_conv2d(v[0], xs, v[1], w1s, &v[2], 1, 1, 1, 1);
    Refs bn = ref_batch_norm_train(h.values, h.shape, v[3], v[4], v[5], v[6], 0.1, 1e-5);
    RefOut p = ref_max_pool2d(relu_v(bn[0].values), bn[0].shape, 3, 2, 1);
    RefOut q = ref_conv2d(p.values, p.shape, v[7], w2s, nullptr, 1, 1, 1, 1);
    RefOut a = ref_adaptive_avg_pool2d(relu_v(add_v(q.values, p.values)), p.shape, 1, 1);
    RefOut z = ref_linear(a.values, {2, 4}, v[8], fcs, &v[9]);
    return Refs{ref_cross_entropy(z.values, 2, 3, v[10], 0.1)};
  };
  run_cases({c});
}

// ================================================================== the harness can fail

namespace {

// y = x computed without recording, then recorded with a custom backward.
OpCase identity_with_backward(const std::string& name, std::function<std::vector<Tensor>(const Tensor&)> backward) {
  OpCase c;
  c.name = name;
  c.inputs = {test::input("x", {3, 4})};
  c.forward = [name, backward](const Ins& in) {
    Tensor y;
    {
      NoGradGuard g;
      y = ops::scale(in[0], 1.0);
    }
    if (!should_record({&in[0]})) return Outs{y};
    return Outs{record("custom_identity", y, {&in[0]},
                       [backward](const Tensor& gy, GradMask) { return backward(gy); })};
  };
  c.reference = [](const InVals& v) { return Refs{{Shape{3, 4}, v[0]}}; };
  return c;
}

bool any_contains(const test::Report& r, const std::string& a, const std::string& b = "") {
  for (const auto& f : r.failures)
    if (f.find(a) != std::string::npos && f.find(b) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("harness: a correct custom op passes") {
  const test::Report r = test::check_op(
      identity_with_backward("good_identity", [](const Tensor& gy) { return Outs{gy}; }), test::backends()[0]);
  CHECK_MESSAGE(r.ok(), r.summary());
}

TEST_CASE("harness: catches a backward that doubles the gradient") {
  const test::Report r = test::check_op(
      identity_with_backward("bad_double", [](const Tensor& gy) { return Outs{ops::scale(gy, 2.0)}; }),
      test::backends()[0]);
  REQUIRE_FALSE(r.ok());
  // The report reads, e.g.: "[cpu f64] bad_double: gradient of input 0 'x' element 0 [0, 0]: expected
  // 0.8448 (finite difference), got 1.6897 (autograd), |diff| 0.8448 > tol 1.7e-06"
  CHECK(any_contains(r, "bad_double", "gradient of input 0 'x' element 0 [0, 0]: expected"));
  CHECK(any_contains(r, "(finite difference), got", "(autograd)"));
  CHECK(any_contains(r, "[cpu f64]"));
}

TEST_CASE("harness: catches a gradient off by one part in 10^4") {
  const test::Report r = test::check_op(
      identity_with_backward("bad_slightly", [](const Tensor& gy) { return Outs{ops::scale(gy, 1.0001)}; }),
      test::backends()[0]);
  CHECK_FALSE(r.ok());
  CHECK(any_contains(r, "(finite difference)"));
}

TEST_CASE("harness: catches a wrong f16 gradient or forward when f32 is right") {
  REQUIRE(test::backends()[0].has_f16);
  const test::Report r = test::check_op(identity_with_backward("bad_f16", [](const Tensor& gy) {
                                          return Outs{ops::scale(gy, gy.dtype() == DType::f16 ? 1.05 : 1.0)};
                                        }),
                                        test::backends()[0]);
  CHECK_FALSE(r.ok());
  CHECK(any_contains(r, "[cpu f16 vs f32] bad_f16: gradient of input 0", "(f32 autograd), got"));
  CHECK_FALSE(any_contains(r, "f32 vs f64"));
  OpCase c = identity_with_backward("bad_f16_forward", [](const Tensor& gy) { return Outs{gy}; });
  c.forward = [](const Ins& in) { return Outs{ops::scale(in[0], in[0].dtype() == DType::f16 ? 1.05 : 1.0)}; };
  const test::Report r2 = test::check_op(c, test::backends()[0]);
  CHECK_FALSE(r2.ok());
  CHECK(any_contains(r2, "[cpu f16 vs f32] bad_f16_forward: output 0", "(f32), got"));
  CHECK_FALSE(any_contains(r2, "[cpu f32]"));
}

TEST_CASE("harness: catches a wrong bf16 gradient or forward when f32 and f16 are right") {
  REQUIRE(test::backends()[0].has_bf16);
  // 20% off: beyond bf16's tolerance (8e-2) on every element.
  const test::Report r = test::check_op(identity_with_backward("bad_bf16", [](const Tensor& gy) {
                                          return Outs{ops::scale(gy, gy.dtype() == DType::bf16 ? 1.2 : 1.0)};
                                        }),
                                        test::backends()[0]);
  CHECK_FALSE(r.ok());
  CHECK(any_contains(r, "[cpu bf16 vs f32] bad_bf16: gradient of input 0", "(f32 autograd), got"));
  CHECK_FALSE(any_contains(r, "[cpu f16 vs f32]"));
  OpCase c = identity_with_backward("bad_bf16_forward", [](const Tensor& gy) { return Outs{gy}; });
  c.forward = [](const Ins& in) { return Outs{ops::scale(in[0], in[0].dtype() == DType::bf16 ? 1.2 : 1.0)}; };
  const test::Report r2 = test::check_op(c, test::backends()[0]);
  CHECK_FALSE(r2.ok());
  CHECK(any_contains(r2, "[cpu bf16 vs f32] bad_bf16_forward: output 0", "(f32), got"));
  CHECK_FALSE(any_contains(r2, "[cpu f32]"));
  CHECK_FALSE(any_contains(r2, "[cpu f16 vs f32]"));
}

TEST_CASE("harness: catches a wrong f32 gradient when f64 is right") {
  const test::Report r = test::check_op(identity_with_backward("bad_f32", [](const Tensor& gy) {
                                          return Outs{ops::scale(gy, gy.dtype() == DType::f32 ? 1.01 : 1.0)};
                                        }),
                                        test::backends()[0]);
  CHECK_FALSE(r.ok());
  CHECK(any_contains(r, "f32 vs f64", "(f64 autograd), got"));
  CHECK_FALSE(any_contains(r, "(finite difference)"));
}

TEST_CASE("harness: catches a missing gradient") {
  const test::Report r = test::check_op(
      identity_with_backward("bad_missing", [](const Tensor&) { return Outs{Tensor()}; }), test::backends()[0]);
  CHECK_FALSE(r.ok());
  CHECK(any_contains(r, "no gradient reached input 0 'x'"));
}

TEST_CASE("harness: catches a gradient of the wrong shape") {
  const test::Report r = test::check_op(
      identity_with_backward("bad_shape", [](const Tensor& gy) { return Outs{gy.view({4, 3})}; }), test::backends()[0]);
  CHECK_FALSE(r.ok());
}

TEST_CASE("harness: catches a wrong forward, a wrong output shape and an input-mutating forward") {
  {
    OpCase c = identity_with_backward("bad_forward", [](const Tensor& gy) { return Outs{gy}; });
    c.reference = [](const InVals& v) {
      Values y(v[0]);
      y[5] *= 1.001;
      return Refs{{Shape{3, 4}, y}};
    };
    const test::Report r = test::check_op(c, test::backends()[0]);
    CHECK_FALSE(r.ok());
    CHECK(any_contains(r, "[cpu f64]", "output 0 element 5 [1, 1]"));
    CHECK(any_contains(r, "[cpu f32]", "output 0 element 5 [1, 1]"));
  }
  {
    OpCase c = identity_with_backward("bad_shape_ref", [](const Tensor& gy) { return Outs{gy}; });
    c.reference = [](const InVals& v) { return Refs{{Shape{4, 3}, v[0]}}; };
    const test::Report r = test::check_op(c, test::backends()[0]);
    CHECK(any_contains(r, "has shape [3, 4], expected [4, 3]"));
  }
  {
    OpCase c;
    c.name = "bad_mutates";
    c.inputs = {test::input("x", {2, 2})};
    c.forward = [](const Ins& in) {
      Tensor y = ops::relu(in[0]);
      Tensor alias = in[0].detach();
      ops::fill_(alias, 0.5);
      return Outs{y};
    };
    c.reference = [](const InVals& v) { return Refs{{Shape{2, 2}, relu_v(v[0])}}; };
    const test::Report r = test::check_op(c, test::backends()[0]);
    CHECK(any_contains(r, "forward modified input 0 'x'"));
  }
}

// ================================================================== error messages

namespace {
// A host-memory stand-in for a CUDA device, so that device mismatches and a
// second backend can be exercised in a CPU-only build.
struct FakeDeviceMemory final : MemoryBackend {
  void* allocate(size_t n, int) override { return std::aligned_alloc(64, (n + 63) / 64 * 64 + 64); }
  void deallocate(void* p, size_t, int) override { std::free(p); }
  void copy_to_host(void* d, const void* s, size_t n, int) override { std::memcpy(d, s, n); }
  void copy_from_host(void* d, const void* s, size_t n, int) override { std::memcpy(d, s, n); }
  void copy_on_device(void* d, const void* s, size_t n, int) override { std::memcpy(d, s, n); }
  void set_zero(void* d, size_t n, int) override { std::memset(d, 0, n); }
  void synchronize(int) override {}
};

// The fake needs DeviceType::CUDA free: in a CUDA or emulator build with a
// device, the real backend takes it (and the op harness checks that backend).
bool no_cuda_device() {
#if defined(EMBER_CUDA) || defined(EMBER_CUDASIM)
  return !testing::cuda_device_present();
#else
  return true;
#endif
}
constexpr testing::needs kNeedsFreeCudaSlot{"a CUDA device (GPU or emulator) is present: the op harness checks its "
                                            "real backend instead of the fake one",
                                            no_cuda_device};

// Registers the fake memory (and optionally a kernel table) for DeviceType::CUDA
// when this build has no CUDA backend; undoes it when destroyed. Tensors on
// the fake device must die first.
class FakeCuda {
 public:
  explicit FakeCuda(const Kernels* table = nullptr) : active_(!has_memory_backend(DeviceType::CUDA)) {
    if (!active_) return;
    static FakeDeviceMemory memory;
    register_memory_backend(DeviceType::CUDA, &memory);
    if (table) register_kernels(DeviceType::CUDA, table);
  }
  ~FakeCuda() {
    if (!active_) return;
    register_kernels(DeviceType::CUDA, nullptr);
    register_memory_backend(DeviceType::CUDA, nullptr);
  }
  FakeCuda(const FakeCuda&) = delete;
  FakeCuda& operator=(const FakeCuda&) = delete;
  bool active() const { return active_; }

 private:
  bool active_;
};
}  // namespace

TEST_CASE("harness: a second backend is checked against the reference and against the CPU" * kNeedsFreeCudaSlot) {
  // The CPU kernels posing as a CUDA device: how a CUDA or cuda/sim backend plugs in.
  static Kernels table = cpu_kernels();
  table.name = "fake-cuda";
  FakeCuda fake(&table);
  REQUIRE_MESSAGE(fake.active(), "a real CUDA backend is registered; it is in test::backends() instead");
  std::vector<OpCase> cases{conv_case({2, 3, 7, 9, 5, 3, 3, 2, 1, true})};
  {
    OpCase c;
    c.name = "relu_add";
    c.inputs = {test::input("a", {3, 5}, Gen::away_from_zero, 0.1, 1), test::input("b", {3, 5})};
    c.forward = [](const Ins& in) { return Outs{ops::add(ops::relu(in[0]), in[1])}; };
    c.reference = [](const InVals& v) { return Refs{{Shape{3, 5}, add_v(relu_v(v[0]), v[1])}}; };
    cases.push_back(c);
  }
  const test::Backend with_f64{"fake-cuda", Device::cuda(0), true, nullptr};
  const test::Backend f32_only{"fake-cuda-f32", Device::cuda(0), false, nullptr};
  for (const auto& c : cases) {
    CAPTURE(c.name);
    for (const auto& b : {with_f64, f32_only}) {
      const test::Report r = test::check_op(c, b);
      CHECK_MESSAGE(r.ok(), r.summary());
      CHECK(r.values_checked > 0);
    }
  }
  // A broken kernel in that backend's table (add computes a + a) is caught
  // against the reference and against the CPU, and blamed on the backend.
  test::Backend broken{"fake-cuda-broken", Device::cuda(0), true, [] {
                         table.add = [](DType dt, const void* a, const void*, void* y, int64_t n, Stream s) {
                           cpu_kernels().add(dt, a, a, y, n, s);
                         };
                       }};
  const test::Report r = test::check_op(cases[1], broken);
  table.add = cpu_kernels().add;
  CHECK_FALSE(r.ok());
  CHECK(any_contains(r, "[fake-cuda-broken f64] relu_add: output 0", "(reference)"));
  CHECK(any_contains(r, "[fake-cuda-broken f32 vs cpu] relu_add: output 0", "(cpu), got"));
}

TEST_CASE("ops: errors name the op and the problem") {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2});
  expect_error([&] { ops::add(a, b); }, "add: shapes differ: [2, 3] and [3, 2]");
  expect_error([&] { ops::add(a, Tensor::zeros({2, 3}, DType::f64)); }, "add: b is f64 but the input is f32");
  expect_error([&] { ops::add(Tensor(), a); }, "add: a is undefined");
  expect_error([&] { ops::relu(Tensor::zeros({2}, DType::i64)); }, "relu: input must be f32, f64, f16 or bf16, got");
  expect_error([&] { ops::sum(Tensor::zeros({2}, DType::u8)); }, "sum: input must be f32, f64, f16 or bf16, got");
  expect_error([&] { ops::cast(Tensor::zeros({2}, DType::i32), DType::f32); }, "cast: only between floating types");
  expect_error([&] { ops::reshape(a, {4, 2}); }, "reshape: cannot reshape [2, 3] to [4, 2]");
  expect_error([&] { ops::flatten(a, 5); }, "flatten: start_dim 5 out of range");

  // linear
  expect_error([&] { ops::linear(Tensor::zeros({5, 7}), Tensor::zeros({3, 6}), Tensor()); },
               "linear: weight [3, 6] expects 6 input features, input [5, 7] has 7");
  expect_error([&] { ops::linear(Tensor::zeros({5, 7}), Tensor::zeros({3, 7}), Tensor::zeros({4})); },
               "linear: bias must have shape [3]");
  expect_error([&] { ops::linear(Tensor::zeros({5, 7, 1}), Tensor::zeros({3, 7}), Tensor()); },
               "linear: input must have 2 dimensions");

  // conv2d
  Tensor x = Tensor::zeros({1, 2, 5, 5});
  expect_error([&] { ops::conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor(), {}); },
               "conv2d: weight [4, 3, 3, 3] expects 3 input channels, input [1, 2, 5, 5] has 2");
  expect_error([&] { ops::conv2d(x, Tensor::zeros({4, 2, 3, 3}), Tensor::zeros({3}), {}); },
               "conv2d: bias must have shape [4]");
  expect_error([&] { ops::conv2d(x, Tensor::zeros({4, 2, 7, 7}), Tensor(), {}); },
               "conv2d: kernel 7x7 is larger than the padded input 5x5");
  expect_error([&] { ops::conv2d(x, Tensor::zeros({4, 2, 3, 3}), Tensor(), {0, 0, 0, 0}); },
               "conv2d: stride must be positive");
  expect_error([&] { ops::conv2d(x, Tensor::zeros({4, 2, 3, 3}, DType::f64), Tensor(), {}); },
               "conv2d: weight is f64 but the input is f32");
  expect_error([&] { ops::conv2d(Tensor::zeros({2, 5, 5}), Tensor::zeros({4, 2, 3, 3}), Tensor(), {}); },
               "conv2d: input must have 4 dimensions");

  // batch norm
  Tensor bx = Tensor::zeros({2, 3, 2, 2}), g3 = Tensor::full({3}, 1.0), z3 = Tensor::zeros({3});
  Tensor rm = Tensor::zeros({3}), rv = Tensor::full({3}, 1.0);
  expect_error([&] { ops::batch_norm2d(bx, Tensor::full({4}, 1.0), z3, rm, rv, true, 0.1, 1e-5); },
               "batch_norm2d: weight must have shape [3], got [4]");
  expect_error([&] { ops::batch_norm2d(bx, g3, Tensor::zeros({3}, DType::f64), rm, rv, true, 0.1, 1e-5); },
               "batch_norm2d: bias must be f32 for f32 input");
  Tensor rv_bad = Tensor::full({2}, 1.0);
  expect_error([&] { ops::batch_norm2d(bx, g3, z3, rm, rv_bad, false, 0.1, 1e-5); },
               "batch_norm2d: running_var must have shape [3]");
  Tensor one = Tensor::zeros({1, 3, 1, 1});
  expect_error([&] { ops::batch_norm2d(one, g3, z3, rm, rv, true, 0.1, 1e-5); },
               "batch_norm2d: training needs more than one value per channel");
  expect_error([&] { ops::batch_norm2d(Tensor::zeros({2, 3, 4}), g3, z3, rm, rv, true, 0.1, 1e-5); },
               "batch_norm2d: input must have 4 dimensions");

  // pooling
  expect_error([&] { ops::max_pool2d(x, 3, 2, 2); }, "max_pool2d: padding must be at most half the kernel");
  expect_error([&] { ops::max_pool2d(x, 7, 1, 0); }, "max_pool2d: window 7x7 is larger than the padded input");
  expect_error([&] { ops::adaptive_avg_pool2d(x, 0, 1); }, "adaptive_avg_pool2d: output size must be positive");
  expect_error([&] { ops::global_max_pool2d(Tensor::zeros({2, 3})); }, "global_max_pool2d: input must have 4 dimensions");

  // concat
  expect_error([&] { ops::concat(a, b, 1); }, "concat: a [2, 3] and b [3, 2] differ in dimension 0 (only dim 1 may)");
  expect_error([&] { ops::concat(a, Tensor::zeros({2}), 0); }, "concat: a [2, 3] and b [2] have different numbers");
  expect_error([&] { ops::concat(a, a, 2); }, "concat: dim 2 out of range for [2, 3]");
  expect_error([&] { ops::concat(a, Tensor::zeros({2, 3}, DType::f64), 1); }, "concat: b is f64 but the input is f32");
  expect_error([&] { ops::concat(Tensor(), a, 1); }, "concat: a is undefined");

  // cross entropy
  Tensor logits = Tensor::zeros({3, 5});
  expect_error([&] { ops::cross_entropy(logits, Tensor::from_vector({0, 1, 2}, {3}, DType::i32)); },
               "cross_entropy: labels must be i64");
  expect_error([&] { ops::cross_entropy(logits, Tensor::from_vector({0, 1}, {2}, DType::i64)); },
               "cross_entropy: labels must have shape [3], got [2]");
  expect_error([&] { ops::cross_entropy(logits, Tensor::from_vector({0, 1, 2}, {3}, DType::i64), 1.0); },
               "cross_entropy: label_smoothing must be in [0, 1)");

  // count_equal_ (fit's device-side accuracy total)
  Tensor total = Tensor::zeros({1}, DType::f64);
  const Tensor idx = Tensor::from_vector({0, 1, 2}, {3}, DType::i64);
  ops::count_equal_(total, idx, Tensor::from_vector({0, 4, 2}, {3}, DType::i64));
  CHECK(total.item() == 2.0);
  expect_error([&] { ops::count_equal_(total, idx, Tensor()); }, "count_equal_: second input is undefined");
  expect_error([&] { ops::count_equal_(total, idx, Tensor::from_vector({0, 1, 2}, {3}, DType::i32)); },
               "count_equal_: inputs must be i64, got Tensor[i64 cpu [3]] and Tensor[i32 cpu [3]]");
  expect_error([&] { ops::count_equal_(total, idx, Tensor::from_vector({0, 1}, {2}, DType::i64)); },
               "count_equal_: second input must have shape [3], got [2]");
  Tensor f32_total = Tensor::zeros({1});
  expect_error([&] { ops::count_equal_(f32_total, idx, idx); },
               "count_equal_: the total must be f64 [1], got Tensor[f32 cpu [1]]");
  CHECK(total.item() == 2.0);  // nothing was added by the failed calls
}

TEST_CASE("ops: labels out of range are an error naming the row") {
  Tensor logits = Tensor::zeros({3, 5});
  for (double bad : {5.0, -1.0, 1e6}) {
    CAPTURE(bad);
    Tensor labels = Tensor::from_vector({0, bad, 2}, {3}, DType::i64);
    expect_error([&] { ops::cross_entropy(logits, labels); }, "label " + std::to_string(int64_t(bad)));
    expect_error([&] { ops::cross_entropy(logits, labels); }, "row 1");
  }
}

TEST_CASE("ops: inputs on different devices are an error") {
  FakeCuda fake;  // only when this build has no CUDA backend
  {
    Tensor other;
    try {
      other = Tensor::zeros({2, 3}, DType::f32, Device::cuda(0));
    } catch (const Error& e) {
      FAIL("no CUDA device memory, neither real nor fake: " << e.what());
    }
    Tensor a = Tensor::zeros({2, 3});
    expect_error([&] { ops::add(a, other); }, "add: b is on cuda:0 but the input is on cpu");
    expect_error([&] { ops::linear(a, other, Tensor()); }, "linear: weight is on cuda:0 but the input is on cpu");
    Tensor x = Tensor::zeros({1, 3, 4, 4});
    Tensor w = Tensor::zeros({2, 3, 3, 3}, DType::f32, Device::cuda(0));
    expect_error([&] { ops::conv2d(x, w, Tensor(), {}); }, "conv2d: weight is on cuda:0 but the input is on cpu");
    Tensor g = Tensor::full({3}, 1.0, DType::f32, Device::cuda(0)), z = Tensor::zeros({3});
    Tensor rm = Tensor::zeros({3}), rv = Tensor::full({3}, 1.0);
    expect_error([&] { ops::batch_norm2d(x, g, z, rm, rv, true, 0.1, 1e-5); },
                 "batch_norm2d: weight is on cuda:0, input on cpu");
    Tensor labels = Tensor::zeros({1}, DType::i64, Device::cuda(0));
    expect_error([&] { ops::cross_entropy(Tensor::zeros({1, 4}), labels); }, "cross_entropy: labels on cuda:0");
    Tensor total = Tensor::zeros({1}, DType::f64);
    expect_error([&] { ops::count_equal_(total, Tensor::zeros({1}, DType::i64), labels); },
                 "count_equal_: inputs on cpu and cuda:0, total on cpu: all must be on one device");
  }  // the fake-device tensors die before the backend is unregistered
}
