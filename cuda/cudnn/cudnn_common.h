// cuda/cudnn/cudnn_common.h — what the cuDNN/cuBLAS paths share: status checks
// naming file and line, the per-process handles (bound to the caller's
// stream), RAII descriptors and the alpha/beta blend scalars. Host code only; built with nvcc when cuDNN
// is found (never in the emulator).
#pragma once
#include <cublas_v2.h>
#include <cudnn.h>

#include "cuda/cuda_check.h"
#include "engine/dtype.h"

#define CUDNN_CHECK(call)                                                                                   \
  do {                                                                                                      \
    const cudnnStatus_t ember_cudnn_status_ = (call);                                                       \
    if (ember_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                                        \
      ::ember::fail(::ember::cat(__FILE__, ":", __LINE__, ": ", #call, " failed: ",                         \
                                 cudnnGetErrorString(ember_cudnn_status_)));                                \
  } while (0)

#define CUBLAS_CHECK(call)                                                                                  \
  do {                                                                                                      \
    const cublasStatus_t ember_cublas_status_ = (call);                                                     \
    if (ember_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::ember::fail(::ember::cat(__FILE__, ":", __LINE__, ": ", #call, " failed: cuBLAS status ",           \
                                 int(ember_cublas_status_)));                                               \
  } while (0)

namespace ember::cuda {

// The process's cuDNN / cuBLAS handle, set to issue work on `stream`.
cudnnHandle_t cudnn_handle(cudaStream_t stream);
cublasHandle_t cublas_handle(cudaStream_t stream);

// The tensor type of dt: f32, f64, f16 (CUDNN_DATA_HALF) or bf16
// (CUDNN_DATA_BFLOAT16); errors otherwise.
cudnnDataType_t cudnn_type(DType dt, const char* kernel);
// The compute (accumulation) type for dt: double for f64, float for f32, f16
// and bf16 (mixed precision: 16-bit tensors, f32 arithmetic; cuDNN's
// "pseudo-half" / "pseudo-bfloat16" configurations). alpha/beta scalars are double for f64, float otherwise.
cudnnDataType_t cudnn_compute_type(DType dt);

// alpha = 1 and beta = 0 as cuDNN wants them: double for f64 data, float otherwise.
struct Blend {
  double d1 = 1.0, d0 = 0.0;
  float f1 = 1.0f, f0 = 0.0f;
  const void* one(DType dt) const { return dt == DType::f64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(DType dt) const { return dt == DType::f64 ? static_cast<const void*>(&d0) : &f0; }
};

// An RAII cuDNN descriptor: created by kCreate, destroyed by kDestroy, and
// usable wherever cuDNN takes the handle D.
template <typename D, cudnnStatus_t (*kCreate)(D*), cudnnStatus_t (*kDestroy)(D)>
class Descriptor {
 public:
  Descriptor() { CUDNN_CHECK(kCreate(&d_)); }
  ~Descriptor() { kDestroy(d_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  operator D() const { return d_; }

 protected:
  D d_ = nullptr;
};

class TensorDesc
    : public Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor> {
 public:
  // Dense, in format f (CUDNN_TENSOR_NHWC: channels-last); sizes are always n, c, h, w.
  TensorDesc& dense(cudnnTensorFormat_t f, cudnnDataType_t t, int64_t n, int64_t c, int64_t h, int64_t w) {
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(d_, f, t, int(n), int(c), int(h), int(w)));
    return *this;
  }
};

class FilterDesc
    : public Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor> {
 public:
  // Format f: CUDNN_TENSOR_NHWC is a [K, R, S, C] filter.
  FilterDesc& dense(cudnnTensorFormat_t f, cudnnDataType_t t, int64_t k, int64_t c, int64_t r, int64_t s) {
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(d_, t, f, int(k), int(c), int(r), int(s)));
    return *this;
  }
};

using ConvDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;

}  // namespace ember::cuda
