// cuda/cudnn/cudnn_common.h — what the cuDNN/cuBLAS paths share: status checks
// naming file and line, the per-process handles (bound to the caller's
// stream), and RAII descriptors. Host code only; built with nvcc when cuDNN
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

// The tensor type of dt: f32, f64 or f16 (CUDNN_DATA_HALF); errors otherwise.
cudnnDataType_t cudnn_type(DType dt, const char* kernel);
// The compute (accumulation) type for dt: double for f64, float for f32 and
// f16 (mixed precision: f16 tensors, f32 arithmetic; cuDNN's "pseudo-half"
// configuration). alpha/beta scalars are double for f64, float otherwise.
cudnnDataType_t cudnn_compute_type(DType dt);

class TensorDesc {
 public:
  TensorDesc() { CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  // Dense NCHW.
  TensorDesc& nchw(cudnnDataType_t t, int64_t n, int64_t c, int64_t h, int64_t w) {
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, t, int(n), int(c), int(h), int(w)));
    return *this;
  }
  operator cudnnTensorDescriptor_t() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDesc {
 public:
  FilterDesc() { CUDNN_CHECK(cudnnCreateFilterDescriptor(&d_)); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d_); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  FilterDesc& kcrs(cudnnDataType_t t, int64_t k, int64_t c, int64_t r, int64_t s) {
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(d_, t, CUDNN_TENSOR_NCHW, int(k), int(c), int(r), int(s)));
    return *this;
  }
  operator cudnnFilterDescriptor_t() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvDesc {
 public:
  ConvDesc() { CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d_)); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d_); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  operator cudnnConvolutionDescriptor_t() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

class PoolDesc {
 public:
  PoolDesc() { CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d_)); }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d_); }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
  operator cudnnPoolingDescriptor_t() const { return d_; }

 private:
  cudnnPoolingDescriptor_t d_ = nullptr;
};

}  // namespace ember::cuda
