// tests/ops/cpu/gemm/test_gemm_isa.cpp — the CPU GEMM under every kernel set this CPU can
// run (ops/cpu/gemm/gemm_isa.h: AVX-512, AVX2 + FMA, portable), against a plain
// double-precision loop: shapes that are not multiples of any register tile,
// inner dimensions past one cache block, all four transpose combinations,
// alpha/beta, the dot-product path of filter gradients, and the run-time
// choice itself. (The op harness runs every op under every set as well.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/error.h"
#include "ops/cpu/gemm/gemm.h"
#include "ops/cpu/gemm/gemm_isa.h"

namespace ember {
namespace {

// Puts the best set back when a test case ends, whatever it switched to.
struct BestIsaAfter {
  ~BestIsaAfter() { cpu::set_gemm_isa(cpu::supported_gemm_isas().back()); }
};

template <typename T>
std::vector<T> random_values(size_t n, uint64_t seed) {
  std::vector<T> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = T(double(int64_t(s >> 33) % 2001 - 1000) / 1000.0);
  }
  return v;
}

struct Problem {
  bool ta, tb;
  int64_t M, N, K;
  double alpha, beta;
};

// C = alpha op(A) op(B) + beta C under the active set, against doubles.
template <typename T>
void check_problem(const Problem& p, bool parallel) {
  const int64_t lda = (p.ta ? p.M : p.K) + 3, ldb = (p.tb ? p.K : p.N) + 1, ldc = p.N + 2;
  const auto A = random_values<T>(size_t((p.ta ? p.K : p.M) * lda), 1);
  const auto B = random_values<T>(size_t((p.tb ? p.N : p.K) * ldb), 2);
  auto C = random_values<T>(size_t(p.M * ldc), 3);
  std::vector<double> want(C.begin(), C.end());
  for (int64_t i = 0; i < p.M; ++i)
    for (int64_t j = 0; j < p.N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < p.K; ++k)
        acc += double(p.ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]) *
               double(p.tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]);
      want[size_t(i * ldc + j)] = p.alpha * acc + p.beta * double(C[size_t(i * ldc + j)]);
    }
  auto mm = parallel ? cpu::gemm_parallel<T> : cpu::gemm_serial<T>;
  mm(p.ta, p.tb, p.M, p.N, p.K, T(p.alpha), A.data(), lda, B.data(), ldb, T(p.beta), C.data(), ldc);
  const double tol = (sizeof(T) == 4 ? 2e-5 : 1e-12) * std::sqrt(double(std::max<int64_t>(p.K, 1)));
  int bad = 0;
  for (int64_t i = 0; i < p.M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const double got = double(C[size_t(i * ldc + j)]), w = want[size_t(i * ldc + j)];
      if (std::fabs(got - w) > tol * (1 + std::fabs(w)) && bad++ < 3)
        FAIL_CHECK("C[" << i << "," << j << "] = " << got << ", want " << w);
    }
  CHECK(bad == 0);
}

const std::vector<Problem> kProblems = {
    {false, false, 1, 1, 1, 1.0, 0.0},       {false, false, 7, 5, 3, 1.0, 0.0},
    {false, false, 13, 37, 29, 0.5, 0.25},   {true, false, 19, 33, 260, 1.0, 1.0},
    {false, true, 9, 50, 300, 1.0, 0.0},     {true, true, 23, 17, 41, -1.0, 0.5},
    {false, false, 150, 70, 1030, 1.0, 0.0},  {false, true, 6, 6, 1000, 2.0, 1.0},  // dot-product path
    {false, false, 3, 3100, 20, 1.0, 0.0},   {false, false, 64, 96, 0, 1.0, 0.5},  // N past one NC block (3072); K = 0
};

TEST_CASE_TEMPLATE("gemm: every kernel set this CPU runs matches a double loop", T, float, double) {
  BestIsaAfter restore;
  const auto isas = cpu::supported_gemm_isas();
  REQUIRE(!isas.empty());
  CHECK(isas.front() == cpu::GemmIsa::portable);  // always available
  for (cpu::GemmIsa isa : isas) {
    REQUIRE(cpu::set_gemm_isa(isa));
    CAPTURE(cpu::gemm_isa_name(isa));
    CHECK(std::string(cpu::gemm_kernels<T>().isa) == cpu::gemm_isa_name(isa));
    CHECK(cpu::gemm_panel_width<T>() == cpu::gemm_kernels<T>().nr);
    for (const Problem& p : kProblems)
      for (bool parallel : {false, true}) {
        CAPTURE(p.M);
        CAPTURE(p.N);
        CAPTURE(p.K);
        CAPTURE(p.ta);
        CAPTURE(p.tb);
        CAPTURE(parallel);
        check_problem<T>(p, parallel);
      }
  }
}

TEST_CASE("gemm: the run-time choice is the best set the CPU supports, and names parse") {
  BestIsaAfter restore;
  const auto isas = cpu::supported_gemm_isas();
  for (cpu::GemmIsa isa : {cpu::GemmIsa::portable, cpu::GemmIsa::avx2, cpu::GemmIsa::avx512}) {
    CHECK(cpu::parse_gemm_isa(cpu::gemm_isa_name(isa)) == isa);
    const bool listed = std::find(isas.begin(), isas.end(), isa) != isas.end();
    CHECK(cpu::gemm_isa_supported(isa) == listed);
    CHECK(cpu::set_gemm_isa(isa) == listed);
  }
#if defined(__x86_64__)
  CHECK(cpu::gemm_isa_supported(cpu::GemmIsa::avx2) == bool(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")));
  CHECK(cpu::gemm_isa_supported(cpu::GemmIsa::avx512) == bool(__builtin_cpu_supports("avx512f")));
#endif
  CHECK_THROWS_WITH_AS(cpu::parse_gemm_isa("sse9"),
                       "EMBER_CPU_ISA=sse9: unknown instruction set (expected avx512, avx2 or portable)", Error);
  // Register tiles per set, as documented in the kernel files.
  cpu::set_gemm_isa(cpu::GemmIsa::portable);
  CHECK(cpu::gemm_kernels<float>().mr == 6);
  CHECK(cpu::gemm_kernels<float>().nr == 8);
  if (cpu::set_gemm_isa(cpu::GemmIsa::avx2)) CHECK(cpu::gemm_kernels<float>().nr == 16);
  if (cpu::set_gemm_isa(cpu::GemmIsa::avx512)) CHECK(cpu::gemm_kernels<float>().nr == 32);
}

}  // namespace
}  // namespace ember
