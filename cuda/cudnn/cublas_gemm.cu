// cuda/cudnn/cublas_gemm.cu — the gemm kernel through cuBLAS.
//
// ember's matrices are row-major; cuBLAS's are column-major. A row-major
// [r, c] matrix with leading dimension ld is the column-major [c, r] matrix
// with the same ld, so row-major C = op(A) op(B) is computed as column-major
// C^T = op(B)^T op(A)^T: swap the operands and their transposes, and M and N.
// f16 and bf16: cublasGemmEx with 16-bit A/B/C (CUDA_R_16F / CUDA_R_16BF),
// f32 compute and f32 alpha/beta (CUBLAS_COMPUTE_32F), so products
// accumulate in f32 and C is rounded once; cuBLAS may use tensor cores for it.
#include "cuda/common.cuh"
#include "cuda/cudnn/cublas_loader.h"
#include "cuda/cudnn/cudnn_common.h"
#include "cuda/cudnn/cudnn_kernels.h"

namespace ember::cuda {

void cublas_gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
                 int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, Stream s) {
  if (M <= 0 || N <= 0) return;
  cublasHandle_t h = cublas_handle(as_cuda_stream(s));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (dt == DType::f32) {
    const float a = float(alpha), b = float(beta);
    CUBLAS_CHECK(cublas_api().sgemm(h, op_b, op_a, int(N), int(M), int(K), &a, static_cast<const float*>(B), int(ldb),
                             static_cast<const float*>(A), int(lda), &b, static_cast<float*>(C), int(ldc)));
    count_device_work(DeviceWork::library_call);
  } else if (dt == DType::f64) {
    CUBLAS_CHECK(cublas_api().dgemm(h, op_b, op_a, int(N), int(M), int(K), &alpha, static_cast<const double*>(B), int(ldb),
                             static_cast<const double*>(A), int(lda), &beta, static_cast<double*>(C), int(ldc)));
    count_device_work(DeviceWork::library_call);
  } else if (is_16bit_float(dt)) {
    const float a = float(alpha), b = float(beta);
    const cudaDataType t = dt == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
    CUBLAS_CHECK(cublas_api().gemm_ex(h, op_b, op_a, int(N), int(M), int(K), &a, B, t, int(ldb), A, t, int(lda), &b, C,
                                      t, int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    count_device_work(DeviceWork::library_call);
  } else {
    fail(cat("cublas gemm: unsupported dtype ", dtype_name(dt)));
  }
}

}  // namespace ember::cuda
