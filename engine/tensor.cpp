// engine/tensor.cpp — Tensor construction, copies, views and host access.
#include "engine/tensor.h"

#include "engine/autograd.h"
#include "engine/bfloat16.h"
#include "engine/half.h"

namespace ember {
namespace {

// Writes v converted to dtype at element i of a host buffer.
void store_as(void* base, DType t, size_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = float(v); break;
    case DType::f64: static_cast<double*>(base)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_half(float(v)); break;
    case DType::i32: static_cast<int32_t*>(base)[i] = int32_t(v); break;
    case DType::i64: static_cast<int64_t*>(base)[i] = int64_t(v); break;
    case DType::u8: static_cast<uint8_t*>(base)[i] = uint8_t(v); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = double_to_bf16(v); break;
  }
}

double load_as_double(const void* base, DType t, size_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::f16: return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::i32: return static_cast<const int32_t*>(base)[i];
    case DType::i64: return double(static_cast<const int64_t*>(base)[i]);
    case DType::u8: return static_cast<const uint8_t*>(base)[i];
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  }
  return 0;
}

// Reorders the elements of a host buffer between [N, C, H, W] and [N, H, W, C]:
//   to_channels_last: dst[n, hw, c] = src[n, c, hw], else dst[n, c, hw] = src[n, hw, c]
void reorder_host(const void* src, void* dst, const Shape& s, size_t elem, bool to_channels_last) {
  const int64_t N = s[0], C = s[1], HW = s[2] * s[3];
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t nchw = (n * C + c) * HW + i, nhwc = (n * HW + i) * C + c;
        const int64_t from = to_channels_last ? nchw : nhwc, to = to_channels_last ? nhwc : nchw;
        std::memcpy(out + size_t(to) * elem, in + size_t(from) * elem, elem);
      }
}

void check_format(const Shape& shape, MemoryFormat format) {
  EMBER_CHECK(format == MemoryFormat::contiguous || shape.ndim() == 4,
              "channels_last needs a 4-D tensor [N, C, H, W], not shape ", shape.str());
}

}  // namespace

const char* memory_format_name(MemoryFormat f) {
  return f == MemoryFormat::channels_last ? "channels_last" : "contiguous";
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  check_format(shape, format);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(shape.numel()) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->dtype = dtype;
  impl->format = format;
  return Tensor(std::move(impl));
}

Tensor Tensor::empty_like(const Tensor& like) { return empty_like(like, like.dtype()); }
Tensor Tensor::empty_like(const Tensor& like, DType dtype) {
  return empty(like.shape(), dtype, like.device(), like.memory_format());
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor host = empty(shape, dtype, Device::cpu());
  const size_t n = size_t(shape.numel());
  for (size_t i = 0; i < n; ++i) store_as(host.raw_data(), dtype, i, value);
  return host.to(device);
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  EMBER_CHECK(int64_t(values.size()) == shape.numel(), "from_vector: ", values.size(), " values for shape ",
              shape.str());
  Tensor host = empty(shape, dtype, Device::cpu());
  for (size_t i = 0; i < values.size(); ++i) store_as(host.raw_data(), dtype, i, values[i]);
  return host.to(device);
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor[undefined]";
  return cat("Tensor[", dtype_name(dtype()), " ", device().str(), " ", shape().str(),
             is_channels_last() ? " channels_last" : "", "]");
}

Tensor Tensor::contiguous_host() const {
  EMBER_CHECK(device().is_cpu(), "contiguous_host: ", str(), " is not on the host (use ops::to_memory_format)");
  if (!is_channels_last()) return *this;
  Tensor out = empty(shape(), dtype(), Device::cpu());
  reorder_host(raw_data(), out.raw_data(), shape(), dtype_size(dtype()), false);
  return out;
}

std::vector<double> Tensor::to_double_vector() const {
  Tensor host = to(Device::cpu()).contiguous_host();
  std::vector<double> out(static_cast<size_t>(numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_double(host.raw_data(), dtype(), i);
  return out;
}

double Tensor::item() const {
  EMBER_CHECK(numel() == 1, "item() of a tensor with ", numel(), " elements ", str());
  return to_double_vector()[0];
}

Tensor Tensor::to(Device dev) const {
  if (device() == dev) return *this;
  Tensor out = empty(shape(), dtype(), dev, memory_format());
  copy_bytes(out.raw_data(), dev, raw_data(), device(), nbytes());
  return out;
}

Tensor Tensor::to_ahead(Device dev) const {
  EMBER_CHECK(device().is_cpu(), "to_ahead: ", str(), " is not on the host");
  if (dev.is_cpu()) return *this;
  Tensor out = empty(shape(), dtype(), dev, memory_format());
  memory_backend(dev.type).copy_from_host_ahead(out.raw_data(), raw_data(), nbytes(), dev.index);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device(), memory_format());
  copy_bytes(out.raw_data(), device(), raw_data(), device(), nbytes());
  return out;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  impl->dtype = impl_->dtype;
  impl->format = impl_->format;
  return Tensor(std::move(impl));
}

Tensor Tensor::view(const Shape& new_shape) const {
  EMBER_CHECK(new_shape.numel() == numel(), "view: cannot view ", shape().str(), " (", numel(),
              " elements) as ", new_shape.str());
  EMBER_CHECK(!is_channels_last() || size(1) == 1 || size(2) * size(3) == 1, "view: ", str(),
              " is channels_last; its elements are not in the order of ", shape().str(),
              " (convert with ops::to_memory_format first)");
  Tensor out = detach();
  out.impl_->shape = new_shape;
  out.impl_->format = MemoryFormat::contiguous;
  return out;
}

Tensor Tensor::reinterpret_format(MemoryFormat format) const {
  check_format(shape(), format);
  Tensor out = detach();
  out.impl_->format = format;
  return out;
}

Tensor Tensor::view_at(int64_t element_offset, const Shape& new_shape) const {
  EMBER_CHECK(element_offset >= 0 && element_offset + new_shape.numel() <= numel(), "view_at: elements [",
              element_offset, ", ", element_offset + new_shape.numel(), ") are outside ", str());
  Tensor out = detach();
  out.impl_->shape = new_shape;
  out.impl_->format = MemoryFormat::contiguous;
  out.impl_->offset += size_t(element_offset) * dtype_size(dtype());
  return out;
}

void Tensor::set_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) {
  EMBER_CHECK(is_leaf(), "post-accumulate-grad hooks go on leaves, not on ", str());
  impl().post_accumulate_grad_hook = std::move(hook);
}

Tensor Tensor::view_infer(std::vector<int64_t> dims) const {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      EMBER_CHECK(infer < 0, "view: only one dimension may be -1");
      infer = int(i);
    } else {
      known *= dims[i];
    }
  }
  if (infer >= 0) {
    EMBER_CHECK(known > 0 && numel() % known == 0, "view: cannot infer -1 for ", shape().str());
    dims[size_t(infer)] = numel() / known;
  }
  return view(Shape(dims));
}

void Tensor::copy_from(const Tensor& src) {
  EMBER_CHECK(src.shape() == shape() && src.dtype() == dtype(), "copy_from: ", src.str(), " into ", str());
  if (src.memory_format() == memory_format()) {
    copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes());
    return;
  }
  Tensor host = src.to(Device::cpu());
  Tensor reordered = empty(shape(), dtype(), Device::cpu(), memory_format());
  reorder_host(host.raw_data(), reordered.raw_data(), shape(), dtype_size(dtype()), is_channels_last());
  copy_bytes(raw_data(), device(), reordered.raw_data(), Device::cpu(), nbytes());
}

void Tensor::zero_() {
  if (device().is_cpu())
    std::memset(raw_data(), 0, nbytes());
  else
    memory_backend(device().type).set_zero(raw_data(), nbytes(), device().index);
}

bool Tensor::requires_grad() const { return impl().requires_grad || impl().grad_fn != nullptr; }

Tensor& Tensor::set_requires_grad(bool flag) {
  EMBER_CHECK(is_leaf(), "set_requires_grad on a tensor made by an op; use detach() first");
  EMBER_CHECK(!flag || is_floating(dtype()), "only floating-point tensors can require grad, not ",
              dtype_name(dtype()));
  impl().requires_grad = flag;
  return *this;
}

void Tensor::backward() const {
  EMBER_CHECK(numel() == 1, "backward() without a gradient needs a one-element tensor, got ", str());
  run_backward(*this, Tensor::full(shape(), 1.0, dtype(), device()));
}

void Tensor::backward(const Tensor& grad_output) const { run_backward(*this, grad_output); }

}  // namespace ember
