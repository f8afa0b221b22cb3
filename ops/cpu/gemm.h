// ops/cpu/gemm.h — the CPU matrix multiply used by the gemm kernel and by
// the convolutions (internal to ops/cpu).
//
// Row-major C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C, with the
// Goto/BLIS structure: B is packed into NR-column panels and A into MR-row
// panels per cache block, and a register-tiled micro-kernel (GCC vector
// extensions: AVX-512 with -march=native on this machine, AVX2/SSE pairs
// elsewhere) computes MR x NR tiles. gemm_serial runs on the calling thread
// (the convolutions parallelise over images); gemm_parallel splits N across
// the OpenMP threads.
#pragma once
#include <cstdint>

namespace ember::cpu {

template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                 const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

template <typename T>
void gemm_parallel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

}  // namespace ember::cpu
