// cuda/cudnn/cudnn_handles.cu — the process's cuDNN and cuBLAS handles.
//
// Created on first use (creating them needs a GPU) and kept for the life of
// the process; every call rebinds the handle to the stream it is given.
// cuBLAS itself is opened on first use (cublas_loader.h).
#include <mutex>

#include "cuda/cudnn/cublas_loader.h"
#include "cuda/cudnn/cudnn_common.h"

namespace ember::cuda {

cudnnHandle_t cudnn_handle(cudaStream_t stream) {
  static cudnnHandle_t handle = [] {
    cudnnHandle_t h = nullptr;
    CUDNN_CHECK(cudnnCreate(&h));
    return h;
  }();
  CUDNN_CHECK(cudnnSetStream(handle, stream));
  return handle;
}

cublasHandle_t cublas_handle(cudaStream_t stream) {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    CUBLAS_CHECK(cublas_api().create(&h));
    // Full f32 precision: no TF32 tensor-core shortcuts for f32 GEMMs.
    CUBLAS_CHECK(cublas_api().set_math_mode(h, CUBLAS_DEFAULT_MATH));
    return h;
  }();
  CUBLAS_CHECK(cublas_api().set_stream(handle, stream));
  return handle;
}

cudnnDataType_t cudnn_type(DType dt, const char* kernel) {
  if (dt == DType::f32) return CUDNN_DATA_FLOAT;
  if (dt == DType::f64) return CUDNN_DATA_DOUBLE;
  if (dt == DType::f16) return CUDNN_DATA_HALF;
  if (dt == DType::bf16) return CUDNN_DATA_BFLOAT16;
  fail(cat("cudnn ", kernel, ": unsupported dtype ", dtype_name(dt)));
}

cudnnDataType_t cudnn_compute_type(DType dt) { return dt == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }

}  // namespace ember::cuda
