// cuda/cudnn/cublas_loader.h — cuBLAS opened on first use (dlopen), not
// linked: loading libcublas and libcublasLt costs ~150 MB of resident
// memory (their relocations), which every CPU-only run of a CUDA build
// would pay for a library it never calls. The handful of entry points the
// cuDNN table uses are resolved together the first time a GEMM runs on the
// GPU; cuBLAS's headers still give the types and enums.
#pragma once
#include <cublas_v2.h>

#include <string>

namespace ember::cuda {

struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasDgemm_v2) dgemm = nullptr;
  // (cublasGemmEx is overloaded in C++ by an inline wrapper taking the old
  // cudaDataType compute type: this is the library's own signature.)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

// The library's file name (libcublas.so.<major> of the headers built against).
std::string cublas_library_name();

// The resolved entry points; the first call opens the library. Throws
// ember::Error naming the library and the missing symbol (or dlerror's
// reason) when it cannot be loaded.
const CublasApi& cublas_api();

}  // namespace ember::cuda
