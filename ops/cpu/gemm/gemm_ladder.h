// ops/cpu/gemm/gemm_ladder.h — the CPU GEMM as a ladder of versions, each one
// step from the one before, from the textbook triple loop to ember's own
// GEMM (ops/cpu/gemm/gemm.cpp): the CPU twin of cuda/lab/gemm_versions.cu.
// build/bench_gemm --ladder 1 checks every rung against a double-precision
// product and prints its GFLOP/s against this CPU's measured FMA peak;
// tests/ops/cpu/gemm/test_gemm_ladder.cpp checks the lab's own rungs.
//
// The first three rungs are written here, plainly, and compiled at the
// build's baseline instruction set (the compiler vectorises what it can).
// The rest are ember's real code under a chosen kernel set
// (ops/cpu/gemm/gemm_isa.h), so the ladder measures the product, not a copy.
#pragma once
#include <cstdint>
#include <vector>


namespace ember::cpu::lab {

// C = A * B, row major, C overwritten.
//   A: [M, K]   B: [K, N]   C: [M, N]
using GemmFn = void (*)(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C);

struct GemmRung {
  const char* name;
  const char* change;  // what this rung changes from the one before, and why it is faster
  // The kernel set it runs under: "portable", "avx2" or "avx512"
  // (parse_gemm_isa), "best" for the best this CPU has, "" for the lab's own
  // rungs (which use none).
  const char* isa;
  bool all_threads;  // false: one thread
  GemmFn run;
};

// The rungs, in order.
const std::vector<GemmRung>& gemm_ladder();

// The lab's own rungs, for the tests.
void gemm_naive(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C);
void gemm_loop_order(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C);
void gemm_cache_blocked(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C);

}  // namespace ember::cpu::lab
