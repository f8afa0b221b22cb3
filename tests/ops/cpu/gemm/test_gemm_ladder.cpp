// tests/ops/cpu/gemm/test_gemm_ladder.cpp — the CPU GEMM ladder's own rungs
// (ops/cpu/gemm/gemm_ladder.h) against a double loop, on shapes that cross
// the cache-blocked rung's blocks (256 steps of k, 512 columns) and end in
// partial ones; and the ladder's list: in order, every kernel set it names
// a real one. (Its remaining rungs are ember's GEMM, which
// tests/ops/cpu/gemm/test_gemm_isa.cpp checks under every kernel set.)
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/cpu/gemm/gemm_isa.h"
#include "ops/cpu/gemm/gemm_ladder.h"

namespace ember {
namespace {

std::vector<float> ladder_values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = float(int(seed >> 20) % 2001 - 1000) / 1000.0f;
  }
  return v;
}

void check_rung(cpu::lab::GemmFn fn, int64_t M, int64_t N, int64_t K) {
  const auto A = ladder_values(size_t(M * K), 7), B = ladder_values(size_t(K * N), 11);
  std::vector<float> C(size_t(M * N), std::nanf(""));  // every element must be written
  fn(M, N, K, A.data(), B.data(), C.data());
  int bad = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        want += double(A[size_t(i * K + k)]) * double(B[size_t(k * N + j)]);
        mag += std::fabs(double(A[size_t(i * K + k)]) * double(B[size_t(k * N + j)]));
      }
      const double got = C[size_t(i * N + j)];
      if (!(std::fabs(got - want) <= 1e-6 * double(K) * (mag + 1)) && bad++ < 3)
        FAIL_CHECK("C[" << i << "," << j << "] = " << got << ", want " << want);
    }
  CHECK(bad == 0);
}

TEST_CASE("gemm ladder: the lab's rungs match a double loop, across and inside their blocks") {
  for (auto [name, fn] : {std::pair{"naive", &cpu::lab::gemm_naive}, std::pair{"loop-order", &cpu::lab::gemm_loop_order},
                          std::pair{"cache-blocked", &cpu::lab::gemm_cache_blocked}}) {
    CAPTURE(name);
    check_rung(fn, 1, 1, 1);
    check_rung(fn, 5, 7, 3);
    check_rung(fn, 9, 1100, 300);  // two column blocks and a partial one, a k block and a partial one
    check_rung(fn, 13, 512, 512);  // exactly one column block, exactly two k blocks
  }
}

TEST_CASE("gemm ladder: the rungs are listed in order and name real kernel sets") {
  const auto& rungs = cpu::lab::gemm_ladder();
  REQUIRE(rungs.size() >= 6);
  CHECK(std::string(rungs.front().name) == "naive");
  CHECK(rungs.back().all_threads);
  for (const auto& r : rungs) {
    CAPTURE(r.name);
    CHECK(bool(r.run));
    CHECK(std::string(r.change).size() > 10);
    const std::string isa = r.isa;
    if (!isa.empty() && isa != "best") CHECK_NOTHROW(cpu::parse_gemm_isa(isa));
  }
}

}  // namespace
}  // namespace ember
