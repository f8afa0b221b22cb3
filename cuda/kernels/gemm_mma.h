// cuda/kernels/gemm_mma.h — the f16/bf16 (and TF32) GEMM on mma.sync (gemm_mma.cu), as
// gemm.cu calls it: whether it takes a product, and the product.
#pragma once
#include "ops/kernels.h"

namespace ember::cuda {

// 16-bit, or f32 while TF32 is allowed (cuda_device.h's set_tf32); the
// native tensor cores on; A and B 16-byte aligned with leading dimensions
// multiples of 16 bytes (8 values, 4 f32); C aligned to two values; M, N, K
// in 1..2^31.
bool gemm_mma_supports(DType dt, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, const void* B,
                       int64_t ldb, const void* C, int64_t ldc);
// The block tile: by the problem's size, or forced (tests, the kernel lab).
enum class MmaGemmTileChoice { automatic, large, small };
// C [M, N] = alpha * op(A) * op(B) + beta * C, as ops/kernels.h's gemm.
void gemm_mma(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
              int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, Stream stream,
              MmaGemmTileChoice tile = MmaGemmTileChoice::automatic);

}  // namespace ember::cuda
