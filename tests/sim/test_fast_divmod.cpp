// tests/sim/test_fast_divmod.cpp — cuda/kernels/fast_divmod.cuh against the
// hardware's `/` and `%`: every divisor up to 4096 and the powers of two and
// their neighbours up to 2^31, with exhaustive small numerators, the values
// next to multiples of the divisor, the largest numerators (2^31 - 1 and
// below) and a million random ones. The same code runs in the kernels.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/kernels/fast_divmod.cuh"

namespace {

using ember::cuda::FastDivmod;
using ember::cuda::IndexDivisor;

// The first numerator where FastDivmod(d) disagrees with / or %, or -1.
int64_t first_mismatch(uint32_t d, const std::vector<uint32_t>& numerators) {
  const FastDivmod f(d);
  for (uint32_t n : numerators) {
    uint32_t q, r;
    f.divmod(n, q, r);
    if (q != n / d || r != n % d) return int64_t(n);
  }
  return -1;
}

std::vector<uint32_t> numerators_for(uint32_t d, std::mt19937& rng) {
  std::vector<uint32_t> v;
  for (uint32_t n = 0; n < 3000; ++n) v.push_back(n);
  const uint32_t top = 0x7fffffffu;
  for (uint32_t n = top; n > top - 3000; --n) v.push_back(n);
  for (uint64_t k = 1; k < 64; ++k) {  // around multiples of d, spread over the range
    const uint64_t m = (uint64_t(top) / 64) * k / d * d;
    for (int64_t e = -2; e <= 2; ++e)
      if (int64_t(m) + e >= 0 && uint64_t(int64_t(m) + e) <= top) v.push_back(uint32_t(int64_t(m) + e));
  }
  std::uniform_int_distribution<uint32_t> any(0, top);
  for (int i = 0; i < 2000; ++i) v.push_back(any(rng));
  return v;
}

}  // namespace

TEST_CASE("fast_divmod: quotient and remainder by multiplication equal / and % for every n < 2^31") {
  std::mt19937 rng(7);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (int b = 12; b <= 31; ++b)
    for (int64_t e = -3; e <= 3; ++e) {
      const int64_t d = (int64_t(1) << b) + e;
      if (d >= 1 && d <= (int64_t(1) << 31)) divisors.push_back(uint32_t(d));
    }
  std::uniform_int_distribution<uint32_t> any_divisor(1, 0x7fffffffu);
  for (int i = 0; i < 200; ++i) divisors.push_back(any_divisor(rng));
  int64_t checked = 0;
  for (uint32_t d : divisors) {
    const auto numerators = numerators_for(d, rng);
    const int64_t bad = first_mismatch(d, numerators);
    if (bad >= 0) FAIL_CHECK("divisor " << d << ": wrong at n = " << bad);
    checked += int64_t(numerators.size());
  }
  MESSAGE(divisors.size() << " divisors, " << checked << " quotients checked");
  // A million random (n, d) pairs.
  std::uniform_int_distribution<uint32_t> any(0, 0x7fffffffu);
  int64_t wrong = 0;
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t d = any_divisor(rng) >> (i % 31), n = any(rng);
    const FastDivmod f(d == 0 ? 1 : d);
    uint32_t q, r;
    f.divmod(n, q, r);
    wrong += (q != n / f.divisor() || r != n % f.divisor());
  }
  CHECK(wrong == 0);
}

TEST_CASE("fast_divmod: IndexDivisor for 32- and 64-bit indices, and an empty dimension's 0 acts as 1") {
  for (int64_t d : {1, 3, 7, 49, 196, 3136, 50176}) {
    const IndexDivisor<int32_t> narrow(d);
    const IndexDivisor<int64_t> wide(d);
    CHECK(narrow.value() == d);
    CHECK(wide.value() == d);
    for (int64_t n : {int64_t(0), int64_t(1), d - 1, d, d + 1, int64_t(123456789), int64_t(0x7fffffff)}) {
      int32_t q32, r32;
      int64_t q64, r64;
      narrow.divmod(int32_t(n), q32, r32);
      wide.divmod(n, q64, r64);
      CHECK(q32 == n / d);
      CHECK(r32 == n % d);
      CHECK(q64 == n / d);
      CHECK(r64 == n % d);
    }
  }
  int64_t q, r;
  IndexDivisor<int64_t>(0).divmod(int64_t(1) << 40, q, r);  // past 2^31: only the 64-bit kind takes it
  CHECK(q == int64_t(1) << 40);
  CHECK(r == 0);
  CHECK(IndexDivisor<int32_t>(0).value() == 1);
}
