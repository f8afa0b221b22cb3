// ops/cpu/gemm/gemm_ladder.cpp — the rungs of the CPU GEMM ladder
// (gemm_ladder.h). Each lab rung is the smallest change to the one before
// that buys speed; the comment above it says what and why.
#include "ops/cpu/gemm/gemm_ladder.h"

#include <algorithm>
#include <cstring>

#include "ops/cpu/gemm/gemm.h"

namespace ember::cpu::lab {

// Rung 1: the definition. C[i, j] is a dot product of row i of A and column
// j of B; walking down a column of B touches a new cache line (and, for
// N >= 1024, a new page) at every step of k.
void gemm_naive(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) sum += A[i * K + k] * B[k * N + j];
      C[i * N + j] = sum;
    }
}

// Rung 2: the same sums, loops in the order i, k, j. The inner loop adds
// A[i, k] times row k of B to row i of C: both rows are contiguous, so every
// cache line is used whole and the compiler turns the loop into vector
// instructions (at the build's baseline width).
void gemm_loop_order(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  for (int64_t i = 0; i < M; ++i) {
    float* __restrict c = C + i * N;
    std::fill(c, c + N, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float a = A[i * K + k];
      const float* __restrict b = B + k * N;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
    }
  }
}

// Rung 3: rung 2 within cache blocks. A block of kKB rows x kNB columns of B
// (512 KiB) stays in L2 while every row of A passes over it, and the
// kNB-wide piece of a row of C (2 KiB) stays in L1 across the kKB steps of
// k; rung 2 streamed all of B from memory once per row of C.
void gemm_cache_blocked(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  constexpr int64_t kKB = 256, kNB = 512;
  for (int64_t i = 0; i < M; ++i) std::fill(C + i * N, C + i * N + N, 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += kKB) {
    const int64_t k1 = std::min(K, k0 + kKB);
    for (int64_t j0 = 0; j0 < N; j0 += kNB) {
      const int64_t j1 = std::min(N, j0 + kNB);
      for (int64_t i = 0; i < M; ++i) {
        float* __restrict c = C + i * N;
        for (int64_t k = k0; k < k1; ++k) {
          const float a = A[i * K + k];
          const float* __restrict b = B + k * N;
          for (int64_t j = j0; j < j1; ++j) c[j] += a * b[j];
        }
      }
    }
  }
}

namespace {

// ember's GEMM on one thread, and on all of them (ops/cpu/gemm/gemm.cpp).
void ember_serial(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  gemm_serial<float>(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
}
void ember_parallel(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  gemm_parallel<float>(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
}

}  // namespace

const std::vector<GemmRung>& gemm_ladder() {
  static const std::vector<GemmRung> rungs = {
      {"naive", "the triple loop: a dot product per element, B read down its columns", "", false, &gemm_naive},
      {"loop-order", "loops i, k, j: rows of B and C read along, whole cache lines, vectorised", "", false,
       &gemm_loop_order},
      {"cache-blocked", "the same in 256 x 512 blocks of B kept in L2, pieces of C rows in L1",
       "", false, &gemm_cache_blocked},
      {"packed/portable",
       "A and B packed into panels, a 6x8 register tile of 16-byte vectors: every loaded value used 6-8 times",
       "portable", false, &ember_serial},
      {"packed/avx2", "the same with 32-byte vectors and FMA: a 6x16 tile", "avx2", false, &ember_serial},
      {"packed/avx512", "64-byte vectors: an 8x32 tile (16 accumulators, 2 FMA pipes busy)", "avx512", false,
       &ember_serial},
      {"threads", "the best kernel set, columns split across every core", "best", true,
       &ember_parallel},
  };
  return rungs;
}

}  // namespace ember::cpu::lab
