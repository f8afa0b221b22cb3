// ops/multi_tensor.cpp — the multi-tensor plan and its ops (ops/multi_tensor.h).
#include "ops/multi_tensor.h"

#include <algorithm>
#include <cstring>

#include "ops/op_helpers.h"

namespace ember::ops {
using namespace detail;

namespace {

bool is_step_dtype(int32_t dt) {
  return dt == int32_t(DType::f32) || dt == int32_t(DType::f16) || dt == int32_t(DType::bf16);
}

void check_slice(const MultiTensorSlice& s, size_t index) {
  EMBER_CHECK(s.n > 0 && s.grad && s.grad32 && s.weight, "multi-tensor plan: slice ", index,
              " needs n > 0, a gradient, its f32 copy and the weights");
  EMBER_CHECK(is_step_dtype(s.grad_dtype), "multi-tensor plan: slice ", index, " has gradients of dtype ",
              dtype_name(DType(s.grad_dtype)), " (f32, f16 or bf16)");
  EMBER_CHECK(!s.half || s.half_dtype == int32_t(DType::f16) || s.half_dtype == int32_t(DType::bf16),
              "multi-tensor plan: slice ", index, " rounds into ", dtype_name(DType(s.half_dtype)),
              " (f16 or bf16)");
  EMBER_CHECK(s.grad_dtype == int32_t(DType::f32) || s.grad != s.grad32, "multi-tensor plan: slice ", index,
              " unscales 16-bit gradients into themselves");
}

bool same_slices(const std::vector<MultiTensorSlice>& a, const std::vector<MultiTensorSlice>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
}

}  // namespace

void MultiTensorPlan::set(const std::vector<MultiTensorSlice>& slices) {
  if (table_.defined() && same_slices(slices, slices_)) return;
  std::vector<MultiTensorChunk> chunks;
  for (size_t i = 0; i < slices.size(); ++i) {
    check_slice(slices[i], i);
    for (int64_t b = 0; b < slices[i].n; b += kMultiTensorChunk)
      chunks.push_back({int64_t(i), b, std::min(slices[i].n, b + kMultiTensorChunk)});
  }
  EMBER_CHECK(chunks.size() < (size_t(1) << 31), "multi-tensor plan: ", chunks.size(), " chunks is too many");
  const size_t slice_bytes = slices.size() * sizeof(MultiTensorSlice);
  Tensor host = Tensor::empty({int64_t(slice_bytes + chunks.size() * sizeof(MultiTensorChunk))}, DType::u8);
  if (!slices.empty()) std::memcpy(host.raw_data(), slices.data(), slice_bytes);
  if (!chunks.empty())
    std::memcpy(static_cast<char*>(host.raw_data()) + slice_bytes, chunks.data(), chunks.size() * sizeof(chunks[0]));
  table_ = host.to(device_);
  slices_ = slices;
  num_chunks_ = int64_t(chunks.size());
  ++uploads_;
}

const MultiTensorSlice* MultiTensorPlan::device_slices() const {
  return table_.defined() ? static_cast<const MultiTensorSlice*>(table_.raw_data()) : nullptr;
}

const MultiTensorChunk* MultiTensorPlan::device_chunks() const {
  if (!table_.defined()) return nullptr;
  return reinterpret_cast<const MultiTensorChunk*>(static_cast<const char*>(table_.raw_data()) +
                                                   slices_.size() * sizeof(MultiTensorSlice));
}

Tensor loss_scale_state(double scale, Device device) {
  std::vector<double> v(kLossScaleStateSize, 0.0);
  v[kLossScale] = scale;
  return Tensor::from_vector(v, {kLossScaleStateSize}, DType::f32, device);
}

namespace {
void require_state(const Tensor& state, Device device, const char* op) {
  EMBER_CHECK(state.defined() && state.dtype() == DType::f32 && state.numel() == kLossScaleStateSize &&
                  state.device() == device,
              op, ": the loss-scale state must be f32 [", int(kLossScaleStateSize), "] on ", device.str(), ", got ",
              state.defined() ? state.str() : std::string("an undefined tensor"));
}
}  // namespace

void unscale_gradients(const MultiTensorPlan& plan, Tensor& state) {
  require_state(state, plan.device(), "unscale_gradients");
  if (plan.num_chunks() == 0) return;
  auto [k, s] = launch_on(state);
  k.unscale_gradients(plan.device_slices(), plan.device_chunks(), plan.num_chunks(), state.data<float>(), s);
}

void multi_tensor_sgd(const MultiTensorPlan& plan, double lr, double momentum, bool nesterov, const Tensor* state,
                      const Tensor* hyper) {
  if (state) require_state(*state, plan.device(), "multi_tensor_sgd");
  if (hyper)
    EMBER_CHECK(hyper->dtype() == DType::f32 && hyper->numel() == 2 && hyper->device() == plan.device(),
                "multi_tensor_sgd: the hyperparameters must be f32 [2] (lr, momentum) on ", plan.device().str(), ", got ",
                hyper->str());
  if (plan.num_chunks() == 0) return;
  const Launch l{kernels_for(plan.device()), stream_for(plan.device())};
  l.k.multi_tensor_sgd(plan.device_slices(), plan.device_chunks(), plan.num_chunks(), lr, momentum, nesterov,
                       state ? state->data<float>() : nullptr, hyper ? hyper->data<float>() : nullptr, l.stream);
}

void loss_scale_update(Tensor& state, const LossScaleParams& p) {
  require_state(state, state.device(), "loss_scale_update");
  auto [k, s] = launch_on(state);
  k.loss_scale_update(state.data<float>(), p, s);
}

}  // namespace ember::ops
