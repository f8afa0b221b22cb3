// engine/tensor.h — the dense, contiguous, row-major Tensor.
//
// A Tensor is a handle (shared_ptr) to a TensorImpl: a Storage, a byte offset
// into it, a Shape and a DType. Copying a Tensor copies the handle, never the
// data. view() shares storage; clone() and to() copy. Autograd state (the
// requires_grad flag, the accumulated .grad of a leaf, the grad_fn node that
// made a non-leaf) lives here too; see engine/autograd.h for the tape.
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

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t offset = 0;  // bytes
  Shape shape;
  DType dtype = DType::f32;
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
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
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
  // Copies all values to the host as doubles (any dtype, any device).
  std::vector<double> to_double_vector() const;
  // The single value of a one-element tensor, as double.
  double item() const;

  // ---- copies and views
  Tensor to(Device device) const;       // same tensor if already there
  // A host tensor's copy on `device`, uploaded while the work already queued
  // runs (memory.h's copy_from_host_ahead): not to be used until
  // finish_copies_ahead(device). The next training batch, fetched one step early.
  Tensor to_ahead(Device device) const;
  Tensor clone() const;                  // deep copy, same device, no autograd history
  Tensor detach() const;                 // shares storage, no autograd history
  Tensor view(const Shape& shape) const; // shares storage; one dimension may be -1 via view_infer
  Tensor view_infer(std::vector<int64_t> dims) const;
  // Shares storage: `shape` starting element_offset elements into this tensor.
  Tensor view_at(int64_t element_offset, const Shape& shape) const;
  void copy_from(const Tensor& src);     // same shape and dtype, any devices
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
