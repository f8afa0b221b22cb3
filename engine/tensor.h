// engine/tensor.h — the dense, row-major Tensor.
//
// A Tensor is a handle (shared_ptr) to a TensorImpl: a Storage, a byte offset
// into it, a Shape and a DType. Copying a Tensor copies the handle, never the
// data. view() shares storage; clone() and to() copy. Autograd state (the
// requires_grad flag, the accumulated .grad of a leaf, the grad_fn node that
// made a non-leaf) lives here too; see engine/autograd.h for the tape.
//
// Memory format: a shape is always logical ([N, C, H, W] for images), and a
// 4-D tensor's elements lie either in that order (contiguous) or as
// [N, H, W, C] (channels_last, PyTorch's torch.channels_last: what tensor
// cores and cuDNN's fastest kernels read). Ops that care (convolution, batch
// norm, pooling) honour the format; elementwise ops keep it; views of a
// channels-last tensor are refused unless they cannot tell the difference
// (C == 1 or H*W == 1). Host access (to_double_vector, copy_from) is in
// logical order whatever the format. docs/channels_last.md tells the story.
#pragma once
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/error.h"
#include "engine/memory.h"
#include "engine/shape.h"

namespace ember {

class Node;
class Tensor;

enum class MemoryFormat : uint8_t { contiguous, channels_last };
const char* memory_format_name(MemoryFormat f);  // "contiguous" / "channels_last"

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t offset = 0;  // bytes
  Shape shape;
  DType dtype = DType::f32;
  MemoryFormat format = MemoryFormat::contiguous;  // channels_last: 4-D only
  bool requires_grad = false;         // set on leaves by the user
  std::shared_ptr<TensorImpl> grad;   // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;      // the node that produced a non-leaf
  // Leaf only: called by backward once every path into this leaf has run
  // and its .grad is final for this backward (data-parallel training starts
  // sending the gradient from here; PyTorch's post-accumulate-grad hook).
  std::function<void(const Tensor& leaf)> post_accumulate_grad_hook;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- construction (uninitialised, zero, constant, from host values)
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu(),
                      MemoryFormat format = MemoryFormat::contiguous);
  // Uninitialised, with like's shape, device and memory format (dtype: like's, or the one given).
  static Tensor empty_like(const Tensor& like);
  static Tensor empty_like(const Tensor& like, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
  // Copies host values (converted to dtype) into a new tensor.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32,
                            Device device = Device::cpu());
  template <typename T>
  static Tensor from_data(const T* values, const Shape& shape, Device device = Device::cpu()) {
    Tensor t = empty(shape, dtype_of<T>::value, Device::cpu());
    std::memcpy(t.raw_data(), values, t.nbytes());
    return device.is_cpu() ? t : t.to(device);
  }

  // ---- metadata
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int ndim() const { return shape().ndim(); }
  int64_t size(int dim) const { return shape().size(dim); }
  int64_t numel() const { return shape().numel(); }
  DType dtype() const { return impl().dtype; }
  MemoryFormat memory_format() const { return impl().format; }
  bool is_channels_last() const { return impl().format == MemoryFormat::channels_last; }
  Device device() const { return impl().storage->device(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  std::string str() const;  // "Tensor[f32 cpu [2, 3]]"

  // ---- data access (pointers are device pointers for CUDA tensors)
  void* raw_data() const { return static_cast<char*>(impl().storage->data()) + impl().offset; }
  template <typename T>
  T* data() const {
    EMBER_CHECK(dtype() == dtype_of<T>::value, "tensor holds ", dtype_name(dtype()), ", asked for ",
                dtype_name(dtype_of<T>::value));
    return static_cast<T*>(raw_data());
  }
  // Copies all values to the host as doubles (any dtype, any device), in
  // logical order (a channels-last tensor's come out as [N, C, H, W]).
  std::vector<double> to_double_vector() const;
  // The single value of a one-element tensor, as double.
  double item() const;

  // ---- copies and views
  Tensor to(Device device) const;       // same tensor if already there
  // A host tensor's copy on `device`, uploaded while the work already queued
  // runs (memory.h's copy_from_host_ahead): not to be used until
  // finish_copies_ahead(device). The next training batch, fetched one step early.
  Tensor to_ahead(Device device) const;
  Tensor clone() const;                  // deep copy, same device and format, no autograd history
  Tensor detach() const;                 // shares storage, no autograd history
  // Shares storage; one dimension may be -1 via view_infer. A channels-last
  // tensor can be viewed only where both orders agree (C == 1 or H*W == 1);
  // the view is contiguous.
  Tensor view(const Shape& shape) const;
  Tensor view_infer(std::vector<int64_t> dims) const;
  // Shares storage: `shape` starting element_offset elements into this
  // tensor's bytes (a contiguous view, whatever this tensor's format).
  Tensor view_at(int64_t element_offset, const Shape& shape) const;
  // Shares storage and claims `format` for the same bytes (4-D for
  // channels_last): slices of a flat buffer that mirror a channels-last
  // parameter (the optimizer's masters and momentum) say so with this.
  Tensor reinterpret_format(MemoryFormat format) const;
  // Same shape and dtype, any devices. Formats may differ: then the values
  // are reordered on the host (slow; checkpoint loading, not training).
  void copy_from(const Tensor& src);
  // A host tensor in the contiguous format (this one if it already is).
  // Device tensors convert with ops::to_memory_format.
  Tensor contiguous_host() const;
  void zero_();                          // sets every byte to zero

  // ---- autograd
  bool requires_grad() const;  // leaf flag, or produced by a recorded op
  Tensor& set_requires_grad(bool flag);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& g) { impl_->grad = g.impl_; }
  // See TensorImpl::post_accumulate_grad_hook (an empty function removes it).
  void set_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook);
  // Back-propagates from this scalar (grad 1) or with an explicit gradient.
  void backward() const;
  void backward(const Tensor& grad_output) const;

  // ---- identity
  TensorImpl* get() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  TensorImpl& impl() const {
    EMBER_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace ember
