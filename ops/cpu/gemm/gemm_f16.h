// ops/cpu/gemm/gemm_f16.h — matrix products on f16 operands for the CPU kernels
// (internal to ops/cpu). The arithmetic is gemm.h's f32 GEMM; what these add
// is where the f16 -> f32 conversions happen, so that no operand makes an
// extra trip through memory. Each function is a template over the 16-bit
// type H (f16 or bf16: every "f16" below reads "H"):
//  - B is converted while it is packed into the GEMM's panels;
//  - C is computed in column chunks small enough to stay in cache, each
//    rounded once into the f16 output;
//  - an inner dimension too long for cache is converted chunk by chunk into
//    f32 buffers that the f32 GEMM accumulates from.
// Every result is accumulated in f32 and rounded to f16 once (ops/kernels.h).
#pragma once
#include <cstdint>

#include "engine/bfloat16.h"
#include "engine/half.h"

namespace ember::cpu {

// C = alpha * op(A) * op(B) + beta * C, all f16 (the gemm kernel's f16 path).
//   op(A): [M, K]   op(B): [K, N]   C: [M, N] (ldc)
template <typename H>
void gemm_f16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const H* A, int64_t lda,
              const H* B, int64_t ldb, float beta, H* C, int64_t ldc);

// C = op(A) * B in f32 arithmetic, with A f16 (weights) and B and C f16 or
// f32: A and B are converted while they are packed, and C is computed in
// column chunks whose f32 block stays in cache (rounded once when C is f16).
//   op(A): [M, K] (A is [K, M] when trans_a)   B: [K, N] (ldb)   C: [M, N] (ldc)
// parallel: the column chunks are spread over the threads (else the calling
// thread does all of them). Instantiated for (B, C) = (H, H), (f32, H)
// and (H, f32).
template <typename TB, typename TC, typename H>
void gemm_f16a_chunked(bool trans_a, int64_t M, int64_t N, int64_t K, const H* A, int64_t lda, const TB* B,
                       int64_t ldb, TC* C, int64_t ldc, bool parallel);

// acc += A * B^T in f32, from f16 A and B whose rows run along the inner
// dimension (the filter gradient of a pointwise convolution). Serial.
//   A: [M, K] (lda)   B: [N, K] (ldb)   acc: [M, N] f32 (ldacc)
template <typename H>
void gemm_nt_accumulate_f16(int64_t M, int64_t N, int64_t K, const H* A, int64_t lda, const H* B, int64_t ldb,
                            float* acc, int64_t ldacc);

}  // namespace ember::cpu
