// cuda/cudnn/cudnn_handles.cu — the process's cuDNN and cuBLAS handles.
//
// Created on first use (creating them needs a GPU) and kept for the life of
// the process; every call rebinds the handle to the stream it is given.
// cuBLAS itself is opened on first use (cublas_loader.h). cuBLAS's math mode
// follows the TF32 switch (cuda_device.h's set_tf32, kept in
// cuda/kernels/gemm.cu for the native kernels too) on every call, and
// cudnn_conv.cu asks it when it picks an algorithm.
#include <mutex>

#include "cuda/cudnn/cublas_loader.h"
#include "cuda/cuda_device.h"
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
    return h;
  }();
  CUBLAS_CHECK(cublas_api().set_stream(handle, stream));
  // f32 GEMMs: TF32 tensor cores when allowed, else full f32 (CUBLAS_DEFAULT_MATH never uses TF32). 16-bit GEMMs
  // (cublasGemmEx with f32 compute) use tensor cores either way.
  CUBLAS_CHECK(cublas_api().set_math_mode(handle, tf32_enabled() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
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
