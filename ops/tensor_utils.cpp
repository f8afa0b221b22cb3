// ops/tensor_utils.cpp — non-differentiable tensor utilities: fills, random
// initialisation, in-place accumulation, input normalisation, argmax, SGD.
#include <mutex>

#include "ops/op_helpers.h"
#include "ops/ops.h"

namespace ember::ops {
using namespace detail;

void fill_(Tensor& t, double value) {
  require_defined(t, "fill_", "tensor");
  auto [k, s] = launch_on(t);
  k.fill(t.dtype(), t.raw_data(), t.numel(), value, s);
}

void uniform_(Tensor& t, double lo, double hi, Generator& gen) {
  require_float(t, "uniform_", "tensor");
  const uint64_t offset = gen.reserve_blocks(uint64_t(t.numel() + 3) / 4);
  auto [k, s] = launch_on(t);
  k.random_uniform(t.dtype(), t.raw_data(), t.numel(), gen.seed(), offset, lo, hi, s);
}

void normal_(Tensor& t, double mean, double std, Generator& gen) {
  require_float(t, "normal_", "tensor");
  const uint64_t offset = gen.reserve_blocks(uint64_t(t.numel() + 1) / 2);
  auto [k, s] = launch_on(t);
  k.random_normal(t.dtype(), t.raw_data(), t.numel(), gen.seed(), offset, mean, std, s);
}

void add_(Tensor& acc, const Tensor& g, double alpha) {
  require_float(acc, "add_", "accumulator");
  require_like(g, acc, "add_", "addend");
  require_shape(g, acc.shape(), "add_", "addend");
  require_same_format(g, acc, "add_", "addend");
  auto [k, s] = launch_on(acc);
  k.axpby(acc.dtype(), alpha, g.raw_data(), 1.0, acc.raw_data(), acc.numel(), s);
}

Tensor normalize_u8(const Tensor& x, const ChannelNorm& norm, DType out) {
  require_defined(x, "normalize_u8", "input");
  EMBER_CHECK(x.dtype() == DType::u8, "normalize_u8: input must be u8, got ", x.str());
  require_ndim(x, 4, "normalize_u8", "input");
  EMBER_CHECK(!x.is_channels_last(), "normalize_u8: the image batch must be NCHW (contiguous), got ", x.str(),
              "; a channels-last model converts the normalised batch in its first convolution");
  EMBER_CHECK(x.size(1) == norm.channels, "normalize_u8: input has ", x.size(1), " channels, normalisation has ",
              norm.channels);
  EMBER_CHECK(is_floating(out), "normalize_u8: output must be f32, f64, f16 or bf16, got ", dtype_name(out));
  Tensor y = Tensor::empty(x.shape(), out, x.device());
  auto [k, s] = launch_on(x);
  k.normalize_u8(out, x.data<uint8_t>(), y.raw_data(), x.size(0), x.size(2) * x.size(3), norm, s);
  return y;
}

Tensor argmax(const Tensor& x) {
  require_float(x, "argmax", "input");
  require_ndim(x, 2, "argmax", "input");
  Tensor idx = Tensor::empty({x.size(0)}, DType::i64, x.device());
  auto [k, s] = launch_on(x);
  k.argmax_rows(x.dtype(), x.raw_data(), idx.data<int64_t>(), x.size(0), x.size(1), s);
  return idx;
}

void count_equal_(Tensor& acc, const Tensor& a, const Tensor& b) {
  require_defined(a, "count_equal_", "first input");
  require_defined(b, "count_equal_", "second input");
  EMBER_CHECK(a.dtype() == DType::i64 && b.dtype() == DType::i64, "count_equal_: inputs must be i64, got ", a.str(),
              " and ", b.str());
  require_shape(b, a.shape(), "count_equal_", "second input");
  EMBER_CHECK(acc.dtype() == DType::f64 && acc.numel() == 1, "count_equal_: the total must be f64 [1], got ", acc.str());
  EMBER_CHECK(a.device() == b.device() && acc.device() == a.device(), "count_equal_: inputs on ", a.device().str(), " and ",
              b.device().str(), ", total on ", acc.device().str(), ": all must be on one device");
  auto [k, s] = launch_on(a);
  k.count_equal(DType::i64, a.data<int64_t>(), b.data<int64_t>(), a.numel(), acc.data<double>(), s);
}

void sgd_update_(Tensor& w, const Tensor& g, Tensor& buf, const SgdParams& p) {
  require_float(w, "sgd_update_", "weight");
  require_like(g, w, "sgd_update_", "gradient");
  require_shape(g, w.shape(), "sgd_update_", "gradient");
  if (p.momentum != 0.0) {
    require_like(buf, w, "sgd_update_", "momentum buffer");
    require_shape(buf, w.shape(), "sgd_update_", "momentum buffer");
  }
  auto [k, s] = launch_on(w);
  k.sgd_update(w.dtype(), w.raw_data(), g.raw_data(), p.momentum != 0.0 ? buf.raw_data() : nullptr, w.numel(), p,
               s);
}

namespace detail {

void install_grad_accumulator() {
  static std::once_flag once;
  std::call_once(once, [] {
    GradAccumulator acc;
    acc.sum = [](const Tensor& a, const Tensor& b) { return ops::add(a, b); };
    acc.add_into = [](Tensor& a, const Tensor& g) { ops::add_(a, g); };
    acc.to_format = [](const Tensor& t, MemoryFormat f) { return ops::to_memory_format(t, f); };
    set_grad_accumulator(acc);
  });
}

}  // namespace detail
}  // namespace ember::ops
